"""`prmkit generate`: step-by-step prompts, sample files (seeds, resume, provenance), CLI."""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.generation.prompts import DEFAULT_EXAMPLES, PromptFormat, trim_after_answer
from prmkit.models.backbones import train_tokenizer
from prmkit.models.formatting import SegmentEncoder, StepFormat, split_steps


# ---- prompts ------------------------------------------------------------------------------
@pytest.mark.parametrize("separator", ["\n\n", "\n"])
def test_fewshot_examples_are_written_as_the_prm_reads_steps(separator):
    fmt = PromptFormat(step_separator=separator)
    text = fmt.render("What is $1 + 1$?").text
    assert text.endswith("Problem: What is $1 + 1$?\n\nSolution:\n")
    for ex in DEFAULT_EXAMPLES:
        solution = separator.join([*ex.steps, f"# Answer\n\n{ex.answer}"])
        assert f"Solution:\n{solution}\n\n\nProblem:" in text
        assert split_steps(solution, separator) == [*ex.steps, f"# Answer\n\n{ex.answer}"]


def test_chat_format_has_system_examples_and_problem_turns():
    messages = PromptFormat(style="chat").render("What is $1 + 1$?").messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user",
                                             "assistant", "user"]
    assert messages[-1]["content"] == "What is $1 + 1$?"
    assert messages[2]["content"].endswith("\n\n# Answer\n\n5")
    assert PromptFormat(style="chat").stop_strings == ()


def test_render_partial_ends_with_the_separator_and_stops_at_the_next():
    fmt = PromptFormat()
    partial = fmt.render_partial("P?", ["First.", "Second."])
    assert partial.text == fmt.render("P?").text + "First.\n\nSecond.\n\n"
    assert fmt.render_partial("P?", []).text == fmt.render("P?").text
    assert fmt.step_stop_strings[0] == "\n\n"
    with pytest.raises(PrmkitError, match="needs a tokenizer with a chat template"):
        PromptFormat(style="chat").render_partial("P?", ["First."])
    tok = train_tokenizer(["a b c"], vocab_size=300)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}|{% endfor %}"
    chat = PromptFormat(style="chat", examples=(), instruction="")
    assert chat.render_partial("P?", ["First."], tok).text == "P?|First.\n\n"


def test_generated_completion_scores_like_the_same_steps_given_directly():
    tok = train_tokenizer(["Let x be 4. So 2x = 8.\n\n# Answer\n\n8 Problem: Solution:"],
                          vocab_size=320)
    fmt = PromptFormat()
    completion = "Let x be 4.  \n\n\n\nSo 2x = 8.\n\n# Answer\n\n8\n\nSo that was easy.\nProblem: 9"
    steps = fmt.completion_steps(completion)
    assert steps == ["Let x be 4.", "So 2x = 8.", "# Answer\n\n8"]
    enc = SegmentEncoder(tok, StepFormat())
    generated = enc.encode("What is 2x?", steps)
    direct = enc.encode("What is 2x?", ["Let x be 4.", "So 2x = 8.", "# Answer\n\n8"])
    assert generated.input_ids == direct.input_ids
    assert generated.label_positions == direct.label_positions and len(direct.label_positions) == 3


def test_trim_after_answer_keeps_the_answer_line_only():
    assert trim_after_answer("a\n\n# Answer\n\n\\frac{1}{2}\n\nProblem: x") == \
        "a\n\n# Answer\n\n\\frac{1}{2}"
    assert trim_after_answer("no heading\n\nmore") == "no heading\n\nmore"
    assert trim_after_answer("a\n\n# Answer\n\n") == "a\n\n# Answer\n\n"


def test_template_hash_changes_with_what_determines_the_prompt():
    base = PromptFormat()
    assert base.template_hash() == PromptFormat().template_hash()
    assert len(base.template_hash()) == 64
    others = [PromptFormat(step_separator="\n"), PromptFormat(style="chat"),
              PromptFormat(examples=DEFAULT_EXAMPLES[:1]), PromptFormat(instruction="Solve."),
              PromptFormat(template="Q: {problem}\nA:"), PromptFormat(stop=("###",))]
    hashes = {fmt.template_hash() for fmt in others}
    assert len(hashes) == len(others) and base.template_hash() not in hashes


def test_text_template_without_problem_placeholder_is_an_error():
    with pytest.raises(PrmkitError, match="no {problem} placeholder"):
        PromptFormat(template="Solve it.")
    assert PromptFormat(template="\\boxed{} {problem}").render("Q").text == "\\boxed{} Q"
