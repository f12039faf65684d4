"""The experiments' design (issue 57): primary metric, premise gate, paired verdicts, power note, confounds, bad input.

Synthetic :class:`Run` objects only, and in-process config composition: no launch.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlec.experiments import cli, core, report
from rlec.experiments import keys as K
from rlec.experiments.spec import (VERDICTS, Arm, Experiment, PaperSetting, Premise, Primary, Run, all_wrong_after_solved,
                                   collapse_events, falls_by, series_of, stops_rising, window_mean)

REPO = Path(__file__).resolve().parents[2]
PROBE = "rlec/probe/entropy"


def _run(arm: str, seed: int, probe: list[float], **extra: list[float]) -> Run:
    rows = [{"step": i + 1, PROBE: v, **{k: vals[i] for k, vals in extra.items()}} for i, v in enumerate(probe)]
    return Run(arm, seed, rows)


def _toy(**kw) -> Experiment:
    """A two-arm experiment over the probe entropy (the method claims higher), gated on a 40% fall of the baseline's."""
    base = dict(name="toy", claim="c", paper="p", data="binary", curves=(),
                arms=(Arm("base", "baseline", ()), Arm("method", "method", ("x=1",))), settings={K.BATCH: 4},
                baseline="base", primary=Primary("probe entropy, last 20%", lambda r: window_mean(r.series(PROBE), 0.8, 1.0), +1,
                                                 requires=(PROBE,)),
                premise=Premise("entropy falls >= 40%", falls_by(series_of(PROBE), 0.4, "probe entropy")), seeds=5, steps=5)
    base.update(kw)
    return Experiment(**base)


# ---- statistics and verdicts ------------------------------------------------------------------------------------------

def test_verdicts_read_the_paired_interval_on_the_claimed_side() -> None:
    """5 seeds: baseline's last-step probe entropy 0.5, method 0.5 + d_s. Reproduced iff the t-interval of the d_s lies
    above 0; an interval holding 0 is 'not reproduced'; fewer seeds than the power note, no verdict."""
    exp = _toy()
    falling = [1.0, 0.8, 0.7, 0.6, 0.5]  # a 50% fall: the premise holds

    def runs(diffs: list[float]) -> dict[str, list[Run]]:
        return {"base": [_run("base", s, falling) for s in range(len(diffs))],
                "method": [_run("method", s, [*falling[:-1], 0.5 + d]) for s, d in enumerate(diffs)]}

    assert report.premise_outcome(exp, [])["held"] is None  # no baseline run: unread, never "absent"
    premise = report.premise_outcome(exp, runs([0.0, 0.0])["base"])
    assert premise["held"] is True and premise["figures"]["probe entropy: fall"] == pytest.approx(0.5)
    up = report.compare(exp, runs([0.10, 0.12, 0.08, 0.11, 0.09]), quick=False, premise=premise)[0]
    assert up["verdict"] == "reproduced" and up["mean"] == pytest.approx(0.10) and up["df"] == 4
    assert up["lo"] == pytest.approx(0.10 - 2.776445 * np.std([0.10, 0.12, 0.08, 0.11, 0.09], ddof=1) / np.sqrt(5), abs=1e-6)
    mixed = report.compare(exp, runs([0.10, -0.12, 0.08, -0.11, 0.01]), quick=False, premise=premise)[0]
    assert mixed["verdict"] == "not reproduced" and mixed["lo"] < 0 < mixed["hi"]
    down = report.compare(exp, runs([-0.10, -0.12, -0.08, -0.11, -0.09]), quick=False, premise=premise)[0]
    assert down["verdict"] == "not reproduced"  # significant, but on the other side than the paper claims
    few = report.compare(exp, runs([0.10, 0.12, 0.08]), quick=False, premise=premise)[0]
    assert few["verdict"] is None and "3 paired seeds, fewer than the power note's 5" in few["why"]
    assert {up["verdict"], mixed["verdict"]} <= set(VERDICTS)
    absent = {**premise, "held": False}
    assert report.compare(exp, runs([0.1] * 5), quick=False, premise=absent)[0]["verdict"] == "premise absent"
    # a --quick run's gate is information: no verdict, not even "premise absent" (a quick rlve run once read so)
    quick = report.compare(exp, runs([0.1] * 5), quick=True, premise=absent)[0]
    assert quick["verdict"] is None and quick["why"] == "--quick: the wiring, not a verdict"


def test_a_primary_metric_not_measured_gives_no_verdict_naming_it() -> None:
    exp = _toy(premise=None)
    runs = {arm: [Run(arm, s, [{"step": 1}, {"step": 2}]) for s in range(5)] for arm in ("base", "method")}
    (cell,) = report.compare(exp, runs, quick=False, premise=None)
    assert cell["verdict"] is None and f"needs {PROBE}" in cell["why"]


def test_a_method_arm_not_trained_gives_no_verdict_naming_the_arm() -> None:
    """A gate-only run (the baseline's seeds, the premise held): the comparison said "primary metric not measured",
    though the metric was measured and the method arm had simply not trained (e3's gate results.json)."""
    exp = _toy()
    runs = {"base": [_run("base", s, [1.0, 0.8, 0.7, 0.6, 0.5]) for s in range(2)]}
    premise = report.premise_outcome(exp, runs["base"])
    (cell,) = report.compare(exp, runs, quick=False, premise=premise)
    assert cell["verdict"] is None and cell["why"] == "no paired seeds: 'method' not trained" and cell["seeds"] == 0


def test_premise_checks_by_hand() -> None:
    # falls_by: first measured value (NaN steps skipped) vs the last 20% of steps, mean over seeds
    runs = [_run("b", 0, [np.nan, 1.0, 0.9, 0.8, 0.7, 0.6, 0.6, 0.6, 0.5, 0.5]),  # 1.0 -> 0.5: 50%
            _run("b", 1, [np.nan, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.6, 0.6])]  # 0.8 -> 0.6: 25%
    held, figs = falls_by(series_of(PROBE), 0.4, "e")(runs)
    assert figs["e: fall"] == pytest.approx(0.375) and held is False
    assert falls_by(series_of(PROBE), 0.375, "e")(runs)[0] is True
    assert falls_by(series_of("absent"), 0.4, "e")(runs) == (None, {"missing": "e"})
    # stops_rising: the last 20% no higher than the 20% before
    rising = [_run("b", 0, [0.1, 0.2, 0.3, 0.4, 0.5])]
    assert stops_rising(series_of(PROBE), "p")(rising)[0] is False
    flat = [_run("b", 0, [0.1, 0.2, 0.3, 0.4, 0.4])]
    assert stops_rising(series_of(PROBE), "p")(flat) == (True, {"p: steps 60-80%": 0.4, "p: last 20%": 0.4, "p: rise": 0.0})


def test_passks_gate_reads_the_probe_hooks_own_metrics() -> None:
    """passk's premise on synthetic baseline runs keyed by the names rlec.verl_plugin.probe logs (their home
    rlec.probe_keys, not the spec's constants): entropy falls >= 40% and the low-q probe pass@4 stops rising."""
    from rlec import probe_keys as hook
    from rlec.experiments import passk

    low_q = hook.pass_at_k_key(passk.K_PASS, hook.LOW_Q)
    assert low_q == passk.PROBE_PASSK_LOW_Q == "rlec/probe/pass@4/low_q"

    def base(entropy: list[float], passk4: list[float]) -> list[Run]:
        rows = [{"step": i + 1, hook.ENTROPY: h, low_q: p} for i, (h, p) in enumerate(zip(entropy, passk4))]
        return [Run("pass1", s, rows) for s in (0, 1)]

    falling = [1.0, 0.8, 0.6, 0.5, 0.5]  # -50%
    check = passk.EXPERIMENT.premise.check
    held, figures = check(base(falling, [0.1, 0.2, 0.3, 0.3, 0.3]))  # pass@4 flat over the last 40%
    assert held is True and figures["probe pass@4 (low q): rise"] == 0.0
    assert check(base(falling, [0.1, 0.2, 0.3, 0.3, 0.4]))[0] is False  # still rising
    assert check(base([1.0, 0.9, 0.9, 0.9, 0.9], [0.1, 0.2, 0.3, 0.3, 0.3]))[0] is False  # entropy fell 10%
    rows = [{"step": i + 1, hook.ENTROPY: h} for i, h in enumerate(falling)]  # the graded probe not logged
    assert check([Run("pass1", 0, rows)]) == (None, {"missing": "probe pass@4 (low q)", "probe entropy: first": 1.0,
                                                     "probe entropy: last 20%": 0.5, "probe entropy: fall": 0.5,
                                                     "probe entropy: fall needed": 0.4})


def test_all_wrong_after_solved_follows_each_prompt() -> None:
    """Step 1: a solved, b not; step 2: a all wrong (solved before: counts), b all wrong (never solved: not counted);
    step 3: a right again, b right (first time: not counted)."""
    run = Run("a", 0, [{"step": t} for t in (1, 2, 3)], groups=[[[1, 0], [0, 0]], [[0, 0], [0, 0]], [[1, 1], [1, 0]]],
              prompts=[["a", "b"], ["a", "b"], ["a", "b"]])
    got = all_wrong_after_solved(run)
    assert np.isnan(got[0]) and got[1:] == [1.0, 0.0]
    assert np.isnan(all_wrong_after_solved(Run("a", 0, [], groups=[[[1, 0]]]))[0])  # no prompt texts: not measured


def test_collapse_events_count_runs_of_20_steps_at_both_targets() -> None:
    low, high = "cov/low", "cov/high"
    n = 80
    lo = np.full(n, 0.5)
    hi = np.full(n, 0.5)
    lo[5:30], hi[5:30] = 0.02, 0.01  # 25 steps answering nothing at both targets: one event
    lo[35:50], hi[35:50] = 0.99, 0.97  # 15 steps answering everything: too short (step 51 breaks it)
    lo[51:80], hi[51:80] = 0.99, 0.96  # 29 steps at both, to the run's end ...
    hi[65] = 0.5  # ... broken at one target for a step: runs of 14 and 14, no event
    rows = [{"step": i + 1, low: float(lo[i]), high: float(hi[i])} for i in range(n)]
    assert collapse_events(low, high)(Run("a", 0, rows)) == 1.0
    hi[65] = 0.96  # unbroken: 29 steps, closed by the run's end: a second event
    rows = [{"step": i + 1, low: float(lo[i]), high: float(hi[i])} for i in range(n)]
    assert collapse_events(low, high)(Run("a", 0, rows)) == 2.0
    assert np.isnan(collapse_events(low, high)(Run("a", 0, [{"step": 1}])))


# ---- the premise gate in the runner ------------------------------------------------------------------------------------

clusters: list[tuple[int, int]] = []
addresses: list[str | None] = []


@pytest.fixture()
def fake_runner(monkeypatch):
    """cli.main with run_arm_seed replaced by synthetic runs (no warm start, no launch, no Ray); returns the calls made
    (the Ray clusters started and the address each launch got: ``clusters``, ``addresses``)."""
    calls: list[tuple[str, int]] = []
    clusters.clear()
    addresses.clear()

    def install(exp: Experiment, probe: dict[str, list[float]]):
        monkeypatch.setattr(cli, "load", lambda name: exp)
        monkeypatch.setattr(core, "arm_errors", lambda *a, **k: [])
        monkeypatch.setattr(core, "arm_differences", lambda exp, arms, steps: {a: {} for a in arms})
        monkeypatch.setattr(core, "prepare_shared", lambda out, exp: {})
        monkeypatch.setattr(report, "plot", lambda exp, result, path: path)

        @contextlib.contextmanager
        def shared_cluster(cpus, gpus):  # the command's one Ray cluster (rlec.cluster.ray_cluster), not started here
            clusters.append((cpus, gpus))
            try:
                yield f"fake:{len(clusters)}"
            finally:
                clusters.append("stopped")
        monkeypatch.setattr(cli.ray_cluster, "shared_cluster", shared_cluster)

        def run_arm_seed(exp, arm, seed, out, steps, shared, limit=None, ray_address=None):
            calls.append((arm, seed))
            addresses.append(ray_address)
            if probe.get("ctrl-c at") == (arm, seed):
                raise KeyboardInterrupt
            return _run(arm, seed, probe[arm])
        monkeypatch.setattr(core, "run_arm_seed", run_arm_seed)
        return calls
    return install


def test_premise_absent_stops_before_any_method_arm(fake_runner, tmp_path, capsys) -> None:
    exp = _toy()
    calls = fake_runner(exp, {"base": [1.0, 0.95, 0.9, 0.9, 0.85], "method": [1.0] * 5})  # a 15% fall: premise absent
    out = tmp_path / "out"
    assert cli.main(["toy", "--out", str(out)]) == 0
    assert calls == [("base", 0), ("base", 1)]  # the two gate seeds, nothing else
    result = json.loads((out / "results.json").read_text())
    assert result["premise"]["held"] is False and result["premise"]["figures"]["probe entropy: fall"] == pytest.approx(0.15)
    assert [c["verdict"] for c in result["comparisons"]] == ["premise absent"]
    printed = capsys.readouterr().out
    assert "primary metric: probe entropy, last 20%" in printed and "ABSENT" in printed


def test_premise_held_trains_the_baseline_first_then_every_arm(fake_runner, tmp_path, capsys) -> None:
    exp = _toy()
    calls = fake_runner(exp, {"base": [1.0, 0.8, 0.6, 0.5, 0.5], "method": [1.0, 0.9, 0.9, 0.9, 0.9]})
    out = tmp_path / "out"
    assert cli.main(["toy", "--out", str(out)]) == 0
    assert calls[:2] == [("base", 0), ("base", 1)] and len(calls) == 10
    assert set(calls) == {(a, s) for a in ("base", "method") for s in range(5)}
    assert clusters == [(8, 1), "stopped"] and addresses == ["fake:1"] * 10  # one Ray cluster for the 10 launches
    (cell,) = json.loads((out / "results.json").read_text())["comparisons"]
    assert cell["differences"] == pytest.approx([0.4] * 5) and cell["lo"] == pytest.approx(0.4)
    # identical differences: SD 0, the interval a point, still on the claimed side
    assert cell["verdict"] == "reproduced"
    log = capsys.readouterr().out
    assert log.index("primary metric") < log.index("[1/10] base seed0")


def test_ctrl_c_in_a_launch_stops_the_shared_cluster_and_says_where_to_resume(fake_runner, tmp_path, capsys) -> None:
    """Issue 54: Ctrl-C reaches the launch (its own line and Ray job: rlec.cluster.main_ppo) and the command, which stops
    the command's Ray cluster and prints one line naming the arm-seed, exit 130."""
    exp = _toy()
    calls = fake_runner(exp, {"base": [1.0, 0.8, 0.6, 0.5, 0.5], "method": [1.0] * 5, "ctrl-c at": ("base", 1)})
    assert cli.main(["toy", "--out", str(tmp_path / "out")]) == 130
    assert calls == [("base", 0), ("base", 1)] and clusters == [(8, 1), "stopped"]
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.strip()]
    assert said == ["rlec.experiments: interrupted in base seed1; rerun the same command to resume (finished arm-seeds are "
                    "kept, an interrupted one resumes from its last checkpoint)"], err


def test_an_unmeasured_premise_stops_with_an_error_naming_the_metric(fake_runner, tmp_path, capsys) -> None:
    exp = _toy(premise=Premise("probe falls", falls_by(series_of("rlec/probe/none"), 0.4, "rlec/probe/none")))
    calls = fake_runner(exp, {"base": [1.0] * 5, "method": [1.0] * 5})
    assert cli.main(["toy", "--out", str(tmp_path / "out")]) == 1
    assert calls == [("base", 0), ("base", 1)]
    assert "premise gate could not be read (rlec/probe/none not measured)" in capsys.readouterr().err


# ---- bad input ----------------------------------------------------------------------------------------------------------

def test_a_spec_without_a_primary_metric_or_with_an_unknown_arm_is_refused() -> None:
    with pytest.raises(ValueError, match="no primary metric declared"):
        _toy(primary=None)
    with pytest.raises(ValueError, match="baseline arm 'nope' is not one of its arms"):
        _toy(baseline="nope")
    with pytest.raises(ValueError, match="comparison 'method' - 'ghost' names an arm it does not have"):
        _toy(comparisons=(("method", "ghost"),))


def test_a_spec_with_data_of_no_known_kind_or_a_pool_its_kind_does_not_take_is_refused() -> None:
    """One table of data kinds (rlec.experiments.data_kinds): an unknown name used to train on binary additions
    silently (prepare_shared's else branch); a pool belongs to data='pool' only."""
    from rlec.experiments.data_kinds import DATA_KINDS

    with pytest.raises(ValueError, match="unknown training data 'bianry': one of binary, targets, environments, pool"):
        _toy(data="bianry")
    with pytest.raises(ValueError, match="a pool is the data of data='pool' only"):
        _toy(data="binary", pool=object())
    with pytest.raises(ValueError, match="a pool is the data of data='pool' only"):
        _toy(data="pool")
    assert [name for name, kind in DATA_KINDS.items() if kind.pool] == ["pool"]


@pytest.mark.parametrize("argv, named", [
    (["e3", "--arms", "scheduler"], "a full run needs the baseline arm 'grpo'"),
    (["e3", "--seeds", "-2"], "--seeds must be >= 1, got -2"),
])
def test_more_bad_input_is_refused_before_any_write(argv, named, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert cli.main([*argv, "--out", str(out)]) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()


def test_out_pointing_at_a_file_or_a_read_only_folder_gives_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    """Issue 55 item 6: one ``error:`` line, exit 2, nothing written."""
    target = tmp_path / "a_file"
    target.write_text("x")
    assert cli.main(["e3", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rlec.experiments: error: --out {target}: is a file, not a folder"]
    assert target.read_text() == "x"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere: the folder reads as read-only to the check only
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
        assert cli.main(["e3", "--out", str(locked / "e3")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"rlec.experiments: error: --out {locked / 'e3'}: {locked} is not writable"]
        assert not (locked / "e3").exists()
        assert cli.main(["e3", "--out", str(target / "sub")]) == 2
        assert capsys.readouterr().err.strip() == f"rlec.experiments: error: --out {target / 'sub'}: {target} is a file, not a folder"
    finally:
        locked.chmod(0o700)


def test_a_folder_of_other_settings_names_each_difference(tmp_path) -> None:
    out = tmp_path / "e3"
    exp = cli.load("e3")
    core.claim_folder(out, core.settings_stamp(exp, 5))
    other = replace(exp, settings={**exp.settings, K.CLIP_HIGH: 0.28})
    with pytest.raises(core.ExperimentError, match=r"settings\.actor_rollout_ref\.actor\.clip_ratio_high: 0\.2 -> 0\.28"):
        core.claim_folder(out, core.settings_stamp(other, 5))


# ---- confounds ----------------------------------------------------------------------------------------------------------

def test_every_arm_differs_from_its_baseline_only_in_the_keys_it_names() -> None:
    """Each arm's resolved launch config (every stage) against the baseline's: any key neither arm names is a confound
    (the switch arm's restarted data order, the RLVE seeds' shared problem stream were two). An overlay arm that does
    not declare what its overlay sets is caught."""
    for name in cli.EXPERIMENTS:
        exp = cli.load(name)
        assert core.arm_differences(exp, [a.name for a in exp.method_arms()], exp.steps) == {a.name: {} for a in exp.method_arms()}, name
    exp = cli.load("e3")
    loose = replace(exp, arms=(exp.arms[0], Arm("undeclared", "E3's overlay, keys not declared", ("algorithm=e3",))))
    diff = core.arm_differences(loose, ["undeclared"], exp.steps)["undeclared"]
    assert diff["rlec.e3.enable"] == [False, True] and "actor_rollout_ref.rollout.agent.default_agent_loop" in diff


def test_the_rlve_problem_stream_follows_the_seed() -> None:
    exp = cli.load("rlve")
    for seed in (0, 3):
        cfg = core.compose_stage(exp, exp.arm("adaptive").overrides, exp.steps, seed=seed)
        assert cfg.rlec.rlve.seed == seed == cfg.data.seed


def test_the_switch_arms_second_stage_continues_verls_data_order() -> None:
    """The rows verl's own dataloader (create_rl_sampler, StatefulDataLoader, drop_last) yields after the first stage's
    draws are the second stage's rows: 10 rows, batches of 4 (each pass draws 8), 3 steps then 4 more."""
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_sampler

    for seed in (0, 7):
        loader = StatefulDataLoader(list(range(10)), batch_size=4, drop_last=True,
                                    sampler=create_rl_sampler(OmegaConf.create({"shuffle": True, "seed": seed}), list(range(10))))
        stream: list[int] = []
        while len(stream) < 28:
            stream += [int(i) for batch in loader for i in batch]
        assert core.continued_rows(10, seed, 12, 16, 4) == stream[12:28]
        assert len(set(stream[:8])) == 8  # a pass draws each row at most once
    with pytest.raises(ValueError, match="whole batches of 4"):
        core.continued_rows(10, 0, 6, 8, 4)


def test_the_switch_arms_second_stage_is_launched_on_the_continued_rows_unshuffled(tmp_path) -> None:
    import pandas as pd

    train = tmp_path / "train.parquet"
    pd.DataFrame({"q": [f"row{i}" for i in range(8)]}).to_parquet(train)
    rows = core.continued_rows(8, 1, 4, 8, 4)
    path = core.write_stage_rows(train, rows, tmp_path / "s2" / "train.parquet")
    assert pd.read_parquet(path)["q"].tolist() == [f"row{i}" for i in rows]
    # the bytes pandas' own writer gives (the stage file before it went through rlec.io.atomic_write_parquet)
    assert path.read_bytes() == pd.read_parquet(train).iloc[rows].reset_index(drop=True).to_parquet(index=False)
    arm = cli.load("passk").arm("passk_then_pass1")
    assert core.stage_overrides(arm, 1, ()) == [f"{K.SHUFFLE}=false"] and core.stage_overrides(arm, 0, ("a=1",)) == ["a=1"]


# ---- the papers' settings and the power note ------------------------------------------------------------------------------

def test_paper_settings_match_the_runs_settings() -> None:
    """Each side-by-side line that names keys shows exactly the experiment's settings for them; the E3 and Pass@k
    baselines are std-normalised GRPO with verl's symmetric clip 0.2 / 0.2 at T = 1 without top-k."""
    for name in cli.EXPERIMENTS:
        exp = cli.load(name)
        assert exp.paper_settings, name
        for line in exp.paper_settings:
            assert isinstance(line, PaperSetting) and line.paper and line.rlec
            if line.keys:
                assert line.rlec == " / ".join(str(exp.settings[k]) for k in line.keys), (name, line.what)
        assert exp.settings[K.TEMPERATURE] == 1.0 and exp.settings[K.TOP_K] == -1, name
    for name in ("e3", "passk"):
        s = cli.load(name).settings
        assert (s[K.CLIP_LOW], s[K.CLIP_HIGH], s[K.NORM_BY_STD]) == (0.2, 0.2, True)
        assert cli.load(name).probe is not None and cli.load(name).pilot
    # the pilot's q comes from 32 samples at T = 1 over the whole vocabulary (issue 57 item 5; e3's pilot is
    # rlec.experiments.pilot, which passes these to the evaluation)
    from rlec.experiments import pilot, spec
    assert (spec.PILOT_SAMPLES, pilot.PILOT_TEMPERATURE) == (32, 1.0)
    assert "python -m rlec.experiments.pilot e3" in cli.load("e3").pilot


def test_seeds_for_power_by_hand_and_the_committed_power_note() -> None:
    """Paired t-test, 80% power, alpha 0.05 (LAB.md's table): SD 0.019 needs 4 seeds for 0.05 and 3 for 0.10; the
    budget's SD 0.018 needs 5 for 0.0375; the floor is 5. docs/results/power.json is the note of the specs as they
    are, and every spec asks at least the note's seeds."""
    assert report.seeds_for_power(0.019, 0.05, minimum=1) == 4
    assert report.seeds_for_power(0.019, 0.10, minimum=1) == 3
    assert report.seeds_for_power(0.018, 0.0375, minimum=1) == 5
    assert report.seeds_for_power(0.019, 0.05) == 5 and report.seeds_for_power(None, 0.1) == 5
    with pytest.raises(ValueError, match="effect and sd must be > 0"):
        report.seeds_for_power(0.0, 0.1)
    note = report.power_note([cli.load(n) for n in cli.EXPERIMENTS])
    assert json.loads((REPO / "docs" / "results" / "power.json").read_text()) == note
    for name, cell in note["experiments"].items():
        assert cell["spec_seeds"] >= cell["seeds"] >= 5, name


def test_docs_hold_each_experiments_settings_table_as_the_specs_give_it() -> None:
    """docs/experiments.md's side-by-side tables are the specs' (rlec.experiments.report.format_paper_settings)."""
    doc = (REPO / "docs" / "experiments.md").read_text()
    for name in cli.EXPERIMENTS:
        assert report.format_paper_settings(cli.load(name)) in doc, name
