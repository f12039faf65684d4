"""benchmarks/step.py's plain-PyTorch half on a tiny model (no verl launch), its table, bad settings refused."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def bench(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import step

    return step


def test_the_plain_step_samples_scores_and_updates_with_the_samplers_log_probs_recomputed(bench, tiny_dense_dir):
    """Two steps of 2 prompts x 2 responses x <= 4 tokens: every phase timed, and the old log-probs recomputed by a
    forward equal the sampler's own (on-policy, the same weights and temperature, fp32): what lets verl's trainer
    take them from the rollout (an off-by-one position or a temperature left out gives differences of order 1)."""
    settings = bench.StepSettings(batch=2, n=2, max_response=4, mini_batch=1, micro_batch=2, log_prob_micro_batch=3,
                                  temperature=0.7, lr=1e-3)
    prompts = [[151644, 872, 198, 16, 10, 16, 151645, 198, 151644, 77091, 198], [151644, 872, 198, 17, 151645, 198]]
    result = bench.plain_step(tiny_dense_dir, prompts, settings, steps=2)
    assert len(result["steps"]) == 2
    for times in result["steps"]:
        assert set(times) == set(bench.PLAIN_PHASES) and all(v > 0 for v in times.values())
        assert times["step"] >= times["gen"] + times["old_log_prob"] + times["update_actor"]
    assert result["sampler_logprob_max_diff"] < 1e-4
    with pytest.raises(ValueError, match="1 prompts for batch 2"):
        bench.plain_step(tiny_dense_dir, prompts[:1], settings)


def test_the_first_prompts_are_rendered_with_the_chat_template(bench, sample_data_dir, qwen_tokenizer):
    ids = bench.read_prompts(sample_data_dir / "train.parquet", qwen_tokenizer, 2)
    text = qwen_tokenizer.decode(ids[0])
    assert len(ids) == 2 and text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(ValueError, match="fewer than --batch=100000"):
        bench.read_prompts(sample_data_dir / "train.parquet", qwen_tokenizer, 100000)


def test_settings_become_verls_overrides_and_bad_ones_are_refused(bench, capsys):
    s = bench.PRESETS["demo"]
    assert "data.train_batch_size=8" in s.overrides() and "actor_rollout_ref.rollout.n=8" in s.overrides()
    assert "actor_rollout_ref.rollout.top_k=-1" in s.overrides()
    assert bench.main(["--preset", "demo", "--mini-batch", "3", "--plain-only"]) == 2
    assert "--mini-batch=3 must divide --batch=8" in capsys.readouterr().err


def test_the_table_sets_verls_phases_beside_plain_pytorchs(bench):
    plain = {"steps": [{"gen": 2.0, "old_log_prob": 1.0, "update_actor": 3.0, "step": 6.0},
                       {"gen": 1.0, "old_log_prob": 0.5, "update_actor": 1.5, "step": 3.0}], "sampler_logprob_max_diff": 1e-7}
    verl = {"rc": 0, "total_s": 100.0, "first_row_s": 60.0, "launch_to_first_step_s": 40.0, "rows": [
        {"step": 1, "timing_s/gen": 9.0, "timing_s/old_log_prob": 3.0, "timing_s/step": 20.0},
        {"step": 2, "timing_s/gen": 2.0, "timing_s/old_log_prob": 1.0, "timing_s/step": 5.0},
        {"step": 3, "timing_s/gen": 3.0, "timing_s/old_log_prob": 2.0, "timing_s/step": 7.0, "rollout_corr/kl": -3e-9},
        {"step": 4, "timing_s/gen": 2.0, "timing_s/old_log_prob": 1.0, "timing_s/step": 9.0}]}
    text = bench.table({"model": "m", "settings": {}, "load": [[1.0, 1.0, 1.0]], "nice": 15, "plain": plain, "verl": verl})
    # steady: steps 2-3 (the last saves), median; plain: steps after the first
    assert "| gen | 9.00 | 2.50 | 1.00 |" in text and "| step | 20.00 | 6.00 | 3.00 |" in text
    assert "verl / plain PyTorch: 2.00x" in text and "launch to step 1's start 40.0 s" in text
    assert "largest over the steps: rollout_corr/kl 3.00e-09" in text and "| old_log_prob | 3.00 | 1.50 | 0.50 |" in text
    verl["rows"][2].pop("rollout_corr/kl")
    assert "not logged (bypass mode" in bench.table({"model": "m", "settings": {}, "load": [], "verl": verl})
    # bypass mode (no old_log_prob phase): verl is compared with plain PyTorch's step less its old-log-prob pass, 6 / 2.5
    for row in verl["rows"]:
        row.pop("timing_s/old_log_prob")
    text = bench.table({"model": "m", "settings": {}, "load": [], "nice": 15, "plain": plain, "verl": verl})
    assert "verl / plain PyTorch: 2.40x (plain without its old_log_prob pass, as verl's bypass mode)" in text


def test_the_plain_only_run_hands_its_figures_to_the_parent(bench, tiny_dense_dir, sample_data_dir, capsys):
    """``--plain-only --json`` (what the side-by-side run starts at Ray's niceness): one JSON line the parent reads."""
    argv = ["--preset", "demo", "--plain-only", "--json", "--model", str(tiny_dense_dir), "--train",
            str(sample_data_dir / "train.parquet"), "--batch", "1", "--n", "2", "--max-response", "2", "--mini-batch", "1",
            "--plain-steps", "1"]
    assert bench.main(argv) == 0
    plain = bench.plain_from_child(capsys.readouterr().out)
    assert len(plain["steps"]) == 1 and set(plain["steps"][0]) == set(bench.PLAIN_PHASES)
