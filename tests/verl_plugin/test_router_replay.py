"""Routing replay (R2 / R3) on the CPU layout's padded (BSHD) micro-batches (issue 32 item 3).

verl 0.9.1 records and replays routes as packed (THD) rows; the CPU layout's Megatron forward routes every
position of a right-padded micro-batch, so verl's own replay fails there ("Router replay tensors are not
aligned"). rlec.cpu.padded_forward's ``router_replay_bshd`` shim lays the routes out as that forward routes them.
The reference that does not share the shim's layout: each sample run alone (a batch of one, no padding).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("check_router_replay.py")


@pytest.mark.slow  # a child process importing verl and Megatron and building the tiny model: ~15 CPU-seconds
def test_r2_and_r3_replay_on_padded_batches_route_each_sample_as_it_routes_alone(tiny_moe_dir: Path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VERL_PLATFORM": "cpu"}
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, str(CHECK), str(tiny_moe_dir)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT_JSON "))[12:])
    # R2's record pass: one route row per token, per layer, top-k; a sample's routes in a padded batch of rows of
    # 15, 7 and 18 tokens are the ones it gets alone
    assert [shape[0] for shape in r["record_shapes"]] == r["lengths"] and all(s[1] == r["layers"] for s in r["record_shapes"])
    assert r["record_equal_alone"] and r["native_lp_vs_alone"] < 1e-5
    assert r["r2_replay_lp_vs_native"] < 1e-6  # replaying the recorded routes on the same weights changes nothing
    # R3: random rollout routes replayed at every token but the last of each sample (14 + 6 + 17 = 37), in every
    # layer; they differ from the routers' own choices, so the log-probs move, and equal the sample's alone
    assert r["r3_records"] == r["layers"]
    assert r["r3_replayed"] == [sum(n - 1 for n in r["lengths"])] * r["layers"] and r["r3_equal"] == r["r3_replayed"]
    assert all(d > 0 for d in r["r3_native_differs"])
    assert r["r3_lp_vs_native"] > 1e-3 and r["r3_lp_vs_alone"] < 1e-5
    # without the shim verl's own replay fails on the padded batch (the error the shim answers)
    assert r["unpatched_error"] and "Router replay tensors are not aligned" in r["unpatched_error"]
