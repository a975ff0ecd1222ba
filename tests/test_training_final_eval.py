"""The final held-out evaluation of a training run: announced, shown, limited, skippable;
and the training bar's figures name the step they were measured at."""

import json
import re
from pathlib import Path

import pytest

from prmkit.data import read_records
from prmkit.data.policies import soft_example
from prmkit.training.reward_config import RewardTrainingConfig
from prmkit.training.reward_trainer import RewardTrainer, train

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "training" / "good_bad.jsonl"


@pytest.fixture(scope="module")
def examples():
    return [soft_example(ex) for ex in read_records(FIXTURE)]


def _config(tmp_path, examples, **kw) -> RewardTrainingConfig:
    base = {"backbone": "tiny-random", "lr": 0.01, "schedule": "constant", "warmup_ratio": 0.0,
            "batch_tokens": 512, "bf16": False, "progress": False, "log_every": 1,
            "max_steps": 2, "output_dir": str(tmp_path / "run"),
            "model": {"step_format": {"max_length": 128}},
            "data": {"examples": examples[:40], "eval_examples": examples[40:]}}
    base.update(kw)
    return RewardTrainingConfig.from_dict(base)


def test_long_final_eval_says_the_model_is_saved_and_shows_its_size_and_progress(
        tmp_path, examples, capsys, monkeypatch):
    seen = {}
    evaluate = RewardTrainer.evaluate

    def watching(self, model, rows, pad_id, desc="eval"):
        seen[desc] = (Path(self.config.output_dir) / "model" / "prmkit_config.json").is_file()
        return evaluate(self, model, rows, pad_id, desc)

    monkeypatch.setattr(RewardTrainer, "evaluate", watching)
    result = train(_config(tmp_path, examples, progress=True))
    err = capsys.readouterr().err
    assert seen == {"final eval": True}  # the model was on disk before the evaluation began
    stats = json.loads((result.output_dir / "data_stats.json").read_text())
    assert stats["eval_examples_used"] == stats["eval_examples_available"] == 80
    assert stats["eval_rows"] > 0 and stats["eval_labels"] == result.metrics["eval"]["eval_labels"]
    notice = next(line for line in err.splitlines() if line.startswith("model saved to"))
    assert f"final evaluation on 80 held-out examples ({stats['eval_rows']} rows, " \
           f"{stats['eval_tokens']:,} tokens; about" in notice
    assert "eval_max_examples=N limits it, final_eval=false skips it" in notice
    # its own progress (lines in a log: prmkit.progress), run to the end
    assert re.search(r"^final eval: (\d+) of \1 \(100%\)", err, re.M)


def test_eval_max_examples_evaluates_a_seeded_subset(tmp_path, examples):
    runs = [train(_config(tmp_path / str(i), examples, eval_max_examples=10))
            for i in range(2)]
    stats = [json.loads((r.output_dir / "data_stats.json").read_text()) for r in runs]
    assert stats[0]["eval_examples_used"] == 10 and stats[0]["eval_examples_available"] == 80
    keys = ("eval_rows", "eval_tokens", "eval_labels")
    assert [s[k] for s in stats for k in keys][:3] == [stats[1][k] for k in keys]  # same seed
    full = train(_config(tmp_path / "full", examples))
    assert 0 < runs[0].metrics["eval"]["eval_labels"] < full.metrics["eval"]["eval_labels"]


def test_final_eval_false_skips_the_evaluation_and_keeps_the_model(tmp_path, examples, capsys):
    result = train(_config(tmp_path, examples, final_eval=False))
    assert result.metrics["eval"] == {}
    records = [json.loads(line) for line in
               (result.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["train", "train"]
    assert (result.model_dir / "prmkit_config.json").is_file()
    assert "final evaluation skipped (final_eval=false)" in capsys.readouterr().err


def test_training_bar_figures_name_the_step_they_were_measured_at(tmp_path, examples,
                                                                  monkeypatch):
    from prmkit import progress

    shown = []  # (steps done, postfix) after every update of the training bar

    class Recording(progress.LogLines):  # the bar's form in a log (pytest's capture)
        def update(self, n=1):
            super().update(n)
            if self.desc == "train":
                shown.append((self.n, self.postfix))

    monkeypatch.setattr(progress, "LogLines", Recording)
    train(_config(tmp_path, examples, progress=True, max_steps=5, log_every=3))
    # measured at step 1 (the first), 3 (log_every) and 5 (the last); shown in between
    assert [(n, p.rsplit("(", 1)[1]) for n, p in shown] == [
        (1, "at step 1)"), (2, "at step 1)"), (3, "at step 3)"), (4, "at step 3)"),
        (5, "at step 5)")]
    assert all(p.startswith("loss=") and ", tok/s=" in p for _, p in shown)
