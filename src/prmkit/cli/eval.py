"""`prmkit eval`: best-of-N curves, ProcessBench, PRMBench, step metrics and search results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prmkit.cli import eval_summary
from prmkit.cli.eval_output import emit, show_progress
from prmkit.cli.eval_predictions import check_predictions_match, read_predictions, step_scores
from prmkit.cli.outputs import check_file_outputs
from prmkit.data.io import iter_jsonl
from prmkit.errors import DataError, PrmkitError
from prmkit.evaluation.rules import RULES
from prmkit.scoring.aggregate import AGGREGATIONS

DEFAULT_PROCESSBENCH = Path("../shared/data/processbench")
DEFAULT_PRMBENCH = Path("../shared/data/prmbench")


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _pool_size(text: str) -> int | None:
    if text.lower() in ("none", "0"):
        return None
    return int(text)


def _grader(name: str):
    from prmkit.selection.vote import default_equivalence, normalize_answer

    if name == "exact":
        return lambda a, b: normalize_answer(a) == normalize_answer(b)
    return default_equivalence()


def cmd_bon(args) -> int:
    from prmkit.evaluation.bon import bon_curves, padding
    from prmkit.evaluation.plots import plot_bon_curves
    from prmkit.evaluation.samples import build_pools, read_samples
    from prmkit.selection.vote import AnswerClusterer

    check_file_outputs(args, args.output, args.plot)
    samples = read_samples(args.samples)
    if not samples:
        raise DataError(args.samples, None, None, "no samples: the file has no records")
    equivalent = _grader(args.grader)
    clusterer = None if args.no_majority else AnswerClusterer(equivalent)
    keys = [args.score_key] + list(args.extra_key or [])
    result: dict = {}
    series = {}
    for i, key in enumerate(keys):
        pools = build_pools(samples, key, aggregation=args.aggregation,
                            clusterer=clusterer if i == 0 else None)
        votes = [] if (i > 0 or args.no_majority) else ["majority"]
        curves = bon_curves(pools, args.n, estimator=args.estimator, pool_size=args.pool_size,
                            trials=args.trials, seed=args.seed, votes=votes,
                            progress=show_progress(args))
        series[f"{key} best-of-N"] = {"n": curves.n, "accuracy": curves.accuracy["best"],
                                      "std": curves.std["best"]}
        if i == 0:
            result = {
                "n": curves.n,
                "accuracy": curves.accuracy["best"],
                "std": curves.std["best"],
                "majority": curves.accuracy.get("majority", []),
                "majority_std": curves.std.get("majority", []),
                "pass_at_n": curves.accuracy["pass"],
                "estimator": args.estimator,
                "pool_size": args.pool_size,
                "padding": padding(pools, args.pool_size),
                "trials": args.trials,
                "problems": len(pools),
                "score_key": key,
            }
            if "majority" in curves.accuracy:
                series["majority vote"] = {"n": curves.n, "accuracy": curves.accuracy["majority"],
                                           "std": curves.std["majority"]}
        else:
            result.setdefault("curves", {})[key] = {"accuracy": curves.accuracy["best"],
                                                   "std": curves.std["best"]}
    if result["padding"]:
        pad = result["padding"]
        print(f"padding: every pool padded to {pad['pool_size']} slots (--pool-size; "
              f"{pad['problems_padded']} of {result['problems']} problems, "
              f"{pad['empty_slots']} empty slots in all)", file=sys.stderr)
    if args.plot:
        plot_bon_curves(series, args.plot, title=f"Best-of-N on {Path(args.samples).name}")
    emit(result, args, eval_summary.bon)
    return 0


def _model_progress(args) -> bool:
    """Scoring with a model takes minutes: a bar on a terminal, lines in a log or a pipe
    (prmkit.progress); none with --json."""
    return not args.json


def _score_with_model(model_dir: str, problems_and_steps: dict[str, tuple[str, list[str]]],
                      args):
    """Step probabilities per id from a trained model via prmkit.scoring.Scorer (None for a
    step cut by the model's max length; the metrics count it as NULL_STEP_SCORE)."""
    from prmkit.cli.prm_options import prm_load_options
    from prmkit.scoring import Scorer

    scorer = Scorer.from_pretrained(model_dir, device=args.device,
                                    attn_implementation=args.attn_implementation,
                                    **prm_load_options(args))
    ids = list(problems_and_steps)
    probs = scorer.score([problems_and_steps[i] for i in ids], progress=_model_progress(args))
    return dict(zip(ids, probs))


def _data_arg(args, given: str) -> Path:
    """A --data path, or a Hub dataset name (prmkit.data.hub) whose revision and files
    the output records."""
    from prmkit.data.hub import dataset_path

    path, source = dataset_path(given)
    if source is not None:
        args.data_sources = [*getattr(args, "data_sources", []), source]
    return path


def _default_dir(given: str | None, fallback: Path, flag: str) -> Path:
    if given:
        return Path(given)
    if fallback.exists():
        return fallback
    raise PrmkitError(f"{flag} is required ({fallback} does not exist)")


def cmd_processbench(args) -> int:
    from prmkit.evaluation import processbench as pb

    check_file_outputs(args, args.output)
    data = _data_arg(args, args.data) if args.data else None
    items = pb.load_processbench(_default_dir(data, DEFAULT_PROCESSBENCH, "--data"),
                                 args.subsets.split(",") if args.subsets else None)
    available = sum(map(len, items.values()))
    items = pb.limit_items(items, args.limit, args.seed)
    all_items = [it for sub in items.values() for it in sub]
    if args.model:
        scores = _score_with_model(args.model, {it.id: (it.problem, it.steps) for it in all_items},
                                   args)
        preds = None
    else:
        recs = read_predictions(args.predictions, ("prediction", "step_scores"))
        check_predictions_match(args.predictions, recs, {it.id for it in all_items},
                                "ProcessBench")
        preds, scores = {}, {}
        for k, rec in recs.items():
            if "prediction" in rec:
                p = rec["prediction"]
                if not isinstance(p, int) or isinstance(p, bool) or p < -1:
                    raise DataError(args.predictions, rec["_line"], "prediction",
                                    "expected a step index (int >= -1)")
                preds[k] = p
            else:
                scores[k] = step_scores(rec, args.predictions)
        if preds and scores:
            raise PrmkitError(f"{args.predictions}: mix of 'prediction' and 'step_scores' lines")
        preds = preds or None
    result: dict = {}
    if preds is None:
        evaluate_on = items
        threshold = args.threshold
        if args.tune_fraction:
            tune, evaluate_on = pb.split_items(items, args.tune_fraction, args.seed)
            threshold, tuned_f1 = pb.choose_threshold(tune, scores, rules=args.rules)
            result["tuning"] = {"fraction": args.tune_fraction, "seed": args.seed,
                                "items": sum(map(len, tune.values())), "average_f1": tuned_f1}
        preds = pb.threshold_predictions(scores, threshold, args.rules)
        result["threshold"] = threshold
        result["unscored_steps"] = pb.unscored_steps(scores)
        items = evaluate_on
    result = pb.evaluate(items, preds) | result | {"rules": args.rules}
    if args.limit is not None:
        result["limit"] = {"items": len(all_items), "of": available, "seed": args.seed}
    emit(result, args, eval_summary.processbench)
    return 0


def cmd_prmbench(args) -> int:
    from prmkit.evaluation import prmbench

    check_file_outputs(args, args.output)
    data = ([str(_data_arg(args, d)) for d in args.data] if args.data
            else [str(_default_dir(None, DEFAULT_PRMBENCH, "--data"))])
    items = prmbench.load_prmbench(data)
    available = len(items)
    items = prmbench.limit_items(items, args.limit, args.seed)
    if args.model:
        scores = _score_with_model(args.model, {it.id: (it.question, it.steps) for it in items},
                                   args)
        valid = prmbench.valid_from_scores(scores, args.threshold, args.rules)
    else:
        recs = read_predictions(args.predictions, ("step_scores", "step_valid", "validity"))
        check_predictions_match(args.predictions, recs, {it.id for it in items}, "PRMBench")
        valid = {}
        for k, rec in recs.items():
            if rec.get("validity", True) is not True:
                if rec["validity"] is not False:
                    raise DataError(args.predictions, rec["_line"], "validity",
                                    "expected true or false")
                valid[k] = None  # a prediction marked invalid
            elif "step_valid" in rec:
                v = rec["step_valid"]
                if not isinstance(v, list) or not all(isinstance(x, bool) for x in v):
                    raise DataError(args.predictions, rec["_line"], "step_valid",
                                    "expected a list of true/false")
                valid[k] = v
            elif "step_scores" not in rec:
                raise DataError(args.predictions, rec["_line"], None,
                                "expected step_scores or step_valid (validity is true)")
            else:
                scores = {k: step_scores(rec, args.predictions)}
                valid |= prmbench.valid_from_scores(scores, args.threshold, args.rules)
    result = prmbench.evaluate(items, valid, args.rules)
    result["threshold"] = args.threshold
    if args.limit is not None:
        result["limit"] = {"items": len(items), "of": available, "seed": args.seed}
    emit(result, args, eval_summary.prmbench)
    return 0


def cmd_steps(args) -> int:
    from prmkit.cli.prm_options import prm_load_options
    from prmkit.evaluation.plots import plot_calibration
    from prmkit.evaluation.steps import has_wrong_step, step_metrics
    from prmkit.evaluation.subsets import stratified_subset

    check_file_outputs(args, args.output, args.plot)
    if args.model:
        from prmkit.evaluation.labelled import model_step_metrics

        if not args.data:
            raise PrmkitError("--model needs --data: a step-labelled file (e.g. PRM800K)")
        result = model_step_metrics(args.model, args.data, args.format, args.threshold,
                                    args.bins, args.batch_tokens, device=args.device,
                                    attn_implementation=args.attn_implementation,
                                    limit=args.limit, seed=args.seed,
                                    progress=_model_progress(args), **prm_load_options(args))
        if args.plot:
            plot_calibration(result["calibration"], args.plot)
        emit(result, args, eval_summary.steps)
        return 0
    scores, labels = [], []
    for line, rec in iter_jsonl(args.predictions):
        if not isinstance(rec, dict) or "step_scores" not in rec or "labels" not in rec:
            raise DataError(args.predictions, line, None, "expected step_scores and labels")
        s, y = rec["step_scores"], rec["labels"]
        if not isinstance(s, list) or not isinstance(y, list) or len(s) != len(y):
            raise DataError(args.predictions, line, "labels",
                            "step_scores and labels must be lists of the same length")
        if any(v not in (0, 1, None) or isinstance(v, float) and v not in (0.0, 1.0) for v in y):
            raise DataError(args.predictions, line, "labels", "labels must be 0, 1 or null")
        if any(v is not None and (not isinstance(v, int | float) or isinstance(v, bool))
               for v in s):
            raise DataError(args.predictions, line, "step_scores", "expected numbers or null")
        scores.append([None if v is None else float(v) for v in s])
        labels.append([None if v is None else int(v) for v in y])
    available = len(scores)
    kept = stratified_subset(range(available), args.limit, lambda i: has_wrong_step(labels[i]),
                             args.seed)
    scores, labels = [scores[i] for i in kept], [labels[i] for i in kept]
    try:
        result = step_metrics(scores, labels, args.threshold, args.bins)
    except PrmkitError as e:
        raise DataError(args.predictions, None, None, str(e)) from None
    if args.limit is not None:
        result["limit"] = {"solutions": len(kept), "of": available, "seed": args.seed}
    if args.plot:
        plot_calibration(result["calibration"], args.plot)
    emit(result, args, eval_summary.steps)
    return 0


def rules_argument(parser, benchmark: str, prmkit: str) -> None:
    parser.add_argument("--rules", choices=RULES, default="benchmark",
                        help=f"benchmark (default): {benchmark}; prmkit: {prmkit} "
                             "(docs/evaluation.md lists the differences)")


def limit_argument(parser, what: str) -> None:
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help=f"evaluate a seeded, stratified choice of at most N {what} "
                             "(a quick look; a first-N subset can miss a class)")


def register(subparsers) -> None:
    from prmkit.cli.outputs import add_existing_output_arguments
    from prmkit.cli.prm_options import add_prm_arguments
    from prmkit.cli.score import add_device_arguments

    p = subparsers.add_parser("eval", help="evaluate scores: best-of-N (bon), ProcessBench, "
                                "PRMBench, step metrics (steps), search results")
    sub = p.add_subparsers(dest="eval_command", metavar="BENCHMARK", required=True)

    def common(q, threshold: float | None = 0.5):
        q.add_argument("--json", action="store_true",
                       help="print the metrics as JSON (default: a short summary)")
        q.add_argument("-o", "--output", help="also write the JSON metrics to this file")
        add_existing_output_arguments(q)
        if threshold is not None:
            q.add_argument("--threshold", type=float, default=threshold,
                           help=f"step score threshold (default {threshold})")

    b = sub.add_parser("bon", help="best-of-N, majority vote and pass@N curves")
    b.add_argument("--samples", required=True, help="scored samples (JSONL, JSON)")
    b.add_argument("--score-key", required=True, help="score field, e.g. prm_score")
    b.add_argument("--extra-key", action="append", help="another score field to compare")
    b.add_argument("--aggregation", choices=AGGREGATIONS, default="prod",
                   help="for list-valued scores (per-step probabilities)")
    b.add_argument("--n", type=_ints, default=None, help="comma-separated N values")
    b.add_argument("--trials", type=int, default=400)
    b.add_argument("--estimator", choices=("exact", "trials"), default="exact")
    b.add_argument("--pool-size", type=_pool_size, default=None,
                   help="pad every problem's pool with empty slots to this size before "
                        "drawing N, the paper's protocol for OpenAI's released pool (1860); "
                        "default none: N is drawn among the samples present")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--grader", choices=("prmkit", "exact"), default="prmkit",
                   help="answer equivalence for majority vote")
    b.add_argument("--no-majority", action="store_true", help="skip the majority-vote curve")
    b.add_argument("--plot", help="write a PNG of the curves")
    common(b, threshold=None)
    b.set_defaults(func=cmd_bon)

    pbp = sub.add_parser("processbench", help="ProcessBench first-error F1")
    src = pbp.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="trained model directory (scored with prmkit.scoring)")
    src.add_argument("--predictions",
                     help="JSONL of {id, prediction} or {id, step_scores} (e.g. the output "
                          "of `prmkit score`; a null step score counts as 0.0: flagged)")
    add_device_arguments(pbp)
    add_prm_arguments(pbp)
    pbp.add_argument("--data", help="ProcessBench directory (default ../shared/data/processbench)")
    pbp.add_argument("--subsets", help="comma-separated subsets (default: all found)")
    pbp.add_argument("--tune-fraction", type=float, default=None,
                     help="choose the threshold on this seeded share of items, report the rest")
    pbp.add_argument("--seed", type=int, default=0, help="for --limit and --tune-fraction")
    limit_argument(pbp, "items: every subset keeps correct and erroneous ones")
    rules_argument(pbp, "as ProcessBench's script, a step is flagged unless its score is "
                        "above the threshold, and a step without a score is not judged",
                   "flagged when below the threshold, a step without a score counting as 0.0")
    common(pbp)
    pbp.set_defaults(func=cmd_processbench)

    pr = sub.add_parser("prmbench", help="PRMBench PRMScore")
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="trained model directory (scored with prmkit.scoring)")
    src.add_argument("--predictions", help="JSONL of {id, step_scores} or {id, step_valid}, "
                                           "or {id, validity: false} for an invalid one")
    add_device_arguments(pr)
    add_prm_arguments(pr)
    pr.add_argument("--data", action="append",
                    help="PRMBench .jsonl file or directory (repeatable; default "
                         "../shared/data/prmbench)")
    limit_argument(pr, "items, in proportion per error class")
    pr.add_argument("--seed", type=int, default=0, help="for --limit")
    rules_argument(pr, "as PRMBench's toolkit, -1 for an undefined precision, recall or F1, "
                       "PRMScores clamped at 0, the steps predicted counted as they are, "
                       "fewer than 5 missing items tolerated",
                   "an F1 without steps of its class null, a step without a score invalid, "
                   "a missing item or wrong step count an error")
    common(pr)
    pr.set_defaults(func=cmd_prmbench)

    st = sub.add_parser("steps", help="AUROC, accuracy, ECE, first-error accuracy",
                        description="Step AUROC, accuracy, ECE and calibration over the "
                        "labelled steps, and first-error accuracy over the solutions (the "
                        "first step scored below the threshold is the first wrong one, or "
                        "none is), from predictions or a model on labelled data.")
    src = st.add_mutually_exclusive_group(required=True)
    src.add_argument("--predictions", help="JSONL of {step_scores, labels}")
    src.add_argument("--model", help="trained model directory, scored on --data")
    add_device_arguments(st)
    add_prm_arguments(st, format_flag=False)
    st.add_argument("--data", action="append",
                    help="with --model: step-labelled file(s), any format prmkit reads")
    st.add_argument("--format", help="with --model: the data format (default: detected)")
    st.add_argument("--batch-tokens", type=int, default=4096, help="with --model")
    st.add_argument("--bins", type=int, default=10, help="calibration bins")
    st.add_argument("--plot", help="write a calibration PNG")
    limit_argument(st, "solutions, in proportion with and without a wrong step")
    st.add_argument("--seed", type=int, default=0, help="for --limit")
    common(st)
    st.set_defaults(func=cmd_steps)

    from prmkit.cli.eval_search import add_parser

    add_parser(sub, common)
