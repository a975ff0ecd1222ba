"""PRM-guided search in the demo world: accuracy against generated tokens, 3 seeds.

Best-of-N and weighted best-of-N at n = 4, 16, 64, beam search and DVTS (beam width 4) at
the budgets of --tree-n (default: the same), on the 120 test problems of each seed, with
the demo's PRM and aggregation and the world's solver as the generator; majority vote and
pass@n of the best-of-N pool as references. The recorded figures ran with --tree-n 4 16 64
(35 minutes on 2 shared cores; the tree searches at n = 64 take most of it).
Trained models and per-budget results are cached under --work (a seed without a model
there is trained as `prmkit demo` does, about 4 minutes on 2 cores).

Writes benchmarks/results/search_world.json and search_world.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prmkit.demo.search_experiment import main

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--work" not in args:
        args += ["--work", "/tmp/search-world"]
    out = HERE / "results" / "search_world.json"
    rc = main([*args, "--out", str(out), "--plot", str(out.with_suffix(".png"))])
    result = json.loads(out.read_text())
    result["meta"]["command"] = " ".join(["python benchmarks/bench_search_world.py", *args])
    out.write_text(json.dumps(result, indent=1) + "\n")
    raise SystemExit(rc)
