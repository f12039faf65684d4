"""The environment verifier registry (rlec.grading.env): a prefix's package registers on import,
grading imports it by name on the first row, and an unknown or silent package is a clear error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlec.grading import env as grading_env
from rlec.grading import grade, has_grader, task_for


def _toy_verifier(data_source: str):
    if data_source != "toy/one":
        raise ValueError(f"unknown toy {data_source!r}")
    return lambda response, gold: SimpleNamespace(correct=response == gold, abstained=False, reason="toy",
                                                  answer=response, source="boxed", shaped=None)


def test_a_registered_prefix_grades_its_rows_with_its_verifier(monkeypatch) -> None:
    monkeypatch.setitem(grading_env._RESOLVERS, "toy/", _toy_verifier)
    assert task_for("toy/one") == "env" and has_grader("toy/one") and not has_grader("toy/two")
    right, wrong = grade("42", "42", "toy/one"), grade("41", "42", "toy/one")
    assert (right.outcome.value, right.detail, right.task) == ("correct", "env:toy", "env")
    assert wrong.outcome.value == "incorrect"
    bad = grade("42", "42", "toy/two")
    assert bad.detail == "grader_error" and "unknown data_source 'toy/two': unknown toy 'toy/two'" in bad.grader_error


def test_a_package_that_registers_no_verifiers_is_named_in_the_error(monkeypatch) -> None:
    monkeypatch.setitem(grading_env.VERIFIER_PACKAGES, "silent/", "rlec.grading.qa")  # imports fine, registers nothing
    with pytest.raises(ValueError, match="package 'rlec.grading.qa' registered no verifiers for 'silent/'"):
        task_for("silent/x")
    assert not has_grader("silent/x")
    monkeypatch.setitem(grading_env.VERIFIER_PACKAGES, "gone/", "rlec.no_such_package")
    with pytest.raises(ValueError, match="package 'rlec.no_such_package', which grades 'gone/' sources, cannot be imported"):
        task_for("gone/x")


def test_a_source_without_a_prefix_is_not_an_environment_source() -> None:
    with pytest.raises(ValueError, match="not an environment source; known prefixes: .*'rlve/'"):
        grading_env.verifier_for("gsm8k")
    with pytest.raises(ValueError, match="must be a non-empty name ending with '/'"):
        grading_env.register_verifiers("rlve", _toy_verifier)
