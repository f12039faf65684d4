"""The one prompt template of rlec, for every source and objective.

A prompt is one user message (DAPO-Math's convention), built from three parts:

1. the task: the math problem, or the HotpotQA context paragraphs and question;
2. the answer format: final answer in ``\\boxed{}``;
3. for the RLEC objective only, the confidence target and its stakes::

       Confidence target: p = 0.70. Answer only if you believe your answer is correct with
       probability greater than 0.70; otherwise write \\boxed{I don't know}. Scoring: a correct
       answer earns +0.30, a wrong answer scores -0.70, and "I don't know" scores 0.

   The stated stakes (1-p, -p) are R_p^(b) at b = 1. At every b the ratio of the two rewards is
   the same (1-p)/p, so the statement stays exact up to a positive scale throughout training.

The binary objective (p = 0, 10% of training samples, and the "binary" column of evaluation)
states no target and offers no abstention: it is the ordinary RLVR prompt.

Changing any wording here changes what the model is trained on: ``tests/test_prompts.py`` pins
the exact text.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlec.reward.formula import check_target

MATH_TASK = "Solve the following math problem step by step.\n\n{problem}"
QA_TASK = (
    "Answer the question using the paragraphs below. Some paragraphs needed to answer it may be "
    "missing.\n\n{context}\n\nQuestion: {question}"
)
FORMAT_BINARY = "Put your final answer within \\boxed{}."
FORMAT_RLEC = (
    "Confidence target: p = {p:.2f}. Answer only if you believe your answer is correct with probability "
    "greater than {p:.2f}; otherwise write \\boxed{{I don't know}}. Scoring: a correct answer earns "
    "+{gain:.2f}, a wrong answer scores -{p:.2f}, and \"I don't know\" scores 0. "
    "Put your final answer (or I don't know) within \\boxed{{}}."
)
# Qwen3's hybrid chat template: the confidence decision is made in the visible answer, so the
# default renders without a thinking block (short responses, as in the CPU run). Clusters may
# turn thinking on through verl's data.apply_chat_template_kwargs; the grader reads only the text
# after </think> either way.
CHAT_TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": False}


def math_task(problem: str) -> str:
    """The task text of a math problem.

    Raises:
        ValueError: empty problem.
    """
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"math problem must be a non-empty string, got {problem!r}")
    return MATH_TASK.format(problem=problem.strip())


def qa_task(question: str, context: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The task text of a HotpotQA item.

    Args:
        question: the question.
        context: HotpotQA ``context``: [[title, [sentence, ...]], ...]; each paragraph is
            rendered as ``Title: sentence sentence ...`` on its own line.

    Raises:
        ValueError: empty question.
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be a non-empty string, got {question!r}")
    paragraphs = "\n\n".join(f"{title}: {''.join(sentences).strip()}" for title, sentences in context)
    return QA_TASK.format(context=paragraphs or "(no paragraphs)", question=question.strip())


def instruction(target_p: float | None) -> str:
    """The answer-format instruction: binary when ``target_p`` is None, else the RLEC target.

    Raises:
        ValueError: ``target_p`` outside [0, 1).
    """
    if target_p is None:
        return FORMAT_BINARY
    p = check_target(target_p)
    return FORMAT_RLEC.format(p=p, gain=1.0 - p)


def build_messages(task_text: str, target_p: float | None) -> list[dict[str, str]]:
    """The chat messages of one prompt (verl's ``prompt`` column).

    Args:
        task_text: the output of :func:`math_task` or :func:`qa_task`.
        target_p: the confidence target in [0, 1), or None for the binary objective.

    Returns:
        ``[{"role": "user", "content": task_text + "\\n\\n" + instruction}]``.

    Raises:
        ValueError: empty task_text or target_p out of range.
    """
    if not isinstance(task_text, str) or not task_text.strip():
        raise ValueError(f"task_text must be a non-empty string, got {task_text!r}")
    return [{"role": "user", "content": f"{task_text.strip()}\n\n{instruction(target_p)}"}]


def render(tokenizer: Any, messages: list[dict[str, str]], **chat_template_kwargs: Any) -> str:
    """The exact prompt string the model sees (chat template + generation prompt).

    ``chat_template_kwargs`` override :data:`CHAT_TEMPLATE_KWARGS`.
    """
    kwargs = {**CHAT_TEMPLATE_KWARGS, **chat_template_kwargs}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
