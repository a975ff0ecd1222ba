"""Search methods against a scripted tree sampler and a table scorer (tests/search_fakes.py):
every expected pick below is worked out by hand from the tables."""

import pytest
from search_fakes import SEP, FakePrompts, RandomSampler, TableScorer, TreeSampler

from prmkit.errors import PrmkitError
from prmkit.generation.base import Completion
from prmkit.search import Candidate, RescoringScorer, SearchConfig, run_search
from prmkit.search.core import Expand, extend
from prmkit.selection.vote import AnswerClusterer, normalize_answer


def search(approach, sampler, scorer, problems=(("p", "P"),), **kw):
    config = SearchConfig(approach=approach, **kw)
    return run_search(list(problems), sampler, scorer, FakePrompts(), config, progress=False)


def labels(candidate: Candidate) -> list[str]:
    return [s.split(":")[0].removeprefix("step ") for s in candidate.steps]


def test_n_not_divisible_by_beam_width_is_refused_for_tree_methods():
    for approach in ("beam_search", "dvts"):
        with pytest.raises(PrmkitError, match="n divisible by beam_width: n=10, beam_width=4"):
            SearchConfig(approach=approach, n=10, beam_width=4)
    assert SearchConfig(approach="best_of_n", n=10, beam_width=4).n == 10


def test_unknown_approach_and_aggregation_are_refused():
    with pytest.raises(PrmkitError, match="unknown search approach 'mcts'"):
        SearchConfig(approach="mcts")
    with pytest.raises(PrmkitError, match="unknown aggregation 'max'"):
        SearchConfig(aggregation="max")
    with pytest.raises(PrmkitError, match="n must be a positive integer"):
        SearchConfig(n=0)


def test_config_round_trips_through_a_dict():
    config = SearchConfig(approach="dvts", n=8, beam_width=2, aggregation="min", seed=3)
    assert SearchConfig.from_dict(config.to_dict()) == config
    assert config.step_params().stop == (SEP,) and config.step_params().max_tokens == 512


# Round r's child i scores 0.9 - 0.1 i: the beam keeps the lowest child indices.
DECREASING = {lab: 0.9 - 0.1 * int(lab.split(".")[-1])
              for lab in [str(i) for i in range(8)]
              + [f"{a}.{b}" for a in range(8) for b in range(2)]
              + [f"{a}.{b}.{c}" for a in range(8) for b in range(2) for c in range(2)]}


def test_beam_search_keeps_n_over_m_per_round_and_expands_each_into_m():
    sampler = TreeSampler(depth=3)
    [res] = search("beam_search", sampler, TableScorer(DECREASING), n=8, beam_width=2)
    depth = [0 if not e["parent"] else e["parent"].count(".") + 1 for e in sampler.log]
    rounds = [[(e["parent"], e["n"]) for e, d in zip(sampler.log, depth) if d == r]
              for r in range(3)]
    assert rounds[0] == [("", 8)]
    # round 0: 0.9, 0.8, ... -> keep 0..3; round 1: 0.0=.81, 0.1=.72, 1.0=.72, 1.1=.64
    # (2.0=.63 is dropped)
    assert sorted(rounds[1]) == [("0", 2), ("1", 2), ("2", 2), ("3", 2)]
    assert sorted(rounds[2]) == [("0.0", 2), ("0.1", 2), ("1.0", 2), ("1.1", 2)]
    assert [r["sampled"] for r in res.details["rounds"]] == [8, 8, 8]
    assert [r["kept"] for r in res.details["rounds"]][:2] == [4, 4]
    assert len(res.candidates) == 8 and all(c.completed for c in res.candidates)
    assert labels(res.candidates[res.chosen]) == ["0", "0.0", "0.0.0"]  # .9 * .9 * .9


def test_beam_search_expands_only_the_open_candidates_when_fewer_than_n_over_m():
    sampler = TreeSampler(depth=3)
    ending = {"0", "1", "2", "3", "4", "5"}  # six of round 0's eight first steps end

    def step(label):
        text, ends = TreeSampler.step(sampler, label)
        return (f"step {label}: the answer is \\boxed{{1}}", True) if label in ending \
            else (text, ends)

    sampler.step = step
    [res] = search("beam_search", sampler, TableScorer(DECREASING), n=8, beam_width=2)
    # N/M = 4 would be kept, but only 6 and 7 are open: 2 x M = 4 samples, not N = 8
    assert [(e["parent"], e["n"]) for e in sampler.log[1:3]] == [("6", 2), ("7", 2)]
    assert [r["sampled"] for r in res.details["rounds"]][:2] == [8, 4]
    assert res.details["rounds"][0]["kept"] == 2


def test_beam_search_retires_completed_candidates_and_stops_at_n_completed():
    # depth 1: every first step ends the solution, so round 0 completes all N
    sampler = TreeSampler(depth=1)
    [res] = search("beam_search", sampler, TableScorer(DECREASING), n=4, beam_width=2)
    assert len(sampler.log) == 1 and len(res.candidates) == 4
    assert res.details["rounds"] == [{"sampled": 4, "kept": 0, "completed": 4}]


def test_last_round_samples_every_kept_candidate_to_its_end():
    sampler = TreeSampler(depth=5)
    [res] = search("beam_search", sampler, TableScorer(DECREASING), n=4, beam_width=2,
                   max_steps=2)
    assert [e["full"] for e in sampler.log] == [False, True, True]
    assert all(c.completed and c.end == "eos" for c in res.candidates)
    assert all(len(c.steps) == 5 for c in res.candidates)


def test_dvts_subtrees_are_independent_and_greedy():
    # subtree 0 (root children 0, 1) scores far above subtree 1 (children 2, 3): a global
    # beam would follow subtree 0 only, DVTS keeps one candidate per subtree
    table = {"0": 0.9, "1": 0.8, "2": 0.3, "3": 0.2,
             "0.0": 0.5, "0.1": 0.6, "2.0": 0.1, "2.1": 0.05,
             "0.1.0": 0.7, "0.1.1": 0.9, "2.0.0": 0.4, "2.0.1": 0.2}
    sampler = TreeSampler(depth=3)
    [res] = search("dvts", sampler, TableScorer(table), n=4, beam_width=2)
    # the pool: each subtree's M last-round children (N in all)
    assert [labels(c) for c in res.candidates] == [
        ["0", "0.1", "0.1.0"], ["0", "0.1", "0.1.1"], ["2", "2.0", "2.0.0"], ["2", "2.0", "2.0.1"]]
    assert [c.subtree for c in res.candidates] == [0, 0, 1, 1]
    # one request of M per subtree per round, each from that subtree's own best child
    assert [(e["parent"], e["n"]) for e in sampler.log] == [
        ("", 2), ("", 2), ("0", 2), ("2", 2), ("0.1", 2), ("2.0", 2)]
    assert labels(res.candidates[res.chosen]) == ["0", "0.1", "0.1.1"]  # .9 * .6 * .9


def test_dvts_subtree_that_completes_early_stops_expanding():
    sampler = TreeSampler(depth=2)
    table = {"0": 0.9, "1": 0.1, "2": 0.2, "3": 0.3}
    [res] = search("dvts", sampler, TableScorer(table), n=4, beam_width=2)
    assert len(res.candidates) == 4 and len(sampler.log) == 4
    assert res.details["rounds"][-1]["completed"] == 2


def test_dvts_pools_each_subtrees_m_last_children_so_the_vote_sees_n_answers():
    # both subtrees end in round 2 (depth 3); before, the pool held only their best children
    sampler = TreeSampler(depth=3, answers={"0.0.0": "7", "0.0.1": "7", "2.0.0": "5",
                                            "2.0.1": "5"})
    table = {"0": 0.9, "1": 0.1, "2": 0.8, "3": 0.2, "0.0": 0.5, "0.1": 0.4, "2.0": 0.6,
             "2.1": 0.5, "0.0.0": 0.9, "0.0.1": 0.8, "2.0.0": 0.9, "2.0.1": 0.9}
    [res] = search("dvts", sampler, TableScorer(table), n=4, beam_width=2)
    assert len(res.candidates) == 4 and all(c.completed for c in res.candidates)
    assert sorted(c.answer for c in res.candidates) == ["5", "5", "7", "7"]
    # best: 0 .9 .5 .9 = .405 (7) vs 2 .8 .6 .9 = .432 (5); vote 5: .432 + .432, 7: .405 + .36
    assert res.answer == "5" and res.candidates[res.details["weighted"]].answer == "5"



def _bon_pool(table, answers):
    sampler = TreeSampler(depth=2, answers=answers)
    return sampler, TableScorer(table)


def test_weighted_best_of_n_sums_scores_over_equivalent_answers():
    # answers 1/2 (.3), 0.5 (.3), 3 (.5), 7 (.1): best-of-N takes 3, the vote 1/2 + 0.5 = .6
    answers = {"0.0": "1/2", "1.0": "0.5", "2.0": "3", "3.0": "7"}
    table = {"0": 0.3, "1": 0.3, "2": 0.5, "3": 0.1, "0.0": 1.0, "1.0": 1.0, "2.0": 1.0,
             "3.0": 1.0}
    [best] = search("best_of_n", *_bon_pool(table, answers), n=4)
    [weighted] = search("weighted_best_of_n", *_bon_pool(table, answers), n=4)
    assert best.answer == "3"
    assert weighted.answer == "1/2"
    assert best.details["weighted"] == weighted.chosen == 0
    assert [c.answer for c in weighted.candidates] == ["1/2", "0.5", "3", "7"]


def test_weighted_best_of_n_with_string_equality_keeps_1_2_and_0_5_apart():
    answers = {"0.0": "1/2", "1.0": "0.5", "2.0": "3", "3.0": "7"}
    table = {"0": 0.3, "1": 0.3, "2": 0.5, "3": 0.1}
    exact = AnswerClusterer(lambda a, b: normalize_answer(a) == normalize_answer(b))
    sampler, scorer = _bon_pool(table, answers)
    [res] = run_search([("p", "P")], sampler, scorer, FakePrompts(),
                       SearchConfig("weighted_best_of_n", n=4), progress=False,
                       clusterer=exact)
    assert res.answer == "3"


@pytest.mark.parametrize("aggregation, winner", [("prod", "C"), ("min", "A"), ("last", "B")])
def test_aggregation_setting_changes_the_best_of_n_pick(aggregation, winner):
    # A .7 .7 .9 (prod .441, min .7, last .9); B .3 1 1 (prod .3, min .3, last 1);
    # C .6 1 .95 (prod .57, min .6, last .95)
    steps = {"A": (0.7, 0.7, 0.9), "B": (0.3, 1.0, 1.0), "C": (0.6, 1.0, 0.95)}
    table = {}
    for i, name in enumerate("ABC"):
        for depth, p in enumerate(steps[name]):
            table[".".join([str(i)] + ["0"] * depth)] = p
    sampler = TreeSampler(depth=3, answers={f"{i}.0.0": name for i, name in enumerate("ABC")})
    [res] = search("best_of_n", sampler, TableScorer(table), n=3, aggregation=aggregation)
    assert res.answer == winner


@pytest.mark.parametrize("aggregation, kept", [("prod", ["0.1", "1.1"]), ("min", ["0.0", "0.1"]),
                                               ("last", ["1.0", "1.1"])])
def test_aggregation_setting_changes_the_beam_search_pruning(aggregation, kept):
    # round 0 keeps 0 (.4) and 1 (.2); round 1's children, (first step, second step):
    # 0.0 (.4, .4) prod .16 min .4 last .4;  0.1 (.4, .5) prod .20 min .4 last .5
    # 1.0 (.2, .6) prod .12 min .2 last .6;  1.1 (.2, .9) prod .18 min .2 last .9
    table = {"0": 0.4, "1": 0.2, "2": 0.1, "3": 0.1,
             "0.0": 0.4, "0.1": 0.5, "1.0": 0.6, "1.1": 0.9}
    sampler = TreeSampler(depth=3)
    search("beam_search", sampler, TableScorer(table), n=4, beam_width=2,
           aggregation=aggregation)
    assert [e["parent"] for e in sampler.log][1:3] == ["0", "1"]
    assert sorted(e["parent"] for e in sampler.log[3:]) == kept


def test_token_accounting_is_exact_per_problem():
    sampler = TreeSampler(depth=3)
    scorer = TableScorer(DECREASING)
    problems = [("a", "Problem A"), ("b", "Problem B")]
    results = search("beam_search", sampler, scorer, problems, n=4, beam_width=2)
    for res in results:
        mine = [e for e in sampler.log if e["key"].startswith(res.key + "\x1f")]
        assert res.generated_tokens == sum(e["tokens"] for e in mine) > 0
        assert res.prm_tokens == scorer.per_problem[res.problem] > 0
    # each child costs 2 words ("step 0.1") or 6 with the answer; 3 rounds of 4 children
    assert results[0].generated_tokens == 4 * 2 + 4 * 2 + 4 * 6
    assert sum(r.prm_tokens for r in results) == scorer.tokens_scored


def test_same_seed_gives_the_same_result_and_another_seed_another():
    def run(seed, problems=(("a", "A"), ("b", "B"))):
        return [r.to_dict() for r in search("beam_search", RandomSampler(), TableScorer(),
                                            problems, n=8, beam_width=2, seed=seed)]

    assert run(0) == run(0)
    assert run(0) != run(1)
    # a problem's seeds do not depend on the other problems of the run
    assert run(0, (("b", "B"),))[0] == run(0)[1]


def test_dvts_same_seed_gives_the_same_result():
    def run():
        return search("dvts", RandomSampler(), TableScorer(), (("a", "A"),), n=8,
                      beam_width=2, seed=5)[0].to_dict()

    assert run() == run()


def _child(text, finish="stop", stop_reason=SEP, parent=None, tokens=3):
    config = SearchConfig(approach="beam_search", n=4, beam_width=2)
    return extend(parent, Completion(text, tokens, finish, {"stop_reason": stop_reason}), 0,
                  Expand(parent, 2), config)


def test_answer_heading_and_its_answer_become_one_final_step():
    parent = _child("step one")
    heading = _child("# Answer", parent=parent)
    assert not heading.completed and heading.steps == ["step one", "# Answer"]
    done = _child("42", stop_reason=None, parent=heading)
    assert done.completed and done.end == "answer"
    assert done.steps == ["step one", "# Answer\n\n42"]
    assert done.generated_tokens == 9 and done.path == (0, 0, 0)


def test_whole_solution_is_cut_after_its_answer_line():
    config = SearchConfig(n=1)
    text = "step a\n\n# Answer\n\n42\n\nProblem: another one\n\nstep b"
    child = extend(None, Completion(text, 9, "stop"), 0, Expand(None, 1, full=True), config)
    assert child.steps == ["step a", "# Answer\n\n42"] and child.end == "eos"


def test_step_end_reasons_eos_length_empty_repeat():
    assert _child("x", stop_reason=None).end == "eos"
    assert _child("x", finish="length").end == "length"
    assert _child("   ").end == "empty" and _child("").steps == []
    assert _child("same", parent=_child("same")).end == "repeat"
    assert _child("x").end == "" and not _child("x").completed
    # a backend that does not report stop_reason: the step is taken as ended by the separator
    config = SearchConfig(approach="beam_search", n=4, beam_width=2)
    assert not extend(None, Completion("x", 1, "stop"), 0, Expand(None, 2), config).completed


def test_empty_first_step_scores_zero_and_is_never_scored():
    scorer = TableScorer()

    class EmptySampler(TreeSampler):
        def generate(self, requests, params, progress=False):
            outs = super().generate(requests, params, progress)
            outs[0].completions[0] = Completion("", 0, "stop", {"stop_reason": None})
            return outs

    [res] = search("best_of_n", EmptySampler(depth=1), scorer, n=2)
    assert res.candidates[0].steps == [] and res.candidates[0].score == 0.0
    assert all([] not in call for call in scorer.calls)
    assert res.chosen == 1


def test_sampler_returning_too_few_completions_is_an_error():
    class Short(TreeSampler):
        def generate(self, requests, params, progress=False):
            outs = super().generate(requests, params, progress)
            outs[0].completions.pop()
            return outs

    with pytest.raises(PrmkitError, match="asked the sampler for 4 completions, got 3"):
        search("best_of_n", Short(), TableScorer(), n=4)


def test_duplicate_problem_keys_are_refused():
    with pytest.raises(PrmkitError, match="problem key 'a' appears more than once"):
        search("best_of_n", TreeSampler(), TableScorer(), (("a", "A"), ("a", "B")), n=2)


def test_result_round_trips_through_its_json_dict():
    [res] = search("dvts", TreeSampler(depth=2), TableScorer(DECREASING), n=4, beam_width=2)
    again = type(res).from_dict(res.to_dict())
    assert again == res and again.answer == res.answer


def test_rescoring_scorer_counts_every_token_it_sends():
    class Plain:
        def encode(self, problem, steps):
            return type("E", (), {"input_ids": [0] * (1 + len(steps))})()

        def score(self, items):
            return [[0.5] * len(s) for _, s in items]

    scorer = RescoringScorer(Plain())
    assert scorer.score("p", [["a"], ["a", "b"]]) == [[0.5], [0.5, 0.5]]
    assert scorer.tokens_scored == 2 + 3


@pytest.mark.parametrize("approach, what", [("beam_search", "beam"), ("dvts", "subtree")])
def test_n_equal_to_beam_width_warns_of_a_single_beam(approach, what, caplog):
    with caplog.at_level("WARNING", logger="prmkit.search"):
        search(approach, TreeSampler(depth=2), TableScorer(), n=4, beam_width=4)
    assert f"keeps a single {what} (n / beam_width = 1)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="prmkit.search"):
        search(approach, TreeSampler(depth=2), TableScorer(), n=4, beam_width=2)
    assert "single" not in caplog.text


def test_generate_and_search_share_one_default_per_sampling_setting():
    from prmkit.active.loop_config import GeneratorSection, LabelSection
    from prmkit.cli import build_parser
    from prmkit.generation.base import SamplingParams

    defaults = SamplingParams()
    assert SearchConfig().sampling == defaults
    parser = build_parser()
    for command in (["generate", "--model", "m", "--problems", "p", "-o", "o"],
                    ["search", "--model", "m", "--prm", "r", "--problems", "p", "-o", "o"]):
        args = parser.parse_args(command)
        assert (args.temperature, args.top_p, args.max_tokens) == (
            defaults.temperature, defaults.top_p, defaults.max_tokens), command
    gen = GeneratorSection()
    assert (gen.temperature, gen.top_p, gen.max_tokens) == (
        defaults.temperature, defaults.top_p, defaults.max_tokens)
    assert LabelSection().rollout_temperature == defaults.temperature
