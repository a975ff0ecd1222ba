"""`prmkit search`: PRM-guided search (best-of-N, weighted best-of-N, beam search, DVTS)
over a problems file, one JSON line per problem.

Each line is a `SearchResult` (final candidates with steps, step scores, aggregated score
and answer; the chosen index and answer; generated and PRM tokens) plus the gold `answer`
when the problems file has one, and a `search` record: the config, the generator, the
PRM's fingerprint and the prompt format's hash. Resuming skips the problems already in
the output and refuses one written with another `search` record unless --force.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from prmkit.cli.backend_options import (
    add_backend_arguments,
    add_model_argument,
    add_sampling_arguments,
    backend_options,
    check_model,
)
from prmkit.cli.outputs import add_existing_output_arguments
from prmkit.cli.prm_options import add_prm_arguments
from prmkit.data.io import LazyOutput, dumps_line
from prmkit.data.math_problems import problem_key, read_problems
from prmkit.data.paths import check_output
from prmkit.data.resume import read_written, refuse_other_writer
from prmkit.errors import DataError, PrmkitError
from prmkit.scoring.aggregate import AGGREGATIONS
from prmkit.search.config import APPROACHES

log = logging.getLogger("prmkit.search")
COMPARED = ("config", "generator", "prm", "prompt")


def _option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise PrmkitError(f"--backend-option expects KEY=VALUE, got {text!r}")
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value


def _result_id(path: str, lineno: int, obj) -> str:
    if not isinstance(obj, dict) or "id" not in obj:
        raise DataError(path, lineno, "id", "not a search result line")
    return str(obj["id"])


def check_same_search(path: Path, saved: dict, current: dict) -> None:
    """Refuse to append to `path` with another config, generator, PRM or prompt; only the
    generator fields known so far (before the backend is built) are compared."""
    saved = dict(saved)
    if isinstance(saved.get("generator"), dict):
        saved["generator"] = {k: saved["generator"].get(k) for k in current["generator"]}
    refuse_other_writer(path, saved, current, COMPARED, "written by another search")


def build_config(args, separator: str):
    from prmkit.generation.base import SamplingParams
    from prmkit.search.config import SearchConfig

    return SearchConfig(
        approach=args.approach, n=args.n, beam_width=args.beam_width, max_steps=args.max_steps,
        aggregation=args.aggregation,
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p,
                                max_tokens=args.max_tokens, stop=tuple(args.stop)),
        step_max_tokens=args.step_max_tokens, step_separator=separator, seed=args.seed,
        batch_problems=args.batch_problems)


def cmd_search(args) -> int:
    from prmkit.cli.prm_options import prm_load_options
    from prmkit.data.hub import resolve_model_folder
    from prmkit.generation import get_sampler
    from prmkit.generation.prompts import PromptFormat
    from prmkit.models.published import prm_config_of
    from prmkit.scoring.provenance import folder_fingerprint
    from prmkit.search import RescoringScorer, run_search

    check_model(args)
    out = check_output(args.output, overwrite=args.overwrite, resume=args.resume,
                       resume_flag="--resume")
    prm_folder = resolve_model_folder(args.prm)
    load = prm_load_options(args)
    prm_config = prm_config_of(prm_folder, load["format"])
    separator = prm_config.step_format.step_separator
    args.aggregation = args.aggregation or prm_config.aggregation
    fmt = PromptFormat(style=args.prompt_style, step_separator=separator)
    args.stop = [*fmt.stop_strings, *(args.stop or [])]
    config = build_config(args, separator)
    problems = read_problems(args.problems, args.limit)
    options = {**dict(_option(o) for o in args.backend_option or []), **backend_options(args)}
    known = {"backend": args.backend, **({"model": args.model} if args.model else {})}
    record = {"config": config.to_dict(), "generator": known,
              "prm": {"model": str(prm_folder.resolve()),
                      "fingerprint": folder_fingerprint(prm_folder),
                      **({"format": prm_config.family} if prm_config.family else {})},
              "prompt": fmt.template_hash()}
    done: set[str] = set()
    saved = None
    if out.exists() and args.resume:
        written = read_written(out, _result_id, "search")
        done, saved = written.keys, written.record
        if saved is not None and not args.force:
            check_same_search(out, saved, record)
    todo = [p for p in problems if problem_key(p) not in done]
    if done:
        print(f"resuming {out}: {len(problems) - len(todo)} of {len(problems)} problems "
              "already searched", file=sys.stderr)
    if not todo:
        return 0

    if args.no_incremental or prm_config.family:  # a published PRM is scored whole
        from prmkit.scoring.scorer import Scorer

        scorer = RescoringScorer(Scorer.from_pretrained(
            prm_folder, token_budget=args.prm_batch_tokens, dtype=args.prm_dtype,
            device=args.prm_device, **load))
    else:
        from prmkit.scoring.incremental import IncrementalScorer

        scorer = IncrementalScorer.from_pretrained(
            prm_folder, dtype=args.prm_dtype, device=args.prm_device,
            token_budget=args.prm_batch_tokens)
    gold = {problem_key(p): p.answer for p in todo}
    # the output is opened (and an --overwrite'n one replaced) at the first result: a run
    # that fails before it leaves the file as it was
    with get_sampler(args.backend, args.model, **options) as sampler, \
            LazyOutput(out, append=args.resume) as opened:
        record["generator"] = sampler.describe() | known
        if saved is not None and not args.force:
            check_same_search(out, saved, record)  # now with the generator's fingerprint

        def write(result) -> None:
            line = result.to_dict()
            line["answer"] = gold[result.key]
            line["search"] = record
            opened.write(dumps_line(line))
            opened.flush()

        results = run_search([(problem_key(p), p.text) for p in todo], sampler, scorer,
                             fmt, config, progress=not args.no_progress, on_result=write)
    generated = sum(r.generated_tokens for r in results)
    prm_tokens = sum(r.prm_tokens for r in results)
    print(f"searched {len(results)} problems ({config.approach}, n={config.n}) -> {out}; "
          f"{generated / len(results):.0f} generated and {prm_tokens / len(results):.0f} PRM "
          "tokens per problem", file=sys.stderr)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "search", help="PRM-guided search: best-of-N, weighted best-of-N, beam search, DVTS",
        description="Searches every problem of a MATH-style JSONL file (problem, answer, "
                    "unique_id) with a generator and a trained PRM; writes one JSON line per "
                    "problem (see docs/search.md).")
    add_model_argument(p, "the generator (a folder, or the server's model name)")
    p.add_argument("--backend", choices=("hf", "vllm", "openai"), default="hf")
    p.add_argument("--backend-option", action="append", metavar="KEY=VALUE",
                   help="passed to the backend (JSON values), e.g. base_url=http://host/v1, "
                        "dtype=bfloat16, batch_size=32; repeatable")
    p.add_argument("--prm", required=True, help="a PRM folder written by save_pretrained, "
                   "or a published PRM's folder or Hub id (see --format)")
    add_prm_arguments(p)
    p.add_argument("--problems", required=True, help="problems JSONL (MATH format)")
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    p.add_argument("-o", "--output", required=True, help="results JSONL")
    p.add_argument("--approach", choices=APPROACHES, default="beam_search")
    p.add_argument("--n", type=int, default=16, help="budget: candidates per problem")
    p.add_argument("--beam-width", type=int, default=4, help="M (beam search, DVTS)")
    p.add_argument("--max-steps", type=int, default=40, help="rounds of one step")
    p.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                   help="rank, prune and pick by this step aggregation (default: the PRM's)")
    add_sampling_arguments(p, "most tokens per whole solution (the last round, best-of-N)")
    p.add_argument("--step-max-tokens", type=int, default=512, help="per step")
    p.add_argument("--stop", action="append", help="another stop string; repeatable")
    p.add_argument("--prompt-format", "--prompt-style", dest="prompt_style",
                   choices=("fewshot", "chat"), default="fewshot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-problems", type=int, default=8,
                   help="problems searched together (their requests share sampler calls)")
    p.add_argument("--prm-dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="auto: bf16 where the device computes it natively, else fp32")
    p.add_argument("--prm-device", default="auto",
                   help="auto (default: the GPU when there is one), cpu, cuda, cuda:1")
    p.add_argument("--prm-batch-tokens", type=int, default=16384)
    p.add_argument("--no-incremental", action="store_true",
                   help="score every partial solution in full (no prefix cache)")
    add_existing_output_arguments(p, "skip problems already searched")
    p.add_argument("--force", action="store_true",
                   help="with --resume: append even if the output was written by another "
                        "search (config, generator, PRM or prompt)")
    p.add_argument("--no-progress", action="store_true")
    add_backend_arguments(p)
    p.set_defaults(func=cmd_search)
