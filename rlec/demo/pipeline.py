"""The learning demo: a warm-started tiny Qwen3, trained with RLEC by verl's trainer, evaluated before and after.

    python -m rlec.demo                      # make demo; every stage is reused when done
    python -m rlec.demo --steps 200 actor_rollout_ref.actor.optim.lr=5e-5

Stages (each is skipped when its output exists, so an interrupted demo resumes where it stopped):

1. **warm start** (:mod:`rlec.demo.warm_start`): a tiny dense Qwen3 with the compact tokenizer
   (:mod:`rlec.compact_vocab`: Qwen3's tokens of the toy task only, the same token strings as Qwen3's
   tokenizer), supervised on additions with 1-3 digit operands; it
   half-masters them (right on small sums, wrong on large ones) and says ``I don't know`` at a
   rate independent of the target and of the problem.
2. **data** (:mod:`rlec.demo.data`): training rows and held-out evaluation questions in
   the data contract (``train.parquet``, ``test.parquet``).
3. **warm-start evaluation**: ``rlec.eval.evaluate`` with the CPU run's evaluation settings
   (:func:`rlec.report.evaluation_args`, ``rlec.cpu.eval``: greedy, every target of the grid).
4. **RLEC**: the launcher users run, ``tools/run_megatron_rlec.sh`` with ``TRAINER=verl``
   (:mod:`rlec.demo.verl_run`: verl's ``main_ppo`` on the CPU layout, the loop ``make run`` follows:
   the rlec_hf rollout, rlec grading, the scheduled reward, verl's mean-only GRPO advantage, the
   Megatron update, weight sync) from the warm start, with :data:`DEMO_SETTINGS`
   (:func:`launcher_overrides`); then the same evaluation of the HF weights verl writes at the
   last step (``run/global_step_<steps>/actor/model/huggingface``).
5. **comparison**: ``rlec.eval.metrics`` on both record files side by side (tables, the
   coverage / selective-accuracy-vs-target plot of both) and :func:`target_check`, the
   per-target bootstrap test of the demo's goal (coverage at p = 0.8 at least 0.3 below
   coverage at p = 0.1, with separated intervals, after RLEC and not before).

Outputs under ``--out`` (default ``outputs/demo``): ``warm_start/``, ``data/``, ``run/`` (the
launch's folder: checkpoints, ``eval/records.jsonl``), ``eval/warm_start.jsonl``, ``compare/`` (metrics, plots),
``target_check.json`` and ``demo.json`` (the warm-start settings and training targets the folder
belongs to: a rerun with others is refused, so no stage mixes two demos).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from rlec.eval.goal import HIGH_TARGET, LOW_TARGET, MAX_WARM_GAP, MIN_GAP, format_check, target_check

__all__ = ["DEMO_SETTINGS", "HIGH_TARGET", "LOW_TARGET", "MAX_WARM_GAP", "MIN_GAP", "compose_checked", "format_check",
           "launcher_overrides", "main", "run_overrides", "target_check"]

DEFAULT_OUT = "outputs/demo"
DEFAULT_STEPS = 80

# The settings the demo changes (key=value arguments override them; rlec.cpu.eval.* set its evaluation). Scale: 16 prompts
# x 8 responses per step, 4 optimizer steps per step; responses of the warm start are at most
# ~20 tokens ("0.80 \\boxed{I don't know}"); 120 held-out evaluation questions.
DEMO_SETTINGS: dict[str, Any] = {
    "data.train_batch_size": 16,
    "actor_rollout_ref.rollout.n": 8,
    # Sampling at T = 1 over the whole vocabulary, no top-k. The warm start used to run expanded to Qwen3's 151,936
    # rows, 151,851 of them logit 0: where its own logits were flat (right after the restated target's digits) 22%
    # of responses drew one of those rows, their steps had grad norms of 10^2-10^5, and top-k 5 was needed (80 steps:
    # coverage gap 0.16 without, 0.32 with; tools/demo/FINDINGS.md). Its model now has the compact tokenizer's 223
    # rows (rlec.compact_vocab), 139 of them logit 0 (merge intermediates and specials): 1 response in 256 draws one.
    "actor_rollout_ref.rollout.top_k": -1,
    "data.max_response_length": 24,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.actor.optim.lr": 1e-4,
    "trainer.save_freq": 10,
    "rlec.cpu.eval.max_questions": 120,
    "rlec.cpu.eval.max_new_tokens": 24,
}
def run_overrides(out: Path, steps: int, extra: Sequence[str] = ()) -> list[str]:
    """The ``key=value`` overrides of the demo's run over ``megatron_configs/rlec.yaml`` on the CPU layout
    (:func:`compose_checked`: validation and the evaluation's settings).

    Paths, :data:`DEMO_SETTINGS`, ``steps``, then ``extra``.
    """
    values: dict[str, Any] = {
        "actor_rollout_ref.model.path": out / "warm_start",
        "data.train_files": out / "data" / "train.parquet",
        "data.val_files": out / "data" / "test.parquet",
        "trainer.default_local_dir": out / "run",
        "trainer.total_training_steps": steps,
        **DEMO_SETTINGS,
    }
    return [f"{k}={v}" for k, v in values.items()] + list(extra)


def _records_complete(records: Path) -> bool:
    """True when ``records`` (the trained model's evaluation) exists and is not empty (``--resume`` completes a partial one)."""
    return records.is_file() and records.stat().st_size > 0


def launcher_overrides(extra: Sequence[str] = ()) -> list[str]:
    """The launcher's Hydra overrides of the demo's RLEC run: :data:`DEMO_SETTINGS`, then ``extra``.

    Paths and steps go to the launcher as ``MODEL_PATH`` / ``TRAIN_FILES`` / ``VAL_FILES`` / ``STEPS``
    (:func:`rlec.demo.verl_run.launch`).
    """
    return [f"{k}={v}" for k, v in DEMO_SETTINGS.items()] + list(extra)


def compose_checked(overrides: Sequence[str]) -> Any:
    """The demo run's config: ``megatron_configs/rlec.yaml`` on the CPU layout with ``overrides``, checked by the
    rules every launch passes first (:func:`rlec.rules.settings_rules.early_errors`).

    Raises:
        ValueError: the config does not compose (an unknown key or option), or a setting is refused; the
            message names each key, value and rule.
    """
    from rlec.rules.settings_rules import early_errors
    from rlec.run_config import RunConfig
    from rlec.config import CPU_LAYOUT, CPU_PRECISION, compose

    try:
        cfg = compose([f"layout={CPU_LAYOUT}", f"precision={CPU_PRECISION}", *overrides])
    except Exception as exc:  # Hydra and OmegaConf errors: one line
        raise ValueError(f"cannot compose the run's config with {list(overrides)}: {type(exc).__name__}: {exc}") from None
    errors = early_errors(RunConfig(cfg), overrides)
    if errors:
        raise ValueError("; ".join(str(e) for e in errors))
    return cfg


def _data_settings(folder: Path) -> dict[str, Any] | None:
    """The settings ``folder``'s demo data was written with (None: missing or incomplete)."""
    try:
        if (folder / "train.parquet").is_file() and (folder / "test.parquet").is_file():
            return json.loads((folder / "summary.json").read_text())["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="python -m rlec.demo", description=__doc__.split("\n\n")[0],
                                epilog="Stages and outputs: see the module docstring (docs/local_run.md, 'The learning demo').",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="settings over the demo's (verl's and rlec's keys, rlec.cpu.eval.* set the evaluation)")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder of every stage")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="RLEC steps (b goes 0 -> 1 over them)")
    p.add_argument("--warm-start-steps", type=int, default=None, help="a quick warm start instead of the shipped one: this many base steps, no fine-tuning stages (for "
                   "trying the pipeline; it learns too little for the goal)")
    p.add_argument("--train-targets", default=f"{LOW_TARGET},{HIGH_TARGET}",
                   help="targets of the RLEC training rows: comma-separated, or 'range' for p uniform on 0.01 ... 0.90 "
                   "(the cluster's data; on the compact surrogate, 80 steps learned a coverage gap of 0.08 with it, "
                   "0.33 with the two targets)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates of the comparison")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (0 also when the goal is not reached: the check is a measurement)."""
    import dataclasses

    from rlec.eval import evaluate, metrics
    from rlec.io import atomic_write_text
    from rlec.demo import data as demo_data
    from rlec.demo import verl_run, warm_start
    from rlec.report import evaluation_args
    from rlec.run_config import RunConfig

    args = build_parser().parse_args(argv)
    try:
        if args.steps < 2:
            raise ValueError(f"--steps must be >= 2 (b goes from 0 to 1 over them), got {args.steps}")
        if args.warm_start_steps is not None and args.warm_start_steps < 1:
            raise ValueError(f"--warm-start-steps must be >= 1, got {args.warm_start_steps}")
        if args.bootstrap < 100:
            raise ValueError(f"--bootstrap must be >= 100 (the goal's intervals are percentiles of the replicates), got {args.bootstrap}")
        train_targets = None if args.train_targets == "range" else [float(x) for x in args.train_targets.split(",")]
        if train_targets is not None and any(not 0.0 <= t < 1.0 for t in train_targets):
            raise ValueError(f"--train-targets must be 'range' or values in [0, 1), got {args.train_targets!r}")
    except ValueError as exc:
        print(f"rlec.demo: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    overrides = run_overrides(out, args.steps, args.overrides)
    try:
        cfg = compose_checked(overrides)
    except ValueError as exc:
        print(f"rlec.demo: error: {exc}", file=sys.stderr)
        return 2

    ws_cfg = warm_start.WarmStartConfig()
    if args.warm_start_steps is not None:
        ws_cfg = dataclasses.replace(ws_cfg, steps=args.warm_start_steps, finetune=())
    run = RunConfig(cfg)  # read once: the evaluation's arguments of every stage below
    data_settings = dict(seed=int(cfg.data.seed), digits=sorted(set(ws_cfg.digits)), train_rows=2000,
                         test_questions=int(cfg.rlec.cpu.eval.max_questions), binary_fraction=0.0, targets=train_targets)
    # everything that decides the outputs; a folder holds one demo (checked before any stage writes)
    settings = {"warm_start_key": warm_start.folder_key(ws_cfg), "data": demo_data.settings(**data_settings),
                "evaluation": evaluation_args(run, Path("MODEL"), Path("RECORDS"))}
    stamp = out / "demo.json"
    if stamp.exists():
        try:
            previous = json.loads(stamp.read_text())
        except (OSError, ValueError) as exc:
            print(f"rlec.demo: error: {stamp}: unreadable ({exc}); move the folder aside or choose another --out",
                  file=sys.stderr)
            return 2
        if previous != settings:
            changed = sorted(k for k in settings if previous.get(k) != settings[k])
            print(f"rlec.demo: error: {out} holds a demo with other settings ({', '.join(changed)}; {stamp}); "
                  "choose another --out", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, json.dumps(settings) + "\n")
    print(f"[rlec.demo] the full demo: {args.steps} RLEC steps, about an hour on 2 cores at 80 (make run is the "
          "30-step version on the upcycled Qwen3-MoE: minutes)", flush=True)
    print(f"[rlec.demo] 1/5 warm start -> {out / 'warm_start'}", flush=True)
    warm_start.build(out / "warm_start", ws_cfg)
    data = out / "data"
    print(f"[rlec.demo] 2/5 data -> {data}", flush=True)
    if _data_settings(data) != settings["data"]:
        demo_data.write_demo_data(data, **data_settings)
    warm_records = out / "eval" / "warm_start.jsonl"
    warm_records.parent.mkdir(parents=True, exist_ok=True)
    print(f"[rlec.demo] 3/5 evaluating the warm start -> {warm_records}", flush=True)
    code = evaluate.main(evaluation_args(run, out / "warm_start", warm_records) + ["--resume"])
    if code:
        return code
    run_dir = out / "run"
    trained_records = run_dir / "eval" / "records.jsonl"
    trained = verl_run.hf_model(run_dir, args.steps)
    if trained is not None and _records_complete(trained_records):
        print(f"[rlec.demo] 4/5 RLEC: {args.steps} of {args.steps} steps done and evaluated, reused ({run_dir})", flush=True)
    else:
        if trained is None:
            print(f"[rlec.demo] 4/5 RLEC, {args.steps} steps on verl's trainer (tools/run_megatron_rlec.sh, TRAINER=verl) "
                  f"-> {run_dir}", flush=True)
            try:
                trained = verl_run.launch(run_dir, launcher_overrides(args.overrides), model=out / "warm_start",
                                          train=data / "train.parquet", test=data / "test.parquet", steps=args.steps,
                                          progress=lambda line: print(f"[rlec.demo] {line}", flush=True))
            except RuntimeError as exc:
                print(f"rlec.demo: error: {exc}", file=sys.stderr)
                return 1
        print(f"[rlec.demo] 4/5 evaluating the trained model ({trained}) -> {trained_records}", flush=True)
        trained_records.parent.mkdir(parents=True, exist_ok=True)
        code = evaluate.main(evaluation_args(run, trained, trained_records) + ["--resume"])
        if code:
            return code
    print("[rlec.demo] 5/5 comparison", flush=True)
    code = metrics.main([str(warm_records), "--compare", str(trained_records), "--labels", "warm start,RLEC",
                         "--bootstrap", str(args.bootstrap), "--out-dir", str(out / "compare")])
    if code:
        return code
    check = target_check(warm_records, trained_records, n_boot=args.bootstrap)
    atomic_write_text(out / "target_check.json", json.dumps(check, indent=1) + "\n")
    print("\n## The demo's goal (95% question-bootstrap intervals)\n\n" + format_check(check))
    print(f"\n{check['why']}; plots and tables: {out / 'compare'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
