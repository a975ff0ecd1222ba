"""The demo's settings (`DemoConfig`), its quick settings, and the torch settings every
experiment runs under."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

# settings that change what the models are read on, not the models: left out of their key
# (the hard set's scores are cached under its share)
NOT_IN_MODELS = ("hard_share",)


@dataclass
class DemoConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    difficulty: str = "easy"  # world levels; harder ones need more compute than the demo has
    # 6,000: about 2 epochs of the deduplicated samples in reward_steps (2,000 were about 6)
    train_problems: int = 6000
    samples_per_train_problem: int = 8
    test_problems: int = 120
    samples_per_test_problem: int = 256  # about 30 distinct solutions each, each scored once
    # out of distribution (prmkit.demo.world.ood): problems of a rule no training or
    # pretraining problem follows, scored and evaluated beside the test set (0: none)
    ood_problems: int = 120
    samples_per_ood_problem: int = 64
    # the hard set (prmkit.demo.world.hard): the test problems with this share of those with
    # a trap read right only 1 in 10 to 1 in 300 samples, as many samples each; 0.2 chosen
    # by the sampler alone (benchmarks/world_hard_settings.py); 0: none. Changes no model.
    hard_share: float = 0.2
    pretrain_problems: int = 3000  # correct worked solutions for backbone pretraining
    pretrain_steps: int = 130
    hidden_size: int = 128
    layers: int = 4
    reward_steps: int = 250  # optimizer steps for the PRM and for the ORM (matched compute)
    batch_tokens: int = 4096
    lr: float = 1e-3
    # How the PRM's step scores make a solution score. min, not the paper's prod: prod's
    # product over more steps favours shorter wrong solutions (docs/demo-world.md).
    aggregation: str = "min"
    # torch CPU threads: fixed, so that a run's figures repeat exactly; 1 leaves the other
    # core of a 2-core machine free (2 threads beside another job run several times slower)
    threads: int = 1
    # seeds at once, each in a process of its own (prmkit.demo.core.parallel): 0: as many as
    # the cores hold at `threads` each; 1: one after another. Same figures either way.
    workers: int = 0
    # mathmix [FIELD=VALUE ...] or a folder: every seed starts from one shared base
    # (prmkit.demo.lm.base.resolve_base; the default settings' base ships with prmkit);
    # seed: each seed pretrains its own backbone (the pretrain_* fields above)
    base: str = "mathmix"
    lora_rank: int = 0  # 0: reward models fine-tune every weight; r > 0: LoRA adapters of rank r
    formulation: str = "head"  # head: a new MLP head; token: the LM head read at label tokens
    # > 0: reward models keep that much next-token loss (lm.lm_loss); without it reward
    # training erases what the base computes (98.8% of step results -> 0.8%)
    lm_loss_weight: float = 1.0
    # > 0: the head also reads the backbone's probability of the label's last W tokens
    # (prmkit.models.surprise), so it checks a step the way the base reads it; 16 covers the
    # longest held-out step (13 tokens) and all but 1 in 8,656 out-of-distribution ones
    # (tests/test_demo_surprise_window.py)
    surprise_window: int = 16
    # with surprise_window: the head also reads the base's probability of the whole step,
    # the base's own check of it in one number (docs/demo-world.md, "Reward models that keep
    # the base's check of every kind of step")
    surprise_step: bool = True
    progress: bool = True
    ns: tuple[int, ...] = field(default=(1, 2, 4, 8, 16, 32, 64, 128, 256))

    def key(self) -> str:
        """Names what these settings train: every setting but the run-only ones and, for a
        shared base, the base's own key (`lm.base.base_key`), so that models trained from
        one base are never read back for another that the same `base` value now names."""
        from prmkit.demo.lm.base import base_key
        from prmkit.demo.settings import config_key, settings_key

        shared = base_key(self.base)
        key = settings_key(self, leave_out=NOT_IN_MODELS)
        return key if shared is None else config_key({"settings": key, "base": shared})


def quick_config(seeds: tuple[int, ...] = (0,)) -> DemoConfig:
    """A seconds-long run of the whole pipeline (smoke tests), not a result."""
    return DemoConfig(seeds=seeds, train_problems=40, samples_per_train_problem=4,
                      test_problems=12, samples_per_test_problem=8, ood_problems=4,
                      samples_per_ood_problem=8, pretrain_problems=100,
                      pretrain_steps=5, hidden_size=32, layers=1, reward_steps=5,
                      ns=(1, 2, 4, 8), base="seed",
                      workers=1)  # starting processes costs more than seconds-long seeds


@contextlib.contextmanager
def torch_settings(threads: int):
    """The demo's fixed torch threads and deterministic algorithms, restored on exit."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    saved = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
