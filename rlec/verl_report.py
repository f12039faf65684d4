"""What a run of verl's trainer on CPU shows and leaves behind: ``make run``.

    python -m rlec.verl_report --config-path megatron_configs --config-name rlec [overrides]
    python -m rlec.verl_report --launch-check --launch-dir DIR ... -- --config-path ... [overrides]   # the launcher

takes exactly the arguments of ``python -m rlec.cluster.main_ppo`` (verl's ``main_ppo``, and its
``--launch-check`` prefix: :func:`rlec.cluster.main_ppo.launch_check`) and runs it; the launcher
(``tools/run_megatron_rlec.sh`` without CUDA) starts this entry instead. In this driver
process :func:`run_with_report` wraps verl's ``main`` body; the trainer itself runs in Ray actors,
untouched. Around it:

- **quiet console**: the driver's stdout and stderr (file descriptors 1 and 2, so also what Ray forwards
  from every worker, Hydra's and Ray's own logs and C-level messages) go to the full log
  ``RLEC_VERL_LOG`` (the launcher: ``<OUTPUT_DIR>/launches/<time>/verl.log``); the console shows a
  progress bar and one line per step read from ``metrics.jsonl``
  (:class:`rlec.verl_plugin.metrics_file.MetricsFileMixin`). A failed run prints the log's last lines
  and its path. ``RLEC_VERBOSE=1`` shows everything, as before.
- **at the end** (also for a rerun that finds the run complete: the rerun resumes with verl's
  ``resume_mode=auto``, and the summary covers every step in ``metrics.jsonl``): the step table with
  the enabled algorithms' columns, the time split in verl's ``timing_s`` phases, the curves
  ``<OUTPUT_DIR>/training_curves.png`` (:func:`rlec.report.print_training_summary`);
- **the trained model as a Hugging Face folder at** ``<OUTPUT_DIR>/hf_final`` (:data:`FINAL_MODEL`):
  verl's own export, the ``model/huggingface`` folder mbridge writes into
  the latest checkpoint (``global_step_<N>/actor/model/huggingface``: weights, ``config.json``,
  tokenizer), hard-linked (copied across file systems) into a fresh folder that a later checkpoint
  rotation cannot remove; ``hf_final/rlec_step.txt`` names the step;
- **the final evaluation** of ``hf_final`` across the target grid (:func:`rlec.report.evaluate_final`:
  ``<OUTPUT_DIR>/eval/records.jsonl``, the metrics table and ``<OUTPUT_DIR>/eval/metrics``), unless
  ``EVAL_AT_END=0``.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rlec.algorithms import registry
from rlec.config_base import TRACKER
from rlec.metrics_log import read_metrics_from
from rlec.report import METRICS_FILE, format_cell

FINAL_MODEL = "hf_final"
LOG_VAR = "RLEC_VERL_LOG"

__all__ = ["FINAL_MODEL", "LOG_VAR", "StepWatcher", "export_final_model", "main", "run_with_report", "step_line"]


# the generic columns of the line per step; each enabled algorithm's come before the step's time
STEP_LINE_COLUMNS = (("reward", "rlec/reward/mean", "{:+.3f}"), ("b", "rlec/b", "{:.2f}"),
                     ("coverage", "rlec/coverage", "{:.2f}"), ("accuracy", "rlec/accuracy", "{:.2f}"),
                     ("pg_loss", "actor/pg_loss", "{:+.4f}"), ("grad_norm", "actor/grad_norm", "{:.3f}"))
STEP_TIME_COLUMN = ("step", "timing_s/step", "{:.1f}s")


def step_line(record: dict[str, Any], total: int | None) -> str:
    """One compact console line for a step's record (verl's metric names; missing ones left out): the generic
    columns, each algorithm's first table columns (:func:`rlec.algorithms.registry.step_line_columns`), the step's time."""
    parts = [f"step {record.get('step')}" + (f"/{total}" if total else "")]
    for label, key, fmt in (*STEP_LINE_COLUMNS, *registry.step_line_columns(record), STEP_TIME_COLUMN):
        value = record.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{label} {format_cell(fmt, value)}")
    return "  ".join(parts)


class StepWatcher(threading.Thread):
    """Follows ``metrics.jsonl`` from the driver: a progress bar and :func:`step_line` per new step.

    The trainer rewrites the file at train begin (a new inode, steps after the resumed one dropped); the
    watcher waits for that rewrite, takes the steps it then holds as done before this launch, and shows
    every later line (a step lasts longer than ``poll_s``, so the first step is never in that first read).

    Args:
        path: the ``metrics.jsonl`` file.
        total: the run's ``trainer.total_training_steps`` (None: unknown).
        stream: where to write (the console).
        poll_s: seconds between reads.
    """

    def __init__(self, path: Path, total: int | None, stream: TextIO, poll_s: float = 0.5) -> None:
        super().__init__(daemon=True, name="rlec-step-watcher")
        self.path, self.total, self.stream, self.poll_s = Path(path), total, stream, poll_s
        self._halt = threading.Event()
        self._inode = (self._signature() or (None,))[0]  # the file the trainer will replace (None: none yet)
        self.shown: list[int] = []

    def _signature(self) -> tuple[int, int, int] | None:
        """(inode, size, mtime ns) of the file, None while it is absent: the file is read only when this changes,
        and then only its new lines (a poll every ``poll_s`` re-parsing the whole file cost 0.13 CPU-s a parse at
        800 steps, twice a second, growing with the run)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def stop(self) -> None:
        """Show the lines written so far, then end the thread."""
        self._halt.set()
        self.join(timeout=10)

    def run(self) -> None:
        try:
            self._follow()
        except OSError:  # the console is gone (a closed terminal or pipe): nothing left to show, the run goes on
            pass

    def _follow(self) -> None:
        from tqdm import tqdm

        bar = None
        done: set[int] | None = None
        seen: tuple[int, int, int] | None = None
        offset = 0  # the bytes of the file already parsed (complete lines)
        while True:
            stopping = self._halt.is_set()
            signature = self._signature()
            inode = None if signature is None else signature[0]
            if (inode is not None and (inode != self._inode or done is not None)
                    and (signature != seen or stopping)):
                if seen is None or inode != seen[0] or signature[1] < offset:
                    offset = 0  # first read, or the trainer rewrote the file (another inode, or truncated)
                seen = signature
                try:
                    records, offset = read_metrics_from(self.path, offset)
                except FileNotFoundError:
                    records = []
                if done is None:  # the trainer's rewrite: what it holds was trained before this launch
                    done = {int(r["step"]) for r in records}
                    start = max(done, default=0)
                    bar = tqdm(total=self.total, initial=start, desc="rlec verl", file=self.stream, dynamic_ncols=True)
                    if start:
                        bar.write(f"resumed after step {start}", file=self.stream)
                for record in records:
                    step = int(record["step"])
                    if step in done:
                        continue
                    done.add(step)
                    self.shown.append(step)
                    bar.write(step_line(record, self.total), file=self.stream)
                    reward = record.get("rlec/reward/mean")
                    bar.set_postfix(reward="-" if reward is None else f"{reward:.3f}")
                    bar.update(1)
            if stopping:
                break
            self._halt.wait(self.poll_s)
        if bar is not None:
            bar.close()


def export_final_model(out_dir: Path) -> tuple[Path, int]:
    """``<out_dir>/hf_final``: the latest checkpoint's Hugging Face folder (verl's mbridge export).

    Returns:
        (the folder, the checkpoint's step).

    Raises:
        FileNotFoundError: no ``latest_checkpointed_iteration.txt`` or no ``model/huggingface`` folder in
            the checkpoint it names (the message names the path and the setting that writes it).
    """
    from verl.utils.megatron_utils import get_hf_model_checkpoint_path

    tracker = Path(out_dir) / TRACKER
    if not tracker.is_file():
        raise FileNotFoundError(f"{tracker}: missing; the run saved no checkpoint (trainer.save_freq), so there is "
                                "no trained model to export")
    step = int(tracker.read_text().strip())
    source = Path(get_hf_model_checkpoint_path(str(Path(out_dir) / f"global_step_{step}" / "actor")))
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"{source}: no Hugging Face model in the latest checkpoint (verl writes it with "
                                "mbridge when actor_rollout_ref.actor.megatron.use_dist_checkpointing is false, or "
                                "with 'hf_model' in actor_rollout_ref.actor.checkpoint.save_contents)")
    final = Path(out_dir) / FINAL_MODEL
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, partial, copy_function=link)
    (partial / "rlec_step.txt").write_text(f"{step}\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    return final, step


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_with_report(config: Any, body: Callable[[Any], None]) -> None:
    """Run ``body(config)`` (verl's ``main``) with the quiet console, then the summary, ``hf_final`` and the evaluation.

    Raises:
        whatever ``body`` raises (after the log's last lines are printed); :class:`rlec.cluster.main_ppo.RunStopped`
        (one line, exit 2) when the final evaluation fails or is refused (another process writes its records).
    """
    from rlec.cluster.main_ppo import RunStopped
    from rlec.flags import flag
    from rlec.report import evaluate_final, print_training_summary, quiet_third_party, verbose
    from rlec.run_config import RunConfig

    loud = verbose()
    eval_at_end = flag("EVAL_AT_END", default=True)
    out_dir = Path(str(config.trainer.default_local_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    total = config.trainer.get("total_training_steps")
    total = int(total) if total else None
    log_path = Path(os.environ.get(LOG_VAR) or out_dir / "verl.log")
    saved: tuple[int, int] | None = None
    watcher = console = None
    if not loud:
        quiet_third_party()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = (os.dup(1), os.dup(2))
        console = os.fdopen(os.dup(saved[0]), "w", buffering=1)
        print(f"[rlec] verl's trainer starting (Ray, TransferQueue, the Megatron worker and the rollout server: "
              f"about a minute); its full log: {log_path}", file=console, flush=True)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        watcher = StepWatcher(out_dir / METRICS_FILE, total, console)
        watcher.start()
    t0 = time.perf_counter()
    failed = False
    try:
        body(config)
    except (RunStopped, KeyboardInterrupt):  # a full disk, a deliberate stop, Ctrl-C: one line each, printed by
        raise                                # rlec.cluster.main_ppo.main once the console is back
    except BaseException:
        failed = True
        raise
    finally:
        if watcher is not None:
            watcher.stop()
        if saved is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            console.close()
            if failed:
                print(f"[rlec] verl's trainer stopped with an error; the last lines of {log_path}:\n{_tail(log_path)}\n"
                      f"[rlec] (full log: {log_path}; RLEC_VERBOSE=1 shows it live)", file=sys.stderr, flush=True)
    print(f"[rlec] verl's trainer finished in {time.perf_counter() - t0:.0f} s", flush=True)
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # the workers' memory and cores, before the evaluation
    except ImportError:
        pass
    print_training_summary(out_dir / METRICS_FILE, title="verl's trainer")
    save_freq = int(config.trainer.get("save_freq", -1) or -1)
    if save_freq <= 0 and not (out_dir / TRACKER).is_file():  # checkpoints off by the caller: nothing to export
        print(f"no checkpoint saved (trainer.save_freq={save_freq}): no {FINAL_MODEL}, no final evaluation; "
              f"metrics in {out_dir / METRICS_FILE}", flush=True)
        return
    final, step = export_final_model(out_dir)
    print(f"final HF weights (step {step}) in {final}; metrics in {out_dir / METRICS_FILE}", flush=True)
    model_path = Path(str(config.actor_rollout_ref.model.path))
    random_model = model_path.resolve() == (out_dir / "tiny_model").resolve()
    if random_model:
        print("\n(random tiny model: rewards are noise; the scripted share of each group is what moves the loss)")
    if eval_at_end and evaluate_final(RunConfig(config), out_dir, final, random_model=random_model):
        raise RunStopped(f"rlec.verl_report: error: the final evaluation of {final} failed (the line above says why); "
                         f"the training is complete: rerun the same command to evaluate again")


def main() -> None:
    """CLI: ``python -m rlec.verl_report [hydra arguments]`` = ``rlec.cluster.main_ppo`` inside :func:`run_with_report`."""
    from rlec.report import quiet_third_party

    try:
        quiet_third_party()  # before verl is imported: its import-time warnings and INFO lines
    except ValueError as exc:  # a bad RLEC_VERBOSE spelling: one line, exit 2
        print(f"rlec.verl_report: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    from rlec.cluster import main_ppo

    main_ppo.main(wrap=run_with_report)


if __name__ == "__main__":
    main()
