"""The RL experiment's policy: the shared MathMix base fine-tuned on correct worked solutions.

A prompt is the problem text and a newline (the demo PRM's format, "{problem}\\n"); a
completion is the solution's steps, one per line, ending with "Answer: v" and the end of
sequence token. The policy is fine-tuned with TRL's `SFTTrainer` (plain next-token loss on
the completion, the prompt masked) on the seed's training problems: their reference
solution and every distinct sampled solution the checker accepts whole (the same solutions
the demo's reward models see, their correct ones). Its mistakes are its own: it samples
through prmkit's Hugging Face backend (`HFSampler`), never through the scripted solver.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prmkit.data.io import atomic_folder
from prmkit.demo import world
from prmkit.demo.world.problems import WorldProblem
from prmkit.generation.base import Prompt, SampleRequest, SamplingParams
from prmkit.models.formatting import split_steps

SEPARATOR = "\n"  # between steps, as the demo's reward models read them


def prompt_text(problem: WorldProblem) -> str:
    return problem.text + SEPARATOR


def solution_steps(completion: str) -> list[str]:
    """A completion's steps, split as the demo's PRM splits them."""
    return split_steps(completion, SEPARATOR)


def policy_rows(problems: Sequence[WorldProblem], pools: Sequence[Sequence[list[str]]]
                ) -> list[dict]:
    """Prompt/completion rows: each problem's reference solution and its distinct sampled
    solutions whose every step the checker accepts, in problem order."""
    rows, seen = [], set()
    for p, pool in zip(problems, pools, strict=True):
        for steps in [p.reference_solution(), *pool]:
            text = SEPARATOR.join(steps)
            if (p.id, text) in seen or not world.check_solution(p, steps).process_correct:
                continue
            seen.add((p.id, text))
            rows.append({"prompt": prompt_text(p), "completion": text})
    return rows


@dataclass(frozen=True)
class PolicySettings:
    # 30 steps at 2e-3, chosen on seed 0's training prompts from the shipped base (the length
    # nearest the 30-60% band's middle: 30 steps 40.0%, 40 steps 50.2%, 60 steps 59.1%,
    # benchmarks/rl_policy_steps.py); the first reading stage's base needed 60 (44%)
    steps: int = 30  # optimizer steps of supervised fine-tuning
    batch_size: int = 32  # solutions per step
    lr: float = 2e-3


def train_policy(base_dir: str | Path, rows: list[dict], out: str | Path,
                 settings: PolicySettings, seed: int, progress: bool = False) -> Path:
    """Fine-tune the base on `rows` with TRL's SFTTrainer; the folder (model, tokenizer,
    policy.json) appears whole at `out`, and an existing one is returned as it is."""
    out = Path(out)
    if (out / "policy.json").is_file():
        return out
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from prmkit.training.distributed import import_deepspeed_only_when_used

    import_deepspeed_only_when_used()
    quiet_trainer_logs(progress)

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    with atomic_folder(out) as tmp:
        args = SFTConfig(output_dir=str(tmp / "trainer"), max_steps=settings.steps,
                         per_device_train_batch_size=settings.batch_size,
                         learning_rate=settings.lr, lr_scheduler_type="cosine",
                         warmup_steps=max(1, settings.steps // 10), use_cpu=True, bf16=False,
                         logging_steps=max(1, settings.steps // 4), save_strategy="no",
                         report_to="none", seed=seed, disable_tqdm=not progress,
                         dataset_num_proc=None)
        trainer = SFTTrainer(model=model, processing_class=tokenizer, args=args,
                             train_dataset=Dataset.from_list(rows))
        quiet_trainer_logs(progress, trainer)
        trainer.train()
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "policy.json").write_text(json.dumps(
            {"base": str(base_dir), "rows": len(rows), "settings": settings.__dict__,
             "seed": seed, "loss": losses}, indent=1))
        import shutil

        shutil.rmtree(tmp / "trainer", ignore_errors=True)
    return out


def quiet_trainer_logs(progress: bool, trainer=None) -> None:
    """Without progress: no datasets bars and no per-step log lines from a Trainer."""
    if progress:
        return
    import datasets
    from transformers import PrinterCallback

    datasets.disable_progress_bars()
    if trainer is not None:
        trainer.remove_callback(PrinterCallback)


def policy_sampler(folder: str | Path, batch_size: int = 128):
    """prmkit's Hugging Face sampler over the policy folder (float32, CPU)."""
    from prmkit.generation.hf_backend import HFSampler

    return HFSampler(folder, device="cpu", dtype="fp32", batch_size=batch_size)


def sample(sampler, problems: Sequence[WorldProblem], n: int, temperature: float,
           max_tokens: int, seed: int) -> list[list[tuple[str, int]]]:
    """`n` completions (text, generated tokens) per problem. Each problem's samples depend
    on (seed, problem id) only, so every evaluation draws the same random numbers."""
    requests = [SampleRequest(key=p.id, prompt=Prompt(text=prompt_text(p)), n=n, seed=seed)
                for p in problems]
    params = SamplingParams(temperature=temperature, top_p=1.0, max_tokens=max_tokens)
    outputs = sampler.generate(requests, params)
    by_key = {o.key: o for o in outputs}
    return [[(c.text, c.num_tokens) for c in by_key[p.id].completions] for p in problems]
