"""Labelling app under load: concurrent labellers over HTTP against `prmkit label serve`
(SQLite, 127.0.0.1), the server SIGKILLed and restarted mid-session, double-submitted
forms, two labellers per solution; checks every submitted label is exported exactly once.

    .venv/bin/python benchmarks/bench_labeling_load.py [--labellers 20] [--items 60]
        [--overlap 2] [--kill-after 100]

Writes benchmarks/results/labeling_load.json. requests_per_s counts every HTTP request
(pages, logins, step posts, finishes, retries after the kill) over the whole wall time,
restart included. Accounts use light Argon2 settings (as the tests do), so logins do not
dominate the figure.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from labeling_support import run_load  # noqa: E402

from prmkit.data import read_records  # noqa: E402
from prmkit.data.io import atomic_write  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "labeling_load.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labellers", type=int, default=20)
    ap.add_argument("--items", type=int, default=60)
    ap.add_argument("--overlap", type=int, default=2)
    ap.add_argument("--kill-after", type=int, default=100)
    ap.add_argument("-o", "--output", default=str(OUT))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = run_load(Path(tmp), args.labellers, args.items, args.overlap, args.kill_after)
        submitted = Counter((n, html.unescape(p), pos, x) for n, p, pos, x in r["submitted"])
        exported = Counter(r["exported"])
        solutions = sum(1 for _ in read_records(r["export_path"]))
    result = {k: v for k, v in r.items() if k not in ("submitted", "exported", "export_path")}
    result.update({
        "requests_per_s": round(r["requests_per_s"], 1),
        "wall_s": round(r["wall_s"], 2),
        "restart_s": round(r["restart_s"], 2),
        "items": args.items,
        "overlap": args.overlap,
        "every_label_exported_once": exported == submitted and max(exported.values()) == 1,
        "solutions_read_back": solutions,
        "database": "sqlite",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m": os.getloadavg()[0]},
    })
    with atomic_write(args.output, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result, indent=2))
    return 0 if result["every_label_exported_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
