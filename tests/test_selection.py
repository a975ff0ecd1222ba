import numpy as np
import pytest

from prmkit.selection import (
    AnswerClusterer,
    best_of_n,
    cluster_answers,
    majority_vote,
    normalize_answer,
    weighted_vote,
)


def numeric_equal(a: str, b: str) -> bool:
    """A stand-in grader: numbers compare by value, else string equality."""
    try:
        return abs(float(eval(a, {})) - float(eval(b, {}))) < 1e-9
    except Exception:
        return a == b


def test_normalize_answer_fast_path():
    assert normalize_answer(" \\boxed{\\dfrac{1}{2}} ") == normalize_answer("$\\frac{1}{2}$")


def test_clusters_use_grader_equivalence_not_string_equality():
    answers = ["0.5", "1/2", "2/4", "3", " 3 ", None, "x"]
    assert cluster_answers(answers, numeric_equal) == [0, 0, 0, 1, 1, -1, 2]


def test_cache_grades_each_distinct_pair_once():
    calls = []

    def grader(a, b):
        calls.append((a, b))
        return numeric_equal(a, b)

    c = AnswerClusterer(grader)
    c.cluster(["1/2", "0.5", "7"] * 20)
    first = len(calls)
    assert first == c.grader_calls == 2  # (0.5, 1/2) and (7, 1/2), once each
    c.cluster(["1/2", "0.5", "7"] * 5)
    assert len(calls) == first  # served from the cache
    c.cluster(["0.5", "1/2"])  # reversed pair: reused, equivalence is symmetric
    assert len(calls) == first


def test_best_of_n_ties_and_nan():
    assert best_of_n([0.1, 0.9, 0.9]) == 1
    assert best_of_n([float("nan"), 0.2]) == 1
    picks = {best_of_n([0.9, 0.9, 0.1], np.random.default_rng(s)) for s in range(30)}
    assert picks == {0, 1}
    with pytest.raises(ValueError):
        best_of_n([])


def test_majority_vote_counts_equivalent_answers_together():
    answers = ["3", "1/2", "0.5", "3.0", "2/4", None]
    # string majority would be "3" (once as 3 and once as 3.0 -> 2), grader majority is 1/2 (3)
    assert answers[majority_vote(answers, clusterer=AnswerClusterer(numeric_equal))] == "1/2"


def test_weighted_vote_sums_scores_per_answer_class():
    answers = ["1", "2", "2", "1.0"]
    scores = [0.9, 0.5, 0.5, 0.2]
    i = weighted_vote(answers, scores, clusterer=AnswerClusterer(numeric_equal))
    assert i == 0  # class "1": 1.1 > class "2": 1.0; representative = best-scored member
    assert majority_vote(["1", "2", "2"], clusterer=AnswerClusterer(numeric_equal)) == 1
    with pytest.raises(ValueError):
        weighted_vote(answers, [0.1, -1, 0.2, 0.3])


def test_default_clustering_uses_prmkit_grading():
    assert cluster_answers(["1/2", "0.5", "\\frac{1}{2}", "3", None]) == [0, 0, 0, 1, -1]


# ---- generated samples without a stated final answer have no answer and do not vote ----

_UNFINISHED = [["Let $x = 3$.", "It"], ["We try again.", "So"], ["Hmm.", "So"]]
_FINISHED = [["$2 + 5 = 7$.", "# Answer\n\n7"], ["Add them.", "The answer is $7$."]]


def test_junk_last_lines_of_unfinished_samples_do_not_win_the_majority_vote():
    from prmkit.grading import extract_answer

    answers = [extract_answer(steps) for steps in _UNFINISHED + _FINISHED]
    assert answers == [None, None, None, "7", "7"]
    assert majority_vote(answers) == 3
    # weights favouring the unfinished samples change nothing: they have no vote
    assert weighted_vote(answers, [0.9, 0.9, 0.9, 0.1, 0.2]) == 4


def test_generated_sample_files_store_no_answer_for_unfinished_samples(tmp_path):
    import json

    from prmkit.generation import Completion, RequestOutput, Sampler, SamplingParams
    from prmkit.generation.files import generate_file

    texts = ["Let $x = 3$.\n\nIt", "Add.\n\n# Answer\n\n7", "So.\n\n$\\boxed{7}$"]

    class Unfinished(Sampler):
        backend, model = "fake", "fake-model"

        def generate(self, requests, params, progress=False):
            return [RequestOutput(r.key, [Completion(texts[i % 3], 5, "stop")])
                    for i, r in enumerate(requests)]

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"problem": "What is 3 + 4?", "answer": "7",
                                    "unique_id": "p1"}) + "\n")
    out = tmp_path / "samples.jsonl"
    generate_file(Unfinished(), problems, out, n=3, params=SamplingParams(max_tokens=16),
                  seed=0, progress=False, chunk_size=3)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["answer"], r["is_correct"]) for r in rows] == [
        (None, False), ("7", True), ("7", True)]
    assert majority_vote([r["answer"] for r in rows]) == 1


def test_search_candidates_ending_without_a_final_answer_do_not_vote():
    from search_fakes import FakePrompts, TableScorer, TreeSampler

    from prmkit.search import SearchConfig, run_search

    sampler = TreeSampler(depth=2, answers={"3.0": "7"})

    def step(label):  # candidates 0-2 stop on a line of prose, 3 states its answer
        text, ends = TreeSampler.step(sampler, label)
        return (f"step {label}: So", True) if ends and label[0] != "3" else (text, ends)

    sampler.step = step
    table = {"0": 0.9, "1": 0.9, "2": 0.9, "3": 0.2}
    [res] = run_search([("p", "P")], sampler, TableScorer(table), FakePrompts(),
                       SearchConfig("weighted_best_of_n", n=4), progress=False)
    assert all(c.completed for c in res.candidates)
    assert [c.answer for c in res.candidates] == [None, None, None, "7"]
    assert res.answer == "7"
