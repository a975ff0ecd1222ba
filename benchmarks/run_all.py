"""Run every benchmark (or those named) with its default settings, one process each.

Each writes benchmarks/results/<name>.json; see BENCHMARKS.md for the figures.
    python benchmarks/run_all.py                      # all
    python benchmarks/run_all.py bench_grading        # one
"""

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.stem for p in HERE.glob("bench_*.py"))
    failed = []
    for name in names:
        path = HERE / f"{Path(name).stem}.py"
        if not path.is_file():
            sys.exit(f"no benchmark named {name!r} in {HERE}")
        print(f"== {path.stem}", flush=True)
        t0 = time.time()
        rc = subprocess.run([sys.executable, str(path)], cwd=HERE.parent).returncode
        print(f"== {path.stem}: exit {rc} in {time.time() - t0:.0f} s", flush=True)
        if rc:
            failed.append(path.stem)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")
