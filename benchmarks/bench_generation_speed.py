"""Sampling speed: prmkit's vLLM backend against its Hugging Face backend (`hf`), and
against a plain transformers `model.generate(do_sample=True)` call on the same rows.

Same SmolLM2-135M-Instruct folder and dtype, same chat prompts (MATH500 problems in
prmkit's chat prompt format), same n, temperature, top_p and max_tokens, same machine, in
one run. Each round runs the three one after another (engines built once, warmed up on
one request); a ratio is the median over rounds of the two tokens/s of one round. Tokens
are the generated tokens each reports (end-of-sequence included).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_generation_speed.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from prmkit.models.precision import use_bf16

HERE = Path(__file__).resolve().parent
MATH500 = HERE.parent.parent / "shared" / "data" / "math" / "math500.jsonl"


def timed(sampler, requests, params) -> dict:
    start = time.perf_counter()
    outputs = sampler.generate(requests, params)
    seconds = time.perf_counter() - start
    completions = [c for o in outputs for c in o.completions]
    tokens = sum(c.num_tokens for c in completions)
    return {"seconds": round(seconds, 2), "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1),
            "finished_by_length": sum(c.finish_reason == "length" for c in completions)}


def timed_transformers(hf, requests, params) -> dict:
    """One `generate` call over all rows (left padding), as a user would write it."""
    import torch

    from prmkit.models.decoding import left_padded

    ids, mask = left_padded([hf.prompt_ids(r) for r in requests for _ in range(r.n)], hf.pad_id)
    width = ids.size(1)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.inference_mode():
        out = hf.lm.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                             temperature=params.temperature, top_p=params.top_p, top_k=0,
                             max_new_tokens=params.max_tokens, eos_token_id=hf.eos_ids,
                             pad_token_id=hf.pad_id)
    seconds = time.perf_counter() - start
    tokens, by_length = 0, 0
    for row in out[:, width:].tolist():
        eos = next((k for k, t in enumerate(row) if t in hf.eos_ids), None)
        tokens += len(row) if eos is None else eos + 1
        by_length += eos is None
    return {"seconds": round(seconds, 2), "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1), "finished_by_length": by_length}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--n", type=int, default=4, help="samples per problem")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--dtype", default="bfloat16" if use_bf16("auto") else "float32",
                    choices=("bfloat16", "float32"),
                    help="default: bfloat16 where the CPU computes it natively, else float32")
    ap.add_argument("--hf-batch-size", type=int, default=16, help="rows per HF generate call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the HF backend")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "generation_speed.json")
    args = ap.parse_args()

    import torch

    from prmkit.generation import SampleRequest, SamplingParams, get_sampler
    from prmkit.generation.prompts import get_format
    from prmkit.models.backbones import smollm2_folder

    torch.set_num_threads(args.threads)
    folder = smollm2_folder()
    fmt = get_format("chat")
    with open(MATH500) as f:
        problems = [json.loads(line) for line in f][:args.problems]
    requests = [SampleRequest(p["unique_id"], fmt.render(p["problem"]), n=args.n, seed=0)
                for p in problems]
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p,
                            max_tokens=args.max_tokens, stop=fmt.stop_strings)
    warmup = [SampleRequest("warmup", fmt.render(problems[0]["problem"]), n=2, seed=1)]
    warm_params = SamplingParams(temperature=args.temperature, max_tokens=16)

    t0 = time.perf_counter()
    vllm = get_sampler("vllm", str(folder), dtype=args.dtype, max_model_len=2048, seed=0)
    vllm_start_s = time.perf_counter() - t0
    hf = get_sampler("hf", str(folder), dtype=args.dtype, batch_size=args.hf_batch_size, seed=0)
    rounds = []
    try:
        vllm.generate(warmup, warm_params)
        hf.generate(warmup, warm_params)
        for r in range(args.rounds):
            v = timed(vllm, requests, params)
            h = timed(hf, requests, params)
            t = timed_transformers(hf, requests, params)
            rounds.append({"vllm": v, "hf": h, "transformers_generate": t,
                           "ratio": round(v["tokens_per_s"] / h["tokens_per_s"], 2),
                           "ratio_vs_transformers_generate":
                               round(v["tokens_per_s"] / t["tokens_per_s"], 2)})
            print(f"round {r + 1}: vLLM {v['tokens_per_s']} tok/s, hf backend "
                  f"{h['tokens_per_s']} tok/s, transformers generate {t['tokens_per_s']} tok/s",
                  flush=True)
        vllm_describe, hf_describe = vllm.describe(), hf.describe()
    finally:
        vllm.close()
        hf.close()

    def median(values) -> float:
        return round(statistics.median(values), 2)

    result = {
        "vllm_tokens_per_s": median(x["vllm"]["tokens_per_s"] for x in rounds),
        "hf_tokens_per_s": median(x["hf"]["tokens_per_s"] for x in rounds),
        "ratio": median(x["ratio"] for x in rounds),
        "ratio_is": "median over rounds of vLLM / hf-backend tokens/s within a round",
        "transformers_generate_tokens_per_s": median(
            x["transformers_generate"]["tokens_per_s"] for x in rounds),
        "ratio_vs_transformers_generate": median(
            x["ratio_vs_transformers_generate"] for x in rounds),
        "rounds": rounds,
        "settings": {
            "model": "SmolLM2-135M-Instruct (prmkit.models.backbones.smollm2_folder())",
            "prompts": f"first {args.problems} MATH500 problems, prmkit chat prompt format",
            "n": args.n, "sequences": args.problems * args.n, "max_tokens": args.max_tokens,
            "temperature": args.temperature, "top_p": args.top_p, "dtype": args.dtype,
            "hf_batch_size": args.hf_batch_size, "hf_torch_threads": args.threads,
            "vllm_engine_start_s": round(vllm_start_s, 1),
            "vllm_cpu_binding": "vLLM binds its model worker to one core and leaves the other "
                                "to the frontend (its default on 2 cores)",
        },
        "vllm": vllm_describe, "hf": hf_describe,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "torch": torch.__version__},
        "command": "python benchmarks/bench_generation_speed.py " + " ".join(sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"vLLM {result['vllm_tokens_per_s']} tok/s, hf backend {result['hf_tokens_per_s']} "
          f"tok/s ({result['ratio']}x), transformers generate "
          f"{result['transformers_generate_tokens_per_s']} tok/s "
          f"({result['ratio_vs_transformers_generate']}x) -> {args.out}")


if __name__ == "__main__":
    main()
