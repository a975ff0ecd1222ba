"""A step (or outcome) reward model over any Hugging Face causal LM.

One forward pass over a solution gives a prediction at every label position. The
"token" formulation reads the LM head's logits for the label tokens only (the paper's
formulation, computed without materialising the full vocabulary); the "head"
formulation puts a small classifier on the hidden state at each label position.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from prmkit.errors import PrmkitError
from prmkit.models import unit_attention
from prmkit.models.attention import TreeMask, decoder_attention_mask
from prmkit.models.card import write_model_card
from prmkit.models.config import CONFIG_NAME, RewardModelConfig, is_prmkit_model
from prmkit.models.formatting import SegmentEncoder, resolve_label_token_ids
from prmkit.models.surprise import feature_size, surprise_features

HEAD_WEIGHTS = "reward_head.safetensors"


def correct_from_class_probs(p: torch.Tensor, config: RewardModelConfig) -> torch.Tensor:
    """P(step correct) from class probabilities [..., C]; with three classes, neutral
    counts as correct when config.neutral_is_correct."""
    if config.num_classes == 3 and config.neutral_is_correct:
        return p[..., 0] + p[..., 1]
    return p[..., 0]


class StepRewardModel(nn.Module):
    def __init__(self, backbone, tokenizer, config: RewardModelConfig):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.config = config
        # Set by apply_lora. Kept out of the module tree: it wraps the same backbone, and
        # registering it would list every weight twice in state_dict().
        object.__setattr__(self, "_peft_model", None)
        hidden = backbone.config.get_text_config().hidden_size
        c = config.num_classes
        width = hidden + feature_size(config.surprise_window, config.surprise_step)
        if config.formulation == "token":
            ids = resolve_label_token_ids(tokenizer, config.label_tokens)
            self.register_buffer("label_token_ids", torch.tensor(ids), persistent=False)
            self.head = None
        elif config.head == "linear":
            self.head = nn.Linear(width, c)
        else:
            self.head = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, c))
        if self.head is not None:
            self.head.to(dtype=torch.float32, device=next(backbone.parameters()).device)
        self._encoder = None

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_backbone(cls, backbone, tokenizer=None, config: RewardModelConfig | None = None,
                      dtype: torch.dtype | str | None = None, **load: Any) -> StepRewardModel:
        """Build from a backbone alias/path/hub id, or from an already loaded model.
        `load`: attn_implementation, load_in_4bit, device (see `load_backbone`)."""
        from prmkit.models.backbones import load_backbone

        config = copy.deepcopy(config) if config is not None else RewardModelConfig()
        if isinstance(backbone, str | Path):
            config.backbone = str(backbone)
            backbone, loaded_tok = load_backbone(str(backbone), dtype=dtype, **load)
            tokenizer = tokenizer or loaded_tok
        if tokenizer is None:
            raise PrmkitError("a tokenizer is required when the backbone is a model object")
        return cls(backbone, tokenizer, config)

    def apply_lora(self, r: int = 16, alpha: int = 32, dropout: float = 0.0,
                   target_modules: str | list[str] = "all-linear") -> None:
        """Wrap the backbone's linear layers with LoRA adapters (peft); the head stays trainable."""
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                          target_modules=target_modules, bias="none")
        if getattr(self.backbone, "is_loaded_in_4bit", False):
            from peft import prepare_model_for_kbit_training

            prepare_model_for_kbit_training(self.backbone, use_gradient_checkpointing=False)
        object.__setattr__(self, "_peft_model", get_peft_model(self.backbone, lora))

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each decoder layer's activations in the backward pass (non-reentrant
        checkpoints, so frozen inputs and LoRA work); call after apply_lora."""
        if not self.backbone.supports_gradient_checkpointing:
            raise PrmkitError(f"{type(self.backbone).__name__} does not support gradient "
                              "checkpointing")
        self.backbone.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
        if self._peft_model is not None:
            self.backbone.enable_input_require_grads()

    @property
    def encoder(self) -> SegmentEncoder:
        """The shared step formatter for this model's tokenizer and step format."""
        if self._encoder is None:
            self._encoder = SegmentEncoder(self.tokenizer, self.config.step_format)
        return self._encoder

    # ---- forward ------------------------------------------------------------------
    def hidden_states(self, input_ids, attention_mask=None, position_ids=None) -> torch.Tensor:
        """Final hidden states [B, L, H]. attention_mask: [B, L] padding mask, or for packed
        sequences and prefix trees a `TreeMask` or a [B, L, L] bool mask (True = may
        attend) with their position_ids (see prmkit.models.attention)."""
        if isinstance(attention_mask, TreeMask) or (
                attention_mask is not None and attention_mask.dim() == 3):
            if position_ids is None:
                raise PrmkitError("a tree attention mask needs its position_ids")
            if unit_attention.applies(self.backbone, attention_mask):
                with unit_attention.unit_blocks(self.backbone, attention_mask,
                                                self.compute_dtype) as blocks:
                    if blocks:  # each row's units attend within themselves, no [L, L] mask
                        return self._decode(input_ids, None, position_ids)
            attention_mask = decoder_attention_mask(self.backbone, attention_mask, position_ids,
                                                    self.compute_dtype)
        return self._decode(input_ids, attention_mask, position_ids)

    def _decode(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        decoder = self.backbone.get_decoder()
        out = decoder(input_ids=input_ids, attention_mask=attention_mask,
                      position_ids=position_ids, use_cache=False)
        return out.last_hidden_state

    @property
    def compute_dtype(self) -> torch.dtype:
        if torch.is_autocast_enabled("cpu"):
            return torch.get_autocast_dtype("cpu")
        if torch.cuda.is_available() and torch.is_autocast_enabled("cuda"):
            return torch.get_autocast_dtype("cuda")
        return self.backbone.get_input_embeddings().weight.dtype

    def classify(self, hidden: torch.Tensor, surprise: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [K, H] at label positions (and, with surprise_window, their
        `surprise_features` [K, 2W]) -> class logits [K, C] (class 0 = correct).

        K x C values only: computed in fp32, also under autocast (which would otherwise run
        the fp32 head, or the label rows of the LM head, in bf16)."""
        if (surprise is None) != (self.config.surprise_window == 0):
            raise PrmkitError("this model's head reads surprise features: score it with "
                              "forward() (label_logits), which computes them"
                              if surprise is None else "surprise features given to a model "
                              "without surprise_window")
        with torch.autocast(hidden.device.type, enabled=False):
            if self.head is not None:
                x = hidden.float() if surprise is None else torch.cat(
                    [hidden.float(), surprise.float()], dim=-1)
                return self.head(x)
            lm_head = self.backbone.get_output_embeddings()
            logits = hidden.float() @ lm_head.weight[self.label_token_ids].float().T
            if getattr(lm_head, "bias", None) is not None:
                logits = logits + lm_head.bias[self.label_token_ids].float()
            return logits

    def forward(self, input_ids, label_positions, attention_mask=None, position_ids=None):
        """label_positions: LongTensor [K, 2] of (row, token index). Returns logits [K, C]."""
        hidden = self.hidden_states(input_ids, attention_mask, position_ids)
        return self.label_logits(hidden, input_ids, label_positions, attention_mask, position_ids)

    def label_logits(self, hidden, input_ids, label_positions, attention_mask=None,
                     position_ids=None) -> torch.Tensor:
        """Class logits [K, C] at label_positions from the final hidden states [B, L, H]."""
        at = hidden[label_positions[:, 0], label_positions[:, 1]]
        if not self.config.surprise_window:
            return self.classify(at)
        surprise = surprise_features(self.backbone.get_output_embeddings(), hidden, input_ids,
                                     label_positions, self.config.surprise_window,
                                     attention_mask, position_ids, self.config.surprise_step)
        return self.classify(at, surprise)

    def correct_probability(self, logits: torch.Tensor) -> torch.Tensor:
        """P(step correct) from class logits [K, C]."""
        return correct_from_class_probs(logits.float().softmax(-1), self.config)

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None):
        """Cross-entropy against target distributions [K, C] (hard or soft labels)."""
        per_label = -(targets * F.log_softmax(logits.float(), -1)).sum(-1)
        if weights is None:
            return per_label.mean()
        return (per_label * weights).sum() / weights.sum().clamp_min(1e-8)

    # ---- save / load ----------------------------------------------------------------
    def save_pretrained(self, folder: str | Path, merge_adapter: bool = True,
                        run: dict | None = None) -> Path:
        """Save a plain Hugging Face folder (+ head weights + prmkit_config.json + a model
        card, README.md: `run` may give its data, policy, metrics and name, see
        prmkit.models.card).

        With LoRA, merge_adapter=True writes merged full weights (the folder is then
        self-contained); False writes only the adapter, loaded over config.backbone.
        """
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = copy.deepcopy(self.config)
        if self._peft_model is not None and not merge_adapter:
            self._peft_model.save_pretrained(folder)
            config.adapter = True
        elif self._peft_model is not None:
            if getattr(self.backbone, "is_loaded_in_4bit", False):
                raise PrmkitError("a 4-bit (QLoRA) backbone cannot be saved merged: save the "
                                  "adapter (merge_adapter=False, training: save_merged=false) "
                                  "and load it over the bf16 backbone")
            base = self._peft_model.get_base_model()
            base.save_pretrained(folder, state_dict=merged_state_dict(base))
            config.adapter = False
        else:
            self.backbone.save_pretrained(folder)
            config.adapter = False
        self.tokenizer.save_pretrained(folder)
        if self.head is not None:
            state = {k: v.detach().float().contiguous().cpu() for k, v in self.head.state_dict().items()}
            save_file(state, str(folder / HEAD_WEIGHTS))
        config.save(folder)
        write_model_card(folder, config, run)
        return folder

    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype: torch.dtype | str | None = None,
                        device: str | torch.device | None = None,
                        attn_implementation: str | None = None, format: str | None = None,
                        trust_remote_code: bool = False) -> StepRewardModel:
        """Load a model prmkit saved; dtype (default fp32) is the backbone's dtype as loaded
        (the head stays fp32), so a bf16 model never holds fp32 weights on the way.

        `folder` may be a Hub id. A published PRM or a token-classification export (a
        folder without prmkit_config.json, or with `format` given) is refused, naming
        `prmkit.models.loading.load_reward_model`, which loads any PRM folder; `format`
        and `trust_remote_code` are taken only to say so."""
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from prmkit.data.hub import resolve_model_folder
        from prmkit.models.backbones import attn_kwargs, resolve_dtype

        dtype = resolve_dtype(dtype)
        folder = resolve_model_folder(folder)
        if format is not None or not is_prmkit_model(folder):
            what = (f"format {format!r} names a published PRM" if format is not None
                    else f"{folder} is a token-classification export"
                    if (folder / CONFIG_NAME).is_file()
                    else f"{folder} has no {CONFIG_NAME}, so it is no model prmkit saved")
            raise PrmkitError(
                f"{what}: StepRewardModel.from_pretrained loads prmkit's own folders; load "
                f"this one with prmkit.models.loading.load_reward_model({str(folder)!r}"
                f"{'' if format is None else f', format={format!r}'}) or "
                "Scorer.from_pretrained, which read published PRMs and exports")
        config = RewardModelConfig.load(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if config.adapter:
            from peft import PeftModel

            from prmkit.models.backbones import load_backbone

            if not config.backbone:
                raise PrmkitError(f"{folder}: adapter folder without a base backbone in its config")
            base, _ = load_backbone(config.backbone, dtype=dtype,
                                    attn_implementation=attn_implementation)
            backbone = PeftModel.from_pretrained(base, folder).merge_and_unload()
        else:
            backbone = AutoModelForCausalLM.from_pretrained(
                folder, dtype=dtype or torch.float32, **attn_kwargs(attn_implementation))
        model = cls(backbone, tokenizer, config)
        if model.head is not None:
            model.head.load_state_dict(load_file(str(folder / HEAD_WEIGHTS)))
        if device is not None:
            model.to(device)
        return model.eval()


def merged_state_dict(backbone) -> dict[str, torch.Tensor]:
    """The LoRA-merged weights of a peft-wrapped backbone, on the host, without copying the
    model on its device: each adapted layer's weight is merged on the device one layer at
    a time and moved to the host; the other weights move as they are."""
    from peft.tuners.lora import LoraLayer

    out: dict[str, torch.Tensor] = {}
    done: set[str] = set()  # modules whose weights are already in `out`
    host: dict[int, torch.Tensor] = {}  # tied weights stay one tensor

    def to_host(t: torch.Tensor) -> torch.Tensor:
        key = t.data_ptr()
        if key not in host:
            host[key] = t.detach().to("cpu", copy=True)
        return host[key]

    with torch.no_grad():
        for name, module in backbone.named_modules():
            if not isinstance(module, LoraLayer):
                continue
            base = module.get_base_layer()
            merged = base.weight.float()
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    merged = merged + module.get_delta_weight(adapter).float()
            out[f"{name}.weight"] = merged.to(base.weight.dtype).cpu()
            if getattr(base, "bias", None) is not None:
                out[f"{name}.bias"] = to_host(base.bias)
            done.add(name)
        for key, tensor in backbone.state_dict(keep_vars=True).items():
            plain = key.replace(".base_layer.", ".")
            if "lora_" in key or plain.rpartition(".")[0] in done:
                continue
            out[plain] = to_host(tensor)
    return out
