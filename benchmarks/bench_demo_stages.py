"""Where one seed of `make demo` spends its time: the same stages and settings as
`prmkit demo` (prmkit.demo.recipes.prm_vs_orm), each timed.

    .venv/bin/python benchmarks/bench_demo_stages.py [--seed 0] [--work DIR]

Writes benchmarks/results/demo_stages.json (seconds per stage, the training runs'
tokens/s, and the seed's best-of-64 figures, which equal `make demo`'s for that seed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    from prmkit.demo import world
    from prmkit.demo.core.config import DemoConfig, torch_settings
    from prmkit.demo.core.evaluate import evaluate_seed
    from prmkit.demo.core.scores import score_pools
    from prmkit.demo.core.seed import seed_world, train_reward_model
    from prmkit.demo.lm.backbone import build_backbone, pretrain_lm, save_backbone

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()
    cfg = DemoConfig(progress=False)
    work = Path(args.work or tempfile.mkdtemp(prefix="prmkit-demo-stages-"))
    seconds: dict[str, float] = {}

    def timed(stage, fn, *a, **k):
        t0 = time.perf_counter()
        out = fn(*a, **k)
        seconds[stage] = round(time.perf_counter() - t0, 1)
        print(f"{stage}: {seconds[stage]} s", flush=True)
        return out

    seed = args.seed
    with torch_settings(cfg.threads):
        sw = timed("world", seed_world, seed, cfg)
        docs = world.corpus_documents(sw.splits.pretrain)
        backbone, tok = timed("tokenizer_and_backbone", build_backbone,
                              docs + world.corpus_documents(sw.splits.train, sw.train_pools),
                              seed=seed, hidden_size=cfg.hidden_size, layers=cfg.layers)
        timed("pretraining", pretrain_lm, backbone, tok, docs, steps=cfg.pretrain_steps,
              seed=seed, progress=False)
        backbone_dir = save_backbone(backbone, tok, work / "backbone")
        dirs, tokens_per_s = {}, {}
        for kind in ("prm", "orm"):
            examples = world.to_step_examples(sw.splits.train, sw.train_pools, kind=kind,
                                              dedupe=True)
            dirs[kind] = timed(f"{kind}_training", train_reward_model, kind, backbone_dir,
                               examples, work / kind, cfg, seed)
            records = [json.loads(x) for x in (work / kind / "metrics.jsonl").read_text().split()]
            tokens_per_s[kind] = [r["tokens_per_s"] for r in records if r["type"] == "train"]
        scores = {kind: timed(f"{kind}_scoring", score_pools, dirs[kind], sw.test_pools,
                              sw.splits.test, False) for kind in ("prm", "orm")}
        result = timed("evaluation", evaluate_seed, seed, cfg, sw.splits.test, sw.test_pools,
                       scores["prm"], scores["orm"])
    out = {"seed": seed, "seconds": seconds, "total_seconds": round(sum(seconds.values()), 1),
           "training_tokens_per_s": tokens_per_s,
           "best_of_largest_n": {k: round(result[k][-1], 4) for k in ("prm", "orm", "majority")},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "load_avg_1m": os.getloadavg()[0]},
           "command": "python benchmarks/bench_demo_stages.py"}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo_stages.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["seconds"]), out["best_of_largest_n"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
