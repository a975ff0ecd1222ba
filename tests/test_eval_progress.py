"""Progress bars of `prmkit eval`: each names the work it counts, ends at 100% or is
removed, and none is drawn into a log or a pipe."""

from __future__ import annotations

import io
import sys

from test_eval_cli import SAMPLES
from test_search_cli import _result, _write

from prmkit.cli import main


class Terminal(io.StringIO):
    """stderr as a terminal: tqdm draws its bars with carriage returns."""

    def isatty(self) -> bool:
        return True


def screen(text: str) -> list[str]:
    """The lines a terminal shows after `text`: a carriage return goes back to the start
    of the line, and what follows overwrites it."""
    shown = []
    for line in text.split("\n"):
        row = ""
        for part in line.split("\r"):
            row = part + row[len(part):]
        if row.strip():
            shown.append(row.rstrip())
    return shown


def as_terminal(monkeypatch) -> Terminal:
    """stderr replaced by a terminal (in the test's body: pytest sets its own capture
    after the fixtures)."""
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    return term


BON = ["eval", "bon", "--samples", SAMPLES, "--score-key", "prm_score", "--n", "1,2",
       "--grader", "exact", "--estimator", "exact", "--trials", "50"]


def test_exact_estimator_shows_no_trials_bar_only_the_majority_votes_draws(monkeypatch):
    terminal = as_terminal(monkeypatch)
    assert main([*BON, "--no-majority"]) == 0
    assert "%|" not in terminal.getvalue()  # exact best-of-N and pass@N: nothing drawn
    terminal.seek(0)
    terminal.truncate()
    assert main(BON) == 0  # the majority vote is the one Monte-Carlo estimate left
    bars = [line for line in screen(terminal.getvalue()) if "%|" in line]
    assert len(bars) == 1 and bars[0].startswith("majority vote (50 trials): 100%|")


def test_eval_bon_and_eval_search_draw_no_bar_into_a_log(tmp_path, capsys):
    assert main(BON) == 0
    bon = _write(tmp_path / "bon.jsonl", [
        _result("p1", "best_of_n", 2, ["1", "2"], [.9, .1], 0, 8),
        _result("p2", "best_of_n", 2, ["0.5", "2"], [.9, .1], 0, 8, gold="1/2")])
    assert main(["eval", "search", "--results", bon, "--out-dir", str(tmp_path / "r"),
                 "--trials", "10"]) == 0
    err = capsys.readouterr().err
    assert "%|" not in err and "\r" not in err


def test_eval_search_leaves_no_half_drawn_grading_bar(tmp_path, monkeypatch):
    # "(x+1)^2" needs the symbolic grader: the bar is drawn before it has answered
    bon = _write(tmp_path / "bon.jsonl", [
        _result("p1", "best_of_n", 2, ["1", "2"], [.9, .1], 0, 8),
        _result("p2", "best_of_n", 2, ["x^2+2x+1", "2"], [.9, .1], 0, 8, gold="(x+1)^2")])
    terminal = as_terminal(monkeypatch)
    assert main(["eval", "search", "--results", bon, "--out-dir", str(tmp_path / "r"),
                 "--trials", "10"]) == 0
    assert "grading" in terminal.getvalue()
    assert not [line for line in screen(terminal.getvalue()) if "%|" in line]


def test_grading_bar_is_removed_when_grading_fails(monkeypatch):
    from prmkit.grading import grade_many
    from prmkit.grading.pool import WorkerPool

    def broken(self, n):
        raise RuntimeError("no worker")

    monkeypatch.setattr(WorkerPool, "start", broken)
    terminal = as_terminal(monkeypatch)
    try:
        grade_many([("y^2+2y+1", "(y+1)^2"), ("2", "2")], progress=True)
    except RuntimeError:
        shown = terminal.getvalue()  # the screen where the error is reported
    assert "grading" in shown
    assert not [line for line in screen(shown) if "%|" in line]
