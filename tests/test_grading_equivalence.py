"""Equivalence cases for answer extraction and grading, one class of miss per test.

Each case is named after what it guards; positives and negatives for every class.
"""

import random

import pytest

from prmkit.grading import Grade, extract_answer, grade_answer, grade_many
from prmkit.grading.normalize import answer_key, clean_answer, list_size


def _grade(given, gold):
    return grade_answer(given, gold, timeout=10)


def _case(given, gold, correct, name):
    return pytest.param(given, gold, correct, id=name)


# ---- display math: `$$...$$`, `\[...\]`, `\(...\)`, also over several lines ----

DISPLAY = [
    _case("Answer $$ 9 $$", "9", True, "answer_dollar_dollar_9"),
    _case("\\[ 9 \\]", "9", True, "bracket_display_9"),
    _case("So we get\n$$\n9\n$$\n", "9", True, "dollar_display_over_three_lines"),
    _case("Hence\n\\[\n\\frac{3}{4}\n\\]", "0.75", True, "bracket_display_fraction_over_lines"),
    _case("The answer is\n\\[\n12\n\\]", "12", True, "answer_is_then_display_on_next_lines"),
    _case("So the area is \\( 16 \\).", "16", True, "inline_paren_math_16"),
    _case("Thus\n\\[ x = 2 \\]\nThen\n\\[\n y = 10\n\\]", "10", True, "last_display_block_wins"),
    _case("Thus\n\\[ x = 2 \\]\nThen\n\\[\n y = 10\n\\]", "2", False, "earlier_display_block_is_not_answer"),
    _case("Answer $$ 9 $$", "8", False, "answer_dollar_dollar_9_is_not_8"),
    _case("\\[ 9 \\]", "90", False, "bracket_display_9_is_not_90"),
]


@pytest.mark.parametrize(("given", "gold", "correct"), DISPLAY)
def test_display_math_is_extracted(given, gold, correct):
    assert _grade(given, gold).correct is correct


def test_display_math_extracted_text():
    assert extract_answer("Answer $$ 9 $$", last_line=True) == "9"
    assert extract_answer("Finally\n\\[\n  \\boxed{7}\n\\]\n") == "7"
    assert extract_answer("# Answer\n\n$$\n3\n$$") == "3"


# ---- several boxes or `$...$` segments form one answer ----

MULTI_PART = [
    _case("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(2, 2), (6, 2)", True, "two_boxed_pairs_joined_by_text_and"),
    _case("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(6, 2), (2, 2)", True, "two_boxed_pairs_in_other_order"),
    _case("\\boxed{1,2,3}", "$1$ and $2$ and $3$", True, "gold_written_1_and_2_and_3"),
    _case("$\\boxed{-1}$, $\\boxed{3}$", "-1, 3", True, "boxes_in_dollars_separated_by_comma"),
    _case("So $x$ is $1$, $2$, or $3$", "\\{1,2,3\\}", True, "segments_with_serial_or_against_set"),
    _case("The solutions are $x = 5$ and $x = -4$.", "5, -4", True, "same_variable_equations_are_a_list"),
    _case("So $a = 1$ and $b = 0$.", "0", True, "different_variables_are_statements_last_wins"),
    _case(
        "$d = \\boxed{15\\frac{39}{40}},$ or $\\boxed{\\frac{639}{40}}$ inches.",
        "\\frac{639}{40}",
        True,
        "two_boxes_with_the_same_value_in_two_forms",
    ),
    _case("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(2, 2)", False, "two_pairs_are_not_the_first_pair"),
    _case("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(6, 2)", False, "two_pairs_are_not_the_last_pair"),
    _case("$1$ and $2$", "1, 2, 3", False, "two_values_are_not_three"),
    _case("\\boxed{1,2,3}", "$1$ and $2$", False, "three_values_are_not_two"),
]


@pytest.mark.parametrize(("given", "gold", "correct"), MULTI_PART)
def test_multi_part_answers_are_read_whole(given, gold, correct):
    assert _grade(given, gold).correct is correct


def test_multi_part_extracted_as_one_list():
    assert extract_answer("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}") == "(2, 2), (6, 2)"
    assert extract_answer("$1$ and $2$ and $3$", last_line=True) == "1, 2, 3"
    assert extract_answer("$(6,5,3),$ $(3,3,1),$ and $(15,11,9),$", last_line=True) == "(6,5,3), (3,3,1), (15,11,9)"
    assert extract_answer("\\boxed{4} and \\boxed{4}") == "4"  # a repeated box is one value


def test_separate_boxes_in_prose_are_not_joined():
    text = "First $\\boxed{3}$ for part one. Then part two gives $\\boxed{5}$."
    assert extract_answer(text) == "5"


# ---- an explicit final answer after an intermediate box ----

FINAL_AFTER_BOX = [
    _case("So $y = \\boxed{3}$.\nThe final answer is $10,455$.", "10455", True, "final_answer_after_intermediate_box"),
    _case("So $y = \\boxed{3}$.\nThe final answer is $10,455$.", "3", False, "intermediate_box_is_not_final_answer"),
    _case("So $x = \\boxed{4}$. Then we add 8.\nFinal Answer: 12", "12", True, "final_answer_colon_after_box"),
    _case("The final answer is $\\boxed{7}$.", "7", True, "phrase_then_box_is_one_answer"),
    _case("\\boxed{12}\n\nThe answer is 12 because it works.", "12", True, "restated_answer_after_box"),
    _case("\\boxed{5}. Is that right? Yes, the answer is correct.", "5", True, "answer_is_correct_is_not_an_answer"),
    _case("We get \\boxed{6}. Then the answer is 6 times bigger.", "6", True, "plain_answer_is_prose_keeps_the_box"),
]


@pytest.mark.parametrize(("given", "gold", "correct"), FINAL_AFTER_BOX)
def test_explicit_final_answer_beats_earlier_box(given, gold, correct):
    assert _grade(given, gold).correct is correct


# ---- the first math after "the answer is"; prose answers ----

ANSWER_PHRASE = [
    _case("The answer is $5$, since $2+3=5$ and $x$ is positive.", "5", True, "first_segment_after_answer_is"),
    _case("The answer is $5$, since $2+3=5$ and $x$ is positive.", "x", False, "later_segment_in_line_is_not_answer"),
    _case("The answer is $x=3$, which is greater than $2$.", "3", True, "answer_is_equation_then_comparison"),
    _case("Final Answer: The largest $n$ is 34.", "34", True, "prose_final_answer_largest_n_is_34"),
    _case("Final Answer: The largest $n$ is 34.", "33", False, "prose_final_answer_34_is_not_33"),
    _case("Final Answer: 120", "120", True, "bare_final_answer_120"),
    _case("Final Answer: 120", "12", False, "bare_final_answer_120_is_not_12"),
    _case("**Final Answer:** 120", "120", True, "bold_final_answer_colon"),
    _case("Final Answer: The final answer is $34$. I hope it is correct.", "34", True, "minerva_final_answer_format"),
    _case("We are done.\nAnswer: 42", "42", True, "answer_colon_at_line_start"),
    _case("The answer is 5 which is prime.", "5", True, "prose_answer_cut_at_which"),
    _case("So the answer is $1.$ By symmetry, $x_1\\leq \\frac{63}{2}$.", "1", True, "answer_segment_before_later_math"),
]


@pytest.mark.parametrize(("given", "gold", "correct"), ANSWER_PHRASE)
def test_answer_phrase_takes_the_first_answer(given, gold, correct):
    assert _grade(given, gold).correct is correct


# ---- percent words ----

PERCENT = [
    _case("28 percent", "28\\%", True, "percent_word_28"),
    _case("28 pct", "28\\%", True, "pct_28"),
    _case("28 percentage", "28\\%", True, "percentage_word_28"),
    _case("28 per cent", "28\\%", True, "per_cent_two_words_28"),
    _case("28\\text{ percent}", "28\\%", True, "percent_in_text_command"),
    _case("The answer is 28 percent.", "28", True, "percent_word_in_sentence"),
    _case("27 percent", "28\\%", False, "27_percent_is_not_28"),
    _case("28 percent", "0.28", False, "28_percent_is_not_0_28_percent_dropped"),
]


@pytest.mark.parametrize(("given", "gold", "correct"), PERCENT)
def test_percent_words(given, gold, correct):
    assert _grade(given, gold).correct is correct


# ---- false positives: lists against numbers, hedged answers ----

FALSE_POSITIVES = [
    _case("5, 125", "5125", False, "spaced_thousands_5_comma_125_is_not_5125"),
    _case("5125", "5, 125", False, "number_5125_is_not_list_5_125"),
    _case("0,111", "111", False, "leading_zero_group_0_comma_111_is_not_111"),
    _case("0,111", "0.111", False, "decimal_comma_0_111_stays_unequal"),
    _case("0,5", "\\frac12", False, "decimal_comma_0_5_stays_unequal"),
    _case("2, 2", "4", False, "list_2_2_is_not_4"),
    _case("1, 2", "1, 2, 3", False, "list_of_two_is_not_list_of_three"),
    _case("\\{1, 2\\}", "1", False, "set_of_two_is_not_a_number"),
    _case("either \\boxed{1} or \\boxed{2}", "2", False, "hedged_boxes_1_or_2_against_2"),
    _case("either \\boxed{1} or \\boxed{2}", "1", False, "hedged_boxes_1_or_2_against_1"),
    _case("\\boxed{2 \\text{ or } 3}", "3", False, "hedge_inside_one_box"),
    _case("The answer is $1$ or $2$.", "2", False, "hedged_segments_after_answer_is"),
    _case("Final answer: either 3 or 4", "4", False, "hedged_prose_either_3_or_4"),
    _case("\\pm 2", "2", False, "plus_minus_2_is_not_2"),
    _case("\\boxed{1} or \\boxed{2}", "1, 2", True, "both_values_against_a_gold_list_of_both"),
    _case("x = 1 or x = 2", "1, 2", True, "x_1_or_x_2_against_list"),
    _case("5,125", "5125", True, "unspaced_thousands_5_125_is_5125"),
    _case("1,234,567", "1234567", True, "two_thousands_groups"),
    _case("10, \\!080", "10080", True, "thin_space_marks_a_thousands_separator"),
    _case("58, 500", "58,500", True, "same_text_up_to_spacing_is_equal"),
]


@pytest.mark.parametrize(("given", "gold", "correct"), FALSE_POSITIVES)
def test_lists_and_hedges_never_equal_one_value(given, gold, correct):
    assert _grade(given, gold).correct is correct


def test_spaced_comma_is_a_list_unspaced_is_a_number():
    assert list_size(clean_answer("5, 125")) == 2
    assert list_size(clean_answer("5,125")) == 1
    assert list_size(clean_answer("(1, 2)")) is None  # a tuple, not a list
    assert answer_key("5,125") == "5125" and answer_key("5, 125") == "5,125"


def test_list_against_number_reason_is_named():
    grade = _grade("5, 125", "5125")
    assert grade.reason == "list-mismatch"
    assert _grade("$\\boxed{2}$ or $\\boxed{2.0}$", "2").reason == "parts-equal"


def test_grade_many_agrees_with_grade_answer_on_lists():
    pairs = [
        ("$d = \\boxed{15\\frac{39}{40}},$ or $\\boxed{\\frac{639}{40}}$", "\\frac{639}{40}"),
        ("either \\boxed{1} or \\boxed{x+1}", "1"),
        ("\\boxed{x+x} and \\boxed{2x}", "2x"),
        ("5, 125", "5125"),
    ]
    batch = grade_many(pairs, workers=2, timeout=10, progress=False)
    assert [g.correct for g in batch] == [True, False, True, False]
    assert [g.correct for g in batch] == [_grade(a, b).correct for a, b in pairs]


# ---- odd input never throws ----

_PIECES = [
    "$", "$$", "\\[", "\\]", "\\(", "\\)", "\\boxed", "\\boxed{", "{", "}", "\\fbox ", "\\",
    " and ", " or ", ",", ", ", "\n", "# Answer\n", "The answer is ", "Final Answer:",
    "1", "0,111", "\\frac{1}{", "x =", "\\text{ and }", "%", " percent", "\\!", "either ",
]


def test_odd_input_never_throws():
    rng = random.Random(7)
    texts = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 12))) for _ in range(400)]
    for text in texts:
        answer = extract_answer(text)
        assert answer is None or isinstance(answer, str)
        if answer:
            list_size(clean_answer(answer))
            answer_key(answer)
    grades = grade_many([(t, "1") for t in texts[:40]], workers=2, timeout=2, progress=False)
    assert all(isinstance(g, Grade) and g.correct in (True, False, None) for g in grades)


def test_deeply_nested_boxes_do_not_recurse():
    text = "\\boxed{" * 20_000 + "5" + "}" * 20_000
    assert extract_answer(text) == "5"


def test_non_text_input_is_a_clear_type_error():
    with pytest.raises(TypeError, match="list of steps, got int"):
        extract_answer(5)
