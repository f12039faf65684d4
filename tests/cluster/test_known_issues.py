"""DRY_RUN's guards from public reports of the same stack (issue 26, "cluster path"): Blackwell GPUs
with an MoE model (verl#7978), Megatron's CPU optimizer with resume (verl#6690, Megatron-LM#1842),
and resuming checkpoints under another layout (both layouts named)."""

from __future__ import annotations

import json

import pytest

from rlec.cluster.config_check import layout_name, main, run_checks
from rlec.rules.resume import LAYOUT_RECORD, layout_change_findings, record_layout
from rlec.run_config import RunConfig

CPU_OFFLOAD = "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=true"


def messages(findings, level="error"):
    return [str(f) for f in findings if f.level == level]


@pytest.mark.parametrize("arch", ["sm_100", "sm_103", "10.0", "sm_120"])
def test_blackwell_with_the_moe_model_is_refused_citing_verl_7978(compose_rlec, arch):
    findings, _, _ = run_checks(RunConfig(compose_rlec("layout=qwen3_30b_a3b_1x8", f"rlec.check.gpu_arch={arch}")), check_paths=False)
    (error,) = [e for e in messages(findings) if "rlec.check.gpu_arch" in e]
    assert f"{arch} is a Blackwell GPU: verl#7978" in error and "not in verl 0.9.1" in error


@pytest.mark.parametrize("arch", ["sm_90", "9.0", "sm_89"])
def test_hopper_and_older_pass_and_the_default_is_hopper(compose_rlec, arch):
    assert compose_rlec().rlec.check.gpu_arch == "sm_90"
    findings, _, _ = run_checks(RunConfig(compose_rlec("layout=qwen3_30b_a3b_1x8", f"rlec.check.gpu_arch={arch}")), check_paths=False)
    assert messages(findings) == []


def test_an_unreadable_gpu_arch_is_refused(compose_rlec):
    findings, _, _ = run_checks(RunConfig(compose_rlec("rlec.check.gpu_arch=blackwell")), check_paths=False)
    assert any("'blackwell' is not a compute capability" in e for e in messages(findings))


def test_megatron_cpu_optimizer_with_resume_is_refused_under_expert_parallel_citing_both_reports(compose_rlec):
    findings, _, _ = run_checks(RunConfig(compose_rlec("layout=qwen3_30b_a3b_1x8", CPU_OFFLOAD)), check_paths=False)
    (error,) = [e for e in messages(findings) if "optimizer_cpu_offload" in e and e.startswith("ERROR [actor")]
    assert "true with trainer.resume_mode=auto and expert parallel 8: verl#6690" in error and "Megatron-LM#1842" in error


def test_megatron_cpu_optimizer_without_resume_is_a_warning(compose_rlec):
    findings, _, _ = run_checks(RunConfig(compose_rlec("layout=qwen3_30b_a3b_1x8", CPU_OFFLOAD, "trainer.resume_mode=disable")),
                                check_paths=False)
    assert not any("verl#6690" in e for e in messages(findings))
    assert any("checkpoints cannot be resumed (verl#6690" in w for w in messages(findings, "warning"))


def test_the_1x8_layout_no_longer_advises_the_cpu_optimizer(repo_root):
    header = (repo_root / "megatron_configs/layout/qwen3_30b_a3b_1x8.yaml").read_text()
    assert "optimizer_cpu_offload=true" not in header and "verl#6690" in header


def test_layout_name_is_the_last_override_or_the_default():
    assert layout_name(["layout=tiny_1gpu", "precision=fp8", "layout=qwen3_30b_a3b_1x8"]) == "qwen3_30b_a3b_1x8"
    assert layout_name([]) == "qwen3_30b_a3b_4x8"


def test_resuming_under_another_layout_is_refused_naming_both(compose_rlec, tmp_path):
    folder = tmp_path / "ckpt"
    run = f"trainer.default_local_dir={folder}"
    four = compose_rlec("layout=qwen3_30b_a3b_4x8", run)
    assert layout_change_findings(four, "qwen3_30b_a3b_4x8") == []  # nothing to resume yet
    record_layout(four, "qwen3_30b_a3b_4x8")
    assert json.loads((folder / LAYOUT_RECORD).read_text())["world_size"] == 32
    (folder / "latest_checkpointed_iteration.txt").write_text("20")
    assert layout_change_findings(four, "qwen3_30b_a3b_4x8") == []  # the same layout resumes
    one = compose_rlec("layout=qwen3_30b_a3b_1x8", run)
    (error,) = layout_change_findings(one, "qwen3_30b_a3b_1x8")
    assert error.level == "error" and error.key == "trainer.default_local_dir"
    assert (f"{folder} holds checkpoints written under layout qwen3_30b_a3b_4x8 (32 GPUs: TP 4 PP 1 CP 1 EP 8 ETP 1, "
            "distributed optimizer); this launch uses qwen3_30b_a3b_1x8 (8 GPUs: TP 4 PP 1 CP 1 EP 8 ETP 1, distributed "
            "optimizer) (world_size differ)") in error.message
    assert layout_change_findings(compose_rlec("layout=qwen3_30b_a3b_1x8", run, "trainer.resume_mode=disable"), "x") == []
    (folder / LAYOUT_RECORD).unlink()
    (warning,) = layout_change_findings(one, "qwen3_30b_a3b_1x8")
    assert warning.level == "warning" and "the layout they were written under is unknown" in warning.message
    for text, cause in (("{not json", "unreadable (Expecting"), ("[32]", "expected a JSON object (the checkpoints' layout), "
                                                                    "got a JSON list")):
        (folder / LAYOUT_RECORD).write_text(text)  # a damaged record is refused naming the file, never a crash
        (error,) = layout_change_findings(one, "qwen3_30b_a3b_1x8")
        assert error.level == "error" and f"{folder / LAYOUT_RECORD}: {cause}" in error.message, error.message


def test_the_launch_check_records_the_layout_only_when_it_passes_and_refuses_a_change(tmp_path, capsys):
    folder = tmp_path / "ckpt"
    base = ["--skip-path-checks", "--record-layout", f"trainer.default_local_dir={folder}"]
    assert main(["layout=tiny_1gpu", *base, "rlec.check.gpu_arch=sm_100"]) == 1  # refused: nothing recorded
    assert not folder.exists()
    assert main(["layout=tiny_1gpu", *base]) == 0
    assert f"layout tiny_1gpu recorded in {folder / LAYOUT_RECORD}" in capsys.readouterr().err
    (folder / "latest_checkpointed_iteration.txt").write_text("3")
    before = (folder / LAYOUT_RECORD).read_text()
    assert main(["layout=tiny_1gpu", *base, "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.n=4"]) == 1
    err = capsys.readouterr().err
    assert "holds checkpoints written under layout tiny_1gpu (1 GPUs" in err and "this launch uses tiny_1gpu (2 GPUs" in err
    assert (folder / LAYOUT_RECORD).read_text() == before  # the refused launch wrote nothing
