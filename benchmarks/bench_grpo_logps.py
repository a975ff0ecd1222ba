"""GRPO's log-probability pass on SmolLM2-135M: TRL's own pass against prmkit's trimmed
chunks and its shared prompts, side by side.

    python benchmarks/bench_grpo_logps.py [--prompts 2] [--group 8] [--completion 32,160]
        [--rounds 3] [--threads 2]

A GRPO batch as TRL builds it: `--prompts` MATH500 problems in SmolLM2-Instruct's chat
template (left-padded), `--group` completions each (right-padded), of lengths drawn
uniformly in `--completion` (seeded random tokens: the pass's cost does not depend on
which tokens). Each arm runs the forward and backward of `TrimmedLogps` in a GRPOTrainer
of TRL: TRL's pass (`trim_rows=0`, `share_prompts=False`), trimmed chunks of 8 rows, and
trimmed chunks with each prompt once (prmkit's default). After one untimed pass, rounds
alternate the arms; every round checks each arm's log-probabilities and gradients against
TRL's. fp32, `--threads` torch threads (about 8 minutes on 2 cores). Writes
benchmarks/results/grpo_logps.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from scoring_common import cpu_model, load_average, machine_facts, write_result

from prmkit.generation.base import Prompt, prompt_token_ids

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "math" / "math500.jsonl"
ARMS = {"TRL's pass": (0, False), "trimmed chunks": (8, False),
        "trimmed chunks, each prompt once": (8, True)}


def grpo_batch(tokenizer, problems: list[str], group: int, lengths: tuple[int, int],
               seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(input_ids, attention_mask, completion width): prompts left-padded, completions
    right-padded, as TRL's GRPOTrainer builds its batch."""
    g = torch.Generator().manual_seed(seed)
    prompts = [prompt_token_ids(tokenizer, Prompt(messages=({"role": "user", "content": p},)))
               for p in problems]
    sizes = torch.randint(lengths[0], lengths[1] + 1, (len(prompts) * group,), generator=g)
    width, completion = max(map(len, prompts)), int(sizes.max())
    ids = torch.full((len(sizes), width + completion), tokenizer.pad_token_id or 0)
    mask = torch.zeros_like(ids)
    for row, size in enumerate(sizes.tolist()):
        prompt = prompts[row // group]
        ids[row, width - len(prompt): width] = torch.tensor(prompt)
        ids[row, width: width + size] = torch.randint(100, tokenizer.vocab_size - 100, (size,),
                                                      generator=g)
        mask[row, width - len(prompt): width + size] = 1
    return ids, mask, completion


def one_pass(trainer, ids, mask, completion: int, rows: int, share: bool):
    """Seconds of the forward and backward, the log-probabilities and the gradient."""
    trainer.trim_rows, trainer.share_prompts = rows, share
    trainer.model.zero_grad()
    t0 = time.perf_counter()
    logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask,
                                                             completion)
    (logps * mask[:, -completion:]).sum().backward()
    seconds = time.perf_counter() - t0
    grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return seconds, logps.detach(), grad


def main() -> int:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from prmkit.models.backbones import smollm2_folder
    from prmkit.rewards.trl_trim import with_trimmed_logps

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--completion", default="32,160", help="shortest,longest completion")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="/tmp/bench-grpo-logps")
    ap.add_argument("--out", default=str(RESULTS / "grpo_logps.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started, load = time.perf_counter(), load_average()
    folder = smollm2_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    config = GRPOConfig(output_dir=args.work, per_device_train_batch_size=args.group,
                        num_generations=args.group, max_steps=1, use_cpu=True, bf16=False,
                        report_to="none", save_strategy="no", gradient_checkpointing=False)
    trainer = with_trimmed_logps(GRPOTrainer)(
        model=model, processing_class=tokenizer, args=config,
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
        train_dataset=Dataset.from_list([{"prompt": "x"}] * args.group))
    problems = [json.loads(line)["problem"] for line in DATA.read_text().splitlines()]
    shortest, longest = (int(x) for x in args.completion.split(","))
    ids, mask, completion = grpo_batch(tokenizer, problems[: args.prompts], args.group,
                                       (shortest, longest))
    width = ids.size(1) - completion
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    worst = {arm: {"logp": 0.0, "grad_rel": 0.0} for arm in ARMS}
    one_pass(trainer, ids, mask, completion, 0, False)  # warm-up, not timed
    for _ in range(args.rounds):
        ref = None
        for arm, (rows, share) in ARMS.items():
            took, logps, grad = one_pass(trainer, ids, mask, completion, rows, share)
            seconds[arm].append(round(took, 2))
            ref = ref or (logps, grad)
            real = mask[:, width:] == 1
            worst[arm]["logp"] = max(worst[arm]["logp"],
                                     float((logps - ref[0])[real].abs().max()))
            worst[arm]["grad_rel"] = max(worst[arm]["grad_rel"],
                                         float((grad - ref[1]).norm() / ref[1].norm()))
            print(f"{arm}: {took:.2f} s", flush=True)
    median = {arm: statistics.median(v) for arm, v in seconds.items()}
    base = median["TRL's pass"]
    result = {
        "command": f"python benchmarks/bench_grpo_logps.py --prompts {args.prompts} --group "
                   f"{args.group} --completion {args.completion} --rounds {args.rounds} "
                   f"--threads {args.threads}",
        "model": "SmolLM2-135M-Instruct, fp32", "cpu": cpu_model(),
        "batch": {"rows": int(ids.size(0)), "prompt_tokens": mask[:, :width].sum(1).tolist()[
            :: args.group], "completion_tokens": mask[:, width:].sum(1).tolist(),
                  "padded_width": int(ids.size(1))},
        "seconds_forward_backward": seconds, "median_seconds": median,
        "speedup_over_trl": {arm: round(base / m, 2) for arm, m in median.items()},
        "max_difference_from_trl": worst,
        **machine_facts(started, float(load.split()[0]) if load != "unknown" else -1.0),
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
