"""A labeller's sign-in while many addresses loop wrong passwords: how long until they are
in, against `prmkit label serve` (SQLite, 127.0.0.1, argon2-cffi's default parameters).

    .venv/bin/python benchmarks/bench_labeling_sign_in_flood.py [--attackers 40]
        [--target names|account] [--src DIR] [-o OUT]

Each attacker is a client bound to its own address of 127.0.0.0/8 (127.0.1.N) that posts
wrong passwords as fast as they are answered, pausing 0.1 s after a 429 (which keeps the
benchmark's own CPU bounded); `--target names` tries a new user name every time,
`account` the labeller's account. After --warmup seconds, two sign-ins are timed, each
retrying after a 429 as its Retry-After says (a person clicking again), for at most
--timeout seconds: a browser from a new address, and a browser that signed in before the
flood from another address (the app gives it a device cookie). `--src` serves another
checkout's `src` (e.g. `git archive COMMIT src | tar -x -C /tmp/before`) to compare.
Writes benchmarks/results/labeling_sign_in_flood.json unless -o says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

from labeling_support import PASSWORD, hidden, start_label_server  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "labeling_sign_in_flood.json"


def _env(src: Path, argon2: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PRMKIT_ARGON2", None)  # argon2-cffi's defaults, as served
    if argon2:
        env["PRMKIT_ARGON2"] = argon2
    return env


def _prepare(db: str, env: dict) -> None:
    code = ("import sys; from prmkit.labeling import create_app, service\n"
            "app = create_app(sys.argv[1])\n"
            "with app.state.sessionmaker() as s:\n"
            "    for name in ('ann', 'bob'):\n"
            "        service.create_user(s, name, sys.argv[2])\n")
    subprocess.run([sys.executable, "-c", code, db, PASSWORD], check=True, env=env)


def _client(url: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=600, follow_redirects=False,
                        transport=httpx.HTTPTransport(local_address=address))


def _attack(url: str, who: int, target: str, stop: threading.Event, codes: Counter,
            lock: threading.Lock) -> None:
    with _client(url, f"127.0.1.{who + 1}") as c:
        token = hidden(c.get("/login").text, "csrf_token")
        n = 0
        while not stop.is_set():
            n += 1
            name = f"guess{who}x{n}" if target == "names" else "ann"
            try:
                r = c.post("/login", data={"username": name, "password": "wrong",
                                           "csrf_token": token})
            except httpx.HTTPError:
                with lock:
                    codes["error"] += 1
                stop.wait(0.1)
                continue
            with lock:
                codes[r.status_code] += 1
            if r.status_code == 429:
                stop.wait(0.1)


def _sign_in(c: httpx.Client, name: str, timeout: float) -> dict:
    """Sign in as a person would, clicking again after a 429 once Retry-After has passed."""
    t0 = time.monotonic()
    answers = []
    while time.monotonic() - t0 < timeout:
        token = hidden(c.get("/login").text, "csrf_token")
        r = c.post("/login", data={"username": name, "password": PASSWORD,
                                   "csrf_token": token})
        answers.append(r.status_code)
        if r.status_code == 303:
            return {"signed_in": True, "wait_s": round(time.monotonic() - t0, 2),
                    "attempts": len(answers), "answers": dict(Counter(answers))}
        time.sleep(min(float(r.headers.get("retry-after", "1")), 30.0))
    return {"signed_in": False, "wait_s": round(time.monotonic() - t0, 2),
            "attempts": len(answers), "answers": dict(Counter(answers))}


def run(src: Path, attackers: int, target: str, warmup: float, timeout: float,
        argon2: str | None) -> dict:
    env = _env(src, argon2)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "labels.sqlite")
        _prepare(db, env)
        proc, url = start_label_server(db, env=env, stderr=subprocess.DEVNULL)
        stop, lock, codes = threading.Event(), threading.Lock(), Counter()
        threads = [threading.Thread(target=_attack, args=(url, i, target, stop, codes, lock),
                                    daemon=True) for i in range(attackers)]
        try:
            with _client(url, "127.0.0.201") as known:
                before = _sign_in(known, "bob", 60)  # a browser that signed in earlier
                for t in threads:
                    t.start()
                time.sleep(warmup)
                with _client(url, "127.0.0.200") as fresh:
                    new_client = _sign_in(fresh, "ann", timeout)
                known_browser = _sign_in(known, "bob", timeout)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
            proc.terminate()
            proc.wait(30)
    return {"attackers": attackers, "target": target, "warmup_s": warmup,
            "before_the_flood": before, "new_client": new_client,
            "known_browser": known_browser,
            "attacker_answers": {str(k): v for k, v in sorted(codes.items(), key=str)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attackers", type=int, default=40)
    ap.add_argument("--target", choices=["names", "account"], default="names")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--src", type=Path, default=ROOT / "src")
    ap.add_argument("--argon2", help="PRMKIT_ARGON2 for the server (default: argon2-cffi's)")
    ap.add_argument("--label", default="this checkout", help="name of the run in the output")
    ap.add_argument("-o", "--output", default=str(OUT))
    args = ap.parse_args()
    if not 1 <= args.attackers <= 250:
        ap.error("--attackers: 1 to 250 (addresses 127.0.1.1 to 127.0.1.250)")
    load_before = os.getloadavg()[0]
    result = run(args.src.resolve(), args.attackers, args.target, args.warmup, args.timeout,
                 args.argon2)
    result.update({"label": args.label, "argon2": args.argon2 or "argon2-cffi defaults",
                   "command": "python benchmarks/bench_labeling_sign_in_flood.py "
                              + " ".join(sys.argv[1:]),
                   "load_average_1min_before_and_after": [round(load_before, 2),
                                                          round(os.getloadavg()[0], 2)]})
    print(json.dumps(result), file=sys.stderr)
    out = Path(args.output)
    runs = json.loads(out.read_text())["runs"] if out.exists() else []
    key = ("label", "target", "attackers", "warmup_s")
    runs = [r for r in runs if [r[k] for k in key] != [result[k] for k in key]]
    doc = {"benchmark": "labeling_sign_in_flood", "database": "sqlite",
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "platform": platform.platform()},
           "runs": [*runs, result]}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
