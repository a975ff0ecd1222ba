"""PRM-guided search in the demo world: accuracy against generated tokens.

    python -m prmkit.demo.search_experiment --work /tmp/search-world \\
        --out benchmarks/results/search_world.json --plot benchmarks/results/search_world.png

Per seed: the demo's PRM (trained as `prmkit demo` does, or loaded from `--work` in the
layout of `prmkit.demo.diagnose`: seed{s}/prm/model), the seed's 120 test problems, and
the world's solver as the generator (`WorldSampler`). Each method runs through
`prmkit.search.run_search` at each budget n, ranking with the demo's aggregation; a pick is
right when the world checker finds its final answer right. Best-of-N and weighted
best-of-N share one pool of n samples (the same requests), which also gives the
references: majority vote and pass@n. Results are cached per seed, method and n under
`--work`, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from prmkit.demo import world
from prmkit.demo.run import (
    DemoConfig,
    _same_number,
    seed_world,
    train_seed_models,
)
from prmkit.demo.settings import with_overrides
from prmkit.demo.world.sampler import WorldSampler
from prmkit.generation import SamplingParams
from prmkit.search import RescoringScorer, SearchConfig, run_search
from prmkit.selection import AnswerClusterer

# Rows of the results: the two picks of one best-of-N pool, the tree searches, and the
# pool's references.
POOL_ROWS = ("best_of_n", "weighted_best_of_n", "majority_vote", "pass@n")
TREE_ROWS = ("beam_search", "dvts")


def prm_folder(seed: int, cfg: DemoConfig, work: Path) -> Path:
    """The seed's trained PRM: cached under work/seed{seed}, else trained as the demo does."""
    folder = work / f"seed{seed}"
    model = folder / "prm" / "model"
    if not model.exists():
        print(f"[search] seed {seed}: training backbone, PRM and ORM (demo settings)", flush=True)
        train_seed_models(seed, cfg, seed_world(seed, cfg), folder)
    return model


def step_scorer(model_dir: Path):
    """KV-cached scoring of growing prefixes where available, else full rescoring; fp32
    as the demo scores."""
    try:
        from prmkit.scoring.incremental import IncrementalScorer
    except ImportError:
        from prmkit.scoring import Scorer

        return RescoringScorer(Scorer.from_pretrained(model_dir, dtype=None))
    return IncrementalScorer.from_pretrained(model_dir, dtype=None)


def _graded(problems, results, pick: str) -> tuple[list[bool], list[int], list[int]]:
    right = []
    for prob, res in zip(problems, results):
        k = res.details[pick] if pick in res.details else res.chosen
        right.append(k >= 0 and world.check_solution(prob, res.candidates[k].steps).final_correct)
    return right, [r.generated_tokens for r in results], [r.prm_tokens for r in results]


def _pool_references(problems, results) -> dict[str, list[bool]]:
    majority, passed = [], []
    for prob, res in zip(problems, results):
        checks = [world.check_solution(prob, c.steps) for c in res.candidates]
        vote = world.majority_answer(c.answer for c in checks)
        majority.append(vote is not None and _same_number(vote, prob.answer))
        passed.append(any(c.final_correct for c in checks))
    return {"majority_vote": majority, "pass@n": passed}


def run_budget(approach: str, n: int, seed: int, problems, sampler, scorer, cfg: DemoConfig,
               beam_width: int, max_steps: int) -> dict[str, dict]:
    """One search at budget n over the test problems: per row, per-problem outcomes."""
    config = SearchConfig(approach=approach, n=n, beam_width=min(beam_width, n),
                          max_steps=max_steps, aggregation=cfg.aggregation,
                          sampling=SamplingParams(temperature=1.0, max_tokens=256),
                          step_max_tokens=64, step_separator="\n", seed=seed,
                          batch_problems=8)
    clusterer = AnswerClusterer(equivalent=_same_number)
    results = run_search([(p.id, p.text) for p in problems], sampler, scorer, sampler.prompts,
                         config, progress=False, clusterer=clusterer)
    out = {}
    picks = {"best_of_n": "best", "weighted_best_of_n": "weighted"} if approach == "best_of_n" \
        else {approach: "chosen"}
    for row, pick in picks.items():
        right, gen, prm = _graded(problems, results, pick)
        out[row] = {"right": right, "tokens": gen, "prm_tokens": prm}
    if approach == "best_of_n":
        for row, right in _pool_references(problems, results).items():
            out[row] = {"right": right, "tokens": out["best_of_n"]["tokens"],
                        "prm_tokens": [0] * len(problems)}
    return out


def run_seed(seed: int, cfg: DemoConfig, work: Path, budgets: dict[str, list[int]],
             beam_width: int, max_steps: int) -> dict[str, dict[int, dict]]:
    """{row: {n: per-problem outcomes}} of one seed, from the cache where present."""
    model_dir = prm_folder(seed, cfg, work)
    cache = work / f"seed{seed}" / "search"
    cache.mkdir(parents=True, exist_ok=True)
    problems = world.make_splits(seed, test=cfg.test_problems, train=cfg.train_problems,
                                 pretrain=cfg.pretrain_problems, difficulty=cfg.difficulty).test
    from transformers import AutoTokenizer

    sampler = WorldSampler(problems, tokenizer=AutoTokenizer.from_pretrained(model_dir),
                           seed=seed)
    scorer = None
    rows: dict[str, dict[int, dict]] = {}
    for approach, ns in budgets.items():
        for n in ns:
            path = cache / f"{approach}-n{n}-w{beam_width}-p{len(problems)}.json"
            if path.exists():
                got = json.loads(path.read_text())
            else:
                scorer = scorer or step_scorer(model_dir)
                t0 = time.perf_counter()
                got = run_budget(approach, n, seed, problems, sampler, scorer, cfg, beam_width,
                                 max_steps)
                got["seconds"] = time.perf_counter() - t0
                path.write_text(json.dumps(got))
            seconds = got.pop("seconds", 0.0)
            for row, r in got.items():
                rows.setdefault(row, {})[n] = r
                print(f"[search] seed {seed} {row:<18} n={n:<3} accuracy "
                      f"{np.mean(r['right']):.3f} tokens/problem {np.mean(r['tokens']):7.1f}"
                      f" ({seconds:.0f} s)", flush=True)
    return rows


def summarise(per_seed: list[dict[str, dict[int, dict]]]) -> dict:
    """{row: {"n", "tokens", "tokens_std", "prm_tokens", "accuracy", "accuracy_std",
    "per_seed"}}: generated tokens per problem and accuracy, mean and std over seeds."""
    out = {}
    for row in per_seed[0]:
        ns = sorted(per_seed[0][row])
        acc = np.array([[np.mean(s[row][n]["right"]) for n in ns] for s in per_seed])
        tok = np.array([[np.mean(s[row][n]["tokens"]) for n in ns] for s in per_seed])
        prm = np.array([[np.mean(s[row][n]["prm_tokens"]) for n in ns] for s in per_seed])
        out[row] = {"n": ns, "tokens": tok.mean(0).round(1).tolist(),
                    "tokens_std": tok.std(0).round(1).tolist(),
                    "prm_tokens": prm.mean(0).round(1).tolist(),
                    "accuracy": acc.mean(0).round(4).tolist(),
                    "accuracy_std": acc.std(0).round(4).tolist(),
                    "per_seed": acc.round(4).tolist()}
    return out


def plot(summary: dict, path: Path) -> Path:
    from prmkit.evaluation.report import new_figure, save_figure

    fig, ax = new_figure(figsize=(7, 4.5))
    for row, s in summary.items():
        if row == "meta":
            continue
        ref = row in ("majority_vote", "pass@n")
        y, e = 100 * np.array(s["accuracy"]), 100 * np.array(s["accuracy_std"])
        ax.errorbar(s["tokens"], y, yerr=e, marker="o", ms=4, capsize=3,
                    ls="--" if ref else "-", label=row, alpha=0.7 if ref else 1.0)
        for x, yy, n in zip(s["tokens"], y, s["n"]):
            if not ref:
                ax.annotate(f"{n}", (x, yy), textcoords="offset points", xytext=(3, 3),
                            fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens per problem (log scale)")
    ax.set_ylabel("% of test problems solved")
    ax.set_title("PRM-guided search in the demo world (mean ± std over seeds; labels: n)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="search-world-output",
                    help="trained models and cached results per seed (diagnose's layout)")
    ap.add_argument("--out", default="search_world.json")
    ap.add_argument("--plot", default=None, help="PNG of accuracy against generated tokens")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--n", type=int, nargs="+", default=[4, 16, 64], dest="ns",
                    help="budgets of best-of-N")
    ap.add_argument("--tree-n", type=int, nargs="+", default=None,
                    help="budgets of beam search and DVTS (default: those of --n)")
    ap.add_argument("--beam-width", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=12,
                    help="rounds of a tree search (the last samples to the end)")
    ap.add_argument("--approaches", nargs="+", default=["best_of_n", *TREE_ROWS],
                    choices=["best_of_n", *TREE_ROWS],
                    help="best_of_n also gives weighted best-of-N, majority vote and pass@n")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a DemoConfig field (int, float or text)")
    args = ap.parse_args(argv)
    try:
        cfg = with_overrides(DemoConfig(progress=False), args.set)
    except ValueError as e:
        ap.error(str(e))
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    budgets = {a: sorted(args.ns if a == "best_of_n" or args.tree_n is None else args.tree_n)
               for a in args.approaches}
    per_seed = [run_seed(s, cfg, Path(args.work), budgets, args.beam_width, args.max_steps)
                for s in args.seeds]
    summary = summarise(per_seed)
    summary["meta"] = {"seeds": args.seeds, "test_problems": cfg.test_problems,
                       "difficulty": cfg.difficulty, "aggregation": cfg.aggregation,
                       "beam_width": args.beam_width, "max_steps": args.max_steps,
                       "tokens": "generated tokens per problem, demo tokenizer",
                       "seconds": round(time.perf_counter() - t0, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    if args.plot:
        plot(summary, Path(args.plot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
