"""Shared test set-up: offline hub, GPU marker, the test budget guard, tiny models and a local Ray cluster.

No ``tests/__init__.py`` on purpose: verl and TransferQueue install a top-level ``tests``
package, and pytest's importlib mode (pyproject.toml) keeps ours from being shadowed.
"""

from __future__ import annotations

import logging
import os

# Before anything imports transformers / huggingface_hub: a stray hub call fails fast.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Ray starts its workers at nice 15 (RAY_worker_niceness); beside any nice-0 load (a busy loop, another suite's
# pytest workers) they got ~3% of a core and launch tests ran past their timeout for load alone (issue 55, the
# busy-loop check). A test's Ray workers run at the test's own priority; setdefault keeps a caller's choice.
os.environ.setdefault("RAY_worker_niceness", "0")

import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


def _has_cuda() -> bool:
    """Without an NVIDIA driver there is no CUDA: answered without importing torch (~1 s at collection)."""
    if not Path("/proc/driver/nvidia").exists() and not Path("/dev/nvidiactl").exists():
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing is a set-up error reported elsewhere
        return False


# --- the test budget (README "Test budget") ------------------------------------------------------
# A test not marked `slow` should not pay for a heavy child process: a Python that imports torch costs
# ~3.5 CPU-seconds, one that imports verl or Megatron 5-10, torchrun and a training run minutes. The
# CPU time of a test's (waited-for) children is measured and REPORTED: every unmarked test over
# CHILD_CPU_BUDGET_S is listed at the end of the run with its figure (mark it slow or share its set-up).
# It is not a pass/fail criterion at that level, because CPU time grows with contention (issue 36: on a
# quiet 2-core box 5 tests measured 5.2-6.9 CPU-s against a limit of 5; at load 5-27 six measured up to
# 10.1), so a limit near the cost would make the verdict depend on the machine. What fails is only what
# load alone cannot cause: an unmarked test that starts Ray (a count, not a time), or one whose children
# use more than CHILD_CPU_FAIL_S = 120 CPU-s, about 12x the worst figure measured under load 27 (10.1 CPU-s)
# and 24x the budget, while one launch of a training run costs 25-150 CPU-s and torchrun more.
CHILD_CPU_BUDGET_S = 5.0
CHILD_CPU_FAIL_S = 120.0
WALL_NOTE_S = 15.0
_RAY_FIXTURES = {"ray_local"}
_COST_START = pytest.StashKey[tuple]()
_OVER_WALL = pytest.StashKey[list]()
_OVER_BUDGET = pytest.StashKey[list]()
_COST_PROPERTY = "rlec_test_cost"  # (wall s, child CPU-s) in a report's user_properties
_CONFIG: dict[str, pytest.Config] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--child-cpu-budget", type=float, default=CHILD_CPU_BUDGET_S, metavar="S",
                     help="list, at the end of the run, every test not marked slow whose child processes used "
                          f"more than S CPU-seconds (a report, never a failure; default {CHILD_CPU_BUDGET_S:g})")
    parser.addoption("--child-cpu-limit", type=float, default=CHILD_CPU_FAIL_S, metavar="S",
                     help="fail a test not marked slow whose child processes used more than S CPU-seconds "
                          f"(default {CHILD_CPU_FAIL_S:g}: far above what load can do to a fast test; 0 turns it off)")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_COST_START] = (_children_cpu_s(), time.perf_counter(), _ray_running())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    start = item.stash.get(_COST_START, None)
    if call.when != "teardown" or start is None or item.get_closest_marker("slow") or item.get_closest_marker("gpu"):
        return  # `gpu` tests run on a GPU machine only (tools/gpu_smoke.sh), outside this CPU budget
    cpu0, wall0, ray0 = start
    child_cpu, wall = _children_cpu_s() - cpu0, time.perf_counter() - wall0
    # in the report, so the summary sees it also from pytest-xdist's workers (pytest_runtest_logreport)
    report.user_properties.append((_COST_PROPERTY, (wall, child_cpu)))
    limit = item.config.getoption("--child-cpu-limit")
    problem = None
    if limit and child_cpu > limit:
        problem = f"its child processes used {child_cpu:.1f} CPU-s (limit {limit:g} for a test not marked slow)"
    elif not ray0 and _ray_running():
        problem = "it started Ray"
    if problem and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"test budget: {problem}; mark it @pytest.mark.slow, or share the set-up "
                           "(README \"Test budget\"; --child-cpu-limit=0 turns this check off)")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the cost of each test not marked slow (in this process, or sent by an xdist worker)."""
    cost = dict(report.user_properties).get(_COST_PROPERTY) if report.when == "teardown" else None
    config = _CONFIG.get("config")
    if cost is None or config is None:
        return
    wall, child_cpu = cost
    if wall > WALL_NOTE_S:
        config.stash.setdefault(_OVER_WALL, []).append((wall, child_cpu, report.nodeid))
    budget = config.getoption("--child-cpu-budget")
    if budget and child_cpu > budget:
        config.stash.setdefault(_OVER_BUDGET, []).append((child_cpu, wall, report.nodeid))


# --- memory admission for verl launches (issue 55 item 5) ---------------------------------------------
# One verl launch on CPU holds 5-8 GB (about ten processes that each import torch and verl: 0.6-1.0 GB each, four
# Megatron ranks in the TP2 x EP2 test). Measured (2026-12-07): two clones' `make test` side by side on a 24 GiB box,
# four launches at once beside other jobs, and Ray's memory monitor killed the workers of 7 launch tests ("Task was
# killed due to the node running low on memory"); no port collided. The tests in a module marked
# `@pytest.mark.minutes` (the modules that launch verl) therefore take one of a machine-wide number of launch slots,
# one per LAUNCH_SLOT_GIB of the machine's memory (24 GiB: 2, what one suite's two xdist workers use), shared by
# every pytest on the machine through lock files in the temp folder. A test waits for its slot before pytest-timeout
# starts its clock, so a wait never counts as a hang. RLEC_TEST_LAUNCH_SLOTS=N sets the number (0: no admission).
LAUNCH_SLOT_GIB = 10.0
_SLOT_POLL_S = 2.0


def launch_slots() -> int:
    """Launch slots on this machine: ``RLEC_TEST_LAUNCH_SLOTS`` if set, else one per :data:`LAUNCH_SLOT_GIB` of
    ``MemTotal`` (at least 1). Raises ``pytest.UsageError`` for a value that is not an integer >= 0."""
    value = os.environ.get("RLEC_TEST_LAUNCH_SLOTS")
    if value is not None:
        if not value.strip().isdigit():
            raise pytest.UsageError(f"RLEC_TEST_LAUNCH_SLOTS={value!r}: expected an integer >= 0 (0: no admission)")
        return int(value)
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return max(1, int(total_gib // LAUNCH_SLOT_GIB))


def launch_slot_dir() -> Path:
    """The machine-wide folder of the slots' lock files (``RLEC_TEST_LAUNCH_SLOT_DIR`` or ``<tmp>/rlec-test-launch-slots``)."""
    import tempfile

    return Path(os.environ.get("RLEC_TEST_LAUNCH_SLOT_DIR") or Path(tempfile.gettempdir()) / "rlec-test-launch-slots")


def acquire_launch_slot(slots: int, folder: Path, *, poll_s: float = _SLOT_POLL_S, timeout_s: float | None = None):
    """Take the first free of ``slots`` lock files ``folder/slot<i>.lock`` (waiting while all are held).

    Returns the held :class:`rlec.io.FileLock` (release it when the launch is over), or None when ``slots`` is 0.
    Raises TimeoutError after ``timeout_s`` seconds of waiting (None: wait as long as it takes). A slot held by a
    killed process is free at once (the kernel drops its flock).
    """
    from rlec.io import FileLock, LockHeld

    if slots <= 0:
        return None
    start = time.monotonic()
    while True:
        for i in range(slots):
            lock = FileLock(folder / f"slot{i}.lock", what=f"test launch slot {i}")
            try:
                return lock.acquire()
            except LockHeld:
                continue
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise TimeoutError(f"no free launch slot of {slots} in {folder} after {timeout_s:g} s")
        time.sleep(poll_s)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A test of a module that launches verl (``@pytest.mark.minutes``) runs holding a launch slot; the wait comes
    before pytest-timeout's clock (this wrapper is outside its own)."""
    slots = launch_slots() if item.get_closest_marker("minutes") else 0
    lock = acquire_launch_slot(slots, launch_slot_dir()) if slots else None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    over = sorted(config.stash.get(_OVER_WALL, []), reverse=True)
    if over:
        terminalreporter.section(f"tests not marked slow that took over {WALL_NOTE_S:g} s (set-up + call + teardown)")
        for wall, child_cpu, nodeid in over:
            terminalreporter.write_line(f"{wall:7.1f} s wall  {child_cpu:6.1f} CPU-s in children  {nodeid}")
    budget = config.getoption("--child-cpu-budget")
    heavy = sorted(config.stash.get(_OVER_BUDGET, []), reverse=True)
    if heavy:
        terminalreporter.section(f"tests not marked slow whose children used over {budget:g} CPU-s "
                                 "(a report, not a failure: mark them slow or share their set-up)")
        for child_cpu, wall, nodeid in heavy:
            terminalreporter.write_line(f"{child_cpu:6.1f} CPU-s in children  {wall:7.1f} s wall  {nodeid}")


def module_minutes(items: list[pytest.Item]) -> dict[str, float]:
    """``{module path: its tests' largest @pytest.mark.minutes(m)}`` (0 for a module without the mark)."""
    minutes: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("minutes")
        if mark is not None and (len(mark.args) != 1 or not isinstance(mark.args[0], (int, float))):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.minutes takes one number (the module's minutes), "
                                    f"got {mark.args!r}")
        key = str(item.path)
        minutes[key] = max(minutes.get(key, 0.0), float(mark.args[0]) if mark else 0.0)
    return minutes


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # a test on the shared Ray cluster is slow by definition (before `-m` deselects)
        if _RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # the longest modules first (stable: a module's tests stay together and in order): `make test` hands whole
    # files to 2 xdist workers in this order (--dist loadfile --no-loadscope-reorder), so the few multi-minute
    # verl launches start at once and the many short tests fill in after; xdist's own order (most tests first)
    # left single-test modules of 5-7 minutes for the end, one worker idle meanwhile
    minutes = module_minutes(items)
    items.sort(key=lambda item: -minutes[str(item.path)])
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine); run on the cluster or the device tool")
    for item in gpu_items:
        item.add_marker(skip_gpu)


# + Transformer Engine's attention selectors, which building a Megatron model in-process sets (megatron's
# _set_attention_backend) and which a later subprocess with another attention backend refuses
_DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                    "NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")


@pytest.fixture(autouse=True)
def _restore_distributed_env():
    """Undo the ``MASTER_PORT`` / ``RANK`` ... that an in-process ``init_distributed`` leaves in os.environ
    (and the ``NVTE_*_ATTN`` selectors an in-process Megatron model sets).

    Without this, every later test that starts a subprocess passes it a port that was free when an
    earlier test picked it; once another program on the machine takes that port (measured: a
    concurrent local run did), those subprocesses fail with EADDRINUSE (8 failures and errors in a
    clean-clone run of the suite).
    """
    saved = {key: os.environ.get(key) for key in _DISTRIBUTED_ENV}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def _restore_logging_levels():
    """Undo the logger levels a test changed: a run's report called in-process (rlec.report.quiet_third_party)
    quiets the root, verl and transformers loggers to ERROR, and a later test's caplog then saw no warnings
    (measured: tests/data/test_prepare.py failed when it ran after the local loop's tests, since retired)."""
    loggers = logging.root.manager.loggerDict
    saved = {name: lg.level for name, lg in loggers.items() if isinstance(lg, logging.Logger)}
    root_level = logging.root.level
    yield
    if logging.root.level != root_level:
        logging.root.setLevel(root_level)
    for name, level in saved.items():  # loggers created during the test keep what their modules set
        if loggers[name].level != level:
            loggers[name].setLevel(level)


@pytest.fixture(scope="session")
def compose_rlec():
    """``compose_rlec(*overrides)`` -> a fresh copy of megatron_configs/rlec.yaml composed on verl's config
    (Hydra compose is cached per set of overrides)."""
    import copy

    from rlec.config import compose

    cache = {}

    def _compose(*overrides: str):
        if overrides not in cache:
            cache[overrides] = compose(list(overrides))
        return copy.deepcopy(cache[overrides])

    return _compose


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def run_job(repo_root: Path):
    """``run_job(job)``: a test's job script (a Ray / TransferQueue scenario) run as ``python job`` in its own process
    with the checkout on ``PYTHONPATH``; returns the JSON object after its last ``RESULT `` line, and fails the test,
    with the tails of its output, when it exits non-zero or prints none."""
    import json
    import subprocess

    def run(job: Path, timeout_s: float = 600) -> dict:
        proc = subprocess.run([sys.executable, str(job)], env=os.environ | {"PYTHONPATH": str(repo_root)},
                              capture_output=True, text=True, timeout=timeout_s)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return json.loads(lines[-1][len("RESULT "):])
    return run


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The bundled real Qwen3 tokenizer (no download)."""
    from rlec.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def tiny_moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3-MoE Hugging Face folder (with tokenizer), built once per session."""
    from rlec.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny_qwen3_moe", seed=0)


@pytest.fixture(scope="session")
def tiny_dense_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random dense Qwen3 Hugging Face folder (with tokenizer)."""
    from rlec.models import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("models") / "tiny_qwen3",
        seed=0,
        overrides={"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
    )


@pytest.fixture(scope="session")
def sample_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped samples prepared once per session as `python -m rlec.data.prepare` does by default
    (train.parquet, test.parquet, summary.json): make run's data. Read it, never write into it."""
    from rlec.data.prepare import main as prepare

    out = tmp_path_factory.mktemp("sample_data") / "data"
    assert prepare(["--output-dir", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray cluster (2 CPUs), shut down at the end of the session."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def fp8_model():
    """``fp8_model(layout, precision)`` -> the override an FP8 run of the tiny layout needs: the
    FP8-capable tiny model's shape (whole 128 x 128 blocks per rollout GPU; what tools/gpu_smoke.sh
    runs), nothing for other combinations."""

    def overrides(layout: str, precision: str) -> list[str]:
        return ["rlec.check.model_shape=tiny_qwen3_moe_fp8"] if (layout, precision) == ("tiny_1gpu", "fp8") else []

    return overrides
