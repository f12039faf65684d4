"""``python -m rlec.experiments passk --quick --arms passk_then_pass1`` end to end (verl's trainer on CPU):
the switch arm's two launches train pass@k (k = 4) and then pass@1 from the first launch's final weights; the graded
probe (``rlec/probe/pass@4/low_q``, the premise gate's figure) is logged inside verl's trainer."""

from __future__ import annotations

import json

import pytest
import yaml

from rlec.experiments import keys as K

pytestmark = [pytest.mark.slow, pytest.mark.minutes(5)]  # tests/conftest.py: the longest modules start first


def test_passk_switch_arm_trains_pass_at_k_then_pass_at_1_from_its_weights(quick, arm_metrics) -> None:
    # two launches of 2 steps (RLEC's b schedule needs 2 per launch): ~5 min
    out = quick("passk", "passk_then_pass1")
    rows = arm_metrics(out, "passk_then_pass1")
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    # pass@k, then the plain advantage
    assert [row.get(K.M_ACTIVE_K) for row in rows] == [4, 4, None, None], rows
    seed = out / "passk_then_pass1" / "seed0"
    (second,) = (seed / "stage2" / "launches").glob("*/config.yaml")
    model = yaml.safe_load(second.read_text())["actor_rollout_ref"]["model"]["path"]
    assert model.startswith(str((seed / "stage1").resolve())), model  # stage 2 starts from stage 1's final HF weights
    # ... on the rows verl's sampler would have drawn after stage 1 (the data order continues), unshuffled
    data = yaml.safe_load(second.read_text())["data"]
    assert data["shuffle"] is False and str(data["train_files"]).find(str((seed / "stage2" / "train.parquet").resolve())) >= 0, data
    # the graded probe at each launch's first and last step (2 + 2 steps): pass@4 over the low-q probe prompts (the
    # committed pilot flags them), within [0, 1] and no lower than the probe's pass@1 over all of them
    from rlec.probe_keys import LOW_Q, pass_at_k_key

    low_q, all_k, one = pass_at_k_key(4, LOW_Q), pass_at_k_key(4), pass_at_k_key(1)
    assert [row["step"] for row in rows if all_k in row] == [1, 2, 3, 4], rows
    assert all(0.0 <= row[one] <= row[all_k] <= 1.0 for row in rows)
    assert [row["step"] for row in rows if low_q in row] == [1, 2, 3, 4], rows
    assert all(0.0 <= row[low_q] <= 1.0 for row in rows)
    result = json.loads((out / "results.json").read_text())
    assert set(result["arms"]["passk_then_pass1"]["table"]) >= {"held-out pass@1", "held-out pass@4"}
