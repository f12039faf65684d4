"""verl on CPU (rlec.verl_plugin.cpu): each shim's probe on unpatched verl, and the pieces it installs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from rlec.verl_plugin import cpu


def test_every_verl_shim_still_answers_an_unfixed_problem():
    """An upgrade of verl / mbridge that fixes (or moves) the patched code makes its probe False here."""
    probes = cpu.probe_verl_shims()
    assert probes and all(probes.values()), probes


def test_shims_apply_only_when_asked_for_and_without_cuda(monkeypatch):
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    assert not cpu.cpu_requested()
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert cpu.cpu_requested() is (not torch.cuda.is_available())


@pytest.mark.parametrize(("backend", "expected"), [
    ("cpu:gloo,cpu:gloo", "gloo"),
    ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),
    ("gloo", "gloo"),
    (None, None),
])
def test_duplicate_cpu_backend_string_becomes_gloo(backend, expected):
    assert cpu._dedupe_backend(backend) == expected


def test_causal_padding_mask_masks_future_and_padding_keys():
    valid = torch.tensor([[True, True, True], [True, True, False]])
    mask = cpu.causal_padding_mask(valid)
    assert mask.shape == (2, 1, 3, 3)
    allowed = ~mask[:, 0]
    assert allowed[0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert allowed[1].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    # the post-processing inverse reads the last query row back as the validity mask
    assert (~mask[:, 0, -1, :]).tolist() == valid.tolist()


@pytest.mark.slow  # a fresh interpreter importing verl, Megatron and mbridge: ~20 CPU-seconds
def test_platform_and_engine_register_in_a_fresh_process():
    """In a process with VERL_PLATFORM=cpu, importing verl loads the plugin and everything is in place."""
    code = textwrap.dedent("""
        import os
        os.environ["VERL_PLATFORM"] = "cpu"
        os.environ["VERL_USE_EXTERNAL_MODULES"] = "rlec.verl_plugin"
        import verl  # imports the plugin, which registers the platform before verl asks for it
        from verl.utils.device import get_device_name, get_device_id, get_nccl_backend, get_torch_device
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead
        from verl.workers.rollout.base import get_rollout_class
        from verl.workers.rollout.replica import get_rollout_replica_class
        from rlec.verl_plugin import cpu
        assert get_device_name() == "cpu" and get_device_id() == "cpu" and get_nccl_backend() == "gloo"
        free, total = get_torch_device().mem_get_info()
        assert 0 < free <= total
        assert EngineRegistry.get_engine_cls("language_model", "megatron") is MegatronEngineWithLMHead
        assert get_rollout_class("rlec_hf").__name__ == "HFServerAdapter"
        assert get_rollout_replica_class("rlec_hf").__name__ == "HFRolloutReplica"
        assert set(cpu.APPLIED) == {s.name for s in cpu.VERL_SHIMS}, (cpu.APPLIED, cpu.NOT_NEEDED)
        from verl.workers.config.engine import McoreEngineConfig
        assert McoreEngineConfig(dtype="float32").dtype == "float32"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_backend_wrapper_passes_every_calling_form_through(monkeypatch):
    """The wrapper is process-wide: it must take the backend positionally and by keyword (the demo calls
    init_process_group("gloo", ...) in the same pytest process where another test enabled the shims)."""
    seen = []
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **k: seen.append((a, k)))
    cpu._backend_apply()
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    torch.distributed.init_process_group(backend="cpu:gloo,cpu:gloo", rank=0)
    torch.distributed.init_process_group()
    assert seen == [(("gloo",), {"rank": 0, "world_size": 1}), (("gloo",), {"rank": 0}), ((None,), {})]
