"""The CPU wing's megatron-core shims (rlec.cpu.megatron_core): each is still needed by the installed megatron-core, works
once applied, and is scoped; and the workarounds of rlec.megatron.compat the GPU path uses too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: the probes must see the unpatched library, and the patches are
# process-wide state that must not leak into the test process.
PROBE = r"""
import json, warnings
warnings.filterwarnings("ignore")
import torch
from rlec.cpu import megatron_core
from rlec.megatron import compat
needed = megatron_core.probe_shims()
applied = megatron_core.apply_cpu_shims()
again = megatron_core.apply_cpu_shims()

from megatron.core.transformer.moe import moe_utils, token_dispatcher
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.optimizer import clip_grads
from megatron.core.tensor_parallel import mappings
cfg = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization="RMSNorm",
                        tensor_model_parallel_size=2, sequence_parallel=True)
norm = WrappedTorchNorm(cfg, 8)
after = {
    "current_device": torch.cuda.current_device(),
    "te_general_gemm_is_none": moe_utils.te_general_gemm is None,
    "splits_numpy": type(moe_utils.maybe_move_tensor_to_cpu(torch.ones(2), as_numpy=True)).__name__,
    "dispatcher_stream": type(token_dispatcher.torch.cuda.Stream()).__name__,
    "global_stream_untouched": torch.cuda.Stream.__module__.startswith("torch"),
    "norm": type(norm).__name__, "norm_sp_tagged": all(getattr(p, "sequence_parallel", False) for p in norm.parameters()),
    "config_sp_kept": cfg.sequence_parallel,
    "optimizer_zeros_device": str(clip_grads.torch.zeros(1, device="cuda").device),
    "global_zeros_cuda_still_fails": True,
    "uneven_patched": compat.is_patched(mappings._gather_along_first_dim, "uneven_collectives"),
}
try:
    torch.zeros(1, device="cuda")
    after["global_zeros_cuda_still_fails"] = False
except Exception:
    pass
print("RESULT_JSON " + json.dumps({"needed": needed, "applied": applied, "again": again, "after": after}))
"""


@pytest.fixture(scope="module")
def probe() -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT_JSON "):])


@pytest.mark.slow  # the probe: a fresh Python that imports torch and Megatron (~4-5 CPU-s)
def test_every_shim_is_still_needed_by_the_installed_megatron_core(probe: dict) -> None:
    from rlec.cpu.megatron_core import SHIMS

    assert set(probe["needed"]) == {s.name for s in SHIMS}
    obsolete = [name for name, needed in probe["needed"].items() if not needed]
    assert obsolete == [], f"megatron-core no longer shows the error these shims answer: {obsolete}; drop or update them"


@pytest.mark.slow  # the probe: a fresh Python that imports torch and Megatron (~4-5 CPU-s)
def test_shims_apply_once_and_take_effect(probe: dict) -> None:
    from rlec.cpu.megatron_core import SHIMS

    # applied only because every probe says needed; the missing-TE shim (rlec.megatron.compat) last, no TE on CPU
    assert probe["applied"] == [s.name for s in SHIMS] + ["te_general_gemm"] == probe["again"]
    after = probe["after"]
    assert after["current_device"] == "cpu"
    assert after["te_general_gemm_is_none"] is True
    assert after["splits_numpy"] == "ndarray"
    assert after["dispatcher_stream"] == "_NoOpStream"
    assert after["norm"] == "RMSNorm" and after["norm_sp_tagged"] is True and after["config_sp_kept"] is True
    assert after["optimizer_zeros_device"] == "cpu"
    assert after["uneven_patched"] is True


@pytest.mark.slow  # the probe: a fresh Python that imports torch and Megatron (~4-5 CPU-s)
def test_shims_are_scoped(probe: dict) -> None:
    after = probe["after"]
    assert after["global_stream_untouched"] is True  # only the dispatcher sees the no-op stream
    assert after["global_zeros_cuda_still_fails"] is True  # only megatron's modules map 'cuda' to 'cpu'


def test_cuda_type_names_are_answered_only_inside_the_block() -> None:
    from rlec.cpu.megatron_core import _cuda_type_names

    t = torch.zeros(2)
    with _cuda_type_names():
        assert t.type() == "torch.cuda.FloatTensor"
        assert torch.zeros(1, dtype=torch.bfloat16).type() == "torch.cuda.BFloat16Tensor"
        assert t.type(torch.float64).dtype == torch.float64
    assert t.type() == "torch.FloatTensor"


def test_torch_view_replaces_only_named_attributes() -> None:
    from rlec.cpu.megatron_core import _cpu_device, _TorchView

    view = _TorchView(torch, zeros=_cpu_device(torch.zeros))
    assert view.zeros(2, device="cuda").device.type == "cpu"
    assert view.ones is torch.ones
    assert view.float32 is torch.float32


@pytest.mark.gpu
def test_no_shim_is_applied_with_cuda() -> None:
    from rlec.cpu.megatron_core import apply_cpu_shims

    current_device = torch.cuda.current_device
    assert apply_cpu_shims() == []
    assert torch.cuda.current_device is current_device


def test_results_queue_workaround_is_still_needed_and_scoped_to_one_save() -> None:
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    from rlec.megatron.compat import in_process_checkpoint_results, results_queue_needed

    before = filesystem_async._results_queue
    assert before is None and results_queue_needed(), "megatron-core changed _results_queue: revisit the workaround"
    with in_process_checkpoint_results() as active:
        assert active is True and filesystem_async._results_queue is not None
    assert filesystem_async._results_queue is before  # nothing leaks to other saves in this process


def test_the_private_mbridge_methods_rlec_uses_still_exist() -> None:
    from rlec.megatron.compat import MBRIDGE_PRIVATE, mbridge_private_api_present

    present = mbridge_private_api_present()
    assert set(present) == set(MBRIDGE_PRIVATE)
    assert all(present.values()), f"mbridge dropped or renamed {[k for k, v in present.items() if not v]}: update rlec.megatron.compat"


def test_weight_conversion_reporting_wraps_only_the_instance_within_the_block() -> None:
    from rlec.megatron.compat import reporting_weight_conversions

    class FakeBridge:
        def _weight_to_mcore_format(self, name, weights):
            return (name, len(weights))

    bridge, seen = FakeBridge(), []
    with reporting_weight_conversions(bridge, seen.append):
        assert bridge._weight_to_mcore_format("a", [1, 2]) == ("a", 2)
    assert seen == ["a"] and "_weight_to_mcore_format" not in vars(bridge)
    with reporting_weight_conversions(bridge, None):
        assert "_weight_to_mcore_format" not in vars(bridge)


def test_rays_fixed_wait_for_its_local_node_is_still_there() -> None:
    """The reason for retry_ray_start: ray's Node.__init__ still waits a literal 30 s and raises this message (an
    upgrade that makes the wait a setting, or changes the message, fails here and the retry can go)."""
    from rlec.megatron.compat import ray_start_timeout_needed

    assert ray_start_timeout_needed()


class _FakeNode:
    """Stands in for Ray's Node.__init__ / kill_all_processes: a start that times out ``timeouts`` times and records
    the processes it was asked to stop."""

    def __init__(self, timeouts: int, error: str) -> None:
        self.timeouts, self.error, self.stopped, self.starts = timeouts, error, [], 0

    def patch(self, monkeypatch) -> None:
        from ray._private import node

        fake = self

        def init(node_self, *args, **kwargs):
            fake.starts += 1
            node_self.all_processes = {"raylet": [f"raylet{fake.starts}"], "gcs_server": [f"gcs{fake.starts}"]}
            if fake.timeouts:
                fake.timeouts -= 1
                raise Exception(fake.error)

        def kill_all_processes(node_self, check_alive=True, allow_graceful=False, wait=False):
            assert wait and not check_alive
            fake.stopped.append(sorted(p for ps in node_self.all_processes.values() for p in ps))

        monkeypatch.setattr(node.Node, "__init__", init)
        monkeypatch.setattr(node.Node, "kill_all_processes", kill_all_processes)

    @staticmethod
    def ray_init(**kwargs):
        """ray.init's part that matters here: it builds a Node (which may raise)."""
        from ray._private import node

        node.Node(**kwargs)
        return "started"


def test_a_timed_out_ray_start_stops_its_processes_and_is_tried_again(monkeypatch) -> None:
    """Fresh clone of cd20779, 2026-12-06: ray.init raised "The current node timed out during startup" on the loaded
    2-core box and the launch died. Now each timed-out start's processes are stopped (they carry the launch's
    RLEC_RUN_FOLDER and would hold the next launch) and Ray is started again; afterwards both patches are undone."""
    import ray
    from ray._private import node

    from rlec.megatron.compat import RAY_START_TIMEOUT, ray_start_retried

    fake = _FakeNode(2, f"{RAY_START_TIMEOUT}. This could happen because some of the raylet failed to startup")
    fake.patch(monkeypatch)
    monkeypatch.setattr(ray, "init", fake.ray_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    said: list[str] = []
    with ray_start_retried(attempts=3, pause_s=0, say=said.append):
        assert ray.init(num_cpus=8) == "started"
    assert fake.starts == 3 and fake.stopped == [["gcs1", "raylet1"], ["gcs2", "raylet2"]]
    assert len(said) == 2 and "try 2 of 3" in said[0] and "try 3 of 3" in said[1]
    assert ray.init is fake.ray_init and node.Node.__init__.__name__ == "init"  # undone


def test_other_errors_are_raised_at_once_and_the_last_timeout_still_stops_its_processes(monkeypatch) -> None:
    import ray

    from rlec.megatron.compat import RAY_START_TIMEOUT, ray_start_retried

    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "init", _FakeNode.ray_init)
    other = _FakeNode(1, "bad num_cpus")
    other.patch(monkeypatch)
    with ray_start_retried(attempts=3, pause_s=0), pytest.raises(Exception, match="bad num_cpus"):
        ray.init(num_cpus=-1)
    assert other.starts == 1 and other.stopped == []  # not retried, nothing of Ray's own to stop
    last = _FakeNode(5, RAY_START_TIMEOUT)
    last.patch(monkeypatch)
    with ray_start_retried(attempts=2, pause_s=0), pytest.raises(Exception, match=RAY_START_TIMEOUT):
        ray.init()
    assert last.starts == 2 and len(last.stopped) == 2  # the last try's processes stopped too
    with pytest.raises(ValueError, match="attempts must be >= 1"), ray_start_retried(attempts=0):
        pass


def test_verls_ray_init_goes_through_the_retry_and_ray_init_is_restored(monkeypatch) -> None:
    """rlec.cluster.main_ppo._run_verl starts verl's main (which calls ray.init once) inside the retry."""
    import ray
    from verl.trainer import main_ppo

    from rlec.cluster.main_ppo import _run_verl
    from rlec.megatron import compat

    fake = _FakeNode(1, compat.RAY_START_TIMEOUT)
    fake.patch(monkeypatch)
    monkeypatch.setattr(ray, "init", fake.ray_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(compat, "ray_start_timeout_needed", lambda: True)  # the fake Node has no source to probe
    real_retried = compat.ray_start_retried
    monkeypatch.setattr(compat, "ray_start_retried", lambda say=None: real_retried(pause_s=0, say=say))
    monkeypatch.setattr(main_ppo.main, "__wrapped__", lambda config: ray.init(num_cpus=config["n"]))
    _run_verl({"n": 8})
    assert fake.starts == 2 and len(fake.stopped) == 1 and ray.init is fake.ray_init


def test_a_patch_mark_survives_further_wrapping_and_a_staticmethod_and_names_only_its_shim() -> None:
    """The guard of every shim that replaces a function: a second application must see the first one's mark, also
    through another shim's functools.wraps wrapper (both CPU shims wrap torch's init_process_group) and through the
    staticmethod a class's __new__ is stored as (the sequence-parallel norm shim's guard read the staticmethod and
    missed the mark before)."""
    import functools

    from rlec.megatron.compat import is_patched, mark_patched

    def original() -> int:
        return 1

    first = mark_patched(functools.wraps(original)(lambda: original() + 1), "first")

    @functools.wraps(first)
    def second() -> int:
        return first() + 1

    mark_patched(second, "second")
    assert not is_patched(original, "first")
    assert is_patched(first, "first") and not is_patched(first, "second")
    assert is_patched(second, "first") and is_patched(second, "second")
    assert is_patched(staticmethod(second), "second")
