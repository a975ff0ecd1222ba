"""`prmkit generate`: sample step-by-step solutions for a problems file."""

from __future__ import annotations

import sys

from prmkit.cli.backend_options import (
    add_backend_arguments,
    add_model_argument,
    add_sampling_arguments,
    backend_options,
    check_model,
)
from prmkit.cli.outputs import add_existing_output_arguments


def unescape(text: str) -> str:
    """`--step-separator '\\n\\n'` typed in a shell means two newlines."""
    return text.replace("\\n", "\n").replace("\\t", "\t")


def cmd_generate(args) -> int:
    from prmkit.data.math_problems import read_problems
    from prmkit.data.paths import check_output
    from prmkit.generation import SamplingParams, get_sampler
    from prmkit.generation.files import generate_file
    from prmkit.generation.prompts import get_format

    check_model(args)
    # where it writes and what it reads, before the model is loaded
    check_output(args.output, overwrite=args.overwrite, resume=args.resume,
                 resume_flag="--resume")
    read_problems(args.problems, args.limit)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p,
                            max_tokens=args.max_tokens)
    fmt = get_format(args.prompt_format, unescape(args.step_separator))
    with get_sampler(args.backend, args.model, **backend_options(args)) as sampler:
        report = generate_file(sampler, args.problems, args.output, n=args.n, params=params,
                               seed=args.seed, prompt_format=fmt, resume=args.resume,
                               progress=not args.no_progress, force=args.force,
                               overwrite=args.overwrite, limit=args.limit,
                               chunk_size=args.chunk_size)
    print(report.summary(), file=sys.stderr)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="sample step-by-step solutions for a problems file",
        description="Writes n samples per problem, one JSONL line each, in the scored-samples "
                    "schema that `prmkit score` and `prmkit eval bon` read. An existing output "
                    "is continued with --resume (an interrupted run) or replaced with "
                    "--overwrite, and refused without either.")
    add_model_argument(p, "a model folder (hf, vllm), the smollm2-135m alias, or the "
                          "server's model name (openai)")
    p.add_argument("--problems", required=True,
                   help="MATH-style JSONL/JSON: problem, answer, unique_id, subject, level")
    p.add_argument("-o", "--output", required=True, help="JSONL output")
    p.add_argument("--backend", choices=("hf", "vllm", "openai"), default="hf",
                   help="hf: transformers generate, no extra dependency (default); vllm: fast "
                        "in-process engine; openai: an OpenAI-compatible server")
    p.add_argument("--n", type=int, default=64, help="samples per problem")
    add_sampling_arguments(p, "most tokens per sample")
    p.add_argument("--seed", type=int, default=0,
                   help="base of the per-sample seeds (same seed, same samples)")
    p.add_argument("--prompt-format", choices=("fewshot", "chat"), default="fewshot",
                   help="fewshot: worked examples as text (base models); chat: the model's "
                        "chat template with a system instruction (instruct models)")
    p.add_argument("--step-separator", default="\n\n",
                   help="the PRM's step separator; '\\n' escapes are read as newlines")
    p.add_argument("--limit", type=int, default=None, help="only the first K problems")
    p.add_argument("--chunk-size", type=int, default=64,
                   help="samples per backend call; the output is flushed after each")
    add_existing_output_arguments(p, "skip the samples already there, add the missing ones")
    p.add_argument("--force", action="store_true",
                   help="with --resume: continue an output generated with another model or "
                        "other settings")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_backend_arguments(p)
    p.set_defaults(func=cmd_generate)
