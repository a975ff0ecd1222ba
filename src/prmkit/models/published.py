"""Published PRMs (and token-classification exports) as `StepRewardModel`s.

A folder without prmkit_config.json is read through its family's format spec
(prmkit.models.family): the spec's layout (prmkit.models.layouts) formats solutions as
the family's authors' code does, and `forward` returns class logits at the label
positions with the correct class first, so the Scorer, search, evaluation and labelling
use it as any prmkit model. `read: lm_tokens` uses the LM head's rows of the label tokens
(the token formulation); `read: classes` runs the model's own forward (its per-token class
logits: a `*ForTokenClassification`, or remote code such as Qwen2ForProcessRewardModel);
`read: value_head` runs the base model and a Linear(hidden, 1) head read from the
checkpoint (Skywork-o1-Open-PRM), P(correct) = sigmoid; `read: implicit` (PRIME /
EurusPRM) runs the model and its reference: r = beta * sum of log pi/pi_ref over the
response up to a step's boundary (`reward: cumulative`, the authors' reading) or over the
step alone (`reward: step`, PRIME's dense reward), and P(correct) = sigmoid(r).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from prmkit.errors import PrmkitError
from prmkit.models.config import (
    CONFIG_NAME,
    RewardModelConfig,
    is_token_classification_export,
)
from prmkit.models.family import (
    FamilySpec,
    architecture_of,
    detect_spec,
    load_spec,
    read_hf_config,
)
from prmkit.models.formatting import SegmentEncoder, StepFormat, resolve_label_token_ids
from prmkit.models.layouts import layout_encoder
from prmkit.models.reward_model import StepRewardModel

CLASS_NAMES_CORRECT = ("correct", "positive")
# A solution whose label positions a model trained in an `lm_tokens` format answers with
# its label tokens: where they get less than LABEL_MASS of the next-token probability
# there, the model was not trained to emit them (a base LM) and is warned about.
PROBE = ("What is 2 + 3?", ("We add 2 and 3.", "2 + 3 = 5.", "The answer is 5."))
LABEL_MASS = 0.5

log = logging.getLogger("prmkit.models")


class PublishedRewardModel(StepRewardModel):
    def __init__(self, backbone, tokenizer, config: RewardModelConfig, spec: FamilySpec,
                 encoder=None, reference=None, value_head: nn.Linear | None = None):
        nn.Module.__init__(self)
        self.backbone, self.tokenizer, self.config, self.spec = backbone, tokenizer, config, spec
        object.__setattr__(self, "_peft_model", None)
        self.head = None
        if spec.read == "lm_tokens":
            ids = resolve_label_token_ids(tokenizer, spec.tokens)
            self.register_buffer("label_token_ids", torch.tensor(ids), persistent=False)
        self.reference = reference  # read implicit: the reference causal LM
        self.value_head = value_head  # read value_head: Linear(hidden, 1), fp32
        self._encoder = encoder or layout_encoder(tokenizer, spec, config.step_format)

    def forward(self, input_ids, label_positions, attention_mask=None, position_ids=None):
        if self.spec.read == "lm_tokens":
            return super().forward(input_ids, label_positions, attention_mask, position_ids)
        if position_ids is not None or (attention_mask is not None and attention_mask.dim() != 2):
            raise PrmkitError(f"format {self.spec.name!r} is scored on padded rows only "
                              "(no packed or tree masks)")
        if self.spec.read == "implicit":
            return self._implicit(input_ids, label_positions, attention_mask)
        if self.spec.read == "value_head":
            return self._value(input_ids, label_positions, attention_mask)
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        logits = out.logits if hasattr(out, "logits") else out[0]
        picked = logits[label_positions[:, 0], label_positions[:, 1]].float()
        return picked[:, self.spec.class_order]

    def _value(self, input_ids, label_positions, attention_mask):
        """Logits [K, 2] = [v, 0] (softmax class 0 = sigmoid(v)): the value head, in fp32,
        on the final hidden states at the label positions."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               use_cache=False).last_hidden_state
        at = hidden[label_positions[:, 0], label_positions[:, 1]]
        with torch.autocast(at.device.type, enabled=False):
            value = self.value_head(at.float()).squeeze(-1)
        return torch.stack([value, torch.zeros_like(value)], -1)

    def _implicit(self, input_ids, label_positions, attention_mask):
        """Logits [K, 2] = [r, 0] (softmax class 0 = sigmoid(r)); each row's first label is
        its anchor (the last prompt token), where r is 0. q[j] is beta times the sum of
        log pi/pi_ref over tokens 1..j; r is q at the label less q at the row's anchor
        (cumulative) or at the label before it (step)."""
        def token_logps(model):
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
            logps = logits[:, :-1].float().log_softmax(-1)
            return logps.gather(-1, input_ids[:, 1:, None]).squeeze(-1)

        ratio = token_logps(self.backbone) - token_logps(self.reference)
        q = torch.cat([ratio.new_zeros(len(ratio), 1), ratio.cumsum(-1)], -1) * self.spec.beta
        rows, cols = label_positions[:, 0], label_positions[:, 1]
        at = q[rows, cols]
        same_row = torch.cat([rows.new_zeros(1, dtype=torch.bool), rows[1:] == rows[:-1]])
        if self.spec.reward == "step":
            before = torch.where(same_row, torch.cat([at[:1], at[:-1]]), at)
        else:
            index = torch.arange(len(at), device=at.device)
            anchor = torch.where(same_row, 0, index).cummax(0).values
            before = at[anchor]
        reward = at - before
        return torch.stack([reward, torch.zeros_like(reward)], -1)

    def save_pretrained(self, folder, merge_adapter: bool = True, run=None):
        raise PrmkitError(f"a published {self.spec.name} model is used as it is; it has no "
                          "prmkit folder to save")


def published_config(spec: FamilySpec) -> RewardModelConfig:
    fmt = StepFormat(step_separator=spec.split_on, max_length=spec.max_length)
    if spec.read == "lm_tokens":
        return RewardModelConfig(formulation="token", num_classes=len(spec.tokens),
                                 label_tokens=spec.tokens, aggregation=spec.aggregation,
                                 step_format=fmt, family=spec.name)
    return RewardModelConfig(formulation="head", num_classes=spec.num_classes,
                             aggregation=spec.aggregation, step_format=fmt, family=spec.name)


def _check_tokens(spec: FamilySpec, tokenizer, folder) -> None:
    """The marker (and label tokens) must be in the vocabulary as the family expects."""
    layout = spec.layout
    if layout.marker in tokenizer.all_special_tokens or layout.marker.startswith("<"):
        if tokenizer.convert_tokens_to_ids(layout.marker) in (None, tokenizer.unk_token_id):
            raise PrmkitError(f"{folder}: format {spec.name!r} reads labels at the token "
                              f"{layout.marker!r}, which this tokenizer does not have")
    if spec.read == "lm_tokens":
        try:
            resolve_label_token_ids(tokenizer, spec.tokens)
        except PrmkitError as e:
            raise PrmkitError(f"{folder}: format {spec.name!r}: {e}") from None


def _load_backbone(folder: Path, spec: FamilySpec, dtype, trust_remote_code: bool, attn: dict):
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForTokenClassification

    kw = {"dtype": dtype or torch.float32, **attn}
    if spec.read in ("lm_tokens", "implicit"):
        return AutoModelForCausalLM.from_pretrained(folder, **kw)
    if spec.read == "value_head":  # the base model of config.json's model_type, no remote code
        return AutoModel.from_pretrained(folder, trust_remote_code=False, **kw)
    arch = architecture_of(read_hf_config(folder), folder)
    if arch.endswith("ForTokenClassification"):
        return AutoModelForTokenClassification.from_pretrained(folder, **kw)
    return AutoModel.from_pretrained(folder, trust_remote_code=trust_remote_code, **kw)


def label_token_mass(model: PublishedRewardModel) -> float:
    """The share of next-token probability that an `lm_tokens` model gives its label tokens
    at the label positions of the PROBE solution (mean over its steps)."""
    enc = model.encoder.encode(*PROBE)
    device = next(model.backbone.parameters()).device
    with torch.no_grad():
        hidden = model.hidden_states(torch.tensor([enc.input_ids], device=device))
        logits = model.backbone.get_output_embeddings()(hidden[0, enc.label_positions])
    probs = logits.float().softmax(-1)
    return probs[:, model.label_token_ids].sum(-1).mean().item()


def warn_if_not_trained_for(model: PublishedRewardModel, folder) -> None:
    """Warn when the model does not answer its format's label positions with the label
    tokens: read so, a base LM gives step scores that mean nothing."""
    if model.spec.read != "lm_tokens":
        return
    mass = label_token_mass(model)
    if mass < LABEL_MASS:
        tokens = ", ".join(repr(t) for t in model.spec.tokens)
        log.warning(
            "%s does not look trained for format %r: on a probe solution its label tokens "
            "%s get %.1f%% of its next-token probability where it should predict them (a "
            "model trained in this format puts nearly all of it there), so its step scores "
            "would mean nothing. Is it a base LM rather than a %s PRM?",
            folder, model.spec.name, tokens, 100 * mass, model.spec.name)


def load_published(folder: str | Path, format: str | None = None, *,
                   trust_remote_code: bool = False, dtype=None,
                   attn_implementation: str | None = None,
                   device=None) -> PublishedRewardModel:
    """A published PRM folder, read as `format` (a built-in family or a spec file; None:
    detected from config.json where unambiguous), on `device` (default: as loaded). A
    model that does not emit its format's label tokens is warned about."""
    from transformers import AutoTokenizer

    from prmkit.models.backbones import attn_kwargs

    folder = Path(folder)
    hf = read_hf_config(folder)
    arch = architecture_of(hf, folder)
    if Path(folder, CONFIG_NAME).is_file() and format is None:
        model = _load_export(folder, hf, arch, dtype, attn_implementation)
        return model.to(device) if device is not None else model
    spec = load_spec(format) if format else detect_spec(folder, hf)
    spec.check_architecture(arch, folder)
    if spec.remote_code and not trust_remote_code:
        raise PrmkitError(
            f"{folder} is a {arch}: its model class is remote code shipped with the weights "
            f"({', '.join(sorted(hf.get('auto_map', {}).values())) or 'modeling_*.py'}); "
            "read it, then pass --trust-remote-code (trust_remote_code=True) to run it")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    _check_tokens(spec, tokenizer, folder)
    attn = attn_kwargs(attn_implementation)
    backbone = _load_backbone(folder, spec, dtype, trust_remote_code, attn)
    reference = None
    if spec.read == "implicit":
        from transformers import AutoModelForCausalLM

        from prmkit.data.hub import resolve_model_folder

        reference = AutoModelForCausalLM.from_pretrained(
            resolve_model_folder(spec.reference), dtype=dtype or torch.float32, **attn)
        if reference.config.vocab_size != backbone.config.vocab_size:
            raise PrmkitError(f"{folder}: the reference model {spec.reference} has another "
                              f"vocabulary ({reference.config.vocab_size} tokens, the model "
                              f"{backbone.config.vocab_size})")
    value_head = None
    if spec.read == "value_head":
        from prmkit.models.checkpoints import read_linear

        value_head = read_linear(folder, spec.head, backbone.config.hidden_size, 1,
                                 f"format {spec.name!r} reads its value head")
    model = PublishedRewardModel(backbone, tokenizer, published_config(spec), spec,
                                 reference=reference, value_head=value_head).eval()
    if device is not None:
        model.to(device)
    warn_if_not_trained_for(model, folder)
    return model


def _load_export(folder: Path, hf: dict, arch: str, dtype, attn_implementation):
    """A prmkit token-classification export (`prmkit export`): the backbone with a
    linear `score` head, read with the prmkit step format copied beside it."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prmkit.models.backbones import attn_kwargs
    from prmkit.models.family import SolutionLayout

    if not arch.endswith("ForTokenClassification"):
        raise PrmkitError(f"{folder}: a {arch} with a prmkit_config.json that is not a "
                          "prmkit model; expected a *ForTokenClassification export")
    config = RewardModelConfig.load(folder)
    names = [str(hf.get("id2label", {}).get(str(i), "")).lower()
             for i in range(config.num_classes)]
    correct = next((i for i, n in enumerate(names) if n in CLASS_NAMES_CORRECT), None)
    if correct is None:
        raise PrmkitError(f"{folder}/config.json: id2label {hf.get('id2label')} names no "
                          f"class {' or '.join(CLASS_NAMES_CORRECT)}")
    spec = FamilySpec(name="prmkit-token-classification", layout=SolutionLayout(),
                      read="classes", num_classes=config.num_classes, correct_class=correct,
                      split_on=config.step_format.step_separator,
                      aggregation=config.aggregation,
                      max_length=config.step_format.max_length)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    backbone = AutoModelForTokenClassification.from_pretrained(
        folder, dtype=dtype or torch.float32, **attn_kwargs(attn_implementation))
    config.family = spec.name
    encoder = SegmentEncoder(tokenizer, config.step_format)
    return PublishedRewardModel(backbone, tokenizer, config, spec, encoder).eval()


def describe_family(model) -> dict:
    """The `format` entry of a scoring record (empty for a model prmkit trained)."""
    spec = getattr(model, "spec", None)
    if spec is None:
        return {}
    return {"format": spec.name, **({"format_file": spec.source} if spec.source and not
            spec.source.startswith(str(Path(__file__).parent)) else {})}



def prm_config_of(folder: str | Path, format: str | None = None) -> RewardModelConfig:
    """The reward-model config of any PRM folder without loading its weights: prmkit's
    own, or the published family's (`format`, else detected)."""
    folder = Path(folder)
    if format is None and Path(folder, CONFIG_NAME).is_file():
        config = RewardModelConfig.load(folder)
        if is_token_classification_export(folder):
            config.family = "prmkit-token-classification"
        return config
    spec = load_spec(format) if format else detect_spec(folder)
    spec.check_architecture(architecture_of(read_hf_config(folder), folder), folder)
    return published_config(spec)
