"""prmkit.rewards.contract: completions to per-step rewards, spans and policy token ends."""

from __future__ import annotations

import pytest
from test_scoring import make_model

from prmkit.errors import PrmkitError
from prmkit.models.backbones import train_tokenizer
from prmkit.models.formatting import split_steps
from prmkit.rewards import PolicyTokens, compute_step_rewards, step_spans
from prmkit.scoring import Scorer
from prmkit.scoring.aggregate import aggregate

PROBLEM = "What is 2x + 3 = 11?"
COMPLETIONS = [
    "Let x be a number.\n\nThen 2x + 3 = 11, so x = 4.\n\n# Answer\n\n4",
    "  First, compute 3 * 4 = 12.\n\n\n\nNext, 12 - 5 = 7.  \n\n",
    "We add 17 and 25 to get 42.",
    "",
]
POLICY_CORPUS = ["Let x be a number so x is 4", "We add numbers: 17 + 25 = 42, then 12 - 5 = 7.",
                 "# Answer First compute Next then"]
POLICY_TEXT = [t + "\n\n" + t for t in POLICY_CORPUS] * 3  # a policy that writes steps


@pytest.fixture(scope="module")
def scorer():
    return Scorer(make_model(), dtype=None)


@pytest.fixture(scope="module")
def policy_tok():
    """A policy tokenizer unlike the PRM's (digits split, another vocabulary)."""
    return train_tokenizer(POLICY_CORPUS, vocab_size=300, split_digits=True)


def test_step_spans_cover_exactly_the_split_steps():
    for text in COMPLETIONS + ["# Answer\n\n4\n\n5", "# Answer", "a\n\n\n\nb"]:
        steps = split_steps(text, "\n\n")
        spans = step_spans(text, "\n\n")
        assert len(spans) == len(steps)
        for step, (s, e) in zip(steps, spans):
            if step.startswith("# Answer\n\n"):
                assert text[s:e].startswith("# Answer") and text[s:e].endswith(step[-1])
            else:
                assert text[s:e] == step


def test_rewards_equal_offline_scoring_with_the_configured_aggregation(scorer):
    got = compute_step_rewards(scorer, [PROBLEM] * 4, COMPLETIONS)
    offline = scorer.score([(PROBLEM, split_steps(c, "\n\n")) for c in COMPLETIONS])
    for r, probs in zip(got, offline):
        assert r.probabilities == pytest.approx(probs)
    assert [len(r.steps) for r in got] == [3, 2, 1, 0]
    assert got[0].score == pytest.approx(aggregate(offline[0], "prod"))
    assert got[3].score is None  # no step: nothing to grade
    mins = compute_step_rewards(scorer, [PROBLEM], COMPLETIONS[:1], aggregation="min")
    assert mins[0].score == pytest.approx(min(offline[0]))


def test_a_small_token_budget_gives_the_same_rewards(scorer):
    wide = compute_step_rewards(scorer, [PROBLEM] * 4, COMPLETIONS)
    narrow = compute_step_rewards(scorer, [PROBLEM] * 4, COMPLETIONS, max_tokens_per_batch=8)
    for n, w in zip(narrow, wide):  # one row per forward: padding cannot change a score
        assert n.probabilities == pytest.approx(w.probabilities, abs=1e-5)
    assert scorer.token_budget == 16384  # the caller's scorer is left as it was


def test_policy_token_ends_through_the_policy_tokenizer(scorer, policy_tok):
    ids = [policy_tok(c, add_special_tokens=False)["input_ids"] for c in COMPLETIONS]
    by_ids = compute_step_rewards(scorer, [PROBLEM] * 4, COMPLETIONS,
                                  policy_tokenizer=policy_tok, policy_token_ids=ids)
    by_text = compute_step_rewards(scorer, [PROBLEM] * 4, COMPLETIONS, policy_tokenizer=policy_tok)
    for row, r, t in zip(ids, by_ids, by_text):
        for step, step_t in zip(r.steps, t.steps):
            end = step.policy_token_end
            assert end == step_t.policy_token_end
            assert len(policy_tok.decode(row[: end + 1])) >= step.char_end
            assert len(policy_tok.decode(row[:end])) < step.char_end
    plain = compute_step_rewards(scorer, [PROBLEM], COMPLETIONS[:1])
    assert all(s.policy_token_end is None for s in plain[0].steps)


def test_token_ids_ending_in_eos_map_to_the_text_they_decode_to(scorer, policy_tok):
    text = COMPLETIONS[2]
    row = policy_tok(text, add_special_tokens=False)["input_ids"] + [policy_tok.eos_token_id]
    r = compute_step_rewards(scorer, [PROBLEM], [text], policy_tokenizer=policy_tok,
                             policy_token_ids=[row])[0]
    assert r.steps[0].policy_token_end == len(row) - 2  # the last text token, not the EOS


def test_cut_steps_are_null_and_a_cut_completion_scores_zero():
    model = make_model(step_format={"max_length": 40})
    s = Scorer(model, dtype=None)
    long = "\n\n".join(["Then 2x + 3 = 11, so x = 4."] * 6)
    r = compute_step_rewards(s, [PROBLEM], [long])[0]
    assert r.probabilities[0] is not None and r.probabilities[-1] is None
    assert r.score == 0.0  # prod over a null step (NULL_STEP_SCORE)
    too_long = compute_step_rewards(s, [PROBLEM * 20], ["We add 17 and 25 to get 42."])[0]
    assert too_long.probabilities == [None] and too_long.score is None


def test_completion_without_text_gets_no_steps_and_a_null_score(scorer):
    got = compute_step_rewards(scorer, [PROBLEM] * 3, ["   \n\n  ", None, COMPLETIONS[2]])
    assert [(r.steps, r.score) for r in got[:2]] == [([], None), ([], None)]
    assert got[2].score is not None


def test_bad_input_raises_before_any_scoring(scorer, policy_tok):
    with pytest.raises(PrmkitError, match="2 prompts but 1 completions"):
        compute_step_rewards(scorer, [PROBLEM, PROBLEM], ["a"])
    with pytest.raises(PrmkitError, match=r"prompts\[0\] is list"):
        compute_step_rewards(scorer, [[{"role": "user", "content": "x"}]], ["a"])
    with pytest.raises(PrmkitError, match="need policy_tokenizer"):
        compute_step_rewards(scorer, [PROBLEM], ["a"], policy_token_ids=[[1]])
    slow = type("Slow", (), {"is_fast": False})()
    with pytest.raises(PrmkitError, match="no offset mapping"):
        compute_step_rewards(scorer, [PROBLEM], ["a"], policy_tokenizer=slow)


def test_an_item_the_prm_cannot_encode_gets_null_steps_and_the_batch_goes_on(scorer, monkeypatch):
    real = scorer.encode

    def encode(problem, steps):
        if "poison" in problem:
            raise PrmkitError("cannot encode")
        return real(problem, steps)

    monkeypatch.setattr(scorer, "encode", encode)
    got = compute_step_rewards(scorer, [PROBLEM, "poison", PROBLEM], COMPLETIONS[:3])
    assert got[1].probabilities == [None, None] and got[1].score is None
    assert got[0].probabilities == pytest.approx(
        compute_step_rewards(scorer, [PROBLEM], COMPLETIONS[:1])[0].probabilities)
    assert got[2].score is not None


def test_outcome_model_gives_one_reward_spanning_the_completion():
    s = Scorer(make_model(objective="orm"), dtype=None)
    r = compute_step_rewards(s, [PROBLEM], [COMPLETIONS[0]])[0]
    assert len(r.steps) == 1
    assert (r.steps[0].char_start, r.steps[0].char_end) == (0, len(COMPLETIONS[0]))
    assert r.score == r.steps[0].probability


class CountingTokenizer:
    """A policy tokenizer that counts the ids it decodes; with slow=True it has no stream
    decoder (`backend_tokenizer`), as a tokenizer without the Rust backend."""

    def __init__(self, tok, slow: bool):
        self.tok, self.slow, self.decoded = tok, slow, 0

    def __getattr__(self, name):
        if name == "backend_tokenizer" and self.slow:
            raise AttributeError(name)
        return getattr(self.tok, name)

    def __len__(self):
        return len(self.tok)

    def decode(self, ids, **kwargs):
        self.decoded += len(ids)
        return self.tok.decode(ids, **kwargs)


@pytest.mark.parametrize("slow", [False, True])
def test_many_short_steps_map_to_policy_tokens_in_linear_time(policy_tok, slow):
    # a policy that writes 1,500 one-line steps: step ends used to come from decoding a
    # prefix of the ids per probe (1,000 steps over 8k ids: 2.2 s; 2,000 over 16k: 8.7 s)
    text = "\n\n".join(f"x is {i % 10} so x = {i}." for i in range(1500))
    ids = policy_tok(text, add_special_tokens=False)["input_ids"]
    ends = [e for _, e in step_spans(text, "\n\n")]
    counting = PolicyTokens(CountingTokenizer(policy_tok, slow))
    got = counting.token_ends_from_ids(ids, ends)
    assert counting.tokenizer.decoded <= (6 if slow else 1) * len(ids)  # before: ~10^3 x
    exact = PolicyTokens(policy_tok)._ends_by_prefix_decoding(ids, ends[:60] + ends[-3:])
    assert got[:60] + got[-3:] == exact
    assert got[-1] == len(ids) - 1 and got == sorted(got)


def test_policy_token_ids_not_of_their_completion_raise_before_scoring(scorer, policy_tok,
                                                                      monkeypatch):
    monkeypatch.setattr(scorer, "score", lambda items: pytest.fail("scored bad input"))
    text = COMPLETIONS[2]
    good = policy_tok(text, add_special_tokens=False)["input_ids"]
    other = policy_tok(COMPLETIONS[0], add_special_tokens=False)["input_ids"]
    for row, says in [([-1, *good], r"id -1 at position 0 is not a token id"),
                      ([*good, len(policy_tok)], f"id {len(policy_tok)} at position"),
                      (other, "they decode to 'Let x be a number")]:
        with pytest.raises(PrmkitError, match=r"policy_token_ids\[1\]: " + says):
            compute_step_rewards(scorer, [PROBLEM] * 2, [text, text], policy_tokenizer=policy_tok,
                                 policy_token_ids=[good, row])
