"""Run every benchmark; each writes benchmarks/results/<name>.json."""

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.stem for p in HERE.glob("bench_*.py"))
    for name in names:
        print(f"== {name}", flush=True)
        runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")
