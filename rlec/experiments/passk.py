"""Pass@k Training (arXiv 2508.10751, Fig. 7 / Table 1): pass@1 vs pass@k (k = 4) vs pass@k then pass@1.

The paper: under pass@1 training entropy collapses and pass@k stalls; pass@k training keeps entropy high and raises
pass@k; pass@k then pass@1 gives the best pass@1. The baseline is pass@1 GRPO (std-normalised advantage, verl's
symmetric clip 0.2 / 0.2), n = 16 responses per prompt so k = 4 < n, 4 updates per rollout (the paper's 128 / 32),
a small pool revisited many times. Premise gate: pass@1 training's probe-set entropy falls by >= 40% and its pass@k
on the low-q probe prompts stops rising; primary metric: held-out pass@4 - pass@1 (32 samples at T = 1). The switch
arm trains pass@k for the first half of the steps, then pass@1 from those weights (two launches; the optimizer state
restarts at the switch, because rlec refuses a resume that changes the advantage); its second launch continues the
first's data order (:func:`rlec.experiments.core.continued_rows`), so every arm sees the same prompts at each step.

The task has many right answers per prompt, as the paper's Maze and Enigmata (issue 57 item 5): ``pair_sum``
(:mod:`rlec.environments.pair_sum`: "Which two numbers from 0 to m add up to n?", every ordered pair in range is
right; m = 9 and 99, up to 10 and 100 right answers), a pool of :data:`TRAIN_ROWS` problems revisited many times
and 32 held-out problems per level (:mod:`rlec.environments.pool`, which prints and stores the distinct right answers
per prompt). The warm start (:data:`WARM_START`) is a short supervised pass with :data:`PAIR_SUM_SHARE` of its
examples on the task, each answered by one right pair drawn uniformly, so the base policy spreads over the right answers.
Measured (``docs/results/passk_task.json``, 16 samples at T = 1): level 0 base q 0.67, pass@16 1.00; level 1 base q
0.055, pass@4 0.19, pass@16 0.50, the regime the paper's premise needs (LAB.md: q 0.05-0.30, pass@16 >= 0.5).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from rlec.demo.warm_start import WarmStartConfig
from rlec.environments.pool import PoolConfig
from rlec.experiments import keys as K
from rlec.experiments.spec import (Arm, Curve, Experiment, HeldOut, PaperSetting, Premise, Primary, Probe, all_hold,
                                   common_paper_settings, falls_by, heldout_gap, metric_curve, pass_at, series_of,
                                   shared_settings, stops_rising)

K_PASS = 4
TASK = "pair_sum"  # many right answers per prompt (rlec.environments.pair_sum)
LEVELS = (0, 1)  # numbers of 0-9 (up to 10 right pairs) and 0-99 (up to 100)
TRAIN_ROWS = 256  # the pool: 800 steps x 16 prompts = 50 passes over it
PAIR_SUM_SHARE = 0.5
POOL = PoolConfig(TASK, LEVELS, test_per_difficulty=32)
# the warm start: one supervised pass (no fine-tuning stages: those teach RLEC's target restatement), binary prompts
# only and no "I don't know" (the task is plain correctness), half additions of 1-2 digits and half the task, each
# task example answered by one right pair drawn uniformly; 800 steps (the demo's 3,500 take ~45 min on 2 cores)
WARM_START = WarmStartConfig(digits=(1, 2), idk_rate=0.0, binary_fraction=1.0, steps=800, finetune=(),
                             pair_sum_share=PAIR_SUM_SHARE, pair_sum_digits=tuple(d + 1 for d in LEVELS))
QUICK_WARM_START = replace(WARM_START, steps=20)  # --quick: the same build path in seconds (the wiring, no skill)
DISTINCT_RIGHT = "distinct right answers"


def distinct_right(per_question: np.ndarray, keys: Sequence[tuple[str, str]], records: Sequence[dict[str, Any]]) -> np.ndarray:
    """Held-out figure: per question, how many distinct right answers its samples hold (the answer as the environment
    reads it, spaces removed: ``3 + 9`` and ``3+9`` are one, ``9 + 3`` another), graded by the environment's verifier."""
    from rlec.environments import get_environment
    from rlec.environments.base import Problem

    found: dict[tuple[str, str], set[str]] = {}
    for rec in records:
        key = (rec["source"], rec["question_id"])
        found.setdefault(key, set())
        problem = Problem.from_json(rec["ground_truth"])
        verdict = get_environment(problem.environment).verify(rec["response"], problem)
        if verdict.correct and verdict.answer is not None:
            found[key].add("".join(verdict.answer.split()))
    return np.array([float(len(found[k])) if k in found else np.nan for k in keys])

# the probe set: the pilot's probe prompts of the pool (no training prompt; base q measured, low_q = q < 0.3:
# rlec.experiments.pilot), each sampled 8 times and graded by the run's grader every 20 steps (rlec.verl_plugin.probe)
PROBE = Probe(pass_k=K_PASS)
PROBE_PASSK_LOW_Q = K.m_probe_pass_at(K_PASS, "low_q")  # rlec.probe_keys.pass_at_k_key(K_PASS, LOW_Q) (a test checks)
_PASSK = (f"{K.OVERLAY}=passk", f"{K.PASSK_K}={K_PASS}")
# what algorithm=passk sets besides rlec.passk.k: its estimator and verl's copy of its settings
_PASSK_KEYS = (K.PASSK, "algorithm.adv_estimator", "algorithm.passk")

EXPERIMENT = Experiment(
    name="passk",
    claim="pass@k training keeps entropy and held-out pass@k up; pass@k then pass@1 gives the best pass@1",
    paper="Pass@k Training, arXiv 2508.10751: Fig. 7 (entropy, pass@k per step), Table 1",
    arms=(
        Arm("pass1", "pass@1: GRPO, std-normalised advantage", ()),
        Arm("passk", f"pass@k advantage, k = {K_PASS} (rlec_passk)", _PASSK, keys=_PASSK_KEYS),
        Arm("passk_then_pass1", f"pass@k (k = {K_PASS}) for the first half, then pass@1", _PASSK, then=(), switch_fraction=0.5,
            keys=_PASSK_KEYS),
    ),
    # n = 16 responses (k = 4 < n); mini-batches of 4 prompts: 4 updates per rollout (the paper's 128 / 32);
    # 800 steps x 16 prompts over 256 rows = 50 passes
    settings=shared_settings(**{K.ROLLOUT_N: 16, K.MINI_BATCH: 4, "trainer.total_epochs": 50}),
    data="pool",
    pool=POOL,
    warm_start=WARM_START,
    quick_warm_start=QUICK_WARM_START,
    task=(f"{TASK} (many right answers: every ordered pair in [0, m] adding up to n; m = 9 and 99), a pool of {TRAIN_ROWS} "
          f"problems in the binary prompt, 32 held out per level; warm start: {WARM_START.steps} supervised steps, "
          f"{PAIR_SUM_SHARE:.0%} of the examples on the task (one right pair drawn uniformly), the rest 1-2 digit additions"),
    curves=(metric_curve(PROBE.metric, "probe-set entropy at T = 1 (nats)"),
            metric_curve(PROBE_PASSK_LOW_Q, f"probe pass@{K_PASS} on the low-q probe prompts"),
            metric_curve(K.M_ENTROPY, "batch entropy (nats, actor/entropy)"),
            Curve("passk/active_k", "k of the advantage (passk/active_k; pass@1 = 1)",
                  lambda run: [float(row.get(K.M_ACTIVE_K, 1.0)) for row in run.metrics]),
            metric_curve(K.M_CLIPFRAC, "clipped share (actor/pg_clipfrac)")),
    heldout=HeldOut(targets=(None,), n_samples=32, temperature=1.0,
                    figures={"pass@1": pass_at(1), "pass@4": pass_at(K_PASS), "pass@16": pass_at(16),
                             DISTINCT_RIGHT: distinct_right}),
    steps=800,
    quick_steps=4,  # 2 + 2 in the switch arm
    train_rows=TRAIN_ROWS,
    baseline="pass1",
    primary=Primary(f"held-out pass@{K_PASS} - pass@1 (32 samples at T = 1, mean over questions)",
                    heldout_gap("pass@4", "pass@1"), +1, requires=("held-out pass@4", "held-out pass@1"), effect=0.05,
                    sd_source="none measured (the old run kept no per-question values): re-estimate from the pilot"),
    premise=Premise(f"pass@1 training's probe-set entropy falls by >= 40% and its probe pass@{K_PASS} on low-q prompts "
                    "stops rising (last 20% of steps no higher than the 20% before)",
                    all_hold(falls_by(series_of(PROBE.metric), 0.4, "probe entropy"),
                             stops_rising(series_of(PROBE_PASSK_LOW_Q), f"probe pass@{K_PASS} (low q)"))),
    seeds=5,
    probe=PROBE,
    pilot="python -m rlec.experiments.pilot passk  # -> docs/results/pilot_passk.json: the training pool and the probe set",
    paper_settings=(
        *common_paper_settings("Pass@k Training (sec. 4)"),
        PaperSetting("clip ratio low / high", "0.2 / 0.28 (the paper's DAPO setting)", "0.2 / 0.2", (K.CLIP_LOW, K.CLIP_HIGH),
                     "verl's symmetric default: clip-higher counters the collapse the premise needs (DAPO 2503.14476)"),
        PaperSetting("pass@1 advantage divided by the group's std", "yes (GRPO)", "True", (K.NORM_BY_STD,)),
        PaperSetting("prompts / responses per step", "128 / 32", "16 / 16", (K.BATCH, K.ROLLOUT_N), "toy scale; k = 4 < n"),
        PaperSetting("PPO mini-batch (prompts): updates per rollout", "32: 4", "4", (K.MINI_BATCH,), "4 updates per rollout"),
        PaperSetting("k", "4 (Maze), 8", str(K_PASS)),
        PaperSetting("learning rate", "1e-6 (7B model)", "0.0001", (K.LR,), "a 2-layer toy"),
        PaperSetting("task", "Maze, Enigmata: several right answers",
                     f"{TASK}: two numbers from 0 to m adding up to n (m = 9: up to 10 right answers; m = 99: up to 100)",
                     note="a task a 2-layer toy can learn in its warm start; the pool's summary.json holds the distinct "
                          "right answers per prompt, the held-out figure those the samples found"),
        PaperSetting("pool", "Maze: 9-15 grids; Yue et al. ~56 epochs over 2,000 problems",
                     f"{TRAIN_ROWS} rows at levels {', '.join(map(str, LEVELS))} (50 passes)", note="a small pool revisited many times"),
    ),
)
