"""The probe set and the pilot's pool (rlec.experiments.pilot, issue 57 items 4-5): the same probe prompts for every arm
and seed, drawn from the held-out pool; the committed pilot keeps exactly the informative band. No launch."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rlec.experiments import cli, core, pilot
from rlec.experiments.spec import INFORMATIVE_BAND, PILOT_SAMPLES, Probe

REPO = Path(__file__).resolve().parents[2]


def _problem(row) -> tuple[str, int]:
    from rlec.demo.warm_start import AdditionProblem, is_held_out

    text = row["extra_info"]["task_text"].rsplit("\n\n", 1)[-1]
    a, b = text.removeprefix("What is ").removesuffix("?").split(" + ")
    return text, is_held_out(AdditionProblem(text, str(int(a) + int(b)), len(a)))


def test_the_probe_set_is_64_held_out_prompts_written_identically_every_time(tmp_path) -> None:
    first = pilot.write_probe_set(tmp_path / "a.parquet", Probe())
    second = pilot.write_probe_set(tmp_path / "b.parquet", Probe())
    assert first.read_bytes() == second.read_bytes()
    frame = pd.read_parquet(first)
    problems = [_problem(row) for _, row in frame.iterrows()]
    assert len(problems) == 64 and len({text for text, _ in problems}) == 64
    assert all(held for _, held in problems)  # never trained on, by the warm start or the training rows
    assert set(frame["extra_info"].map(lambda e: e["objective"])) == {"binary"}  # the training prompt


def test_every_arm_and_seed_launches_with_the_same_probe_file_and_schedule(tmp_path, monkeypatch) -> None:
    """run_arm_seed's launch overrides, captured for each arm x seed of e3: the rlec.probe.* ones are identical."""
    exp = cli.load("e3")
    shared = {"model": tmp_path / "model", "train": tmp_path / "train.parquet", "test": tmp_path / "test.parquet",
              "probe": tmp_path / "shared" / "data" / "probe.parquet"}
    seen: dict[tuple[str, int], list[str]] = {}

    class Launched(Exception):
        pass

    def launch(folder, overrides, **kw):
        seen[(folder.parent.name, kw["seed"])] = [o for o in overrides if o.startswith("rlec.probe.")]
        raise Launched

    monkeypatch.setattr(core, "launch", launch)
    for arm in exp.arms:
        for seed in (0, 1):
            with pytest.raises(Launched):
                core.run_arm_seed(exp, arm.name, seed, tmp_path / "out", exp.steps, shared)
    assert len(seen) == 6 and len({tuple(v) for v in seen.values()}) == 1
    assert next(iter(seen.values())) == [f"rlec.probe.file={shared['probe'].resolve()}", "rlec.probe.every=20",
                                         "rlec.probe.samples=8", "rlec.probe.temperature=1.0"]


def test_pilot_data_writes_the_probe_set_and_the_pool_once(tmp_path) -> None:
    exp = cli.load("e3")
    paths = core.pilot_data(exp, tmp_path)
    assert paths["probe"] == tmp_path / "probe.parquet" and len(pd.read_parquet(paths["probe"])) == 64
    if pilot.pilot_path("e3").is_file():  # the committed pilot: the training pool is its kept prompts, cycled
        data = pilot.read_pilot(pilot.pilot_path("e3"))
        pool = pd.read_parquet(paths["train"])
        ids = pool["extra_info"].map(lambda e: e["question_id"]).tolist()
        assert len(ids) == exp.train_rows
        assert ids == [data["kept"][k % len(data["kept"])] for k in range(exp.train_rows)]
    stamp = paths["probe"].stat().st_mtime_ns
    core.pilot_data(exp, tmp_path)
    assert paths["probe"].stat().st_mtime_ns == stamp  # reused, not rewritten


def test_pool_samples_cycle_the_kept_prompts_in_order() -> None:
    cands = [{"question_id": f"q{i}", "task_text": f"What is {i} + 0?", "gold": str(i), "q": 0.5} for i in range(3)]
    got = pilot.pool_samples({"candidates": cands, "kept": ["q2", "q0"]}, 5)
    assert [s.question.question_id for s in got] == ["q2", "q0", "q2", "q0", "q2"]


@pytest.mark.parametrize(("content", "named"), [
    ("not json", "unreadable"),
    (json.dumps({"schema": "other"}), "schema"),
    (json.dumps({"schema": pilot.PILOT_SCHEMA, "candidates": [{"question_id": "a"}], "kept": ["b"]}), "'kept'"),
])
def test_a_bad_pilot_file_is_refused_naming_it(tmp_path, content, named) -> None:
    path = tmp_path / "pilot.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=named) as info:
        pilot.read_pilot(path)
    assert str(path) in str(info.value)


@pytest.mark.skipif(not pilot.pilot_path("e3").is_file(), reason="no committed e3 pilot")
def test_the_committed_e3_pilot_keeps_exactly_the_informative_band() -> None:
    data = pilot.read_pilot(pilot.pilot_path("e3"))
    lo, hi = INFORMATIVE_BAND
    assert data["samples"] == PILOT_SAMPLES and data["temperature"] == 1.0 and data["top_k"] == -1
    assert all(c["n"] == PILOT_SAMPLES for c in data["candidates"])
    assert data["kept"] == [c["question_id"] for c in data["candidates"] if lo < c["q"] < hi]
    assert data["n_kept"] == len(data["kept"]) and data["n_candidates"] == len(data["candidates"])
    from rlec.demo import warm_start

    assert data["warm_start_key"] == warm_start.folder_key(warm_start.WarmStartConfig())  # the warm start the runs use


def test_quick_probes_a_smaller_set_on_the_same_schedule() -> None:
    exp = cli.load("e3")
    quick = exp.quick(4)
    assert (quick.probe.prompts, quick.probe.samples, quick.probe.every) == (8, 4, exp.probe.every)


def test_progress_reads_each_arm_seeds_steps_so_far_and_the_probe_first_and_latest(tmp_path) -> None:
    from rlec.experiments import progress

    out = tmp_path / "e3"
    run = out / "grpo" / "seed0"
    run.mkdir(parents=True)
    (out / core.STAMP).write_text(json.dumps({"experiment": "e3", "probe": {"metric": "rlec/probe/entropy"}}))
    rows = [{"step": 1, "rlec/probe/entropy": 0.9, "actor/pg_clipfrac": 0.0, "other": 1},
            {"step": 2, "actor/pg_clipfrac": 0.1}, {"step": 3, "rlec/probe/entropy": 0.6, "actor/ppo_kl": 0.01}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "torn')
    got = progress.progress(out)["runs"]["grpo/seed0"]
    assert got["steps"] == 3 and got["finished"] is False  # the torn line is skipped; no run.json yet
    assert got["probe_first"] == [1, 0.9] and got["probe_latest"] == [3, 0.6]
    assert got["metrics"][0] == {"step": 1, "rlec/probe/entropy": 0.9, "actor/pg_clipfrac": 0.0}  # only the kept keys
    with pytest.raises(ValueError, match="not an experiment folder"):
        progress.progress(tmp_path)
