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
    (json.dumps(["a list"]), "expected a pilot file's object, got a JSON list"),
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


# ---- pools (passk) and bands (e3_budget) ------------------------------------------------------------------------------

def test_a_pools_candidates_are_its_distinct_training_prompts_then_probe_prompts_none_trained_on() -> None:
    exp = cli.load("passk")
    cands = pilot.pool_candidates(exp)
    train = [c for c in cands if c["split"] == "train"]
    probe = [c for c in cands if c["split"] == "probe"]
    assert len(probe) == exp.probe.prompts and len({c["task_text"] for c in probe}) == exp.probe.prompts
    assert len({c["task_text"] for c in train}) == len(train)  # distinct prompts
    assert not {c["task_text"] for c in probe} & {c["task_text"] for c in train}  # no probe prompt is trained on
    from rlec.environments.pool import pool_rows

    rows, _ = pool_rows(exp.pool, exp.train_rows, seed=0)  # the rows prepare_shared writes
    assert {c["task_text"] for c in train} == {r["extra_info"]["task_text"] for r in rows}
    assert pilot.pool_candidates(exp) == cands  # deterministic
    assert pilot.row_of(probe[3], 0, "probe")["extra_info"]["question_id"] == probe[3]["question_id"]
    with pytest.raises(ValueError, match="rerun the pilot"):
        pilot.row_of({**probe[3], "env_seed": probe[3]["env_seed"] + 2}, 0, "probe")


def test_the_bands_keep_the_first_count_in_each_band_and_name_a_shortfall() -> None:
    from rlec.experiments.spec import Band

    cands = [{"question_id": f"q{i}", "q": q} for i, q in enumerate([0.0, 0.1, 0.9, 0.3, 0.2, 0.8, 0.95, 1.0, 0.5])]
    kept, figures = pilot.select_prompts(cands, (Band("hard", 0.05, 0.35, 2), Band("easy", 0.8, 1.0, 5)))
    # hard q1, q3 and easy q2, q5, q6, q7, interleaved; q4 (0.2) is a third hard one; 0.0 and 0.5 in no band
    assert kept == ["q1", "q2", "q3", "q5", "q6", "q7"]
    assert figures["hard"]["short"] == 0 and figures["easy"] == {"lo": 0.8, "hi": 1.0, "count": 5, "kept": 4, "short": 1}
    # without bands: the informative band, open
    assert pilot.select_prompts(cands, ())[0] == ["q1", "q2", "q3", "q4", "q5", "q8"]
    with pytest.raises(ValueError, match="band 'x'"):
        Band("x", 0.5, 0.4, 1)


def test_the_offline_all_wrong_prediction_by_hand() -> None:
    from rlec.experiments.e3_budget import predicted_all_wrong

    # a hard prompt (q 0.3, rank 1) and an easy one (q 0.9, rank 0): the budget of 16 goes 12 / 4 (n_min 4 to the easy)
    got = predicted_all_wrong([{"question_id": "h", "q": 0.3, "n": 10}, {"question_id": "e", "q": 0.9, "n": 10}])
    assert got["n per prompt, dynamic"] == [12, 4] and got["rollouts"] == 16
    assert got["all-wrong, fixed n"] == pytest.approx((0.7**8 + 0.1**8) / 2)
    assert got["all-wrong, dynamic"] == pytest.approx((0.7**12 + 0.1**4) / 2)
    assert got["all-wrong among hard, fixed n"] == pytest.approx(0.7**8)  # q <= 0.35
    assert got["all-wrong among hard, dynamic"] == pytest.approx(0.7**12)


def _pool_pilot(exp, tmp_path: Path) -> dict:
    """A pilot file for ``exp``'s pool with made-up q's: training candidates alternate in / out of the band, probe
    candidates alternate q 0.1 / 0.5."""
    cands = pilot.pool_candidates(exp)
    for i, c in enumerate(cands):
        c["q"], c["n"] = ((0.5 if i % 2 == 0 else 0.0) if c["split"] == "train" else (0.1 if i % 2 == 0 else 0.5)), 32
    train = [c for c in cands if c["split"] == "train"]
    return {"schema": pilot.PILOT_SCHEMA, "candidates": cands, "kept": pilot.select_prompts(train, ())[0],
            "probe": [c["question_id"] for c in cands if c["split"] == "probe"]}


def test_a_pool_experiment_trains_on_the_kept_prompts_and_probes_the_flagged_probe_prompts(tmp_path, monkeypatch) -> None:
    from rlec.verl_plugin import probe as hook

    exp = cli.load("passk").quick(4)  # 64 training rows, 8 probe prompts
    data = _pool_pilot(exp, tmp_path)
    path = tmp_path / "pilot_passk.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(pilot, "pilot_path", lambda name: path)
    paths = core.pilot_data(exp, tmp_path)
    pool = pd.read_parquet(paths["train"])
    ids = pool["extra_info"].map(lambda e: e["question_id"]).tolist()
    assert ids == [data["kept"][k % len(data["kept"])] for k in range(exp.train_rows)]
    assert set(pool["data_source"]) == {"rlve/pair_sum"}
    frame = pd.read_parquet(paths["probe"])
    probe_ids = frame["extra_info"].map(lambda e: e["question_id"]).tolist()
    assert probe_ids == data["probe"][: exp.probe.prompts]
    by_id = {c["question_id"]: c for c in data["candidates"]}
    golds, sources, low_q = hook.read_probe_answers(str(paths["probe"]))
    assert low_q == [by_id[i]["q"] < pilot.LOW_Q_BELOW for i in probe_ids] and True in low_q and False in low_q
    assert golds == [by_id[i]["gold"] for i in probe_ids] and len(hook.read_probe_prompts(str(paths["probe"]))) == 8
    assert core.pilot_stamp(exp) == __import__("hashlib").sha256(path.read_bytes()).hexdigest()


def test_a_pool_experiment_without_a_pilot_still_has_its_probe_set_unflagged(tmp_path, monkeypatch) -> None:
    from rlec.verl_plugin import probe as hook

    monkeypatch.setattr(pilot, "pilot_path", lambda name: tmp_path / "none.json")
    exp = cli.load("passk")
    paths = core.pilot_data(exp, tmp_path)
    assert "train" not in paths  # the pool's own rows (prepare_shared's train.parquet)
    golds, sources, low_q = hook.read_probe_answers(str(paths["probe"]))
    assert len(golds) == exp.probe.prompts and low_q is None


def test_passk_launches_grade_the_probe_and_e3s_folder_stamp_is_unchanged(tmp_path) -> None:
    passk, e3 = cli.load("passk"), cli.load("e3")
    shared = {"probe": tmp_path / "probe.parquet"}
    assert core.probe_overrides(passk, shared)[-1] == "rlec.probe.pass_k=4"
    assert not any("pass_k" in o for o in core.probe_overrides(e3, shared))
    # e3's gate run is stamped with the probe's fields before pass_k existed: its stamp must still match
    assert core.settings_stamp(e3, 800)["probe"] == {"prompts": 64, "samples": 8, "every": 20, "temperature": 1.0,
                                                       "metric": "rlec/probe/entropy"}
    assert core.settings_stamp(passk, 800)["probe"]["pass_k"] == 4


def test_the_committed_passk_pilot_keeps_the_band_and_flags_its_probe_prompts() -> None:
    exp = cli.load("passk")
    data = pilot.read_pilot(pilot.pilot_path("passk"))
    from rlec.demo import warm_start

    assert data["warm_start_key"] == warm_start.folder_key(exp.warm_start)  # passk's own warm start
    assert all(c["n"] == PILOT_SAMPLES for c in data["candidates"])
    train = [c for c in data["candidates"] if c["split"] == "train"]
    assert data["kept"] == pilot.select_prompts(train, ())[0] and data["n_candidates"] == len(train)
    fresh = pilot.pool_candidates(exp)  # the candidates the code draws today are the ones measured
    assert [(c["question_id"], c["split"]) for c in fresh] == [(c["question_id"], c["split"]) for c in data["candidates"]]
    assert data["probe"] == [c["question_id"] for c in data["candidates"] if c["split"] == "probe"]
    by_id = {c["question_id"]: c for c in data["candidates"]}
    assert data["probe_low_q"] == sum(by_id[i]["q"] < pilot.LOW_Q_BELOW for i in data["probe"])


def test_the_committed_e3_budget_pilot_fills_both_bands_and_repeats_e3s_measurement() -> None:
    from rlec.experiments.e3_budget import EASY, HARD, predicted_all_wrong

    data = pilot.read_pilot(pilot.pilot_path("e3_budget"))
    assert data["kept"] == pilot.select_prompts(data["candidates"], (HARD, EASY))[0] and len(data["kept"]) == 64
    by_q = {c["question_id"]: c["q"] for c in data["candidates"]}
    # hard and easy in turn: a --quick run's 4 rows hold two of each, so the budget has accuracies to rank by
    assert [by_q[i] <= HARD.hi for i in data["kept"][:4]] == [True, False, True, False]
    assert data["bands"]["hard"]["short"] == data["bands"]["easy"]["short"] == 0
    by_id = {c["question_id"]: c for c in data["candidates"]}
    assert data["figures"] == predicted_all_wrong([by_id[i] for i in data["kept"]])
    # the same candidates, warm start and sampling seed as e3's pilot: the same q for every candidate
    e3 = pilot.read_pilot(pilot.pilot_path("e3"))
    assert [(c["question_id"], c["q"]) for c in data["candidates"]] == [(c["question_id"], c["q"]) for c in e3["candidates"]]
