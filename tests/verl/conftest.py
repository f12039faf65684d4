"""Fixtures of the verl-integration tests: composed rlec configs (Hydra compose is cached)."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture(scope="session")
def compose_rlec():
    """``compose_rlec(*overrides)`` -> a fresh copy of megatron_configs/rlec.yaml composed on verl's config."""
    from rlec.config import compose

    cache = {}

    def _compose(*overrides: str):
        if overrides not in cache:
            cache[overrides] = compose(list(overrides))
        return copy.deepcopy(cache[overrides])

    return _compose
