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
    first_error_accuracy,
    has_wrong_step,
    warn_if_one_class,
)
from prmkit.evaluation.subsets import stratified_subset


def labelled_predictions(model, examples: Sequence[StepExample], batch_tokens: int = 4096,
                         bf16: bool | str = "auto", progress: bool = True
                         ) -> tuple[np.ndarray, np.ndarray, list[dict[int, float]]]:
    """(P(correct), label 0/1) for every distinct labelled step of `examples`, and per
    example its steps' P(correct) by step index (a shared step serves every example
    that holds it)."""
    if getattr(model, "spec", None) is not None:  # a published PRM: scored whole
        return _scored_predictions(model, examples, batch_tokens, bf16, progress)
    from prmkit.training.batching import predict_rows, token_batches
    from prmkit.training.packing import pack_examples

    cfg = model.config
    rows = pack_examples(examples, model.encoder, cfg.step_format.max_length, cfg.num_classes,
                         cfg.objective, "unique")
    tok = model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    device = next(model.parameters()).device
    pred = predict_rows(model, rows, pad, batch_tokens, bf16=bf16, device=device,
                        progress=progress)
    # predict_rows reads the labels batch by batch, row by row: the same order here
    sources = [src for b in token_batches([len(r) for r in rows], batch_tokens)
               for r in b for src in rows[r].sources]
    per_example: list[dict[int, float]] = [{} for _ in examples]
    for p, src in zip(pred.probs.tolist(), sources, strict=True):
        for ex, step in src:
            per_example[ex][step] = p
    return pred.probs, (pred.truth >= 0.5).astype(np.int64), per_example


def _scored_predictions(model, examples: Sequence[StepExample], batch_tokens: int,
                        bf16: bool | str,
                        progress: bool) -> tuple[np.ndarray, np.ndarray, list[dict[int, float]]]:
    """`labelled_predictions` for a published PRM (tokenised whole, so no prefix-tree
    packing): every example scored by the Scorer; a labelled step that several examples
    share (the same problem and steps up to it) counts once."""
    from prmkit.scoring.scorer import Scorer

    scorer = Scorer(model, token_budget=max(batch_tokens, model.encoder.fmt.max_length),
                    dtype="auto" if bf16 == "auto" else ("bf16" if bf16 else None))
    scores = scorer.score([(ex.problem, ex.steps) for ex in examples], progress=progress)
    probs, truth, seen, per_example = [], [], set(), []
    for ex, step_probs in zip(examples, scores, strict=True):
        mine = {}
        for i, (p, y) in enumerate(zip(step_probs, ex.labels)):
            if p is None or y is None:
                continue
            mine[i] = p
            if (ex.problem, ex.steps[: i + 1]) not in seen:
                seen.add((ex.problem, ex.steps[: i + 1]))
                probs.append(p)
                truth.append(y)
        per_example.append(mine)
    return np.array(probs), (np.array(truth) >= 0.5).astype(np.int64), per_example


def first_errors(examples: Sequence[StepExample], per_example: Sequence[dict[int, float]]
                 ) -> tuple[list[list[float | None]], list[list[int]]]:
    """Per example, the scores and 0/1 labels of its labelled steps up to the first
    unlabelled one (a step without a prediction, cut at max_length, scores None)."""
    scores, labels = [], []
    for ex, probs in zip(examples, per_example, strict=True):
        cut = next((i for i, v in enumerate(ex.labels) if v is None), len(ex.labels))
        scores.append([probs.get(i) for i in range(cut)])
        labels.append([int(v >= 0.5) for v in ex.labels[:cut]])
    return scores, labels


def model_step_metrics(model_dir: str, data: Sequence[str], data_format: str | None = None,
                       threshold: float = 0.5, n_bins: int = 10, batch_tokens: int = 4096,
                       bf16: bool | str = "auto", progress: bool = True, device: str = "auto",
                       attn_implementation: str | None = None, limit: int | None = None,
                       seed: int = 0, format: str | None = None,
                       trust_remote_code: bool = False) -> dict:
    """AUROC, accuracy, ECE, calibration and first-error accuracy of a saved model on
    labelled files, read and labelled with the paper's supervision policy
    (prmkit.data.PolicyOptions defaults); `limit`: a seeded subset of the examples, in
    proportion with and without a wrong step. device: auto runs on the GPU when there
    is one. format, trust_remote_code: a published PRM (docs/models.md)."""
    from prmkit.data import PolicyOptions, apply_policy, read_records
    from prmkit.models.backbones import resolve_device
    from prmkit.models.loading import load_reward_model

    model = load_reward_model(model_dir, device=resolve_device(device),
                              attn_implementation=attn_implementation, format=format,
                              trust_remote_code=trust_remote_code)
    examples = [ex for path in data
                for ex in apply_policy(read_records(path, format=data_format), PolicyOptions())]
    available = len(examples)
    examples = stratified_subset(examples, limit, has_wrong_step, seed)
    probs, labels, per_example = labelled_predictions(model, examples, batch_tokens, bf16,
                                                      progress)
    result = {
        "n_steps": int(len(probs)),
        "n_examples": len(examples),
        "threshold": threshold,
        "auroc": auroc(probs, labels),
        "accuracy": accuracy_at(probs, labels, threshold),
        "ece": expected_calibration_error(probs, labels, n_bins),
        "first_error_accuracy": first_error_accuracy(*first_errors(examples, per_example),
                                                     threshold),
        "calibration": calibration_bins(probs, labels, n_bins),
    }
    if limit is not None:
        result["limit"] = {"examples": len(examples), "of": available, "seed": seed}
    warn_if_one_class(result["auroc"], labels)
    return result
