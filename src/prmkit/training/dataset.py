"""Training examples from files (through the data layer) and the held-out split."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import numpy as np

from prmkit.data.records import LabelledSolution, StepExample
from prmkit.errors import PrmkitError
from prmkit.training.reward_config import DataConfig


def policy_options(cfg: DataConfig):
    from prmkit.data.policies import PolicyOptions

    known = {f.name for f in dataclasses.fields(PolicyOptions)}
    unknown = sorted(set(cfg.policy) - known)
    if unknown:
        raise PrmkitError(
            f"unknown config key 'data.policy.{unknown[0]}'; policy options: {', '.join(sorted(known))}"
        )
    opts = dict(cfg.policy)
    if isinstance(opts.get("drop_finish_reasons"), list):
        opts["drop_finish_reasons"] = tuple(opts["drop_finish_reasons"])
    return PolicyOptions(**opts)


def load_examples(paths: Sequence[str], cfg: DataConfig, objective: str,
                  stats: Counter | None = None, holdout: bool = True) -> list[StepExample]:
    """Read files and turn them into StepExamples with the supervision policy.

    ORM: an example is a complete solution (its last step carries a final answer); its
    outcome comes from grading that answer against the gold answer (the record's own, or
    one from `gold_answers` files), else, with outcome_fallback="rating", from the label
    of the final step. holdout=False keeps problems of the policy's holdout file (for
    evaluation files: phase-1 test problems are all MATH500 problems).
    """
    from prmkit.data import apply_policy, read_records
    from prmkit.data.policies import PolicyReport

    options = policy_options(cfg)
    if not holdout:
        options = dataclasses.replace(options, holdout_path=None)
    stats = stats if stats is not None else Counter()
    out: list[StepExample] = []
    for path in paths:
        stream = read_records(path, format=cfg.format, skip_bad=cfg.skip_bad)
        report = PolicyReport()
        if objective == "prm":
            out.extend(apply_policy(stream, options, report))
        else:
            out.extend(_orm_examples(stream, options, report, cfg, stats))
        stats["records"] += report.records_in
        stats["skipped_bad_records"] += stream.skipped
    return out


def _gold_table(cfg: DataConfig) -> dict[str, str]:
    from prmkit.data import read_records
    from prmkit.data.policies import normalize_problem

    table = {}
    for path in cfg.gold_answers:
        for p in read_records(path):
            if getattr(p, "answer", None):
                table[normalize_problem(p.text)] = p.answer
    return table


def _orm_examples(stream, options, report, cfg: DataConfig, stats: Counter) -> list[StepExample]:
    from prmkit.data.policies import apply_policy, load_holdout, normalize_problem
    from prmkit.grading import grade_many

    gold_of = _gold_table(cfg)
    holdout = load_holdout(options.holdout_path) if options.holdout_path else set()
    pending: list[tuple[StepExample, str | None]] = []
    for record in stream:
        gold = None
        if isinstance(record, LabelledSolution):
            gold = record.problem.answer or gold_of.get(normalize_problem(record.problem.text))
        for ex in apply_policy([record], options, report, holdout=holdout):
            if ex.outcome is not None or _is_final(ex):
                pending.append((ex, gold if ex.outcome is None else None))
    to_grade = [(i, ex, g) for i, (ex, g) in enumerate(pending) if g is not None]
    grades = grade_many([(list(ex.steps), g) for _, ex, g in to_grade], progress=False,
                        last_line=False) if to_grade else []
    verdict = {i: gr.correct for (i, _, _), gr in zip(to_grade, grades)}
    out = []
    for i, (ex, _gold) in enumerate(pending):
        outcome = ex.outcome
        if outcome is None and verdict.get(i) is not None:
            outcome = float(verdict[i])
            stats["orm_graded"] += 1
        if outcome is None and cfg.outcome_fallback == "rating" and ex.labels:
            if ex.labels[-1] is not None:
                outcome = float(ex.labels[-1] >= 0.5)
                stats["orm_from_rating"] += 1
        if outcome is None:
            stats["orm_unlabelled"] += 1
            continue
        out.append(dataclasses.replace(ex, outcome=outcome))
    return out


def _is_final(ex: StepExample) -> bool:
    return "# Answer" in ex.steps[-1] or "\\boxed" in ex.steps[-1]


def first_problems(examples: Sequence[StepExample], n: int) -> list[StepExample]:
    """Examples of the first n distinct problems (groups), in file order."""
    keep: set[str] = set()
    out = []
    for ex in examples:
        g = ex.group or ex.problem
        if g not in keep:
            if len(keep) >= n:
                continue
            keep.add(g)
        out.append(ex)
    return out


def split_by_group(examples: Sequence[StepExample], fraction: float, seed: int):
    """(train, eval): a seeded share of problems (groups) goes to eval, whole."""
    if fraction <= 0:
        return list(examples), []
    groups = sorted({ex.group or ex.problem for ex in examples})
    if len(groups) < 2:
        raise PrmkitError("an eval split needs at least two problems; set data.eval_fraction=0")
    rng = np.random.default_rng(seed)
    n_eval = min(len(groups) - 1, max(1, round(fraction * len(groups))))
    held = {groups[i] for i in rng.permutation(len(groups))[:n_eval]}
    train = [ex for ex in examples if (ex.group or ex.problem) not in held]
    evals = [ex for ex in examples if (ex.group or ex.problem) in held]
    return train, evals


def prepare(cfg: DataConfig, objective: str, seed: int, stats: Counter | None = None):
    """Train and eval examples for a run; examples read from files come from the data
    cache when cfg.cache (see prmkit.training.data_cache). A missing data file, or a
    directory, is an error naming its config key before anything is read."""
    from prmkit.training.recipe_paths import check_data_files

    check_data_files(cfg)
    stats = stats if stats is not None else Counter()
    if cfg.examples is None and cfg.cache:
        from prmkit.training.data_cache import PreparedData, cached_prepare

        def build() -> PreparedData:
            counts: Counter = Counter()
            train, evals = _prepare(cfg, objective, seed, counts)
            return PreparedData(train, evals, dict(counts))

        got = cached_prepare(cfg, objective, seed, build)
        stats.update(got.stats)
        return got.train, got.eval
    return _prepare(cfg, objective, seed, stats)


def _prepare(cfg: DataConfig, objective: str, seed: int, stats: Counter):
    if cfg.examples is not None:
        examples = list(cfg.examples)
        if objective == "orm":
            examples = [ex for ex in examples if ex.outcome is not None]
    else:
        examples = load_examples(cfg.train, cfg, objective, stats)
    if cfg.max_problems:
        examples = first_problems(examples, cfg.max_problems)
    if cfg.eval_examples is not None:
        train, evals = examples, list(cfg.eval_examples)
    elif cfg.eval:
        evals = load_examples(cfg.eval, cfg, objective, stats, holdout=False)
        train = examples
    else:
        train, evals = split_by_group(examples, cfg.eval_fraction, seed)
    if not train:
        raise PrmkitError("no training examples (check data.train and the policy options)")
    stats["train_examples"] = len(train)
    stats["eval_examples"] = len(evals)
    return train, evals
