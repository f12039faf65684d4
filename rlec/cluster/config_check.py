"""Compose, print and validate rlec's verl config before a cluster job starts (``DRY_RUN=1``).

    python -m rlec.cluster.config_check [--print] [--output FILE] [layout=...] [precision=...] [hydra overrides...]

1. composes ``megatron_configs/rlec.yaml`` through Hydra on top of verl's own ``ppo_trainer``
   config with ``model_engine=megatron`` (the exact config ``python -m verl.trainer.main_ppo``
   would run, overrides included);
2. runs verl's own checks: ``validate_config`` (as ``main_ppo`` calls it) and the conversion of
   the algorithm, rollout, reward and (when ``MODEL_PATH`` is on this machine) model sections to
   verl's dataclasses, whose ``__post_init__`` validate them;
3. runs rlec's checks (:mod:`rlec.cluster.rules`): parallel sizes against the model shape and
   the world size, rollout constraints, batch divisibility, plugin wiring, and per-GPU memory.

The model shape comes from ``<actor_rollout_ref.model.path>/config.json`` or, when that folder
is not here (a login node), from ``megatron_configs/model/<rlec.check.model_shape>.json``.
Exit status 0 when nothing is an error, 1 otherwise, 2 for unusable input.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from rlec.cluster.rules import Finding, check_layout, verl_algorithm_section
from rlec.cluster.verl_keys import ENV_VARS, layout_of
from rlec.cluster.memory import MemoryEstimate, ModelShape
from rlec.config import CLUSTER_CONFIG, CONFIG_DIR, compose, select
from rlec.io import atomic_write_text

SHAPES_DIR = CONFIG_DIR / "model"

__all__ = ["load_model_config", "main", "run_checks", "verl_checks"]


def load_model_config(cfg: Any) -> tuple[dict[str, Any], str, bool]:
    """The model's ``config.json`` dict, where it came from, and whether the model folder is here.

    Raises:
        FileNotFoundError: neither the model folder nor the named shape file exists.
        ValueError: the file is not valid JSON (names the file).
    """
    model_dir = Path(os.path.expanduser(str(select(cfg, "actor_rollout_ref.model.path", ""))))
    candidates = [(model_dir / "config.json", True)]
    shape_name = select(cfg, "rlec.check.model_shape")
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


def verl_checks(cfg: Any, with_model: bool) -> tuple[list[Finding], list[str]]:
    """verl's own validation of a composed config; never raises for a bad config.

    Returns:
        ``(findings, passed)``: one error per failing step (its exception message) and the
        names of the steps that passed.
    """
    from verl.trainer.ppo.reward import resolve_reward_manager_cls
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.import_utils import import_external_libs

    cfg = copy.deepcopy(cfg)
    modules = str(select(cfg, f"{ENV_VARS}.VERL_USE_EXTERNAL_MODULES", "") or "")
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
            with contextlib.redirect_stdout(sys.stderr):  # verl prints progress; stdout is the config
                step()
            passed.append(name)
        except Exception as exc:  # verl raises AssertionError, ValueError, TypeError, ...
            findings.append(Finding("error", f"verl:{name}", f"{type(exc).__name__}: {exc}"))
    return findings, passed


def run_checks(cfg: Any, gpu_memory_gib: float | None = None) -> tuple[list[Finding], MemoryEstimate | None, dict]:
    """verl's and rlec's checks of a composed config.

    Returns:
        ``(findings, memory estimate or None, context)``; ``context`` holds what the report
        prints (shape source, verl steps passed, GPU memory).
    """
    try:
        hf_config, source, is_model = load_model_config(cfg)
        shape = ModelShape.from_hf_config(hf_config, source)
    except (FileNotFoundError, ValueError) as exc:
        return [Finding("error", "model", str(exc))], None, {}
    findings, passed = verl_checks(cfg, with_model=is_model)
    gib = float(gpu_memory_gib or select(cfg, "rlec.check.gpu_memory_gib", 80))
    fraction = float(select(cfg, "rlec.check.memory_fraction", 0.9))
    rlec_findings, est = check_layout(cfg, shape, gib, memory_fraction=fraction,
                                      hf_config=hf_config if is_model else None)
    context = {"shape": shape, "source": source, "verl_passed": passed, "gpu_memory_gib": gib, "fraction": fraction}
    return findings + rlec_findings, est, context


def report(findings: list[Finding], est: MemoryEstimate | None, context: dict, cfg: Any) -> str:
    """A short human summary: model, layout, memory per GPU, verl steps, findings."""
    lay = layout_of(cfg)
    lines = []
    if context:
        shape = context["shape"]
        lines.append(f"model   {shape.model_type}: {shape.total_params() / 1e9:.2f}B parameters "
                     f"({shape.active_params() / 1e9:.2f}B active), shape from {context['source']}")
    dp = lay.world_size // max(1, lay.tp * lay.pp * lay.cp)
    lines.append(f"layout  {lay.world_size} GPUs: TP {lay.tp} PP {lay.pp} CP {lay.cp} DP {dp} | EP {lay.ep} "
                 f"ETP {lay.expert_tp} | rollout TP {lay.rollout_tp} DP {lay.rollout_dp} EP {lay.rollout_ep}")
    if est is not None:
        g, gib = est.as_gib(), context["gpu_memory_gib"]
        lines.append(f"memory  update: params {g['params']} + grads {g['grads']} + optimizer {g['optimizer']} "
                     f"+ activations {g['activations']} + logits {g['logits']} = {g['train_total']} GiB "
                     f"of {context['fraction'] * gib:.0f}")
        lines.append(f"        rollout: Megatron left {g['rollout_resident']} + vLLM {g['rollout_share']} = "
                     f"{g['rollout_total']} GiB of {gib:.0f} (vLLM weights {g['vllm_weights']}, KV cache "
                     f"{g['kv_cache']} GiB = {est.kv_cache / max(est.kv_bytes_per_token, 1) / 1e6:.2f}M tokens)")
    if context:
        lines.append(f"verl    passed: {', '.join(context['verl_passed']) or 'none'}")
    lines.extend(str(f) for f in findings)
    errors = sum(f.level == "error" for f in findings)
    lines.append(f"result  {'OK' if not errors else f'{errors} error(s): the run would fail'}")
    return "\n".join(lines)


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
    parser.add_argument("--output", type=Path, help="also write the resolved config to this file (atomically)")
    parser.add_argument("--gpu-memory-gib", type=float, help="GPU memory (default: rlec.check.gpu_memory_gib)")
    parser.add_argument("--verbose", action="store_true", help="keep Python warnings of verl and Megatron")
    args = parser.parse_args(argv)
    if not args.verbose:
        warnings.simplefilter("ignore")

    from omegaconf import OmegaConf

    try:
        cfg = compose(args.overrides, args.config_name, args.config_dir)
        text = OmegaConf.to_yaml(cfg, resolve=True)
    except Exception as exc:  # Hydra and OmegaConf errors: report them as one line
        print(f"rlec.cluster.config_check: cannot compose {args.config_dir / args.config_name}.yaml with "
              f"{list(args.overrides)}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.print:
        print(text)
    if args.output:
        atomic_write_text(args.output, text)
    findings, est, context = run_checks(cfg, args.gpu_memory_gib)
    print(report(findings, est, context, cfg), file=sys.stderr)
    return 1 if any(f.level == "error" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
