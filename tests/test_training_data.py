from collections import Counter
from pathlib import Path

import pytest

from prmkit.training.data_cache import digest, prepared_key, rows_for, rows_key
from prmkit.training.dataset import first_problems, load_examples, prepare, split_by_group
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


# ---- data cache ---------------------------------------------------------------------------
FIXTURE = Path(__file__).parent / "fixtures" / "training" / "good_bad.jsonl"


def _data(tmp_path, train=FIXTURE) -> DataConfig:
    return DataConfig(train=[str(train)], eval_fraction=0.2, cache_dir=str(tmp_path / "cache"))


def test_second_prepare_reads_the_cached_examples(tmp_path, monkeypatch):
    import prmkit.training.dataset as dataset

    stats1, stats2 = Counter(), Counter()
    first = prepare(_data(tmp_path), "prm", 0, stats1)
    assert len(list((tmp_path / "cache").glob("*.msgpack"))) == 1

    def refuse(*_):
        raise AssertionError("the data was read again")

    monkeypatch.setattr(dataset, "_prepare", refuse)
    second = prepare(_data(tmp_path), "prm", 0, stats2)
    assert second == first and stats2 == stats1 and first[0]


def test_second_rows_build_reads_the_cache_without_retokenising(tmp_path, monkeypatch):
    import prmkit.training.packing as packing
    from prmkit.models.backbones import tiny_random
    from prmkit.models.formatting import SegmentEncoder, StepFormat

    train, _ = prepare(_data(tmp_path), "prm", 0)
    _, tok = tiny_random()
    encoder = SegmentEncoder(tok, StepFormat(max_length=256))
    args = (train, encoder, "tree", 512, 2, "prm", "unique")
    first = rows_for(*args, cache=True, cache_dir=str(tmp_path / "cache"))

    def refuse(*_a, **_k):
        raise AssertionError("tokenised again")

    monkeypatch.setattr(packing, "pack_examples", refuse)
    monkeypatch.setattr(SegmentEncoder, "_encode", refuse)
    second = rows_for(*args, cache=True, cache_dir=str(tmp_path / "cache"))
    assert second == first and len(first) > 0


def test_changed_tokenizer_or_data_gives_a_new_cache_key(tmp_path):
    from prmkit.models.backbones import TINY_CORPUS, train_tokenizer
    from prmkit.models.formatting import SegmentEncoder, StepFormat

    same = tmp_path / "same.jsonl"
    same.write_bytes(FIXTURE.read_bytes())
    changed = tmp_path / "changed.jsonl"
    changed.write_bytes(FIXTURE.read_bytes().replace(b"good start", b"fine start", 1))
    key = prepared_key(_data(tmp_path), "prm", 0)
    assert digest(prepared_key(_data(tmp_path), "prm", 0)) == digest(key)
    assert digest(prepared_key(_data(tmp_path), "prm", 1)) != digest(key)  # split seed
    keys = [digest(prepared_key(_data(tmp_path, p), "prm", 0)) for p in (same, changed)]
    assert keys[0] != keys[1]

    train, _ = prepare(_data(tmp_path), "prm", 0)
    fmt = StepFormat(max_length=256)
    tok_a = train_tokenizer(TINY_CORPUS)
    tok_b = train_tokenizer([*TINY_CORPUS, "a good start, a fine start"])

    def rows_digest(tok, examples=train, row_tokens=512):
        return digest(rows_key(examples, SegmentEncoder(tok, fmt), "tree", row_tokens, 2, "prm",
                               "unique"))

    assert rows_digest(tok_a) == rows_digest(train_tokenizer(TINY_CORPUS))
    assert rows_digest(tok_a) != rows_digest(tok_b)
    assert rows_digest(tok_a) != rows_digest(tok_a, train[1:])
    assert rows_digest(tok_a) != rows_digest(tok_a, row_tokens=1024)


def test_training_run_reads_the_data_cache_of_an_earlier_run(tmp_path, monkeypatch):
    import prmkit.training.dataset as dataset
    import prmkit.training.packing as packing
    from prmkit.training import train
    from prmkit.training.reward_config import RewardTrainingConfig

    def run(out):
        cfg = RewardTrainingConfig.from_yaml(
            Path(__file__).parents[1] / "recipes" / "tiny_ci.yaml",
            ["max_steps=1", "eval_every=0", "save_every=0", "progress=false",
             f"output_dir={out}", f"data.cache_dir={tmp_path / 'cache'}",
             f"data.train=[{FIXTURE}]"])
        return train(cfg)

    first = run(tmp_path / "one")

    def refuse(*_a, **_k):
        raise AssertionError("prepared again")

    monkeypatch.setattr(dataset, "_prepare", refuse)
    monkeypatch.setattr(packing, "pack_examples", refuse)
    monkeypatch.setattr(packing, "unpacked_rows", refuse)
    second = run(tmp_path / "two")
    assert second.data["train_rows"] == first.data["train_rows"] > 0
    assert second.metrics["train"]["loss"] == first.metrics["train"]["loss"]
