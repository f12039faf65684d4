"""Compose, validate and summarise rlec's verl config before a cluster job starts (``DRY_RUN=1``).

    python -m rlec.cluster.config_check [--print] [--output FILE] [--skip-path-checks] [layout=...] [precision=...] [hydra overrides...]

1. composes ``megatron_configs/rlec.yaml`` through Hydra on top of verl's own ``ppo_trainer``
   config with ``model_engine=megatron`` (the exact config ``python -m verl.trainer.main_ppo``
   would run, overrides included);
2. runs verl's own checks: ``validate_config`` (as ``main_ppo`` calls it) and the conversion of
   the algorithm, rollout, reward and (when the model folder is on this machine) model sections
   to verl's dataclasses, whose ``__post_init__`` validate them;
3. runs rlec's checks (:mod:`rlec.rules.checks`): parallel sizes against the model shape and
   the world size, vLLM rollout constraints (FP8 blocks included), batch divisibility, plugin
   wiring, per-GPU memory;
4. checks the paths the run reads and writes (:mod:`rlec.cluster.paths`: model folder, train
   and validation parquet files, checkpoint folder) unless ``--skip-path-checks``; with
   ``--check-checkpoint-folder`` a checkpoint folder that cannot be written is refused first, in one
   ``error:`` line, exit 2, whether or not the other paths are checked;
5. refuses resuming checkpoints written under another layout or with settings that change what
   the run optimises (:mod:`rlec.rules.resume`), and with ``--record-layout`` (the launcher,
   after every check passed) records this launch's layout, and the settings of a launch that starts
   a run, beside the checkpoints.

It prints a short verdict (model, layout, memory of both phases, paths, verl's checks, result);
verl's own console output is kept back unless ``--verbose``. The resolved config is written to
``--output`` (only when the checks pass) and printed with ``--print``.

The model shape comes from ``<actor_rollout_ref.model.path>/config.json`` or, when that folder
is not here (a login node), from ``megatron_configs/model/<rlec.check.model_shape>.json``.
Exit status 0 when nothing is an error, 1 otherwise (nothing written), 2 for unusable input: a config
that does not compose, or a setting the early rule set refuses (:mod:`rlec.rules.settings_rules`:
one line ``refused: ERROR [<key>] <value> <rule>`` each, before any other check or write).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rlec.algorithms import registry
from rlec.layout import Finding
from rlec.rules.memory import MemoryEstimate
from rlec.cluster.paths import checkpoint_folder_findings, path_findings
from rlec.rules.resume import (fresh_start_findings, layout_change_findings, live_writer_findings, record_layout, record_run,
                                 resume_setting_findings)
from rlec.rules.checks import check_layout, verl_algorithm_section
from rlec.rules.settings_rules import override_rules, settings_rules
from rlec.model_shape import ModelShape
from rlec.rules.verl_keys import layout_of
from rlec.config import CLUSTER_CONFIG, CONFIG_DIR, compose
from rlec.io import atomic_write_text, held_back_console
from rlec.run_config import RunConfig

SHAPES_DIR = CONFIG_DIR / "model"

__all__ = ["layout_name", "load_model_config", "main", "run_checks", "verl_checks"]


def layout_name(overrides: Sequence[str], config_dir: Path = CONFIG_DIR, config_name: str = CLUSTER_CONFIG) -> str:
    """The layout a launch composes: the last ``layout=`` override, else the primary config's default."""
    for item in reversed(list(overrides)):
        key, _, value = item.lstrip("+~").partition("=")
        if key == "layout" and value:
            return value
    try:
        for line in (Path(config_dir) / f"{config_name}.yaml").read_text().splitlines():
            if line.strip().startswith("- layout:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unnamed"


def load_model_config(run: RunConfig) -> tuple[dict[str, Any], str, bool]:
    """The model's ``config.json`` dict, where it came from, and whether the model folder is here
    (``rlec.check.model_shape`` when not; ``run``: the caller's :class:`rlec.run_config.RunConfig`).

    Raises:
        FileNotFoundError: neither the model folder nor the named shape file exists.
        ValueError: the file is not valid JSON (names the file).
    """
    model_dir = Path(os.path.expanduser(str(run.keys.model_path)))
    candidates = [(model_dir / "config.json", True)]
    shape_name = run.rlec.check_.model_shape
    if shape_name:
        candidates.append((SHAPES_DIR / f"{shape_name}.json", False))
    for path, is_model in candidates:
        if path.is_file():
            try:
                return json.loads(path.read_text()), str(path), is_model
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not valid JSON ({exc})") from None
    tried = ", ".join(str(p) for p, _ in candidates)
    raise FileNotFoundError(f"no model shape: tried {tried}; set MODEL_PATH or rlec.check.model_shape")


@contextlib.contextmanager
def _kept_back(verbose: bool) -> Iterator[None]:
    """Hold back what verl prints (progress lines, accelerator warnings) unless ``verbose``
    (:func:`rlec.io.held_back_console`: handlers created meanwhile keep the real stderr)."""
    if verbose:
        with contextlib.redirect_stdout(sys.stderr):  # stdout is for --print
            yield
        return
    with held_back_console():
        yield


def verl_checks(run: RunConfig, with_model: bool, verbose: bool = False) -> tuple[list[Finding], list[str]]:
    """verl's own validation of a composed config; never raises for a bad config.

    Args:
        run: the caller's :class:`rlec.run_config.RunConfig` (its verl keys already read).
        with_model: also build verl's model config (needs the model folder on this machine).
        verbose: let verl's console output through (to stderr); default: held back.

    Returns:
        ``(findings, passed)``: one error per failing step (its exception message) and the
        names of the steps that passed.
    """
    with _kept_back(verbose):
        from verl.trainer.ppo.reward import resolve_reward_manager_cls
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.import_utils import import_external_libs

    modules = str((run.keys.env_vars or {}).get("VERL_USE_EXTERNAL_MODULES") or "")
    cfg = copy.deepcopy(run.tree)  # verl's steps may write into the tree they are given
    steps: list[tuple[str, Callable[[], Any]]] = [
        # what `import verl` does in every Ray worker given the config's runtime env
        ("VERL_USE_EXTERNAL_MODULES", lambda: import_external_libs([m for m in modules.split(",") if m])),
        ("validate_config", lambda: validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))),
        ("algorithm", lambda: omega_conf_to_dataclass(verl_algorithm_section(cfg.algorithm))),
        ("actor_rollout_ref.rollout", lambda: omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)),
        ("rollout.checkpoint_engine", lambda: omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)),
        # verl 0.9.1 cannot build RewardConfig (RewardManagerConfig.__post_init__ calls a missing
        # BaseConfig.__post_init__) and never does; it resolves the manager class like this:
        ("reward_manager", lambda: resolve_reward_manager_cls(cfg)),
        ("trainer.v1.trainer_mode", lambda: get_trainer_cls(cfg.trainer.v1.trainer_mode)),
    ]
    if with_model:
        steps.append(("actor_rollout_ref.model", lambda: omega_conf_to_dataclass(cfg.actor_rollout_ref.model)))
    findings, passed = [], []
    for name, step in steps:
        try:
            with _kept_back(verbose):
                step()
            passed.append(name)
        except Exception as exc:  # verl raises AssertionError, ValueError, TypeError, ...
            findings.append(Finding("error", f"verl:{name}", f"{type(exc).__name__}: {exc}"))
    return findings, passed


def run_checks(
    run: RunConfig, gpu_memory_gib: float | None = None, *, check_paths: bool = True, verbose: bool = False,
    layout: str = "unnamed", wait_previous_s: float = 0.0,
) -> tuple[list[Finding], MemoryEstimate | None, dict]:
    """verl's and rlec's checks of a composed config, and (``check_paths``) its paths (``run``: the caller's
    :class:`rlec.run_config.RunConfig`).

    ``layout`` names the launch's layout in the refusal of a layout change (:mod:`rlec.rules.resume`),
    checked whenever the checkpoint folder is on this machine. ``wait_previous_s``: how long to wait
    for the processes a killed launch into the same folder left behind before refusing
    (:func:`rlec.rules.resume.live_writer_findings`; the launcher's real launch waits, DRY_RUN not).

    The early rule set (:func:`rlec.rules.settings_rules.settings_rules`) runs first; when it
    refuses a setting, nothing else is checked (no paths, no model, no verl conversion).

    Returns:
        ``(findings, memory estimate or None, context)``; ``context`` holds what the report
        prints (shape source, verl steps passed, GPU memory, path summaries or None when skipped,
        and ``run``, the :class:`rlec.run_config.RunConfig` checked, for :func:`algorithms_line`).
    """
    cfg = run.tree  # the readers that take the tree (the resume rules)
    early = settings_rules(run)
    if early:
        return early, None, {"paths": [], "run": run}
    settings = run.rlec
    path_errors, path_summaries = path_findings(run) if check_paths else ([], None)
    path_errors += (layout_change_findings(cfg, layout) + resume_setting_findings(cfg) + fresh_start_findings(cfg)
                    + live_writer_findings(cfg, wait_previous_s))
    try:
        hf_config, source, is_model = load_model_config(run)
        shape = ModelShape.from_hf_config(hf_config, source)
    except (FileNotFoundError, ValueError) as exc:
        return path_errors + [Finding("error", "model", str(exc))], None, {"paths": path_summaries, "run": run}
    findings, passed = verl_checks(run, with_model=is_model, verbose=verbose)
    gib = float(gpu_memory_gib or settings.check_.gpu_memory_gib)
    fraction = settings.check_.memory_fraction
    from rlec.megatron.fields import config_field_names  # the names only: no model built

    rlec_findings, est = check_layout(run, shape, gib, memory_fraction=fraction,
                                      hf_config=hf_config if is_model else None, megatron_fields=config_field_names())
    context = {"shape": shape, "source": source, "verl_passed": passed, "verl_steps": len(passed) + len(findings),
               "gpu_memory_gib": gib, "fraction": fraction, "paths": path_summaries, "run": run}
    return path_errors + findings + rlec_findings, est, context


def algorithms_line(run: RunConfig) -> str:
    """The algorithms the config enables, with their main figures (the verdict's ``algo`` line; ``run``: the caller's
    :class:`rlec.run_config.RunConfig`).

    RLEC always (advantage estimator, the b schedule), then each enabled algorithm's own part
    (:func:`rlec.algorithms.registry.verdicts`), in registry order.
    """
    est = str(run.keys.adv_estimator if run.keys.adv_estimator is not None else "grpo")
    norm = "" if run.keys.norm_adv_by_std_in_grpo else ", mean-only"
    schedule = run.rlec.schedule
    end = schedule.end_step
    parts = [f"RLEC (b {schedule.start_value} -> {schedule.end_value} "
             f"by step {end if end is not None else 'the last'}; advantage {est}{norm})"]
    return "algo    " + " | ".join(parts + registry.verdicts(run))


def report(findings: list[Finding], est: MemoryEstimate | None, context: dict, cfg: Any,
           config_note: str | None = None) -> str:
    """The verdict: model, layout, memory per GPU, paths, verl's checks, findings, result."""
    lay = layout_of(cfg)
    lines = []
    if context.get("shape"):
        shape = context["shape"]
        lines.append(f"model   {shape.model_type}: {shape.total_params() / 1e9:.2f}B parameters "
                     f"({shape.active_params() / 1e9:.2f}B active), shape from {context['source']}")
    lines.append(algorithms_line(context["run"] if "run" in context else RunConfig(cfg)))  # a context run_checks did not make
    quant = f" {lay.rollout_quantization}" if lay.rollout_quantization else ""
    lines.append(f"layout  {lay.world} GPUs: TP {lay.tp} PP {lay.pp} CP {lay.cp} DP {lay.dp} | EP {lay.ep} "
                 f"ETP {lay.expert_tp} | rollout TP {lay.rollout_tp} DP {lay.rollout_dp} EP {lay.rollout_ep}{quant}")
    if est is not None:
        g, gib = est.as_gib(), context["gpu_memory_gib"]
        lines.append(f"memory  update: params {g['params']} + grads {g['grads']} + optimizer {g['optimizer']} "
                     f"+ activations {g['activations']} + logits {g['logits']} = {g['train_total']} GiB "
                     f"of {context['fraction'] * gib:.0f}")
        lines.append(f"        rollout: Megatron left {g['rollout_resident']} + vLLM {g['rollout_share']} = "
                     f"{g['rollout_total']} GiB of {gib:.0f} (vLLM weights {g['vllm_weights']}, KV cache "
                     f"{g['kv_cache']} GiB = {est.kv_cache / max(est.kv_bytes_per_token, 1) / 1e6:.2f}M tokens)")
    paths = context.get("paths")
    if paths is None:
        lines.append("paths   SKIPPED (--skip-path-checks / SKIP_PATH_CHECKS=1): model folder, data files and "
                     "checkpoint folder not checked")
    elif paths:
        lines.append("paths   " + "; ".join(paths))
    if "verl_passed" in context:
        passed = context["verl_passed"]
        lines.append(f"verl    {len(passed)} of {context['verl_steps']} checks passed"
                     f"{' (' + ', '.join(passed) + ')' if passed else ''}")
    lines.extend(str(f) for f in findings)
    if config_note:
        lines.append(f"config  {config_note}")
    errors = sum(f.level == "error" for f in findings)
    lines.append(f"result  {'OK' if not errors else f'{errors} error(s): the run would fail'}")
    return "\n".join(lines)


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds, at least 0 (RLEC_WAIT_PREVIOUS_S)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of seconds >= 0 (RLEC_WAIT_PREVIOUS_S)")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m rlec.cluster.config_check", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides, e.g. layout=qwen3_30b_a3b_1x8 precision=fp8 data.train_batch_size=128")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR,
                        help="folder of rlec.yaml (default: %(default)s)")
    parser.add_argument("--config-name", default=CLUSTER_CONFIG, help="primary config (default: %(default)s)")
    parser.add_argument("--print", action="store_true", help="print the resolved config (YAML) to stdout")
    parser.add_argument("--output", type=Path,
                        help="write the resolved config to this file (atomically; only when the checks pass)")
    parser.add_argument("--skip-path-checks", action="store_true",
                        help="do not check the model folder, data files and checkpoint folder (they exist only on "
                             "the cluster); the report says they were skipped")
    parser.add_argument("--check-checkpoint-folder", action="store_true",
                        help="with --skip-path-checks: still refuse a checkpoint folder (trainer.default_local_dir) that "
                             "cannot be written, in one line, exit 2, before any other check (the launcher, before it "
                             "builds the tiny model and the sample data there)")
    parser.add_argument("--record-layout", action="store_true",
                        help="when every check passes, record the layout beside the checkpoints "
                             "(trainer.default_local_dir/rlec_layout.json), as the launcher does; the next launch "
                             "refuses another layout")
    parser.add_argument("--wait-previous", type=_seconds, default=0.0, metavar="SECONDS",
                        help="wait up to SECONDS for the processes a killed launch into the same checkpoint folder "
                             "left behind (Ray's trainer and workers) to end before refusing (default: %(default)s)")
    parser.add_argument("--gpu-memory-gib", type=float, help="GPU memory (default: rlec.check.gpu_memory_gib)")
    parser.add_argument("--verbose", action="store_true", help="let verl's console output and Python warnings through")
    args = parser.parse_intermixed_args(argv)  # options may follow Hydra overrides
    if not args.verbose:
        warnings.simplefilter("ignore")

    from omegaconf import OmegaConf

    if args.output is not None and args.output.exists() and not args.output.is_file():
        print(f"rlec.cluster.config_check: --output {args.output}: exists and is not a regular file", file=sys.stderr)
        return 2
    try:
        with _kept_back(args.verbose):  # Hydra imports verl, which imports VERL_USE_EXTERNAL_MODULES
            cfg = compose(args.overrides, args.config_name, args.config_dir)
        text = OmegaConf.to_yaml(cfg, resolve=True)
    except Exception as exc:  # Hydra and OmegaConf errors: report them as one line
        print(f"rlec.cluster.config_check: cannot compose {args.config_dir / args.config_name}.yaml with "
              f"{list(args.overrides)}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    run = RunConfig(cfg)  # read once: the early rules here, every check of run_checks below
    refused = override_rules(args.overrides) + settings_rules(run)
    if refused:  # before any other check, the model or a write: one line per setting, exit 2
        for finding in refused:
            print(f"rlec.cluster.config_check: refused: {finding}", file=sys.stderr)
        return 2
    if args.check_checkpoint_folder:
        unwritable, _ = checkpoint_folder_findings(run)
        for finding in unwritable:  # one line, before anything is built in it
            print(f"rlec.cluster.config_check: error: {finding.key}: {finding.message}", file=sys.stderr)
        if unwritable:
            return 2
    if args.print:
        print(text)
    name = layout_name(args.overrides, args.config_dir, args.config_name)
    findings, est, context = run_checks(run, args.gpu_memory_gib, check_paths=not args.skip_path_checks,
                                        verbose=args.verbose, layout=name, wait_previous_s=args.wait_previous)
    failed = any(f.level == "error" for f in findings)
    note = None
    if args.output and not failed:
        atomic_write_text(args.output, text)
        note = f"resolved config ({text.count(chr(10))} lines) written to {args.output}"
    elif args.output:
        note = f"nothing written ({args.output} not created: the checks failed)"
    if args.record_layout and not failed:
        recorded = record_layout(cfg, name)
        note = (note + "; " if note else "") + f"layout {name} recorded in {recorded}"
        run_record = record_run(cfg)  # the settings the run starts with (a resume keeps the first launch's)
        if run_record is not None:
            note += f"; the run's settings in {run_record}"
    if note and not args.print:
        note += "; --print (PRINT_CONFIG=1) shows it"
    print(report(findings, est, context, cfg, note), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
