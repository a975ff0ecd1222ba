"""The exact best-of-N estimator gives exact zeros and ones where the result is exact."""

import json

import numpy as np
import pytest

from prmkit.cli import main
from prmkit.evaluation.bon import ProblemPool, bon_exact, pass_at_n

NS = [1, 2, 4, 8, 16, 32, 64]


def test_pass_at_n_of_a_pool_without_a_correct_sample_is_exactly_zero_not_1e_16():
    # 76 slots, N=64: the log-factorial ratio came out as 1 - 1.4e-14 here
    wrong = ProblemPool(scores=np.linspace(0, 1, 76), correct=[False] * 76)
    assert pass_at_n([wrong], NS).tolist() == [0.0] * len(NS)
    assert bon_exact([wrong], NS).tolist() == [0.0] * len(NS)
    right = ProblemPool(scores=np.linspace(0, 1, 76), correct=[True] * 76)
    assert pass_at_n([right], NS).tolist() == [1.0] * len(NS)
    assert bon_exact([right], NS).tolist() == [1.0] * len(NS)
    assert pass_at_n([wrong, right], NS).tolist() == [0.5] * len(NS)


def test_exact_results_stay_within_0_and_1_and_padding_keeps_its_probability():
    rng = np.random.default_rng(0)
    pools = [ProblemPool(scores=rng.random(m), correct=rng.random(m) < 0.3)
             for m in (5, 40, 300, 1000)]
    for size in (None, 1860):
        ns = [1, 2, 5] if size is None else [1, 16, 256, 1860]
        for curve in (bon_exact(pools, ns, size), pass_at_n(pools, ns, size)):
            assert ((curve >= 0) & (curve <= 1)).all()
    # 9 correct samples padded to 1,860 slots: best-of-1 draws a real one w.p. 9/1860
    nine = ProblemPool(scores=rng.random(9), correct=[True] * 9)
    assert bon_exact([nine], [1], 1860)[0] == pytest.approx(9 / 1860, rel=1e-12)
    assert pass_at_n([nine], [1860], 1860).tolist() == [1.0]


def test_eval_bon_prints_exact_zeros_for_a_problem_never_solved(tmp_path, capsys):
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(
        json.dumps({"problem": "p", "answer": str(i), "is_correct": False,
                    "prm_score": (i % 7) / 7}) + "\n" for i in range(76)))
    assert main(["eval", "bon", "--samples", str(samples), "--score-key", "prm_score",
                 "--n", "1,16,64", "--no-majority", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pass_at_n"] == [0.0, 0.0, 0.0] and out["accuracy"] == [0.0, 0.0, 0.0]
