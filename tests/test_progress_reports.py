"""Long work says how far it is: `eval processbench`, `eval steps` and training report on
stderr while they run, as a bar on a terminal and as lines in a log or a pipe (where a
reader waiting for a newline saw nothing until the end)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from prmkit import progress
from prmkit.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOOD_BAD = FIXTURES / "training" / "good_bad.jsonl"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from test_scoring import make_model

    folder = tmp_path_factory.mktemp("prm") / "model"
    make_model().save_pretrained(folder)
    return folder


def report_lines(err: str, desc: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"{desc}: ")]


def assert_reported_in_lines(err: str, desc: str, total: int) -> list[str]:
    """The log form: whole lines, no redraws, from the start, after the first unit and at
    the end."""
    assert not re.search(rf"\r{desc}|{desc}: .*%\|", err)  # no bar drawn into the log
    lines = report_lines(err, desc)
    assert lines[0].startswith(f"{desc}: 0 of {total} (0%)")
    first = int(re.match(rf"{desc}: (\d+) of ", lines[1]).group(1))
    assert 1 <= first < total  # as soon as the first batch is done, not only at the end
    assert re.search(r"elapsed, about [\d:]+ left", lines[1])
    assert lines[-1].startswith(f"{desc}: {total} of {total} (100%)")
    return lines


def test_eval_processbench_reports_progress(model_dir, capsys):
    argv = ["eval", "processbench", "--model", str(model_dir), "--data",
            str(FIXTURES / "eval" / "processbench"), "--device", "cpu"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ProcessBench average F1")
    total = int(re.search(r"scoring: 0 of (\d+)", captured.err).group(1))
    assert total > 1
    assert_reported_in_lines(captured.err, "scoring", total)


def test_eval_processbench_reports_progress_as_a_bar_on_a_terminal(model_dir, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = ["eval", "processbench", "--model", str(model_dir), "--data",
            str(FIXTURES / "eval" / "processbench"), "--device", "cpu"]
    assert main(argv) == 0
    assert re.search(r"\rscoring: 100%\|.*\| (\d+)/\1 ", terminal.getvalue())


def test_eval_processbench_json_stays_quiet(model_dir, capsys):
    argv = ["eval", "processbench", "--model", str(model_dir), "--data",
            str(FIXTURES / "eval" / "processbench"), "--device", "cpu", "--json"]
    assert main(argv) == 0
    assert not report_lines(capsys.readouterr().err, "scoring")


def test_eval_steps_reports_progress(model_dir, capsys):
    argv = ["eval", "steps", "--model", str(model_dir), "--data", str(GOOD_BAD),
            "--device", "cpu", "--batch-tokens", "512"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "AUROC" in captured.out or "auroc" in captured.out.lower()
    total = int(re.search(r"predicting: 0 of (\d+)", captured.err).group(1))
    assert total > 1  # several batches, so the first one's line is not the last
    assert_reported_in_lines(captured.err, "predicting", total)


def test_training_reports_first_step_progress(tmp_path, capsys):
    from prmkit.data import read_records
    from prmkit.data.policies import soft_example
    from prmkit.training.reward_config import RewardTrainingConfig
    from prmkit.training.reward_trainer import train

    examples = [soft_example(ex) for ex in read_records(GOOD_BAD)]
    cfg = RewardTrainingConfig.from_dict({
        "backbone": "tiny-random", "lr": 0.01, "schedule": "constant", "warmup_ratio": 0.0,
        "batch_tokens": 512, "bf16": False, "max_steps": 4, "log_every": 100,
        "output_dir": str(tmp_path / "run"), "data": {"examples": examples}})
    train(cfg)
    err = capsys.readouterr().err
    lines = assert_reported_in_lines(err, "train", 4)
    assert lines[1].startswith("train: 1 of 4 ")  # one unit a step: after the first
    # the first step's line: steps done of all, tokens/s and time left
    assert re.search(r"^train: 1 of 4 \(25%\), .* about [\d:]+ left, .*tok/s=\d+ \(at step 1\)",
                     lines[1])
    assert re.search(r"tok/s=\d+ \(at step 4\)", lines[-1])


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_log_lines_come_after_the_first_unit_then_once_an_interval(monkeypatch):
    """Between the first unit and the end, a line only once LOG_INTERVAL_S has passed
    (a clock the test moves, not a timing test)."""
    clock = FakeClock()
    monkeypatch.setattr("tqdm.std.time", clock)  # tqdm's clock, read as bars are made
    out = io.StringIO()
    bar = progress.progress_bar(total=100, desc="work", unit="item", file=out)
    assert isinstance(bar, progress.LogLines)
    for _ in range(100):
        clock.now += progress.LOG_INTERVAL_S / 10  # ten units per interval
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    done = [int(re.match(r"work: (\d+) of 100", line).group(1)) for line in lines]
    assert done[:2] == [0, 1] and done[-1] == 100
    assert all(later - earlier >= 10 for earlier, later in zip(done[1:-1], done[2:-1]))
    assert 10 <= len(lines) <= 13  # start, first unit, about one an interval, end
    assert "about 04:57 left" in lines[1]  # 99 more units at the first one's 3 s each


def test_progress_bar_is_drawn_in_place_on_a_terminal_and_silent_when_disabled():
    term = Terminal()
    with progress.progress_bar(total=3, desc="work", unit="item", file=term) as bar:
        bar.update(3)
    assert not isinstance(bar, progress.LogLines) and "\rwork: 100%|" in term.getvalue()
    quiet = io.StringIO()
    with progress.progress_bar(total=3, desc="work", unit="item", file=quiet,
                               enabled=False) as bar:
        bar.update(3)
    assert quiet.getvalue() == ""
