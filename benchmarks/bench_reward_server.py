"""Reward server throughput and latency: batched serving against one request, one forward.

Two `prmkit serve` processes on 127.0.0.1 hold the same small random Llama PRM (9.6 M
parameters, bf16, CPU): one as `prmkit serve` runs by default (requests of all clients
coalesced under a token budget, 5 ms max wait, completions of one prompt sharing the
prompt's tokens in a prefix-tree row), one with `--max-batch-requests 1 --max-wait-ms 0
--no-share-prefixes` (each request its own padded forward: what a plain FastAPI wrapper
around a model does, e.g. OpenRLHF's serve_rm). Clients speak OpenRLHF's remote protocol
(`POST /get_reward`); each client sends its next request when the last one is answered.
Two workloads (`--workload`): `one`, one completion of 3 to 6 steps per request (a rollout
worker scoring samples as they finish, short prompts); `groups`, GRPO-shaped: each request
holds the G = 8 completions (3 to 6 steps) of one prompt of 200 to 400 tokens (an
instruction and a few worked examples before the problem), as OpenRLHF's remote reward
model receives a list of queries per request. At 1, 8 and 32 concurrent clients,
the two servers take the same requests in rounds, one after the other in alternating
order, so that a load change on a shared machine hits both; the throughput ratio is the
median of the rounds' ratios, and both servers must give the same rewards (within bf16
rounding). Writes benchmarks/results/reward_server.json.

    .venv/bin/python benchmarks/bench_reward_server.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
from scoring_common import ServeProcess, machine_facts, write_result  # noqa: E402

from prmkit.models.precision import compute_dtype  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "reward_server.json"
KEY = "bench-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
STEPS = ["First, compute 3 * 4 = 12.", "Next, 12 - 5 = 7.", "Let x be the number of apples.",
         "Then 2x + 3 = 11, so 2x = 8 and x = 4.", "We check: 2 * 4 + 3 = 11, as needed.",
         "So the total is 12 + 7 = 19.", "# Answer\n\n19"]
PROBLEMS = ["Compute 3 * 4 - 5 and then add 12.", "Solve 2x + 3 = 11 for x.",
            "How many apples are left if 4 of 11 are eaten and 3 more are bought?"]


def build_model(folder: Path, hidden_size: int, layers: int) -> int:
    from prmkit.models.backbones import tiny_random
    from prmkit.models.config import RewardModelConfig
    from prmkit.models.reward_model import StepRewardModel

    backbone, tok = tiny_random(seed=0, hidden_size=hidden_size, layers=layers)
    model = StepRewardModel.from_backbone(backbone, tok, RewardModelConfig())
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def model_params(folder: Path) -> int:
    from prmkit.models.reward_model import StepRewardModel

    return sum(p.numel() for p in StepRewardModel.from_pretrained(folder).parameters())


def completion(rng: random.Random) -> str:
    return "\n\n".join(rng.sample(STEPS, rng.randint(3, 6)))


def workload(n: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """Requests of one (prompt, [completion]) of 3 to 6 steps."""
    rng = random.Random(seed)
    return [(rng.choice(PROBLEMS) + "\n\n", [completion(rng)]) for _ in range(n)]


def few_shot_prompt(rng: random.Random) -> str:
    """An instruction, 2 or 3 worked examples and the problem (200 to 400 model tokens);
    the problem's number makes every prompt different."""
    shots = "".join(f"Problem: {rng.choice(PROBLEMS)}\nSolution: "
                    f"{' '.join(rng.sample(STEPS[:-1], 3))} {STEPS[-1]}\n\n"
                    for _ in range(rng.randint(2, 3)))
    return (f"Solve the problem step by step; put each step on its own paragraph.\n\n"
            f"{shots}Problem {rng.randint(1, 10**6)}: {rng.choice(PROBLEMS)}\n\n")


def group_workload(n: int, seed: int = 0, group: int = 8) -> list[tuple[str, list[str]]]:
    """GRPO-shaped requests: (prompt, its `group` completions of 3 to 6 steps)."""
    rng = random.Random(seed)
    return [(p, [completion(rng) for _ in range(group)])
            for p in (few_shot_prompt(rng) for _ in range(n))]


WORKLOADS = {"one": workload, "groups": group_workload}


class Server(ServeProcess):
    def __init__(self, model_dir: Path, dtype: str, extra: list[str], threads: int,
                 device: str = "cpu"):
        super().__init__(model_dir, "--dtype", dtype, "--device", device, *extra, key=KEY,
                         env={"OMP_NUM_THREADS": str(threads)}, start_timeout=180)

    def batches(self) -> tuple[float, float, float]:
        """(batches run, requests batched, seconds scoring) so far, from /metrics."""
        text = httpx.get(self.url + "/metrics", headers=HEADERS, timeout=10).text
        names = ("prmkit_reward_batch_requests_count", "prmkit_reward_batch_requests_sum",
                 "prmkit_reward_batch_seconds_sum")
        found = {}
        for line in text.splitlines():
            for name in names:
                if line.startswith(name + " "):
                    found[name] = float(line.split()[1])
        return tuple(found.get(name, 0.0) for name in names)


async def load(url: str, clients: int, requests: list[tuple[str, list[str]]]) -> dict:
    """`clients` concurrent clients share `requests` (prompt, completions), in turn."""
    latencies: list[float] = []
    rewards: dict[int, list[float]] = {}
    todo = iter(range(len(requests)))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=300,
                                 limits=limits) as http:
        async def client() -> None:
            for i in todo:
                prompt, completions = requests[i]
                start = time.perf_counter()
                r = await http.post("/get_reward", json={
                    "query": [prompt + c for c in completions],
                    "prompts": [prompt] * len(completions), "labels": [""] * len(completions)})
                r.raise_for_status()
                latencies.append(time.perf_counter() - start)
                rewards[i] = r.json()["rewards"]

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return {"requests": len(requests), "completions": sum(len(c) for _, c in requests),
            "seconds": wall, "latencies": latencies,
            "rewards": [x for i in range(len(requests)) for x in rewards[i]]}


def summary(rounds: list[dict]) -> dict:
    """Median rewards/s over the rounds; latency percentiles over all their requests."""
    latencies = [x for r in rounds for x in r["latencies"]]
    q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else latencies * 19
    return {"requests_per_round": rounds[0]["requests"], "rounds": len(rounds),
            "completions_per_round": rounds[0]["completions"],
            "rewards_per_s": round(statistics.median(r["completions"] / r["seconds"]
                                                     for r in rounds), 2),
            "rewards_per_s_by_round": [round(r["completions"] / r["seconds"], 2)
                                       for r in rounds],
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_p95_ms": round(q[18] * 1000, 1),
            "requests_per_batch": round(statistics.mean(r["requests_per_batch"] for r in rounds), 2),
            # the share of the wall time the server spent in the score function (the rest:
            # HTTP, JSON, queueing, and the clients)
            "scoring_share_of_time": round(statistics.mean(r["scoring_share"] for r in rounds), 2)}


def model_ceiling(model_dir: Path, dtype: str, threads: int,
                  requests: list[tuple[str, list[str]]], rounds: int, device: str = "cpu") -> dict:
    """The most the batched server can give here: the contract on every completion of
    `requests` at once, prefixes shared, against one call per request without sharing, in
    this process (no HTTP, no queue), `threads` torch threads."""
    import torch

    from prmkit.rewards.serving import Item, ScorerBackend

    torch.set_num_threads(threads)
    shared = ScorerBackend.from_pretrained(model_dir, dtype=dtype, device=device)
    plain = ScorerBackend.from_pretrained(model_dir, dtype=dtype, device=device,
                                          share_prefixes=False)
    per_request = [[Item(p, c) for c in cs] for p, cs in requests]
    items = [it for req in per_request for it in req]
    shared.score(items)  # warm-up
    together, alone = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        shared.score(items)
        together.append(time.perf_counter() - start)
        start = time.perf_counter()
        for req in per_request:
            plain.score(req)
        alone.append(time.perf_counter() - start)
    return {"requests": len(requests), "completions": len(items),
            "together_ms": round(statistics.median(together) * 1000, 1),
            "one_by_one_ms": round(statistics.median(alone) * 1000, 1),
            "ratio": round(statistics.median(a / t for a, t in zip(alone, together)), 2)}


def run_level(servers: dict, clients: int, requests: list, rounds: int) -> dict:
    """Both servers on the same requests, `rounds` times in alternating order."""
    level: dict = {"clients": clients}
    for rnd in range(rounds):
        names = list(servers) if rnd % 2 == 0 else list(servers)[::-1]
        for name in names:
            before = servers[name].batches()
            got = asyncio.run(load(servers[name].url, clients, requests))
            after = servers[name].batches()
            got["requests_per_batch"] = round(
                (after[1] - before[1]) / max(1.0, after[0] - before[0]), 2)
            got["scoring_share"] = (after[2] - before[2]) / got["seconds"]
            level.setdefault(name, []).append(got)
    runs = {name: level.pop(name) for name in servers}
    level["max_reward_difference"] = max(
        abs(x - y) for a, b in zip(runs["batched"], runs["one_request_one_forward"])
        for x, y in zip(a["rewards"], b["rewards"], strict=True))
    # Rounds alternate the two servers, so load changes hit both: the ratio is the median
    # of the rounds' ratios.
    level["throughput_ratio"] = round(statistics.median(
        b["seconds"] / a["seconds"] for a, b in
        zip(runs["batched"], runs["one_request_one_forward"])), 2)
    for name in servers:
        level[name] = summary(runs[name])
    level["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    return level


def describe(name: str, level: dict) -> str:
    b, o = level["batched"], level["one_request_one_forward"]
    return (f"{name:>6} {level['clients']:>3} clients: batched {b['rewards_per_s']:8.1f}/s "
            f"p50 {b['latency_p50_ms']:7.1f} ms p95 {b['latency_p95_ms']:7.1f} ms | "
            f"one-forward {o['rewards_per_s']:8.1f}/s p50 {o['latency_p50_ms']:7.1f} ms p95 "
            f"{o['latency_p95_ms']:7.1f} ms | {level['throughput_ratio']:.2f}x")


WORKLOAD_TEXT = {
    "one": "one completion (3-6 steps, a one-line problem) per POST /get_reward",
    "groups": "GRPO-shaped: the 8 completions (3-6 steps each) of one prompt of 200-400 "
              "tokens per POST /get_reward, a different prompt per request",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden-size", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dtype", default=compute_dtype("auto"), choices=("bf16", "fp32"),
                    help="default: bf16 where the CPU computes it natively, else fp32")
    ap.add_argument("--workload", nargs="+", choices=sorted(WORKLOADS), default=["one", "groups"])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests-per-client", type=int, default=4,
                    help="requests per client at each level and round (at least 16 in all)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per level, the two servers in alternating order")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of each server (OMP_NUM_THREADS); the clients and the "
                         "idle server share the rest")
    ap.add_argument("--model", help="serve this PRM folder instead of a random one")
    ap.add_argument("--device", default="cpu", help="the servers' device (cpu, cuda)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()

    started, load_at_start = time.perf_counter(), os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.model or tmp)
        params = model_params(folder) if args.model else build_model(
            folder, args.hidden_size, args.layers)
        servers = {"batched": Server(folder, args.dtype, [], args.threads, args.device),
                   "one_request_one_forward": Server(
                       folder, args.dtype, ["--max-batch-requests", "1", "--max-wait-ms", "0",
                                            "--no-share-prefixes"], args.threads, args.device)}
        try:
            for name in args.workload:
                make = WORKLOADS[name]
                ceiling = model_ceiling(folder, args.dtype, args.threads,
                                        make(max(args.clients), seed=7), args.rounds, args.device)
                print(f"{name}: model alone, {ceiling['requests']} requests: at once "
                      f"{ceiling['together_ms']} ms, one by one {ceiling['one_by_one_ms']} ms "
                      f"({ceiling['ratio']:.2f}x)", flush=True)
                for s in servers.values():  # warm-up
                    asyncio.run(load(s.url, 2, make(4, seed=99)))
                levels = []
                for clients in args.clients:
                    requests = make(max(16, clients * args.requests_per_client), seed=clients)
                    levels.append(run_level(servers, clients, requests, args.rounds))
                    print(describe(name, levels[-1]), flush=True)
                top = max(levels, key=lambda lv: lv["clients"])
                results[name] = {
                    "workload": WORKLOAD_TEXT[name] + "; each client sends its next request "
                                "when the last is answered",
                    "levels": levels, "model_alone": ceiling,
                    "target": {"clients": top["clients"], "min_ratio": 3.0,
                               "met": top["throughput_ratio"] >= 3.0}}
        finally:
            for s in servers.values():
                s.stop()
    result = {
        "command": " ".join(["python benchmarks/bench_reward_server.py", *sys.argv[1:]]),
        "model": ({"kind": "trained PRM", "folder": args.model} if args.model else
                  {"kind": "random Llama PRM (prmkit tiny_random)",
                   "hidden_size": args.hidden_size, "layers": args.layers})
        | {"parameters": params, "dtype": args.dtype, "device": args.device,
           "server_torch_threads": args.threads},
        "batched_settings": {"batch_tokens": 16384, "max_wait_ms": 5.0, "share_prefixes": True},
        "baseline_settings": {"max_batch_requests": 1, "max_wait_ms": 0.0,
                              "share_prefixes": False},
        "workloads": results,
        **machine_facts(started, load_at_start),
        "load_average_at_end": round(os.getloadavg()[0], 2),
    }
    write_result(args.out, result)
    return 0 if all(lv["max_reward_difference"] < 0.05 for r in results.values()
                    for lv in r["levels"]) else 1


if __name__ == "__main__":
    sys.exit(main())
