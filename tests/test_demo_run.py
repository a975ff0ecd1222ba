import json

from prmkit.cli import main
from prmkit.demo.run import quick_config, run_demo


def test_quick_demo_writes_metrics_report_and_plots(tmp_path):
    cfg = quick_config((0, 1))
    cfg.progress = False
    summary = run_demo(tmp_path, cfg)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("prm", "orm", "majority", "prm_std", "orm_std", "majority_std"):
        assert len(metrics[key]) == len(metrics["n"]) == 4
        assert all(0.0 <= v <= 1.0 for v in metrics[key])
    assert metrics["seeds"] == 2 and metrics["seconds"] > 0
    # pass@N bounds every selection method (majority is Monte Carlo: allow its noise),
    # and best-of-1 is the same for PRM and ORM.
    for key, tol in (("prm", 1e-9), ("orm", 1e-9), ("majority", 0.05)):
        assert all(v <= p + tol for v, p in zip(metrics[key], metrics["pass"]))
    assert abs(metrics["prm"][0] - metrics["orm"][0]) < 1e-9
    assert summary["statement"].startswith("At N=8")
    html = (tmp_path / "report.html").read_text()
    assert "bon_curves.png" in html and (tmp_path / "bon_curves.png").stat().st_size > 0
    assert (tmp_path / "calibration.png").stat().st_size > 0


def test_demo_cli_rejects_bad_seeds(capsys):
    assert main(["demo", "--seeds", "a,b"]) == 2
    assert "--seeds" in capsys.readouterr().err
