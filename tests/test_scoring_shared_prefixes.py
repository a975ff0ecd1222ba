"""Scorer(share_prefixes=True): completions of one prompt in one prefix-tree row give the
scores of the padded path, in input order, under the token budget."""

from __future__ import annotations

import pytest
from test_scoring import make_model

from prmkit.models.attention import TreeMask
from prmkit.models.formatting import StepFormat
from prmkit.scoring import Scorer

PROBLEMS = ["Solve 2x + 3 = 11 for x.", "Compute 3 * 4 - 5, then add 12 to the result.",
            "How many apples are left if 4 of 11 are eaten?"]
STEPS = ["Let x be the number.", "Then 2x + 3 = 11, so 2x = 8 and x = 4.",
         "First, compute 3 * 4 = 12.", "Next, 12 - 5 = 7.", "So 11 - 4 = 7 apples.",
         "# Answer\n\n7"]


def grouped_items() -> list[tuple[str, list[str]]]:
    """Groups of 1 to 4 completions per prompt, interleaved, with a completion without
    steps and one that repeats another exactly."""
    out = []
    for k in range(14):
        problem = PROBLEMS[k % 3] if k % 5 else f"A prompt of its own, number {k}."
        out.append((problem, [STEPS[(k + j) % len(STEPS)] for j in range(1 + k % 4)]))
    out.append((PROBLEMS[0], []))
    out.append(out[1])
    return out


def sharing(model, **kw) -> Scorer:
    """A scorer that puts every completion of a prompt in its prompt's row (no cost model:
    the tiny test model's rows are short)."""
    scorer = Scorer(model, dtype="fp32", share_prefixes=True, **kw)
    scorer.prefix_pair_cost = 0.0
    return scorer


def assert_same(a, b, tol=1e-4):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert len(x.step_probs) == len(y.step_probs) and x.truncated == y.truncated
        for p, q in zip(x.step_probs, y.step_probs, strict=True):
            assert (p is None) == (q is None)
            if p is not None:
                assert abs(p - q) < tol
        if x.class_probs is not None:
            for p, q in zip(x.class_probs, y.class_probs, strict=True):
                assert (p is None) == (q is None)
                if p is not None:
                    assert max(abs(u - v) for u, v in zip(p, q, strict=True)) < tol


def tree_batches(scorer, items):
    encoded = [scorer.encode(p, s) for p, s in items]
    return [b for b in scorer.plan_batches(encoded) if isinstance(b.attention_mask, TreeMask)]


@pytest.mark.parametrize("config", [{}, {"objective": "orm"}, {"num_classes": 3},
                                    {"formulation": "head", "head": "mlp", "surprise_window": 3}],
                         ids=["prm", "orm", "three-class", "surprise"])
def test_shared_prompts_score_as_padded_rows(config):
    model = make_model(**config)
    data = grouped_items()
    padded = Scorer(model, dtype="fp32").score_detailed(data)
    shared = sharing(model)
    assert tree_batches(shared, data)  # the grouped items did go through tree rows
    assert_same(shared.score_detailed(data), padded)
    assert any(p is not None for s in padded for p in s.step_probs)


def test_steps_cut_by_max_length_and_a_too_long_prompt_stay_null_in_tree_rows():
    model = make_model()
    model.config.step_format = StepFormat(max_length=24)
    model._encoder = None
    long_steps = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "The answer is 4."]
    data = [("2+2?", long_steps), ("2+2?", []), ("2+2?", ["Four."]), ("2+2?", long_steps[:1]),
            ("2+2? " * 20, ["Four."]), ("2+2? " * 20, ["Five."])]
    shared = sharing(model)
    assert tree_batches(shared, data)
    got = shared.score_detailed(data)
    assert_same(got, Scorer(model, dtype="fp32").score_detailed(data))
    assert got[0].step_probs[0] is not None and got[0].step_probs[1:] == [None, None]
    assert got[1].step_probs == [] and got[4].step_probs == [None] == got[5].step_probs


def test_tree_rows_respect_the_token_budget():
    model = make_model()
    data = grouped_items() * 3
    scorer = sharing(model, token_budget=160)
    encoded = [scorer.encode(p, s) for p, s in data]
    batches = scorer.plan_batches(encoded)
    assert len(batches) > 3
    for b in batches:
        rows, width = b.input_ids.shape
        assert rows * width <= 160 or rows == 1
        assert b.num_tokens <= rows * width
    scored = sorted(item for b in batches for item, _ in b.owners)
    expected = sorted(i for i, e in enumerate(encoded) for _ in e.slots)
    assert scored == expected  # every label once, none lost to a split row
    assert_same(scorer.score_detailed(data), Scorer(model, dtype="fp32").score_detailed(data))


def test_labels_of_a_tree_row_sit_on_each_completions_last_separator_token():
    model = make_model()
    scorer = sharing(model)
    enc = model.encoder
    problem, a, b = PROBLEMS[0], STEPS[:2], STEPS[2:3]
    prompt = list(enc.prompt_ids(problem))
    a_ids = [list(enc.step_ids(s)) for s in a]
    b_ids = list(enc.step_ids(b[0]))
    [batch] = scorer.plan_batches([scorer.encode(problem, a), scorer.encode(problem, b)])
    p, a1, a2 = len(prompt), len(a_ids[0]), len(a_ids[1])
    assert batch.input_ids[0].tolist() == prompt + a_ids[0] + a_ids[1] + b_ids
    assert batch.label_positions.tolist() == [[0, p + a1 - 1], [0, p + a1 + a2 - 1],
                                              [0, p + a1 + a2 + len(b_ids) - 1]]
    assert batch.owners == [(0, 0), (0, 1), (1, 0)]
    # the second completion starts where the prompt ends, and sees the prompt, not the first
    assert batch.position_ids[0].tolist() == (list(range(p + a1 + a2))
                                              + list(range(p, p + len(b_ids))))
    allowed = batch.attention_mask.dense()[0]
    first_b = p + a1 + a2
    assert allowed[first_b, :p].all() and not allowed[first_b, p:first_b].any()
    assert batch.num_tokens == p + a1 + a2 + len(b_ids)


def test_batches_without_a_shared_prompt_keep_plain_padded_rows():
    model = make_model()
    data = [(PROBLEMS[k], STEPS[k: k + 2]) for k in range(3)]
    scorer = sharing(model)
    assert not tree_batches(scorer, data)
    assert scorer.score(data) == Scorer(model, dtype="fp32").score(data)


def test_sharing_is_off_by_default_and_for_published_formats():
    model = make_model()
    assert not Scorer(model, dtype="fp32").shares_prefixes
    assert Scorer(model, dtype="fp32", share_prefixes=True).shares_prefixes
    model.config.family = "some-family"
    try:
        assert not Scorer(model, dtype="fp32", share_prefixes=True).shares_prefixes
    finally:
        model.config.family = None


def test_many_completions_after_a_short_prompt_keep_rows_of_their_own():
    """Dense attention computes every pair of a row: eight completions after a ten-token
    prompt cost more in one row than in eight; after a long prompt, one row is cheaper."""
    model = make_model()
    scorer = Scorer(model, dtype="fp32", share_prefixes=True)
    assert scorer.prefix_pair_cost == pytest.approx(1 / 64)  # the test model's hidden size
    group = [[STEPS[(k + j) % len(STEPS)] for j in range(3)] for k in range(8)]
    short = [(PROBLEMS[0], steps) for steps in group]
    long = [(" ".join(PROBLEMS * 4), steps) for steps in group]
    rows_short = [b.input_ids.shape[0] for b in scorer.plan_batches(
        [scorer.encode(p, s) for p, s in short])]
    [shared] = tree_batches(scorer, long)
    assert sum(rows_short) >= 4 and shared.input_ids.shape[0] <= 2
    assert_same(scorer.score_detailed(short + long),
                Scorer(model, dtype="fp32").score_detailed(short + long))
