"""One trainer for process (PRM) and outcome (ORM) reward models, on accelerate.

    from prmkit.training import RewardTrainingConfig, train
    result = train(RewardTrainingConfig.from_yaml("recipes/tiny_ci.yaml"))

Data become rows (prefix trees, or one sequence per example), rows become token-budget
micro-batches, and the batch order of each epoch is a seeded permutation, so a run is
a pure function of (config, step): resuming from a checkpoint replays exactly the rest
of the uninterrupted run. The loss of one optimizer step is the weighted mean over all
labels of its micro-batches (and processes), whatever the accumulation.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prmkit.data.io import atomic_write, dumps_line
from prmkit.errors import PrmkitError
from prmkit.metrics import auroc
from prmkit.training import checkpointing as ckpt
from prmkit.training import distributed as dist
from prmkit.training import held_out, tracking
from prmkit.training.batching import (
    RowPredictions,
    collate,
    label_losses,
    predict_rows,
    token_batches,
)
from prmkit.training.data_cache import rows_for
from prmkit.training.model_setup import training_bf16
from prmkit.training.packing import PackedRow, drop_long_prompts
from prmkit.training.resume import check_resume, run_fingerprint
from prmkit.training.reward_config import RewardTrainingConfig
from prmkit.training.run_folder import METRICS_FILE, MODEL_DIR, clear_run

log = logging.getLogger("prmkit.training")


@dataclass
class TrainResult:
    output_dir: Path
    model_dir: Path
    steps: int
    metrics: dict = field(default_factory=dict)  # last train and eval metrics
    data: dict = field(default_factory=dict)  # data / packing statistics


@dataclass
class _Run:
    """What the steps of one run work with (`RewardTrainer._setup` builds it)."""

    out: Path
    resume_from: Path | None
    train_rows: list[PackedRow]
    eval_rows: list[PackedRow]
    batches: list[list[int]]  # micro-batches, as indices of train_rows
    per_window: int = 0  # micro-batches per optimizer step, all processes together
    usable: int = 0  # micro-batches per epoch (a multiple of the processes)
    steps_per_epoch: int = 0
    total_steps: int = 0
    model: Any = None  # as prepared by the engine
    raw: Any = None  # the model unwrapped
    optimizer: Any = None
    scheduler: Any = None
    params: list = field(default_factory=list)  # the trainable ones (FSDP: sharded)
    pad_id: int = 0
    start_step: int = 0
    step: int = 0

    @property
    def metrics_path(self) -> Path:
        return self.out / METRICS_FILE


class _Meter:
    """Tokens and labels trained on since the last log, and when that was."""

    def __init__(self):
        self.start = self.since = time.perf_counter()
        self.tokens = self.labels = 0

    def add(self, tokens: int, labels: int) -> None:
        self.tokens += tokens
        self.labels += labels

    def restart(self, now: float) -> None:
        self.tokens = self.labels = 0
        self.since = now


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def step_summary(p: np.ndarray, t: np.ndarray, w: np.ndarray, losses: np.ndarray) -> dict:
    """Weighted eval loss, accuracy (P >= 0.5 against target >= 0.5) and AUROC."""
    pos = (t >= 0.5).astype(np.float64)
    return {
        "eval_loss": round(float((losses * w).sum() / w.sum()), 6),
        "eval_accuracy": round(float((((p >= 0.5) == (pos == 1)) * w).sum() / w.sum()), 6),
        "eval_auroc": round(auroc(p.astype(np.float64), pos, w.astype(np.float64)), 6),
        "eval_labels": int(len(p)),
    }


def merge_predictions(parts: Sequence[RowPredictions]) -> RowPredictions:
    return RowPredictions(*(np.concatenate([getattr(q, f) for q in parts])
                            for f in ("probs", "truth", "weights", "losses")))


def top_layer_targets(backbone, k: int, target_modules) -> list[str]:
    """Full names of the linear modules inside the top k decoder layers (LoRA targets)."""
    n_layers = backbone.config.get_text_config().num_hidden_layers
    if k > n_layers:
        raise PrmkitError(f"lora.top_k_layers={k} but the backbone has {n_layers} layers")
    keep = {str(i) for i in range(n_layers - k, n_layers)}
    suffixes = None if target_modules == "all-linear" else (
        [target_modules] if isinstance(target_modules, str) else list(target_modules))
    names = []
    for name, module in backbone.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        parts = name.split(".")
        if "layers" not in parts or parts[parts.index("layers") + 1] not in keep:
            continue
        if suffixes is None or any(name.endswith(s) for s in suffixes):
            names.append(name)
    if not names:
        raise PrmkitError(f"no linear modules matched {target_modules!r} in the top {k} layers")
    return names


class RewardTrainer:
    def __init__(self, config: RewardTrainingConfig, model=None,
                 step_callback: Callable[[int, dict], None] | None = None):
        config.validate()
        self.config = config
        self.step_callback = step_callback
        self._model = model
        self.data_stats: dict = {}

    # ---- setup --------------------------------------------------------------------------
    def build_model(self):
        from prmkit.training.model_setup import finish_model_setup, load_reward_model

        cfg = self.config
        seed_everything(cfg.seed)
        model = load_reward_model(cfg, self._model)
        if cfg.lora.enabled:
            targets = cfg.lora.target_modules
            if cfg.lora.top_k_layers:
                targets = top_layer_targets(model.backbone, cfg.lora.top_k_layers, targets)
            model.apply_lora(r=cfg.lora.r, alpha=cfg.lora.alpha, dropout=cfg.lora.dropout,
                             target_modules=targets)
        finish_model_setup(cfg, model)
        return model

    def build_rows(self, examples, encoder, weighting: str | None = None) -> list[PackedRow]:
        """Packed (or plain) rows, the label weights the same either way; `weighting`
        overrides config.label_weighting."""
        cfg = self.config
        mc = cfg.model
        weighting = weighting or cfg.effective_label_weighting
        packing = cfg.packing
        if packing == "auto":
            problems = {ex.problem for ex in examples}
            packing = "tree" if len(problems) < len(examples) else "none"
        self.packing_used = packing
        return rows_for(examples, encoder, packing, cfg.effective_row_tokens, mc.num_classes,
                        mc.objective, weighting, cache=cfg.data.cache and cfg.data.examples is None,
                        cache_dir=cfg.data.cache_dir)

    def _warn_count_with_prefixes(self) -> None:
        cfg = self.config
        if cfg.label_weighting == "count" and cfg.alternatives == "prefixes":
            log.warning(
                "label_weighting=count with data.policy.alternatives=prefixes: every kept "
                "prefix step is counted once per rated alternative after it, which puts most "
                "of the loss on 'correct' (97.6%% on PRM800K phase 1, where a PRM trained so "
                "predicted every step correct). Use label_weighting=unique (the default with "
                "prefixes) unless you mean it.")

    def _drop_long_prompts(self, examples, encoder, split: str) -> list:
        kept, skipped = drop_long_prompts(examples, encoder)
        self.data_stats[f"{split}_skipped_long_prompts"] = skipped
        if skipped:
            limit = encoder.fmt.max_length
            log.warning("%d of %d %s examples skipped: the prompt alone is longer than "
                        "model.step_format.max_length=%d", skipped, len(examples), split, limit)
            if not kept and split == "train":  # no eval examples only means no eval
                raise PrmkitError(f"all {len(examples)} {split} examples have a prompt longer "
                                  f"than model.step_format.max_length={limit}")
        return kept

    # ---- training -----------------------------------------------------------------------
    def train(self) -> TrainResult:
        run = self._setup()
        try:
            last = self._run_steps(run)
            return self._finish(run, last)
        finally:
            tracking.finish(self.accelerator)

    # ---- training: setup ----------------------------------------------------------------
    def _setup(self) -> _Run:
        """The accelerator, the resume checks, data, model and rows, the batch plan, the
        run folder's config, the optimizer and scheduler (restored when resuming)."""
        from prmkit.training.model_setup import check_model_options

        cfg = self.config
        check_model_options(cfg)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        tracking.check_installed(cfg.report_to)
        acc = dist.make_accelerator(cfg)
        self.accelerator = acc
        self.engine = dist.check_engine(acc, cfg)
        out = Path(cfg.output_dir)
        if not (cfg.resume or cfg.overwrite) and ckpt.latest_checkpoint(out) is not None:
            raise PrmkitError(f"{out} already holds checkpoints; set resume=true to continue, "
                              "overwrite=true to start again, or choose another output_dir")
        resume_from = ckpt.latest_checkpoint(out) if cfg.resume else None
        self.fingerprint = run_fingerprint(cfg, acc.num_processes, self.engine)
        if resume_from is not None:
            self._check_resume(out, resume_from)
        if acc.is_main_process:
            self._warn_count_with_prefixes()
        model, train_rows, eval_rows = self._model_and_rows()
        run = _Run(out, resume_from, train_rows, eval_rows, self.batch_plan(train_rows))
        self._plan_steps(run)
        # The run folder starts with its config once data and model are read: a run that
        # fails before (bad data, a missing backbone) leaves none. A resumed run keeps the
        # config.json it started with.
        if resume_from is None and acc.is_main_process:
            if cfg.overwrite:  # an earlier run's checkpoints, model and logs go now
                clear_run(out)
            out.mkdir(parents=True, exist_ok=True)
            with atomic_write(out / "config.json", "w") as f:
                f.write(json.dumps(cfg.to_dict(), indent=2) + "\n")
        self._prepare(run, model)
        self._restore(run)
        tracking.start(acc, cfg, run.start_step)
        return run

    def _model_and_rows(self) -> tuple[Any, list[PackedRow], list[PackedRow]]:
        """The model, and the training and held-out rows of the configured data."""
        from prmkit.training.dataset import prepare

        cfg = self.config
        loaded: Counter = Counter()
        train_ex, eval_ex = prepare(cfg.data, cfg.model.objective, cfg.seed, loaded)
        self.data_stats.update(loaded)
        model = self.build_model()
        encoder = model.encoder
        t0 = time.perf_counter()
        train_ex = self._drop_long_prompts(train_ex, encoder, "train")
        eval_ex = self._drop_long_prompts(eval_ex, encoder, "eval") if eval_ex else []
        eval_available = len(eval_ex)
        eval_ex = held_out.limit_examples(eval_ex, cfg.eval_max_examples, cfg.seed)
        train_rows = self.build_rows(train_ex, encoder)
        # Held-out metrics count every distinct labelled step once, however many
        # examples share it (a kept prefix step is in every example after it).
        train_packing = self.packing_used
        eval_rows = self.build_rows(eval_ex, encoder, "unique") if eval_ex else []
        self.packing_used = train_packing
        self.data_stats.update({
            "packing": self.packing_used,
            "label_weighting": cfg.effective_label_weighting,
            "train_rows": len(train_rows),
            "train_tokens": sum(len(r) for r in train_rows),
            "train_labels": sum(r.num_labels for r in train_rows),
            "train_label_sources": sum(len(s) for r in train_rows for s in r.sources),
            "rows_seconds": round(time.perf_counter() - t0, 2),
        })
        if eval_rows:
            self.data_stats.update(held_out.eval_size(eval_rows, len(eval_ex), eval_available))
        if not train_rows:
            raise PrmkitError("no labelled steps fit in model.step_format.max_length")
        return model, train_rows, eval_rows

    def _plan_steps(self, run: _Run) -> None:
        """Steps per epoch and in all: each process takes its share of a window of
        grad_accum x processes micro-batches per step."""
        cfg, world = self.config, self.accelerator.num_processes
        batches = run.batches
        run.per_window = cfg.grad_accum * world
        run.usable = len(batches) - (len(batches) % world if world > 1 else 0)
        if run.usable == 0:
            raise PrmkitError(f"{len(batches)} batches for {world} processes: need more data")
        run.steps_per_epoch = math.ceil(run.usable / run.per_window)
        run.total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * run.steps_per_epoch))
        self.data_stats.update({"batches_per_epoch": run.usable,
                                "steps_per_epoch": run.steps_per_epoch,
                                "total_steps": run.total_steps})

    def _prepare(self, run: _Run, model) -> None:
        """The optimizer and scheduler, and the model and optimizer prepared by the engine."""
        cfg, acc = self.config, self.accelerator
        frozen = dist.freeze_unused_parameters(model)
        if frozen and acc.is_main_process:
            log.info("frozen (never used by the forward pass): %s", ", ".join(frozen))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        run.scheduler = self._scheduler(optimizer, run.total_steps)
        model.train()
        if self.engine.startswith("zero"):
            dist.configure_deepspeed(acc, cfg)
        acc.gradient_accumulation_steps = cfg.grad_accum
        run.model, run.optimizer = acc.prepare(model, optimizer)
        run.raw = acc.unwrap_model(run.model)
        dist.after_prepare(self.engine, run.model, run.raw)
        run.params = [p for p in run.model.parameters() if p.requires_grad]  # FSDP: sharded
        self._trained_model = run.model
        run.pad_id = run.raw.tokenizer.pad_token_id
        if run.pad_id is None:
            run.pad_id = run.raw.tokenizer.eos_token_id or 0

    def _restore(self, run: _Run) -> None:
        """The step to start from: the checkpoint's when resuming (its weights, optimizer
        and scheduler loaded), else 0; metrics logged after it are dropped."""
        acc, resume_from = self.accelerator, run.resume_from
        if resume_from is not None and dist.is_engine_checkpoint(resume_from):
            run.step = dist.load_engine_checkpoint(acc, resume_from, run.scheduler)
            acc.print(f"resumed from {resume_from} (step {run.step})")
        elif resume_from is not None:
            if self.engine in dist.ENGINE_STATE:
                raise PrmkitError(f"{resume_from} was saved without DeepSpeed or FSDP: resume "
                                  "it with the engine that saved it")
            run.step = ckpt.load_checkpoint(resume_from, run.raw, run.optimizer, run.scheduler,
                                            rank=acc.process_index)
            acc.print(f"resumed from {resume_from} (step {run.step})")
        elif self.config.resume:
            acc.print(f"resume=true but {run.out} has no checkpoint: starting from scratch")
        run.start_step = run.step
        if acc.is_main_process:
            self._trim_metrics(run.metrics_path, run.step)

    # ---- training: steps ----------------------------------------------------------------
    def _run_steps(self, run: _Run) -> dict:
        """Optimizer steps up to total_steps, logging, evaluating and checkpointing as
        configured; the last logged train metrics."""
        cfg, device = self.config, self.accelerator.device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                                  enabled=training_bf16(cfg, device))
        last: dict = {}
        progress = self._progress(run.total_steps, run.start_step)
        meter = _Meter()
        try:
            while run.step < run.total_steps:
                loss_sum, tokens, labels = self._step(run, autocast)
                run.step += 1
                meter.add(tokens, labels)
                step = run.step
                if step % cfg.log_every == 0 or step in (run.total_steps, run.start_step + 1):
                    last = self._log_train(run, loss_sum, meter, progress)
                if progress is not None:
                    progress.update(1)
                if step < run.total_steps:
                    self._evaluate_and_save(run)
                if self.step_callback is not None:
                    self.step_callback(step, last)
        finally:
            if progress is not None:
                progress.close()
        return last

    def _step(self, run: _Run, autocast) -> tuple[torch.Tensor, int, int]:
        """One optimizer step over this process's share of the step's window of
        micro-batches: (its loss share, tokens, labels)."""
        cfg, acc = self.config, self.accelerator
        world, device = acc.num_processes, acc.device
        epoch, idx = divmod(run.step, run.steps_per_epoch)
        order = self._epoch_order(epoch, len(run.batches))[:run.usable]
        window = order[idx * run.per_window:(idx + 1) * run.per_window]
        mine = window[acc.process_index::world]
        rows = run.train_rows
        total_w = sum(float(np.sum(rows[r].weights)) for b in window for r in run.batches[b])
        # accumulate() syncs gradients (DeepSpeed: engine.step) at the window's last
        # micro-batch, also when the epoch's last window is shorter.
        acc.step = cfg.grad_accum - len(mine)
        loss_sum = torch.zeros((), device=device)  # read only when logged
        tokens = labels = 0
        for b in mine:
            # on CUDA: pinned host memory and a non-blocking copy, so the next micro-batch
            # is collated and copied while queued kernels still run
            batch = collate([rows[r] for r in run.batches[b]], run.pad_id,
                            pin_memory=device.type == "cuda").to(device)
            with acc.accumulate(run.model):
                with autocast:
                    logits = run.model(batch.input_ids, batch.label_positions,
                                       batch.attention_mask, batch.position_ids)
                per = label_losses(logits, batch.targets)
                loss = (per * batch.weights).sum() / max(total_w, 1e-8) * world
                # accelerate (DeepSpeed: the engine) divides by grad_accum; the loss is
                # already normalised over the whole window.
                acc.backward(loss * cfg.grad_accum)
            loss_sum += loss.detach() / world
            tokens += batch.num_tokens
            labels += batch.num_sources
        if cfg.max_grad_norm and not self.engine.startswith("zero"):
            acc.clip_grad_norm_(run.params, cfg.max_grad_norm)  # DeepSpeed clips itself
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        return loss_sum, tokens, labels

    def _log_train(self, run: _Run, loss_sum: torch.Tensor, meter: _Meter, progress) -> dict:
        """The train metrics since the last ones, averaged across processes."""
        world = self.accelerator.num_processes
        now = time.perf_counter()
        last_loss = self._mean_across(loss_sum) * world  # each rank holds a share
        dt = max(now - meter.since, 1e-9)
        tps = self._mean_across(meter.tokens / dt) * world
        lps = self._mean_across(meter.labels / dt) * world
        last = {"step": run.step, "epoch": round(run.step / run.steps_per_epoch, 4),
                "loss": round(last_loss, 6), "lr": run.scheduler.get_last_lr()[0],
                "tokens_per_s": round(tps, 1), "labels_per_s": round(lps, 2),
                "elapsed_s": round(now - meter.start, 2)}
        self._log(run.metrics_path, {"type": "train", **last})
        meter.restart(now)
        if progress is not None:
            progress.set_postfix_str(held_out.train_postfix(run.step, last_loss, tps),
                                     refresh=False)  # shown by the step's update
        return last

    def _evaluate_and_save(self, run: _Run) -> None:
        """The held-out evaluation and the checkpoint due after this step, if any."""
        cfg, step = self.config, run.step
        if run.eval_rows and cfg.eval_every and step % cfg.eval_every == 0:
            self._log(run.metrics_path, {"type": "eval", "step": step,
                                         **self.evaluate(run.model, run.eval_rows, run.pad_id,
                                                         desc=f"eval at step {step}")})
            run.model.train()
        if cfg.save_every and step % cfg.save_every == 0:
            self._save_checkpoint(run.out, step, run.raw, run.optimizer, run.scheduler)

    # ---- training: the end --------------------------------------------------------------
    def _finish(self, run: _Run, last: dict) -> TrainResult:
        """The final model saved, then the final evaluation."""
        cfg, acc = self.config, self.accelerator
        # Save before the final evaluation: a long eval that is stopped loses nothing.
        model_dir = run.out / MODEL_DIR
        acc.wait_for_everyone()
        dist.save_final_model(acc, self.engine, run.model, run.raw, model_dir, cfg.save_merged,
                              self.build_model)
        if acc.is_main_process:
            with atomic_write(run.out / "data_stats.json", "w") as f:
                f.write(json.dumps(dict(self.data_stats), indent=2) + "\n")
        acc.wait_for_everyone()
        final_eval = {}
        if run.eval_rows and cfg.final_eval:
            if acc.is_main_process:
                held_out.say(held_out.final_eval_notice(
                    model_dir, self.data_stats, last.get("tokens_per_s")))
            final_eval = self.evaluate(run.model, run.eval_rows, run.pad_id, desc="final eval")
            self._log(run.metrics_path, {"type": "eval", "step": run.step, **final_eval})
        elif run.eval_rows and acc.is_main_process:
            held_out.say(f"model saved to {model_dir}; final evaluation skipped "
                         "(final_eval=false)")
        return TrainResult(run.out, model_dir, run.step, {"train": last, "eval": final_eval},
                           dict(self.data_stats))

    # ---- evaluation ---------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model, rows: Sequence[PackedRow], pad_id: int,
                 desc: str = "eval") -> dict:
        """Weighted loss, step accuracy (P(correct) >= 0.5 vs target >= 0.5) and AUROC;
        a progress bar (main process) when config.progress."""
        from accelerate.utils import gather_object

        acc = self.accelerator
        cfg = self.config
        lengths = [len(r) for r in rows]
        batches = token_batches(lengths, cfg.batch_tokens, cfg.max_rows)
        mine = batches[acc.process_index::acc.num_processes]
        show = bool(cfg.progress and acc.is_main_process)
        bf16 = training_bf16(cfg, acc.device)
        if self.engine in dist.SHARDED:
            # Each forward gathers weights from every process: all run the same number of
            # batches (a spare one repeats the first batch, and is dropped).
            forward, preds = dist.WrappedForward(model, acc.unwrap_model(model)), []
            from prmkit.progress import progress_bar

            for i in progress_bar(range(math.ceil(len(batches) / acc.num_processes)),
                                  desc=desc, unit="batch", enabled=show):
                b = mine[i] if i < len(mine) else batches[0]
                p = predict_rows(forward, [rows[r] for r in b], pad_id, cfg.batch_tokens,
                                 cfg.max_rows, bf16, acc.device)
                if i < len(mine):
                    preds.append(p)
        else:
            mine_rows = [rows[i] for b in mine for i in b]
            preds = [predict_rows(acc.unwrap_model(model), mine_rows, pad_id, cfg.batch_tokens,
                                  cfg.max_rows, bf16, acc.device, progress=show,
                                  desc=desc)] if mine_rows else []
        parts = [p for p in gather_object(preds) if len(p.probs)]  # every process's, flattened
        if not parts:
            return {}
        m = merge_predictions(parts)
        return step_summary(m.probs, m.truth, m.weights, m.losses)

    # ---- helpers ------------------------------------------------------------------------
    def _scheduler(self, optimizer, total_steps: int):
        from transformers import get_scheduler

        name = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}
        return get_scheduler(name[self.config.schedule], optimizer,
                             num_warmup_steps=int(self.config.warmup_ratio * total_steps),
                             num_training_steps=total_steps)

    def batch_plan(self, rows: Sequence[PackedRow]) -> list[list[int]]:
        """The training micro-batches, as row indices: by length, within the token budget
        (each epoch visits them in `_epoch_order`)."""
        cfg = self.config
        return token_batches([len(r) for r in rows], cfg.batch_tokens, cfg.max_rows)

    def _epoch_order(self, epoch: int, n: int) -> list[int]:
        return np.random.default_rng([self.config.seed, epoch]).permutation(n).tolist()

    def _mean_across(self, value: float | torch.Tensor) -> float:
        acc = self.accelerator
        if acc.num_processes == 1:
            return float(value)
        t = torch.as_tensor(value, dtype=torch.float64, device=acc.device).reshape(1)
        return float(acc.reduce(t, reduction="mean").item())

    def _progress(self, total: int, initial: int):
        if not self.config.progress or not self.accelerator.is_main_process:
            return None
        from prmkit.progress import progress_bar

        # a bar on a terminal; in a log, a line as soon as the first step is done (steps,
        # tokens/s, time left), then every prmkit.progress.LOG_INTERVAL_S seconds
        return progress_bar(total=total, initial=initial, desc="train", unit="step",
                            dynamic_ncols=True)

    def _log(self, path: Path, record: dict) -> None:
        if self.accelerator.is_main_process:
            with open(path, "ab") as f:
                f.write(dumps_line(record))
            tracking.log(self.accelerator, self.config, record)

    def _save_checkpoint(self, out: Path, step: int, raw, optimizer, scheduler) -> None:
        from accelerate.utils import gather_object

        acc = self.accelerator
        acc.wait_for_everyone()
        rng = [ckpt.rng_state()]
        rng_states = gather_object(rng) if acc.num_processes > 1 else rng
        info = {"time": time.time(), **self.fingerprint}
        if self.engine in dist.ENGINE_STATE:
            dist.save_engine_checkpoint(acc, out, step, scheduler, info,
                                        self.config.keep_checkpoints, rng_states)
            return
        if acc.is_main_process:
            ckpt.save_checkpoint(out, step, raw, optimizer, scheduler, info,
                                 keep=self.config.keep_checkpoints, rng_states=rng_states)
        acc.wait_for_everyone()

    def _check_resume(self, out: Path, checkpoint: Path) -> None:
        """Refuse to resume a different run (config, data, backbone, processes) unless
        force=true; a forced resume logs the differences and writes its config beside the
        original as config.resumed-N.json."""
        cfg = self.config
        info = ckpt.checkpoint_info(checkpoint)
        diffs = check_resume(checkpoint, info, self.fingerprint, cfg.force)
        if diffs and self.accelerator.is_main_process:
            step = info.get("step", 0)
            log.warning("force=true: resuming from %s although the run differs: %s",
                        checkpoint, "; ".join(diffs))
            with atomic_write(out / f"config.resumed-{step}.json", "w") as f:
                f.write(json.dumps(cfg.to_dict(), indent=2) + "\n")

    @staticmethod
    def _trim_metrics(path: Path, step: int) -> None:
        """On resume, drop records logged after the checkpoint (they are replayed)."""
        if not path.is_file():
            return
        if step == 0:
            os.remove(path)
            return
        keep = [line for line in path.read_bytes().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        with atomic_write(path, "wb") as f:
            f.write(b"".join(line + b"\n" for line in keep))


def train(config: RewardTrainingConfig, model=None) -> TrainResult:
    """Train a reward model as configured; see RewardTrainingConfig."""
    return RewardTrainer(config, model=model).train()
