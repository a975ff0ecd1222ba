"""Step metrics of a trained model on step-labelled data (e.g. PRM800K phase-1 test).

The labelled examples are tree-packed exactly as in training, so every distinct labelled
step (a rated candidate after its prefix) is predicted once, in one forward pass per
packed row, and counts once in the metrics.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prmkit.data.records import StepExample
from prmkit.evaluation.steps import (
    accuracy_at,
    auroc,
    calibration_bins,
    expected_calibration_error,
)


def labelled_predictions(model, examples: Sequence[StepExample], batch_tokens: int = 4096,
                         bf16: bool = True, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(P(correct), label 0/1) for every distinct labelled step of `examples`."""
    from prmkit.training.batching import predict_rows
    from prmkit.training.packing import pack_examples

    cfg = model.config
    rows = pack_examples(examples, model.encoder, cfg.step_format.max_length, cfg.num_classes,
                         cfg.objective, "unique")
    tok = model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    device = next(model.parameters()).device
    pred = predict_rows(model, rows, pad, batch_tokens, bf16=bf16, device=device,
                        progress=progress)
    return pred.probs, (pred.truth >= 0.5).astype(np.int64)


def model_step_metrics(model_dir: str, data: Sequence[str], data_format: str | None = None,
                       threshold: float = 0.5, n_bins: int = 10, batch_tokens: int = 4096,
                       bf16: bool = True, progress: bool = True, device: str = "auto",
                       attn_implementation: str | None = None) -> dict:
    """AUROC, accuracy, ECE and calibration of a saved model on labelled files, read and
    labelled with the paper's supervision policy (prmkit.data.PolicyOptions defaults).
    device: auto runs on the GPU when there is one."""
    from prmkit.data import PolicyOptions, apply_policy, read_records
    from prmkit.models.backbones import resolve_device
    from prmkit.models.reward_model import StepRewardModel

    model = StepRewardModel.from_pretrained(model_dir, device=resolve_device(device),
                                            attn_implementation=attn_implementation)
    examples = [ex for path in data
                for ex in apply_policy(read_records(path, format=data_format), PolicyOptions())]
    probs, labels = labelled_predictions(model, examples, batch_tokens, bf16, progress)
    return {
        "n_steps": int(len(probs)),
        "n_examples": len(examples),
        "threshold": threshold,
        "auroc": auroc(probs, labels),
        "accuracy": accuracy_at(probs, labels, threshold),
        "ece": expected_calibration_error(probs, labels, n_bins),
        "calibration": calibration_bins(probs, labels, n_bins),
    }
