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
  from the first's final HF weights, on ``stage2/train.parquet``: the rows verl's sampler would have drawn after
  the first stage, in that order, with ``data.shuffle=false``, so the data order continues instead of restarting).

The baseline arm's first seeds train first; the premise gate reads them before any method arm
(:func:`rlec.experiments.cli.main`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlec.config_base import flatten
from rlec.demo.verl_run import hf_model, launch, launcher_args, read_group_prompts, read_groups, read_metrics
from rlec.experiments import keys as K
from rlec.experiments import pilot
from rlec.experiments.data_kinds import data_kind
from rlec.experiments.spec import Arm, Experiment, Run

RUN_FILE = "run.json"
STAMP = "experiment.json"


class ExperimentError(ValueError):
    """Bad input or a folder of other settings: the message names it."""


def log(msg: str) -> None:
    """One progress line."""
    print(f"[rlec.experiments] {msg}", flush=True)


def settings_stamp(exp: Experiment, steps: int) -> dict[str, Any]:
    """Everything that decides an arm-seed's outcome or its reading (seeds excepted: adding seeds reuses the folder)."""
    from rlec.demo import warm_start

    assert exp.primary is not None
    return {"experiment": exp.name, "steps": steps, "baseline": exp.baseline, "primary": exp.primary.name, "data": exp.data, "train_rows": exp.train_rows, "settings": dict(exp.settings),
            "arms": {a.name: {"overrides": list(a.overrides), "then": None if a.then is None else list(a.then),
                              "switch_fraction": a.switch_fraction} for a in exp.arms},
            "heldout": None if exp.heldout is None else {"targets": list(exp.heldout.targets), "n_samples": exp.heldout.n_samples,
                                                        "temperature": exp.heldout.temperature, "figures": sorted(exp.heldout.figures),
                                                        "data": exp.heldout.data},
            "warm_start_key": warm_start.folder_key(pilot.warm_start_config(exp)), "pilot": pilot_stamp(exp),
            "probe": None if exp.probe is None else exp.probe.stamp(),
            # JSON's lists: a rerun compares this stamp with the one read back from experiment.json
            **({"pool": {**asdict(exp.pool), "difficulties": list(exp.pool.difficulties)}} if exp.pool is not None else {})}


def pilot_stamp(exp: Experiment) -> str | None:
    """The SHA-256 of the committed pilot file the training pool comes from (None: no pilot file)."""
    import hashlib

    path = pilot.pilot_path(exp.name)
    return hashlib.sha256(path.read_bytes()).hexdigest() if exp.data in pilot.PILOTS and path.is_file() else None


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
            changed = stamp_differences(previous, stamp)
            shown = "; ".join(changed[:6]) + (f"; {len(changed) - 6} more" if len(changed) > 6 else "")
            raise ExperimentError(f"{out} holds an experiment with other settings ({shown}; {path}); choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(stamp, indent=1) + "\n")


def stamp_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``"key: old -> new"`` for every leaf that differs between two stamps (dotted keys; absent as ``<absent>``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += stamp_differences(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{prefix}{k}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def check_out_folder(out: Path) -> None:
    """Refuse an output folder that cannot be one: a file, or a folder (or its nearest existing parent) not writable.

    Raises:
        ExperimentError: names the path and the reason.
    """
    import os

    if out.exists() and not out.is_dir():
        raise ExperimentError(f"--out {out}: is a file, not a folder")
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ExperimentError(f"--out {out}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ExperimentError(f"--out {out}: {probe} is not writable")


def stage_overrides(arm: Arm, stage: int, overrides: Sequence[str]) -> list[str]:
    """A stage's own overrides: the arm's, and from the second stage ``data.shuffle=false`` (its training file is the
    continued data order, :func:`continued_rows`)."""
    return [*overrides, *([f"{K.SHUFFLE}=false"] if stage > 0 else [])]


def compose_stage(exp: Experiment, overrides: Sequence[str], steps: int, seed: int = 0) -> Any:
    """A stage's resolved launch config composed in-process as its launch composes it: the experiment's settings, the
    launch's own overrides (:func:`rlec.demo.verl_run.launcher_args`), ``overrides``, the stage's length.

    Raises:
        ValueError: the config does not compose or the early rules refuse it (names key, value, rule).
    """
    from rlec.demo.pipeline import compose_checked

    launch = launcher_args(Path("arm_check"), [*(f"{k}={v}" for k, v in exp.settings.items()), *overrides], steps=steps, seed=seed)
    # the stage's length as the launcher sets it (STEPS): rules such as the b schedule's need it
    return compose_checked([*launch, f"trainer.total_training_steps={steps}"])


def arm_differences(exp: Experiment, arms: Sequence[str], steps: int, seed: int = 0) -> dict[str, dict[str, list[Any]]]:
    """Per arm, every resolved-config key whose value differs from the baseline arm's and that neither arm names
    (:meth:`rlec.experiments.spec.Arm.names`): ``{arm: {key: [baseline value, arm value]}}``; empty dicts when the arms
    differ only in their own keys. Each stage of an arm is compared with the baseline's single stage (the second stage's
    length and data order are the switch the arm names). Seconds per arm (one compose each).

    Raises:
        ValueError: an arm ``exp`` does not have, or a stage that does not compose.
    """
    base_arm = exp.arm(exp.baseline)
    base = flatten(compose_stage(exp, base_arm.overrides, steps, seed))
    out: dict[str, dict[str, list[Any]]] = {}
    for name in arms:
        arm = exp.arm(name)
        diff: dict[str, list[Any]] = {}
        for idx, (overrides, n) in enumerate(arm.stages(steps)):
            other = flatten(compose_stage(exp, stage_overrides(arm, idx, overrides), steps, seed))
            for key in sorted(set(base) | set(other)):
                a, b = base.get(key, "<absent>"), other.get(key, "<absent>")
                if a != b and not arm.names(key) and not base_arm.names(key) and not (idx > 0 and key == K.SHUFFLE):
                    diff[key] = [a, b]
        out[name] = diff
    return out


def continued_rows(n_rows: int, seed: int, skip: int, count: int, batch: int) -> list[int]:
    """The training-row indices verl's sampler draws after the first ``skip`` rows, ``count`` of them, in order.

    verl builds its training sampler with ``verl.trainer.ppo.utils.create_rl_sampler`` (``data.shuffle``: torchdata's
    ``RandomSampler`` seeded with ``data.seed``; a new permutation per pass) and its dataloader drops each pass's last
    partial batch (``drop_last=True``). This draws the same stream from the same function, so a second stage launched
    on these rows with ``data.shuffle=false`` sees exactly the prompts a single run would have seen after step
    ``skip / batch`` (the switch arm's confound, issue 57 item 6: its second launch restarted the data order).

    Raises:
        ValueError: ``n_rows`` < ``batch``, or ``skip`` / ``count`` not whole batches.
    """
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import create_rl_sampler

    if n_rows < batch or skip % batch or count % batch:
        raise ValueError(f"continued_rows: {n_rows} rows, skip {skip}, count {count}: expected whole batches of {batch}")
    sampler = create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": seed}), range(n_rows))
    per_pass = n_rows - n_rows % batch  # drop_last: each pass's last partial batch is not drawn
    stream: list[int] = []
    while len(stream) < skip + count:
        stream += list(iter(sampler))[:per_pass]
    return stream[skip:skip + count]


def write_stage_rows(train: Path, rows: Sequence[int], path: Path) -> Path:
    """``train``'s rows ``rows`` (indices, in that order, repeats kept) as the parquet file ``path``, atomically
    (:func:`rlec.io.atomic_write_parquet`; the bytes pandas' ``to_parquet(index=False)`` wrote)."""
    import pandas as pd
    import pyarrow as pa

    from rlec.io import atomic_write_parquet

    frame = pd.read_parquet(train).iloc[list(rows)].reset_index(drop=True)
    return atomic_write_parquet(path, pa.Table.from_pandas(frame, preserve_index=False))


def arm_errors(exp: Experiment, arms: list[str], steps: int) -> list[str]:
    """Each named arm's stages composed in-process as their launches compose them (the experiment's settings, the
    launch's own overrides of :func:`rlec.demo.verl_run.launcher_args`, the arm's, the stage's length) and checked by
    the rules every launch applies first (the early rule set and the algorithms' own,
    :func:`rlec.rules.checks.algorithm_overlay_rules`), and the stage's steps against the passes over its
    :attr:`~rlec.experiments.spec.Experiment.train_rows` (:func:`rlec.cluster.paths.steps_findings`: a full
    ``rlec_advantage`` run was refused by its launch's path check only after its warm start was built). Seconds,
    before any warm start or launch: a full ``passk``
    run once trained two arm-seeds (15 minutes) before its third arm's launch refused a key (``--check`` runs the
    whole ``DRY_RUN=1`` of each launch instead, with the model and the paths).

    Returns:
        One line per refusal (several for a stage refused on several keys), naming the arm, the stage of a two-stage
        arm, the key, the value and the rule; empty when every launch would pass these rules.

    Raises:
        ValueError: an arm ``exp`` does not have (names it).
    """
    from rlec.cluster.paths import steps_findings
    from rlec.rules.checks import algorithm_overlay_rules
    from rlec.run_config import RunConfig

    errors = []
    for arm in arms:
        for idx, (overrides, n) in enumerate(exp.arm(arm).stages(steps)):
            where = f"arm {arm!r}" + (f" stage {idx + 1}" if exp.arm(arm).then is not None else "")
            try:
                cfg = compose_stage(exp, stage_overrides(exp.arm(arm), idx, overrides), n)
            except ValueError as exc:
                errors.append(f"{where}: {exc}")
                continue
            run = RunConfig(cfg)
            errors += [f"{where}: {f}" for f in algorithm_overlay_rules(run) if f.level == "error"]
            # the launch's path check counts the written rows; the spec's count is known before any data is built
            errors += [f"{where}: {f}" for f in steps_findings(run, exp.train_rows) if f.level == "error"]
    return errors


def prepare_shared(out: Path, exp: Experiment) -> dict[str, Path]:
    """The warm start and the data every arm shares (each built once, reused when present)."""
    from rlec.demo import warm_start

    shared = out / "shared"
    model = warm_start.build(shared / "warm_start", pilot.warm_start_config(exp), progress=False)
    data = shared / "data"
    kind = data_kind(exp.data)
    if not (data / "train.parquet").is_file() and (summary := kind.write_data(data, exp)) is not None:
        log(summary)
    paths = {"model": model, "train": data / "train.parquet", "test": data / "test.parquet"}
    paths.update(pilot_data(exp, data))
    if kind.environments_test or (exp.heldout is not None and exp.heldout.data == "environments"):
        env = shared / "environments"
        if not (env / "test.parquet").is_file():
            from rlec.environments.testset import EnvTestConfig, prepare_environments

            prepare_environments(env, EnvTestConfig(environments=ENVIRONMENTS, difficulties=(0, 1, 2, 3), per_difficulty=16),
                                 tokenizer_path=str(model), progress=False)
        paths["test"] = env / "test.parquet"
    return paths


def pilot_data(exp: Experiment, data: Path) -> dict[str, Path]:
    """The pilot's training pool and the probe set, each written once into ``data`` (:mod:`rlec.experiments.pilot`).

    - ``train`` (``pool.parquet``), when the pilot file ``pilot_<name>.json`` of ``docs/results`` is committed: the kept
      prompts in the file's order, cycled to ``exp.train_rows`` (additions for ``data="binary"``, the pool's problems,
      generated again from their seeds, for ``data="pool"``: the data kind's
      :attr:`~rlec.experiments.pilot.PilotData.write_train`);
    - ``probe`` (``probe.parquet``), when the spec has a probe: held-out additions for ``data="binary"``; for
      ``data="pool"`` the pilot's probe candidates with their ``low_q`` flags (without a pilot file, the same prompts
      unflagged: :func:`rlec.experiments.pilot.write_pool_probe_set`): the kind's
      :attr:`~rlec.experiments.pilot.PilotData.write_probe`.

    Nothing for a data kind without a pilot (no entry in :data:`rlec.experiments.pilot.PILOTS`).
    """
    out: dict[str, Path] = {}
    kind = pilot.PILOTS.get(exp.data)
    if kind is None:
        return out
    path = pilot.pilot_path(exp.name)
    committed = pilot.read_pilot(path) if path.is_file() else None
    if committed is not None:
        out["train"] = data / "pool.parquet"
        if not out["train"].is_file():
            kind.write_train(committed, exp.train_rows, out["train"])
    if exp.probe is not None:
        out["probe"] = data / "probe.parquet"
        if not out["probe"].is_file():
            kind.write_probe(out["probe"], exp, committed)
    return out


def probe_overrides(exp: Experiment, shared: dict[str, Path]) -> list[str]:
    """The launch's ``rlec.probe.*`` overrides (:mod:`rlec.verl_plugin.probe`): the same probe file and schedule for every
    arm and seed; none without a probe set."""
    p = exp.probe
    if p is None or "probe" not in shared:
        return []
    return [f"rlec.probe.file={shared['probe'].resolve()}", f"rlec.probe.every={p.every}", f"rlec.probe.samples={p.samples}",
            f"rlec.probe.temperature={p.temperature}", *([f"rlec.probe.pass_k={p.pass_k}"] if p.pass_k is not None else [])]


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
                 limit: int | None = None, ray_address: str | None = None) -> Run:
    """Train (or resume, or reuse) one arm-seed and return its :class:`Run` (``limit``: held-out questions, None = all;
    ``ray_address``: the experiment's Ray cluster each launch connects to, :func:`rlec.cluster.ray_cluster.shared_cluster`;
    None: each launch starts its own)."""
    arm = exp.arm(arm_name)
    folder = out / arm.name / f"seed{seed}"
    done = folder / RUN_FILE
    if done.is_file():
        data = json.loads(done.read_text())
        return Run(arm.name, seed, data["metrics"], data["groups"], data["heldout"], data.get("prompts", []))
    from rlec.io import atomic_write_text

    base = [*(f"{k}={v}" for k, v in exp.settings.items()), *probe_overrides(exp, shared)]
    stages = arm.stages(steps)
    model, metrics, groups, prompts = shared["model"], [], [], []
    t0 = time.perf_counter()
    done_steps = 0
    for idx, (overrides, n) in enumerate(stages):
        stage = folder if len(stages) == 1 else folder / f"stage{idx + 1}"
        train = shared["train"]
        if idx > 0:  # the data order continues where the first stage stopped (continued_rows)
            batch = int(exp.settings[K.BATCH])
            train = stage / "train.parquet"
            if not train.is_file():
                import pandas as pd

                rows = len(pd.read_parquet(shared["train"], columns=[]))
                stage.mkdir(parents=True, exist_ok=True)
                write_stage_rows(shared["train"], continued_rows(rows, seed, done_steps * batch, n * batch, batch), train)
        if hf_model(stage, n) is None:
            log(f"{exp.name} {arm.name} seed{seed}: training {n} steps ({arm.what}) -> {stage}")
            launch(stage, [*base, *stage_overrides(arm, idx, overrides)], model=model, train=train, test=shared["test"],
                   steps=n, seed=seed, progress=log, ray_address=ray_address)
        offset = len(metrics)
        metrics += [{**row, "step": row["step"] + offset} for row in read_metrics(stage)]
        groups += read_groups(stage, n)
        prompts += read_group_prompts(stage, n)
        model = hf_model(stage, n)
        done_steps += n
    heldout = evaluate_heldout(exp, model, shared["test"], folder, seed, limit) if exp.heldout is not None else {}
    run = Run(arm.name, seed, metrics, groups, heldout, prompts)
    atomic_write_text(done, json.dumps({"arm": arm.name, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
                                        "metrics": metrics, "groups": groups, "heldout": heldout, "prompts": prompts}) + "\n")
    return run
