"""PRM-guided search in the demo world: accuracy against generated tokens, 3 seeds.

Best-of-N and weighted best-of-N at n = 4, 16, 64, beam search and DVTS (beam width 4) at
the budgets of `tree_budgets` (default: the same), on the 120 test problems of each seed,
with the demo's PRM and aggregation and the world's solver as the generator; majority vote
and pass@n of the best-of-N pool as references. The recorded figures ran with
`--set tree_budgets=4,16,64` (35 minutes on 2 shared cores; the tree searches at n = 64 take
most of it). This is `prmkit demo --experiment search` (prmkit.demo.recipes.search): its
options pass through (`--seeds`, `--set`, `--out`, whose work folder caches the trained
models and per-budget results; a seed without models there is trained as `prmkit demo`
does, about 4 minutes on 2 cores).

Writes benchmarks/results/search_world.json and search_world.png.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from prmkit.cli import main

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else Path("/tmp/search-world")
    rc = main(["demo", "--experiment", "search", "--no-progress", "--out", str(out), *args])
    results = HERE / "results"
    for name in ("search_world.json", "search_world.png"):
        shutil.copyfile(out / "search" / name, results / name)
    result = json.loads((results / "search_world.json").read_text())
    result["meta"]["command"] = " ".join(["python benchmarks/bench_search_world.py", *args])
    (results / "search_world.json").write_text(json.dumps(result, indent=1) + "\n")
    raise SystemExit(rc)
