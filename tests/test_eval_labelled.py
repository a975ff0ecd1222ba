import json
from pathlib import Path

from prmkit.cli import main
from prmkit.data import read_records
from prmkit.data.policies import soft_example
from prmkit.training.reward_config import RewardTrainingConfig
from prmkit.training.reward_trainer import train

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "training" / "good_bad.jsonl"


def test_eval_steps_with_model_matches_training_eval(tmp_path, capsys):
    examples = [soft_example(ex) for ex in read_records(FIXTURE)]
    cfg = RewardTrainingConfig.from_dict({
        "backbone": "tiny-random", "lr": 0.01, "schedule": "constant", "warmup_ratio": 0.0,
        "batch_tokens": 512, "bf16": False, "progress": False, "max_steps": 20,
        "output_dir": str(tmp_path / "run"),
        "data": {"examples": examples, "eval_examples": examples},
    })
    result = train(cfg)
    assert main(["eval", "steps", "--model", str(result.model_dir), "--data", str(FIXTURE),
                 "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # Every distinct labelled step once: the same set the trainer's held-out eval counts.
    assert metrics["n_steps"] == result.metrics["eval"]["eval_labels"]
    assert metrics["auroc"] > 0.9  # the fixture's good/bad words are learnable
    assert abs(metrics["auroc"] - result.metrics["eval"]["eval_auroc"]) < 0.05


def test_eval_steps_model_needs_data(capsys):
    assert main(["eval", "steps", "--model", "somewhere"]) == 2
    assert "--data" in capsys.readouterr().err
