"""RLVE's warm-start selection (rlec.experiments.warm_levels): accuracy per level pooled by hand, the distance to the
graded profile, the selected candidate, and bad candidates refused by name before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlec.experiments import warm_levels as wl


def test_level_accuracy_and_profile_distance_by_hand() -> None:
    # two problems at d0 (16 samples: 15 and 16 right), one at d1 (8 of 16), none at d2
    pq = np.array([[[16, 15, 1, 0, 0]], [[16, 16, 0, 0, 0]], [[16, 8, 8, 0, 0]]], dtype=float)
    keys = [("addition/d0", "a"), ("addition/d0", "b"), ("addition/d1", "c")]
    got = wl.level_accuracy(pq, keys, (0, 1, 2))
    assert [g["accuracy"] for g in got] == [31 / 32, 0.5, None] and [g["problems"] for g in got] == [2, 1, 0]
    lo, hi = got[1]["interval"]
    assert lo < 0.5 < hi and hi - 0.5 == pytest.approx(0.5 - lo)  # Wilson is symmetric at 1/2
    # |0.97 - 0.95|, |0.5 - 0.6|, |0.05 - 0.2|, |0 - 0.03|: the largest is 0.15
    assert wl.profile_distance([0.97, 0.5, 0.05, 0.0]) == pytest.approx(0.15)
    assert wl.profile_distance([0.95, 0.6, np.nan, 0.03]) == 1.0  # an unmeasured level counts as far as it gets


def test_bad_candidates_are_refused_by_name_before_any_work(tmp_path: Path, capsys) -> None:
    for spec, named in (("wide", "expected 'demo' or NAME=JSON"), ("wide={", "not JSON"),
                        ('wide={"stepz": 3}', "unknown setting 'stepz'"), ('wide={"digits": [0]}', "digits must be")):
        assert wl.main(["--candidate", spec, "--work", str(tmp_path / "w")]) == 2
        assert named in capsys.readouterr().err
    assert wl.main(["--candidate", "demo", "--candidate", "demo", "--work", str(tmp_path / "w")]) == 2
    assert "names repeat" in capsys.readouterr().err and not (tmp_path / "w").exists()
    assert wl.parse_candidate('wide={"digits": [1, 2, 3, 4]}') == ("wide", {"digits": [1, 2, 3, 4]})


def test_the_candidate_nearest_the_profile_is_selected(tmp_path: Path, monkeypatch, capsys) -> None:
    from rlec.demo import warm_start

    built = []
    monkeypatch.setattr(warm_start, "build", lambda out, cfg, **k: built.append(cfg) or Path(out))
    measured = {"demo": [1.0, 0.74, 0.0, 0.0], "wide": [0.9, 0.55, 0.25, 0.05]}

    def fake_measure(model, test, work, *, samples, levels, target, seed=0):
        assert target == 0.01 and samples == 4 and tuple(levels) == (0, 1, 2, 3) and test.is_file()
        return [{"level": d, "accuracy": a, "interval": [a, a]} for d, a in zip(levels, measured[work.name])]

    monkeypatch.setattr(wl, "measure", fake_measure)
    out = tmp_path / "result.json"
    assert wl.main(["--candidate", "demo", "--candidate", 'wide={"digits": [1, 2, 3, 4]}', "--per-level", "2",
                    "--samples", "4", "--work", str(tmp_path / "w"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["selected"] == "wide" and built[1].digits == (1, 2, 3, 4) and built[0] == warm_start.WarmStartConfig()
    assert result["candidates"]["demo"]["distance"] == pytest.approx(0.2)  # d2: |0 - 0.2|
    assert result["candidates"]["wide"]["distance"] == pytest.approx(0.05)
    assert "* wide:" in capsys.readouterr().out
