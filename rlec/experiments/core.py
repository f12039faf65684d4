"""Run an experiment: every arm x seed as one launch of ``tools/run_megatron_rlec.sh`` (verl's trainer), resumable.

Layout under ``--out`` (default ``outputs/experiments/<name>``, ``<name>_quick`` with ``--quick``):

- ``experiment.json``: the settings the folder belongs to (arms, shared settings, steps, data, held-out
  evaluation); a rerun with other settings is refused, as the demo refuses another demo's folder.
- ``shared/warm_start`` (the demo's, :mod:`rlec.demo.warm_start`), ``shared/data`` (training rows and
  held-out questions: :mod:`rlec.demo.data`, or RLVE's environment test set).
- ``<arm>/seed<k>/``: the launch's OUTPUT_DIR (checkpoints, ``rollouts/<step>.jsonl``, ``metrics/``,
  ``launch.log``), ``eval/records.jsonl`` and ``run.json`` (written last: the arm-seed is done; a rerun
  skips it). An interrupted arm-seed is relaunched on the same folder, and verl resumes it from its
  last checkpoint. A two-stage arm (``Arm.then``) has ``stage1/`` and ``stage2/`` (the second trained
  from the first's final HF weights).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlec.demo.verl_run import hf_model, launch, launcher_args, read_groups, read_metrics
from rlec.experiments import keys as K
from rlec.experiments.spec import Experiment, Run

RUN_FILE = "run.json"
STAMP = "experiment.json"


class ExperimentError(ValueError):
    """Bad input or a folder of other settings: the message names it."""


def log(msg: str) -> None:
    """One progress line."""
    print(f"[rlec.experiments] {msg}", flush=True)


def settings_stamp(exp: Experiment, steps: int) -> dict[str, Any]:
    """Everything that decides an arm-seed's outcome (seeds excepted: adding seeds reuses the folder)."""
    from rlec.demo import warm_start

    return {"experiment": exp.name, "steps": steps, "data": exp.data, "train_rows": exp.train_rows, "settings": dict(exp.settings),
            "arms": {a.name: {"overrides": list(a.overrides), "then": None if a.then is None else list(a.then),
                              "switch_fraction": a.switch_fraction} for a in exp.arms},
            "heldout": None if exp.heldout is None else {"targets": list(exp.heldout.targets), "n_samples": exp.heldout.n_samples,
                                                        "temperature": exp.heldout.temperature, "figures": sorted(exp.heldout.figures),
                                                        "data": exp.heldout.data},
            "warm_start_key": warm_start.folder_key(warm_start.WarmStartConfig())}


def claim_folder(out: Path, stamp: dict[str, Any]) -> None:
    """Write ``experiment.json`` in ``out``, or refuse a folder that holds another experiment's settings.

    Raises:
        ExperimentError: ``out/experiment.json`` exists with other settings (names the keys that differ) or is unreadable.
    """
    from rlec.io import atomic_write_text

    path = out / STAMP
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ExperimentError(f"{path}: unreadable ({exc}); move the folder aside or choose another --out") from None
        if previous != stamp:
            changed = sorted(k for k in set(stamp) | set(previous) if previous.get(k) != stamp.get(k))
            raise ExperimentError(f"{out} holds an experiment with other settings ({', '.join(changed)}; {path}); "
                                  "choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(stamp, indent=1) + "\n")


def arm_errors(exp: Experiment, arms: list[str], steps: int) -> list[str]:
    """Each named arm's stages composed in-process as their launches compose them (the experiment's settings, the
    launch's own overrides of :func:`rlec.demo.verl_run.launcher_args`, the arm's, the stage's length) and checked by
    the rules every launch applies first (the early rule set and the algorithms' own,
    :func:`rlec.cluster.rules.algorithm_overlay_rules`). Seconds, before any warm start or launch: a full ``passk``
    run once trained two arm-seeds (15 minutes) before its third arm's launch refused a key (``--check`` runs the
    whole ``DRY_RUN=1`` of each launch instead, with the model and the paths).

    Returns:
        One line per refusal (several for a stage refused on several keys), naming the arm, the stage of a two-stage
        arm, the key, the value and the rule; empty when every launch would pass these rules.

    Raises:
        ValueError: an arm ``exp`` does not have (names it).
    """
    from rlec.cluster.rules import algorithm_overlay_rules
    from rlec.demo.pipeline import compose_checked

    errors = []
    for arm in arms:
        for idx, (overrides, n) in enumerate(exp.arm(arm).stages(steps)):
            where = f"arm {arm!r}" + (f" stage {idx + 1}" if exp.arm(arm).then is not None else "")
            launch = launcher_args(Path("arm_check"), [*(f"{k}={v}" for k, v in exp.settings.items()), *overrides],
                                   steps=n, seed=0)
            try:
                # the stage's length as the launcher sets it (STEPS): rules such as the b schedule's need it
                cfg = compose_checked([*launch, f"trainer.total_training_steps={n}"])
            except ValueError as exc:
                errors.append(f"{where}: {exc}")
                continue
            errors += [f"{where}: {f}" for f in algorithm_overlay_rules(cfg) if f.level == "error"]
    return errors


def prepare_shared(out: Path, exp: Experiment) -> dict[str, Path]:
    """The warm start and the data every arm shares (each built once, reused when present)."""
    from rlec.demo import data as demo_data
    from rlec.demo import warm_start

    shared = out / "shared"
    model = warm_start.build(shared / "warm_start", warm_start.WarmStartConfig(), progress=False)
    data = shared / "data"
    if not (data / "train.parquet").is_file():
        kind = "targets" if exp.data == "targets" else "binary"
        demo_data.write_demo_data(data, seed=0, test_questions=60, train_rows=exp.train_rows,
                                  binary_fraction=0.0 if kind == "targets" else 1.0,
                                  targets=[0.1, 0.8] if kind == "targets" else None)
    paths = {"model": model, "train": data / "train.parquet", "test": data / "test.parquet"}
    if exp.data == "environments" or (exp.heldout is not None and exp.heldout.data == "environments"):
        env = shared / "environments"
        if not (env / "test.parquet").is_file():
            from rlec.environments.testset import EnvTestConfig, prepare_environments

            prepare_environments(env, EnvTestConfig(environments=ENVIRONMENTS, difficulties=(0, 1, 2, 3), per_difficulty=16),
                                 tokenizer_path=str(model), progress=False)
        paths["test"] = env / "test.parquet"
    return paths


ENVIRONMENTS = ("addition",)  # RLVE's environment here: the warm start's own additions (rlec/environments/addition.py)


def evaluate_heldout(exp: Experiment, model: Path, test: Path, folder: Path, seed: int, limit: int | None = None) -> dict[str, list[float]]:
    """Sample the held-out questions (the first ``limit`` round-robin over sources, or all) from ``model``; every figure per question."""
    from rlec.eval import evaluate
    from rlec.eval.metrics import grade_records, load_run, question_counts
    from rlec.eval.records import parse_targets, target_label

    h = exp.heldout
    assert h is not None
    records_path = folder / "eval" / "records.jsonl"
    records_path.parent.mkdir(parents=True, exist_ok=True)
    spec = ",".join(target_label(t) if t is not None else "binary" for t in h.targets)
    code = evaluate.main(["--model", str(model), "--data", str(test), "--out", str(records_path), "--targets", spec,
                          "--n-samples", str(h.n_samples), "--temperature", str(h.temperature),
                          "--max-new-tokens", str(exp.settings.get(K.MAX_RESPONSE, 24)), "--seed", str(seed),
                          "--engine", "hf", "--resume", *(["--limit", str(limit)] if limit else [])])
    if code:
        raise RuntimeError(f"held-out evaluation of {model} failed (exit {code})")
    targets = parse_targets(spec)
    records, _ = load_run(records_path, targets)
    graded = grade_records(records, progress=False)
    qkeys, per_question = question_counts(records, graded, targets)
    order = np.argsort([f"{s}\x00{q}" for s, q in qkeys], kind="stable")  # one question order for every run
    per_question, qkeys = per_question[order], [qkeys[i] for i in order]
    return {name: [float(v) for v in fig(per_question, qkeys, records)] for name, fig in h.figures.items()}


def run_arm_seed(exp: Experiment, arm_name: str, seed: int, out: Path, steps: int, shared: dict[str, Path], *,
                 limit: int | None = None) -> Run:
    """Train (or resume, or reuse) one arm-seed and return its :class:`Run` (``limit``: held-out questions, None = all)."""
    arm = exp.arm(arm_name)
    folder = out / arm.name / f"seed{seed}"
    done = folder / RUN_FILE
    if done.is_file():
        data = json.loads(done.read_text())
        return Run(arm.name, seed, data["metrics"], data["groups"], data["heldout"])
    from rlec.io import atomic_write_text

    base = [f"{k}={v}" for k, v in exp.settings.items()]
    stages = arm.stages(steps)
    model, metrics, groups = shared["model"], [], []
    t0 = time.perf_counter()
    for idx, (overrides, n) in enumerate(stages):
        stage = folder if len(stages) == 1 else folder / f"stage{idx + 1}"
        if hf_model(stage, n) is None:
            log(f"{exp.name} {arm.name} seed{seed}: training {n} steps ({arm.what}) -> {stage}")
            launch(stage, [*base, *overrides], model=model, train=shared["train"], test=shared["test"], steps=n, seed=seed,
                   progress=log)
        offset = len(metrics)
        metrics += [{**row, "step": row["step"] + offset} for row in read_metrics(stage)]
        groups += read_groups(stage, n)
        model = hf_model(stage, n)
    heldout = evaluate_heldout(exp, model, shared["test"], folder, seed, limit) if exp.heldout is not None else {}
    run = Run(arm.name, seed, metrics, groups, heldout)
    atomic_write_text(done, json.dumps({"arm": arm.name, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
                                        "metrics": metrics, "groups": groups, "heldout": heldout}) + "\n")
    return run
