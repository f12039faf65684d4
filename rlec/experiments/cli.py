"""``python -m rlec.experiments <name>``: train every arm x seed through the launcher, then the table, figure and JSON.

    python -m rlec.experiments e3                    # the baseline's 2 gate seeds, the premise gate, then every arm x 5 seeds
    python -m rlec.experiments passk --quick         # a few steps per arm (minutes): checks the wiring, not the claim
    python -m rlec.experiments rlve --arms low_static,adaptive --seeds 6
    python -m rlec.experiments passk --plan          # the task, arms, settings and metrics; nothing built or written

Before the first launch it prints the primary metric, the premise gate and the paired comparisons. The baseline
arm's first seeds train first; when the premise gate fails, the verdict is "premise absent" and no method arm
trains. Outputs under ``--out`` (default ``outputs/experiments/<name>``, ``..._quick`` with ``--quick``):
``results.json`` (the verdicts with their paired intervals, every figure per arm, the raw per-step and per-question
values), ``<name>.png`` and ``table.md``; each arm-seed in ``<arm>/seed<k>/`` (layout: :mod:`rlec.experiments.core`).
A rerun skips the finished arm-seeds and resumes an interrupted one. All launches of one command connect to one Ray
cluster it starts before the first and stops after the last (:mod:`rlec.cluster.ray_cluster`; ``NPROC`` sizes it as
the launcher would); Ctrl-C stops the launch and the cluster and prints one line (exit 130).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from rlec.cluster import ray_cluster
from rlec.cluster.main_ppo import INTERRUPTED
from rlec.experiments.spec import Experiment

EXPERIMENTS = ("e3", "e3_budget", "passk", "rlve", "rlec_advantage", "rlec_schedule")
QUICK_QUESTIONS = 16  # held-out questions of a --quick run (the full set: 60 additions, or 64 environment problems)
QUICK_BATCH = 4  # prompts per step of a --quick run (full runs: 8): half the rollouts, the same wiring


def load(name: str) -> Experiment:
    """The :class:`Experiment` of ``rlec/experiments/<name>.py``.

    Raises:
        ValueError: ``name`` is not one of :data:`EXPERIMENTS`.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}: expected one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"rlec.experiments.{name}").EXPERIMENT


def launch_nproc() -> int:
    """The launches' Megatron worker processes: the launcher's ``NPROC`` from this environment (they inherit it), 1 unset.

    Raises:
        ValueError: ``NPROC`` is not an integer >= 1 (names it).
    """
    value = os.environ.get("NPROC", "").strip() or "1"
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"NPROC={value!r}: expected an integer >= 1 (the launches' Megatron worker processes)")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="python -m rlec.experiments", description=__doc__.split("\n\n")[0],
                                epilog="docs/experiments.md: each experiment, its paper figure and its verdict.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help=f"the experiment: {', '.join(EXPERIMENTS)}")
    p.add_argument("--arms", default=None, help="comma-separated arms to run (default: all of the experiment's)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per arm, 0 .. N-1, at least 1 (default: the experiment's power note, >= 5; 1 with --quick)")
    p.add_argument("--quick", action="store_true", help=f"a few steps per arm, {QUICK_BATCH} prompts per step, a small held-out set (minutes)")
    p.add_argument("--steps", type=int, default=None, help="steps per arm-seed (default: the experiment's)")
    p.add_argument("--check", action="store_true", help="validate every arm's launch (DRY_RUN=1 of the launcher), train nothing")
    p.add_argument("--plan", "--dry-run", dest="plan", action="store_true",
                   help="print the task, arms, settings, primary metric, premise gate and the paper's settings beside "
                        "rlec's, check the launch rules, and stop: nothing built, trained or written (seconds)")
    p.add_argument("--out", default=None, help="output folder (default outputs/experiments/<name>[_quick])")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; 2 on bad input (named), 1 when a launch fails, 130 on Ctrl-C (one line), else 0."""
    from rlec.demo import verl_run
    from rlec.experiments import core, report
    from rlec.io import atomic_write_text

    args = build_parser().parse_args(argv)
    try:
        exp = load(args.name)
        if args.quick:
            exp = exp.quick(QUICK_BATCH)
        if args.seeds is None:
            args.seeds = 1 if args.quick else exp.seeds
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        arms = [a.name for a in exp.arms] if args.arms is None else [a.strip() for a in args.arms.split(",") if a.strip()]
        for arm in arms:
            exp.arm(arm)  # raises naming an unknown arm
        if not arms:
            raise ValueError(f"--arms {args.arms!r}: no arm named")
        if not args.quick and not args.check and exp.baseline not in arms:
            raise ValueError(f"--arms {args.arms!r}: a full run needs the baseline arm {exp.baseline!r} "
                             "(it trains first for the premise gate, and every verdict is paired with it)")
        steps = args.steps if args.steps is not None else (exp.quick_steps if args.quick else exp.steps)
        if steps < 2:
            raise ValueError(f"--steps must be >= 2, got {steps}")
        nproc = launch_nproc()
        out = Path(args.out or f"outputs/experiments/{exp.name}{'_quick' if args.quick else ''}")
        core.check_out_folder(out)
        refused = core.arm_errors(exp, arms, steps)
        if refused:
            raise ValueError(f"{exp.name}: the launch would refuse " + "; ".join(refused))
        if args.plan:
            print(report.format_plan(exp, arms, args.seeds, steps, out, quick=args.quick))
            return 0
        core.claim_folder(out, core.settings_stamp(exp, steps))
    except ValueError as exc:
        print(f"rlec.experiments: error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    assert exp.primary is not None
    core.log(f"{exp.name}: {len(arms)} arms x {args.seeds} seeds, {steps} steps each -> {out}")
    core.log(f"{exp.name}: primary metric: {exp.primary.name} ({'higher' if exp.primary.direction > 0 else 'lower'} with the "
             f"method); paired: {', '.join(f'{m} - {b}' for m, b in exp.pairs())}; a verdict needs {exp.seeds} seeds")
    if exp.premise is not None:
        core.log(f"{exp.name}: premise gate ({exp.premise.seeds} seeds of {exp.baseline!r} first): {exp.premise.what}")
    if exp.task:
        core.log(f"{exp.name}: task: {exp.task}")
    differences = core.arm_differences(exp, [a for a in arms if a != exp.baseline], steps) if exp.baseline in arms else {}
    for arm, diff in differences.items():
        if diff:
            core.log(f"{exp.name}: arm {arm!r} differs from {exp.baseline!r} in keys it does not name: {sorted(diff)}")
    shared = core.prepare_shared(out, exp)
    if args.check:
        failed = 0
        for arm in arms:
            for idx, (overrides, n) in enumerate(exp.arm(arm).stages(steps)):
                folder = out / arm / "check" / f"stage{idx + 1}"
                folder.mkdir(parents=True, exist_ok=True)
                why = verl_run.check(folder, [*(f"{k}={v}" for k, v in exp.settings.items()),
                                              *core.stage_overrides(exp.arm(arm), idx, overrides)], model=shared["model"],
                                     train=shared["train"], test=shared["test"], steps=n)
                failed += why is not None
                core.log(f"{exp.name} {arm} stage {idx + 1}: {'OK' if why is None else 'REFUSED' + chr(10) + why}")
        return 1 if failed else 0
    runs: dict[str, list] = {}
    order = [(arm, seed) for arm in arms for seed in range(args.seeds)]
    gate = exp.premise.seeds if exp.premise is not None and exp.baseline in arms else 0
    first = [(exp.baseline, seed) for seed in range(min(gate, args.seeds))]
    order = first + [x for x in order if x not in first]
    premise = None
    current = "before the first launch"
    try:
        with contextlib.ExitStack() as stack:
            address = None  # one Ray cluster for every launch of this command (the launch's fixed cost paid once)
            if any(not (out / arm / f"seed{seed}" / core.RUN_FILE).is_file() for arm, seed in order):
                address = stack.enter_context(ray_cluster.shared_cluster(*ray_cluster.cpu_launch_resources(nproc)))
            for k, (arm, seed) in enumerate(order, 1):
                if gate and premise is None and k > len(first):  # the baseline's gate seeds are done
                    premise = report.premise_outcome(exp, runs.get(exp.baseline, []))
                    assert premise is not None
                    core.log(f"{exp.name}: premise gate: {premise['what']}: "
                             f"{ {True: 'held', False: 'ABSENT', None: 'not measured'}[premise['held']] } {premise['figures']}")
                    if premise["held"] is not True and not args.quick:
                        break  # premise absent (or unreadable): the method arms are not trained
                core.log(f"{exp.name} [{k}/{len(order)}] {arm} seed{seed}")
                current = f"in {arm} seed{seed}"
                try:
                    runs.setdefault(arm, []).append(core.run_arm_seed(exp, arm, seed, out, steps, shared, ray_address=address,
                                                                      limit=QUICK_QUESTIONS if args.quick else None))
                except RuntimeError as exc:
                    print(f"rlec.experiments: error: {exc}", file=sys.stderr)
                    return 1
    except KeyboardInterrupt:  # Ctrl-C: the launch and the shared Ray cluster are stopped by now (nothing left running)
        print(f"\nrlec.experiments: interrupted {current}; rerun the same command to resume (finished arm-seeds are kept, "
              "an interrupted one resumes from its last checkpoint)", file=sys.stderr, flush=True)
        return INTERRUPTED
    if gate and premise is None:
        premise = report.premise_outcome(exp, runs.get(exp.baseline, []))
    result = report.summarise(exp, runs, quick=args.quick, premise=premise, differences=differences)
    result["steps"], result["seconds"] = steps, round(time.perf_counter() - t0, 1)
    table = report.format_table(result)
    verdicts = report.format_verdicts(result)
    atomic_write_text(out / "results.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(out / "table.md", f"{table}\n\n{verdicts}\n\n{report.format_paper_settings(exp)}\n")
    png = report.plot(exp, result, out / f"{exp.name}.png")
    print(f"\n## {exp.name}{' (--quick)' if args.quick else ''}: {exp.claim}\n\n{verdicts}\n\n{table}\n")
    core.log(f"done in {result['seconds']:.0f} s: {out / 'results.json'}, {png}")
    if premise is not None and premise["held"] is None and not args.quick:
        print(f"rlec.experiments: error: the premise gate could not be read ({premise['figures'].get('missing')} not "
              "measured): no method arm trained", file=sys.stderr)
        return 1
    return 0
