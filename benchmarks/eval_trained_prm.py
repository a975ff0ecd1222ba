"""Results of a trained PRM: phase-1 test step metrics and ProcessBench F1.

Not part of `make bench` (it needs a trained model: see BENCHMARKS.md, "Real PRM").
    python benchmarks/eval_trained_prm.py --run /work/prmkit-runs/prm800k_phase1_smollm2_prm

Writes
- benchmarks/results/train_prm800k_phase1.json: the run's final phase-1 test evaluation
  (AUROC and accuracy over distinct labelled steps, logged by the trainer) and its setup;
- benchmarks/results/processbench.json: ProcessBench F1 on all four subsets for the model
  (first step with P(correct) < threshold) and for the always-"no error" baseline.
ProcessBench scoring streams to RUN/processbench/scores.jsonl and resumes after a stop.
Solutions are scored in a seeded order that interleaves the subsets, so a stopped run
holds a random sample of every subset: `--scored-only` reports F1 on the items scored so
far (the counts are in the JSON) without scoring more.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from itertools import zip_longest
from pathlib import Path

import numpy as np

from prmkit.data.io import dumps_line, iter_jsonl
from prmkit.evaluation import processbench as pb
from prmkit.scoring import Scorer

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_PROCESSBENCH = HERE.parent.parent / "shared" / "data" / "processbench"


def training_results(run: Path, command: str) -> dict:
    config = json.loads((run / "config.json").read_text())
    stats_file = run / "data_stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    records = [rec for _, rec in iter_jsonl(run / "metrics.jsonl")]
    evals = [r for r in records if r.get("type") == "eval"]
    if not evals:
        sys.exit(f"{run / 'metrics.jsonl'} has no eval record: has the run finished?")
    ev = evals[-1]
    steps = max(r["step"] for r in records if r.get("type") == "train")
    return {
        "auroc": ev["eval_auroc"],
        "accuracy": ev["eval_accuracy"],
        "eval_loss": ev["eval_loss"],
        "eval_labels": ev["eval_labels"],
        "epochs": float(config["epochs"]),
        "optimizer_steps": steps,
        "backbone": config["backbone"],
        "formulation": config["model"]["formulation"],
        "lora": config["lora"],
        # config.json may say "auto"; data_stats.json has the weighting that was used
        "label_weighting": stats.get("label_weighting", config["label_weighting"]),
        "train_data": config["data"]["train"],
        "eval_data": config["data"]["eval"],
        "command": command,
    }


def interleaved(items: dict[str, list], seed: int = 0) -> list:
    """Every subset shuffled (seeded), then taken in turn: any prefix samples every subset."""
    rng = np.random.default_rng(seed)
    shuffled = [[sub[i] for i in rng.permutation(len(sub))] for sub in items.values()]
    return [it for group in zip_longest(*shuffled) for it in group if it is not None]


def processbench_scores(model_dir: Path, items: dict, work: Path, batch_tokens: int,
                        scored_only: bool):
    work.mkdir(parents=True, exist_ok=True)
    inputs, scores_path = work / "input.jsonl", work / "scores.jsonl"
    if not scored_only:
        with open(inputs, "wb") as f:
            for it in interleaved(items):
                f.write(dumps_line({"id": it.id, "problem": it.problem, "steps": it.steps}))
        scorer = Scorer.from_pretrained(model_dir, token_budget=batch_tokens)
        t0 = time.time()
        report = scorer.score_file(inputs, scores_path, resume=scores_path.exists())
        print(report.summary(), f"in {time.time() - t0:.0f} s", file=sys.stderr)
    scores = {rec["id"]: rec["step_scores"] for _, rec in iter_jsonl(scores_path)}
    truncated = sum(v is None for s in scores.values() for v in s)
    return scores, truncated  # null (cut by max_length) counts as 0.0 in `pb`: flagged


def processbench_results(items, scores, threshold: float, tune_fraction: float) -> dict:
    model = pb.evaluate(items, pb.threshold_predictions(scores, threshold))
    baseline = pb.evaluate(items, {it.id: -1 for sub in items.values() for it in sub})
    tune, rest = pb.split_items(items, tune_fraction, seed=0)
    tuned_t, tuned_f1 = pb.choose_threshold(tune, scores)
    return {
        "model": model | {"threshold": threshold},
        "no_error_baseline": baseline,
        "model_tuned_threshold": pb.evaluate(rest, pb.threshold_predictions(scores, tuned_t))
        | {"threshold": tuned_t, "tuned_on_fraction": tune_fraction, "tune_average_f1": tuned_f1,
           "note": "threshold chosen on a seeded share of every subset, F1 on the rest"},
        "items": {s: len(v) for s, v in items.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="output_dir of a finished `prmkit train` run")
    ap.add_argument("--model", help="model folder (default RUN/model)")
    ap.add_argument("--processbench", default=str(DEFAULT_PROCESSBENCH))
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--tune-fraction", type=float, default=0.2)
    ap.add_argument("--batch-tokens", type=int, default=16384)
    ap.add_argument("--limit", type=int, help="first N items per subset (a quick check)")
    ap.add_argument("--note", help="free text stored with the training results")
    ap.add_argument("--skip-processbench", action="store_true")
    ap.add_argument("--scored-only", action="store_true",
                    help="no scoring: ProcessBench F1 on the items already in the scores file")
    args = ap.parse_args()
    run = Path(args.run)
    model_dir = Path(args.model) if args.model else run / "model"
    command = shlex.join(["python", "benchmarks/eval_trained_prm.py", *sys.argv[1:]])
    RESULTS.mkdir(exist_ok=True)

    train = training_results(run, command)
    if args.note:
        train["note"] = args.note
    (RESULTS / "train_prm800k_phase1.json").write_text(json.dumps(train, indent=2) + "\n")
    print(json.dumps({k: train[k] for k in ("auroc", "accuracy", "epochs", "backbone")}))
    if args.skip_processbench:
        return
    t0 = time.time()
    items = pb.load_processbench(Path(args.processbench))
    if args.limit:
        items = {s: v[:args.limit] for s, v in items.items()}
    scores, truncated = processbench_scores(model_dir, items, run / "processbench",
                                            args.batch_tokens, args.scored_only)
    totals = {s: len(v) for s, v in items.items()}
    items = {s: [it for it in v if it.id in scores] for s, v in items.items()}
    result = processbench_results(items, scores, args.threshold, args.tune_fraction)
    result["items_total"] = totals
    result |= {"model_dir": str(model_dir), "backbone": train["backbone"],
               "seconds": round(time.time() - t0, 1), "truncated_steps": truncated,
               "limit_per_subset": args.limit,
               "command": command}
    (RESULTS / "processbench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"model_average_f1": result["model"]["average_f1"],
                      "no_error_average_f1": result["no_error_baseline"]["average_f1"]}))


if __name__ == "__main__":
    main()
