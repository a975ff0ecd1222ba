"""The distributed engines of the training loop, all through accelerate: one process,
DDP, DeepSpeed ZeRO-2/3 and FSDP2, chosen by `accelerate launch --config_file
recipes/accelerate/<engine>.yaml`.

prmkit keeps its own loop (tree packing, token-budget batches, exact resume) and lets
the engines do what they own: gradient sync and sharding (`accelerator.accumulate`,
`backward`), sharded checkpoints (`save_state` / `load_state`) and full weights
(`get_state_dict`). What an engine cannot honour is refused here, before training.
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path

import torch

from prmkit.data.io import atomic_folder
from prmkit.errors import PrmkitError
from prmkit.training import checkpointing as ckpt

ENGINE_DIR = "engine"  # accelerate.save_state folder inside a checkpoint
SHARDED = ("zero3", "fsdp")  # engines whose processes each hold a part of the weights
ENGINE_STATE = ("zero2", "zero3", "fsdp")  # engines that checkpoint their own state


def _env_true(name: str) -> bool:
    return os.environ.get(name, "false").lower() in ("true", "1")


def _deepspeed_imported() -> bool:
    return "deepspeed" in sys.modules


def import_deepspeed_only_when_used() -> None:
    """Keep accelerate from importing DeepSpeed in runs that do not use it.

    Whenever DeepSpeed is installed, accelerate's `extract_model_from_parallel` (called on
    every unwrap, by accelerate, transformers' and TRL's trainers) imports it to ask
    whether a model is a `DeepSpeedEngine`: seconds of imports and DeepSpeed's "Setting
    accelerator to CPU" on every run. A model can be one only once DeepSpeed is imported
    (by accelerate's DeepSpeed plugin, when a DeepSpeed config is used), so that question
    is asked only then."""
    from accelerate.utils import other

    other.is_deepspeed_available = _deepspeed_imported


def make_accelerator(cfg):
    """The Accelerator of a run. DeepSpeed and FSDP come from the launcher's environment
    (`accelerate launch --config_file ...`); without CUDA they run on CPU processes over
    gloo (DeepSpeed's CPU accelerator: DS_ACCELERATOR=cpu)."""
    from accelerate import Accelerator
    from accelerate.utils import (
        DistributedType,
        FullyShardedDataParallelPlugin,
        InitProcessGroupKwargs,
    )

    from prmkit.training.tracking import accelerator_options

    import_deepspeed_only_when_used()

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise PrmkitError("device=cuda but no CUDA device is available")
    cuda = torch.cuda.is_available() and cfg.device != "cpu"
    deepspeed, fsdp = _env_true("ACCELERATE_USE_DEEPSPEED"), _env_true("ACCELERATE_USE_FSDP")
    if deepspeed and fsdp:
        raise PrmkitError("the launcher asks for both DeepSpeed and FSDP: choose one config")
    if deepspeed:
        if cfg.device == "cpu" and torch.cuda.is_available():
            raise PrmkitError("device=cpu with DeepSpeed: DeepSpeed runs on its own accelerator; "
                              "set DS_ACCELERATOR=cpu on a machine without GPUs, or device=auto")
        if not cuda:
            from deepspeed.accelerator import get_accelerator

            if get_accelerator().device_name() != "cpu":
                raise PrmkitError("DeepSpeed without CUDA needs its CPU accelerator: "
                                  "set DS_ACCELERATOR=cpu")
        # DeepSpeed's CPU accelerator would ask for oneCCL; gloo is always there.
        handlers = [] if cuda else [InitProcessGroupKwargs(backend="gloo")]
        return Accelerator(mixed_precision="no", kwargs_handlers=handlers,
                           **accelerator_options(cfg))
    acc = Accelerator(cpu=not cuda, mixed_precision="no", **accelerator_options(cfg))
    if fsdp and not cuda and acc.num_processes > 1:
        # accelerate applies FSDP only to accelerators; FSDP2 itself shards CPU tensors
        # over gloo, which is what the CPU tests run.
        from accelerate.state import PartialState

        PartialState().distributed_type = DistributedType.FSDP  # AcceleratorState copies it
        acc.state.distributed_type = DistributedType.FSDP
        acc.state.fsdp_plugin = FullyShardedDataParallelPlugin()
    return acc


def engine_name(acc) -> str:
    """single, ddp, zero2, zero3 or fsdp."""
    kind = acc.distributed_type.value
    if kind == "DEEPSPEED":
        return f"zero{acc.state.deepspeed_plugin.zero_stage}"
    if kind == "FSDP":
        return "fsdp"
    return "ddp" if acc.num_processes > 1 else "single"


def check_engine(acc, cfg) -> str:
    """Refuse engine and option combinations that would not train what the recipe says;
    returns the engine's name."""
    engine = engine_name(acc)
    if engine.startswith("zero"):
        if engine not in ("zero2", "zero3"):
            raise PrmkitError(f"DeepSpeed ZeRO stage {engine[4:]} is not supported: use "
                              "recipes/accelerate/zero2.yaml or zero3.yaml (stage 2 or 3)")
        ds = acc.state.deepspeed_plugin.deepspeed_config
        for precision in ("fp16", "bf16"):
            if ds.get(precision, {}).get("enabled") in (True, "true"):
                raise PrmkitError(
                    f"the DeepSpeed config enables {precision}: prmkit keeps fp32 master "
                    "weights and applies bf16 autocast itself (the recipe's bf16: true); "
                    "set mixed_precision: 'no' and remove the precision section")
        gas = ds.get("gradient_accumulation_steps", "auto")
        if gas not in ("auto", cfg.grad_accum):
            raise PrmkitError(f"the DeepSpeed config sets gradient_accumulation_steps={gas} "
                              f"but the recipe's grad_accum is {cfg.grad_accum}: set "
                              "grad_accum in the recipe and leave the DeepSpeed value to auto")
    if engine == "fsdp":
        plugin = acc.state.fsdp_plugin
        if getattr(plugin, "fsdp_version", 1) != 2:
            raise PrmkitError("FSDP version 1 is not supported: set fsdp_version: 2 in the "
                              "accelerate config (recipes/accelerate/fsdp.yaml)")
    if engine in SHARDED and getattr(cfg, "load_in_4bit", False):
        raise PrmkitError(f"load_in_4bit (QLoRA) with {engine}: bitsandbytes' 4-bit weights "
                          "cannot be sharded here; use DDP (recipes/accelerate/ddp.yaml) or zero2")
    return engine


def configure_deepspeed(acc, cfg) -> None:
    """Set what DeepSpeed needs without a dataloader: token-budget micro-batches have no
    fixed size, so the nominal micro-batch is 1; accumulation and clipping come from the
    recipe, and the torch AdamW of the run is allowed as it is."""
    ds = acc.state.deepspeed_plugin.deepspeed_config
    ds["train_micro_batch_size_per_gpu"] = 1
    ds["gradient_accumulation_steps"] = cfg.grad_accum
    ds["train_batch_size"] = cfg.grad_accum * acc.num_processes
    ds["gradient_clipping"] = float(cfg.max_grad_norm or 0.0)
    ds["zero_allow_untested_optimizer"] = True
    ds.setdefault("steps_per_print", 2**62)
    if acc.state.deepspeed_plugin.zero_stage == 3:  # full weights for the final save
        ds.setdefault("zero_optimization", {})["stage3_gather_16bit_weights_on_model_save"] = True


def freeze_unused_parameters(model) -> list[str]:
    """Freeze trainable weights the forward pass never reads, so that they get no
    gradient (and DDP does not wait for one): the LM head of the head formulation on an
    untied backbone. Returns the frozen names."""
    if model.config.formulation != "head":
        return []
    lm_head = model.backbone.get_output_embeddings()
    if lm_head is None:
        return []
    tied = {id(p) for p in model.backbone.get_input_embeddings().parameters()}
    frozen = []
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in tied and any(p is q for q in lm_head.parameters()):
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def after_prepare(engine: str, model, raw) -> None:
    """ZeRO-3 partitions every weight and gathers a module's own weights around its
    forward; the token formulation (and a head with surprise_window) reads the LM head
    inside the reward model's forward, so the LM head is gathered with the reward model."""
    reads_lm_head = raw.config.formulation == "token" or raw.config.surprise_window > 0
    if engine != "zero3" or not reads_lm_head:
        return
    import deepspeed

    for p in raw.backbone.get_output_embeddings().parameters():
        deepspeed.zero.register_external_parameter(raw, p)


class WrappedForward:
    """The engine's forward (which gathers sharded weights) with the reward model's own
    attributes (config, correct_probability), for evaluation."""

    def __init__(self, wrapped, raw):
        self._wrapped, self._raw = wrapped, raw

    def __call__(self, *args, **kwargs):
        return self._wrapped(*args, **kwargs)

    def eval(self):
        self._wrapped.eval()
        return self

    def __getattr__(self, name):
        return getattr(self._raw, name)


# ---- checkpoints and final weights ----------------------------------------------------------
def save_engine_checkpoint(acc, output_dir: Path, step: int, scheduler, info: dict, keep: int,
                           rng_states: list[dict]) -> Path:
    """A checkpoint whose weights and optimizer states are the engine's own sharded files
    (accelerate.save_state, every process writes its part), beside prmkit's scheduler,
    step, RNG states and run record. Written in a temporary folder, renamed when complete."""
    root = ckpt.checkpoint_root(output_dir)
    final, tmp = root / f"step-{step:07d}", root / f".tmp-step-{step:07d}"  # one name for all
    with atomic_folder(final, tmp) if acc.is_main_process else nullcontext(tmp):
        if acc.is_main_process:
            (tmp / ENGINE_DIR).mkdir()
        acc.wait_for_everyone()
        acc.save_state(str(tmp / ENGINE_DIR))
        acc.wait_for_everyone()
        if acc.is_main_process:
            ckpt.write_checkpoint_files(tmp, step, None, None, scheduler, info, rng_states)
    if acc.is_main_process:
        ckpt.prune_checkpoints(output_dir, keep)
    acc.wait_for_everyone()
    return final


def is_engine_checkpoint(path: Path) -> bool:
    return (Path(path) / ENGINE_DIR).is_dir()


def load_engine_checkpoint(acc, path: Path, scheduler) -> int:
    """Restore a checkpoint written by save_engine_checkpoint; returns the step."""
    acc.load_state(str(Path(path) / ENGINE_DIR))
    return ckpt.load_checkpoint(path, None, None, scheduler, rank=acc.process_index)


def save_final_model(acc, engine: str, model, raw, folder: Path, merge: bool, rebuild) -> None:
    """Full (unsharded) weights from rank 0. Sharded engines gather the state dict with
    accelerate.get_state_dict (layer by layer, on rank 0, in the dtype they train in)
    into a host copy of the model built by `rebuild()`."""
    if engine not in SHARDED:
        if acc.is_main_process:
            raw.eval()
            raw.save_pretrained(folder, merge_adapter=merge)
        return
    state = acc.get_state_dict(model, unwrap=True)
    if acc.is_main_process:
        host = rebuild()
        missing, unexpected = host.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise PrmkitError(f"gathered weights do not match the model: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
        host.eval()
        host.save_pretrained(folder, merge_adapter=merge)


def end_process_group(wait: bool = True) -> None:
    """End the launch's process group, if there is one (after waiting for every process,
    unless this one is failing). A gloo group, or a DeepSpeed engine's, left open at
    interpreter exit can abort the process ("terminate called without an active
    exception") after the work is done."""
    import torch.distributed as tdist

    if not (tdist.is_available() and tdist.is_initialized()):
        return
    if wait:
        tdist.barrier()
    tdist.destroy_process_group()
