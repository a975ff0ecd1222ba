"""One seed of the demo: its world (disjoint splits, sampled solutions) and its models (a
backbone, a PRM and an ORM), with the one cache rule for those models.

A seed's models live in `work/seed{s}/models-{key}`, the key a hash of every demo setting
but the seeds, progress and workers, and the shared base's own key (`DemoConfig.key`): a
run with other settings, or from a base rebuilt with other settings, trains its own; a run
with the same settings and base reads them back. The folder counts
as built once its `models.json` is written, last; a folder without it (a run stopped
mid-training) is trained again from scratch.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.stages import stage
from prmkit.demo.lm.backbone import build_backbone, pretrain_lm, save_backbone
from prmkit.demo.lm.base import base_info, resolve_base
from prmkit.demo.lm.lm_loss import LMKeepingRewardModel
from prmkit.models.formatting import StepFormat

# How the demo's reward models read a solution: the problem line, then one step per line.
STEP_FORMAT = StepFormat(step_separator="\n", prompt_template="{problem}\n", max_length=512)

DONE = "models.json"


@dataclass
class SeedWorld:
    """One seed's disjoint problem splits and sampled solutions, and its out-of-distribution
    problems (`world.ood_problems`) with theirs."""

    splits: world.WorldSplits
    train_pools: list
    test_pools: list
    ood: list
    ood_pools: list
    hard: list  # the test problems with some made hard (`world.hard_problems`); [] for none
    hard_pools: list

    def problems_and_pools(self, split: str) -> tuple[list, list]:
        """The problems and pools of a test set: "test", "ood" or "hard"."""
        if split == "test":
            return self.splits.test, self.test_pools
        return getattr(self, split), getattr(self, f"{split}_pools")


def seed_world(seed: int, cfg: DemoConfig) -> SeedWorld:
    splits = world.make_splits(seed, test=cfg.test_problems, train=cfg.train_problems,
                               pretrain=cfg.pretrain_problems, difficulty=cfg.difficulty)
    ood = world.ood_problems(cfg.ood_problems, seed=seed)
    hard = world.hard_problems(splits.test, cfg.hard_share, seed) if cfg.hard_share else []
    test_pools = world.sample_pools(splits.test, cfg.samples_per_test_problem, seed=seed + 1)
    return SeedWorld(splits,
                     world.sample_pools(splits.train, cfg.samples_per_train_problem, seed=seed),
                     test_pools,
                     ood, world.sample_pools(ood, cfg.samples_per_ood_problem, seed=seed + 1),
                     hard, _hard_pools(hard, splits.test, test_pools, cfg, seed))


def _hard_pools(hard: list, test: list, test_pools: list, cfg: DemoConfig, seed: int) -> list:
    """The hard set's pools: a problem's pool depends on (seed, problem id) and its solver
    alone, so an unchanged problem's is its test pool; the others are sampled as those."""
    return [pool if p is t else world.sample_pools([p], cfg.samples_per_test_problem,
                                                   seed=seed + 1)[0]
            for p, t, pool in zip(hard, test, test_pools)]


@dataclass
class SeedModels:
    folder: Path
    lm_losses: list[float]  # the backbone's first and last pretraining loss
    train_examples: dict[str, int]  # PRM and ORM training examples

    @property
    def backbone_dir(self) -> Path:
        return self.folder / "backbone"

    @property
    def prm_dir(self) -> Path:
        return self.folder / "prm" / "model"

    @property
    def orm_dir(self) -> Path:
        return self.folder / "orm" / "model"


def models_folder(seed: int, cfg: DemoConfig, work: Path) -> Path:
    return Path(work) / f"seed{seed}" / f"models-{cfg.key()}"


def seed_models(seed: int, cfg: DemoConfig, work: Path, sw: SeedWorld | None = None
                ) -> SeedModels:
    """The seed's backbone, PRM and ORM for `cfg`: read from `models_folder` when built
    there, else trained there (`sw`: the seed's world, when the caller has it)."""
    folder = models_folder(seed, cfg, work)
    done = folder / DONE
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        print(f"[demo] seed {seed}: backbone, PRM and ORM ({folder.name})", flush=True)
        models = train_seed_models(seed, cfg, sw or seed_world(seed, cfg), folder)
        done.write_text(json.dumps({"lm_loss": models.lm_losses,
                                    "train_examples": models.train_examples}))
    info = json.loads(done.read_text())
    return SeedModels(folder, info["lm_loss"], info["train_examples"])


def seed_backbone(seed: int, cfg: DemoConfig, work: Path, sw: SeedWorld | None = None) -> Path:
    """The backbone the seed's models start from: the shared base when `cfg.base` names
    one (nothing trained), else the seed's own (`seed_models`)."""
    shared = resolve_base(cfg.base, progress=cfg.progress)
    return shared if shared is not None else seed_models(seed, cfg, work, sw).backbone_dir


def train_seed_models(seed: int, cfg: DemoConfig, sw: SeedWorld, folder: Path) -> SeedModels:
    """Backbone pretraining on the pretrain split (or the shared base), then a PRM and an
    ORM on the train split, into `folder`."""
    splits = sw.splits
    models = SeedModels(Path(folder), [], {})
    shared = resolve_base(cfg.base, progress=cfg.progress)
    if shared is not None:
        shutil.copytree(shared, models.backbone_dir, dirs_exist_ok=True)
        lm_losses = (base_info(shared)["lm_loss"] if (shared / "base.json").is_file()
                     else []) or [0, 0]
    else:
        docs = world.corpus_documents(splits.pretrain)
        backbone, tokenizer = build_backbone(
            docs + world.corpus_documents(splits.train, sw.train_pools), seed=seed,
            hidden_size=cfg.hidden_size, layers=cfg.layers)
        lm_losses = pretrain_lm(backbone, tokenizer, docs, steps=cfg.pretrain_steps, seed=seed,
                                progress=cfg.progress)
        save_backbone(backbone, tokenizer, models.backbone_dir)
    models.lm_losses = [lm_losses[0], lm_losses[-1]]
    for kind in ("prm", "orm"):
        examples = world.to_step_examples(splits.train, sw.train_pools, kind=kind, dedupe=True)
        train_reward_model(kind, models.backbone_dir, examples, models.folder / kind, cfg, seed)
        models.train_examples[kind] = len(examples)
    return models


def train_reward_model(kind: str, backbone_dir: Path, examples, out: Path, cfg: DemoConfig,
                       seed: int, epochs: float | None = None, final_eval: bool = False) -> Path:
    """PRM or ORM through prmkit's trainer; both see the same solutions and settings:
    cfg.reward_steps optimizer steps, or `epochs` passes over the examples where given.
    final_eval: evaluate on the held-out 5% of the training problems (metrics.jsonl)."""
    from prmkit.models.config import RewardModelConfig
    from prmkit.models.reward_model import StepRewardModel
    from prmkit.training import DataConfig, LoraSection, RewardTrainingConfig
    from prmkit.training.reward_trainer import RewardTrainer, seed_everything

    model_cfg = RewardModelConfig(objective=kind, formulation=cfg.formulation, head="mlp",
                                  surprise_window=cfg.surprise_window,
                                  surprise_step=cfg.surprise_step,
                                  step_format=STEP_FORMAT)
    model_cls = LMKeepingRewardModel if cfg.lm_loss_weight > 0 else StepRewardModel
    seed_everything(seed)  # the new head's weights: not whatever came before (a base build)
    model = model_cls.from_backbone(str(backbone_dir), config=model_cfg)
    if cfg.lm_loss_weight > 0:
        model.lm_loss_weight = cfg.lm_loss_weight
    tcfg = RewardTrainingConfig(
        data=DataConfig(examples=examples, eval_fraction=0.05),
        backbone=str(backbone_dir),
        model=model_cfg,
        lora=LoraSection(enabled=cfg.lora_rank > 0, r=max(cfg.lora_rank, 1),
                         alpha=2 * max(cfg.lora_rank, 1)),
        lr=cfg.lr,
        max_steps=None if epochs else cfg.reward_steps,
        epochs=epochs or 1.0,
        batch_tokens=cfg.batch_tokens,
        output_dir=str(out),
        seed=seed,
        progress=cfg.progress,
        num_threads=cfg.threads,
        log_every=50,
        final_eval=final_eval,  # the demo reads its models on its own test sets
    )
    with stage(f"{kind.upper()} training", total=tcfg.max_steps, unit="steps") as st:
        trainer = RewardTrainer(tcfg, model=model, step_callback=lambda step, _: st.update())
        return trainer.train().model_dir
