"""IncrementalScorer: partial solutions scored on top of cached prefixes give the scores
of from-scratch scoring (Scorer.score), running only the new steps' tokens."""

from __future__ import annotations

import random

import pytest
import torch
from test_scoring import make_model as scoring_model

from prmkit.errors import PrmkitError
from prmkit.models.backbones import TINY_CORPUS, tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer
from prmkit.scoring.incremental import IncrementalScorer

FP32_TOLERANCE = 1e-5  # |P(correct) incremental - from scratch|, fp32
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)
WORDS = " ".join(TINY_CORPUS).split()
PROBLEMS = ["How many apples? Let x be a number.", "Compute 3 * 4 - 5.",
            "Problem: simplify the fraction \\frac{1}{2}."]


def make_model(step_format: StepFormat | None = None, chat: bool = False,
               **config) -> StepRewardModel:
    if step_format is not None:
        config["step_format"] = step_format
    return scoring_model(CHAT_TEMPLATE if chat else None, **config)


def random_step(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))


def search_rounds(rng: random.Random, rounds: int, width: int) -> list[list[list[str]]]:
    """Frontiers of a random search: each partial solution is kept, extended by one step,
    branched into two, or cut back to a shorter prefix (possibly empty) each round."""
    frontier = [[random_step(rng)] for _ in range(width)]
    out = []
    for _ in range(rounds):
        out.append([list(s) for s in frontier])
        grown = []
        for s in frontier:
            r = rng.random()
            if r < 0.15:
                grown.append(s)
            elif r < 0.45:
                grown += [s + [random_step(rng)], s + [random_step(rng)]]
            elif r < 0.55:
                grown.append(s[: rng.randrange(len(s) + 1)])
            else:
                grown.append(s + [random_step(rng)])
        frontier = rng.sample(grown, min(len(grown), width))
    return out


def max_diff(got: list[list[float | None]], want: list[list[float | None]]) -> float:
    assert len(got) == len(want)
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w)
        assert [p is None for p in g] == [p is None for p in w]  # same steps cut
        worst = max([worst] + [abs(a - b) for a, b in zip(g, w) if a is not None])
    return worst


def expected_tokens(model: StepRewardModel, scored: list[tuple[str, list[str]]]) -> int:
    """Tokens that must run at least once: each problem's prompt and the last segment of
    each distinct step prefix that fits in max_length."""
    enc, limit = model.encoder, model.config.step_format.max_length
    total, seen = 0, set()
    for problem, steps in scored:
        length = len(enc.prompt_ids(problem))
        if length > limit:
            continue
        if problem not in seen:
            seen.add(problem)
            total += length
        for i, step in enumerate(steps):
            length += len(enc.step_ids(step))
            if length > limit:
                break
            if (problem, tuple(steps[: i + 1])) not in seen:
                seen.add((problem, tuple(steps[: i + 1])))
                total += len(enc.step_ids(step))
    return total


def run_search(model: StepRewardModel, seed: int, problems: list[str], rounds: int = 6,
               width: int = 5, **kw) -> tuple[IncrementalScorer, float, list]:
    """Score every frontier of a random search per problem, incrementally and from
    scratch; returns the scorer, the largest difference and all scored items."""
    rng = random.Random(seed)
    scratch = Scorer(model, dtype=None)
    inc = IncrementalScorer(model, dtype=None, **kw)
    trees = {p: search_rounds(rng, rounds, width) for p in problems}
    worst, scored = 0.0, []
    for r in range(rounds):
        items = [(p, steps) for p in problems for steps in trees[p][r]]
        if len(problems) == 1:
            got = inc.score(problems[0], [steps for _, steps in items])
        else:
            got = inc.score_many(items)
        worst = max(worst, max_diff(got, scratch.score(items)))
        scored += items
    return inc, worst, scored


@pytest.mark.parametrize("config", [
    {}, {"formulation": "head"}, {"num_classes": 3, "formulation": "head"},
    {"num_classes": 3, "head": "mlp"},
], ids=["token", "head", "three-class-head", "three-class-mlp"])
def test_incremental_scores_equal_from_scratch_scores_on_random_prefix_trees(config):
    model = make_model(**config)
    scratch = Scorer(model, dtype=None)
    for seed in range(3):
        inc, worst, scored = run_search(model, seed, PROBLEMS[:1])
        assert worst <= FP32_TOLERANCE, (seed, worst)
        # only new steps ran: each prompt once, each distinct prefix's last step once
        assert inc.tokens_scored == expected_tokens(model, scored)
        all_tokens = sum(len(scratch.encode(p, s).input_ids) for p, s in scored)
        assert inc.tokens_scored < all_tokens / 2


def test_incremental_score_many_mixes_problems_in_one_batch():
    model = make_model()
    inc, worst, scored = run_search(model, 7, PROBLEMS, rounds=5, width=4)
    assert worst <= FP32_TOLERANCE
    assert inc.tokens_scored == expected_tokens(model, scored)


def test_incremental_null_steps_past_max_length_match_scorer():
    model = make_model(step_format=StepFormat(max_length=60))
    long_problem = "Compute " + "3 * 4 - 5 " * 30  # the prompt alone is too long
    inc, worst, scored = run_search(model, 3, PROBLEMS[:2], rounds=7, width=4)
    assert worst <= FP32_TOLERANCE
    assert any(None in s for s in Scorer(model, dtype=None).score(scored))  # steps were cut
    assert inc.tokens_scored == expected_tokens(model, scored)
    assert inc.score(long_problem, [["Seven."], [], ["Two.", "x"]]) == [[None], [], [None, None]]
    orm = make_model(step_format=StepFormat(max_length=60), objective="orm")
    items = scored[-12:] + [(long_problem, ["Seven."]), (PROBLEMS[0], [])]
    got = IncrementalScorer(orm, dtype=None).score_many(items)
    assert max_diff(got, Scorer(orm, dtype=None).score(items)) <= FP32_TOLERANCE
    assert [None] in got and [] in got


def test_incremental_scores_with_a_chat_template_prompt():
    model = make_model(step_format=StepFormat(use_chat_template=True), chat=True)
    prompt = model.encoder.prompt_ids(PROBLEMS[0])
    assert prompt[-3:] != tuple(make_model().encoder.prompt_ids(PROBLEMS[0]))[-3:]
    inc, worst, scored = run_search(model, 11, PROBLEMS[:1])
    assert worst <= FP32_TOLERANCE
    assert inc.tokens_scored == expected_tokens(model, scored)


def test_prefix_and_its_extension_in_one_call_run_the_prefix_once():
    model = make_model()
    inc = IncrementalScorer(model, dtype=None)
    a, b, c = "Let x be a number.", "Then 2x + 3 = 11.", "So x = 4."
    problem = PROBLEMS[0]
    got = inc.score(problem, [[a, b, c], [a], [a, b], [a, b, c]])
    assert max_diff(got, Scorer(model, dtype=None).score(
        [(problem, s) for s in ([a, b, c], [a], [a, b], [a, b, c])])) <= FP32_TOLERANCE
    enc = model.encoder
    assert inc.tokens_scored == len(enc.prompt_ids(problem)) + sum(
        len(enc.step_ids(s)) for s in (a, b, c))
    before = inc.tokens_scored
    assert inc.score(problem, [[a, b], [a]]) == [got[2], got[1]]  # scores cached: no run
    assert inc.tokens_scored == before


def test_lru_bound_on_cached_prefixes_recomputes_evicted_prefixes_alike():
    model = make_model()
    unbounded, _, _ = run_search(model, 5, PROBLEMS[:1], width=6)
    bounded, worst, scored = run_search(model, 5, PROBLEMS[:1], width=6, max_cached_prefixes=2)
    assert worst <= FP32_TOLERANCE
    assert bounded.cached_prefixes <= 2
    assert bounded.tokens_scored > unbounded.tokens_scored  # evicted prefixes ran again
    by_tokens, worst, _ = run_search(model, 5, PROBLEMS[:1], width=6, max_cached_tokens=100)
    assert worst <= FP32_TOLERANCE and by_tokens.cached_tokens <= 100
    assert by_tokens.tokens_scored > unbounded.tokens_scored
    # caches smaller than one call's needs: the call still completes (no endless re-runs)
    for size in (0, 1):
        none, worst, _ = run_search(model, 5, PROBLEMS[:2], rounds=3, width=3,
                                    max_cached_prefixes=size)
        assert worst <= FP32_TOLERANCE and none.cached_prefixes == size


def test_forget_and_reset_free_the_caches():
    model = make_model()
    inc = IncrementalScorer(model, dtype=None)
    first = inc.score_many([(PROBLEMS[0], ["Add 2."]), (PROBLEMS[1], ["Add 3.", "So 7."])])
    assert inc.cached_prefixes == 4  # two prompts and two scored prefixes
    inc.forget(PROBLEMS[0])
    assert inc.cached_prefixes == 2
    assert inc.cached_tokens == len(model.encoder.prompt_ids(PROBLEMS[1])) + len(
        model.encoder.encode(PROBLEMS[1], ["Add 3.", "So 7."]).input_ids)
    before = inc.tokens_scored
    assert max_diff(inc.score(PROBLEMS[0], [["Add 2."]]), first[:1]) <= FP32_TOLERANCE
    assert inc.tokens_scored > before  # scored again from the prompt
    inc.reset()
    assert inc.cached_prefixes == inc.cached_tokens == 0
    before = inc.tokens_scored
    assert max_diff(inc.score(PROBLEMS[1], [["Add 3.", "So 7."]]), first[1:]) <= FP32_TOLERANCE
    assert inc.tokens_scored > before


def as_logits(probs: list[list[float]]) -> torch.Tensor:
    p = torch.tensor([x for row in probs for x in row], dtype=torch.float64)
    return (p / (1 - p)).log()


def test_incremental_bf16_autocast_differs_from_scorer_far_less_than_bf16_from_fp32():
    model = make_model()
    for seed in (1, 2):
        rng = random.Random(seed)
        inc = IncrementalScorer(model, dtype="bf16")
        scratch, fp32 = Scorer(model, dtype="bf16"), Scorer(model, dtype=None)
        got, want, exact = [], [], []
        for frontier in search_rounds(rng, 6, 5):
            frontier = [s for s in frontier if s]
            items = [(PROBLEMS[0], s) for s in frontier]
            got.append(as_logits(inc.score(PROBLEMS[0], frontier)))
            want.append(as_logits(scratch.score(items)))
            exact.append(as_logits(fp32.score(items)))
        got, want, exact = torch.cat(got), torch.cat(want), torch.cat(exact)
        # The same bf16 operations on other shapes (new tokens on a cached past, a masked
        # attention): rounding differs (measured: up to ~6 bf16 roundings of the logit,
        # 0.2x bf16's own error); a wrong past or position would be far off.
        assert (got - want).abs().max() < (exact - want).abs().max() / 3
        assert (got - want).abs().mean() < (exact - want).abs().mean() / 3
    assert next(model.backbone.parameters()).dtype == torch.float32  # left as it was


def test_incremental_scorer_leaves_the_callers_model_unchanged(tmp_path):
    model = make_model().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    inc = IncrementalScorer(model, dtype="bf16", cast_weights=True)
    inc.score(PROBLEMS[0], [["Add 2."], ["Add 2.", "So 4."]])
    assert model.training and inc.model is not model
    for k, v in model.state_dict().items():
        assert v.dtype == before[k].dtype and torch.equal(v, before[k]), k
    make_model(num_classes=3, formulation="head").save_pretrained(tmp_path / "m")
    loaded = IncrementalScorer.from_pretrained(tmp_path / "m", dtype="fp32")
    steps = [["Add 2."], ["Add 2.", "So 4."]]
    want = Scorer.from_pretrained(tmp_path / "m", dtype="fp32").score(
        [(PROBLEMS[0], s) for s in steps])
    assert max_diff(loaded.score(PROBLEMS[0], steps), want) <= FP32_TOLERANCE


def test_sliding_window_backbone_shorter_than_max_length_is_refused():
    from transformers import MistralConfig, MistralForCausalLM

    _, tok = tiny_random(seed=0)
    cfg = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                        sliding_window=64)
    model = StepRewardModel.from_backbone(MistralForCausalLM(cfg), tok, RewardModelConfig())
    with pytest.raises(PrmkitError, match="sliding-window attention .64 tokens < max_length"):
        IncrementalScorer(model, dtype=None)
    model.config.step_format = StepFormat(max_length=64)
    model._encoder = None
    IncrementalScorer(model, dtype=None)  # every window covers the whole solution


def test_sibling_prefixes_share_their_parents_cache_in_memory():
    model = make_model()
    inc = IncrementalScorer(model, dtype=None)
    parent = ["Let x be a number.", "Then 2x + 3 = 11."]
    children = [parent + [s] for s in ("So x = 4.", "So x = 7.", "The answer is 42.")]
    inc.score(PROBLEMS[0], [parent])
    inc.score(PROBLEMS[0], children)
    held = {id(t): t for past in inc._pasts.values() for t in past.pieces()}
    distinct = expected_tokens(model, [(PROBLEMS[0], c) for c in children])
    assert sum(t.shape[-2] for t in held.values()) == distinct
    assert inc.cached_tokens > distinct  # the sum of the prefixes' lengths: an upper bound
