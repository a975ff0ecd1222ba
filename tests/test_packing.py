import pytest
import torch

from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.models.attention import TreeMask
from prmkit.models.backbones import tiny_random
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.batching import collate, token_batches
from prmkit.training.packing import build_tries, pack_examples, token_counts, unpacked_rows

P1 = "Let x be a number with 2x + 3 = 11. Find x."
P2 = "How many apples? We have 17 and 25."


def _examples() -> list[StepExample]:
    s1, s2 = "Subtract 3 from both sides: 2x = 8.", "Divide both sides by 2."
    return [
        StepExample(P1, (s1, "x = 4."), (1.0, 1.0), group="a"),
        StepExample(P1, (s1, "x = 5."), (1.0, 0.0), group="a"),
        StepExample(P1, (s1, s2, "So x = 4. The answer is 4."), (1.0, 1.0, 1.0), group="a"),
        StepExample(P1, (s1, s2, "So x = 3."), (1.0, 1.0, 0.0), group="a"),
        StepExample(P1, ("First, compute 3 * 4 = 12.",), (0.3,), group="a"),  # soft
        StepExample(P2, ("We add 17 and 25 to get 42.", "The answer is 42."), (1.0, None),
                    group="b"),
        StepExample(P2, ("We add 17 and 25 to get 42.", "Yes, 42 apples."), (0.0, 1.0),
                    group="b"),  # disagrees with the example above on step 1
    ]


@pytest.fixture(scope="module")
def model():
    backbone, tok = tiny_random(seed=1, hidden_size=64, layers=2)
    return StepRewardModel.from_backbone(backbone, tok, RewardModelConfig()).eval()


def _separate_logits(model, examples):
    """logits of every (example, step) from one forward pass per example."""
    out = {}
    for ei, ex in enumerate(examples):
        enc = model.encoder.encode(ex.problem, ex.steps)
        ids = torch.tensor([enc.input_ids])
        pos = torch.tensor([[0, p] for p in enc.label_positions])
        with torch.no_grad():
            logits = model(ids, pos)
        for si, row in zip(enc.step_indices, logits):
            out[(ei, si)] = row
    return out


def _packed_logits(model, rows):
    batch = collate(rows, model.tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(batch.input_ids, batch.label_positions, batch.attention_mask,
                       batch.position_ids)
    out = {}
    k = 0
    for r in rows:
        for srcs in r.sources:
            for s in srcs:
                out[s] = logits[k]
            k += 1
    return out, batch


def _max_diff(model, examples, rows):
    ref = _separate_logits(model, examples)
    got, _ = _packed_logits(model, rows)
    labelled = {(ei, si) for ei, ex in enumerate(examples) for si, v in enumerate(ex.labels)
                if v is not None}
    assert set(got) == labelled
    return max((got[k] - ref[k]).abs().max().item() for k in got)


def test_packed_logits_equal_separate_paths(model):
    examples = _examples()
    rows = pack_examples(examples, model.encoder, row_tokens=4096)
    assert len(rows) == 1  # both tries fit in one row, block-diagonally
    assert _max_diff(model, examples, rows) < 1e-4


def test_split_tree_rows_carry_their_ancestors(model):
    examples = _examples()
    enc = model.encoder
    longest = max(len(enc.encode(e.problem, e.steps).input_ids) for e in examples)
    small = StepFormat(max_length=longest)
    model.config.step_format = small
    model._encoder = None
    try:
        rows = pack_examples(examples, model.encoder, row_tokens=longest)
        assert len(rows) > 2
        assert all(len(r) <= longest for r in rows)
        assert _max_diff(model, examples, rows) < 1e-4
        # every example label appears exactly once across the split rows
        sources = [s for r in rows for srcs in r.sources for s in srcs]
        assert len(sources) == len(set(sources)) == 14
    finally:
        model.config.step_format = StepFormat()
        model._encoder = None


def test_padded_batch_of_several_rows_matches(model):
    examples = _examples()
    rows = pack_examples(examples[:5], model.encoder, 4096) + pack_examples(
        examples[5:], model.encoder, 4096)
    assert len({len(r) for r in rows}) == 2
    ref = _separate_logits(model, examples)
    for r in rows[1:]:  # sources of the second call count from examples[5]
        r.sources = [[(ei + 5, si) for ei, si in srcs] for srcs in r.sources]
    got, batch = _packed_logits(model, rows)
    assert len(got) == 14
    assert batch.attention_mask.shape[0] == 2
    assert max((got[k] - ref[k]).abs().max().item() for k in got) < 1e-4


def test_shared_prefix_tokens_are_counted_once(model):
    examples = _examples()
    c = token_counts(examples, model.encoder, 4096)
    assert c["packed_tokens"] < c["unpacked_tokens"]
    assert c["unpacked_labels"] == 14
    # P1: prompt, s1, "x = 4.", "x = 5.", s2, two final steps, the soft step;
    # P2: prompt and two labelled steps (the unlabelled last step is not kept)
    roots = build_tries(examples, model.encoder)

    def count(n):
        return 1 + sum(count(c) for c in n.children.values())

    sizes = [count(r) for r in roots]
    assert sizes == [8, 3]


def test_disagreeing_labels_are_averaged_with_count_weight(model):
    examples = _examples()
    rows = pack_examples(examples[5:], model.encoder, 4096)
    (row,) = rows
    first = row.sources.index([(0, 0), (1, 0)])
    assert row.targets[first] == [0.5, 0.5]
    assert row.weights[first] == 2.0
    unique = pack_examples(examples[5:], model.encoder, 4096, label_weighting="unique")
    assert unique[0].weights == [1.0, 1.0]


def test_count_weighted_packed_loss_equals_unpacked_loss(model):
    examples = _examples()
    packed = collate(pack_examples(examples, model.encoder, 4096), model.tokenizer.pad_token_id)
    plain = collate(unpacked_rows(examples, model.encoder), model.tokenizer.pad_token_id)
    assert plain.attention_mask.dim() == 2 and isinstance(packed.attention_mask, TreeMask)
    with torch.no_grad():
        lp = model.loss(model(packed.input_ids, packed.label_positions, packed.attention_mask,
                              packed.position_ids), packed.targets, packed.weights)
        lu = model.loss(model(plain.input_ids, plain.label_positions, plain.attention_mask,
                              plain.position_ids), plain.targets, plain.weights)
    assert abs(lp.item() - lu.item()) < 1e-5
    assert packed.num_sources == plain.num_sources == 14


def test_three_class_and_orm_targets(model):
    ex = StepExample(P1, ("a", "b", "c"), (1.0, 1.0, 0.0), ratings=(1, 0, -1), outcome=0.0)
    (row,) = pack_examples([ex], model.encoder, 4096, num_classes=3)
    assert row.targets == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    (orm,) = pack_examples([ex], model.encoder, 4096, objective="orm")
    assert orm.targets == [[0.0, 1.0]] and orm.label_positions == [len(orm) - 1]


def test_steps_beyond_max_length_are_dropped_whole(model):
    ex = StepExample(P1, ("word " * 50, "tail"), (1.0, 1.0))
    plen = len(model.encoder.prompt_ids(P1))
    model.config.step_format = StepFormat(max_length=plen + 5)
    model._encoder = None
    try:
        assert pack_examples([ex], model.encoder, plen + 5) == []
        with pytest.raises(PrmkitError, match="row_tokens"):
            pack_examples([ex], model.encoder, plen)
    finally:
        model.config.step_format = StepFormat()
        model._encoder = None


def test_token_batches_respect_budget():
    lengths = [5, 100, 7, 50, 51, 300, 6]
    batches = token_batches(lengths, 120)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 120


# ---- attention implementations and sliding windows ------------------------------------------
def _windowed_model(kind: str, impl: str = "sdpa") -> StepRewardModel:
    """A tiny random Mistral (every layer windowed) or Qwen2 (full and windowed layers
    mixed), window 8 tokens: much shorter than the packed paths."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    _, tok = tiny_random(seed=1)
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, sliding_window=8)
    if kind == "mistral":
        config, cls = MistralConfig(**common), MistralForCausalLM
    else:
        config = Qwen2Config(**common, use_sliding_window=True, max_window_layers=1)
        cls = Qwen2ForCausalLM
        assert sorted(config.layer_types) == ["full_attention", "sliding_attention"]
    config._attn_implementation = impl
    torch.manual_seed(0)
    backbone = cls(config)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in backbone.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return StepRewardModel.from_backbone(backbone, tok, RewardModelConfig()).eval()


@pytest.mark.parametrize("kind", ["mistral", "qwen2-mixed-layers"])
def test_tree_mask_sliding_window_equals_separate_windowed_runs(kind, monkeypatch):
    """Training (tree rows) and scoring (one sequence, the model's own windowed mask)
    see the same attention: the window is applied to the tree mask exactly."""
    from prmkit.models import attention

    model = _windowed_model(kind)
    examples = _examples()
    rows = pack_examples(examples, model.encoder, 4096)
    assert max(len(r) for r in rows) > 8
    assert _max_diff(model, examples, rows) < 1e-4
    # the window matters: a full-attention tree mask (the old behaviour) differs
    no_window = {t: None for t in attention.layer_windows(model.backbone)}
    monkeypatch.setattr(attention, "layer_windows", lambda backbone: no_window)
    assert _max_diff(model, examples, rows) > 1e-3


def test_compact_tree_mask_equals_the_dense_row_mask(model):
    from prmkit.training.batching import tree_mask

    rows = pack_examples(_examples(), model.encoder, 4096)
    length = max(len(r) for r in rows) + 3
    dense = tree_mask(rows, length).dense()
    for i, r in enumerate(rows):
        n = len(r)
        assert torch.equal(dense[i, :n, :n], r.attention_mask()[:n, :n])
        assert not dense[i, n:, :n].any() and not dense[i, :n, n:].any()  # padding apart


def test_flash_attention_2_with_a_tree_mask_is_refused(model):
    import copy

    flash = copy.deepcopy(model)
    flash.backbone.config._attn_implementation = "flash_attention_2"
    batch = collate(pack_examples(_examples(), model.encoder, 4096), model.tokenizer.pad_token_id)
    with pytest.raises(PrmkitError, match="flash_attention_2 cannot take the tree"):
        flash(batch.input_ids, batch.label_positions, batch.attention_mask, batch.position_ids)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_tree_mask_flex_attention_equals_sdpa_on_cpu(kind):
    """flex attention runs on CPU (compiled by torch.compile, about a minute the first
    time): a block mask built from the compact tree mask gives sdpa's logits."""
    if kind == "llama":
        backbone, tok = tiny_random(seed=1)
        sdpa = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig()).eval()
    else:
        sdpa = _windowed_model("mistral")
    import copy

    flex = copy.deepcopy(sdpa)
    flex.backbone.set_attn_implementation("flex_attention")
    rows = pack_examples(_examples(), sdpa.encoder, 4096)
    ref, _ = _packed_logits(sdpa, rows)
    got, _ = _packed_logits(flex, rows)
    assert max((got[k] - ref[k]).abs().max().item() for k in got) < 1e-4
