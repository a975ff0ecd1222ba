"""prmkit.models.decoding: generate's tokens, with ended rows out of the batch."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from prmkit.models.decoding import decode, generate_dropping_ended, resolved_for_decode
from prmkit.rewards.trl_generate import decoding_in_generate


@pytest.fixture(scope="module")
def lm():
    """A random Llama over 24 tokens: at temperature 1 its rows end (ids 2 and 5) at many
    different lengths."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=24, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def _batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 24, (16, 9), generator=g)
    mask = torch.ones_like(ids)
    ids[:5, :3], mask[:5, :3] = 0, 0  # left padding
    return ids, mask


SETTINGS = [dict(), dict(temperature=0.7), dict(top_p=0.8, top_k=10), dict(do_sample=False)]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(s) or "plain")
def test_the_tokens_and_the_generator_after_are_generates(lm, setting):
    ids, mask = _batch()
    config = GenerationConfig(**{"do_sample": True, "max_new_tokens": 40, "pad_token_id": 0,
                                 "eos_token_id": [2, 5], "temperature": 1.0, "top_k": 0,
                                 "top_p": 1.0, **setting})
    resolved = resolved_for_decode(lm, config)
    assert resolved is not None
    for seed in range(3):
        torch.manual_seed(seed)
        want, after = lm.generate(input_ids=ids, attention_mask=mask,
                                  generation_config=config), torch.rand(4)
        torch.manual_seed(seed)
        got = generate_dropping_ended(lm, ids, mask, resolved)
        assert torch.equal(got, want)
        assert torch.equal(torch.rand(4), after)  # the same draws from the global generator


def test_a_setting_it_does_not_reproduce_is_left_to_generate(lm):
    for setting in (dict(repetition_penalty=1.2), dict(num_beams=2), dict(min_p=0.1),
                    dict(num_return_sequences=2)):
        config = GenerationConfig(do_sample=True, max_new_tokens=8, **setting)
        assert resolved_for_decode(lm, config) is None
    # unset fields take the model's and transformers' defaults, as in generate
    assert resolved_for_decode(lm, GenerationConfig(do_sample=True, max_new_tokens=8)).top_k == 50


def test_ended_rows_leave_the_batch(lm):
    ids, mask = _batch()
    sizes = []
    hook = lm.model.register_forward_pre_hook(
        lambda module, args, kwargs: sizes.append(kwargs["input_ids"].size(0)), with_kwargs=True)
    calls = []

    def pick(scores, running):  # rows 0, 4, 8, 12 write three tokens, the others end at once
        calls.append(len(running))
        return torch.where((running % 4 == 0) & (len(calls) < 4), 3, 2)

    try:
        out = decode(lm, ids, mask, 40, [2, 5], 0, pick)
    finally:
        hook.remove()
    assert sizes == [16, 4, 4, 4] and calls == [16, 4, 4, 4]  # prefill, then the 4 running
    assert out.shape == (16, 9 + 4) and (out[1:4, 10:] == 0).all()  # padding after an end
    assert (out[0::4, 9:12] == 3).all() and (out[0::4, 12] == 2).all()


def test_a_stop_callback_ends_a_row_and_generate_is_restored(lm):
    ids, mask = _batch()

    def stop_row_1(so_far, running):
        return running == 1

    out = decode(lm, ids, mask, 6, [], 0, lambda scores, running: scores.argmax(-1), stop_row_1)
    assert out.shape == (16, 15) and (out[1, 10:] == 0).all() and (out[0, 10:] != 0).any()
    with decoding_in_generate(lm) as model:
        assert "generate" in vars(model)
    assert "generate" not in vars(lm)


def test_a_lora_policy_through_its_peft_wrapper_takes_generates_tokens(lm):
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    policy = get_peft_model(copy.deepcopy(lm), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False)).eval()
    ids, mask = _batch()
    config = GenerationConfig(do_sample=True, max_new_tokens=30, pad_token_id=0, eos_token_id=2,
                              top_k=0)
    assert resolved_for_decode(policy, config) is not None  # decode runs, not generate
    torch.manual_seed(5)
    want = policy.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    torch.manual_seed(5)
    with decoding_in_generate(policy):
        got = policy.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(got, want)


def test_left_padded_rows_end_at_the_right_edge():
    from prmkit.models.decoding import left_padded

    ids, mask = left_padded([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
