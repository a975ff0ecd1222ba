import json
from dataclasses import replace

import pytest
import torch

from prmkit.demo.lm import base as base_mod
from prmkit.demo.lm.base import BaseConfig, base_folder, base_info
from prmkit.demo.lm.skill import heldout_text, step_result_skill
from prmkit.demo.settings import with_overrides
from prmkit.errors import PrmkitError
from prmkit.models.backbones import load_backbone

TINY = ["steps=3", "hidden_size=32", "layers=1", "heads=2", "vocab_size=300", "block=64",
        "batch_size=2", "mathmix.problems=40", "mathmix.fact_samples=1",
        "mathmix.fact_lines=64", "mathmix.exclude_seeds=0", "mathmix.reserve=150",
        "reading.steps=0"]
TWO_STAGES = [*TINY[:-1], "reading.steps=2", "reading.problems=30", "reading.orders=2"]


@pytest.fixture
def counted_pretraining(monkeypatch, tmp_path):
    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path / "cache"))
    calls = []
    real = base_mod.pretrain_lm

    def counting(*args, **kwargs):
        calls.append(kwargs["steps"])
        return real(*args, **kwargs)

    monkeypatch.setattr(base_mod, "pretrain_lm", counting)
    return calls


def test_cached_base_is_reused_and_rebuilt_when_its_settings_change(counted_pretraining):
    cfg = with_overrides(BaseConfig(), TINY)
    first = base_folder(cfg, progress=False)
    assert counted_pretraining == [3]
    again = base_folder(with_overrides(BaseConfig(), TINY), progress=False)
    assert again == first and counted_pretraining == [3]  # read back, not pretrained
    info = base_info(first)
    assert info["key"] == cfg.key() and info["config"]["steps"] == 3
    changed = base_folder(with_overrides(cfg, ["mathmix.fact_alpha=0"]), progress=False)
    assert changed != first and counted_pretraining == [3, 3]
    longer = base_folder(with_overrides(cfg, ["steps=4"]), progress=False)
    assert longer not in (first, changed) and counted_pretraining == [3, 3, 4]
    assert sorted(p.name for p in first.parent.iterdir() if p.is_dir()) == sorted(
        {first.name, changed.name, longer.name})  # no half-written folder left behind


def test_a_second_stage_reads_on_from_its_cached_first_stage(counted_pretraining):
    from prmkit.demo.lm.mathmix import mathmix_problems, worked_documents

    cfg = with_overrides(BaseConfig(), TWO_STAGES)
    first_stage = with_overrides(BaseConfig(), TINY)
    assert cfg.first_stage().key() == first_stage.key() != cfg.key()
    two = base_folder(cfg, progress=False)
    assert counted_pretraining == [3, 2]  # the first stage, then the reading stage
    one = base_folder(first_stage, progress=False)
    assert counted_pretraining == [3, 2] and one != two  # the first stage is cached
    info = base_info(two)
    assert info["first_stage"] == first_stage.key() and info["config"]["reading"]["steps"] == 2
    problems = mathmix_problems(replace(cfg.mathmix, problems=30))
    assert info["documents"] == len(worked_documents(problems, 2))
    faster = base_folder(with_overrides(cfg, ["reading.lr=3e-3"]), progress=False)
    assert faster not in (one, two) and counted_pretraining == [3, 2, 2]  # stage 2 only


def test_reading_stages_that_read_more_equations_build_their_own_bases(counted_pretraining):
    from prmkit.demo.lm.mathmix import (
        extra_equations,
        mathmix_problems,
        worked_documents,
        world_mix,
        world_mix_repeats,
    )

    cfg = with_overrides(BaseConfig(), [*TWO_STAGES, "reading.world_mix=false"])
    assert "world_mix" not in cfg.settings()["reading"]  # the keys of bases built before
    plain = base_folder(cfg, progress=False)
    mixed_cfg = with_overrides(cfg, ["reading.world_mix=true"])
    assert mixed_cfg.settings()["reading"]["world_mix"] is True  # the default since
    assert mixed_cfg.key() == with_overrides(BaseConfig(), TWO_STAGES).key()
    mixed = base_folder(mixed_cfg, progress=False)
    more_cfg = with_overrides(cfg, ["reading.extra_equations=12"])
    more = base_folder(more_cfg, progress=False)
    assert len({plain, mixed, more}) == 3 and counted_pretraining == [3, 2, 2, 2]
    problems = mathmix_problems(replace(cfg.mathmix, problems=30))
    repeats = world_mix_repeats(problems, world_mix(cfg.mathmix))
    assert base_info(mixed)["documents"] == sum(
        len(worked_documents([p], 2)) * repeats.get(p.form, 1) for p in problems)
    extra = extra_equations(cfg.mathmix, 12, "medium")
    assert len({p.key for p in extra}) == 12 and all(p.kind == "equation" for p in extra)
    assert base_info(more)["documents"] == len(worked_documents(problems + extra, 2))


def test_a_reading_stage_that_reads_a_shifted_set_builds_its_own_base(counted_pretraining):
    from prmkit.demo.lm.base_settings import SHIFT_STREAM, base_config, reading_problems
    from prmkit.demo.lm.mathmix import excluded_keys, mathmix_problems, worked_documents
    from prmkit.demo.world import shifted_problems

    cfg = with_overrides(BaseConfig(), [*TWO_STAGES, "reading.world_mix=false"])
    shop_cfg = with_overrides(cfg, ["reading.extra_shift=wording",
                                    "reading.extra_shift_problems=6"])
    assert "extra_shift" not in cfg.settings()["reading"]  # the keys of bases built before
    assert shop_cfg.key() != cfg.key()
    read = reading_problems(shop_cfg)
    mathmix = mathmix_problems(replace(cfg.mathmix, problems=30))
    shop = shifted_problems("wording", 6, seed=SHIFT_STREAM, exclude=excluded_keys(cfg.mathmix))
    assert read == mathmix + shop and reading_problems(cfg) == mathmix
    assert all("shop" in p.text for p in shop)
    folder = base_folder(shop_cfg, progress=False)
    assert counted_pretraining == [3, 2]
    assert base_info(folder)["documents"] == len(worked_documents(read, 2))
    assert base_config(str(folder)).key() == shop_cfg.key()  # what a saved base read
    with pytest.raises(PrmkitError, match="unknown shift 'shops'"):
        reading_problems(with_overrides(cfg, ["reading.extra_shift=shops",
                                              "reading.extra_shift_problems=2"]))


def test_base_config_reads_back_the_settings_a_saved_base_was_built_with(tmp_path):
    from prmkit.demo.lm.base import SHIPPED_BASE, SHIPPED_FIRST_STAGE
    from prmkit.demo.lm.base_settings import base_config

    for folder in (SHIPPED_BASE, SHIPPED_FIRST_STAGE):
        assert base_config(str(folder)).key() == base_info(folder)["key"]
    assert base_config("mathmix").key() == base_info(SHIPPED_BASE)["key"]
    assert base_config("mathmix reading.steps=0").key() == base_info(SHIPPED_FIRST_STAGE)["key"]
    assert base_config("seed") is None and base_config(str(tmp_path)) is None


def test_worked_documents_write_each_valid_order_once_the_written_one_first():
    from prmkit.demo.lm.mathmix import worked_documents
    from prmkit.demo.world import check_solution, make_problems

    problems = make_problems(60, seed=3)
    docs = worked_documents(problems, orders=3)
    k = 0
    for prob in problems:
        n = min(len(prob.plans[0].orders), 3)
        mine = docs[k: k + n]
        k += n
        assert mine[0] == prob.text + "\n" + "\n".join(prob.reference_solution())
        assert len(set(mine)) == n  # distinct orders
        for doc in mine:
            steps = doc.split("\n")[1:]
            assert check_solution(prob, steps).process_correct
    assert k == len(docs) and any(len(p.plans[0].orders) > 1 for p in problems)


def test_base_overrides_are_typed_and_unknown_fields_are_refused():
    cfg = with_overrides(BaseConfig(), ["steps=10", "mathmix.fact_alpha=0",
                                             "mathmix.exclude_seeds=0,1", "lr=1e-3"])
    assert cfg.steps == 10 and cfg.lr == 1e-3
    assert cfg.mathmix.fact_alpha == 0.0 and cfg.mathmix.exclude_seeds == (0, 1)
    with pytest.raises(ValueError, match="no field 'depth'"):
        with_overrides(cfg, ["depth=3"])
    with pytest.raises(ValueError, match="mathmix.problems=many"):
        with_overrides(cfg, ["mathmix.problems=many"])


class _Oracle(torch.nn.Module):
    """Predicts the next token of the batch itself (every argmax right), except `wrong`."""

    def __init__(self, vocab: int, wrong: int | None = None):
        super().__init__()
        self.vocab, self.wrong, self.w = vocab, wrong, torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        nxt = torch.roll(input_ids, -1, dims=1)
        if self.wrong is not None:
            nxt = torch.where(nxt == self.wrong, (nxt + 1) % self.vocab, nxt)
        logits = 50.0 * torch.nn.functional.one_hot(nxt, self.vocab).float()
        return type("Out", (), {"logits": logits})


def test_skill_is_one_for_a_model_that_always_predicts_the_text(counted_pretraining):
    folder = base_folder(with_overrides(BaseConfig(), TINY), progress=False)
    _, tokenizer = load_backbone(str(folder))
    problems, pools = heldout_text(test=6, samples=2)
    skill = step_result_skill(_Oracle(len(tokenizer)), tokenizer, problems, pools)
    assert skill["all"]["exact"] == 1.0 and skill["all"]["steps"] > 10
    # right digits but no end of line after them is not an exact result
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"][0]
    skill = step_result_skill(_Oracle(len(tokenizer), wrong=newline), tokenizer, problems, pools)
    assert skill["all"]["exact"] == 0.0
    # a wrong "7" spoils exactly the results that contain a 7
    seven = tokenizer("7", add_special_tokens=False)["input_ids"][0]
    skill = step_result_skill(_Oracle(len(tokenizer), wrong=seven), tokenizer, problems, pools)
    assert 0.0 < skill["all"]["exact"] < 1.0
    json.dumps(skill)


def test_base_skill_command_writes_the_indicator_of_the_cached_base(counted_pretraining,
                                                                     tmp_path, capsys):
    from prmkit.cli import main

    spec = "mathmix " + " ".join(TINY)
    assert main(["demo", "--experiment", "base-skill", "--base", spec, "--out",
                 str(tmp_path / "out"), "--no-progress"]) == 0
    written = json.loads((tmp_path / "out" / "base_skill.json").read_text())
    assert written["settings"]["steps"] == 3 and counted_pretraining == [3]
    assert set(written["skill"]) == {"+", "-", "*", "/", "all"}
    assert written["skill"]["all"]["steps"] > 500
    assert "step results computed exactly" in capsys.readouterr().out
    assert main(["demo", "--experiment", "base-skill", "--base", spec, "--out",
                 str(tmp_path / "again"), "--no-progress"]) == 0
    assert counted_pretraining == [3]  # the second command reads the cached base


def test_base_skill_command_refuses_a_base_it_cannot_read(tmp_path, capsys):
    from prmkit.cli import main

    assert main(["demo", "--experiment", "base-skill", "--base", str(tmp_path),
                 "--out", str(tmp_path / "o")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["demo", "--experiment", "base-skill", "--base", "mathmix depth=2",
                 "--out", str(tmp_path / "o")]) == 2
    assert "no field 'depth'" in capsys.readouterr().err


def test_every_seed_starts_from_the_one_cached_base(counted_pretraining, monkeypatch, tmp_path):
    from dataclasses import replace

    from prmkit.demo.core import seed as seed_mod
    from prmkit.demo.core.config import quick_config

    def no_own_backbone(*args, **kwargs):
        raise AssertionError("a seed pretrained its own backbone")

    monkeypatch.setattr(seed_mod, "pretrain_lm", no_own_backbone)
    cfg = replace(quick_config((0, 1)), base="mathmix " + " ".join(TINY), reward_steps=2,
                  progress=False)
    for seed in cfg.seeds:
        models = seed_mod.seed_models(seed, cfg, tmp_path)
        assert (models.backbone_dir / "base.json").is_file()
        assert (models.prm_dir / "config.json").is_file()
    assert counted_pretraining == [3]  # built once, shared by both seeds


def test_table_coverage_counts_the_held_out_steps_whose_operands_are_facts():
    from prmkit.demo.lm.mathmix import step_facts
    from prmkit.demo.lm.skill import table_coverage

    problems, pools = heldout_text(test=6, samples=2)
    everything = {f for pool in pools for steps in pool for f in step_facts(steps)}
    assert table_coverage(everything, problems, pools)["all"] == 1.0
    assert table_coverage(set(), problems, pools)["all"] == 0.0
    sums = {f for f in everything if f[0] == "+"}
    cov = table_coverage(sums, problems, pools)
    assert cov["+"] == 1.0 and cov["*"] in (0.0, None)


def test_written_result_probs_are_the_base_check_of_each_written_result(counted_pretraining):
    from prmkit.demo.lm.skill import written_result_probs

    folder = base_folder(with_overrides(BaseConfig(), TINY), progress=False)
    _, tokenizer = load_backbone(str(folder))
    problems, pools = heldout_text(test=6, samples=2)
    probs = written_result_probs(_Oracle(len(tokenizer)), tokenizer, problems, pools)
    assert [len(p) for p in probs] == [len(p) for p in pools]
    assert all(v > 0.99 for pool in probs for sol in pool for v in sol)
    seven = tokenizer("7", add_special_tokens=False)["input_ids"][0]
    probs = written_result_probs(_Oracle(len(tokenizer), wrong=seven), tokenizer, problems, pools)
    for pool, scored in zip(pools, probs):
        for steps, sol in zip(pool, scored):
            for step, v in zip(steps, sol):
                has_seven = "=" in step and "7" in step.rsplit("=", 1)[1]
                assert (v < 0.01) == has_seven, (step, v)


def test_written_step_probs_check_operands_as_well_as_results(counted_pretraining):
    from prmkit.demo.lm.skill import written_probs

    folder = base_folder(with_overrides(BaseConfig(), TINY), progress=False)
    _, tokenizer = load_backbone(str(folder))
    problems, pools = heldout_text(test=6, samples=2)
    seven = tokenizer("7", add_special_tokens=False)["input_ids"][0]
    oracle = _Oracle(len(tokenizer), wrong=seven)
    steps_checked = results_checked = 0
    for check in ("step", "result"):
        probs = written_probs(oracle, tokenizer, problems, pools, check=check)
        for pool, scored in zip(pools, probs):
            for steps, sol in zip(pool, scored):
                for k, (step, v) in enumerate(zip(steps, sol)):
                    computes = "=" in step and k < len(steps) - 1
                    if check == "step":  # every line, the answer line too
                        assert (v < 0.01) == ("7" in step), (check, step, v)
                    else:
                        assert (v < 0.01) == (computes and "7" in step.rsplit("=", 1)[-1])
                    steps_checked += check == "step" and computes and "7" in step.split("=")[0]
                    results_checked += check == "result" and v < 0.01
    assert steps_checked > 0 and results_checked > 0  # a 7 among operands is checked too
    with pytest.raises(ValueError, match="check must be one of"):
        written_probs(oracle, tokenizer, problems, pools, check="answer")


def test_demo_settings_take_overrides_and_refuse_unknown_ones():
    from prmkit.demo.core.config import DemoConfig

    cfg = with_overrides(DemoConfig(), ["lora_rank=16", "formulation=token", "threads=1",
                                        "seeds=0", "progress=false"])
    assert (cfg.lora_rank, cfg.formulation, cfg.threads, cfg.seeds) == (16, "token", 1, (0,))
    assert cfg.progress is False
    with pytest.raises(ValueError, match="no field 'rank'"):
        with_overrides(cfg, ["rank=16"])
    with pytest.raises(ValueError, match="no field 'steps'"):
        with_overrides(cfg, ["base.steps=3"])


def test_build_command_measures_the_base_and_warns_where_it_misses_the_regime(
        counted_pretraining, tmp_path, capsys):
    base_mod.main(["--out", str(tmp_path / "tiny"), *[a for s in TINY for a in ("--set", s)]])
    out, err = capsys.readouterr()
    printed = json.loads(out[out.index("{\n"):])  # after any library's log line
    assert printed["key"] == with_overrides(BaseConfig(), TINY).key()
    assert printed["indicators"]["exact"] < 0.95  # three steps of a tiny model compute little
    assert "misses the regime indicator: step results computed exactly" in err
    assert counted_pretraining == [3]


def test_regime_misses_name_the_indicator_of_each_stage():
    one, two = with_overrides(BaseConfig(), TINY), BaseConfig()
    aurocs = {"slip": 0.97, "miscopy": 0.944, "skip": None}
    assert base_mod.regime_misses(one, {"exact": 0.908, "step_auroc": aurocs}) == [
        "step results computed exactly 0.908 < 0.95"]
    assert base_mod.regime_misses(one, {"exact": 0.96, "step_auroc": aurocs}) == []
    assert base_mod.regime_misses(two, {"exact": 0.5, "step_auroc": aurocs}) == [
        "miscopy step AUROC 0.944 < 0.95"]
