"""The exact prompt text (rlec/prompts.py): changing a word changes what the model trains on."""

from __future__ import annotations

import pytest

from rlec.prompts import build_messages, math_task, qa_task, render

BINARY_MATH = (
    "Solve the following math problem step by step.\n\n"
    "What is $1+1$?\n\n"
    "Put your final answer within \\boxed{}."
)
TARGET_QA = (
    "Answer the question using the paragraphs below. Some paragraphs needed to answer it may be missing.\n\n"
    "Ada Brune: Ada Brune is a singer. She grew up in Port Anrey.\n\n"
    "Port Anrey: Port Anrey is a harbour town.\n\n"
    "Question: Where did Ada Brune grow up?\n\n"
    "Confidence target: p = 0.70. Answer only if you believe your answer is correct with probability greater "
    "than 0.70; otherwise write \\boxed{I don't know}. Scoring: a correct answer earns +0.30, a wrong answer "
    "scores -0.70, and \"I don't know\" scores 0. Put your final answer (or I don't know) within \\boxed{}."
)
CONTEXT = [("Ada Brune", ["Ada Brune is a singer.", " She grew up in Port Anrey."]), ("Port Anrey", ["Port Anrey is a harbour town."])]


def test_binary_math_prompt_text_is_pinned():
    assert build_messages(math_task("What is $1+1$?"), None) == [{"role": "user", "content": BINARY_MATH}]


def test_target_qa_prompt_text_is_pinned():
    assert build_messages(qa_task("Where did Ada Brune grow up?", CONTEXT), 0.7) == [{"role": "user", "content": TARGET_QA}]


def test_rendered_prompt_uses_qwen_chat_template_without_thinking(qwen_tokenizer):
    text = render(qwen_tokenizer, build_messages(math_task("What is $1+1$?"), None))
    assert text == f"<|im_start|>user\n{BINARY_MATH}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.mark.parametrize("p", [-0.1, 1.0, float("nan")])
def test_target_out_of_range_is_rejected(p):
    with pytest.raises(ValueError):
        build_messages(math_task("What is $1+1$?"), p)
