import itertools
from pathlib import Path

import numpy as np
import pytest

from prmkit.errors import DataError, PrmkitError
from prmkit.evaluation.bon import (
    ProblemPool,
    bon_curves,
    bon_exact,
    bon_pick_mean,
    default_ns,
    pass_at_n,
    simulate,
)
from prmkit.evaluation.samples import build_pools, read_samples, sample_score

FIXTURES = Path(__file__).parent / "fixtures" / "eval"


def brute_force(pool: ProblemPool, n: int, size: int, method: str = "best") -> float:
    """Expected accuracy over every n-subset of the padded pool, ties split evenly."""
    m = len(pool.scores)
    total, count = 0.0, 0
    for subset in itertools.combinations(range(size), n):
        real = [i for i in subset if i < m]
        count += 1
        if not real:
            continue
        if method == "best":
            top = max(pool.scores[real])
            total += np.mean([pool.correct[i] for i in real if pool.scores[i] == top])
        else:
            classes = pool.clusters[real]
            weight = np.ones(len(real)) if method == "majority" else pool.scores[real]
            sums = {c: weight[classes == c].sum() for c in set(classes.tolist())}
            best = max(sums.values())
            winners = [c for c, v in sums.items() if v == best]
            share = [pool.correct[pool.clusters == c].mean() for c in winners]
            total += np.mean(share)
    return total / count


def random_pools(seed: int, problems: int, max_samples: int, with_clusters: bool = False):
    rng = np.random.default_rng(seed)
    pools = []
    for i in range(problems):
        m = int(rng.integers(0 if i == 0 else 1, max_samples + 1))
        pools.append(
            ProblemPool(
                scores=rng.integers(0, 5, m) / 4.0,  # few distinct values: many ties
                correct=rng.random(m) < 0.4,
                clusters=rng.integers(0, 3, m) if with_clusters else None,
                problem_id=str(i),
            )
        )
    return pools


def test_exact_matches_brute_force_with_ties_and_padding():
    pool = ProblemPool(
        scores=np.array([0.2, 0.5, 0.5, 0.9, 0.5, 0.1]),
        correct=np.array([1, 0, 1, 0, 1, 1], dtype=bool),
    )
    for n in range(1, 9):
        assert bon_exact([pool], [n], pool_size=8)[0] == pytest.approx(brute_force(pool, n, 8))


def test_exact_equals_mean_of_paper_trials_within_standard_error():
    pools = random_pools(seed=7, problems=40, max_samples=30)
    ns = [1, 2, 4, 8, 16, 30]
    exact = bon_exact(pools, ns, pool_size=30)
    trials = 3000
    per_trial = simulate(pools, ns, pool_size=30, trials=trials, seed=11)["best"]
    stderr = per_trial.std(axis=0) / np.sqrt(trials)
    assert np.all(np.abs(per_trial.mean(axis=0) - exact) <= 3 * stderr)
    # and the two are not trivially equal: the trial noise is real
    assert np.all(stderr > 0)


def test_pick_mean_by_hand_with_a_tie_and_an_answerless_slot():
    # Slots: a (0.9, wrong), b (0.5, right), c (0.5, wrong), one answer-less slot u.
    # N=1: a pick in 3 draws of 4, uniform: score (0.9 + 0.5 + 0.5) / 3, right 1/3.
    # N=2: ab, ac, au pick a; bu b; cu c; bc ties (right 1/2): score (3 * 0.9 + 3 * 0.5) / 6,
    # right (1 + 1/2) / 6. N=4: always a.
    pool = ProblemPool([0.9, 0.5, 0.5], [False, True, False], n_slots=4)
    ns = [1, 2, 4]
    np.testing.assert_allclose(bon_pick_mean([pool], ns), [1.9 / 3, 0.7, 0.9])
    np.testing.assert_allclose(bon_pick_mean([pool], ns, [pool.correct]), [1 / 3, 0.25, 0.0])
    # without answer-less slots every draw picks: the share right is best-of-N's accuracy
    pools = random_pools(seed=5, problems=20, max_samples=12)
    full = [ProblemPool(p.scores, p.correct) for p in pools if len(p.scores) >= 4]
    np.testing.assert_allclose(bon_pick_mean(full, [1, 2, 4], [p.correct for p in full]),
                               bon_exact(full, [1, 2, 4]), atol=1e-12)


def test_pick_mean_refuses_values_that_do_not_fit_the_pool():
    pool = ProblemPool([0.9, 0.5], [False, True], problem_id="p7")
    with pytest.raises(PrmkitError, match="pool p7: 1 values for 2 samples"):
        bon_pick_mean([pool], [1], [[0.3]])


def test_padded_slots_are_never_picked_over_a_real_sample():
    # One wrong sample in a pool of 10: best-of-N is always wrong; a correct one is found
    # with probability N/10 (it must be drawn), never beaten by an empty slot.
    wrong = ProblemPool(np.array([0.1]), np.array([False]))
    right = ProblemPool(np.array([0.1]), np.array([True]))
    ns = [1, 5, 10]
    np.testing.assert_allclose(bon_exact([wrong], ns, 10), [0, 0, 0])
    np.testing.assert_allclose(bon_exact([right], ns, 10), [0.1, 0.5, 1.0])


def test_pass_at_n_closed_form():
    pool = ProblemPool(np.zeros(4), np.array([1, 0, 0, 1], dtype=bool))
    # 6 slots, 2 correct: 1 - C(4, n) / C(6, n)
    np.testing.assert_allclose(pass_at_n([pool], [1, 2, 3], 6), [1 / 3, 1 - 6 / 15, 1 - 4 / 20])


@pytest.mark.parametrize("method", ["majority", "weighted"])
def test_vote_simulation_matches_brute_force(method):
    pools = random_pools(seed=3, problems=6, max_samples=7, with_clusters=True)
    size, ns, trials = 8, [1, 3, 6], 4000
    want = [np.mean([brute_force(p, n, size, method) for p in pools]) for n in ns]
    got = simulate(pools, ns, size, trials, seed=5, methods=(method,))[method]
    stderr = got.std(axis=0) / np.sqrt(trials)
    assert np.all(np.abs(got.mean(axis=0) - want) <= 3 * stderr + 1e-12)


def test_n_larger_than_the_pool_is_an_error():
    pools = [ProblemPool(np.ones(3), np.ones(3, dtype=bool))]
    with pytest.raises(PrmkitError, match="N=4"):
        bon_exact(pools, [4], pool_size=None)
    with pytest.raises(PrmkitError, match="more than the pool size"):
        bon_exact(pools, [1], pool_size=2)


def test_default_ns_are_powers_of_two_and_the_pool_size():
    assert default_ns(1860)[-3:] == [512, 1024, 1860]
    assert default_ns(8) == [1, 2, 4, 8]


def test_fixture_pools_by_hand():
    samples = read_samples(FIXTURES / "scored_samples.jsonl")
    pools = build_pools(samples, "prm_score")
    assert [p.n_slots for p in pools] == [4, 3]  # the answer-less sample keeps its slot
    # Hand computation in tests/fixtures/eval: N=1: (2/4 + 2/3)/2, N=2: (2/3 + 1/3)/2,
    # N=3: (3/4 + 0)/2.
    np.testing.assert_allclose(bon_exact(pools, [1, 2, 3], None), [7 / 12, 0.5, 0.375])


def test_score_by_name_from_scores_object_and_step_lists():
    samples = read_samples(FIXTURES / "scored_samples.jsonl")
    assert sample_score(samples[6], "my_prm") == 0.2
    assert sample_score(samples[0], "step_probs", "prod") == pytest.approx(0.9)
    assert sample_score(samples[0], "step_probs", "min") == pytest.approx(0.9)
    with pytest.raises(DataError, match=r"scored_samples.jsonl:1: field 'nope'"):
        sample_score(samples[0], "nope")


def test_null_step_scores_and_ratings_from_prmkit_score_count_as_zero():
    from prmkit.evaluation.samples import Sample

    rec = {"problem": "p", "step_scores": [0.8, None],
           "step_rating_probs": [{"1": 0.5, "0": 0.3, "-1": 0.2}, None]}
    sample = Sample(rec, "s.jsonl", 1)
    assert sample_score(sample, "step_scores", "prod") == 0.0
    assert sample_score(sample, "step_scores", "mean") == pytest.approx(0.4)
    assert sample_score(sample, "step_rating_probs", "mean") == pytest.approx(0.4)
    bad = Sample({"problem": "p", "step_scores": [0.8, "x"]}, "s.jsonl", 3)
    with pytest.raises(DataError, match=r"s.jsonl:3: field 'step_scores'"):
        sample_score(bad, "step_scores")


def test_openai_released_record_rating_probs_reproduce_prm_score(shared_data):
    path = shared_data / "prm800k" / "raw-examples" / "scored_test_sample.json"
    sample = read_samples(path)[0]
    assert sample_score(sample, "rating_probs") == pytest.approx(sample.record["prm_score"])


def test_bad_score_names_file_and_line(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text('{"problem": "p", "answer": "1", "is_correct": true, "prm_score": 0.5}\n'
                 '{"problem": "p", "answer": "2", "is_correct": true, "prm_score": "high"}\n')
    with pytest.raises(DataError, match=r"s.jsonl:2: field 'prm_score'"):
        build_pools(read_samples(f), "prm_score")


def test_curves_trials_estimator_reports_std():
    # One problem, two samples (the better-scored one correct): best-of-1 is a fair coin per
    # trial, so the trial accuracies are 0/1 and their (population) std is sqrt(p (1 - p))
    # for the observed mean p; best-of-2 always draws both: accuracy 1 in every trial, std 0.
    pool = ProblemPool(scores=np.array([0.9, 0.1]), correct=np.array([True, False]),
                       clusters=np.array([0, 1]))
    c = bon_curves([pool], [1, 2], estimator="trials", pool_size=None, trials=400, seed=3)
    p = c.accuracy["best"][0]
    assert 0.4 < p < 0.6  # 400 fair coins
    assert c.std["best"] == pytest.approx([np.sqrt(p * (1 - p)), 0.0], abs=1e-12)
    assert c.accuracy["best"][1] == 1.0
    # majority of the 2 different answers is a tie broken at random: a coin again
    m = c.accuracy["majority"][1]
    assert 0.4 < m < 0.6 and c.std["majority"][1] == pytest.approx(np.sqrt(m * (1 - m)))
    assert c.estimator["majority"] == "trials(400)"
    exact = bon_curves([pool], [1, 2], estimator="exact", pool_size=None)
    assert exact.std["best"] == [] and exact.accuracy["best"] == pytest.approx([0.5, 1.0])
