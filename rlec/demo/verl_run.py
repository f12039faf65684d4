"""One training run through the launcher users run: ``tools/run_megatron_rlec.sh`` with ``TRAINER=verl``.

Without CUDA that is verl's ``main_ppo`` on the CPU layout with rlec's plugins, the loop ``make run``
follows. The demo (:mod:`rlec.demo.pipeline`) and :mod:`rlec.experiments` train through it; what they
read back, each written by verl itself:

- per-step metrics: verl's file logger (``trainer.logger`` with ``file``), one file per launch under
  ``<folder>/metrics/`` (a later launch, a resume, wins for the steps it repeats); a ``metrics.jsonl``
  the launcher writes itself is read too;
- each response's score by prompt: verl's rollout dump (``trainer.rollout_data_dir`` =
  ``<folder>/rollouts``, ``<step>.jsonl`` with ``uid`` = ``<prompt>_<rollout>_<output>``);
- the trained weights as a Hugging Face folder: checkpoint contents with ``hf_model``, written by
  mbridge at ``global_step_<N>/actor/model/huggingface``.

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
LOGGER = "trainer.logger"
ROLLOUT_DUMP = "trainer.rollout_data_dir"
SAVE_CONTENTS = "actor_rollout_ref.actor.checkpoint.save_contents"
FILE_LOGGER_PATH = "++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"


CHECKPOINT_EVERY = 5  # steps: an interrupted run resumes at most this many steps back (verl also saves the last step)


def launcher_args(folder: Path, overrides: Sequence[str], *, steps: int, seed: int | None = None) -> list[str]:
    """The launcher's Hydra overrides: seed, no validation, checkpoints (with HF weights), logs, then ``overrides``."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return [*([f"{SEED}={seed}"] if seed is not None else []), f"{TEST_FREQ}=-1", f"{SAVE_FREQ}={min(steps, CHECKPOINT_EVERY)}",
            f"{LOGGER}=[console,file]", f"{ROLLOUT_DUMP}={(folder / 'rollouts').resolve()}",
            f"{FILE_LOGGER_PATH}={(folder / 'metrics' / f'{stamp}.jsonl').resolve()}",
            f"{SAVE_CONTENTS}=[model,optimizer,extra,hf_model]", *overrides]


def launcher_env(folder: Path, *, model: Path, train: Path, test: Path, steps: int) -> dict[str, str]:
    """The launcher's environment: verl's trainer (``TRAINER=verl``), the output folder, model, data, steps, no final evaluation."""
    return {**os.environ, "TRAINER": "verl", "OUTPUT_DIR": str(folder.resolve()), "MODEL_PATH": str(model.resolve()),
            "TRAIN_FILES": str(train.resolve()), "VAL_FILES": str(test.resolve()), "STEPS": str(steps),
            "PYTHON": sys.executable, "RESUME": "auto",
            # the launcher's own end-of-run evaluation (branch verlrun's report): the callers evaluate themselves
            "EVAL_AT_END": "0"}


def check(folder: Path, overrides: Sequence[str], *, model: Path, train: Path, test: Path, steps: int) -> str | None:
    """``DRY_RUN=1`` of the launch (the resolved config validated, nothing started): None, or the verdict's last lines."""
    env = {**launcher_env(folder, model=model, train=train, test=test, steps=steps), "DRY_RUN": "1",
           "DRY_RUN_CONFIG": str((folder / "dry_run.yaml").resolve())}
    proc = subprocess.run(["bash", str(LAUNCHER), *launcher_args(folder, overrides, steps=steps)], env=env,
                          capture_output=True, text=True, cwd=REPO)
    return None if proc.returncode == 0 else "\n".join((proc.stdout + proc.stderr).splitlines()[-12:])


def launch(folder: Path, overrides: Sequence[str], *, model: Path, train: Path, test: Path, steps: int,
           seed: int | None = None, progress: Callable[[str], None] = print) -> Path:
    """Train ``steps`` steps in ``folder`` (resuming a partial one); returns the final HF weights folder.

    ``progress`` gets a line each time a step's rollouts are dumped. The launcher's output goes to
    ``<folder>/launch.log`` (appended).

    Raises:
        RuntimeError: the launcher failed or wrote no HF weights at ``steps`` (names the log and its last lines).
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics").mkdir(exist_ok=True)
    args = launcher_args(folder, overrides, steps=steps, seed=seed)
    logfile = folder / "launch.log"
    with open(logfile, "ab") as fh:
        proc = subprocess.Popen(["bash", str(LAUNCHER), *args], stdout=fh, stderr=subprocess.STDOUT, cwd=REPO,
                                env=launcher_env(folder, model=model, train=train, test=test, steps=steps))
        done = -1
        while proc.poll() is None:
            time.sleep(5)
            now = len(list((folder / "rollouts").glob("*.jsonl"))) if (folder / "rollouts").is_dir() else 0
            if now != done:
                done = now
                progress(f"  {folder}: step {now}/{steps}")
    final = hf_model(folder, steps)
    if proc.returncode != 0 or final is None:
        tail = logfile.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"launch in {folder} failed (exit {proc.returncode}); log {logfile}:\n" + "\n".join(tail))
    return final


def hf_model(folder: Path, steps: int) -> Path | None:
    """The HF weights verl wrote at step ``steps`` (``global_step_<steps>/actor/model/huggingface``), or None."""
    path = folder / f"global_step_{steps}" / "actor" / "model" / "huggingface"
    return path if (path / "config.json").is_file() else None


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """Per-step numeric metrics of ``folder``'s launches, steps in order (``{"step": N, <verl metric>: value}``).

    Reads ``<folder>/metrics.jsonl`` (flat rows) when present, then verl's file-logger files
    ``<folder>/metrics/*.jsonl`` (``{"step", "data"}`` rows) in launch order: a later row for a step
    replaces an earlier one; a line cut by a kill is skipped.
    """
    rows: dict[int, dict[str, Any]] = {}
    flat = folder / "metrics.jsonl"
    files = sorted((folder / "metrics").glob("*.jsonl")) if (folder / "metrics").is_dir() else []
    for path in ([flat] if flat.is_file() else []) + files:
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
                step = int(row["step"])
            except (ValueError, KeyError, TypeError):
                continue
            data = row.get("data", row)
            rows[step] = {**{k: v for k, v in data.items() if isinstance(v, (int, float))}, "step": step}
    return [rows[s] for s in sorted(rows)]


def read_groups(folder: Path, steps: int) -> list[list[list[float]]]:
    """Per step 1..``steps``, each prompt's response scores from verl's rollout dump (``[]`` for a step not dumped)."""
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
