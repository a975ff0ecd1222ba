"""Scorer(share_prefixes=True): completions of one prompt run on the prompt's cached
keys/values and give the scores of padded rows, in input order, under the token budget."""

from __future__ import annotations

import pytest
import torch
from test_scoring import make_model

from prmkit.models.formatting import StepFormat
from prmkit.scoring import Scorer
from prmkit.scoring.prefix_batches import MIN_SAVED_TOKENS

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
    """A scorer that shares every prompt with two or more completions (the test model's
    prompts are short)."""
    scorer = Scorer(model, dtype="fp32", share_prefixes=True, **kw)
    scorer.min_shared_tokens = 0
    return scorer


def assert_same(a, b, tol=1e-5):
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


def shared_batches(scorer, items):
    encoded = [scorer.encode(p, s) for p, s in items]
    return [b for b in scorer.plan_batches(encoded) if b.shared is not None]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("config", [{}, {"objective": "orm"}, {"num_classes": 3},
                                    {"formulation": "head", "head": "mlp", "surprise_window": 3},
                                    {"formulation": "head", "head": "mlp", "surprise_window": 3,
                                     "surprise_step": True}],
                         ids=["prm", "orm", "three-class", "surprise", "surprise-step"])
def test_shared_prompts_score_as_padded_rows(config, attn):
    model = make_model(**config)
    model.backbone.config._attn_implementation = attn
    data = grouped_items()
    padded = Scorer(model, dtype="fp32").score_detailed(data)
    shared = sharing(model)
    assert shared_batches(shared, data)  # the grouped items did run on cached prompts
    assert_same(shared.score_detailed(data), padded)
    assert any(p is not None for s in padded for p in s.step_probs)


@pytest.mark.parametrize("window", [3, 40], ids=["in-the-completion", "into-the-prompt"])
def test_prompts_of_different_lengths_left_pad_the_past_and_surprise_reads_the_prompt(window):
    """One batch of completions after prompts of 8 to 30 tokens: each row's past is its
    prompt right-aligned (left padding masked out); a surprise window longer than the
    first step reads the prompt's last tokens, as in a padded row."""
    model = make_model(formulation="head", head="mlp", surprise_window=window)
    prompts = ["2+2?", PROBLEMS[1], " ".join(PROBLEMS)]
    data = [(p, [STEPS[(k + j) % 6] for j in range(1 + k % 3)])
            for k, p in enumerate(prompts * 3)]
    shared = sharing(model, max_padding=1.0)
    [batch] = shared_batches(shared, data)
    assert len(batch.rows) == len(data) and len(set(batch.shared.prompt_lens)) == 3
    first = [len(model.encoder.step_ids(steps[0])) for _, steps in data]  # tokens
    assert (window < min(first)) if window == 3 else (window > max(first))
    assert_same(shared.score_detailed(data), Scorer(model, dtype="fp32").score_detailed(data))


def test_best_of_n_pool_of_long_solutions_runs_each_prompt_once():
    """Sixteen solutions much longer than their prompt: every solution runs on its
    prompt's cache, each prompt runs once, and the cache is freed after its last batch."""
    model = make_model()
    long_steps = [STEPS[(k + j) % 6] for j in range(12) for k in range(2)]
    data = [(PROBLEMS[k % 2], long_steps[k % 5:]) for k in range(32)]
    scorer = Scorer(model, dtype="fp32", share_prefixes=True)
    encoded = [scorer.encode(p, s) for p, s in data]
    assert min(len(e.input_ids) - e.prompt_len for e in encoded) > 5 * max(
        e.prompt_len for e in encoded)
    batches = scorer.plan_batches(encoded)
    assert all(b.shared is not None for b in batches)
    caches = {id(b.shared.cache): b.shared.cache for b in batches}
    assert sorted(len(p) for c in caches.values() for p in c.prompts) == sorted(
        len(model.encoder.prompt_ids(p)) for p in PROBLEMS[:2])
    prompt_rows = []
    decoder = model.backbone.get_decoder()
    forward = decoder.forward

    def spy(*args, input_ids=None, past_key_values=None, **kw):
        if past_key_values is None:
            prompt_rows.append(input_ids.shape[0])
        return forward(*args, input_ids=input_ids, past_key_values=past_key_values, **kw)

    decoder.forward = spy
    try:
        got = [scorer.run_batch(b)[0] for b in batches]
    finally:
        del decoder.forward
    assert sum(prompt_rows) == 2  # two prompts, each run once for its 16 solutions
    assert all(not c.kv and c.users == 0 for c in caches.values())
    assert len(torch.cat(got)) == sum(len(e.label_positions) for e in encoded)
    assert_same(scorer.score_detailed(data), Scorer(model, dtype="fp32").score_detailed(data))


def test_steps_cut_by_max_length_and_a_too_long_prompt_stay_null_when_shared():
    model = make_model()
    model.config.step_format = StepFormat(max_length=24)
    model._encoder = None
    long_steps = ["Let x be a number.", "Then 2x + 3 = 11, so x = 4.", "The answer is 4."]
    data = [("2+2?", long_steps), ("2+2?", []), ("2+2?", ["Four."]), ("2+2?", long_steps[:1]),
            ("2+2? " * 20, ["Four."]), ("2+2? " * 20, ["Five."])]
    shared = sharing(model)
    assert shared_batches(shared, data)
    got = shared.score_detailed(data)
    assert_same(got, Scorer(model, dtype="fp32").score_detailed(data))
    assert got[0].step_probs[0] is not None and got[0].step_probs[1:] == [None, None]
    assert got[1].step_probs == [] and got[4].step_probs == [None] == got[5].step_probs


def test_shared_rows_and_prompt_waves_respect_the_token_budget():
    model = make_model()
    data = grouped_items() * 3
    scorer = sharing(model, token_budget=160)
    encoded = [scorer.encode(p, s) for p, s in data]
    batches = scorer.plan_batches(encoded)
    assert len(batches) > 3
    for b in batches:
        rows, width = b.input_ids.shape
        past = max(b.shared.prompt_lens) if b.shared is not None else 0
        assert rows * (width + past) <= 160 or rows == 1
        assert b.num_tokens <= rows * width
        if b.shared is not None:
            assert sum(map(len, b.shared.cache.prompts)) <= 160
    scored = sorted(item for b in batches for item, _ in b.owners)
    expected = sorted(i for i, e in enumerate(encoded) for _ in e.slots)
    assert scored == expected  # every label once
    assert_same(scorer.score_detailed(data), Scorer(model, dtype="fp32").score_detailed(data))


def test_labels_of_a_shared_row_sit_on_each_steps_last_token_after_the_prompt():
    model = make_model()
    scorer = sharing(model, max_padding=1.0)
    enc = model.encoder
    problem, a, b = PROBLEMS[0], STEPS[:2], STEPS[2:3]
    prompt = list(enc.prompt_ids(problem))
    a_ids = [list(enc.step_ids(s)) for s in a]
    b_ids = list(enc.step_ids(b[0]))
    [batch] = scorer.plan_batches([scorer.encode(problem, a), scorer.encode(problem, b)])
    a1, a2 = len(a_ids[0]), len(a_ids[1])
    assert batch.shared.cache.prompts == [tuple(prompt)]
    assert batch.input_ids[0].tolist() == a_ids[0] + a_ids[1]
    assert batch.input_ids[1, : len(b_ids)].tolist() == b_ids
    assert batch.label_positions.tolist() == [[0, a1 - 1], [0, a1 + a2 - 1],
                                              [1, len(b_ids) - 1]]
    assert batch.owners == [(0, 0), (0, 1), (1, 0)]
    assert batch.num_tokens == a1 + a2 + len(b_ids)


def test_bf16_shared_prompts_score_as_bf16_padded_rows():
    model = make_model()
    data = grouped_items()
    shared = Scorer(model, dtype="bf16", share_prefixes=True)
    shared.min_shared_tokens = 0
    assert shared_batches(shared, data)
    assert_same(shared.score_detailed(data), Scorer(model, dtype="bf16").score_detailed(data),
                tol=0.03)


def test_batches_without_a_shared_prompt_keep_plain_padded_rows():
    model = make_model()
    data = [(PROBLEMS[k], STEPS[k: k + 2]) for k in range(3)]
    scorer = sharing(model)
    assert not shared_batches(scorer, data)
    assert scorer.score(data) == Scorer(model, dtype="fp32").score(data)


def test_sharing_is_off_by_default_for_published_formats_and_sliding_windows():
    model = make_model()
    assert not Scorer(model, dtype="fp32").shares_prefixes
    assert Scorer(model, dtype="fp32", share_prefixes=True).shares_prefixes
    config = model.backbone.config
    model.config.family = "some-family"
    try:
        assert not Scorer(model, dtype="fp32", share_prefixes=True).shares_prefixes
    finally:
        model.config.family = None
    config.sliding_window = 16  # columns of a reused cache are not positions
    try:
        assert not Scorer(model, dtype="fp32", share_prefixes=True).shares_prefixes
    finally:
        config.sliding_window = None


def test_prompts_are_shared_only_where_the_tokens_saved_pay_for_their_forward():
    """The measured rule: the prompts of a wave are shared when (n - 1) x prompt tokens,
    summed over them, reach min_shared_tokens (a forward's fixed cost); a lone completion
    keeps a padded row, and so do two after a short prompt on their own."""
    model = make_model()
    scorer = Scorer(model, dtype="fp32", share_prefixes=True)
    short, long = "2+2?", " ".join(PROBLEMS * 4)
    assert len(model.encoder.prompt_ids(short)) < MIN_SAVED_TOKENS
    assert len(model.encoder.prompt_ids(long)) >= MIN_SAVED_TOKENS
    two_short = [(short, STEPS[:2]), (short, STEPS[2:4])]
    assert not shared_batches(scorer, two_short)
    assert not shared_batches(scorer, [(long, STEPS[:2]), (short, STEPS[:1])])
    data = [*two_short, (long, STEPS[:2]), (long, STEPS[3:]), (PROBLEMS[1], STEPS[:1])]
    shared = sorted(i for b in shared_batches(scorer, data) for i in b.rows)
    assert shared == [0, 1, 2, 3]  # the long prompt pays for the forward the short one joins
    assert_same(scorer.score_detailed(data), Scorer(model, dtype="fp32").score_detailed(data))
