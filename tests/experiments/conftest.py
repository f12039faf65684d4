"""What the ``--quick`` end-to-end modules share: one call of the CLI per experiment, and the readers of its folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``quick(name, arms, *extra)``: ``python -m rlec.experiments <name> --quick --seeds 1 --arms <arms> *extra`` into
    a fresh folder (asserting exit 0); returns the folder."""
    from rlec.experiments import cli

    def run(name: str, arms: str, *extra: str) -> Path:
        out = tmp_path_factory.mktemp(name) / "out"
        assert cli.main([name, "--quick", "--seeds", "1", "--arms", arms, *extra, "--out", str(out)]) == 0
        return out

    return run


@pytest.fixture(scope="session")
def arm_metrics() -> Callable[[Path, str], list[dict]]:
    """``arm_metrics(out, arm)``: an arm-seed's per-step metrics (seed 0; a two-stage arm's stages one after the other)."""
    return lambda out, arm: json.loads((out / arm / "seed0" / "run.json").read_text())["metrics"]
