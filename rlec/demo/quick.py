"""``make run``'s default task: RLEC on the demo's additions from a shipped Qwen3-MoE warm start, in minutes.

The launcher (``tools/run_megatron_rlec.sh`` without CUDA, ``TASK=addition``, the default) trains, through
verl's trainer, the demo's warm start (:mod:`rlec.demo.warm_start`, shipped compact weights, no
training) upcycled to the Qwen3-MoE architecture (:func:`rlec.models.upcycle_to_moe`: :data:`EXPERTS`
copies of each MLP, top-2 routing, the same function as the dense model) with the compact tokenizer
(:mod:`rlec.compact_vocab`), on the demo's training rows (targets 0.1 and 0.8), then evaluates it
greedily across the target grid and checks the demo's goal on it (``rlec.cpu.eval.goal_check``:
coverage at p = 0.1 at least 0.3 above coverage at p = 0.8, separated intervals). Measured (docs/local_run.md,
"What the default run shows", every trial with its settings): these settings tie abstention to the target on 2-digit
sums (gap 0.22 [0.12, 0.33]) but miss the goal; b = 1 from the first step learned abstention by difficulty only
(gap -0.03 at 30 and 40 steps). ``make demo`` (:mod:`rlec.demo.pipeline`) is the fuller version: the dense model, 80
steps at lr 1e-4 (gap 0.30 [0.22, 0.38]), 120 evaluation questions and the warm start evaluated too.

    python -m rlec.demo.quick --model DIR --data DIR   # build the warm start and the data (each when missing)
    python -m rlec.demo.quick --overrides              # the run's settings, one key=value a line (the launcher reads them)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from rlec.demo.pipeline import DEMO_SETTINGS, HIGH_TARGET, LOW_TARGET

EXPERTS = 4  # experts per layer of the upcycled warm start (top-2 routing)
STEPS = 40  # RLEC steps (STEPS=... overrides)
EVAL_QUESTIONS = 60  # held-out questions of the final evaluation, 20 per operand digit count
# the demo's settings (DEMO_SETTINGS: 16 prompts x 8 responses, T = 1, no top-k, b 0 -> 1 over the run: the recipe's
# schedule), half the demo's 80 steps at twice its learning rate, checkpoints only at the end, the goal check after the
# final evaluation. Why the ramp: at b near 0 the stakes at p = 0.8 are +1 / -4 against +1 / -0.11 at p = 0.1, the
# contrast that ties abstention to the target; with b = 1 from the first step (the previous default) 30 and 40 steps
# learned abstention by difficulty only (gap -0.03). Why 40 steps: what fits 5 minutes on 2 cores once the old
# log-probs come from the sampler (docs/local_run.md).
QUICK_SETTINGS: dict[str, Any] = {
    **DEMO_SETTINGS,
    "actor_rollout_ref.actor.optim.lr": 2e-4,
    "trainer.total_training_steps": STEPS,
    "data.max_prompt_length": 160,  # the longest prompt has 124 tokens (3-digit sums); verl pads every prompt to it on CPU
    "trainer.save_freq": STEPS,
    "trainer.test_freq": -1,
    "rlec.cpu.eval.max_questions": EVAL_QUESTIONS,
    "rlec.cpu.eval.goal_check": True,
    # the old log-probs taken from the sampler (verl's bypass mode) instead of a second forward pass: on-policy, the
    # same weights and temperature in fp32, they are the same numbers up to float rounding (docs/local_run.md), so the
    # update is the same computation, ~1.25 s a step cheaper; verl then logs no actor/entropy and no rollout_corr/*
    # metric (nothing in this task reads them; E3 and the experiments, which do, keep the recipe's second pass)
    "algorithm.rollout_correction.bypass_mode": True,
}


def overrides() -> list[str]:
    """:data:`QUICK_SETTINGS` as Hydra ``key=value`` overrides (``None`` as ``null``)."""
    return [f"{k}={'null' if v is None else v}" for k, v in QUICK_SETTINGS.items()]


def prepare(model_dir: str | Path | None, data_dir: str | Path | None) -> None:
    """Build what is missing: the upcycled warm start in ``model_dir``, the demo's data in ``data_dir`` (None: skip).

    Data: 2,000 training rows at the targets :data:`LOW_TARGET` and :data:`HIGH_TARGET` (no binary rows), and
    :data:`EVAL_QUESTIONS` held-out questions (``test.parquet``), as :func:`rlec.demo.data.write_demo_data` writes them.
    """
    if model_dir is not None:
        from rlec.demo import warm_start

        warm_start.build(model_dir, warm_start.WarmStartConfig(), experts=EXPERTS, progress=False)
    if data_dir is not None:
        from rlec.demo.data import write_demo_data

        data = Path(data_dir)
        if not ((data / "train.parquet").is_file() and (data / "test.parquet").is_file()):
            write_demo_data(data, seed=0, digits=(1, 2, 3), train_rows=2000, test_questions=EVAL_QUESTIONS,
                            binary_fraction=0.0, targets=[LOW_TARGET, HIGH_TARGET])


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m rlec.demo.quick", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="warm-start folder to build (reused when it holds these settings)")
    p.add_argument("--data", help="data folder to write (train.parquet, test.parquet; reused when present)")
    p.add_argument("--overrides", action="store_true", help="print the run's Hydra overrides, one a line")
    args = p.parse_args(argv)
    if args.overrides:
        print("\n".join(overrides()))
    try:
        prepare(args.model, args.data)
    except (ValueError, OSError) as exc:
        print(f"rlec.demo.quick: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
