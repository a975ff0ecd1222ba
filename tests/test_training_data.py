from collections import Counter

import pytest

from prmkit.training.dataset import first_problems, load_examples, split_by_group
from prmkit.training.reward_config import DataConfig


@pytest.mark.slow
def test_orm_examples_from_phase1_are_graded_against_math_answers(shared_data):
    cfg = DataConfig(
        train=[str(shared_data / "prm800k" / "phase1_test.stepwise-critic.parquet")],
        gold_answers=[str(shared_data / "math" / "math_train_7500_answers.json"),
                      str(shared_data / "math" / "math500.jsonl")],
        policy={"until_first_error": False},
    )
    stats = Counter()
    examples = load_examples(cfg.train, cfg, "orm", stats)
    assert examples and all(ex.outcome in (0.0, 1.0) for ex in examples)
    assert all("# Answer" in ex.steps[-1] or "\\boxed" in ex.steps[-1] for ex in examples)
    assert stats["orm_graded"] + stats["orm_from_rating"] == len(examples)
    assert stats["orm_graded"] > 0
    assert {ex.outcome for ex in examples} == {0.0, 1.0}


@pytest.mark.slow
def test_prm_examples_from_phase1_test_share_prefixes(shared_data):
    cfg = DataConfig(train=[str(shared_data / "prm800k" / "phase1_test.stepwise-critic.parquet")])
    examples = load_examples(cfg.train, cfg, "prm")
    assert len({ex.problem for ex in examples}) < len(examples)
    some = first_problems(examples, 3)
    assert len({ex.group for ex in some}) == 3
    train, evals = split_by_group(examples, 0.1, seed=0)
    assert not {ex.group for ex in train} & {ex.group for ex in evals}
    assert len(train) + len(evals) == len(examples)
