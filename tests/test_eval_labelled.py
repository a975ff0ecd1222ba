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
    capsys.readouterr()  # what training printed
    assert main(["eval", "steps", "--model", str(result.model_dir), "--data", str(FIXTURE),
                 "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # Every distinct labelled step once: the same set the trainer's held-out eval counts.
    assert metrics["n_steps"] == result.metrics["eval"]["eval_labels"]
    assert metrics["auroc"] > 0.9  # the fixture's good/bad words are learnable
    assert abs(metrics["auroc"] - result.metrics["eval"]["eval_auroc"]) < 0.05
    # the first wrong step of most solutions is the first one scored below 0.5
    assert 0.8 <= metrics["first_error_accuracy"] <= 1.0


def test_eval_steps_model_limit_takes_a_stratified_seeded_subset(tmp_path, capsys):
    from test_scoring import make_model

    from prmkit.evaluation.steps import has_wrong_step

    make_model().save_pretrained(tmp_path / "model")
    capsys.readouterr()  # what saving printed
    argv = ["eval", "steps", "--model", str(tmp_path / "model"), "--data", str(FIXTURE),
            "--limit", "30", "--json", "--device", "cpu"]
    assert main(argv) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n_examples"] == 30
    assert metrics["limit"] == {"examples": 30, "of": 120, "seed": 0}
    assert 0.0 <= metrics["first_error_accuracy"] <= 1.0
    from prmkit.data import PolicyOptions, apply_policy
    from prmkit.evaluation.subsets import stratified_subset

    examples = list(apply_policy(read_records(FIXTURE), PolicyOptions()))
    chosen = stratified_subset(examples, 30, has_wrong_step, 0)  # what --limit 30 takes
    share = sum(map(has_wrong_step, examples)) / len(examples)
    assert 0 < share < 1 and abs(sum(map(has_wrong_step, chosen)) - 30 * share) < 1
    assert main(argv) == 0 and json.loads(capsys.readouterr().out) == metrics  # seeded


def test_eval_steps_model_needs_data(capsys):
    assert main(["eval", "steps", "--model", "somewhere"]) == 2
    assert "--data" in capsys.readouterr().err
