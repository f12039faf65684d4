"""benchmarks/throughput.py: a 1-repeat smoke run of every measured section on the tiny model, the
output schema (JSON, Markdown, PNG), --compare, layout parsing and bad input."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import throughput  # noqa: E402
import throughput_report as report  # noqa: E402
from throughput_sections import parse_layout  # noqa: E402

pytestmark = pytest.mark.minutes(1.5)  # tests/conftest.py: the longest modules start first

SMOKE = ["--layouts", "tp1", "--window-layouts", "tp1", "--batch", "2", "--prompt-len", "24", "--response-len", "8",
         "--micro-batch-size", "1", "--warmup", "0", "--repeats", "1", "--rollout-prompts", "2", "--rollout-new-tokens", "4",
         "--rollout-warmup", "0", "--rollout-repeats", "1", "--reward-n", "30", "--reward-warmup", "0", "--reward-repeats", "1"]
SUMMARY_KEYS = {"median", "min", "max", "spread", "values"}


@pytest.fixture(scope="module")
def smoke(tiny_moe_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    out = tmp_path_factory.mktemp("throughput")
    argv = ["--profile", "cpu", "--sections", "update,rollout,reward", "--model", str(tiny_moe_dir), "--out", str(out),
            "--name", "smoke", *SMOKE]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "smoke.json").read_text()), out, proc.stdout


@pytest.mark.slow  # the shared smoke run: one benchmark process on the tiny model (~19 CPU-s)
def test_smoke_update_rows(smoke) -> None:
    result, _, _ = smoke
    rows = result["sections"]["update"]["rows"]
    assert [(r["layout"], r["logits"]) for r in rows] == [("tp1", "full"), ("tp1", "window")]
    for r in rows:
        assert r["processes"] == 1 and r["precision"] == "fp32" and r["layer_spec"] == "local"
        for key in ("logprob_s", "fwd_bwd_s", "optimizer_s", "update_s"):
            assert set(r[key]) == SUMMARY_KEYS and len(r[key]["values"]) == 1 and r[key]["median"] > 0
        assert r["tokens_per_step"] == 2 * 32
        assert r["tokens_per_s"] == pytest.approx(64 / r["update_s"]["median"])
        assert r["update_applied"] and r["grad_norm"] > 0 and r["peak_memory_bytes"] > 0
        assert r["mfu"] is None and r["achieved_gflops_per_device"] > 0  # no MFU on CPU
    full, window = rows
    assert full["executed_flops_per_step"] == full["model_flops_per_step"]  # verl's count
    assert window["executed_flops_per_step"] < full["executed_flops_per_step"]  # output layer on 8 of 32 positions
    launch = result["sections"]["update"]["launches"][0]
    assert launch["world"] == 1 and launch["layouts"] == ["tp1"]


@pytest.mark.slow  # the shared smoke run: one benchmark process on the tiny model (~19 CPU-s)
def test_smoke_rollout_and_reward_rows(smoke) -> None:
    result, _, _ = smoke
    (roll,) = result["sections"]["rollout"]["rows"]
    assert roll["engine"] == "transformers" and roll["version"] and roll["device"] == "cpu"
    assert roll["prompts"] == 2 and 2 <= roll["response_tokens"][0] <= 8
    assert roll["tokens_per_s"] == pytest.approx(roll["response_tokens"][0] / roll["seconds"]["median"])
    (rew,) = result["sections"]["reward"]["rows"]
    assert rew["responses"] == 30 and rew["responses_per_s"] > 0 and rew["agreement_3way"] == 1.0


@pytest.mark.slow  # the shared smoke run: one benchmark process on the tiny model (~19 CPU-s)
def test_schema_environment_and_files(smoke) -> None:
    result, out, stdout = smoke
    assert result["schema"] == throughput.SCHEMA and result["profile"] == "cpu"
    env = result["environment"]
    assert env["cores"] >= 1 and len(env["loadavg_start"]) == 3 and env["gpu"] is None
    assert env["versions"]["torch"] and env["versions"]["megatron-core"] and env["versions"]["verl"]
    assert env["env"]["OMP_WAIT_POLICY"] == "PASSIVE"
    for sec in result["sections"].values():
        assert "error" not in sec and sec["seconds"] > 0 and len(sec["loadavg_1min"]) == 2
    assert result["settings"]["repeats"] == 1 and result["settings"]["batch"] == 2
    assert (out / "smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "smoke.md").read_text().strip() == stdout.strip()
    assert "| tp1 | 1 | fp32 | window | 64 |" in stdout and "MFU is not meaningful on CPU" in stdout


@pytest.mark.slow  # the shared smoke run: one benchmark process on the tiny model (~19 CPU-s)
def test_compare_prints_ratios(smoke) -> None:
    result, _, _ = smoke
    baseline = copy.deepcopy(result)
    for r in baseline["sections"]["update"]["rows"]:
        r["tokens_per_s"] /= 2
    del baseline["sections"]["reward"]
    text = report.compare(result, baseline)
    assert "| update tp1 fp32 full tokens/s |" in text and "| 2.00x |" in text
    assert "| rollout transformers tokens/s |" in text and "| 1.00x |" in text
    assert "reward rlec.grading.grade_batch responses/s" in text and "only in one run" in text


def test_compare_formats_a_figure_of_one_run_only() -> None:
    """Figures only one run has print like the others (one decimal), not as raw floats."""
    env = {"loadavg_start": [1.0, 1.0, 1.0], "cpu": "test cpu"}
    now = {"environment": env, "sections": {"reward": {"rows": [{"grader": "rlec", "responses_per_s": 271.68550911451354}]}}}
    base = {"environment": env, "created": "then", "sections": {"rollout": {"rows": [{"engine": "hf", "tokens_per_s": 9.87654321}]}}}
    text = report.compare(now, base)
    assert "| reward rlec responses/s | 271.7 | - | only in one run |" in text
    assert "| rollout hf tokens/s | - | 9.9 | only in one run |" in text and "271.68" not in text


def test_projection_section_and_assumption_flags(tmp_path: Path, capsys) -> None:
    code = throughput.main(["--sections", "projection", "--assume-update-mfu", "0.4", "--out", str(tmp_path), "--name", "p"])
    assert code == 0
    sec = json.loads((tmp_path / "p.json").read_text())["sections"]["projection"]
    assert sec["assumptions"]["update_mfu"] == 0.4
    assert {r["layout"] for r in sec["rows"]} >= {"qwen3_30b_a3b_4x8", "qwen3_30b_a3b_1x8"}
    text = capsys.readouterr().out
    assert "update_mfu=0.4" in text and "Anchors (published, not measured here)" in text and "1102" in text


def test_layout_names_resolve_to_world_sizes() -> None:
    assert parse_layout("tp1")["world"] == 1
    assert (parse_layout("ep2")["world"], parse_layout("tp2")["world"], parse_layout("tp2ep2")["world"]) == (2, 2, 4)
    assert parse_layout("tp2ep2etp1")["world"] == 2 and parse_layout("TP2PP2")["world"] == 4
    for bad in ("", "dp2", "tp", "ep2tp2"):
        with pytest.raises(ValueError, match="expected e.g. tp1, tp2"):
            parse_layout(bad)


def test_bad_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        throughput.parse_args(["--precisions", "bf16"])  # CPU: only fp32
    with pytest.raises(SystemExit):
        throughput.parse_args(["--sections", "update,training"])
    args = throughput.parse_args(["--model", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match=re.escape(f"--model {tmp_path / 'config.json'}: missing")):
        throughput.resolve_model(args)


@pytest.mark.slow
def test_two_process_layouts_share_one_launch(tiny_moe_dir: Path, tmp_path: Path) -> None:
    """EP2 and TP2 in one 2-process torchrun: parallel state rebuilt between layouts; the logit
    window is refused under sequence parallel (TP 2) and applied at EP 2."""
    argv = ["--sections", "update", "--model", str(tiny_moe_dir), "--out", str(tmp_path), "--name", "two", *SMOKE,
            "--layouts", "ep2,tp2", "--window-layouts", "all"]
    assert throughput.main(argv) == 0
    rows = json.loads((tmp_path / "two.json").read_text())["sections"]["update"]["rows"]
    got = {(r["layout"], r["logits"]): r for r in rows}
    assert set(got) == {("ep2", "full"), ("ep2", "window"), ("tp2", "full"), ("tp2", "window")}
    assert "sequence parallel" in got[("tp2", "window")]["skipped"]
    assert got[("tp2", "full")]["sequence_parallel"] and got[("ep2", "window")]["tokens_per_s"] > 0
    assert all(r["processes"] == 2 for r in rows)
    assert got[("tp2", "full")]["tokens_per_s_per_device"] == pytest.approx(got[("tp2", "full")]["tokens_per_s"] / 2)


@pytest.mark.gpu
@pytest.mark.slow  # minutes of its own: outside tools/gpu_smoke.sh's `-m "gpu and not slow"` selection
def test_gpu_profile_runs(tmp_path: Path) -> None:
    """The whole --profile gpu run (< 8 min on one H200): bf16 update with a real MFU."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--profile", "gpu", "--out", str(tmp_path),
                           "--name", "gpu", "--models-dir", str(tmp_path / "models")], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    bf16 = [r for r in result["sections"]["update"]["rows"] if r.get("precision") == "bf16" and r.get("logits") == "full"]
    assert bf16 and 0 < bf16[0]["mfu"] < 1
    assert result["sections"]["rollout"]["rows"][0]["device"] != "cpu"


def test_layer_spec_flag_reaches_the_update_spec_and_fp8_needs_te() -> None:
    """--spec local measures a GPU node without Transformer Engine (tools/gpu_smoke.sh --offline); FP8 needs TE."""
    assert throughput.parse_args([]).spec == "auto"
    assert throughput.parse_args(["--spec", "local", "--precisions", "fp32"]).spec == "local"
    with pytest.raises(SystemExit):
        throughput.parse_args(["--spec", "local", "--precisions", "bf16,fp8"])
    source = (ROOT / "benchmarks" / "throughput_sections.py").read_text()
    assert '"use_te": {"auto": None, "te": True, "local": False}' in source
    assert 'use_te=spec.get("use_te")' in (ROOT / "benchmarks" / "throughput_update.py").read_text()
