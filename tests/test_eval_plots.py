"""Every curve plot read back from its PNG: axis labels, tick values and labels, markers."""

import json

from prmkit.cli import main
from prmkit.evaluation.plots import (
    Curve,
    Panel,
    plot_bon_curves,
    plot_calibration,
    plot_curves,
    read_axes,
)
from prmkit.evaluation.steps import calibration_bins


def _labels(ticks):
    return [t["label"] for t in ticks]


def _values(ticks):
    return [t["value"] for t in ticks]


def _percent_axis_ok(ax):
    assert ax["ylabel"] == "% problems solved"
    assert all(t["label"].endswith("%") for t in ax["yticks"]) and len(ax["yticks"]) >= 3
    values = _values(ax["yticks"])
    assert all(0 <= v <= 100 and v == int(v) for v in values)  # percent, not fractions
    assert ax["ylim"][1] - ax["ylim"][0] >= 10


def test_bon_plot_has_percent_ticks_and_integer_n_ticks_not_log2_fractions(tmp_path):
    path = plot_bon_curves(
        {"prm_score best-of-N": {"n": [1, 2], "accuracy": [0.30, 0.42], "std": []},
         "majority vote": {"n": [1, 2], "accuracy": [0.30, 0.36], "std": [0.01, 0.02]}},
        tmp_path / "bon.png")
    (ax,) = read_axes(path)
    _percent_axis_ok(ax)
    assert ax["xlabel"] == "N (solutions per problem)" and ax["xscale"] == "log"
    assert _labels(ax["xticks"]) == ["1", "2"] and _values(ax["xticks"]) == [1.0, 2.0]
    assert ax["legend"] == ["prm_score best-of-N", "majority vote"]
    assert ax["lines"][0]["y"] == [30.0, 42.0]  # drawn in percent


def test_all_zero_curves_get_a_readable_axis_and_a_note(tmp_path):
    path = plot_curves([Panel([Curve("best-of-N", [1, 2, 4], [0, 0, 0]),
                               Curve("pass@N", [1, 2, 4], [0, 0, 0], kind="reference")],
                              "N (solutions per problem)")], tmp_path / "zero.png")
    (ax,) = read_axes(path)
    _percent_axis_ok(ax)
    assert _values(ax["yticks"]) == [0, 2, 4, 6, 8, 10]  # not -0.04..0.04
    assert ax["ylim"][0] < 0  # a marker at 0% is drawn whole
    assert _labels(ax["xticks"]) == ["1", "2", "4"]
    assert "every point is at 0.0%" in ax["texts"]


def test_eval_search_plot_percent_axis_n_ticks_visible_weighted_vote_and_report(tmp_path,
                                                                               capsys):
    from test_search_cli import _result, _write

    files = [
        _write(tmp_path / "beam4.jsonl", [
            _result("p1", "beam_search", 4, ["1", "2"], [.8, .2], 1, 100, weighted=1),
            _result("p2", "beam_search", 4, ["3", "4"], [.6, .5], 0, 60, weighted=1)]),
        _write(tmp_path / "dvts4.jsonl", [
            _result("p1", "dvts", 4, ["1", "2"], [.8, .2], 1, 90),
            _result("p2", "dvts", 4, ["3", "4"], [.6, .5], 0, 70)]),
    ]
    out = tmp_path / "report"
    argv = ["eval", "search", "--out-dir", str(out), "--trials", "10"]
    for f in files:
        argv += ["--results", f]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert not printed.lstrip().startswith("{")  # a summary, not the JSON
    assert "beam_search (weighted vote)" in printed and "N=4" in printed
    by_tokens, by_n = read_axes(out / "search_curves.png")
    for ax in (by_tokens, by_n):
        _percent_axis_ok(ax)
        assert "every point is at 0.0%" in ax["texts"]  # nothing solved: said, not hidden
    assert by_tokens["xlabel"] == "generated tokens per problem"
    assert _labels(by_tokens["xticks"]) == ["80"]  # both methods spent 80 tokens a problem
    assert by_n["xlabel"] == "N (candidates per problem)" and _labels(by_n["xticks"]) == ["4"]
    lines = {ln["label"]: ln for ln in by_n["lines"]}
    plain, weighted = lines["beam_search"], lines["beam_search (weighted vote)"]
    assert weighted["hollow"] and weighted["markersize"] > plain["markersize"]
    assert weighted["zorder"] < plain["zorder"]  # the plain marker drawn on top, inside
    assert len({ln["marker"] for ln in by_n["lines"]}) == len(by_n["lines"])
    report = (out / "report.md").read_text()
    assert "{'" not in report and "points[0].method | beam_search" in report


def test_eval_bon_plot_read_back(tmp_path, capsys):
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(
        json.dumps({"problem": f"p{i % 2}", "answer": str(i % 3), "is_correct": i % 3 == 0,
                    "prm_score": (i % 5) / 5}) + "\n" for i in range(16)))
    assert main(["eval", "bon", "--samples", str(samples), "--score-key", "prm_score",
                 "--plot", str(tmp_path / "bon.png")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("best-of-N on 2 problems (prm_score, exact estimator):")
    assert "pass@N" in printed and "N=8" in printed
    (ax,) = read_axes(tmp_path / "bon.png")
    _percent_axis_ok(ax)
    assert _labels(ax["xticks"]) == ["1", "2", "4", "8"]
    assert ax["legend"] == ["prm_score best-of-N", "majority vote"]


def test_calibration_plot_read_back(tmp_path):
    path = plot_calibration(calibration_bins([0.1, 0.9, 0.8, 0.85], [0, 1, 0, 1], 10),
                            tmp_path / "cal.png")
    (ax,) = read_axes(path)
    assert ax["xlabel"] == "predicted probability that the step is correct"
    assert ax["ylabel"] == "share of steps correct"
    assert _values(ax["xticks"])[0] == 0.0 and _values(ax["xticks"])[-1] == 1.0
    assert "perfect calibration" in ax["legend"]


def test_demo_experiment_curves_use_the_helper(tmp_path):
    from prmkit.demo.core.report import plot_series

    series = {"PRM": {"x": [8, 16, 32], "mean": [0.2, 0.25, 0.3], "std": [0.01, 0.02, 0.0],
                      "color": "C0"},
              "fit: PRM": {"x": [8, 16, 32], "mean": [0.2, 0.25, 0.3], "std": [0, 0, 0],
                           "ls": ":", "color": "C0"}}
    (ax,) = read_axes(plot_series(series, tmp_path / "s.png", "samples per problem", "t"))
    assert ax["ylabel"] == "% of test problems solved"
    assert all(t["label"].endswith("%") for t in ax["yticks"])
    assert _labels(ax["xticks"]) == ["8", "16", "32"] and ax["xlabel"] == "samples per problem"
