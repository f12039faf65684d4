"""rlec.machine: the launch's machine and installation record (environment.json)."""

from __future__ import annotations

import json

from rlec.machine import ENVIRONMENT_FILE, cpu_record, packages_record, write_environment

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 fma f16c

processor\t: 1
model name\t: another core's line, not read
"""


def test_cpu_record_reads_the_first_processor_and_the_kernel_flags() -> None:
    cpu = cpu_record(CPUINFO)
    assert (cpu["model_name"], cpu["family"], cpu["model"], cpu["stepping"]) == ("AMD EPYC 7B13", "25", "1", "1")
    assert cpu["kernel_flags"] == ["sse4_2", "avx", "avx2", "fma", "f16c"]  # no AVX-512: other kernels than a Zen 4's


def test_cpu_record_without_cpuinfo_has_empty_fields() -> None:
    cpu = cpu_record("")
    assert cpu["family"] is None and cpu["kernel_flags"] == []


def test_packages_record_names_the_installed_versions_and_hashes_them() -> None:
    rec = packages_record()
    assert "verl==0.9.1" in rec["packages"] and rec["count"] == len(rec["packages"])
    assert rec == packages_record()  # the same installation, the same hash
    assert len(rec["sha256"]) == 64


def test_write_environment_writes_one_json_file(tmp_path) -> None:
    path = write_environment(tmp_path / "launch")
    assert path.name == ENVIRONMENT_FILE
    env = json.loads(path.read_text())
    assert env["torch"]["cpu_capability"] and env["torch"]["version"].startswith("2.13.0")
    assert env["packages"]["sha256"] == packages_record()["sha256"]
    assert [p.name for p in (tmp_path / "launch").iterdir()] == [ENVIRONMENT_FILE]  # no temporary file left
