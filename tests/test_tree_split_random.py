"""Random tries, split into rows by `split_tree` and packed: every token's hidden state and
every label's logits must be those of running its root-to-node sequence alone."""

from __future__ import annotations

import random

import pytest
import torch

from prmkit.data.records import StepExample
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import SegmentEncoder, StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.batching import collate
from prmkit.training.packing import build_tries, pack_units, split_tree

SEEDS = list(range(20))
WORDS = ["x", "=", "4", "add", "17", "and", "25", "so", "the", "answer", "is", "42", "+",
         "-", "2x", "3", "11", "divide", "by", "2", "then", "next", "12"]
# fp32, other sequence layouts: the same sums in another order (measured up to 1.9e-6)
ATOL = 1e-5


@pytest.fixture(scope="module")
def model() -> StepRewardModel:
    backbone, tok = tiny_random(seed=3)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig())
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # std 0.1: hidden states and logits of order 1, not 1e-2
        for name, p in model.backbone.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def random_examples(rng: random.Random) -> list[StepExample]:
    """1-2 problems; each a random trie of steps (depth <= 4, up to 3 children, repeated
    step texts); examples are root-to-node paths with random hard, soft or missing labels."""
    examples = []
    for p in range(rng.randint(1, 2)):
        problem = f"Problem {p}: " + " ".join(rng.choices(WORDS, k=rng.randint(1, 8)))
        pool = [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(5)]
        frontier = [()]
        paths = []
        while frontier:
            path = frontier.pop()
            kids = rng.randint(0 if path else 1, 3 if len(path) < 2 else 2) if len(path) < 4 else 0
            for step in rng.sample(pool, kids):
                frontier.append((*path, step))
            if path and (not kids or rng.random() < 0.3):
                paths.append(path)
        for path in paths:
            for _ in range(rng.choice([1, 1, 2])):  # some paths labelled twice
                labels = tuple(rng.choice([1.0, 0.0, 0.5, 0.25, None]) for _ in path)
                if any(v is not None for v in labels):
                    examples.append(StepExample(problem, path, labels))
    rng.shuffle(examples)
    return examples


def random_case(model, seed: int) -> tuple[list[StepExample], SegmentEncoder, int]:
    """Examples, an encoder whose max_length is the longest example, and a row size from
    that length (the longest path alone: many pieces) up to three times it."""
    rng = random.Random(seed)
    examples = random_examples(rng)
    unlimited = SegmentEncoder(model.tokenizer, StepFormat(max_length=10_000))
    longest = max(len(unlimited.encode(e.problem, e.steps).input_ids) for e in examples)
    encoder = SegmentEncoder(model.tokenizer, StepFormat(max_length=longest))
    return examples, encoder, rng.randint(longest, 3 * longest)


@pytest.mark.parametrize("seed", SEEDS)
def test_split_tree_rows_equal_separate_runs(model, seed):
    examples, encoder, row_tokens = random_case(model, seed)
    roots = build_tries(examples, encoder)
    units = [u for r in roots for u in split_tree(r, row_tokens)]
    assert all(u.num_tokens <= row_tokens for u in units)
    rows = pack_units(units, row_tokens)

    # every labelled (example, step) appears exactly once, with its target averaged
    # over the examples that label the same node
    sources = [s for r in rows for srcs in r.sources for s in srcs]
    expected = {(ei, si) for ei, e in enumerate(examples) for si, v in enumerate(e.labels)
                if v is not None}
    assert sorted(sources) == sorted(expected)

    batch = collate(rows, model.tokenizer.pad_token_id)
    with torch.no_grad():
        hidden = model.hidden_states(batch.input_ids, batch.attention_mask, batch.position_ids)
        packed_logits = model.classify(hidden[batch.label_positions[:, 0],
                                              batch.label_positions[:, 1]])
        leaf_runs: dict = {}
        k = 0
        for b, row in enumerate(rows):
            segments = _segments(row)
            # each segment's sequence: its ancestors' tokens, then its own
            prefix: list[tuple[int, ...]] = []
            for parent, seg_ids in segments:
                prefix.append((prefix[parent] if parent >= 0 else ()) + seg_ids)
            # hidden states of each sequence run alone: a root-to-leaf run per leaf; an inner
            # segment reads the first positions of a descendant's run (causal attention)
            alone: dict[int, torch.Tensor] = {}
            for i in reversed(range(len(segments))):  # children follow their parent
                child = next((j for j, (p, _) in enumerate(segments) if p == i), None)
                if child is not None:
                    alone[i] = alone[child][: len(prefix[i])]
                else:
                    if prefix[i] not in leaf_runs:
                        leaf_runs[prefix[i]] = model.hidden_states(torch.tensor([prefix[i]]))[0]
                    alone[i] = leaf_runs[prefix[i]]
            for i, (_, seg_ids) in enumerate(segments):
                start = len(prefix[i]) - len(seg_ids)
                tokens = _token_index(row, i)
                torch.testing.assert_close(hidden[b, tokens], alone[i][start:], atol=ATOL, rtol=0)
                assert [row.position_ids[t] for t in tokens] == list(range(start, len(prefix[i])))
            for pos, target, srcs in zip(row.label_positions, row.targets, row.sources):
                seg = row.token_segment[pos]
                logits_alone = model.classify(alone[seg][-1:])[0]
                torch.testing.assert_close(packed_logits[k], logits_alone, atol=ATOL, rtol=0)
                means = [sum(_target(examples[ei], si)[c] for ei, si in srcs) / len(srcs)
                         for c in range(2)]
                assert target == pytest.approx(means)
                # the label sits on the last token of the node of exactly that step
                for ei, si in srcs:
                    assert prefix[seg] == tuple(encoder.encode(
                        examples[ei].problem, examples[ei].steps[: si + 1]).input_ids)
                k += 1
    assert k == len(packed_logits)


def test_random_cases_exercise_splitting(model):
    """The seeds above cover trees cut into several units, not only whole trees."""
    split = 0
    for seed in SEEDS:
        examples, encoder, row_tokens = random_case(model, seed)
        split += any(len(split_tree(r, row_tokens)) > 1 for r in build_tries(examples, encoder))
    assert split >= len(SEEDS) // 3


def _segments(row):
    """(parent index, token ids) of each segment of a packed row, in row order."""
    out = []
    for i, parent in enumerate(row.segment_parent):
        ids = tuple(t for t, s in zip(row.input_ids, row.token_segment) if s == i)
        out.append((parent, ids))
    return out


def _token_index(row, segment: int) -> list[int]:
    return [t for t, s in enumerate(row.token_segment) if s == segment]


def _target(ex: StepExample, si: int) -> list[float]:
    v = ex.labels[si]
    return [v, 1.0 - v]
