"""Golden tests of the one step-formatting module (which token carries each label)."""

from __future__ import annotations

import pytest

from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.models.backbones import train_tokenizer
from prmkit.models.formatting import (
    SegmentEncoder,
    StepFormat,
    encode_solution,
    resolve_label_token_ids,
    strip_prompt,
)

CORPUS = [
    "Let x be a number. Then 2x + 3 = 11, so x = 4.",
    "First, compute 3 * 4 = 12.\n\nNext, 12 - 5 = 7.\n\nThe answer is 7.",
    "+ - 0 = ( ) \\frac{1}{2} \\boxed{7} # Answer",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)
PROBLEM = "2+2?"
STEPS = ["Add 2.", "x = 4."]
LONG_STEPS = ["Let x be a number.", "Then 2x + 3 = 11.", "So x = 4.", "# Answer 4"]


@pytest.fixture(scope="module")
def tok():
    """Byte-level BPE trained here: '\\n\\n' is TWO tokens, '<step>' an added single token."""
    t = train_tokenizer(CORPUS, vocab_size=300)
    t.add_special_tokens({"additional_special_tokens": ["<step>"]})
    return t


def ids_of(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def assert_labels_on_separator_ends(tok, enc, fmt: StepFormat, steps) -> None:
    """Each label sits on the last token of the separator that closes its step."""
    sep = ids_of(tok, fmt.step_separator)
    assert len(enc.label_positions) == len(enc.step_indices)
    for pos in enc.label_positions:
        assert enc.input_ids[pos - len(sep) + 1 : pos + 1] == sep
        assert tok.decode([enc.input_ids[pos]]) == tok.decode([sep[-1]])
    # the encoding ends right after the last labelled step
    if enc.label_positions:
        assert enc.label_positions[-1] == len(enc.input_ids) - 1


# ---- trained test tokenizer -------------------------------------------------------------
def test_golden_ids_two_token_separator(tok):
    enc = encode_solution(tok, PROBLEM, STEPS, StepFormat())
    # "2+2?" "\n\n" | "Add 2." "\n\n" | "x = 4." "\n\n"   ("\n\n" = 201 201)
    assert enc.input_ids == [20, 13, 20, 33, 201, 201,
                             35, 70, 70, 223, 20, 16, 201, 201,
                             90, 259, 267, 16, 201, 201]
    assert enc.label_positions == [13, 19]
    assert enc.step_indices == [0, 1]
    # the label token is the SECOND newline of the separator, not the step's last token
    assert [tok.decode([enc.input_ids[p]]) for p in enc.label_positions] == ["\n", "\n"]
    assert [tok.decode([enc.input_ids[p - 2]]) for p in enc.label_positions] == [".", "."]


@pytest.mark.parametrize("separator", ["\n\n", " ки\n", "<step>"])
def test_label_on_last_separator_token(tok, separator):
    fmt = StepFormat(step_separator=separator)
    enc = encode_solution(tok, PROBLEM, LONG_STEPS, fmt)
    assert enc.step_indices == [0, 1, 2, 3]
    assert_labels_on_separator_ends(tok, enc, fmt, LONG_STEPS)
    # segments are tokenised independently: prompt + (step + separator) per step
    expected = ids_of(tok, PROBLEM + "\n\n")
    for step in LONG_STEPS:
        expected += ids_of(tok, step) + ids_of(tok, separator)
    assert enc.input_ids == expected


def test_single_token_separator_is_the_label_token(tok):
    step_id = tok.convert_tokens_to_ids("<step>")
    enc = encode_solution(tok, PROBLEM, STEPS, StepFormat(step_separator="<step>"))
    assert ids_of(tok, "<step>") == [step_id]
    assert [enc.input_ids[p] for p in enc.label_positions] == [step_id, step_id]
    assert enc.input_ids.count(step_id) == 2


@pytest.mark.parametrize("separator", ["\n\n", "<step>"])
def test_separator_inside_step_text_gets_no_label(tok, separator):
    steps = [f"Add 2.{separator}Then add 2 more.", "x = 4.", f"{separator}"]
    fmt = StepFormat(step_separator=separator)
    enc = encode_solution(tok, PROBLEM, steps, fmt)
    assert len(enc.label_positions) == len(steps) == 3
    assert enc.step_indices == [0, 1, 2]
    sep = ids_of(tok, separator)
    first_step = ids_of(tok, steps[0])
    prompt_len = len(ids_of(tok, PROBLEM + "\n\n"))
    # the separator tokens inside step 0 are not a label position
    assert enc.label_positions[0] == prompt_len + len(first_step) + len(sep) - 1
    # a step that IS the separator: its own tokens, then the separator, label at the end
    assert enc.label_positions[2] == len(enc.input_ids) - 1
    assert enc.input_ids[-2 * len(sep):] == sep + sep


def test_truncation_drops_cut_step_and_all_later_steps(tok):
    steps = ["Add 2.", "Let x be a number. Then 2x + 3 = 11, so x = 4.", "x = 4."]
    full = encode_solution(tok, PROBLEM, steps, StepFormat())
    # room for the prompt, step 0 and part of step 1; step 2 alone would still fit
    cut_at = full.label_positions[0] + 1 + 8
    assert full.label_positions[2] - full.label_positions[1] <= 8
    assert full.label_positions[1] >= cut_at
    short = encode_solution(tok, PROBLEM, steps, StepFormat(max_length=cut_at))
    assert short.step_indices == [0]
    assert short.label_positions == full.label_positions[:1]
    assert short.input_ids == full.input_ids[: full.label_positions[0] + 1]
    # exactly at the boundary: a step that just fits keeps its label
    exact = encode_solution(tok, PROBLEM, STEPS, StepFormat(max_length=20))
    assert exact.step_indices == [0, 1] and len(exact.input_ids) == 20
    one_less = encode_solution(tok, PROBLEM, STEPS, StepFormat(max_length=19))
    assert one_less.step_indices == [0]


def test_prompt_too_long_is_an_error(tok):
    with pytest.raises(PrmkitError, match="max_length=3"):
        encode_solution(tok, PROBLEM, STEPS, StepFormat(max_length=3))
    # a prompt that fits exactly is fine, with no step labelled
    enc = encode_solution(tok, PROBLEM, STEPS, StepFormat(max_length=6))
    assert enc.step_indices == [] and enc.label_positions == [] and len(enc.input_ids) == 6


def test_zero_steps(tok):
    enc = encode_solution(tok, PROBLEM, [], StepFormat())
    assert enc.label_positions == [] and enc.step_indices == []
    assert enc.input_ids == ids_of(tok, PROBLEM + "\n\n")


def test_chat_template(tok):
    tok_chat = train_tokenizer(CORPUS, vocab_size=300)
    tok_chat.chat_template = CHAT_TEMPLATE
    fmt = StepFormat(use_chat_template=True)
    enc = encode_solution(tok_chat, PROBLEM, STEPS, fmt)
    prompt = ids_of(tok_chat, f"<s>user: {PROBLEM}\n<s>assistant: ")
    bos = tok_chat.convert_tokens_to_ids("<s>")
    assert enc.input_ids[: len(prompt)] == prompt
    assert enc.input_ids[0] == bos and enc.input_ids.count(bos) == 2  # no extra BOS added
    assert enc.input_ids[len(prompt):] == (ids_of(tok_chat, STEPS[0]) + [201, 201]
                                            + ids_of(tok_chat, STEPS[1]) + [201, 201])
    assert_labels_on_separator_ends(tok_chat, enc, fmt, STEPS)
    # the same steps without the template: same step tokens, different prompt
    plain = encode_solution(tok_chat, PROBLEM, STEPS, StepFormat())
    assert plain.input_ids[-14:] == enc.input_ids[-14:]
    assert enc.label_positions[0] - plain.label_positions[0] == len(prompt) - 6


def test_chat_template_missing_is_an_error(tok):
    with pytest.raises(PrmkitError, match="no chat template"):
        encode_solution(tok, PROBLEM, STEPS, StepFormat(use_chat_template=True))


def test_prefix_property(tok):
    enc = SegmentEncoder(tok, StepFormat(step_separator=" ки\n"))
    full = enc.encode(PROBLEM, LONG_STEPS)
    for k in range(len(LONG_STEPS) + 1):
        part = enc.encode(PROBLEM, LONG_STEPS[:k])
        assert part.input_ids == full.input_ids[: len(part.input_ids)]
        assert part.label_positions == full.label_positions[:k]
        assert part.step_indices == list(range(k))


def test_cached_encoder_matches_fresh_encoding(tok):
    enc = SegmentEncoder(tok, StepFormat())
    first = enc.encode(PROBLEM, LONG_STEPS)
    again = enc.encode(PROBLEM, LONG_STEPS)  # served from the segment caches
    assert first == again == encode_solution(tok, PROBLEM, LONG_STEPS, StepFormat())


def test_label_tokens_must_be_single_tokens(tok):
    assert resolve_label_token_ids(tok, ("+", "-")) == [13, 15]
    with pytest.raises(PrmkitError, match="'good' is .* tokens"):
        resolve_label_token_ids(tok, ("good", "-"))


def test_labels_never_cast_to_bool_regression(tok):
    """Regression after a known PRM trainer bug: labels were cast to bool, so the ignore
    value (-100) and soft targets became True. Here a soft label keeps its value, an
    unlabelled step (None) gets no target, and a 0.0 label stays a wrong-step target."""
    from prmkit.training import packing
    ex = StepExample(problem=PROBLEM, steps=tuple(LONG_STEPS), labels=(1.0, 0.25, None, 0.0))
    enc = SegmentEncoder(tok, StepFormat()).encode(ex.problem, ex.steps)
    targets = packing.example_targets(ex, num_classes=2, objective="prm")
    at_positions = {pos: targets[i] for pos, i in zip(enc.label_positions, enc.step_indices)}
    assert at_positions == {
        enc.label_positions[0]: [1.0, 0.0],
        enc.label_positions[1]: [0.25, 0.75],
        enc.label_positions[2]: None,
        enc.label_positions[3]: [0.0, 1.0],
    }
    for t in targets:
        assert t is None or all(type(v) is float for v in t)
    # formatting carries positions only: plain ints, no label values to cast
    assert all(type(p) is int for p in enc.label_positions + enc.step_indices)


# ---- a SentencePiece-style tokenizer (Metaspace "▁", as Llama-2 and Mistral) -------------
SP_CORPUS = [
    "Let x be a number. Then 2x + 3 = 11, so x = 4.",
    "First, compute 3 * 4 = 12.\n\nNext, 12 - 5 = 7.\n\nThe answer is 7.",
    "What is 2+2? Add 2. So x = 4. ки\n",
    "+ - 0 = ( ) \\frac{1}{2} \\boxed{7} # Answer",
]


@pytest.fixture(scope="module")
def sp_tok():
    """BPE over Metaspace pieces (what tokenizers' SentencePieceBPETokenizer builds): every
    encoded text gets a leading "▁", and a space merges into the next piece."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.normalizer = normalizers.NFKC()
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(SP_CORPUS, trainers.BpeTrainer(
        vocab_size=200, min_frequency=1, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def pieces(tok, ids) -> list[str]:
    return tok.convert_ids_to_tokens(ids)


def test_sentencepiece_golden_ids_double_newline(sp_tok):
    fmt = StepFormat()
    enc = encode_solution(sp_tok, PROBLEM, STEPS, fmt)
    # each segment is encoded alone, so each starts with "▁": the separator "\n\n" is
    # "▁" "\n\n" after a step (the prompt's own "\n\n" follows "?" within one text)
    assert pieces(sp_tok, enc.input_ids) == ["▁2+2?", "\n\n",
                                             "▁Add", "▁2.", "▁", "\n\n",
                                             "▁x", "▁=", "▁4.", "▁", "\n\n"]
    assert enc.input_ids == [152, 59, 136, 128, 52, 59, 58, 53, 75, 52, 59]
    assert enc.label_positions == [5, 10]
    # the label is on "\n\n", not on the separator's leading "▁" nor the step's last piece
    assert [pieces(sp_tok, [enc.input_ids[p - 2], enc.input_ids[p - 1], enc.input_ids[p]])
            for p in enc.label_positions] == [["▁2.", "▁", "\n\n"], ["▁4.", "▁", "\n\n"]]
    assert_labels_on_separator_ends(sp_tok, enc, fmt, STEPS)
    assert sp_tok.decode(enc.input_ids) == "2+2?\n\n Add 2. \n\n x = 4. \n\n"
    assert pieces(sp_tok, resolve_label_token_ids(sp_tok, ("+", "-"))) == ["▁+", "▁-"]


def test_sentencepiece_space_merges_into_the_separator_label_token(sp_tok):
    fmt = StepFormat(step_separator=" ки\n")
    enc = encode_solution(sp_tok, PROBLEM, STEPS, fmt)
    # " ки\n": its space becomes the "▁" of ONE piece, which carries the label
    assert pieces(sp_tok, ids_of(sp_tok, " ки\n")) == ["▁ки\n"]
    assert pieces(sp_tok, enc.input_ids) == ["▁2+2?", "\n\n", "▁Add", "▁2.", "▁ки\n",
                                             "▁x", "▁=", "▁4.", "▁ки\n"]
    assert enc.input_ids == [152, 59, 136, 128, 126, 58, 53, 75, 126]
    assert enc.label_positions == [4, 8]
    assert_labels_on_separator_ends(sp_tok, enc, fmt, STEPS)
    # a step written with a leading space merges it into its first piece: same tokens,
    # same label positions (no extra "▁" token shifts the labels)
    spaced = encode_solution(sp_tok, PROBLEM, [" " + s for s in STEPS], fmt)
    assert spaced == enc


# ---- the real SmolLM2 tokenizer --------------------------------------------------------
@pytest.fixture(scope="module")
def smol_tok(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_smollm2_golden_ids(smol_tok):
    enc = encode_solution(smol_tok, PROBLEM, STEPS, StepFormat())
    # "\n\n" is ONE token (1116) for SmolLM2; no BOS is added (add_bos_token is off)
    assert enc.input_ids == [34, 27, 34, 47, 1116, 7684, 216, 34, 30, 1116,
                             104, 446, 216, 36, 30, 1116]
    assert enc.label_positions == [9, 15]
    assert [smol_tok.decode([enc.input_ids[p]]) for p in enc.label_positions] == ["\n\n"] * 2
    assert resolve_label_token_ids(smol_tok, ("+", "-")) == [27, 29]


def test_smollm2_ki_separator(smol_tok):
    fmt = StepFormat(step_separator=" ки\n")
    enc = encode_solution(smol_tok, PROBLEM, STEPS, fmt)
    assert ids_of(smol_tok, " ки\n") == [31338, 7872, 198]
    assert enc.label_positions == [11, 19]
    assert [enc.input_ids[p] for p in enc.label_positions] == [198, 198]  # the "\n" after ки
    assert_labels_on_separator_ends(smol_tok, enc, fmt, STEPS)


def test_smollm2_chat_template_and_separator_in_step(smol_tok):
    fmt = StepFormat(use_chat_template=True)
    steps = ["Add 2.\n\nThen 2 more.", "x = 4."]
    enc = encode_solution(smol_tok, PROBLEM, steps, fmt)
    assert enc.input_ids[:3] == [1, 9690, 198]  # <|im_start|>system\n from the template
    assert enc.input_ids[-6:] == [104, 446, 216, 36, 30, 1116]
    assert len(enc.label_positions) == 2
    # inside running text "\n\n" before a word tokenises as "\n" "\n" (198 198), the
    # standalone separator as 1116: only the two separators carry 1116, and the labels
    assert enc.input_ids.count(1116) == 2
    assert [enc.input_ids[p] for p in enc.label_positions] == [1116, 1116]
    assert_labels_on_separator_ends(smol_tok, enc, fmt, steps)
    assert smol_tok.decode(enc.input_ids[: enc.label_positions[0] + 1]).endswith(
        "<|im_start|>assistant\nAdd 2.\n\nThen 2 more.\n\n")


def test_smollm2_truncation_and_prefix(smol_tok):
    fmt = StepFormat(max_length=40)
    enc = SegmentEncoder(smol_tok, fmt)
    full = SegmentEncoder(smol_tok, StepFormat()).encode(PROBLEM, LONG_STEPS * 3)
    cut = enc.encode(PROBLEM, LONG_STEPS * 3)
    assert len(cut.input_ids) <= 40
    assert 0 < len(cut.step_indices) < len(LONG_STEPS) * 3
    assert cut.input_ids == full.input_ids[: len(cut.input_ids)]
    assert cut.label_positions == full.label_positions[: len(cut.label_positions)]
    # the next step did not fit
    assert full.label_positions[len(cut.step_indices)] >= 40


def test_generated_text_splits_into_steps_with_the_answer_heading_kept_whole():
    from prmkit.models.formatting import split_steps

    text = "x = 2 + 3\n\n  x = 5 \n\n\n\n# Answer\n\n5\n\n"
    assert split_steps(text, "\n\n") == ["x = 2 + 3", "x = 5", "# Answer\n\n5"]
    assert split_steps("a\nb\n# Answer\n7", "\n") == ["a", "b", "# Answer\n\n7"]
    assert split_steps("a\n\n# Answer", "\n\n") == ["a", "# Answer"]
    with pytest.raises(PrmkitError):
        split_steps("a", "")


def test_a_prompt_ending_in_step_separators_reads_as_the_bare_problem():
    assert strip_prompt("What is 2+3?\n\n", "\n\n") == "What is 2+3?"
    assert strip_prompt("  What is 2+3? ки \n ки", " ки") == "What is 2+3?"
    assert strip_prompt("Solve x ки = 4.\n", " ки") == "Solve x ки = 4."  # inside: kept
