"""Final-answer extraction and abstention detection."""

from __future__ import annotations

import pytest

from rlec.grading.extract import MAX_TAIL_CHARS, extract, is_abstention, last_boxed, latex_to_text, strip_wrappers


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (r"so \boxed{42}", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"first \boxed{3}, then corrected: \boxed{5}", "5"),  # last box wins
        (r"\boxed{\boxed{2}}", "2"),  # a box wrapping a box is unwrapped
        (r"\boxed{\frac{\boxed{1}}{2}}", r"\frac{\boxed{1}}{2}"),  # a box inside is not unwrapped
        (r"\boxed {7}", "7"),
        (r"\fbox{8}", "8"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces are literal
        (r"\boxed{unclosed", None),
        ("no box at all", None),
        # a box without braces takes one TeX token (issue 12)
        (r"... $\boxed 7$.", "7"),
        (r"\boxed7", "7"),
        (r"\boxed \pi", r"\pi"),
        (r"\boxed 42", "4"),  # TeX boxes the first token only: what the rendered box shows
        (r"\boxed{\boxed 7}", "7"),
        (r"\boxed 3 then \boxed{5}", "5"),
        (r"\boxed{5} then \boxed 3", "3"),
        (r"\boxedx", None),  # another command, not a box
        (r"\boxed", None),
        (r"\boxed }", None),
    ],
)
def test_last_boxed(text: str, want: str | None) -> None:
    assert last_boxed(text) == want


def test_last_boxed_is_linear_on_many_unbalanced_boxes() -> None:
    text = "\\boxed{" * 50_000  # quadratic scanning would take minutes
    assert last_boxed(text) is None


def test_answer_line_fallback() -> None:
    ex = extract("work...\nAnswer: 12\n")
    assert (ex.answer, ex.source, ex.format_ok) == ("12", "answer_line", False)
    assert extract("**Answer:** 7").answer == "7"


def test_box_preferred_over_answer_line() -> None:
    ex = extract("Answer: 3\nso \\boxed{4}")
    assert (ex.answer, ex.source) == ("4", "boxed")


def test_think_block_is_ignored() -> None:
    assert extract("<think>maybe \\boxed{1}</think> final \\boxed{2}").answer == "2"
    assert extract("<think>still thinking \\boxed{1}").answer is None  # cut before the answer


def test_only_the_tail_is_scanned() -> None:
    assert extract("\\boxed{1}" + "x" * (MAX_TAIL_CHARS + 10)).answer is None
    assert extract("x" * 200_000 + "\\boxed{42}").answer == "42"


@pytest.mark.parametrize(
    "answer",
    ["I don't know", "i don't know.", "I DON'T KNOW", "I don\u2019t know", "I dont know", "I do not know!",
     "\\text{I don't know}", "$\\text{I don't know}$", "  I don't   know  ",
     # every text-style command, and wrappers around single words (issue 12)
     "\\textrm{I don't know}", "\\textsf{I don't know}", "\\texttt{I don't know}", "\\operatorname{I don't know}",
     "\\textnormal{I don't know}", "\\mathit{I don't know}", "\\text{I}\\ \\text{don't}\\ \\text{know}",
     "\\mathrm{I\\ don't\\ know}", "\\textbf{\\textit{I do not know}}", "\\text{I~don't~know}", "\\mbox{I don't know.}"],
)
def test_abstention_variants(answer: str) -> None:
    assert is_abstention(answer)
    assert extract(f"\\boxed{{{answer}}}").abstained


@pytest.mark.parametrize(
    "answer",
    ["I know", "don't know", "I don't know the answer but it is 5", "unknown", "", None, "\\frac{I don't}{2}",
     "I don't know" + " " * 300],
)
def test_not_abstention(answer) -> None:
    assert not is_abstention(answer)


@pytest.mark.parametrize("response", [None, 42, 3.5, b"\\boxed{1}", ["\\boxed{1}"], ""])
def test_non_string_responses_have_no_answer(response) -> None:
    ex = extract(response)
    assert ex.answer is None and ex.source == "none" and not ex.abstained


def test_final_answer_line_and_latex_line_break_before_a_brace() -> None:
    assert extract("so\n**Final Answer:** 42").answer == "42"
    assert extract("Final answer: 7").answer == "7"
    # "\\" is a LaTeX line break, so the "{" after it opens a group that the box closes
    assert last_boxed(r"\boxed{a \\{b}}") == r"a \\{b}"


def test_strip_wrappers_only_strips_a_wrapper_of_the_whole_answer() -> None:
    assert strip_wrappers("$\\textrm{Paris}$") == "Paris"
    assert strip_wrappers("\\text{a} + \\text{b}") == "\\text{a} + \\text{b}"  # not "a} + \\text{b"
    assert strip_wrappers("\\(\\mathbf{v}\\)") == "v"


def test_latex_to_text_reads_text_commands_anywhere() -> None:
    assert latex_to_text("\\textrm{Eiffel}\\ \\text{Tower}") == "{Eiffel} {Tower}"
    assert latex_to_text("AT\\&T") == "AT&T"
    assert latex_to_text("\\textbackslash") == "\\textbackslash"  # not a wrapper: left alone
