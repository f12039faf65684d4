"""Projected section of ``benchmarks/throughput.py``: the cost model at every committed layout.

Each ``megatron_configs/layout/*.yaml`` is composed exactly as the cluster run composes it
(``rlec.config.compose``: verl's ``ppo_trainer`` + ``rlec.yaml`` + the layout), read into
rlec's memory arithmetic (``rlec.rules.verl_keys``) and projected with :mod:`rlec.cluster.cost_model`. The
GPU is the one the layout was written for (``rlec.check.gpu_memory_gib``: 141 -> H200, else H100).
Layouts of smoke-test models (below :data:`MIN_PROJECTED_PARAMS` parameters, e.g. ``tiny_1gpu``)
are listed as not projected: a roofline of a 40M-parameter model on an H100 says nothing about
a training run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlec.cluster.cost_model import ANCHORS, DEVICES, Assumptions, anchor_comparison, project_step, train_flops, verl_flops_params
from rlec.rules.memory import GIB, estimate_memory
from rlec.model_shape import ModelShape

ROOT = Path(__file__).resolve().parents[1]
LAYOUT_DIR = ROOT / "megatron_configs" / "layout"
MIN_PROJECTED_PARAMS = 1e9  # smaller models are smoke tests, not projected


def committed_layouts() -> list[str]:
    """Names of the committed cluster layouts (``megatron_configs/layout/*.yaml`` but the CPU one), sorted."""
    from rlec.config import cluster_layouts

    return cluster_layouts(LAYOUT_DIR.parent)


def layout_shape(name: str, overrides: list[str] | None = None) -> tuple[Any, ModelShape, str]:
    """``(composed config, model shape, shape source)`` of one committed layout.

    Raises:
        FileNotFoundError: no model shape for the layout (see ``rlec.cluster.config_check``).
        hydra.errors.HydraException: the layout does not compose.
    """
    from rlec.cluster.config_check import load_model_config
    from rlec.run_config import RunConfig
    from rlec.config import compose

    cfg = compose([f"layout={name}", *(overrides or [])])
    hf, source, _ = load_model_config(RunConfig(cfg))
    return cfg, ModelShape.from_hf_config(hf, source), source


def project_layout(name: str, a: Assumptions, overrides: list[str] | None = None) -> dict[str, Any]:
    """Memory, FLOPs, EP traffic and projected tokens/s of one committed layout.

    Raises:
        FileNotFoundError: no model shape for the layout (see ``rlec.cluster.config_check``).
        hydra.errors.HydraException: the layout does not compose.
    """
    from rlec.rules.verl_keys import layout_of, training_settings_of
    from rlec.config import select
    from rlec.settings import RlecSettings

    cfg, shape, source = layout_shape(name, overrides)
    layout = layout_of(cfg)
    gib = RlecSettings.from_config(cfg).check_.gpu_memory_gib
    device = DEVICES["H200" if gib >= 141 else "H100"]
    mem = estimate_memory(shape, layout, training_settings_of(cfg), gib * GIB)
    responses = int(select(cfg, "data.train_batch_size")) * int(select(cfg, "actor_rollout_ref.rollout.n"))
    step = project_step(shape, layout, mem, device, a, responses, int(select(cfg, "trainer.n_gpus_per_node", 8)))
    n_layers, n_vocab = verl_flops_params(shape)
    return {
        "layout": name, "model": Path(source).stem, "gpus": layout.world, "device": device.name,
        "parallel": {"tp": layout.tp, "ep": layout.ep, "etp": layout.expert_tp, "pp": layout.pp, "cp": layout.cp,
                     "rollout_tp": layout.rollout_tp, "param_offload": layout.param_offload,
                     "optimizer_offload": layout.optimizer_offload},
        "responses_per_step": responses,
        "params_total": shape.total_params(), "params_active": shape.active_params(),
        "verl_flops_params": n_layers + n_vocab,
        "flops_per_token": {"train": step["train_flops_per_token"], "forward": step["train_flops_per_token"] / 3,
                            "attention_share": train_flops(shape, [a.prompt_tokens + a.response_tokens]).attention
                            / step["train_flops_per_token"] / (a.prompt_tokens + a.response_tokens)},
        "memory_gib": mem.as_gib(), "params_per_gpu": mem.params_local, **step,
        "anchors": anchor_comparison(step, "H200" if gib >= 141 else "H100", layout.world),
    }


def run_projection(a: Assumptions, layouts: list[str] | None = None, log: Any = print) -> dict[str, Any]:
    """:func:`project_layout` for each layout (default: all committed ones); layouts of models
    below :data:`MIN_PROJECTED_PARAMS` parameters are listed under ``not_projected`` instead."""
    rows, skipped = [], []
    for name in layouts or committed_layouts():
        _, shape, _ = layout_shape(name)
        if shape.total_params() < MIN_PROJECTED_PARAMS:
            why = f"{shape.total_params() / 1e6:.0f}M-parameter smoke-test model"
            log(f"[projection] {name}: not projected ({why})")
            skipped.append({"layout": name, "reason": why})
            continue
        log(f"[projection] {name}")
        rows.append(project_layout(name, a))
    return {"assumptions": a.as_dict(), "devices": {k: vars(v) for k, v in DEVICES.items()}, "anchors": ANCHORS,
            "rows": rows, "not_projected": skipped, "not_modelled": ["weight sync, reward, data loading", "expert load imbalance",
                                           "EP all-to-all time is reported, not added (the MFU assumption covers it)"]}
