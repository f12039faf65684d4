"""Shared test set-up: offline hub, GPU marker, tiny models and a local Ray cluster.

No ``tests/__init__.py`` on purpose: verl and TransferQueue install a top-level ``tests``
package, and pytest's importlib mode (pyproject.toml) keeps ours from being shadowed.
"""

from __future__ import annotations

import os

# Before anything imports transformers / huggingface_hub: a stray hub call fails fast.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing is a set-up error reported elsewhere
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine); run on the cluster or the device tool")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


_DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def _restore_distributed_env():
    """Undo the ``MASTER_PORT`` / ``RANK`` ... that an in-process ``init_distributed`` leaves in os.environ.

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
