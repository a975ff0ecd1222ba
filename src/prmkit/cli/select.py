"""`prmkit select`: pick one sample per problem (best score, majority or weighted vote)."""

from __future__ import annotations

import sys

import numpy as np

from prmkit.cli.outputs import add_existing_output_arguments, check_file_outputs
from prmkit.data.io import atomic_write, dumps_line
from prmkit.scoring.aggregate import AGGREGATIONS


def cmd_select(args) -> int:
    from prmkit.evaluation.samples import group_samples, read_samples, sample_score
    from prmkit.selection.vote import (
        AnswerClusterer,
        best_of_n,
        default_equivalence,
        majority_vote,
        normalize_answer,
        weighted_vote,
    )

    check_file_outputs(args, args.output)
    equivalent = (
        (lambda a, b: normalize_answer(a) == normalize_answer(b))
        if args.grader == "exact" else default_equivalence()
    )
    clusterer = AnswerClusterer(equivalent)
    rng = np.random.default_rng(args.seed) if args.seed is not None else None
    lines = []
    for group in group_samples(read_samples(args.input)).values():
        answered = [s for s in group if s.answer is not None] or group
        scores = [sample_score(s, args.score_key, args.aggregation) for s in answered]
        answers = [s.answer for s in answered]
        if args.method == "best" or all(a is None for a in answers):
            i = best_of_n(scores, rng)
        elif args.method == "majority":
            i = majority_vote(answers, clusterer=clusterer, rng=rng)
        else:
            i = weighted_vote(answers, scores, clusterer=clusterer, rng=rng)
        chosen = dict(answered[i].record)
        chosen["selection"] = {"method": args.method, "score_key": args.score_key,
                               "score": scores[i], "candidates": len(group)}
        lines.append(dumps_line(chosen))
    if args.output:
        with atomic_write(args.output) as f:
            f.writelines(lines)
    else:
        sys.stdout.buffer.writelines(lines)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("select", help="pick one sample per problem")
    p.add_argument("--input", required=True, help="scored samples (JSONL or JSON)")
    p.add_argument("--score-key", required=True, help="score field, e.g. prm_score")
    p.add_argument("--method", choices=("best", "majority", "weighted"), default="best")
    p.add_argument("--aggregation", choices=AGGREGATIONS, default="prod",
                   help="for list-valued scores (per-step probabilities)")
    p.add_argument("--grader", choices=("prmkit", "exact"), default="prmkit",
                   help="answer equivalence used by the votes")
    p.add_argument("--seed", type=int, default=None, help="break ties at random (seeded)")
    p.add_argument("-o", "--output", help="write JSONL here (default: stdout)")
    add_existing_output_arguments(p)
    p.set_defaults(func=cmd_select)
