"""Does an ORM trained as Cobbe et al. train theirs (the final answer's verdict as the label
of every step, the score read at the last one) rank the RL policy's own samples, where the
experiment's ORM (one label, at the end) does not?

    python benchmarks/rl_orm_every_step.py --work WORK [--seed 0] [--labels every|end]
        [--data own|mixed]

WORK is the RL experiment's work folder (`prmkit demo --experiment rl --out OUT` leaves it
in OUT/work) holding the seed's fine-tuned policy. The ORM sees the same solutions as the
experiment's own reward models (`cfg.own_samples` policy samples of each of the first
`cfg.own_problems` training problems, the same sampling seed), with the demo's base and
reward-model settings; then best-of-`bon_n` on the experiment's evaluation problems, as
its regime check measures it (`rl.eval.best_of_n`), with the last step's score and with
the demo's `min` aggregation. About 6 minutes on two threads; prints one JSON line.

`--labels end` trains the experiment's own ORM instead (one label, at the last step);
`--data mixed` adds the seed's scripted-solver training samples (the demo's reward models'
data, `world.to_step_examples` over the train split) to the policy's own, so the ORM sees
about three times as many solutions. `--problems P --samples K` draw K policy samples of
each of the first P training problems instead (the experiment's: 2,000 x 8).

`ranking` tells whether a model ranks solutions or problems: on the best-of-N pools, with
the last step's score, the AUROC of right against wrong final answers over all pools
(`pooled`), and within each problem whose pool holds both (`within_problem`, their mean): a
model that learns which problems are easy scores well pooled and near 0.5 within; beside
them the kind of each sample (`world.error_kinds`: right, or its first wrong step's kind)
in the pools and in the model's picks. A model trained before in the same folder is read
back.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from prmkit.data.records import StepExample
from prmkit.demo import world
from prmkit.demo.core.config import torch_settings
from prmkit.demo.core.seed import seed_world, train_reward_model
from prmkit.demo.lm.base import resolve_base
from prmkit.demo.lm.policy import policy_sampler, sample, solution_steps
from prmkit.demo.recipes.rl.config import RLConfig
from prmkit.demo.recipes.rl.eval import Counting, best_of_n, scores_of
from prmkit.demo.recipes.rl.own_models import own_pools
from prmkit.demo.world.error_kinds import error_kind
from prmkit.evaluation import auroc
from prmkit.scoring import Scorer


def every_step(ex: StepExample) -> StepExample:
    """The outcome as every step's label (Cobbe et al.'s verifier targets, per step)."""
    return StepExample(ex.problem, ex.steps, tuple(ex.outcome for _ in ex.steps),
                       tuple(1 if ex.outcome else -1 for _ in ex.steps), ex.outcome, ex.group)


def ranking(model, sampler, problems, cfg, seed: int) -> dict:
    """Pooled and within-problem AUROC of the model's last-step score on the best-of-N
    pools (the same draws as `rl.eval.best_of_n`)."""
    pools = sample(sampler, problems, cfg.bon_n, cfg.temperature, cfg.max_completion, seed + 2)
    owners = [p for p, pool in zip(problems, pools) for _ in pool]
    texts = [t for pool in pools for t, _ in pool]
    rewards = scores_of(model, owners, texts, "last")
    right = [int(world.check_solution(p, solution_steps(t)).final_correct)
             for p, t in zip(owners, texts)]
    kinds = [error_kind(p, steps) if (steps := solution_steps(t)) else "no steps"
             for p, t in zip(owners, texts)]
    score = [-1.0 if r.score is None else r.score for r in rewards]
    within, top, at = [], [], 0
    for pool in pools:
        s, y = score[at: at + len(pool)], right[at: at + len(pool)]
        top.append(kinds[at + int(np.argmax(s))])
        at += len(pool)
        if 0 < sum(y) < len(y):
            within.append(auroc(s, y))
    share = lambda ks: {k: round(v / len(ks), 3) for k, v in Counter(ks).most_common()}  # noqa: E731
    return {"pooled": auroc(score, right), "within_problem": float(np.mean(within)),
            "mixed_problems": len(within), "pool_kinds": share(kinds), "pick_kinds": share(top)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--labels", choices=("every", "end"), default="every")
    ap.add_argument("--data", choices=("own", "mixed"), default="own")
    ap.add_argument("--problems", type=int, default=RLConfig.own_problems)
    ap.add_argument("--samples", type=int, default=RLConfig.own_samples)
    args = ap.parse_args()
    cfg = replace(RLConfig(), own_problems=args.problems, own_samples=args.samples)
    cfg.demo = replace(cfg.demo, progress=False, threads=args.threads)
    seed = args.seed
    policies = sorted((Path(args.work) / "rl" / f"seed{seed}").glob("policy-*"))
    if len(policies) != 1:
        raise SystemExit(f"{len(policies)} policies for seed {seed} under {args.work}/rl: "
                         "run the experiment first, in a work folder of its own")
    policy = policies[0]
    sw = seed_world(seed, cfg.demo)
    name = "orm-every-step" if (args.labels, args.data) == ("every", "own") else \
        f"orm-{args.labels}-{args.data}"
    if (args.problems, args.samples) != (RLConfig.own_problems, RLConfig.own_samples):
        name += f"-{args.problems}x{args.samples}"
    out = Path(args.work) / "rl" / f"seed{seed}" / name
    t0 = time.perf_counter()
    with torch_settings(args.threads):
        chosen, pools, _ = own_pools(seed, cfg, sw.splits.train, policy)  # as own_models draws them
        examples = world.to_step_examples(chosen, pools, "orm", True)
        if args.data == "mixed":
            examples += world.to_step_examples(sw.splits.train, sw.train_pools, "orm", True)
        if args.labels == "every":
            examples = [every_step(e) for e in examples]
        model = out / "model"
        if not (out / "metrics.jsonl").is_file() or not model.is_dir():  # else: trained before
            model = train_reward_model("prm" if args.labels == "every" else "orm",
                                       resolve_base(cfg.demo.base, progress=False), examples,
                                       out, cfg.demo, seed)
        orm = Counting(Scorer.from_pretrained(model, dtype=None, token_budget=16384))
        picks = {agg: best_of_n(policy_sampler(policy), list(sw.splits.test[: cfg.eval_problems]),
                                replace(cfg, demo=replace(cfg.demo, aggregation=agg)), seed, orm)[0]
                 for agg in ("last", "min")}
        ranks = ranking(orm, policy_sampler(policy), list(sw.splits.test[: cfg.eval_problems]),
                        cfg, seed)
    held_out = [json.loads(line) for line in (out / "metrics.jsonl").open()
                if '"eval"' in line][-1]
    print(json.dumps({"seed": seed, "labels": args.labels, "data": args.data,
                      "examples": len(examples), "held_out": held_out,
                      "problems": args.problems, "samples": args.samples,
                      "best_of_n": picks, "ranking": ranks,
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
