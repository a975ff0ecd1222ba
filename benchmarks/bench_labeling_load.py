"""Labelling app under load: concurrent labellers over HTTP against `prmkit label serve`
(SQLite or PostgreSQL, 127.0.0.1), the server SIGKILLed and restarted mid-session,
double-submitted forms, two labellers per solution; checks every submitted label is
exported exactly once.

    .venv/bin/python benchmarks/bench_labeling_load.py [--db sqlite|postgresql]
        [--labellers 20] [--items 60] [--overlap 2] [--kill-after 100]

--db postgresql starts a PostgreSQL 15 cluster from /usr/lib/postgresql/15/bin in a
temporary directory (unix socket only), as the tests do. Writes
benchmarks/results/labeling_load.json (SQLite) or labeling_load_postgresql.json.
requests_per_s counts every HTTP request
(pages, logins, step posts, finishes, retries after the kill) over the whole wall time,
restart included. Accounts use light Argon2 settings (as the tests do), so logins do not
dominate the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from labeling_support import new_postgres_db, postgres_server, run_load  # noqa: E402

from prmkit.data import read_records  # noqa: E402
from prmkit.data.io import atomic_write  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
OUT = {"sqlite": RESULTS / "labeling_load.json",
       "postgresql": RESULTS / "labeling_load_postgresql.json"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labellers", type=int, default=20)
    ap.add_argument("--items", type=int, default=60)
    ap.add_argument("--overlap", type=int, default=2)
    ap.add_argument("--kill-after", type=int, default=100)
    ap.add_argument("--db", choices=sorted(OUT), default="sqlite")
    ap.add_argument("-o", "--output", help="default: benchmarks/results/labeling_load[_DB].json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = None
        if args.db == "postgresql":
            url = new_postgres_db(stack.enter_context(postgres_server()))
        r = run_load(Path(tmp), args.labellers, args.items, args.overlap, args.kill_after, url)
        submitted = Counter(r["submitted"])
        exported = Counter(r["exported"])
        per_solution = Counter(p for n, p, pos, x in r["exported"] if pos == 0)
        solutions = sum(1 for _ in read_records(r["export_path"]))
    result = {k: v for k, v in r.items() if k not in ("submitted", "exported", "export_path")}
    result.update({
        "requests_per_s": round(r["requests_per_s"], 1),
        "wall_s": round(r["wall_s"], 2),
        "restart_s": round(r["restart_s"], 2),
        "items": args.items,
        "overlap": args.overlap,
        "every_label_exported_once": exported == submitted and max(exported.values()) == 1,
        "every_solution_by_overlap_labellers": set(per_solution.values()) == {args.overlap}
        and len(per_solution) == args.items,
        "solutions_read_back": solutions,
        "database": args.db,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m": os.getloadavg()[0]},
    })
    with atomic_write(args.output or OUT[args.db], "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result, indent=2))
    ok = result["every_label_exported_once"] and result["every_solution_by_overlap_labellers"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
