"""Fixtures of the evaluation tests: a small evaluation parquet and a record factory.

The parquet follows the data contract (verl schema, ``extra_info.task_text`` etc.) with
hand-written items: invented arithmetic problems and HotpotQA-style questions over invented
paragraphs (one of them with its supporting paragraph removed, so abstaining is right).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from rlec.eval.records import SCHEMA, target_label
from rlec.prompts import build_messages, math_task, qa_task

MATH_ITEMS = [
    ("m-101", "What is 17 + 25?", "42"),
    ("m-102", "A box holds 6 rows of 8 eggs. How many eggs are in the box?", "48"),
    ("m-103", "Compute $\\frac{3}{4} + \\frac{1}{4}$.", "1"),
    ("m-104", "What is the remainder when 100 is divided by 7?", "2"),
    ("m-105", "Solve for $x$: $3x - 5 = 16$.", "7"),
    ("m-106", "How many positive divisors does 36 have?", "9"),
]
QA_ITEMS = [
    (
        "h-201",
        "Which river flows through the town where the Vellmar Clockworks were founded?",
        [("Vellmar Clockworks", ["The Vellmar Clockworks were founded in 1871 in the town of Ostbridge."]),
         ("Ostbridge", ["Ostbridge is a market town on the banks of the river Calder Wend."])],
        "Calder Wend",
        "keep_all",
    ),
    (
        "h-202",
        "Are the Pellin Observatory and the Harrow Arch both in Norland?",
        [("Pellin Observatory", ["The Pellin Observatory stands on a hill in Norland."]),
         ("Harrow Arch", ["The Harrow Arch is a stone monument in Norland's capital."])],
        "yes",
        "keep_all",
    ),
    (
        "h-203",
        "Who designed the bridge named after the poet Ilse Marrow?",
        [("Ilse Marrow", ["Ilse Marrow was a poet born in Dunmere in 1820."]),
         ("Dunmere", ["Dunmere is a coastal village with a small harbour."])],
        "Tomas Ferrand",
        "drop_both_supporting",
    ),
    (
        "h-204",
        "Which is older, the Quillon Library or the Saffer Museum?",
        [("Quillon Library", ["The Quillon Library opened in 1802."]),
         ("Saffer Museum", ["The Saffer Museum opened in 1911."])],
        "Quillon Library",
        "keep_all",
    ),
    (
        "h-205",
        "In which country is the lake that feeds the Orrin Falls?",
        [("Orrin Falls", ["The Orrin Falls are fed by Lake Tessaly."]),
         ("Lake Tessaly", ["Lake Tessaly lies entirely within Corvania."])],
        "Corvania",
        "keep_all",
    ),
    (
        "h-206",
        "What instrument did the founder of the Brightwater Quartet play?",
        [("Brightwater Quartet", ["The Brightwater Quartet was founded by Anya Lisk in 1954."]),
         ("Anya Lisk", ["Anya Lisk was a cellist and teacher."])],
        "cello",
        "keep_all",
    ),
]


def eval_rows() -> list[dict[str, Any]]:
    """The fixture evaluation set as verl-schema rows (math first, then QA)."""
    rows = []
    for qid, problem, answer in MATH_ITEMS:
        task = math_task(problem)
        rows.append(("math_dapo", "math", qid, task, answer, ""))
    for qid, question, context, answer, scheme in QA_ITEMS:
        task = qa_task(question, [(title, sents) for title, sents in context])
        rows.append(("hotpotqa", "hotpotqa", qid, task, answer, scheme))
    out = []
    for i, (data_source, source, qid, task, answer, scheme) in enumerate(rows):
        out.append(
            {
                "data_source": data_source,
                "prompt": build_messages(task, None),
                "ability": "math" if source == "math" else "qa",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {
                    "index": i,
                    "split": "test",
                    "question_id": qid,
                    "source": source,
                    "target_p": 0.0,
                    "objective": "binary",
                    "repeat": 0,
                    "task_text": task,
                    "drop_scheme": scheme,
                    "dropped_titles": [],
                },
            }
        )
    return out


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows as a parquet file (pyarrow infers the nested schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture()
def eval_parquet(tmp_path: Path) -> Path:
    """A 12-question evaluation parquet (6 math, 6 HotpotQA-style) in the data contract's schema."""
    return write_parquet(tmp_path / "eval.parquet", eval_rows())


@pytest.fixture()
def parquet_writer() -> Callable[[Path, list[dict[str, Any]]], Path]:
    """``write_parquet(path, rows)`` for tests that build broken sets."""
    return write_parquet


@pytest.fixture()
def base_rows() -> list[dict[str, Any]]:
    """Fresh copies of the fixture rows, for tests that modify them."""
    return eval_rows()


RESPONSES = {"correct": "So the answer is \\boxed{4}.", "incorrect": "So the answer is \\boxed{5}.", "abstain": "\\boxed{I don't know}"}


def make_record(qid: str, target_p: float | None, outcome: str, *, source: str = "math", sample: int = 0) -> dict[str, Any]:
    """A raw record whose response the real grader grades as ``outcome`` (gold answer 4)."""
    return {
        "schema": SCHEMA,
        "question_id": qid,
        "source": source,
        "data_source": "math_dapo" if source == "math" else "hotpotqa",
        "target": target_label(target_p),
        "target_p": target_p,
        "objective": "binary" if target_p is None else "rlec",
        "sample_index": sample,
        "ground_truth": "4",
        "prompt": "(prompt)",
        "response": RESPONSES[outcome],
        "finish_reason": "stop",
    }


@pytest.fixture()
def record_factory() -> Callable[..., dict[str, Any]]:
    """``make_record(qid, target_p, outcome, source=, sample=)``."""
    return make_record


# docs/metrics.md, "Worked examples": grid binary, 0, 0.25, 0.5, 0.75; one letter per question
# (C correct, W wrong, A abstain).
WORKED_GRID = [None, 0.0, 0.25, 0.5, 0.75]
WORKED_EXAMPLES = {
    "calibrated": {None: "CCCW", 0.0: "CCCW", 0.25: "CCCW", 0.5: "CCAA", 0.75: "CCAA"},
    "always_answer": {None: "CCCW", 0.0: "CCCW", 0.25: "CCCW", 0.5: "CCCW", 0.75: "CCCW"},
    "always_abstain": {None: "AAAA", 0.0: "AAAA", 0.25: "AAAA", 0.5: "AAAA", 0.75: "AAAA"},
    "random": {None: "CCCCWWWW", 0.0: "CCCCWWWW", 0.25: "CCCAWWWA", 0.5: "CCAAWWAA", 0.75: "CAAAWAAA"},
    "conservative": {None: "CCCW", 0.0: "CAAA", 0.25: "CAAA", 0.5: "CAAA", 0.75: "CAAA"},
}
# (coverage, selective accuracy, accuracy, reward) at p = 0, 0.25, 0.5, 0.75; None = undefined
WORKED_PER_TARGET = {
    "calibrated": [(1, 0.75, 0.75, 0.75), (1, 0.75, 0.75, 0.5), (0.5, 1, 0.5, 0.25), (0.5, 1, 0.5, 0.125)],
    "always_answer": [(1, 0.75, 0.75, 0.75), (1, 0.75, 0.75, 0.5), (1, 0.75, 0.75, 0.25), (1, 0.75, 0.75, 0.0)],
    "always_abstain": [(0, None, 0, 0)] * 4,
    "random": [(1, 0.5, 0.5, 0.5), (0.75, 0.5, 0.375, 0.1875), (0.5, 0.5, 0.25, 0.0), (0.25, 0.5, 0.125, -0.0625)],
    "conservative": [(0.25, 1, 0.25, 0.25), (0.25, 1, 0.25, 0.1875), (0.25, 1, 0.25, 0.125), (0.25, 1, 0.25, 0.0625)],
}
# accuracy (binary prompt), RLEC score, AURC, AOC
WORKED_HEADLINES = {
    "calibrated": (0.75, 0.40625, 0.0625, 0.9375),
    "always_answer": (0.75, 0.375, 0.25, 0.75),
    "always_abstain": (0.0, 0.0, 1.0, 0.0),
    "random": (0.5, 0.15625, 0.5, 0.5),
    "conservative": (0.75, 0.15625, 0.28125, 0.71875),
}
LETTER = {"C": "correct", "W": "incorrect", "A": "abstain"}


def worked_records(name: str, source: str = "math", qid_prefix: str | None = None) -> list[dict[str, Any]]:
    """The records of a worked example (question i = letter i), graded as the letters say.

    Question ids are ``<qid_prefix or name>-<i>``: give two examples one prefix to make them two
    runs over the same questions.
    """
    example = WORKED_EXAMPLES[name]
    return [
        make_record(f"{qid_prefix or name}-{i}", p, LETTER[letter], source=source)
        for p in WORKED_GRID
        for i, letter in enumerate(example[p])
    ]


@pytest.fixture(scope="session")
def worked() -> SimpleNamespace:
    """The worked examples of docs/metrics.md: grid, outcomes, expected figures, record builder."""
    return SimpleNamespace(
        grid=WORKED_GRID,
        spec="binary,0.0,0.25,0.5,0.75",
        examples=WORKED_EXAMPLES,
        per_target=WORKED_PER_TARGET,
        headlines=WORKED_HEADLINES,
        letter=LETTER,
        records=worked_records,
    )
