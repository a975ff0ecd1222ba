"""PRM-guided search in the demo world: accuracy against generated tokens.

    prmkit demo --experiment search --out /tmp/search-world --set tree_budgets=4,16,64

Per seed: the demo's PRM (the seed's models for `cfg.demo`, read from the work folder or
trained there, `prmkit.demo.core.seed`), the seed's test problems, and the world's solver
as the generator (`WorldSampler`). Each method runs through `prmkit.search.run_search` at
each budget n, ranking with the demo's aggregation; a pick is right when the world checker
finds its final answer right. Best-of-N and weighted best-of-N share one pool of n samples
(the same requests), which also gives the references: majority vote and pass@n. Results
are cached per seed, method and n beside the seed's models, so an interrupted run resumes.
Writes search_world.json and search_world.png.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.core.parallel import map_seeds, with_demo_settings
from prmkit.demo.core.scores import same_number, world_clusterer
from prmkit.demo.core.seed import seed_models
from prmkit.demo.world.sampler import WorldSampler
from prmkit.generation import SamplingParams
from prmkit.search import RescoringScorer, SearchConfig, run_search
from prmkit.selection import majority_vote

# Rows of the results: the two picks of one best-of-N pool, the tree searches, and the
# pool's references.
POOL_ROWS = ("best_of_n", "weighted_best_of_n", "majority_vote", "pass@n")
TREE_ROWS = ("beam_search", "dvts")


@dataclass
class WorldSearchConfig:
    demo: DemoConfig = field(default_factory=lambda: DemoConfig(progress=False))
    budgets: tuple[int, ...] = (4, 16, 64)  # n of best-of-N
    tree_budgets: tuple[int, ...] = ()  # n of beam search and DVTS (empty: the budgets)
    beam_width: int = 4
    max_steps: int = 12  # rounds of a tree search (the last samples to the end)
    # best_of_n also gives weighted best-of-N, majority vote and pass@n
    approaches: tuple[str, ...] = ("best_of_n", *TREE_ROWS)

    def budgets_of(self) -> dict[str, list[int]]:
        return {a: sorted(self.budgets if a == "best_of_n" or not self.tree_budgets
                          else self.tree_budgets) for a in self.approaches}


Config = WorldSearchConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result: the quick demo's models."""
    return WorldSearchConfig(demo=replace(quick_config(seeds), progress=False), budgets=(4,),
                             tree_budgets=(2,))


def step_scorer(model_dir: Path):
    """KV-cached scoring of growing prefixes, or full rescoring for a model that reads the
    backbone's surprise (a cached prefix does not keep it); fp32 as the demo scores."""
    from prmkit.scoring import Scorer
    from prmkit.scoring.incremental import IncrementalScorer

    scorer = Scorer.from_pretrained(model_dir, dtype=None, device=None)
    if scorer.config.surprise_window:
        return RescoringScorer(scorer)
    return IncrementalScorer(scorer)


def _graded(problems, results, pick: str) -> tuple[list[bool], list[int], list[int]]:
    right = []
    for prob, res in zip(problems, results):
        k = res.details[pick] if pick in res.details else res.chosen
        right.append(k >= 0 and world.check_solution(prob, res.candidates[k].steps).final_correct)
    return right, [r.generated_tokens for r in results], [r.prm_tokens for r in results]


def _pool_references(problems, results, clusterer) -> dict[str, list[bool]]:
    majority, passed = [], []
    for prob, res in zip(problems, results):
        checks = [world.check_solution(prob, c.steps) for c in res.candidates]
        answers = [c.answer for c in checks]
        voted = any(a is not None for a in answers)
        vote = answers[majority_vote(answers, clusterer=clusterer)] if voted else None
        majority.append(vote is not None and same_number(vote, prob.answer))
        passed.append(any(c.final_correct for c in checks))
    return {"majority_vote": majority, "pass@n": passed}


def run_budget(approach: str, n: int, seed: int, problems, sampler, scorer,
               cfg: WorldSearchConfig) -> dict[str, dict]:
    """One search at budget n over the test problems: per row, per-problem outcomes."""
    config = SearchConfig(approach=approach, n=n, beam_width=min(cfg.beam_width, n),
                          max_steps=cfg.max_steps, aggregation=cfg.demo.aggregation,
                          sampling=SamplingParams(temperature=1.0, max_tokens=256),
                          step_max_tokens=64, step_separator="\n", seed=seed,
                          batch_problems=8)
    clusterer = world_clusterer()
    results = run_search([(p.id, p.text) for p in problems], sampler, scorer, sampler.prompts,
                         config, progress=False, clusterer=clusterer)
    out = {}
    picks = {"best_of_n": "best", "weighted_best_of_n": "weighted"} if approach == "best_of_n" \
        else {approach: "chosen"}
    for row, pick in picks.items():
        right, gen, prm = _graded(problems, results, pick)
        out[row] = {"right": right, "tokens": gen, "prm_tokens": prm}
    if approach == "best_of_n":
        for row, right in _pool_references(problems, results, clusterer).items():
            out[row] = {"right": right, "tokens": out["best_of_n"]["tokens"],
                        "prm_tokens": [0] * len(problems)}
    return out


def run_seed(seed: int, cfg: WorldSearchConfig, work: Path) -> dict[str, dict[int, dict]]:
    """{row: {n: per-problem outcomes}} of one seed, from the cache where present."""
    from transformers import AutoTokenizer

    models = seed_models(seed, cfg.demo, work)
    cache = models.folder / "search"
    cache.mkdir(parents=True, exist_ok=True)
    d = cfg.demo
    problems = world.make_splits(seed, test=d.test_problems, train=d.train_problems,
                                 pretrain=d.pretrain_problems, difficulty=d.difficulty).test
    sampler = WorldSampler(problems, tokenizer=AutoTokenizer.from_pretrained(models.prm_dir),
                           seed=seed)
    scorer = None
    rows: dict[str, dict[int, dict]] = {}
    for approach, ns in cfg.budgets_of().items():
        for n in ns:
            path = cache / f"{approach}-n{n}-w{cfg.beam_width}-s{cfg.max_steps}.json"
            if path.exists():
                got = json.loads(path.read_text())
            else:
                scorer = scorer or step_scorer(models.prm_dir)
                t0 = time.perf_counter()
                got = run_budget(approach, n, seed, problems, sampler, scorer, cfg)
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


def run(cfg: Config, out: str | Path, work: str | Path) -> dict:
    t0 = time.perf_counter()
    per_seed = map_seeds(partial(with_demo_settings, run_seed, cfg), cfg.demo, Path(work))
    summary = summarise(per_seed)
    d = cfg.demo
    summary["meta"] = {"seeds": list(d.seeds), "test_problems": d.test_problems,
                       "difficulty": d.difficulty, "aggregation": d.aggregation,
                       "beam_width": cfg.beam_width, "max_steps": cfg.max_steps,
                       "tokens": "generated tokens per problem, demo tokenizer",
                       "seconds": round(time.perf_counter() - t0, 1)}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "search_world.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, out / "search_world.png")
    print(f"[search] {out / 'search_world.json'}, {out / 'search_world.png'}")
    return summary
