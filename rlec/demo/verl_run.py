"""One training run through the launcher users run: ``tools/run_megatron_rlec.sh`` with ``TRAINER=verl``.

Without CUDA that is verl's ``main_ppo`` on the CPU layout with rlec's plugins, the loop ``make run``
follows. The demo (:mod:`rlec.demo.pipeline`) and :mod:`rlec.experiments` train through it; what they
read back, each written by verl itself:

- per-step metrics: the run's ``<folder>/metrics.jsonl`` (:mod:`rlec.verl_plugin.metrics_file`: one
  object per step, fsynced, the steps after the resumed one dropped on resume);
- each response's score by prompt: verl's rollout dump (``trainer.rollout_data_dir`` =
  ``<folder>/rollouts``, ``<step>.jsonl`` with ``uid`` = ``<prompt>_<rollout>_<output>``);
- the trained weights as a Hugging Face folder: ``<folder>/hf_final`` (:data:`rlec.verl_report.FINAL_MODEL`,
  verl's mbridge export of the latest checkpoint; ``rlec_step.txt`` names its step).

A rerun on the same folder resumes from verl's last checkpoint (``RESUME=auto``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "tools" / "run_megatron_rlec.sh"
# the keys this module sets (one place; Hydra overrides of verl's config)
SEED = "data.seed"
TEST_FREQ = "trainer.test_freq"
SAVE_FREQ = "trainer.save_freq"
ROLLOUT_DUMP = "trainer.rollout_data_dir"


CHECKPOINT_EVERY = 5  # steps: an interrupted run resumes at most this many steps back (verl also saves the last step)


def launcher_args(folder: Path, overrides: Sequence[str], *, steps: int, seed: int | None = None) -> list[str]:
    """The launcher's Hydra overrides: seed, no validation, checkpoint cadence, the rollout dump, then ``overrides``."""
    return [*([f"{SEED}={seed}"] if seed is not None else []), f"{TEST_FREQ}=-1", f"{SAVE_FREQ}={min(steps, CHECKPOINT_EVERY)}",
            f"{ROLLOUT_DUMP}={(folder / 'rollouts').resolve()}", *overrides]


def launcher_env(folder: Path, *, model: Path, train: Path, test: Path, steps: int) -> dict[str, str]:
    """The launcher's environment: verl's trainer (``TRAINER=verl``), the output folder, model, data, steps, no final evaluation."""
    return {**os.environ, "TRAINER": "verl", "OUTPUT_DIR": str(folder.resolve()), "MODEL_PATH": str(model.resolve()),
            "TRAIN_FILES": str(train.resolve()), "VAL_FILES": str(test.resolve()), "STEPS": str(steps),
            "PYTHON": sys.executable, "RESUME": "auto",
            # the launcher's own end-of-run evaluation (rlec.verl_report): the callers evaluate themselves
            "EVAL_AT_END": "0"}


def check(folder: Path, overrides: Sequence[str], *, model: Path, train: Path, test: Path, steps: int) -> str | None:
    """``DRY_RUN=1`` of the launch (the resolved config validated, nothing started): None, or the verdict's last lines."""
    env = {**launcher_env(folder, model=model, train=train, test=test, steps=steps), "DRY_RUN": "1",
           "DRY_RUN_CONFIG": str((folder / "dry_run.yaml").resolve())}
    proc = subprocess.run(["bash", str(LAUNCHER), *launcher_args(folder, overrides, steps=steps)], env=env,
                          capture_output=True, text=True, cwd=REPO)
    return None if proc.returncode == 0 else "\n".join((proc.stdout + proc.stderr).splitlines()[-12:])


def launch(folder: Path, overrides: Sequence[str], *, model: Path, train: Path, test: Path, steps: int,
           seed: int | None = None, progress: Callable[[str], None] = print, ray_address: str | None = None) -> Path:
    """Train ``steps`` steps in ``folder`` (resuming a partial one); returns the final HF weights folder.

    ``progress`` gets a line each time a step's rollouts are dumped. The launcher's output goes to
    ``<folder>/launch.log`` (appended). ``ray_address``: a running Ray cluster's address the launch connects to
    (``RAY_ADDRESS``, :func:`rlec.cluster.ray_cluster.shared_cluster`); None: the launch starts its own. Ctrl-C
    (SIGINT to the process group) reaches the launcher too: its one line goes to the log, and this waits for it to end
    (its Ray job with it) before the ``KeyboardInterrupt`` goes on.

    Raises:
        RuntimeError: the launcher failed or wrote no HF weights at ``steps`` (names the log and its last lines).
    """
    folder.mkdir(parents=True, exist_ok=True)
    args = launcher_args(folder, overrides, steps=steps, seed=seed)
    logfile = folder / "launch.log"
    env = launcher_env(folder, model=model, train=train, test=test, steps=steps)
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    with open(logfile, "ab") as fh:
        proc = subprocess.Popen(["bash", str(LAUNCHER), *args], stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        done = -1
        try:
            while proc.poll() is None:
                time.sleep(5)
                now = len(list((folder / "rollouts").glob("*.jsonl"))) if (folder / "rollouts").is_dir() else 0
                if now != done:
                    done = now
                    progress(f"  {folder}: step {now}/{steps}")
        except KeyboardInterrupt:
            try:  # the launcher got the same SIGINT: it stops its Ray job and prints its line; a second Ctrl-C stops waiting
                proc.wait(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
            raise
    final = hf_model(folder, steps)
    if proc.returncode != 0 or final is None:
        tail = logfile.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"launch in {folder} failed (exit {proc.returncode}); log {logfile}:\n" + "\n".join(tail))
    return final


def hf_model(folder: Path, steps: int) -> Path | None:
    """The run's final HF weights (``<folder>/hf_final``) when they are those of step ``steps``, else None."""
    from rlec.verl_report import FINAL_MODEL

    path = folder / FINAL_MODEL
    try:
        step = int((path / "rlec_step.txt").read_text().strip())
    except (OSError, ValueError):
        return None
    return path if step == steps and (path / "config.json").is_file() else None


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """Per-step numeric metrics of the run in ``folder`` (``{"step": N, <verl metric>: value}``), steps in order;
    ``[]`` before its first step (:func:`rlec.report.read_metrics` of ``<folder>/metrics.jsonl``)."""
    from rlec.report import read_metrics as read_file

    path = folder / "metrics.jsonl"
    rows = read_file(path) if path.is_file() else []
    return [{**{k: v for k, v in row.items() if isinstance(v, (int, float))}, "step": int(row["step"])} for row in rows]


def read_groups(folder: Path, steps: int) -> list[list[list[float]]]:
    """Per step 1..``steps``, each prompt's response scores from verl's rollout dump (``[]`` for a step not dumped)."""
    return [[scores for scores, _ in step] for step in _dump_groups(folder, steps)]


def read_group_prompts(folder: Path, steps: int) -> list[list[str]]:
    """Per step 1..``steps``, the prompt text (the dump's ``input``) of each group of :func:`read_groups`, same order."""
    return [[prompt for _, prompt in step] for step in _dump_groups(folder, steps)]


def _dump_groups(folder: Path, steps: int) -> list[list[tuple[list[float], str]]]:
    """Per step, ``(scores, prompt text)`` of each prompt's group in verl's rollout dump, in first-seen order."""
    out = []
    for step in range(1, steps + 1):
        path = folder / "rollouts" / f"{step}.jsonl"
        groups: dict[str, tuple[list[float], str]] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                uid = str(row["uid"]).rsplit("_", 2)[0]
                groups.setdefault(uid, ([], str(row.get("input", ""))))[0].append(float(row["score"]))
        out.append(list(groups.values()))
    return out
