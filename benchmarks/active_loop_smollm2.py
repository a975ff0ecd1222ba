"""The active-learning loop on real models at a small scale (recipes/active_smollm2_small.yaml).

1. The selector: a short run of the phase-1 SmolLM2 PRM recipe (skipped when its model
   folder exists).
2. `prmkit active run`: two generations of SmolLM2-135M-Instruct samples through vLLM
   (4 MATH500 problems x 8), scored by the selector, 4 selected per problem (80% convincing
   wrong answers), labelled by Monte Carlo rollouts (K=2, binary search), PRM retrained.
3. The labelling queue of each generation read back: a stand-in labeller rates each queued
   sample from its Monte Carlo labels (+1 up to the first wrong step, -1 there), the file is
   read back with prmkit's PRM800K reader and the supervision policy, and the examples must
   equal the Monte Carlo labels.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/active_loop_smollm2.py
Figures go to benchmarks/results/active_loop_smollm2.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "recipes/active_smollm2_small.yaml"
SELECTOR_TRAIN = ["--config", "recipes/prm800k_phase1_smollm2_prm.yaml", "max_steps=3", "grad_accum=1",
                  "data.max_problems=40", "data.eval=[]", "data.eval_fraction=0",
                  "save_every=0", "log_every=1", "output_dir=runs/active_smollm2_selector"]


def prmkit(*args: str) -> float:
    cmd = [str(Path(sys.executable).with_name("prmkit")), *args]
    print(" ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - start


def queue_round_trip(gen_dir: Path) -> dict:
    """Label the queue from the Monte Carlo labels and read it back."""
    from prmkit.active.queue import label_record, read_label_queue
    from prmkit.data import read_prm800k, read_records, write_prm800k

    queue = list(read_prm800k(gen_dir / "queue.jsonl"))
    mc = list(read_records(gen_dir / "labels.jsonl"))
    assert len(queue) == len(mc), (len(queue), len(mc))
    labelled = []
    for rec, ex in zip(queue, mc, strict=True):
        assert rec.problem.text == ex.problem and tuple(rec.pre_generated_steps[:len(ex.steps)]) == ex.steps
        ratings = [1 if v >= 0.5 else -1 for v in ex.labels]
        if -1 in ratings:
            ratings = ratings[: ratings.index(-1) + 1]
        elif len(ratings) < len(rec.pre_generated_steps):
            ratings += [1] * (len(rec.pre_generated_steps) - len(ratings))
        labelled.append(label_record(rec, ratings, labeler="monte-carlo-stand-in"))
    out = gen_dir / "queue_labelled_from_mc.jsonl"
    write_prm800k(labelled, out)
    back = read_label_queue(out)
    agree = sum(b.labels == tuple(1.0 if r == 1 else 0.0 for r in
                                  [s.completions[0].rating for s in lab.steps])
                for b, lab in zip(back.examples, labelled, strict=True))
    return {"queued": len(queue), "read_back_examples": len(back.examples),
            "labelled": back.labelled, "pending": back.pending, "labels_agree": agree,
            "queued_with_selector_score": sum(r.pre_generated_verifier_score is not None
                                              for r in queue)}


def main() -> None:
    os.chdir(ROOT)
    from prmkit.active.loop_config import LoopConfig

    config = LoopConfig.from_yaml(RECIPE)
    result: dict = {"recipe": RECIPE, "machine": {"cpus": os.cpu_count(),
                                                   "platform": platform.platform()}}
    selector = Path(config.selector.model)
    result["selector_train_seconds"] = None if selector.is_dir() else round(
        prmkit("train", *SELECTOR_TRAIN), 1)
    result["loop_wall_seconds"] = round(prmkit("active", "run", "--config", RECIPE), 1)
    out = Path(config.output_dir)
    manifest = json.loads((out / "manifest.json").read_text())
    gens = {}
    for g, gen in manifest["generations"].items():
        s = gen["steps"]
        lab = s["label"]["counts"]["labeler"]
        gens[g] = {
            "seconds": {k: v["seconds"] for k, v in s.items()},
            "samples": s["sample"]["counts"]["samples"],
            "sample_correct": s["sample"]["counts"]["correct"],
            "sample_tokens_per_s": s["sample"]["counts"]["tokens_per_s"],
            "selection": {k: s["select"]["counts"][k] for k in
                          ("method", "pool", "selected", "selected_wrong", "already_labelled")},
            "pool_distinct_share": s["select"]["counts"]["diversity"]["distinct_share"],
            "mc": {k: lab[k] for k in ("rollouts", "tokens", "prefixes", "prefixes_exhaustive",
                                       "graded_whole")},
            "labelled_steps": s["label"]["counts"]["labelled_steps"],
            "positive_share": s["label"]["counts"]["positive_share"],
            "merged_examples": s["merge"]["counts"]["examples"],
            "train": {k: s["train"]["counts"][k] for k in ("model_dir", "steps")},
            "train_loss": s["train"]["counts"]["metrics"].get("train", {}).get("loss"),
            "queue": queue_round_trip(out / f"gen_{g}"),
        }
    result["generations"] = gens
    result["loop_step_seconds_total"] = manifest["seconds"]
    dest = ROOT / "benchmarks/results/active_loop_smollm2.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
