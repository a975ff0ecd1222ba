import random
import statistics

import pytest

from prmkit.demo.world import (
    NodeRef,
    Propensity,
    WorldProblem,
    build_tree,
    check_solution,
    make_problems,
    sample_solutions,
)
from prmkit.demo.world.checker import STEP_RE
from prmkit.demo.world.sampler import WorldPrompts, WorldSampler, continue_solution
from prmkit.errors import PrmkitError
from prmkit.generation import Prompt, SampleRequest, SamplingParams
from prmkit.models.backbones import train_tokenizer

STEP = SamplingParams(stop=("\n",))
FULL = SamplingParams()

# Ann: 7 + 3 * 4 - 5 = 14; her trap adds Ben's 9 apples (the distractor): 23.
ANN = WorldProblem(
    id="ann",
    text="Ann has 7 apples. She buys 3 bags of 4. Ben has 9 apples. She gives away 5. "
    "How many apples does Ann have now?",
    answer="14", kind="word", level=1,
    tree=build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("-", NodeRef(1), 5)]),
    propensity=Propensity(trap=0.3),
    trap=build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("+", NodeRef(1), 9),
                     ("-", NodeRef(2), 5)]),
    trap_kind="distractor",
)


def one(sampler, prompt_text, params, seed, n=1):
    out = sampler.generate([SampleRequest("k", Prompt(text=prompt_text), n=n, seed=seed)], params)
    return out[0].completions


def step_by_step(sampler, problem, seed):
    """A whole solution sampled one step per request, as a tree search asks for it."""
    steps = []
    for k in range(30):
        prompt = sampler.prompts.render_partial(problem.text, steps).text
        c = one(sampler, prompt, STEP, seed=seed * 1000 + k)[0]
        steps.append(c.text)
        if c.extra["stop_reason"] is None:
            return steps
    raise AssertionError(f"no end after 30 steps: {steps}")


def rates(problems_and_solutions):
    checks = [(p, check_solution(p, s), s) for p, s in problems_and_solutions]
    return {
        "final": statistics.mean(c.final_correct for _, c, _ in checks),
        "process": statistics.mean(c.process_correct for _, c, _ in checks),
        "trap": statistics.mean(c.answer == p.trap_answer for p, c, _ in checks),
        "steps": statistics.mean(len(s) for _, _, s in checks),
    }


def test_full_solutions_are_the_solvers_own_samples_for_the_same_seed():
    problems = make_problems(40, seed=1, difficulty="mixed")
    sampler = WorldSampler(problems)
    for p in problems:
        got = [c.text for c in one(sampler, p.text + "\n", FULL, seed=11, n=6)]
        assert got == ["\n".join(s) for s in sample_solutions(p, 6, 11)]


def test_step_by_step_sampling_has_the_solvers_error_rates():
    # 2,000 solutions each way; the binomial std of a difference of two rates is <= 0.016.
    problems = make_problems(200, seed=5, difficulty="mixed")
    sampler = WorldSampler(problems)
    own = [(p, s) for p in problems for s in sample_solutions(p, 10, random.Random(p.id))]
    stepped = [(p, step_by_step(sampler, p, seed=i * 7919 + k))
               for i, p in enumerate(problems) for k in range(10)]
    a, b = rates(own), rates(stepped)
    for name in ("final", "process", "trap"):
        assert abs(a[name] - b[name]) < 0.04, (name, a, b)
    assert abs(a["steps"] - b["steps"]) < 0.1, (a, b)


def test_next_step_is_the_first_step_of_the_whole_continuation_with_the_same_seed():
    problems = make_problems(30, seed=2, difficulty="mixed")
    sampler = WorldSampler(problems)
    for i, p in enumerate(problems):
        prefix = sample_solutions(p, 1, i)[0][:1]
        prompt = sampler.prompts.render_partial(p.text, prefix).text
        whole = one(sampler, prompt, FULL, seed=i)[0]
        nxt = one(sampler, prompt, STEP, seed=i)[0]
        assert whole.text.split("\n")[0] == nxt.text
        assert nxt.extra["stop_reason"] == ("\n" if "\n" in whole.text else None)


def test_steps_sampled_one_by_one_make_a_valid_solution():
    problems = make_problems(30, seed=3, difficulty="mixed")
    sampler = WorldSampler(problems)
    for i, p in enumerate(problems):
        steps = step_by_step(sampler, p, seed=i)
        assert all(STEP_RE.match(s) for s in steps[:-1]), steps
        assert steps[-1].startswith("Answer: ") and len(check_solution(p, steps).labels) == len(steps)


def test_request_seed_repeats_its_samples_and_unseeded_requests_follow_the_sampler_seed():
    problems = make_problems(5, seed=0, difficulty="hard")
    prompt = problems[0].text + "\n"
    a = [c.text for c in one(WorldSampler(problems), prompt, FULL, seed=3, n=20)]
    assert a == [c.text for c in one(WorldSampler(problems, seed=9), prompt, FULL, seed=3, n=20)]
    assert a != [c.text for c in one(WorldSampler(problems), prompt, FULL, seed=4, n=20)]
    free = [[c.text for c in one(WorldSampler(problems, seed=s), prompt, FULL, None, n=20)]
            for s in (1, 1, 2)]
    assert free[0] == free[1] != free[2]


def test_prefix_with_an_error_never_becomes_right_process_and_recovers_as_the_solver_does():
    """Cut the solver's own samples after their first wrong step and continue them: the
    process stays wrong, and a right final answer comes back as often as in the solver's
    own samples with such a step (errors that cancel, a step done in the head)."""
    problems = make_problems(300, seed=4, difficulty="mixed")
    rng = random.Random(0)
    own, cont = [], []
    for p in problems:
        for s in sample_solutions(p, 10, random.Random(p.id)):
            c = check_solution(p, s)
            if c.first_error < 0 or c.first_error == len(s) - 1:
                continue
            own.append(c.final_correct)
            prefix = s[:c.first_error + 1]
            for _ in range(3):
                cc = check_solution(p, prefix + continue_solution(p, prefix, rng))
                assert not cc.process_correct and cc.first_error == c.first_error
                cont.append(cc.final_correct)
    assert len(own) > 1000
    assert abs(statistics.mean(own) - statistics.mean(cont)) < 0.03


def test_a_slipped_value_is_carried_into_the_next_step():
    sampler = WorldSampler([ANN])
    prompt = sampler.prompts.render_partial(ANN.text, ["3 * 4 = 13"]).text
    nexts = {c.text for c in one(sampler, prompt, STEP, seed=0, n=200)}
    assert "7 + 13 = 20" in nexts and "7 + 12 = 19" not in nexts


def test_steps_that_follow_the_trap_are_continued_on_the_trap():
    prefix = ["3 * 4 = 12", "7 + 12 = 19", "19 + 9 = 28"]
    answers = [continue_solution(ANN, prefix, random.Random(k))[-1] for k in range(200)]
    assert statistics.mean(a == "Answer: 23" for a in answers) > 0.8
    assert "Answer: 14" not in answers


def test_step_done_in_the_head_is_read_from_the_operand_that_uses_it():
    # "7 + 12 = 19" without "3 * 4 = 12": the product was done in the head.
    for k in range(50):
        rest = continue_solution(ANN, ["7 + 12 = 19"], random.Random(k))
        assert not any(s.startswith(("3 * 4", "4 * 3")) for s in rest), rest


def test_operands_written_in_the_other_order_are_understood():
    rest = [continue_solution(ANN, ["4 * 3 = 12"], random.Random(k)) for k in range(100)]
    assert not any("* 3" in s or "3 *" in s for r in rest for s in r)
    assert sum(r[0] == "7 + 12 = 19" for r in rest) > 80


def test_prefix_with_an_answer_gets_an_empty_completion():
    sampler = WorldSampler([ANN])
    prompt = sampler.prompts.render_partial(ANN.text, ANN.reference_solution()).text
    c = one(sampler, prompt, STEP, seed=0)[0]
    assert (c.text, c.num_tokens, c.extra["stop_reason"]) == ("", 1, None)


def test_token_counts_include_the_separator_or_the_end_of_sequence_token():
    sampler = WorldSampler([ANN])
    c = one(sampler, ANN.text + "\n", STEP, seed=0)[0]
    assert c.num_tokens == len(c.text) + 1 and c.extra["stop_reason"] == "\n"
    c = one(sampler, ANN.text + "\n", FULL, seed=0)[0]
    assert c.num_tokens == len(c.text) + 1 and c.extra["stop_reason"] is None
    tok = train_tokenizer([ANN.text + "\n" + "\n".join(ANN.reference_solution())] * 4,
                          vocab_size=300, split_digits=True)
    counted = WorldSampler([ANN], tokenizer=tok)
    c = one(counted, ANN.text + "\n", STEP, seed=0)[0]
    assert c.num_tokens == len(tok(c.text + "\n", add_special_tokens=False)["input_ids"])
    assert one(counted, ANN.text + "\n", FULL, seed=0)[0].num_tokens == (
        len(tok("\n".join(ANN.reference_solution()), add_special_tokens=False)["input_ids"]) + 1)


def test_max_tokens_cuts_the_completion_with_finish_reason_length():
    sampler = WorldSampler([ANN])
    c = one(sampler, ANN.text + "\n", SamplingParams(max_tokens=5), seed=0)[0]
    assert (c.text, c.num_tokens, c.finish_reason) == ("3 * 4", 5, "length")


def test_prompt_of_an_unknown_problem_is_an_error_naming_its_start():
    with pytest.raises(PrmkitError, match="names no problem.*'Bob has"):
        one(WorldSampler([ANN]), "Bob has 3 pears.\n", FULL, seed=0)


def test_chat_prompt_and_greedy_sampling_are_refused():
    sampler = WorldSampler([ANN])
    with pytest.raises(PrmkitError, match="text prompts"):
        sampler.generate([SampleRequest("k", Prompt(messages=({"role": "user",
                                                                "content": ANN.text},)))], FULL)
    with pytest.raises(PrmkitError, match="greedy"):
        one(sampler, ANN.text + "\n", SamplingParams(temperature=0), seed=0)


def test_world_prompts_are_the_demo_prm_format():
    prompts = WorldPrompts()
    assert prompts.render(ANN.text).text == ANN.text + "\n"
    assert prompts.render_partial(ANN.text, ["3 * 4 = 12"]).text == ANN.text + "\n3 * 4 = 12\n"


class CheckerScorer:
    """A step scorer that knows the truth: 1.0 for a step the world checker accepts."""

    def __init__(self, problems):
        self.problems = {p.text: p for p in problems}
        self.tokens_scored = 0

    def score(self, problem, steps_list):
        return [[float(v == 1) for v in check_solution(self.problems[problem], s).labels]
                for s in steps_list]


@pytest.mark.parametrize("approach", ["beam_search", "dvts"])
def test_tree_search_over_the_world_with_the_checker_as_scorer_solves_every_problem(approach):
    from prmkit.search import SearchConfig, run_search
    from prmkit.selection import AnswerClusterer

    problems = make_problems(20, seed=6, difficulty="medium")
    sampler = WorldSampler(problems)
    config = SearchConfig(approach=approach, n=8, beam_width=4, aggregation="min",
                          sampling=SamplingParams(max_tokens=256), step_separator="\n")
    results = run_search([(p.id, p.text) for p in problems], sampler, CheckerScorer(problems),
                         sampler.prompts, config, progress=False,
                         clusterer=AnswerClusterer(equivalent=str.__eq__))
    for p, r in zip(problems, results):
        steps = r.candidates[r.chosen].steps
        assert check_solution(p, steps).process_correct, (p.text, steps)
        assert r.generated_tokens >= 8 * sum(len(s) + 1 for s in steps[:1])
