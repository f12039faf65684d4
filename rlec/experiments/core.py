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
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlec.experiments import keys as K
from rlec.experiments.spec import Experiment, Run

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "tools" / "run_megatron_rlec.sh"
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

    return {"experiment": exp.name, "steps": steps, "data": exp.data, "settings": dict(exp.settings),
            "arms": {a.name: {"overrides": list(a.overrides), "then": None if a.then is None else list(a.then),
                              "switch_fraction": a.switch_fraction} for a in exp.arms},
            "heldout": None if exp.heldout is None else {"targets": list(exp.heldout.targets), "n_samples": exp.heldout.n_samples,
                                                        "temperature": exp.heldout.temperature, "figures": sorted(exp.heldout.figures),
                                                        "data": exp.heldout.data},
            "warm_start_key": warm_start.WarmStartConfig().key()}


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


def prepare_shared(out: Path, exp: Experiment) -> dict[str, Path]:
    """The warm start and the data every arm shares (each built once, reused when present)."""
    from rlec.demo import data as demo_data
    from rlec.demo import warm_start

    shared = out / "shared"
    model = warm_start.build(shared / "warm_start", warm_start.WarmStartConfig(), progress=False)
    data = shared / "data"
    if not (data / "train.parquet").is_file():
        kind = "targets" if exp.data == "targets" else "binary"
        demo_data.write_demo_data(data, seed=0, test_questions=60, binary_fraction=0.0 if kind == "targets" else 1.0,
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


ENVIRONMENTS = ("arithmetic",)  # RLVE's environment here: closest to the warm start's additions


def launcher_args(folder: Path, overrides: Sequence[str], *, steps: int, seed: int) -> list[str]:
    """The launcher's hydra overrides of one stage: seed, logging, rollout dump, HF export, then ``overrides``."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return [f"{K.SEED}={seed}", f"{K.TEST_FREQ}=-1", f"{K.SAVE_FREQ}={steps}", f"{K.LOGGER}=[console,file]",
            f"{K.ROLLOUT_DUMP}={(folder / 'rollouts').resolve()}",
            f"{K.FILE_LOGGER_PATH}={(folder / 'metrics' / f'{stamp}.jsonl').resolve()}",
            f"{K.SAVE_CONTENTS}=[model,optimizer,extra,hf_model]", *overrides]


def launcher_env(folder: Path, *, model: Path, train: Path, test: Path, steps: int) -> dict[str, str]:
    """The launcher's environment: verl's trainer (TRAINER=verl), this folder, model, data and steps."""
    return {**os.environ, "TRAINER": "verl", "OUTPUT_DIR": str(folder), "MODEL_PATH": str(model), "TRAIN_FILES": str(train),
           "VAL_FILES": str(test), "STEPS": str(steps), "PYTHON": sys.executable, "RESUME": "auto"}


def check_arm(folder: Path, overrides: Sequence[str], *, model: Path, train: Path, test: Path, steps: int) -> str | None:
    """DRY_RUN=1 of one stage's launch (the resolved config is validated, nothing starts); None or the verdict's tail."""
    env = {**launcher_env(folder, model=model, train=train, test=test, steps=steps), "DRY_RUN": "1",
           "DRY_RUN_CONFIG": str((folder / "dry_run.yaml").resolve())}
    proc = subprocess.run(["bash", str(LAUNCHER), *launcher_args(folder, overrides, steps=steps, seed=0)], env=env,
                          capture_output=True, text=True, cwd=REPO)
    return None if proc.returncode == 0 else "\n".join((proc.stdout + proc.stderr).splitlines()[-12:])


def launch(folder: Path, overrides: Sequence[str], *, model: Path, train: Path, test: Path, steps: int, seed: int) -> None:
    """Train one stage in ``folder`` through the launcher users run (TRAINER=verl); resumes a partial folder.

    Raises:
        RuntimeError: the launcher failed (names the log file and its last lines).
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics").mkdir(exist_ok=True)
    args = launcher_args(folder, overrides, steps=steps, seed=seed)
    env = launcher_env(folder, model=model, train=train, test=test, steps=steps)
    logfile = folder / "launch.log"
    with open(logfile, "ab") as fh:
        proc = subprocess.Popen(["bash", str(LAUNCHER), *args], env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
        done = -1
        while proc.poll() is None:
            time.sleep(5)
            now = len(list((folder / "rollouts").glob("*.jsonl"))) if (folder / "rollouts").is_dir() else 0
            if now != done:
                done = now
                log(f"  {folder}: step {now}/{steps}")
    if proc.returncode != 0 or hf_model(folder, steps) is None:
        tail = logfile.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"launch in {folder} failed (exit {proc.returncode}); log {logfile}:\n" + "\n".join(tail))


def hf_model(folder: Path, steps: int) -> Path | None:
    """The HF weights verl wrote at step ``steps`` (``global_step_<steps>/actor/model/huggingface``, mbridge), or None."""
    path = folder / f"global_step_{steps}" / "actor" / "model" / "huggingface"
    return path if (path / "config.json").is_file() else None


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """Per-step metrics of ``folder``'s launches (verl's file logger, one file per launch; a later launch wins)."""
    rows: dict[int, dict[str, Any]] = {}
    flat = folder / "metrics.jsonl"  # the launcher's own per-step file, when it writes one
    files = sorted((folder / "metrics").glob("*.jsonl")) if (folder / "metrics").is_dir() else []
    for path in ([flat] if flat.is_file() else []) + files:
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            data = row.get("data", row)
            rows[int(row["step"])] = {**{k: v for k, v in data.items() if isinstance(v, (int, float))}, "step": int(row["step"])}
    return [rows[s] for s in sorted(rows)]


def read_groups(folder: Path, steps: int) -> list[list[list[float]]]:
    """Per step, each rollout group's scores, from verl's rollout dump (uid ``<prompt>_<rollout>_<output>``)."""
    out = []
    for step in range(1, steps + 1):
        path = folder / "rollouts" / f"{step}.jsonl"
        groups: dict[str, list[float]] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                groups.setdefault(str(row["uid"]).rsplit("_", 2)[0], []).append(float(row["score"]))
        out.append(list(groups.values()))
    return out


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
            launch(stage, [*base, *overrides], model=model, train=shared["train"], test=shared["test"], steps=n, seed=seed)
        offset = len(metrics)
        metrics += [{**row, "step": row["step"] + offset} for row in read_metrics(stage)]
        groups += read_groups(stage, n)
        model = hf_model(stage, n)
    heldout = evaluate_heldout(exp, model, shared["test"], folder, seed, limit) if exp.heldout is not None else {}
    run = Run(arm.name, seed, metrics, groups, heldout)
    atomic_write_text(done, json.dumps({"arm": arm.name, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
                                        "metrics": metrics, "groups": groups, "heldout": heldout}) + "\n")
    return run
