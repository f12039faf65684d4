"""rlec.experiments: bad input refused by name before anything is written; the statistics and run readers."""

from __future__ import annotations


import json
from pathlib import Path

import numpy as np
import pytest

from rlec.experiments import cli, core, report
from rlec.experiments.spec import Arm, Run, all_wrong_share, effective_prompt_ratio


@pytest.mark.parametrize("argv, named", [
    (["nope"], "unknown experiment 'nope'"),
    (["e3", "--arms", "grpo,bogus"], "unknown arm 'bogus'"),
    (["rlve", "--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["passk", "--steps", "1"], "--steps must be >= 2"),
])
def test_bad_input_is_refused_naming_it_and_writes_nothing(argv, named, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert cli.main([*argv, "--out", str(out)]) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_nproc_is_refused_before_the_shared_ray_cluster_starts(value, tmp_path, capsys, monkeypatch) -> None:
    """The experiment's one Ray cluster declares the launches' resources from NPROC (rlec.cluster.ray_cluster)."""
    monkeypatch.setenv("NPROC", value)
    out = tmp_path / "out"
    assert cli.main(["e3", "--quick", "--out", str(out)]) == 2
    assert f"NPROC={value!r}: expected an integer >= 1" in capsys.readouterr().err
    assert not out.exists()


def test_every_experiment_loads_with_unique_arms_and_figures() -> None:
    for name in cli.EXPERIMENTS:
        exp = cli.load(name)
        assert exp.name == name and len(exp.arms) >= 2
        assert len({a.name for a in exp.arms}) == len(exp.arms)
        assert exp.curves and exp.quick_steps >= 2 and exp.steps > exp.quick_steps
        assert exp.primary is not None and exp.primary.direction in (-1, 1) and exp.seeds >= 5


def test_a_folder_of_other_settings_is_refused(tmp_path, capsys) -> None:
    out = tmp_path / "e3"
    exp = cli.load("e3")
    core.claim_folder(out, core.settings_stamp(exp, 5))
    before = sorted(p.name for p in out.iterdir())
    assert cli.main(["e3", "--steps", "6", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds an experiment with other settings (steps: 5 -> 6" in err and str(out) in err
    assert sorted(p.name for p in out.iterdir()) == before
    core.claim_folder(out, core.settings_stamp(exp, 5))  # the same settings: accepted


def test_the_switch_arm_splits_the_steps() -> None:
    arm = Arm("s", "switch", ("algorithm=passk",), then=(), switch_fraction=0.5)
    assert arm.stages(12) == [(("algorithm=passk",), 6), ((), 6)]
    assert arm.stages(3)[0][1] + arm.stages(3)[1][1] == 3
    assert Arm("one", "x", ("a=1",)).stages(4) == [(("a=1",), 4)]


def test_group_figures_by_hand() -> None:
    run = Run("a", 0, [{"step": 1}, {"step": 2}], groups=[[[0, 0, 0], [1, 0, 0]], [[1, 1], [0.5, 0.5], [0, 1]]])
    assert all_wrong_share(run) == [0.5, 0.0]
    assert effective_prompt_ratio(run) == [0.5, pytest.approx(1 / 3)]
    # at target 0.01 (rlve): a wrong answer (-0.01) beside I don't know (0) is no reward spread; a right one is
    small_p = Run("a", 0, [{"step": 1}], groups=[[[-0.01, 0.0, -0.01], [0.99, -0.01, 0.0], [1.0, 1.0, 1.0]]])
    assert effective_prompt_ratio(small_p) == [pytest.approx(1 / 3)]


def test_t_interval_and_paired_interval_by_hand() -> None:
    """df = n - 1: [1, 2, 3, 4] has mean 2.5, SD 1.2910, t_{0.975, 3} = 3.1824, half-width 2.0543."""
    mean, lo, hi = report.t_interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and lo == pytest.approx(0.44574, abs=1e-5) and hi == pytest.approx(4.55426, abs=1e-5)
    assert report.t_interval([0.3]) == [0.3, None, None] and report.t_interval([np.nan]) == [None, None, None]
    # paired: differences 0.1, 0.3 (the NaN seed dropped): mean 0.2, SD 0.1414, t_{0.975, 1} = 12.706 -> +-1.2706
    got = report.paired_interval([0.5, 0.6, np.nan], [0.4, 0.3, 0.2])
    assert got["differences"] == pytest.approx([0.1, 0.3]) and got["seeds"] == 2 and got["df"] == 1
    assert got["mean"] == pytest.approx(0.2) and got["hi"] - got["mean"] == pytest.approx(1.27062, abs=1e-4)
    with pytest.raises(ValueError, match="2 method values against 3"):
        report.paired_interval([1.0, 2.0], [1.0, 2.0, 3.0])


def test_held_out_figures_by_hand() -> None:
    from rlec.experiments.rlve import accuracy_at
    from rlec.experiments.spec import coverage_gap, pass_at

    # (Q=2, T=2, 5: n, correct, incorrect, abstain, reward_sum)
    pq = np.array([[[4, 2, 1, 1, 0], [4, 0, 0, 4, 0]],
                   [[4, 0, 4, 0, 0], [4, 1, 0, 3, 0]]], dtype=float)
    assert pass_at(1)(pq, [], []).tolist() == [0.5, 0.0]
    assert pass_at(4)(pq, [], []).tolist() == [1.0, 0.0]  # 2 of 4 right: some draw of 4 holds one
    assert coverage_gap(0, 1)(pq, [], []).tolist() == [0.75 - 0.0, 1.0 - 0.25]
    keys = [("arithmetic/d0", "q1"), ("arithmetic/d1", "q2")]
    got = accuracy_at(1)(pq[:, :1], keys, [])
    assert np.isnan(got[0]) and got[1] == 0.0


def test_results_json_table_and_png_hold_every_figure_of_every_experiment(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for name in cli.EXPERIMENTS:
        exp = cli.load(name)
        runs = {arm.name: [Run(arm.name, seed, [{"step": s, "actor/entropy": rng.random()} for s in (1, 2, 3, 4)],
                               [[[1.0, 0.0]] * 4] * 4,
                               {n: list(rng.random(6)) for n in (exp.heldout.figures if exp.heldout else {})})
                           for seed in (0, 1)] for arm in exp.arms}
        result = report.summarise(exp, runs, quick=True)
        json.loads(json.dumps(result, allow_nan=False))
        cells = {c for arm in result["arms"].values() for c in arm["table"]}
        assert {f"{c.name} (last quarter)" for c in exp.curves} | {f"held-out {n}" for n in (exp.heldout.figures if exp.heldout else {})} <= cells
        assert all(f"| {arm.name} | 2 |" in report.format_table(result) for arm in exp.arms)
        # the raw values: every stored per-step key and every held-out figure per question, per arm-seed
        raw = result["arms"][exp.baseline]["raw"]["seed1"]
        assert set(report.raw_keys(exp)) == set(raw["metrics"]) and len(raw["metrics"]["actor/entropy"]) == 4
        assert raw["heldout"] == {n: list(runs[exp.baseline][1].heldout[n]) for n in raw["heldout"]}
        assert [c["verdict"] for c in result["comparisons"]] == [None] * len(exp.pairs())  # --quick: no verdict
        assert report.plot(exp, result, tmp_path / f"{name}.png").stat().st_size > 10_000


def test_the_held_out_panel_draws_intervals_only_over_several_seeds(tmp_path: Path, monkeypatch) -> None:
    """With one seed per arm there is no t-interval: the panel draws no error bars (it drew caps at the point, which
    read as tight intervals in rlec_advantage's first figure) and its title says so; with two seeds it draws them."""
    import matplotlib.axes

    exp = cli.load("rlec_advantage")
    rng = np.random.default_rng(0)
    bars: list = []
    titles: list[str] = []
    real_bar, real_title = matplotlib.axes.Axes.bar, matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "bar", lambda ax, *a, **k: (bars.append(k.get("yerr")), real_bar(ax, *a, **k))[1])
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda ax, t, *a, **k: (titles.append(t), real_title(ax, t, *a, **k))[1])
    for seeds in ((0,), (0, 1)):
        bars.clear()
        titles.clear()
        runs = {arm.name: [Run(arm.name, seed, [{"step": s} for s in (1, 2, 3, 4)], [[[1.0, 0.0]] * 4] * 4,
                               {n: list(rng.random(6)) for n in exp.heldout.figures}) for seed in seeds] for arm in exp.arms}
        report.plot(exp, report.summarise(exp, runs, quick=True), tmp_path / "f.png")
        assert len(bars) == len(exp.arms)
        if len(seeds) == 1:
            assert bars == [None] * len(exp.arms) and "no interval" in titles[-1]
        else:
            assert all(b is not None for b in bars) and "95% t-interval" in titles[-1]


def test_a_curve_missing_at_some_steps_is_null_in_strict_json() -> None:
    exp = cli.load("e3")
    held = {"pass@1": [1.0, 0.0], "pass@4": [1.0, 1.0], "pass@8": [1.0, 1.0]}
    runs = {"grpo": [Run("grpo", 0, [{"step": 1, "actor/entropy": 0.3}, {"step": 2}], heldout=held)]}
    result = report.summarise(exp, runs, quick=True)
    json.loads(json.dumps(result, allow_nan=False))
    assert result["arms"]["grpo"]["curves"]["actor/entropy"]["mean"] == [0.3, None]
    assert result["arms"]["grpo"]["table"]["e3/temperature (last quarter)"] == [None, None, None]


def test_every_arm_of_every_experiment_passes_the_launchs_first_rules() -> None:
    """Each arm's launch (settings + overrides, every stage) composes and passes the early and the algorithms' rules:
    a full ``passk`` run trained its first arm's two seeds before the ``passk`` arm's launch refused
    ``algorithm.passk.k`` (verl's copy of ``rlec.passk.k``)."""
    for name in cli.EXPERIMENTS:
        exp = cli.load(name)
        assert core.arm_errors(exp, [a.name for a in exp.arms], exp.steps) == [], name
        quick = exp.quick(cli.QUICK_BATCH)
        assert core.arm_errors(quick, [a.name for a in quick.arms], quick.quick_steps) == [], f"{name} --quick"


def test_quick_runs_train_every_arm_on_fewer_prompts_and_e3_budgets_prompts_come_back() -> None:
    """``--quick`` halves the prompts per step for every arm alike (the rows halve with them); e3_budget's 4 rows
    bring every prompt back at step 2 (its dynamic budget acts only on prompts seen before), within its 3 steps."""
    from rlec.experiments import keys as K

    for name in cli.EXPERIMENTS:
        exp = cli.load(name)
        quick = exp.quick(cli.QUICK_BATCH)
        assert quick.settings[K.BATCH] == cli.QUICK_BATCH < exp.settings[K.BATCH], name
        scaled = (K.BATCH, K.MINI_BATCH, K.TOP_K)  # top-k: the demo's patch while the toy model has its full vocabulary
        assert {k: v for k, v in quick.settings.items() if k not in scaled} == {k: v for k, v in exp.settings.items() if k not in scaled}
        # as many PPO updates per step as the full run (the mini-batch shrinks with the batch)
        assert quick.settings[K.BATCH] // quick.settings[K.MINI_BATCH] == exp.settings[K.BATCH] // exp.settings[K.MINI_BATCH], name
        for arm in quick.arms:  # an arm naming its own batch would undo --quick's (and break the pairing)
            for override in (*arm.overrides, *(arm.then or ())):
                assert override.partition("=")[0].lstrip("+~") not in scaled, (name, arm.name, override)
        if exp.quick_train_rows is None:
            steps_per_pass = (exp.train_rows // exp.settings[K.BATCH], quick.train_rows // quick.settings[K.BATCH])
            assert steps_per_pass[0] == steps_per_pass[1], (name, steps_per_pass)
    budget = cli.load("e3_budget").quick(cli.QUICK_BATCH)
    # every prompt comes back within --quick, with a step left: the budget acts on two steps at least
    assert budget.train_rows // budget.settings[K.BATCH] + 2 <= budget.quick_steps
    assert budget.quick_steps * budget.settings[K.BATCH] <= budget.train_rows * budget.settings["trainer.total_epochs"]
    rlve, same = cli.load("rlve"), cli.load("rlve").quick(16)  # no smaller than the full batch: batch and rows unchanged
    assert (same.settings[K.BATCH], same.settings[K.MINI_BATCH], same.train_rows) == (16, 8, rlve.train_rows)
    assert cli.load("e3_budget").quick(64).train_rows == cli.load("e3_budget").quick_train_rows  # the rows still apply


def test_a_quick_batch_below_1_or_settings_without_a_batch_are_refused_by_name() -> None:
    from dataclasses import replace

    from rlec.experiments import keys as K

    exp = cli.load("e3")
    with pytest.raises(ValueError, match="at least 1"):
        exp.quick(0)
    with pytest.raises(ValueError, match=K.BATCH):
        replace(exp, settings={k: v for k, v in exp.settings.items() if k != K.BATCH}).quick(4)


def test_a_stage_too_short_for_the_b_schedule_is_refused_naming_the_arm_and_stage(tmp_path, capsys) -> None:
    """``--steps 2`` splits the switch arm into 1 + 1 steps, which RLEC's b schedule refuses (it needs two): a launch
    refused it after the warm start; the arm check now does, with the stage's own length, before any work."""
    out = tmp_path / "out"
    assert cli.main(["passk", "--arms", "pass1,passk_then_pass1", "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "arm 'passk_then_pass1' stage 1" in err and "[rlec.schedule.end_step]" in err, err
    assert not out.exists()
    assert core.arm_errors(cli.load("passk"), ["passk_then_pass1"], 4) == []  # 2 + 2 steps: accepted


def test_an_arm_the_launch_would_refuse_stops_the_experiment_before_any_work(tmp_path, monkeypatch, capsys) -> None:
    exp = cli.load("passk")
    bad = Arm("passk", "verl's copy set directly", ("algorithm=passk", "algorithm.passk.k=4"))
    monkeypatch.setattr(cli, "load", lambda name: type(exp)(**{**exp.__dict__, "arms": (exp.arms[0], bad)}))
    out = tmp_path / "out"
    assert cli.main(["passk", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "arm 'passk'" in err and "[algorithm.passk.k]" in err and "rlec.passk.k" in err, err
    assert not out.exists()
