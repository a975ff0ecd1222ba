"""The Hugging Face `generate` backend: seeds, batching, stops, EOS, chat prompts, errors."""

from __future__ import annotations

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.generation import Prompt, SampleRequest, SamplingParams, get_sampler
from prmkit.generation.hf_backend import HFSampler, RowSampler, StopOnText
from prmkit.models.backbones import tiny_random

CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant:{% endif %}")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-lm")
    model, tok = tiny_random(seed=0)
    tok.chat_template = CHAT_TEMPLATE
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sampler(tiny_dir):
    with HFSampler(str(tiny_dir), batch_size=8) as s:
        yield s


def req(key, text, n=1, seed=0):
    return SampleRequest(key, Prompt(text=text), n=n, seed=seed)


SAMPLE = SamplingParams(temperature=1.0, max_tokens=12)


def texts(output):
    return [(c.text, c.num_tokens, c.finish_reason) for c in output.completions]


def test_same_request_and_seed_give_the_same_samples_whatever_the_batch(sampler):
    a = req("a", "What is 2+3?", n=3, seed=7)
    alone = sampler.generate([a], SAMPLE)[0]
    sampler.batch_size = 1
    try:
        one_per_batch = sampler.generate([a], SAMPLE)[0]
    finally:
        sampler.batch_size = 8
    others = [req("b", "Let x be a number. Then 2x + 3 = 11, so", n=2, seed=1),
              req("c", "First", n=2, seed=2)]
    mixed = sampler.generate([others[0], a, others[1]], SAMPLE)[1]
    more = sampler.generate([req("a", "What is 2+3?", n=5, seed=7)], SAMPLE)[0]
    assert texts(alone) == texts(one_per_batch) == texts(mixed) == texts(more)[:3]
    assert len({c.text for c in alone.completions}) == 3  # the samples of a request differ
    other_seed = sampler.generate([req("a", "What is 2+3?", n=3, seed=8)], SAMPLE)[0]
    assert texts(other_seed) != texts(alone)


def test_outputs_come_back_in_input_order(sampler, tiny_dir):
    prompts = ["Let x be a number. Then 2x + 3 = 11, so x = 4. Next", "Two", "The answer is"]
    outs = sampler.generate([req(str(i), p, seed=i) for i, p in enumerate(prompts)], SAMPLE)
    assert [o.key for o in outs] == ["0", "1", "2"]
    tok = sampler.tokenizer
    assert [o.prompt_tokens for o in outs] == [len(tok(p)["input_ids"]) for p in prompts]
    for i, p in enumerate(prompts):
        assert texts(sampler.generate([req(str(i), p, seed=i)], SAMPLE)[0]) == texts(outs[i])


def test_temperature_zero_is_plain_greedy_generate(sampler):
    prompt = "Let x be a number."
    out = sampler.generate([req("g", prompt, n=2, seed=3)],
                           SamplingParams(temperature=0, max_tokens=8))[0]
    ids = sampler.tokenizer(prompt, return_tensors="pt")["input_ids"]
    ref = sampler.lm.generate(ids, max_new_tokens=8, do_sample=False,
                              pad_token_id=sampler.pad_id, eos_token_id=sampler.eos_ids)
    expected = sampler.tokenizer.decode(ref[0, ids.shape[1]:], skip_special_tokens=True)
    assert [c.text for c in out.completions] == [expected, expected]
    # top-p that keeps only the most likely token is greedy too
    nucleus = sampler.generate([req("g", prompt, seed=3)],
                               SamplingParams(temperature=1.0, top_p=1e-9, max_tokens=8))[0]
    assert nucleus.completions[0].text == expected


def test_row_sampler_draws_from_the_tempered_distribution():
    scores = torch.tensor([[2.0, 1.0, 0.0]]).repeat(3000, 1)
    gens = [torch.Generator().manual_seed(i) for i in range(3000)]
    picked = RowSampler(gens, temperature=2.0, top_p=1.0)(scores.clone(), torch.arange(3000))
    freq = torch.bincount(picked, minlength=3).double() / 3000
    expected = torch.softmax(torch.tensor([2.0, 1.0, 0.0], dtype=torch.double) / 2.0, -1)
    assert torch.allclose(freq, expected, atol=0.03)
    # top-p 0.5 keeps the smallest set of most likely tokens reaching 0.5: token 0 (0.51)
    kept = RowSampler(gens[:50], 2.0, 0.5)(scores[:50].clone(), torch.arange(50))
    assert kept.eq(0).all()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.3, 0.9)])
def test_row_sampler_picks_the_tokens_torch_multinomial_picks(temperature, top_p):
    torch.manual_seed(0)
    rows = 64
    mine = [torch.Generator().manual_seed(1000 + i) for i in range(rows)]
    ref = [torch.Generator().manual_seed(1000 + i) for i in range(rows)]
    sampler = RowSampler(mine, temperature, top_p)
    for _ in range(12):  # each row's generator carries on from step to step
        scores = torch.randn(rows, 300) * 4
        picked = sampler(scores.clone(), torch.arange(rows))
        probs = sampler.probabilities(scores)
        expected = torch.stack([torch.multinomial(p, 1, generator=g)[0]
                                for p, g in zip(probs, ref)])
        assert torch.equal(picked, expected)


def test_row_sampler_refuses_scores_that_are_not_numbers():
    scores = torch.zeros(2, 5)
    scores[1, 2] = float("nan")
    with pytest.raises(PrmkitError, match="not finite"):
        RowSampler([torch.Generator(), torch.Generator()], 1.0, 1.0)(scores, torch.arange(2))


def test_stop_string_cuts_the_completion_and_counts_tokens_up_to_it(sampler):
    free = sampler.generate([req("s", "What is", seed=11)],
                            SamplingParams(temperature=1.0, max_tokens=16))[0].completions[0]
    assert free.finish_reason == "length" and free.num_tokens == 16
    assert free.extra["stop_reason"] is None
    stop = free.text[6:8]
    cut = free.text.find(stop)
    out = sampler.generate([req("s", "What is", seed=11)],
                           SamplingParams(temperature=1.0, max_tokens=16, stop=(stop,)))[0]
    got = out.completions[0]
    assert got.text == free.text[:cut] and got.finish_reason == "stop"
    assert got.extra["stop_reason"] == stop  # step search tells a step end from an EOS
    assert got.extra["token_ids"] == free.extra["token_ids"][:got.num_tokens]
    # counted: the tokens up to the one that completes the stop string, not what follows
    def first(k):
        params = SamplingParams(temperature=1.0, max_tokens=k)
        return sampler.generate([req("s", "What is", seed=11)], params)[0].completions[0].text

    assert stop in first(got.num_tokens) and stop not in first(got.num_tokens - 1)


def test_stop_string_split_across_the_prompt_boundary_does_not_stop(sampler):
    tok = sampler.tokenizer
    prompt = tok("Step one.\n", add_special_tokens=False)["input_ids"]
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    crit = StopOnText(tok, ("\n\n",), prompt_length=len(prompt), rows=1)
    assert not crit.check(torch.tensor([prompt + newline]), [0]).any()
    more = tok("Two.\n\n", add_special_tokens=False)["input_ids"]
    assert crit.check(torch.tensor([prompt + newline + more]), [0]).all()
    assert crit.stopped_at == [len(newline + more)]


def test_eos_ends_the_completion_and_counts_as_a_generated_token(tiny_dir):
    with HFSampler(str(tiny_dir)) as s:
        params = SamplingParams(temperature=1.0, max_tokens=10)
        free = s.generate([req("e", "The answer", seed=4)], params)[0].completions[0]
        ids = free.extra["token_ids"]
        assert len(ids) == free.num_tokens == 10
        eos = ids[3]  # make a token the model writes the end of sequence
        k = ids.index(eos)
        s.eos_ids = [eos]
        got = s.generate([req("e", "The answer", seed=4)], params)[0].completions[0]
    assert got.finish_reason == "stop" and got.num_tokens == k + 1
    assert got.extra["stop_reason"] is None
    assert got.text == s.tokenizer.decode(ids[:k])


def test_chat_prompt_goes_through_the_chat_template(sampler):
    messages = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"})
    chat = SampleRequest("c", Prompt(messages=messages), seed=5)
    rendered = "<s>system: Be brief.\n<s>user: 2+3?\n<s>assistant:"
    assert sampler.prompt_ids(chat) == sampler.tokenizer(rendered)["input_ids"]
    as_chat = sampler.generate([chat], SAMPLE)[0]
    as_text = sampler.generate([req("c", rendered, seed=5)], SAMPLE)[0]
    assert texts(as_chat) == texts(as_text)


def test_chat_prompt_without_a_chat_template_is_a_clear_error(tmp_path):
    model, tok = tiny_random(seed=0)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with HFSampler(str(tmp_path)) as s, pytest.raises(PrmkitError, match="no chat template"):
        s.generate([SampleRequest("c", Prompt(messages=({"role": "user", "content": "x"},)))],
                   SAMPLE)


def test_missing_or_broken_model_folder_names_the_path(tmp_path):
    with pytest.raises(PrmkitError, match="nowhere.*not found"):
        get_sampler("hf", str(tmp_path / "nowhere"))
    with pytest.raises(PrmkitError, match=f"{tmp_path}.*no config.json"):
        get_sampler("hf", str(tmp_path))
    model, tok = tiny_random(seed=0)
    model.config.save_pretrained(tmp_path)  # a config but no weights or tokenizer
    with pytest.raises(PrmkitError, match=f"cannot load .*{tmp_path}"):
        get_sampler("hf", str(tmp_path))


def test_progress_bar_shows_tokens_per_second(sampler, capsys):
    sampler.generate([req("p", "Two", n=2)], SAMPLE, progress=True)
    assert "tok/s" in capsys.readouterr().err


def test_smollm2_greedy_chat_completion_honours_the_stop_string(smollm2_dir):
    question = ({"role": "user", "content": "What is 2+3? Explain in two short sentences."},)
    with HFSampler(str(smollm2_dir), dtype="fp32") as s:
        free = s.generate([SampleRequest("q", Prompt(messages=question))],
                          SamplingParams(temperature=0, max_tokens=12))[0].completions[0]
        assert "5" in free.text and "." in free.text
        out = s.generate([SampleRequest("q", Prompt(messages=question))],
                         SamplingParams(temperature=0, max_tokens=12, stop=(".",)))[0]
    got = out.completions[0]
    assert got.finish_reason == "stop"
    assert got.text == free.text[:free.text.index(".")]
    assert got.num_tokens < free.num_tokens


def test_consecutive_request_seeds_do_not_repeat_samples(sampler):
    # with seed + index, sample 1 of seed 0 would be sample 0 of seed 1
    a = texts(sampler.generate([req("k", "Two", n=2, seed=0)], SAMPLE)[0])
    b = texts(sampler.generate([req("k", "Two", n=2, seed=1)], SAMPLE)[0])
    assert not set(a) & set(b)


class Steps:
    """A caller's progress bar that records each step."""

    def __init__(self):
        self.steps = []

    def update(self, n=1):
        self.steps.append(n)

    def set_postfix_str(self, s="", refresh=True):
        pass


def test_rows_that_end_early_move_the_bar_while_their_batch_is_decoded():
    import torch

    from prmkit.generation.hf_backend import RowsEnded, StopOnText

    class Tok:
        def batch_decode(self, ids, skip_special_tokens=False):
            return ["".join(chr(96 + t) for t in row) for row in ids]

    bar = Steps()
    stop = StopOnText(Tok(), ["cc"], prompt_length=1, rows=3)
    ended = RowsEnded([0], stop, bar)
    step = [torch.tensor([[1, 2], [1, 0], [1, 3]]), torch.tensor([[1, 2, 2], [1, 0, 0], [1, 3, 3]])]
    for ids in step:
        stop.check(ids, [0, 1, 2])
        ended.seen(ids, [0, 1, 2])
    assert bar.steps == [1, 1]  # row 1's end of sequence, then row 2's stop string "cc"
    ended.finish()  # row 0 ran to the length limit
    assert bar.steps == [1, 1, 1]


def test_a_callers_bar_moves_by_one_per_sample_and_requests_stream_per_batch(tiny_dir):
    bar = Steps()
    with HFSampler(str(tiny_dir), batch_size=1) as s:
        stream = s.iter_generate([req("a", "One", n=2), req("b", "Two")], SAMPLE, progress=bar)
        first = next(stream)
        assert sum(bar.steps) < 3  # a request is yielded before the last batch ran
        rest = list(stream)
    assert sorted(i for i, _ in [first, *rest]) == [0, 1]
    assert bar.steps == [1, 1, 1]


def test_chat_search_rounds_extend_round_zeros_prompt_without_a_second_bos(tiny_dir):
    from tokenizers import processors

    from prmkit.generation.prompts import PromptFormat

    with HFSampler(str(tiny_dir)) as s:
        tok = s.tokenizer
        bos = tok.bos_token_id  # a Llama-style tokenizer: BOS before every encoded text
        tok._tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", bos)])
        assert tok("x")["input_ids"][0] == bos
        fmt = PromptFormat(style="chat")
        round0 = s.prompt_ids(SampleRequest("r0", fmt.render("What is 2+3?")))
        round1 = s.prompt_ids(SampleRequest("r1", fmt.render_partial("What is 2+3?",
                                                                     ["2+3 = 5."])))
        template = tok.apply_chat_template(list(fmt.render("What is 2+3?").messages),
                                           tokenize=False, add_generation_prompt=True)
        assert round1[:len(round0)] == round0
        assert round0.count(bos) == round1.count(bos) == template.count("<s>")
        assert tok.decode(round1) == template + "2+3 = 5.\n\n"
        assert s.generate([SampleRequest("r1", fmt.render_partial("What is 2+3?",
                                                                  ["2+3 = 5."]))], SAMPLE)
