"""CI's check of the shipped base's recipe: the first steps of each stage rebuilt and compared
with a record (prmkit.demo.lm.base_prefix), and the shipped bases' own regime indicators.
The full rebuild stays `make check-base` (tests/test_demo_shipped_base.py)."""

import copy
import json

import pytest
from test_demo_base import TINY

from prmkit.demo.lm import base_prefix
from prmkit.demo.lm.backbone import build_backbone, pretrain_lm
from prmkit.demo.lm.base import (
    SHIPPED_BASE,
    SHIPPED_FIRST_STAGE,
    BaseConfig,
    base_info,
    build_base,
    regime_misses,
)
from prmkit.demo.lm.skill import base_indicators
from prmkit.demo.settings import with_overrides


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(base_prefix.RECORD.read_text())


def test_recorded_prefix_is_for_the_current_recipe(record):
    """A change of the recipe's key fails here until the record is refreshed
    (`python -m prmkit.demo.lm.base_prefix --write`, after the full build is shipped)."""
    cfg = BaseConfig()
    assert record["recipe"] == cfg.key() == base_info(SHIPPED_BASE)["key"]
    assert record["first_stage_recipe"] == cfg.first_stage().key()
    assert record["first_stage_recipe"] == base_info(SHIPPED_FIRST_STAGE)["key"]
    assert record["steps"] == base_prefix.PREFIX_STEPS
    for stage in ("first_stage", "reading"):
        assert len(record[stage]["losses"]) == base_prefix.PREFIX_STEPS


def test_base_recipe_prefix_matches_its_record_and_the_full_builds(record):
    """Both stages' first steps rebuilt (about two minutes of one thread): the same data,
    tokenizer, losses and weights as recorded, and the full builds' first losses."""
    measured = base_prefix.measure()
    assert base_prefix.differences(measured, record) == []
    assert base_prefix.full_build_differences(measured) == []


def test_prefix_check_fails_on_changed_losses_weights_data_or_recipe(record):
    assert base_prefix.differences(record, record) == []
    cases = {
        "loss at step 5": lambda r: r["reading"]["losses"].__setitem__(5, r["reading"]["losses"][5] * 1.01),
        "model.norm.weight": lambda r: r["first_stage"]["weights"]["model.norm.weight"].__setitem__(1, 0.0),
        "documents": lambda r: r["reading"]["data"].__setitem__("documents", 1),
        "tokenizer_sha256": lambda r: r["first_stage"].__setitem__("tokenizer_sha256", "0"),
        "refresh the record": lambda r: r.__setitem__("recipe", "another"),
    }
    for expected, change in cases.items():
        changed = copy.deepcopy(record)
        change(changed)
        found = base_prefix.differences(changed, record)
        assert found and expected in " ".join(found), expected


def test_prefix_is_the_first_steps_of_the_whole_run():
    """stop_after runs the whole schedule's first steps: the same losses as the full run's."""
    docs = [f"{a} + {b} = {a + b}" for a in range(30) for b in range(30)]
    curves = []
    for stop in (None, 4):
        model, tok = build_backbone(docs, seed=0, hidden_size=32, layers=1, heads=2,
                                    vocab_size=300)
        curves.append(pretrain_lm(model, tok, docs, steps=10, seed=0, block=32, batch_size=2,
                                  progress=False, bf16=False, stop_after=stop))
    assert len(curves[0]) == 10 and curves[1] == curves[0][:4]


def test_full_build_records_its_prefix_losses(tmp_path, monkeypatch):
    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path / "cache"))
    cfg = with_overrides(BaseConfig(), TINY)
    info = base_info(build_base(cfg, tmp_path / "base", progress=False, bf16=False))
    assert len(info["prefix_losses"]) == cfg.steps and info["prefix_losses"][0] == info["lm_loss"][0]


@pytest.mark.parametrize("folder", [SHIPPED_FIRST_STAGE, SHIPPED_BASE], ids=["first", "base"])
def test_shipped_base_meets_its_regime(folder):
    """The shipped weights themselves: a first stage computes held-out step results, a
    two-stage base checks every kind of step (`regime_misses`)."""
    cfg = BaseConfig() if folder == SHIPPED_BASE else BaseConfig().first_stage()
    assert regime_misses(cfg, base_indicators(folder)) == []
