"""prmkit.evaluation: best-of-N curves, ProcessBench, PRMBench, step metrics, reports."""

from prmkit.evaluation.bon import (
    PAPER_POOL_SIZE,
    PAPER_TRIALS,
    Curves,
    ProblemPool,
    bon_curves,
    bon_exact,
    bon_pick_mean,
    default_ns,
    pass_at_n,
    simulate,
)
from prmkit.evaluation.plots import plot_bon_curves, plot_calibration
from prmkit.evaluation.report import write_report
from prmkit.evaluation.steps import (
    accuracy_at,
    auroc,
    calibration_bins,
    expected_calibration_error,
    first_error_accuracy,
    step_metrics,
)

__all__ = [
    "PAPER_POOL_SIZE",
    "PAPER_TRIALS",
    "Curves",
    "ProblemPool",
    "accuracy_at",
    "auroc",
    "bon_curves",
    "bon_exact",
    "bon_pick_mean",
    "calibration_bins",
    "default_ns",
    "expected_calibration_error",
    "first_error_accuracy",
    "pass_at_n",
    "plot_bon_curves",
    "plot_calibration",
    "simulate",
    "step_metrics",
    "write_report",
]
