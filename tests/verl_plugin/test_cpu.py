"""verl on CPU (the CPU wing, rlec.cpu.verl_shims): each shim's probe on unpatched verl, and the pieces it installs."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rlec.cpu import padded_forward
from rlec.cpu import verl_shims as cpu


def test_every_verl_shim_still_answers_an_unfixed_problem():
    """An upgrade of verl / mbridge that fixes (or moves) the patched code makes its probe False here."""
    probes = cpu.probe_verl_shims()
    assert probes and all(probes.values()), probes


def test_every_shim_names_the_module_whose_import_applies_it():
    """A shim added to VERL_SHIMS without a trigger raised KeyError in enable_cpu, seen only in a fresh Ray process;
    a trigger left for a removed shim is dead. The trigger modules are verl's, mbridge's or Megatron's."""
    assert set(cpu.SHIM_TRIGGERS) == {shim.name for shim in cpu.VERL_SHIMS}
    assert all(module.startswith(("verl.", "mbridge.", "megatron.")) for module in cpu.SHIM_TRIGGERS.values())


def test_shims_apply_only_when_asked_for_and_without_cuda(monkeypatch):
    from rlec.verl_plugin.cpu_interface import cpu_requested

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    assert not cpu_requested()
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert cpu_requested() is (not torch.cuda.is_available())


def test_checkpoint_load_at_data_parallel_size_2_reads_each_ranks_own_shards(monkeypatch):
    """verl's load_dist_checkpointing wraps the load in Megatron's fully parallel loader over the data-parallel group;
    at a data-parallel size > 1 that loader exchanges the shards on CUDA (``torch.cuda.synchronize``: the TP2 x EP2
    resume on CPU stopped there). The shim's wrapper hands the wrapped strategy every rank's own load instead."""
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelLoadStrategyWrapper
    from verl.utils.megatron import dist_checkpointing

    monkeypatch.setattr(dist_checkpointing, "FullyParallelLoadStrategyWrapper", FullyParallelLoadStrategyWrapper)
    assert cpu._parallel_load_needed()
    cpu._parallel_load_apply()
    cpu._parallel_load_apply()  # idempotent
    wrapper = dist_checkpointing.FullyParallelLoadStrategyWrapper
    assert wrapper is not FullyParallelLoadStrategyWrapper and issubclass(wrapper, FullyParallelLoadStrategyWrapper)
    assert wrapper.__base__ is FullyParallelLoadStrategyWrapper

    class Base:
        calls: list = []

        def load(self, sharded_state_dict, checkpoint_dir):
            self.calls.append((sharded_state_dict, checkpoint_dir))
            return {"loaded": sharded_state_dict}

    class TwoRanks:  # a data-parallel group of 2: the unpatched wrapper would plan, read a part and exchange on CUDA
        def size(self):
            return 2

    base = Base()
    assert wrapper(base, TwoRanks()).load({"w": 1}, "/ckpt") == {"loaded": {"w": 1}}
    assert base.calls == [({"w": 1}, "/ckpt")]


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
    mask = padded_forward.causal_padding_mask(valid)
    assert mask.shape == (2, 1, 3, 3)
    allowed = ~mask[:, 0]
    assert allowed[0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert allowed[1].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    # the post-processing inverse reads the last query row back as the validity mask
    assert (~mask[:, 0, -1, :]).tolist() == valid.tolist()


@pytest.mark.slow  # a fresh interpreter importing verl, Megatron and mbridge: ~20 CPU-seconds
def test_platform_and_engine_register_in_a_fresh_process():
    """In a process with VERL_PLATFORM=cpu, importing verl loads the plugin and everything is in place; a process that
    imports only verl's load balancer (or reward loop, or rlec_hf) imports neither Megatron nor verl's trainer for it:
    the engines, shims and trainer registrations wait for their modules (post-import hooks)."""
    code = textwrap.dedent("""
        import os, sys
        os.environ["VERL_PLATFORM"] = "cpu"
        os.environ["VERL_USE_EXTERNAL_MODULES"] = "rlec.cpu,rlec.verl_plugin"  # as layout/cpu.yaml and the launcher
        import verl  # imports the CPU wing, which registers the platform before verl asks for it, then the plugin
        import verl.workers.rollout.router, verl.experimental.reward_loop.reward_loop, rlec.cpu.rollout_server
        from rlec.cpu import verl_shims as cpu
        from rlec.megatron.compat import APPLIED, NOT_NEEDED  # every shim of the process, Megatron-core's too
        light = [m for m in ("megatron.core", "mbridge", "verl.trainer.ppo.v1", "rlec.verl_plugin.trainers",
                             "rlec.cpu.agent_loops") if m in sys.modules]
        assert not light and "response_only_logits" not in APPLIED, (light, APPLIED)
        from verl.trainer.ppo.v1 import get_trainer_cls  # the trainer's process: registrations on import
        assert get_trainer_cls("rlec_sync").__name__ == "RLECSyncTrainer"
        from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
        # the CPU run's agent loops: E3's with the scripted answers (the wing's variant replaces the GPU loop)
        assert _agent_loop_registry["rlec_e3_agent"]["_target_"] == "rlec.cpu.agent_loops.ScriptedE3AgentLoop"
        assert _agent_loop_registry["rlec_scripted_agent"]["_target_"] == "rlec.cpu.agent_loops.ScriptedAgentLoop"
        from rlec.verl_plugin import mismatch
        from rlec.cpu.induced_mismatch import step_router_disagreement
        assert mismatch.STEP_METRICS == [step_router_disagreement]
        from verl.utils.device import get_device_name, get_device_id, get_nccl_backend, get_torch_device
        from verl.workers.engine.base import EngineRegistry
        from verl.workers.engine.megatron.transformer_impl import MegatronEngineWithLMHead
        from verl.workers.rollout.base import get_rollout_class
        from verl.workers.rollout.replica import get_rollout_replica_class
        assert get_device_name() == "cpu" and get_device_id() == "cpu" and get_nccl_backend() == "gloo"
        free, total = get_torch_device().mem_get_info()
        assert 0 < free <= total
        assert EngineRegistry.get_engine_cls("language_model", "megatron") is MegatronEngineWithLMHead
        assert get_rollout_class("rlec_hf").__name__ == "HFServerAdapter"
        assert get_rollout_replica_class("rlec_hf").__name__ == "HFRolloutReplica"
        assert {s.name for s in cpu.VERL_SHIMS} <= set(APPLIED), (APPLIED, NOT_NEEDED)
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


def test_response_logit_index_covers_the_positions_that_predict_response_tokens():
    """Row i's L_i tokens sit at 0..L_i-1 (verl's right-padded BSHD); token t's log-prob comes from the logits
    at t-1, so a response of R tokens needs L_i-1-R .. L_i-2; the window is the longest response."""
    nested = lambda xs: torch.nested.as_nested_tensor([torch.ones(n, dtype=torch.long) for n in xs], layout=torch.jagged)  # noqa: E731
    batch = {"input_ids": nested([15, 7, 18]), "loss_mask": nested([6, 3, 5])}
    index = padded_forward.response_logit_index(batch)
    assert index.tolist() == [[8, 9, 10, 11, 12, 13], [0, 1, 2, 3, 4, 5], [11, 12, 13, 14, 15, 16]]
    # the padded trainer's loss mask is (b, R): the same window
    assert padded_forward.response_logit_index({"input_ids": batch["input_ids"], "loss_mask": torch.ones(3, 6)}).tolist() == index.tolist()
    # a row shorter than the window: slots before its first token are unused (-1)
    assert padded_forward.response_logit_index({"input_ids": nested([3, 9]), "loss_mask": nested([2, 5])}).tolist() == [
        [-1, -1, -1, 0, 1], [3, 4, 5, 6, 7]]
    assert padded_forward.response_logit_index({"input_ids": torch.ones(2, 4), "loss_mask": torch.ones(2, 2)}) is None


def test_scatter_window_places_slot_values_and_zeroes_the_rest():
    index = torch.tensor([[-1, 0, 1], [2, 3, 4]])
    value = torch.tensor([[9.0, 1.0, 2.0], [3.0, 4.0, 5.0]], requires_grad=True)
    out = padded_forward._scatter_window(value, index, 6)
    assert out.tolist() == [[1.0, 2.0, 0, 0, 0, 0], [0, 0, 3.0, 4.0, 5.0, 0]]
    out.sum().backward()  # the loss's gradient reaches every used slot, none the unused one
    assert value.grad.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]


CHECK_RESPONSE_LOGITS = Path(__file__).with_name("check_response_logits.py")


@pytest.mark.slow  # a child process importing verl and Megatron and building the tiny model: ~30 CPU-seconds
def test_response_only_logits_equal_verls_full_computation(tiny_moe_dir: Path):
    """verl's own forward_step, unpatched vs patched, on rows of different prompt and response lengths, in both
    batch layouts verl's trainers hand the worker: response log-probs, entropies and every gradient of a weighted
    response loss agree within 1e-6 (the output layer's gradient included: it is where the window cuts)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VERL_PLATFORM": "cpu"}
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, str(CHECK_RESPONSE_LOGITS), str(tiny_moe_dir)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON "))[12:])
    assert result.pop("world") == 1 and set(result) == {"tq", "padded"}
    for layout, r in result.items():
        assert r["same_params"], layout
        # the window ran: 18 positions (the longest row) in verl's forward, 6 (the longest response) in rlec's
        assert r["positions_full"] == [18] and r["positions_windowed"] == [6], (layout, r)
        assert r["lp_scale"] > 1.0 and r["grad_scale"] > 0 and r["output_layer_grad"] > 0, (layout, r)
        assert r["lp_diff"] <= 1e-6 and r["entropy_diff"] <= 1e-6, (layout, r)
        assert r["grad_diff"] <= 1e-6 * max(1.0, r["grad_scale"]), (layout, r)


@pytest.mark.slow  # two gloo processes (torchrun) importing verl and Megatron: ~40 s on 2 cores
def test_response_only_logits_equal_verls_full_computation_at_tp2_with_sequence_parallel(tiny_moe_dir: Path):
    """TP 2 with sequence parallel (what Megatron requires for MoE at TP > 1; issue 31 item 5's TP2 x EP2 run): the
    output layer's input is each rank's slice of the sequence, so the window gathers the sequence first and runs the
    layer once without sequence parallel (rlec.megatron.logprobs.windowed_output). Response log-probs, entropies and
    every rank's gradient shards equal verl's full sequence-parallel computation (measured: 0 and 9.5e-7 at a gradient
    scale of 7.5; the gather's backward summing the all-reduced gradient again, tensor_parallel_output_grad=True, gave
    6.7), and the layer is sequence parallel again afterwards."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VERL_PLATFORM": "cpu"}
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(CHECK_RESPONSE_LOGITS), str(tiny_moe_dir)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON "))[12:])
    assert result.pop("world") == 2 and set(result) == {"tq", "padded"}
    for layout, r in result.items():
        assert r["same_params"] and r["sequence_parallel"], (layout, r)
        assert r["positions_full"] == [18] and r["positions_windowed"] == [6], (layout, r)
        assert r["lp_scale"] > 1.0 and r["grad_scale"] > 0 and r["output_layer_grad"] > 0, (layout, r)
        assert r["lp_diff"] <= 1e-6 and r["entropy_diff"] <= 1e-6, (layout, r)
        assert r["grad_diff"] <= 1e-6 * max(1.0, r["grad_scale"]), (layout, r)


def test_the_replay_buffer_polls_every_0_2_s_unless_told(monkeypatch):
    """verl's sync ReplayBuffer, built as verl's trainer builds it (no poll_interval), polls every 0.2 s after the
    shim (2 s before: make run's rollouts all took 6.0 s for about 4 s of generation); an explicit value is kept."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    kwargs = dict(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                  max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}))
    init = ReplayBuffer.__init__
    try:
        # verl's own constructor, whatever an in-process enable_cpu of an earlier test applied
        ReplayBuffer.__init__ = inspect.unwrap(init)
        assert ReplayBuffer(**kwargs).poll_interval == 2.0  # verl's default (the shim's probe)
        cpu._replay_poll_apply()
        assert ReplayBuffer(**kwargs).poll_interval == cpu.REPLAY_POLL_S == 0.2
        assert ReplayBuffer(**kwargs, poll_interval=1.5).poll_interval == 1.5
    finally:
        ReplayBuffer.__init__ = init


def _dynamo_frames_in_another_thread() -> dict:
    """Dynamo's frame counters after a ``torch.compile``d call (the eager backend: tracing, no C++ compile) made on a
    new thread, as Ray runs an actor's methods."""
    import threading

    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    seen: dict = {}

    def call() -> None:
        @torch.compile(dynamic=True, backend="eager")
        def mul_reduce(a, b):
            return (a * b).sum(dim=-1, keepdim=True)

        a = torch.arange(6.0).reshape(2, 3)
        seen["equal"] = torch.equal(mul_reduce(a, a), (a * a).sum(dim=-1, keepdim=True))
        seen["frames"] = dict(torch._dynamo.utils.counters["frames"])

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert seen["equal"]
    return seen["frames"]


def test_torch_compile_disabled_in_code_still_compiles_on_rays_method_thread(monkeypatch):
    """The retired ``entropy_torch_compile`` shim set ``torch._dynamo.config.disable = True`` at import; in torch 2.13
    that holds only for the setting thread, so verl's entropy, called on the thread Ray runs actor methods on, was
    still compiled with inductor (g++ at every launch). Hence the environment variable (next test). When torch makes
    the setting process-wide, this test fails: a code switch would then do."""
    monkeypatch.setattr(torch._dynamo.config, "disable", True)
    assert _dynamo_frames_in_another_thread().get("total", 0) >= 1


def test_the_cpu_layout_disables_torch_compile_in_every_ray_worker(compose_rlec):
    """``TORCH_COMPILE_DISABLE=1`` in the CPU layout's Ray runtime environment: every worker imports torch with it,
    and it holds on every thread (a fresh interpreter calls a compiled function on a new thread: dynamo sees no
    frame). Needed while verl's Megatron entropy calls ``torch.compile`` (the probe: False after an upgrade that
    drops it, then the variable can go)."""
    assert cpu.entropy_compiled()
    env = compose_rlec("layout=cpu", "precision=fp32").ray_kwargs.ray_init.runtime_env.env_vars
    assert env[cpu.COMPILE_DISABLE_ENV] == "1" and env.VERL_USE_EXTERNAL_MODULES == "rlec.cpu,rlec.verl_plugin"
    script = (f"import torch\n{inspect.getsource(_dynamo_frames_in_another_thread)}\n"
              "print(_dynamo_frames_in_another_thread(), torch._dynamo.config.disable)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, cpu.COMPILE_DISABLE_ENV: env[cpu.COMPILE_DISABLE_ENV]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["{}", "True"], proc.stdout


def test_a_synchronous_verl_save_keeps_megatrons_write_results_in_process(monkeypatch):
    """Fresh clone of 8c702fc, 2026-12-06: verl's synchronous dist-checkpoint save let megatron's writer start a spawn
    multiprocessing Manager on the rank (a fresh interpreter) to pass its results back; when Ray's reaper killed the
    worker after a SIGKILLed launch the Manager lived on with the launch's RLEC_RUN_FOLDER, and the rerun waited 120 s
    and was refused. The shim hands the writer an in-process queue for a synchronous save only, then restores it."""
    import queue

    from megatron.core.dist_checkpointing.strategies import filesystem_async
    from verl.utils.checkpoint import megatron_checkpoint_manager

    seen = []

    def save_dist_checkpointing(sharded_state_dict, ckpt_path, async_save=False, content_metadata=None):
        seen.append((async_save, type(filesystem_async._results_queue)))  # what megatron's writer would get
        return "request" if async_save else None

    monkeypatch.setattr(megatron_checkpoint_manager, "save_dist_checkpointing", save_dist_checkpointing)
    assert cpu._save_results_needed()
    cpu._save_results_apply()
    cpu._save_results_apply()  # idempotent
    patched = megatron_checkpoint_manager.save_dist_checkpointing
    assert patched is not save_dist_checkpointing
    # verl's call (keywords) for a synchronous and an asynchronous save, and a positional one
    assert patched(sharded_state_dict={}, ckpt_path="/c", async_save=False, content_metadata={}) is None
    assert patched(sharded_state_dict={}, ckpt_path="/c", async_save=True, content_metadata={}) == "request"
    assert patched({}, "/c", True) == "request"
    assert seen == [(False, queue.Queue), (True, type(None)), (True, type(None))]  # the async saves: megatron's own
    assert filesystem_async._results_queue is None  # restored after the save


def test_the_agent_loop_managers_create_returns_with_its_workers_started(ray_local, tmp_path, monkeypatch):
    """Issue 54: step 1 took 13-22 s more than the next, waiting for the agent-loop workers verl's manager had created
    without waiting for their constructors. After the shim the manager's worker set-up returns only once every
    worker's constructor has run (each writes a file as its constructor's last act; the constructors sleep 1 s first,
    so without the wait none would have written yet)."""
    import asyncio

    from verl.experimental.agent_loop import agent_loop

    @ray_local.remote(num_cpus=0)
    class SlowWorker:
        def __init__(self, path: str) -> None:
            import time

            time.sleep(1.0)
            Path(path).write_text("up")

    async def create_workers(self) -> None:  # what verl's does: the actors created, their constructors not awaited
        self.agent_loop_workers = [SlowWorker.remote(str(tmp_path / f"w{i}")) for i in range(2)]

    assert cpu._agent_loop_ready_needed()  # verl's own method, unpatched
    monkeypatch.setattr(agent_loop.AgentLoopManager, "_init_agent_loop_workers", create_workers)
    cpu._agent_loop_ready_apply()
    manager = object.__new__(agent_loop.AgentLoopManager)
    asyncio.run(manager._init_agent_loop_workers())
    assert sorted(f.name for f in tmp_path.glob("w*")) == ["w0", "w1"]


def test_worker_group_ranks_meet_without_a_tcp_port(monkeypatch, tmp_path):
    """Issue 55 item 5: a launch failed with EADDRINUSE on the MASTER_PORT verl's worker group picked (bound, closed,
    taken by another process before rank 0's TCPStore bound it). The shim hands init_process_group a store that needs
    no port: a HashStore for one rank; for two ranks a FileStore both find by the group's prefix and MASTER_PORT."""
    import threading

    import torch

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    calls = []
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **kw: calls.append((a, kw)))
    cpu._rendezvous_apply()
    monkeypatch.setenv("WG_BACKEND", "ray")
    monkeypatch.setenv("MASTER_PORT", "1")  # a port nothing may bind: any TCP rendezvous would fail
    torch.distributed.init_process_group(backend="gloo", rank=0, world_size=1, init_method=None)
    (args, kwargs), = calls
    assert isinstance(kwargs["store"], torch.distributed.HashStore) and "init_method" not in kwargs
    assert (kwargs["rank"], kwargs["world_size"], kwargs["backend"]) == (0, 1, "gloo")
    # outside verl's Ray worker groups nothing changes
    monkeypatch.delenv("WG_BACKEND")
    torch.distributed.init_process_group(backend="gloo", init_method="tcp://127.0.0.1:1")
    assert "store" not in calls[-1][1]
    # two ranks of one group find the same FileStore and exchange a key through it
    env = {"WG_PREFIX": "abc123", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1"}
    stores = [None, None]

    def rank(r):
        stores[r] = cpu.rendezvous_store(2, env)
        stores[r].set(f"rank{r}", str(r))

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert stores[0].get("rank1") == b"1" and stores[1].get("rank0") == b"0"
    assert (tmp_path / "rlec-rendezvous" / "abc123-10.0.0.1-1").exists()


def test_ray_workers_of_a_test_run_at_the_tests_own_priority(ray_local):
    """Issue 55: Ray starts workers at nice 15 unless ``RAY_worker_niceness`` says otherwise, so beside six nice-0
    busy loops a launch test's workers starved and the test timed out for load alone. tests/conftest.py sets it to 0:
    a worker's niceness equals the test process's (15 above it without the setting)."""
    import os

    @ray_local.remote(num_cpus=0)
    def niceness() -> int:
        return os.nice(0)

    assert os.environ["RAY_worker_niceness"] == "0"
    assert ray_local.get(niceness.remote()) == os.nice(0)
