"""A signed-in labeller's `GET /tasks` while clients loop wrong passwords: p50/p95 with 0
and with 4 attacking clients, against `prmkit label serve` (SQLite, 127.0.0.1) with
argon2-cffi's default parameters, as a lab runs it.

    .venv/bin/python benchmarks/bench_labeling_login_flood.py [--seconds 15] [--attackers 4]

Two servers: sign-in throttling as shipped (`--login-throttle 5,20,300`: the attackers,
all from 127.0.0.1, soon get 429 without a hash) and switched off (`0,0,300`: every
wrong password is hashed, each attacker trying a new user name every time), which shows
what hashing outside the write lock alone gives. Writes
benchmarks/results/labeling_login_flood.json. Each phase runs for --seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from labeling_support import (  # noqa: E402
    PASSWORD,
    hidden,
    login,
    phase1_record,
    start_label_server,
    write_queue,
)

from prmkit.data.io import atomic_write  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "labeling_login_flood.json"


def _prepare(db: str, tmp: Path) -> None:
    code = (
        "import sys; from prmkit.labeling import create_app, service\n"
        "app = create_app(sys.argv[1])\n"
        "with app.state.sessionmaker() as s:\n"
        "    service.create_user(s, 'ann', sys.argv[2])\n"
        "    p = service.create_project(s, 'p1', phase=1); s.commit()\n"
        "    service.set_members(s, p, ['ann'])\n"
        "    service.import_queue(s, p, sys.argv[3])\n"
        "    t = service.next_task(s, service.get_user(s, 'ann'), p)\n")
    queue = write_queue(tmp / "q.jsonl", [phase1_record(i) for i in range(20)])
    subprocess.run([sys.executable, "-c", code, db, PASSWORD, str(queue)], check=True,
                   env=_env())


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PRMKIT_ARGON2", None)  # argon2-cffi's defaults, as served
    return env


def _attack(url: str, stop: threading.Event, codes: Counter, lock: threading.Lock,
            who: int) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        token = hidden(c.get("/login").text, "csrf_token")
        n = 0
        while not stop.is_set():
            n += 1
            r = c.post("/login", data={"username": f"guess{who}x{n}", "password": "wrong",
                                       "csrf_token": token})
            with lock:
                codes[r.status_code] += 1


def _phase(url: str, attackers: int, seconds: float) -> dict:
    stop, lock, codes = threading.Event(), threading.Lock(), Counter()
    threads = [threading.Thread(target=_attack, args=(url, stop, codes, lock, i))
               for i in range(attackers)]
    times = []
    with httpx.Client(base_url=url, timeout=60) as ann:
        login(ann, "ann")
        for t in threads:
            t.start()
        time.sleep(0.5 if attackers else 0)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            r = ann.get("/tasks")
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200, r.status_code
            time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    q = statistics.quantiles(times, n=100)
    return {"attackers": attackers, "requests": len(times),
            "p50_ms": round(statistics.median(times), 1), "p95_ms": round(q[94], 1),
            "max_ms": round(max(times), 1),
            "sign_in_answers": {str(k): v for k, v in sorted(codes.items())}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--attackers", type=int, default=4)
    ap.add_argument("-o", "--output", default=str(OUT))
    args = ap.parse_args()
    results = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for name, throttle in (("throttled", "5,20,300"), ("unthrottled", "0,0,300")):
            db = str(Path(tmp) / f"{name}.sqlite")
            _prepare(db, Path(tmp))
            proc, url = start_label_server(db, "--login-throttle", throttle, env=_env(),
                                           stderr=subprocess.DEVNULL)
            try:
                results[name] = {"login_throttle": throttle, "phases": [
                    _phase(url, 0, args.seconds), _phase(url, args.attackers, args.seconds)]}
            finally:
                proc.terminate()
                proc.wait(10)
            for phase in results[name]["phases"]:
                print(f"{name:>11} {phase['attackers']} attackers: p50 {phase['p50_ms']} ms, "
                      f"p95 {phase['p95_ms']} ms over {phase['requests']} GET /tasks; "
                      f"sign-in answers {phase['sign_in_answers']}", file=sys.stderr)
    out = {"benchmark": "labeling_login_flood", "seconds_per_phase": args.seconds,
           "database": "sqlite", "argon2": "argon2-cffi defaults",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "platform": platform.platform(),
                       "load_average_1min_before_and_after": [round(load_before[0], 2),
                                                              round(os.getloadavg()[0], 2)]},
           "command": "python benchmarks/bench_labeling_login_flood.py "
                      f"--seconds {args.seconds:g} --attackers {args.attackers}",
           **results}
    with atomic_write(args.output, "w") as f:
        f.write(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
