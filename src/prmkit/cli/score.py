"""`prmkit score`: per-step scores of solutions from a trained reward model."""

from __future__ import annotations

import sys

from prmkit.cli.outputs import add_existing_output_arguments
from prmkit.cli.prm_options import add_prm_arguments
from prmkit.scoring.aggregate import AGGREGATIONS


def add_device_arguments(parser) -> None:
    """--device and --attn-implementation of a command that loads a reward model."""
    parser.add_argument("--device", default="auto",
                        help="auto (default: the GPU when there is one), cpu, cuda, cuda:1")
    parser.add_argument("--attn-implementation", default=None,
                        choices=("eager", "sdpa", "flex_attention", "flash_attention_2"),
                        help="attention kernels (default: sdpa)")


def cmd_score(args) -> int:
    from prmkit.cli.prm_options import prm_load_options
    from prmkit.scoring.files import check_score_paths, score_file
    from prmkit.scoring.parallel import DataParallel
    from prmkit.scoring.scorer import Scorer

    # the output and every input line are checked before the model is loaded
    check_score_paths(args.input, args.output, resume=args.resume, overwrite=args.overwrite)
    parallel = DataParallel.from_environment()
    try:
        scorer = Scorer.from_pretrained(args.model, token_budget=args.batch_tokens,
                                        dtype=args.dtype, device=args.device,
                                        attn_implementation=args.attn_implementation,
                                        parallel=parallel, **prm_load_options(args))
        report = score_file(scorer, args.input, args.output, aggregation=args.aggregation,
                            resume=args.resume, overwrite=args.overwrite,
                            progress=not args.no_progress, force=args.force)
    except BaseException:
        parallel.close(wait=False)
        raise
    parallel.close()
    if parallel.is_main:
        print(report.summary(), file=sys.stderr)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score", help="score every step of solutions with a trained reward model",
        description="Reads JSONL lines {id?, problem, steps} (or OpenAI's scored-samples "
                    "schema) and writes each line plus step_scores and score. Under torchrun "
                    "or accelerate launch every process scores a share of the lines (one GPU "
                    "each) and the first writes them in input order.")
    p.add_argument("--model", required=True,
                   help="a folder written by save_pretrained, a published PRM's folder or "
                        "Hub id (see --format)")
    add_prm_arguments(p)
    p.add_argument("--input", required=True, help="JSONL input")
    p.add_argument("-o", "--output", required=True, help="JSONL output")
    p.add_argument("--batch-tokens", type=int, default=16384,
                   help="most tokens (padding included) per forward pass")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp16", "fp32"), default="auto",
                   help="auto: bf16 where the device computes it natively, else fp32")
    add_device_arguments(p)
    p.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                   help="solution score from step scores (default: the model's setting)")
    add_existing_output_arguments(p, "skip lines already scored, append")
    p.add_argument("--force", action="store_true",
                   help="with --resume: append even if the output's lines were scored by "
                        "another model or with other settings (their scored_by record)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_score)


if __name__ == "__main__":  # `torchrun --nproc_per_node N -m prmkit.cli.score ...`
    from prmkit.cli import exit_launched, main

    exit_launched(main(["score", *sys.argv[1:]]))
