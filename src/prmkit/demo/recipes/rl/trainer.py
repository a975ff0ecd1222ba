"""GRPO in the demo world: TRL's trainer (scalar rewards) or prmkit's process-reward
trainer for one reward, recording what it trains on, and the held-out evaluation callback."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from prmkit.demo import world
from prmkit.demo.lm.policy import prompt_text, quiet_trainer_logs, solution_steps
from prmkit.demo.recipes.rl.config import REWARDS, RLConfig
from prmkit.errors import PrmkitError
from prmkit.rewards.trl import ProcessReward, VerifierReward
from prmkit.rewards.trl_generate import with_dropped_ended_rows
from prmkit.rewards.trl_trim import with_trimmed_logps


class WorldVerifier(VerifierReward):
    """The checker's final-answer verdict as TRL's verifiable reward (1.0 / 0.0), by the
    dataset's problem_id column."""

    __name__ = "verifier"

    def __init__(self, problems):
        super().__init__(answer_key="problem_id")
        self.problems = {p.id: p for p in problems}

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        ids = kwargs.get("problem_id")
        if ids is None:
            raise PrmkitError("the dataset has no 'problem_id' column for the verifier")
        self.last = [float(world.check_solution(self.problems[i], solution_steps(c)).final_correct)
                     for i, c in zip(ids, completions, strict=True)]
        return self.last


@dataclass
class Ledger:
    """What a run consumed: prompts per generation batch, completions, reward-model
    forward passes (one per scored completion) during training; the last batch TRL
    trained on (its rows, in the order the rewards saw them)."""

    prompts: list[str] = field(default_factory=list)
    completions: int = 0
    last_batch: dict = field(default_factory=dict)


def prompt_rows(problems, cfg: RLConfig, seed: int) -> list[dict]:
    """The training prompts of a run, in the seed's order (the same for every reward)."""
    order = list(problems)
    random.Random(f"rl-prompts:{seed}").shuffle(order)
    need = cfg.steps * cfg.prompts_per_step
    order = (order * (need // max(len(order), 1) + 1))[:need]
    return [{"prompt": prompt_text(p), "problem": p.text, "problem_id": p.id} for p in order]


def grpo_trainer(name: str, cfg: RLConfig, seed: int, policy_dir: Path, rows: list[dict],
                 problems, prm, orm, out: Path, ledger: Ledger, callbacks=()):
    """TRL's GRPOTrainer (scalar rewards) or prmkit's ProcessRewardGRPOTrainer (process
    credit) for reward `name`, recording what it trains on into `ledger`."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from prmkit.rewards.trl import ProcessRewardGRPOTrainer

    _, credit, weight = REWARDS[name]
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir)
    aggregation = cfg.demo.aggregation
    kwargs: dict = {}
    if name == "verifier":
        base, funcs = GRPOTrainer, [WorldVerifier(problems)]
    elif name == "orm":
        base, funcs = GRPOTrainer, [ProcessReward(orm, policy_tokenizer=tokenizer)]
    else:
        base = ProcessRewardGRPOTrainer
        funcs = [ProcessReward(prm, policy_tokenizer=tokenizer, aggregation=aggregation)]
        funcs += [WorldVerifier(problems)] if weight else []
        kwargs = {"credit": credit, "verifier_weight": weight}

    # every reward's loss on trimmed chunks, its sampling with ended rows out of the batch
    class Recorded(with_trimmed_logps(with_dropped_ended_rows(base))):
        def _generate_and_score_completions(self, inputs):
            result = super()._generate_and_score_completions(inputs)
            ledger.prompts += [r["problem_id"] for r in inputs[:: cfg.generations]]
            ledger.completions += len(inputs)
            ledger.last_batch = {"problem_ids": [r["problem_id"] for r in inputs],
                                 **{k: result[k].detach().clone() for k in
                                    ("advantages", "completion_ids", "completion_mask")}}
            return result

        def train(self, *args, **kwargs):
            with logprob_tiles(self.model.config.vocab_size):
                return super().train(*args, **kwargs)

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=cfg.prompts_per_step * cfg.generations,
        num_generations=cfg.generations, max_completion_length=cfg.max_completion,
        max_steps=cfg.steps, learning_rate=cfg.lr, beta=cfg.beta, temperature=cfg.temperature,
        shuffle_dataset=False, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to="none", seed=seed, disable_tqdm=not cfg.demo.progress,
        lr_scheduler_type="constant_with_warmup", warmup_steps=cfg.warmup_steps,
        # GRPOConfig turns it on; on a 1M-parameter policy it saves no memory worth having
        # and recomputes the forward (its share of a step: BENCHMARKS.md, "RL in the demo
        # world", from benchmarks/profile_rl_step.py)
        gradient_checkpointing=False)
    quiet_trainer_logs(cfg.demo.progress)
    trainer = Recorded(model=model, processing_class=tokenizer, args=args, reward_funcs=funcs,
                       train_dataset=Dataset.from_list(rows), callbacks=list(callbacks), **kwargs)
    quiet_trainer_logs(cfg.demo.progress, trainer)
    return trainer


@contextlib.contextmanager
def logprob_tiles(vocab_size: int):
    """While it is open, TRL's fused log-prob head projects through tiles as wide as a
    vocabulary narrower than TRL's 32,768 (for the demo's 458 tokens TRL allocates 512 MB
    twice a step: 0.67 s of 4.6). The same numbers either way, one chunk (a test compares
    the weights after training); TRL's width comes back on exit."""
    from trl.trainer import utils

    default = getattr(utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", None)  # None: a TRL without tiles
    if default is None:
        yield
        return
    utils._CHUNKED_LOGPROB_CHUNK_SIZE = min(default, vocab_size)
    try:
        yield
    finally:
        utils._CHUNKED_LOGPROB_CHUNK_SIZE = default


def eval_callback(cfg: RLConfig, sampler, run_eval, curve: list):
    from transformers import TrainerCallback

    class EvalEvery(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            every = cfg.eval_every and state.global_step % cfg.eval_every == 0
            if every or state.global_step == cfg.steps:
                model.eval()
                sampler.lm = model  # prmkit's HF sampler over the live policy
                curve.append({"step": state.global_step, **run_eval(sampler)})
                model.train()

    return EvalEvery()


