"""Sampling with ended rows out of the batch (`prmkit.models.decoding`) against
transformers' `generate(do_sample=True)`, side by side: the same tokens, the time of each.

    python benchmarks/bench_decode.py [--model demo|smollm2|FOLDER] [--rounds 3]

`demo` (default): the demo's shipped MathMix base (a 1.2M-parameter Llama, fp32, one torch
thread) on the first `--problems` test problems of the demo world's seed 0, `--n` samples
each at temperature 1, up to 64 new tokens, 128 rows per call: the RL experiment's
sampling. A folder of the RL experiment's work (`OUT/work/seed0/policy`) samples its
fine-tuned policy the same way. `smollm2`: SmolLM2-135M-Instruct (fp32, 2 threads) on the
first MATH500 problems in its chat template. Both sides run the same left-padded batches
from the same seed of the global generator; every round checks the tokens are equal.
Rounds alternate. Writes benchmarks/results/decode_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from scoring_common import cpu_model
from transformers import GenerationConfig

from prmkit.models.decoding import generate_dropping_ended, left_padded, resolved_for_decode

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MATH500 = HERE.parent.parent / "shared" / "data" / "math" / "math500.jsonl"


def demo_batches(folder, problems: int, n: int):
    from prmkit.demo.core.config import DemoConfig
    from prmkit.demo.core.seed import seed_world
    from prmkit.demo.lm.policy import policy_sampler, prompt_text

    sampler = policy_sampler(folder)
    test = list(seed_world(0, DemoConfig(seeds=(0,))).splits.test[:problems])
    rows = [sampler.tokenizer(prompt_text(p))["input_ids"] for p in test for _ in range(n)]
    return sampler, rows


def smollm2_batches(problems: int, n: int):
    from prmkit.generation.base import Prompt, SampleRequest
    from prmkit.generation.hf_backend import HFSampler

    sampler = HFSampler("smollm2-135m", device="cpu", dtype="fp32")
    lines = MATH500.read_text().splitlines()[:problems]
    rows = [sampler.prompt_ids(SampleRequest(key=str(i), prompt=Prompt(
        messages=[{"role": "user", "content": json.loads(line)["problem"]}])))
        for i, line in enumerate(lines) for _ in range(n)]
    return sampler, rows


def run(side: str, model, batches, config, resolved) -> tuple[float, list[torch.Tensor]]:
    outs = []
    start = time.perf_counter()
    with torch.inference_mode():
        for b, (ids, mask) in enumerate(batches):
            torch.manual_seed(b)
            if side == "generate":
                outs.append(model.generate(input_ids=ids, attention_mask=mask,
                                           generation_config=config))
            else:
                outs.append(generate_dropping_ended(model, ids, mask, resolved))
    return time.perf_counter() - start, outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="demo", help="demo, smollm2 or a policy folder")
    ap.add_argument("--problems", type=int, default=None, help="default 120 (demo), 8")
    ap.add_argument("--n", type=int, default=None, help="samples per problem: 8 (demo), 4")
    ap.add_argument("--max-tokens", type=int, default=None, help="64 (demo), 256")
    ap.add_argument("--rows", type=int, default=None, help="rows per call: 128 (demo), 32")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    small = args.model != "smollm2"
    problems = args.problems or (120 if small else 8)
    n, rows_per = args.n or (8 if small else 4), args.rows or (128 if small else 32)
    max_tokens = args.max_tokens or (64 if small else 256)
    torch.set_num_threads(1 if small else 2)
    if small:
        from prmkit.demo.lm.base import SHIPPED_BASE

        folder = SHIPPED_BASE if args.model == "demo" else Path(args.model)
        sampler, rows = demo_batches(folder, problems, n)
    else:
        sampler, rows = smollm2_batches(problems, n)
    rows.sort(key=len)  # as the hf backend batches them: less padding
    batches = [left_padded(rows[i:i + rows_per], sampler.pad_id)
               for i in range(0, len(rows), rows_per)]
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              max_new_tokens=max_tokens, eos_token_id=sampler.eos_ids,
                              pad_token_id=sampler.pad_id)
    model = sampler.lm
    resolved = resolved_for_decode(model, config)
    if resolved is None:
        raise SystemExit("decode does not reproduce generate under this config")
    seconds: dict[str, list[float]] = {"generate": [], "decode": []}
    for _ in range(args.rounds):
        outs = {}
        for side in seconds:
            took, outs[side] = run(side, model, batches, config, resolved)
            seconds[side].append(round(took, 3))
            print(side, round(took, 2), flush=True)
        if not all(torch.equal(a, b) for a, b in zip(outs["generate"], outs["decode"], strict=True)):
            raise SystemExit("decode and generate gave different tokens")
    ends = []
    for out, (ids, _) in zip(outs["decode"], batches, strict=True):
        for row in out[:, ids.size(1):].tolist():
            eos = next((k for k, t in enumerate(row) if t in sampler.eos_ids), None)
            ends.append(max_tokens if eos is None else eos + 1)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    name = args.model if args.model in ("demo", "smollm2") else "policy"
    result = {
        "command": f"python benchmarks/bench_decode.py --model {args.model} --rounds {args.rounds}",
        "machine": f"{cpu_model()}, {torch.get_num_threads()} torch thread(s)",
        "settings": {"model": str(args.model), "problems": problems, "n": n,
                     "max_new_tokens": max_tokens, "rows_per_call": rows_per,
                     "temperature": 1.0, "dtype": "fp32"},
        "rows": len(rows), "generated_tokens": sum(ends),
        "mean_completion_tokens": round(sum(ends) / len(ends), 1),
        "rows_cut_at_max_tokens": sum(e == max_tokens for e in ends),
        "same_tokens": True, "seconds": seconds, "median_seconds": median,
        "ratio": round(median["generate"] / median["decode"], 3),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"decode_{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
