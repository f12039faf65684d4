"""benchmarks/throughput_projection.py: the committed layouts compose into the cost model; smoke-test
layouts are not projected (a tok/s/GPU of the tiny model would be meaningless)."""

from __future__ import annotations

import sys

import pytest

from rlec.cluster.cost_model import Assumptions
from rlec.cluster.memory import GIB


@pytest.fixture(scope="module")
def projection(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import throughput_projection

    return throughput_projection


def test_committed_layout_projection_composes(projection) -> None:
    assert {"qwen3_30b_a3b_4x8", "qwen3_30b_a3b_1x8", "tiny_1gpu"} <= set(projection.committed_layouts())
    row = projection.project_layout("qwen3_30b_a3b_4x8", Assumptions())
    assert (row["gpus"], row["device"], row["responses_per_step"]) == (32, "H100 SXM 80GB", 256 * 8)
    assert row["params_per_gpu"] == 394_868_736 + 3_623_878_656
    assert row["memory_gib"]["params"] == 7.5 and row["memory_gib"]["grads"] == 15.0
    assert row["memory_gib"]["optimizer"] == pytest.approx(12 * (394_868_736 / 8 + 3_623_878_656 / 4) / GIB, abs=0.05)


def test_tiny_layout_is_listed_as_not_projected(projection) -> None:
    import throughput_report

    section = projection.run_projection(Assumptions(), log=lambda _msg: None)
    assert {r["layout"] for r in section["rows"]} == {"qwen3_30b_a3b_4x8", "qwen3_30b_a3b_1x8"}
    assert section["not_projected"] == [{"layout": "tiny_1gpu", "reason": "39M-parameter smoke-test model"}]
    table = "\n".join(throughput_report.projection_table(section))
    assert "| tiny_1gpu |" not in table
    assert "Not projected: tiny_1gpu (39M-parameter smoke-test model)" in table
