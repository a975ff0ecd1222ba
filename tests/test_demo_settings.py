"""Settings of the demo's experiments: one override parser behind every entry point, and
cache keys that change with every setting that changes a trained model or its data."""

from __future__ import annotations

import argparse
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

import pytest

from prmkit.cli import build_parser, main
from prmkit.cli.demo import RECIPES, build_config, recipe
from prmkit.demo.core.config import NOT_IN_MODELS, DemoConfig
from prmkit.demo.core.seed import models_folder
from prmkit.demo.core.small_scale import SmallScaleConfig, small_scale_folder
from prmkit.demo.lm.base import BaseConfig
from prmkit.demo.recipes.capacity import CapacityConfig
from prmkit.demo.recipes.rl.config import RLConfig
from prmkit.demo.settings import with_overrides
from prmkit.errors import PrmkitError


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["demo", *argv])


def _setting(cfg, name: str):
    """A setting as the experiment reads it: its own field, else its demo settings'."""
    return getattr(cfg, name) if name in {f.name for f in fields(cfg)} else getattr(cfg.demo, name)


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("name", list(RECIPES))
def test_set_progress_false_and_seeds_0_1_parse_as_bool_and_tuple_in_every_entry_point(name, quick):
    argv = ["--experiment", name, "--set", "progress=false", "--set", "seeds=0,1"]
    cfg = build_config(name, _args(*argv, *(["--quick"] if quick else [])))
    assert _setting(cfg, "progress") is False
    assert _setting(cfg, "seeds") == (0, 1)
    flags = build_config(name, _args("--experiment", name, "--no-progress", "--seeds", "0,1"))
    assert _setting(flags, "progress") is False and _setting(flags, "seeds") == (0, 1)


@pytest.mark.parametrize("name", [n for n in RECIPES if n != "base-skill"])
def test_every_experiment_honours_set_and_base(name):
    base = "mathmix hidden_size=64"
    cfg = build_config(name, _args("--experiment", name, "--set", "reward_steps=7",
                                   "--base", base, "--set", "lora_rank=4"))
    demo = cfg if isinstance(cfg, DemoConfig) else cfg.demo
    assert (demo.reward_steps, demo.base, demo.lora_rank) == (7, base, 4)
    if name == "capacity":  # the base whose pretraining varies: every point's
        assert cfg.base_spec(3) == "mathmix hidden_size=64 reading.steps=0 steps=3"
        with pytest.raises(PrmkitError, match="MathMix base"):
            build_config(name, _args("--experiment", name, "--base", "seed")).check()


def test_base_skill_honours_set_and_base():
    cfg = build_config("base-skill", _args("--experiment", "base-skill", "--base", "some/folder",
                                           "--set", "samples=3"))
    assert (cfg.base, cfg.samples) == ("some/folder", 3)


@pytest.mark.parametrize("name", list(RECIPES))
def test_a_setting_no_experiment_has_is_refused_before_anything_runs(name, tmp_path, capsys):
    argv = ["demo", "--experiment", name, "--out", str(tmp_path), "--set", "stepz=3"]
    assert main(argv) == 2
    assert f"{recipe(name).Config.__name__} has no field 'stepz'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_overrides_type_tuples_by_their_field_and_refuse_what_they_cannot_read():
    cfg = with_overrides(RLConfig(), ["rewards=orm,prm_min", "policy.lr=0.5", "beta=0.1"])
    assert cfg.rewards == ("orm", "prm_min") and cfg.policy.lr == 0.5 and cfg.beta == 0.1
    capacity = with_overrides(CapacityConfig(), ["base_items=layers=2,heads=2", "fractions=0,1"])
    assert capacity.base_items == ("layers=2", "heads=2") and capacity.fractions == (0.0, 1.0)
    # An optional field (threshold: float | None) reads as its other type, or none.
    small = with_overrides(SmallScaleConfig(), ["threshold=0.2", "small_steps=30"])
    assert (small.threshold, small.small_steps) == (0.2, 30) and isinstance(small.small_steps, int)
    unset = with_overrides(small, ["threshold=none", "small_steps=None"])
    assert (unset.threshold, unset.small_steps) == (None, None)
    for bad, says in (("progress=maybe", "expected true or false"), ("demo=3", "demo.FIELD"),
                      ("lr", "expected FIELD=VALUE"), ("demo.nope=1", "DemoConfig has no field")):
        with pytest.raises(ValueError, match=says):
            with_overrides(RLConfig(), [bad])


# ---- cache keys over every field -------------------------------------------------------

RUN_ONLY = {"seeds", "progress", "workers"}  # how a run goes, not what it trains
CHOICES = {"fact_format": "lsd", "base_items": ("layers=2",), "base": "mathmix hidden_size=64"}


def _changed(value, name: str):
    if name in CHOICES:
        return CHOICES[name]
    if value is None:  # an optional setting, unset: set it
        return 7
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "2"
    return value[:-1] if len(value) > 1 else (*value, *value)


def _variants(cfg, prefix: str = ""):
    """(dotted field name, `cfg` with that one field changed) for every leaf field."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            for name, inner in _variants(value, f"{prefix}{f.name}."):
                yield name, replace(cfg, **{f.name: inner})
        else:
            yield prefix + f.name, replace(cfg, **{f.name: _changed(value, f.name)})


def _check_keys(cfg, key, run_only: set[str]) -> None:
    """`key(cfg)` changes with every field but those of `run_only`, which keep it."""
    names = []
    for name, other in _variants(cfg):
        changes = key(other) != key(cfg)
        assert changes == (name.split(".")[-1] not in run_only), name
        names.append(name)
    assert len(names) > 5


def test_a_seeds_models_are_keyed_by_every_demo_setting_but_seeds_progress_and_workers():
    # and but the hard set's share: it changes what the models are read on, not the models
    _check_keys(DemoConfig(), lambda c: models_folder(0, c, Path("work")),
                RUN_ONLY | set(NOT_IN_MODELS))


def test_a_seeds_models_and_rl_runs_follow_the_base_itself_not_only_its_name(tmp_path, monkeypatch):
    # Before, `base="mathmix"` keyed the models by that name: a base rebuilt with other
    # default settings (or a saved folder rewritten in place) read the old base's models.
    import prmkit.demo.lm.base as base_module

    def keys(cfg: DemoConfig):
        rl = RLConfig(demo=cfg)
        return models_folder(0, cfg, Path("work")), rl.key(), rl.policy_key()

    shipped = keys(DemoConfig())
    monkeypatch.setattr(base_module, "BaseConfig", lambda: replace(BaseConfig(), steps=2001))
    assert all(a != b for a, b in zip(keys(DemoConfig()), shipped, strict=True))
    monkeypatch.undo()
    assert keys(DemoConfig()) == shipped

    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"0" * 8)
    first = keys(DemoConfig(base=str(folder)))
    (folder / "model.safetensors").write_bytes(b"0" * 16)  # rewritten in place
    second = keys(DemoConfig(base=str(folder)))
    (folder / "base.json").write_text('{"key": "a"}')
    third = keys(DemoConfig(base=str(folder)))
    assert len({first, second, third}) == 3
    # a seed's own backbone (no shared base): the settings' key as before
    from prmkit.demo.settings import settings_key
    assert DemoConfig(base="seed").key() == settings_key(DemoConfig(base="seed"),
                                                         leave_out=NOT_IN_MODELS)


def test_small_scale_cache_is_keyed_by_every_setting_of_its_small_models_and_of_the_demo():
    # Before, the key left out the demo's settings: another lr or base read the first run's models.
    # (test_samples one below the demo's 256, so that one more is still a valid setting)
    # (the hard set's share aside: the small-scale experiment does not read the hard set;
    # the selector's problems name the selector and the picks it makes instead, so that the
    # other models of the folder are shared: tests/test_demo_experiments.py)
    _check_keys(SmallScaleConfig(test_samples=255), lambda c: small_scale_folder(0, c, Path("work")),
                RUN_ONLY | set(NOT_IN_MODELS) | {"selector_problems"})


def test_rl_runs_and_policies_are_keyed_by_every_setting_but_the_rewards_run():
    _check_keys(RLConfig(), lambda c: c.key(), RUN_ONLY | {"rewards", "compare_outside_regime"})
    cfg = RLConfig()
    own = {"own_problems", "own_samples", "temperature", "max_completion"}
    for name, other in _variants(cfg):
        if name.startswith(("demo.", "policy.")) and \
                name.split(".")[-1] not in RUN_ONLY | set(NOT_IN_MODELS):
            assert other.policy_key() != cfg.policy_key(), name
            assert other.own_key() != cfg.own_key(), name  # the models the policy's samples train
        elif name in own:
            assert other.own_key() != cfg.own_key(), name
        else:
            assert other.own_key() == cfg.own_key(), name


def test_capacity_results_are_keyed_by_every_setting_of_their_base_and_demo():
    def key(c):
        return [(c.point_cache(s, 0), c.skill_samples) for s in c.steps()]

    _check_keys(CapacityConfig(), key, RUN_ONLY)


def test_a_base_is_keyed_by_every_setting():
    _check_keys(BaseConfig(), lambda c: c.key(), set())
