"""The paper in miniature: process vs outcome supervision in a controlled world.

For each seed: build train/test problems, train a tokenizer and a small Llama from
scratch on correct worked solutions, train a PRM (labels up to the first error) and an
ORM (final-answer labels) through prmkit's trainer on the same sampled solutions with
the same compute, score 64+ fresh samples per test problem with prmkit's Scorer, and
evaluate best-of-N (exact estimator), majority vote and first-error F1. Results are
averaged over seeds and written as metrics.json, plots and an HTML report.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from prmkit.demo import world
from prmkit.demo.lm.backbone import build_backbone, pretrain_lm, save_backbone
from prmkit.demo.lm.base import base_info, resolve_base
from prmkit.demo.lm.lm_loss import LMKeepingRewardModel
from prmkit.demo.world.error_kinds import kind_report, kinds_table, pick_indices, summarise_kinds
from prmkit.evaluation import auroc as step_auroc
from prmkit.evaluation import bon_curves, calibration_bins, plot_bon_curves, plot_calibration
from prmkit.evaluation.bon import ProblemPool
from prmkit.evaluation.processbench import first_error_index, subset_metrics
from prmkit.evaluation.report import write_report
from prmkit.models.config import RewardModelConfig
from prmkit.models.formatting import StepFormat
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer, aggregate
from prmkit.scoring.aggregate import fill_null_steps
from prmkit.selection import AnswerClusterer
from prmkit.training import DataConfig, LoraSection, RewardTrainingConfig, train
from prmkit.training.reward_trainer import seed_everything


@dataclass
class DemoConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    difficulty: str = "easy"  # world levels; harder ones need more compute than the demo has
    train_problems: int = 2000
    samples_per_train_problem: int = 8
    test_problems: int = 120
    samples_per_test_problem: int = 64
    pretrain_problems: int = 3000  # correct worked solutions for backbone pretraining
    pretrain_steps: int = 130
    hidden_size: int = 128
    layers: int = 4
    reward_steps: int = 250  # optimizer steps for the PRM and for the ORM (matched compute)
    batch_tokens: int = 4096
    lr: float = 1e-3
    # How the PRM's step scores make a solution score. min, not the paper's prod: prod's
    # product over more steps favours shorter wrong solutions (docs/demo-world.md).
    aggregation: str = "min"
    # torch CPU threads: fixed, so that a run's figures repeat exactly; 1 leaves the other
    # core of a 2-core machine free (2 threads beside another job run several times slower)
    threads: int = 1
    # mathmix [FIELD=VALUE ...] or a folder: every seed starts from one shared base
    # (prmkit.demo.lm.base.resolve_base; the default settings' base ships with prmkit);
    # seed: each seed pretrains its own backbone (the pretrain_* fields above)
    base: str = "mathmix"
    lora_rank: int = 0  # 0: reward models fine-tune every weight; r > 0: LoRA adapters of rank r
    formulation: str = "head"  # head: a new MLP head; token: the LM head read at label tokens
    # > 0: reward models keep that much next-token loss (lm_loss.py); without it reward
    # training erases what the base computes (98.8% of step results -> 0.8%)
    lm_loss_weight: float = 1.0
    # > 0: the head also reads the backbone's probability of the label's last W tokens
    # (prmkit.models.surprise), so it checks a step's result the way the base computes it
    surprise_window: int = 8
    progress: bool = True
    ns: tuple[int, ...] = field(default=(1, 2, 4, 8, 16, 32, 64))


def settings_key(cfg: DemoConfig, leave_out: tuple[str, ...] = ()) -> str:
    """A short hash of `cfg`'s settings but seeds, progress and `leave_out`: names the
    caches of what a run with them produces."""
    settings = {k: v for k, v in asdict(cfg).items()
                if k not in ("seeds", "progress", *leave_out)}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def quick_config(seeds: tuple[int, ...] = (0,)) -> DemoConfig:
    """A seconds-long run of the whole pipeline (smoke tests), not a result."""
    return DemoConfig(seeds=seeds, train_problems=40, samples_per_train_problem=4,
                      test_problems=12, samples_per_test_problem=8, pretrain_problems=100,
                      pretrain_steps=5, hidden_size=32, layers=1, reward_steps=5,
                      ns=(1, 2, 4, 8), base="seed")


def _train_reward_model(kind: str, backbone_dir: Path, examples, out: Path, cfg: DemoConfig,
                        seed: int) -> Path:
    """PRM or ORM through prmkit's trainer; both see the same solutions and settings."""
    model_cfg = RewardModelConfig(objective=kind, formulation=cfg.formulation, head="mlp",
                                  surprise_window=cfg.surprise_window,
                                  step_format=StepFormat(step_separator="\n",
                                                         prompt_template="{problem}\n",
                                                         max_length=512))
    model_cls = LMKeepingRewardModel if cfg.lm_loss_weight > 0 else StepRewardModel
    seed_everything(seed)  # the new head's weights: not whatever came before (a base build)
    model = model_cls.from_backbone(str(backbone_dir), config=model_cfg)
    if cfg.lm_loss_weight > 0:
        model.lm_loss_weight = cfg.lm_loss_weight
    tcfg = RewardTrainingConfig(
        data=DataConfig(examples=examples, eval_fraction=0.05),
        backbone=str(backbone_dir),
        model=model_cfg,
        lora=LoraSection(enabled=cfg.lora_rank > 0, r=max(cfg.lora_rank, 1),
                         alpha=2 * max(cfg.lora_rank, 1)),
        lr=cfg.lr,
        max_steps=cfg.reward_steps,
        batch_tokens=cfg.batch_tokens,
        output_dir=str(out),
        seed=seed,
        progress=cfg.progress,
        num_threads=cfg.threads,
        log_every=50,
    )
    return train(tcfg, model=model).model_dir


def _score(model_dir: Path, pools: list, problems: list,
           progress: bool) -> list[list[list[float | None]]]:
    scorer = Scorer.from_pretrained(model_dir, dtype=None, token_budget=16384)
    flat = [(p.text, sol) for p, pool in zip(problems, pools) for sol in pool]
    scores = scorer.score(flat, progress=progress)
    out, k = [], 0
    for pool in pools:
        out.append(scores[k: k + len(pool)])
        k += len(pool)
    return out


def _same_number(a: str, b: str) -> bool:
    """Answer equivalence in the world: its answers are integers written plainly."""
    try:
        return int(a) == int(b)
    except ValueError:
        return a.strip() == b.strip()


def _solution_score(step_probs: list[float | None], aggregation: str) -> float:
    """A step cut by max_length (None) counts as wrong: a truncated solution never
    out-ranks a complete one."""
    return float(aggregate(fill_null_steps(step_probs), aggregation))


@dataclass
class SeedWorld:
    """One seed's disjoint problem splits and sampled solutions."""

    splits: world.WorldSplits
    train_pools: list
    test_pools: list


def seed_world(seed: int, cfg: DemoConfig) -> SeedWorld:
    splits = world.make_splits(seed, test=cfg.test_problems, train=cfg.train_problems,
                               pretrain=cfg.pretrain_problems, difficulty=cfg.difficulty)
    return SeedWorld(splits,
                     world.sample_pools(splits.train, cfg.samples_per_train_problem, seed=seed),
                     world.sample_pools(splits.test, cfg.samples_per_test_problem, seed=seed + 1))


@dataclass
class SeedModels:
    backbone_dir: Path
    prm_dir: Path
    orm_dir: Path
    lm_losses: list[float]
    train_examples: dict[str, int]


def train_seed_models(seed: int, cfg: DemoConfig, sw: SeedWorld, work: Path) -> SeedModels:
    """Backbone pretraining on the pretrain split, then a PRM and an ORM on the train split."""
    splits = sw.splits
    shared = resolve_base(cfg.base, progress=cfg.progress)
    if shared is not None:
        backbone_dir = work / "backbone"
        shutil.copytree(shared, backbone_dir, dirs_exist_ok=True)
        lm_losses = (base_info(shared)["lm_loss"] if (shared / "base.json").is_file()
                     else []) or [0, 0]
    else:
        docs = world.corpus_documents(splits.pretrain)
        backbone, tokenizer = build_backbone(
            docs + world.corpus_documents(splits.train, sw.train_pools), seed=seed,
            hidden_size=cfg.hidden_size, layers=cfg.layers)
        lm_losses = pretrain_lm(backbone, tokenizer, docs, steps=cfg.pretrain_steps, seed=seed,
                                progress=cfg.progress)
        backbone_dir = save_backbone(backbone, tokenizer, work / "backbone")
    prm_examples = world.to_step_examples(splits.train, sw.train_pools, kind="prm", dedupe=True)
    orm_examples = world.to_step_examples(splits.train, sw.train_pools, kind="orm", dedupe=True)
    prm_dir = _train_reward_model("prm", backbone_dir, prm_examples, work / "prm", cfg, seed)
    orm_dir = _train_reward_model("orm", backbone_dir, orm_examples, work / "orm", cfg, seed)
    return SeedModels(backbone_dir, prm_dir, orm_dir, [lm_losses[0], lm_losses[-1]],
                      {"prm": len(prm_examples), "orm": len(orm_examples)})


def run_seed(seed: int, cfg: DemoConfig, work: Path) -> dict:
    t0 = time.perf_counter()
    sw = seed_world(seed, cfg)
    models = train_seed_models(seed, cfg, sw, work / f"seed{seed}")
    test_set, test_pools = sw.splits.test, sw.test_pools
    prm_scores = _score(models.prm_dir, test_pools, test_set, cfg.progress)
    orm_scores = _score(models.orm_dir, test_pools, test_set, cfg.progress)
    result = evaluate_seed(seed, cfg, test_set, test_pools, prm_scores, orm_scores)
    result.update(lm_loss=models.lm_losses, train_examples=models.train_examples,
                  seconds=time.perf_counter() - t0)
    return result


def evaluate_seed(seed: int, cfg: DemoConfig, test_set: list, test_pools: list,
                  prm_scores: list, orm_scores: list) -> dict:
    """Best-of-N, majority vote, pass@N and step metrics of one seed's scored test pools."""
    clusterer = AnswerClusterer(equivalent=_same_number)
    prm_pools, orm_pools = [], []
    step_probs, step_labels, fe_labels, fe_preds, answered_idx = [], [], [], [], []
    for prob, pool, ps, os_ in zip(test_set, test_pools, prm_scores, orm_scores):
        checks = [world.check_solution(prob, sol) for sol in pool]
        answered = [i for i, c in enumerate(checks) if c.answer is not None]
        answered_idx.append(answered)
        correct = np.array([checks[i].final_correct for i in answered], dtype=bool)
        clusters = np.array(clusterer.cluster([checks[i].answer for i in answered]), dtype=np.int64)
        prm_pools.append(ProblemPool(
            scores=np.array([_solution_score(ps[i], cfg.aggregation) for i in answered]),
            correct=correct, clusters=clusters, n_slots=len(pool), problem_id=prob.id))
        orm_pools.append(ProblemPool(
            scores=np.array([_solution_score(os_[i], "last") for i in answered]), correct=correct,
            n_slots=len(pool), problem_id=prob.id))
        for c, probs in zip(checks, ps):
            # Step metrics follow the training policy: steps up to the first error.
            last = c.first_error if c.first_error >= 0 else len(c.labels) - 1
            for j, p in enumerate(fill_null_steps(probs[: last + 1])):
                step_probs.append(p)
                step_labels.append(int(c.labels[j] == 1))
            fe_labels.append(c.first_error)
            fe_preds.append(first_error_index(probs, 0.5))

    ns = list(cfg.ns)
    top_picks = {"prm": _top_picks(test_set, test_pools, prm_pools),
                 "orm": _top_picks(test_set, test_pools, orm_pools)}
    prm_curves = bon_curves(prm_pools, ns, estimator="exact", pool_size=None,
                            votes=("majority",), trials=400, seed=seed)
    orm_curves = bon_curves(orm_pools, ns, estimator="exact", pool_size=None, votes=(), seed=seed)
    return {
        "seed": seed,
        "prm": prm_curves.accuracy["best"],
        "orm": orm_curves.accuracy["best"],
        "majority": prm_curves.accuracy["majority"],
        "pass": prm_curves.accuracy["pass"],
        "first_error": subset_metrics(fe_labels, fe_preds),
        "top_picks": top_picks,
        "error_kinds": {
            name: kind_report(test_set, test_pools, scores,
                              pick_indices([p.scores for p in pools], answered_idx))
            for name, scores, pools in (("prm", prm_scores, prm_pools),
                                        ("orm", orm_scores, orm_pools))},
        "step_auroc": step_auroc(step_probs, step_labels),
        "calibration": calibration_bins(step_probs, step_labels),
    }


def _top_picks(problems, pools, scored: list[ProblemPool]) -> dict:
    """What the reward model picks from each whole pool (best-of-64): shares of picks with a
    right answer, with a right process, and with the problem's systematic trap answer."""
    right_answer = right_process = trap = 0
    for prob, pool, sp in zip(problems, pools, scored):
        checks = [world.check_solution(prob, sol) for sol in pool]
        answered = [c for c in checks if c.answer is not None]
        pick = answered[int(np.argmax(sp.scores))]
        right_answer += pick.final_correct
        right_process += pick.first_error < 0
        trap += prob.trap_answer is not None and pick.answer == prob.trap_answer
    n = max(len(problems), 1)
    return {"right_answer": right_answer / n, "right_process": right_process / n,
            "trap_answer": trap / n}


def summarise(per_seed: list[dict], ns: list[int], seconds: float) -> dict:
    out: dict = {"n": ns, "seeds": len(per_seed), "seconds": seconds}
    for key in ("prm", "orm", "majority", "pass"):
        arr = np.array([r[key] for r in per_seed])
        out[key] = arr.mean(0).tolist()
        out[f"{key}_std"] = arr.std(0).tolist()
    for key in ("f1", "error_acc", "correct_acc"):
        vals = [r["first_error"][key] for r in per_seed]
        out[f"first_error_{key}"] = float(np.mean(vals))
        out[f"first_error_{key}_std"] = float(np.std(vals))
    for model in ("prm", "orm"):
        for key in ("right_answer", "right_process", "trap_answer"):
            out[f"{model}_top_pick_{key}"] = float(
                np.mean([r["top_picks"][model][key] for r in per_seed]))
    out["error_kinds"] = summarise_kinds(per_seed)
    aurocs = [r["step_auroc"] for r in per_seed]
    out["step_auroc"], out["step_auroc_std"] = float(np.mean(aurocs)), float(np.std(aurocs))
    out["largest_n"] = ns[-1]
    out["prm_minus_orm"] = [r["prm"][-1] - r["orm"][-1] for r in per_seed]
    out["orm_minus_majority"] = [r["orm"][-1] - r["majority"][-1] for r in per_seed]
    return out


def verdict(summary: dict) -> str:
    n = summary["largest_n"]
    prm, orm, maj = summary["prm"][-1], summary["orm"][-1], summary["majority"][-1]
    s_prm, s_orm, s_maj = summary["prm_std"][-1], summary["orm_std"][-1], summary["majority_std"][-1]
    agg = summary.get("aggregation", "prod")
    lines = [f"At N={n}: PRM ({agg} of step scores) {100 * prm:.1f}% (±{100 * s_prm:.1f}), ORM {100 * orm:.1f}% "
             f"(±{100 * s_orm:.1f}), majority vote {100 * maj:.1f}% (±{100 * s_maj:.1f}), "
             f"means ± std over {summary['seeds']} seeds."]
    for a, b, name_a, name_b, key in ((prm, orm, "PRM", "ORM", "prm_minus_orm"),
                                      (orm, maj, "ORM", "majority vote", "orm_minus_majority")):
        gaps = summary[key]
        if min(gaps) > 0:
            lines.append(f"{name_a} beats {name_b} in every seed (gap {100 * min(gaps):.1f} to "
                         f"{100 * max(gaps):.1f} points).")
        elif a > b:
            lines.append(f"{name_a} beats {name_b} on average but not in every seed "
                         f"(gaps {', '.join(f'{100 * g:+.1f}' for g in gaps)} points).")
        else:
            lines.append(f"{name_a} does NOT beat {name_b} here "
                         f"(gaps {', '.join(f'{100 * g:+.1f}' for g in gaps)} points).")
    ns = summary["n"]
    for name, key in (("PRM", "prm"), ("ORM", "orm")):
        curve = summary[key]
        k = int(np.argmax(curve))
        above = [k_n for k_n, a, m in zip(ns, curve, summary["majority"]) if a > m + 1e-9]
        lines.append(f"{name} peaks at N={ns[k]} ({100 * curve[k]:.1f}%)"
                     + (f" and beats majority vote at N in {above}." if above
                        else " and never beats majority vote."))
    ahead = [k_n for k_n, a, b in zip(ns, summary["prm"], summary["orm"]) if a > b + 1e-9]
    lines.append(f"PRM is ahead of ORM at N in {ahead}." if ahead else
                 "PRM is never ahead of ORM.")
    if summary["prm"][-1] < max(summary["prm"]) or summary["orm"][-1] < max(summary["orm"]):
        lines.append("Past its peak a reward model over-optimises: the more samples, the "
                     "likelier a wrong solution it cannot check gets the top score.")
    lines.extend(_weakest_kinds(summary.get("error_kinds") or {}, n))
    lines.append(
        f"Over whole pools, {100 * summary['prm_top_pick_right_answer']:.0f}% of the PRM's "
        f"picks have a right answer ({100 * summary['prm_top_pick_right_process']:.0f}% a "
        f"right process, {100 * summary['prm_top_pick_trap_answer']:.0f}% the problem's "
        f"systematic trap answer); the ORM's: "
        f"{100 * summary['orm_top_pick_right_answer']:.0f}% right answer, "
        f"{100 * summary['orm_top_pick_trap_answer']:.0f}% trap answer. Majority vote needs no "
        "model and does not fall.")
    lines.append(f"The PRM finds the first wrong step of held-out samples with F1 "
                 f"{summary['first_error_f1']:.3f} (threshold 0.5) and ranks steps with AUROC "
                 f"{summary['step_auroc']:.3f}.")
    return " ".join(lines)


def _weakest_kinds(kinds: dict, n: int) -> list[str]:
    """Per model, the kinds of error it checks worst (step AUROC) and their share of its
    best-of-n picks."""
    out = []
    for name, key in (("PRM", "prm"), ("ORM", "orm")):
        rated = [(v[f"{key}_step_auroc"], k, v[f"{key}_picks"]) for k, v in kinds.items()
                 if v.get(f"{key}_step_auroc") is not None]
        if not rated:
            continue
        worst = ", ".join(f"{k} {a:.2f} ({100 * p:.0f}% of its best-of-{n} picks)"
                          for a, k, p in sorted(rated)[:2])
        slip = kinds.get("slip", {}).get(f"{key}_step_auroc")
        out.append(f"The {name} checks arithmetic slips with step AUROC "
                   f"{'-' if slip is None else f'{slip:.2f}'}; worst: {worst}.")
    return out


@contextlib.contextmanager
def torch_settings(threads: int):
    """The demo's fixed torch threads and deterministic algorithms, restored on exit."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    saved = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])


def run_demo(out_dir: str | Path = "demo-output", cfg: DemoConfig | None = None) -> dict:
    cfg = cfg or DemoConfig()
    with torch_settings(cfg.threads):
        return _run_demo(Path(out_dir), cfg)


def _run_demo(out: Path, cfg: DemoConfig) -> dict:
    work = out / "work"
    t0 = time.perf_counter()
    per_seed = []
    for seed in cfg.seeds:
        print(f"[demo] seed {seed}: world, backbone, PRM, ORM, evaluation", flush=True)
        per_seed.append(run_seed(seed, cfg, work))
        r = per_seed[-1]
        print(f"[demo] seed {seed}: best-of-{cfg.ns[-1]} PRM {r['prm'][-1]:.3f} "
              f"ORM {r['orm'][-1]:.3f} majority {r['majority'][-1]:.3f} "
              f"({r['seconds']:.0f} s)", flush=True)
    ns = list(cfg.ns)
    summary = summarise(per_seed, ns, time.perf_counter() - t0)
    summary["aggregation"] = cfg.aggregation
    summary["statement"] = verdict(summary)
    summary["config"] = asdict(cfg)
    summary["per_seed"] = [{k: v for k, v in r.items() if k != "calibration"} for r in per_seed]

    series = {name: {"n": ns, "accuracy": summary[key], "std": summary[f"{key}_std"]}
              for name, key in (("PRM (process supervision)", "prm"),
                                ("ORM (outcome supervision)", "orm"),
                                ("majority vote", "majority"))}
    plots = {
        "Best-of-N: share of test problems solved (mean ± std over seeds)":
            plot_bon_curves(series, out / "bon_curves.png", title="Best-of-N in the demo world"),
        "PRM step calibration (first seed)":
            plot_calibration(per_seed[0]["calibration"], out / "calibration.png"),
    }
    pct = lambda key, i: f"{100 * summary[key][i]:.1f} ± {100 * summary[key + '_std'][i]:.1f}"  # noqa: E731
    tables = {
        "Best-of-N: % of test problems solved (mean ± std over seeds)": {
            "columns": ["N", "PRM", "ORM", "majority vote", "pass@N"],
            "rows": [[n, pct("prm", i), pct("orm", i), pct("majority", i), pct("pass", i)]
                     for i, n in enumerate(ns)],
        },
        "Step-level (PRM, held-out samples)": {
            "columns": ["metric", "value"],
            "rows": [["step AUROC", f"{summary['step_auroc']:.3f} ± {summary['step_auroc_std']:.3f}"],
                     ["first-error F1 (threshold 0.5)",
                      f"{summary['first_error_f1']:.3f} ± {summary['first_error_f1_std']:.3f}"],
                     ["wall time of the whole run", f"{summary['seconds']:.0f} s"]],
        },
    }
    tables[f"Per error kind: right steps against first wrong steps (AUROC), and what "
           f"best-of-{ns[-1]} picks (means over seeds)"] = kinds_table(summary["error_kinds"])
    write_report(out, summary, plots, title="prmkit demo: process vs outcome supervision",
                 summary=summary["statement"], tables=tables)
    print(f"[demo] {summary['statement']}")
    print(f"[demo] report: {out / 'report.html'} ({summary['seconds']:.0f} s in all)")
    return summary
