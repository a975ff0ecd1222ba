"""Read speed and peak memory of prmkit's raw PRM800K reader vs a plain json.loads loop.

Builds a ~150 MB raw PRM800K JSONL in a temporary folder by replicating the real raw
examples (../shared/data/prm800k/raw-examples), then, each in a fresh process:
  - prmkit: `read_prm800k` (typed LabelledSolution records, streaming, msgspec);
  - json.loads loop: `for line in f: json.loads(line)` (plain dicts, streaming);
  - json.loads list: `[json.loads(line) for line in f]` (what many scripts do; keeps all);
  - the same file in PRM800K's pretty-printed concatenated form: prmkit's streaming
    reader vs `json.JSONDecoder.raw_decode` over the whole file read into memory.
Writes benchmarks/results/data_read_speed.json.

    .venv/bin/python benchmarks/bench_data_read_speed.py [--mb 150] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "data_read_speed.json"


def raw_examples_dir() -> Path:
    env = os.environ.get("PRMKIT_DATA")
    for base in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        d = base / "prm800k" / "raw-examples"
        if d.is_dir():
            return d
    sys.exit("raw PRM800K examples not found: set PRMKIT_DATA to the data folder")


def build_files(folder: Path, target_mb: float) -> tuple[Path, Path, int]:
    """A JSONL file of about target_mb MB and the same records in concatenated form."""
    from prmkit.data.jsonstream import iter_any_json

    objs = []
    for p in sorted(raw_examples_dir().iterdir()):
        if p.name.startswith("scored"):
            continue
        objs += [v for _, v in iter_any_json(p)]
    lines = [json.dumps(o, ensure_ascii=False) + "\n" for o in objs]  # the official layout
    block = "".join(lines).encode()
    jsonl = folder / "big.jsonl"
    n = 0
    with open(jsonl, "wb") as f:
        while f.tell() < target_mb * 1e6:
            f.write(block)
            n += len(lines)
    cat = folder / "big.concatenated.json"
    pretty = "".join(json.dumps(o, indent=4, ensure_ascii=False) + "\n" for o in objs).encode()
    with open(cat, "wb") as f:
        while f.tell() < target_mb * 1e6 / 3:
            f.write(pretty)
    return jsonl, cat, n


# --- workers: each runs in its own process so that peak RSS is its own ----------------


def work_prmkit(path: str) -> int:
    from prmkit.data.prm800k import read_prm800k  # imported before timing, see worker_main

    steps = 0
    for sol in read_prm800k(path):
        steps += len(sol.steps)
    return steps


def work_json_loop(path: str) -> int:
    steps = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                steps += len(json.loads(line)["label"]["steps"])
    return steps


def work_json_list(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return sum(len(r["label"]["steps"]) for r in records)


def work_raw_decode(path: str) -> int:
    text = Path(path).read_text(encoding="utf-8")
    dec = json.JSONDecoder()
    i, steps = 0, 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return steps
        obj, i = dec.raw_decode(text, i)
        steps += len(obj["label"]["steps"])


WORKERS = {
    "prmkit": work_prmkit,
    "json_loop": work_json_loop,
    "json_list": work_json_list,
    "raw_decode": work_raw_decode,
}


def worker_main(name: str, path: str, repeat: int) -> None:
    import gc

    import prmkit.data.prm800k  # noqa: F401  (import time is not read time)

    gc.collect()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        steps = WORKERS[name](path)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": min(times), "steps": steps, "peak_rss_mb": peak / 1024,
                      "baseline_rss_mb": base / 1024}))


def measure_once(name: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", name, str(path), "--repeat", "1"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(names: tuple[str, ...], path: Path, repeat: int) -> dict[str, dict]:
    """Best time and highest peak RSS per reader over `repeat` rounds. Rounds interleave
    the readers, so that load from other jobs on the machine hits them alike."""
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for _ in range(repeat):
        for name in names:
            runs[name].append(measure_once(name, path))
    mb = path.stat().st_size / 1e6
    out = {}
    for name, rs in runs.items():
        best = min(r["seconds"] for r in rs)
        out[name] = {
            "seconds": best,
            "mb_per_s": mb / best,
            "median_mb_per_s": mb / sorted(r["seconds"] for r in rs)[len(rs) // 2],
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "steps": rs[0]["steps"],
            "file_mb": mb,
            "round_seconds": [r["seconds"] for r in rs],
        }
    return out


def median_ratio(rows: dict[str, dict], fast: str, slow: str) -> float:
    """Median over rounds of slow/fast time: each round's pair ran back to back."""
    ratios = sorted(s / f for f, s in zip(rows[fast]["round_seconds"], rows[slow]["round_seconds"]))
    return ratios[len(ratios) // 2]


def rounded(row: dict) -> dict:
    return {k: [round(x, 3) for x in v] if isinstance(v, list) else round(v, 3)
            for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=150.0, help="size of the JSONL file to build")
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds (best kept)")
    ap.add_argument("--worker", nargs=2, metavar=("NAME", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(args.worker[0], args.worker[1], args.repeat)
        return

    with tempfile.TemporaryDirectory(prefix="prmkit-bench-") as tmp:
        jsonl, cat, n_records = build_files(Path(tmp), args.mb)
        rows = measure(("prmkit", "json_loop", "json_list"), jsonl, args.repeat)
        cat_rows = measure(("prmkit", "raw_decode"), cat, args.repeat)
    for label, table in (("jsonl", rows), ("concatenated", cat_rows)):
        for name, r in table.items():
            print(f"{label:>12} {name:>10}: {r['mb_per_s']:7.1f} MB/s (median "
                  f"{r['median_mb_per_s']:.1f}), peak RSS {r['peak_rss_mb']:7.1f} MB")
    assert rows["prmkit"]["steps"] == rows["json_loop"]["steps"] == rows["json_list"]["steps"]
    assert cat_rows["prmkit"]["steps"] == cat_rows["raw_decode"]["steps"]
    result = {
        "mb_per_s": round(rows["prmkit"]["mb_per_s"], 1),
        "ratio_vs_json": round(rows["prmkit"]["mb_per_s"] / rows["json_loop"]["mb_per_s"], 2),
        "median_ratio_vs_json": round(median_ratio(rows, "prmkit", "json_loop"), 2),
        "peak_rss_mb": round(rows["prmkit"]["peak_rss_mb"], 1),
        "command": "python benchmarks/bench_data_read_speed.py "
                   f"--mb {args.mb:g} --repeat {args.repeat}",
        "file_mb": round(rows["prmkit"]["file_mb"], 1),
        "records": n_records,
        "jsonl": {k: rounded(r) for k, r in rows.items()},
        "concatenated": {k: rounded(r) for k, r in cat_rows.items()},
        "concatenated_ratio_vs_raw_decode": round(
            cat_rows["prmkit"]["mb_per_s"] / cat_rows["raw_decode"]["mb_per_s"], 2),
        "concatenated_median_ratio_vs_raw_decode": round(
            median_ratio(cat_rows, "prmkit", "raw_decode"), 2),
        "notes": "prmkit builds typed LabelledSolution records; json_loop builds plain dicts; "
                 "best of --repeat rounds that interleave the readers, each pass in a fresh "
                 "process (peak RSS includes the interpreter and imports); median_ratio_* "
                 "is the median over rounds of the two readers' time ratio in that round",
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in
                      ("mb_per_s", "ratio_vs_json", "median_ratio_vs_json", "peak_rss_mb")}))


if __name__ == "__main__":
    main()
