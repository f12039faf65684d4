"""What machine and installation a launch ran on: ``environment.json`` beside its ``git.txt``.

Two launches of the same commit and config can still part by floating-point rounding: on CPU, torch picks its
kernels by the processor's vector extensions, and the unpinned dependencies of an installation may differ.
``make run``'s goal check gave a coverage gap of 0.22 on one 2-core box and -0.05 on another from the same commit
(docs/local_run.md, row 9), and neither launch had recorded its machine. This record lets the next such difference be
traced to the box, the installation or the code.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

ENVIRONMENT_FILE = "environment.json"  # in the launch's folder, beside config.yaml and git.txt
# the processor flags that decide which CPU kernels torch and oneDNN run (a subset of /proc/cpuinfo's flags)
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_record(cpuinfo: str | None = None) -> dict[str, Any]:
    """The processor as Linux reports it: model name, family, model, stepping and :data:`KERNEL_FLAGS` present.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo`` (None: read it; empty fields where it cannot be read, e.g. macOS).

    Returns:
        ``{"model_name", "family", "model", "stepping", "kernel_flags", "logical_cpus"}``; a field absent from the
        text is ``None``.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    first: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if first:
                break  # the first processor's block is enough: a box's cores are alike
            continue
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    flags = set(first.get("flags", "").split())
    return {"model_name": first.get("model name") or platform.processor() or None,
            "family": first.get("cpu family"), "model": first.get("model"), "stepping": first.get("stepping"),
            "kernel_flags": [f for f in KERNEL_FLAGS if f in flags], "logical_cpus": os.cpu_count()}


def packages_record() -> dict[str, Any]:
    """Every installed distribution as ``name==version`` (sorted, lower-case names) and the SHA-256 of that list:
    two installations with the same hash hold the same versions."""
    pins = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}" for d in metadata.distributions()})
    return {"sha256": hashlib.sha256("\n".join(pins).encode()).hexdigest(), "count": len(pins), "packages": pins}


def environment_record() -> dict[str, Any]:
    """The launch's machine and installation: Python, the platform, :func:`cpu_record`, torch's version, the CPU
    kernel level it dispatches to and its intra-op threads (when torch imports), and :func:`packages_record`."""
    record: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": cpu_record()}
    try:
        import torch

        record["torch"] = {"version": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                           "threads": torch.get_num_threads()}
    except Exception as exc:  # noqa: BLE001 - a record of what is there; a broken torch is itself worth recording
        record["torch"] = {"error": f"{type(exc).__name__}: {exc}"}
    record["packages"] = packages_record()
    return record


def write_environment(folder: str | os.PathLike[str]) -> Path:
    """:func:`environment_record` as ``folder/environment.json``, atomically (:func:`rlec.io.atomic_write_text`)."""
    import json

    from rlec.io import atomic_write_text

    return atomic_write_text(Path(folder) / ENVIRONMENT_FILE, json.dumps(environment_record(), indent=1) + "\n")
