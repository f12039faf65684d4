"""The ``addition`` environment is the demo's additions: the same draw, phrasing and prompt, inside the warm
start's compact vocabulary (what lets ``rlec.experiments rlve`` start from the demo's warm start)."""

from __future__ import annotations

import pytest

from rlec.demo import warm_start as ws
from rlec.environments import get_environment, problem_row
from rlec.environments.base import problem_rng
from rlec.prompts import build_messages, math_task, render


@pytest.mark.parametrize("difficulty", [0, 1, 2, 3])
def test_a_problem_is_the_warm_starts_sum_of_d_plus_one_digits(difficulty: int) -> None:
    env = get_environment("addition")
    for seed in range(20):
        problem = env.generate(seed, difficulty)
        demo = ws.addition_problem(problem_rng("addition", seed, difficulty), difficulty + 1)
        assert problem.prompt == math_task(demo.question) and problem.answer == demo.answer
        assert len(str(problem.data["a"])) == len(str(problem.data["b"])) == difficulty + 1


def test_problems_are_pinned_so_a_change_of_the_draw_shows() -> None:
    """The warm start's data and the shipped warm start come from this draw: a change of it must be deliberate."""
    env = get_environment("addition")
    got = [(env.generate(s, d).prompt.rsplit("\n", 1)[-1], env.generate(s, d).answer) for s, d in ((0, 0), (1, 1), (2, 3))]
    assert got == [("What is 3 + 3?", "6"), ("What is 69 + 90?", "159"), ("What is 6682 + 4321?", "11003")]


def test_one_digit_operands_include_zero_as_the_demo_draws_them() -> None:
    values = {get_environment("addition").generate(seed, 0).data["a"] for seed in range(400)}
    assert values == set(range(10))


def test_the_rows_prompt_is_the_demos_prompt_and_fits_the_compact_vocabulary(qwen_tokenizer) -> None:
    env = get_environment("addition")
    encoder = ws.Encoder(qwen_tokenizer, ws.compact_vocabulary(qwen_tokenizer))
    for difficulty in (0, 1, 2, 3):
        problem = env.generate(7, difficulty)
        question = ws.QUESTION.format(a=problem.data["a"], b=problem.data["b"])
        for objective, p in (("binary", None), ("rlec", 0.3)):
            row = problem_row(problem, index=0, split="train", objective=objective, target_p=p or 0.0)
            assert row["prompt"] == build_messages(math_task(question), p)
            encoder.prompt(question, p)  # raises for a token outside the warm start's vocabulary
            text = render(qwen_tokenizer, row["prompt"])
            encoder.compact(qwen_tokenizer(text, add_special_tokens=False)["input_ids"], "environment prompt")
    verdict = env.verify(f"\\boxed{{{problem.answer}}}", problem)
    assert verdict.correct and not env.verify("\\boxed{I don't know}", problem).correct
