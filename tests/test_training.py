import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from prmkit.cli import main as cli_main
from prmkit.data import read_records
from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.models.reward_model import StepRewardModel
from prmkit.training.checkpointing import list_checkpoints
from prmkit.training.reward_config import RewardTrainingConfig
from prmkit.training.reward_trainer import RewardTrainer, train, weighted_auroc

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "training" / "good_bad.jsonl"


@pytest.fixture(scope="module")
def examples() -> list[StepExample]:
    from prmkit.data.policies import soft_example

    return [soft_example(ex) for ex in read_records(FIXTURE)]


def _config(tmp_path, examples, **kw) -> RewardTrainingConfig:
    base = {
        "backbone": "tiny-random",
        "lr": 0.01,
        "schedule": "constant",
        "warmup_ratio": 0.0,
        "batch_tokens": 512,
        "bf16": False,
        "progress": False,
        "log_every": 1,
        "output_dir": str(tmp_path / "run"),
    }
    base.update(kw)
    base["data"] = {"examples": examples, "eval_fraction": 0.2, **base.get("data", {})}
    model = base.setdefault("model", {})
    model["step_format"] = {"max_length": 128}
    return RewardTrainingConfig.from_dict(base)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_loss_falls_on_learnable_fixture(tmp_path, examples):
    cfg = _config(tmp_path, examples, epochs=3)
    result = train(cfg)
    logs = [m for m in _metrics(result.output_dir) if m["type"] == "train"]
    assert logs[-1]["loss"] < 0.6 * logs[0]["loss"]
    assert result.metrics["eval"]["eval_accuracy"] >= 0.9
    assert result.metrics["eval"]["eval_auroc"] >= 0.9
    assert result.data["packing"] == "tree"
    assert result.data["train_label_sources"] > result.data["train_labels"]  # shared prefixes


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model" / "model.safetensors"))


def test_resume_ends_where_an_uninterrupted_run_ends(tmp_path, examples):
    full = train(_config(tmp_path / "a", examples, max_steps=6, lr=0.005, schedule="cosine"))

    class Crash(Exception):
        pass

    def crash(step, _):
        if step == 5:
            raise Crash

    cfg = _config(tmp_path / "b", examples, max_steps=6, lr=0.005, schedule="cosine",
                  save_every=2)
    with pytest.raises(Crash):
        RewardTrainer(cfg, step_callback=crash).train()
    assert [p.name for p in list_checkpoints(cfg.output_dir)] == ["step-0000002", "step-0000004"]
    with pytest.raises(PrmkitError, match="resume"):
        train(cfg)  # refuses to start over a run with checkpoints
    cfg.resume = True
    resumed = train(cfg)
    assert resumed.steps == 6
    a, b = _final_weights(full.output_dir), _final_weights(resumed.output_dir)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    # the replayed steps are logged once
    steps = [m["step"] for m in _metrics(resumed.output_dir) if m["type"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == 6


def test_save_load_round_trip_gives_identical_scores(tmp_path, examples):
    cfg = _config(tmp_path, examples, max_steps=2, model={"formulation": "head"})
    trainer = RewardTrainer(cfg)
    result = trainer.train()
    loaded = StepRewardModel.from_pretrained(result.model_dir)
    trained = trainer.accelerator.unwrap_model(trainer._trained_model).eval()
    ex = examples[1]
    enc = loaded.encoder.encode(ex.problem, ex.steps)
    ids = torch.tensor([enc.input_ids])
    pos = torch.tensor([[0, p] for p in enc.label_positions])
    with torch.no_grad():
        a = trained(ids, pos)
        b = loaded(ids, pos)
    assert torch.allclose(a, b, atol=1e-5)
    assert loaded.config.formulation == "head" and loaded.head is not None


def test_model_is_saved_before_the_final_evaluation(tmp_path, examples, monkeypatch):
    # A long final eval that is stopped (here: raises) must not lose the trained model.
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(RewardTrainer, "evaluate", stopped)
    cfg = _config(tmp_path, examples, max_steps=1)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    model_dir = Path(cfg.output_dir) / "model"
    assert StepRewardModel.from_pretrained(model_dir).config.objective == "prm"


def test_orm_trains_on_outcomes_only(tmp_path, examples):
    orm = [StepExample(e.problem, e.steps, outcome=float(e.labels[-1]), group=e.group)
           for e in examples]
    cfg = _config(tmp_path, orm + [StepExample("no outcome", ("x",), (1.0,))], max_steps=2,
                  model={"objective": "orm"})
    result = train(cfg)
    assert result.data["train_labels"] <= result.data["train_examples"]
    assert result.data["train_label_sources"] == result.data["train_examples"]


def test_top_k_lora_only_adapts_top_layers(tmp_path, examples):
    cfg = _config(tmp_path, examples, max_steps=1, lora={"top_k_layers": 1})
    trainer = RewardTrainer(cfg)
    model = trainer.build_model()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    with pytest.raises(PrmkitError, match="top_k_layers=5"):
        RewardTrainer(_config(tmp_path, examples, lora={"top_k_layers": 5})).build_model()


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(PrmkitError, match=r"unknown config key 'lora\.rank'.*lora\.r"):
        RewardTrainingConfig.from_dict({"lora": {"rank": 4}, "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="'lr' must be a number"):
        RewardTrainingConfig.from_dict({"lr": "fast", "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="'packing' must be one of"):
        RewardTrainingConfig.from_dict({"packing": "yes", "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="model.step_format.max_len"):
        RewardTrainingConfig.from_dict({"model": {"step_format": {"max_len": 3}},
                                        "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="data.train"):
        RewardTrainingConfig.from_dict({})
    with pytest.raises(PrmkitError, match="row_tokens"):
        RewardTrainingConfig.from_dict({"row_tokens": 16, "data": {"train": ["x"]}})


def test_cli_overrides_and_unknown_keys(tmp_path, capsys):
    recipe = ROOT / "recipes" / "tiny_ci.yaml"
    assert cli_main(["train", "--config", str(recipe), "--print-config", "lora.r=4",
                     "model.step_format.max_length=64", "data.policy.neutral=negative"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["lora"]["r"] == 4 and printed["model"]["step_format"]["max_length"] == 64
    assert cli_main(["train", "--config", str(recipe), "epochz=3"]) == 2
    assert "unknown config key 'epochz'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [1\n")
    assert cli_main(["train", "--config", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_unknown_policy_option_is_reported(tmp_path):
    cfg = RewardTrainingConfig.from_dict({
        "data": {"train": [str(FIXTURE)], "policy": {"neutrals": "positive"}},
        "output_dir": str(tmp_path), "progress": False})
    with pytest.raises(PrmkitError, match="data.policy.neutrals"):
        train(cfg)


def test_weighted_auroc_matches_pair_counting():
    import numpy as np

    rng = np.random.default_rng(0)
    s = rng.integers(0, 5, 40).astype(float)
    y = rng.integers(0, 2, 40).astype(float)
    w = rng.integers(1, 4, 40).astype(float)
    num = den = 0.0
    for i in range(40):
        for j in range(40):
            if y[i] == 1 and y[j] == 0:
                den += w[i] * w[j]
                num += w[i] * w[j] * ((s[i] > s[j]) + 0.5 * (s[i] == s[j]))
    assert abs(weighted_auroc(s, y, w) - num / den) < 1e-12


def test_eval_files_keep_problems_of_the_training_holdout(tmp_path):
    """Regression: the MATH500 holdout emptied the eval set, as every phase-1 test problem
    is a MATH500 problem; the holdout is for training data only."""
    from collections import Counter

    from prmkit.training.dataset import prepare
    from prmkit.training.reward_config import DataConfig

    holdout = tmp_path / "holdout.jsonl"
    holdout.write_text(json.dumps({"problem": "Problem 0: add 14 and 15.", "answer": "29"}) + "\n")
    cfg = DataConfig(train=[str(FIXTURE)], eval=[str(FIXTURE)],
                     policy={"holdout_path": str(holdout)})
    train_ex, eval_ex = prepare(cfg, "prm", seed=0, stats=Counter())
    assert not any(ex.problem == "Problem 0: add 14 and 15." for ex in train_ex)
    assert any(ex.problem == "Problem 0: add 14 and 15." for ex in eval_ex)
