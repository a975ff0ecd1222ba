"""Experiment tracking (report_to): the records of metrics.jsonl reach TensorBoard, and
tracking changes nothing the run computes."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from prmkit.cli import main as cli_main
from prmkit.errors import PrmkitError
from prmkit.training.reward_config import RewardTrainingConfig
from prmkit.training.reward_trainer import RewardTrainer, train

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny_ci.yaml"
FIXTURE = ROOT / "tests" / "fixtures" / "training" / "good_bad.jsonl"
# a few steps of the tiny CI recipe, with a train record at steps 1, 2, 4, 6 and
# evaluations at steps 3 and 6 (the final one)
SHORT = ["max_steps=6", "log_every=2", "eval_every=3", "save_every=0", "progress=false"]


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


def _records(run: Path, kind: str, field: str) -> list[tuple[int, float]]:
    return [(m["step"], m[field]) for m in _metrics(run) if m["type"] == kind]


def _same(events: list[tuple[int, float]], records: list[tuple[int, float]]) -> None:
    assert [s for s, _ in events] == [s for s, _ in records]
    for (_, got), (_, want) in zip(events, records):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-7)  # TensorBoard keeps float32


def test_tensorboard_holds_the_train_and_eval_records_of_metrics_jsonl(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_main(["train", "--config", str(RECIPE), f"output_dir={run}",
                     "report_to=[tensorboard]", *SHORT]) == 0
    capsys.readouterr()
    scalars = _scalars(run / "trackers" / "run")
    train_loss = _records(run, "train", "loss")
    assert [s for s, _ in train_loss] == [1, 2, 4, 6]
    _same(scalars["train/loss"], train_loss)
    _same(scalars["train/lr"], _records(run, "train", "lr"))
    _same(scalars["eval/loss"], _records(run, "eval", "eval_loss"))
    _same(scalars["eval/auroc"], _records(run, "eval", "eval_auroc"))
    assert [s for s, _ in scalars["eval/loss"]] == [3, 6]
    assert "train/step" not in scalars and "train/type" not in scalars


def test_tracking_changes_no_loss_or_weight_and_no_report_to_writes_no_tracker_files(tmp_path):
    def run(name: str, *extra: str) -> Path:
        out = tmp_path / name
        assert cli_main(["train", "--config", str(RECIPE), f"output_dir={out}", *SHORT,
                         *extra]) == 0
        return out

    tracked, plain = run("tracked", "report_to=[tensorboard]"), run("plain")
    assert (tracked / "trackers").is_dir()
    assert not (plain / "trackers").exists()
    assert not list(plain.rglob("events.out.tfevents*"))
    strip = ("elapsed_s", "tokens_per_s", "labels_per_s")
    assert [{k: v for k, v in m.items() if k not in strip} for m in _metrics(tracked)] == \
        [{k: v for k, v in m.items() if k not in strip} for m in _metrics(plain)]
    a = load_file(str(tracked / "model" / "model.safetensors"))
    b = load_file(str(plain / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_overwrite_removes_the_old_runs_tracker_files(tmp_path):
    from prmkit.training.run_folder import clear_run, holds_run

    run = tmp_path / "run"
    (run / "trackers" / "run").mkdir(parents=True)
    (run / "trackers" / "run" / "events.out.tfevents.1").write_bytes(b"x")
    (run / "notes.txt").write_text("mine")
    assert holds_run(run)
    clear_run(run)
    assert not (run / "trackers").exists() and (run / "notes.txt").read_text() == "mine"


def test_report_to_none_is_no_tracker(capsys):
    for value in ("none", "[]"):
        assert cli_main(["train", "--config", str(RECIPE), "--print-config",
                         f"report_to={value}"]) == 0
        assert json.loads(capsys.readouterr().out)["report_to"] == []


def test_unknown_tracker_is_refused_naming_the_known_ones(tmp_path, capsys):
    with pytest.raises(PrmkitError, match=r"unknown tracker 'tensorbord' \(did you mean "
                                          r"'tensorboard'\?\); choose from tensorboard, wandb"):
        RewardTrainingConfig.from_dict({"data": {"train": [str(FIXTURE)]},
                                        "report_to": ["tensorbord"]})
    out = tmp_path / "run"
    assert cli_main(["train", "--config", str(RECIPE), f"output_dir={out}",
                     "report_to=[mlflow]"]) == 2
    err = capsys.readouterr().err
    assert "override 'report_to=[mlflow]'" in err and "unknown tracker 'mlflow'" in err
    assert not out.exists()
    with pytest.raises(PrmkitError, match="'none' cannot be combined"):
        RewardTrainingConfig.from_dict({"data": {"train": [str(FIXTURE)]},
                                        "report_to": ["none", "wandb"]})


def test_missing_tracker_package_names_it_and_the_pip_command(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    cfg = RewardTrainingConfig.from_yaml(RECIPE, [f"output_dir={tmp_path / 'run'}",
                                                  "report_to=[tensorboard]", *SHORT])
    with pytest.raises(PrmkitError, match=r"'tensorboard' package, which is not installed: "
                                          r"pip install tensorboard"):
        train(cfg)
    assert not (tmp_path / "run").exists()  # refused before data or model are read


def test_resumed_run_hides_the_events_logged_after_its_checkpoint(tmp_path):
    class Crash(Exception):
        pass

    def crash(step, _):
        if step == 5:
            raise Crash

    run = tmp_path / "run"
    cfg = RewardTrainingConfig.from_yaml(RECIPE, [f"output_dir={run}", "report_to=[tensorboard]",
                                                  *SHORT, "log_every=1", "save_every=3"])
    with pytest.raises(Crash):
        RewardTrainer(cfg, step_callback=crash).train()
    cfg.resume = True
    train(cfg)
    records = _records(run, "train", "loss")
    assert [s for s, _ in records] == [1, 2, 3, 4, 5, 6]
    _same(_scalars(run / "trackers" / "run")["train/loss"], records)
