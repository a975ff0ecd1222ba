"""Serve a prmkit reward model with vLLM's pooling runner.

`export_for_vllm` writes a plain token-classification checkpoint: the backbone's weights
with a linear `score` head (num_labels = the model's classes), architecture
`<Backbone>ForTokenClassification` (e.g. LlamaForTokenClassification), which vLLM serves
with `runner="pooling"` and the `token_classify` task: class probabilities for every
token. The head formulation's linear head becomes `score` as it is; the token
formulation's label rows of the LM head become `score` (its softmax over them is the
token formulation's). An `mlp` head has no such layout and is refused.

vLLM does not know where the labels sit: `vllm_step_probs` encodes solutions with the
model's own `SegmentEncoder` (prmkit_config.json is copied into the export), sends the
token ids, and reads P(correct) at the label positions, as `Scorer` does.

    prmkit export vllm --model runs/prm/model -o runs/prm/vllm
    llm = vllm.LLM("runs/prm/vllm", runner="pooling")
    probs = vllm_step_probs(llm, "runs/prm/vllm", [(problem, steps), ...])
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from prmkit.data.io import atomic_folder
from prmkit.errors import PrmkitError
from prmkit.models.config import RewardModelConfig, is_token_classification_export

CLASS_NAMES = {2: ["correct", "wrong"], 3: ["positive", "neutral", "negative"]}


def score_head(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight [C, H], bias [C] or None) of the linear map from the final hidden state to
    the class logits."""
    config = model.config
    if config.formulation == "head":
        if not isinstance(model.head, torch.nn.Linear):
            raise PrmkitError("an mlp head cannot be exported for vLLM's token classification "
                              "(one linear layer); train with model.head=linear")
        return model.head.weight.detach().float(), model.head.bias.detach().float()
    lm_head = model.backbone.get_output_embeddings()
    ids = model.label_token_ids
    bias = getattr(lm_head, "bias", None)
    return (lm_head.weight.detach()[ids].float(),
            None if bias is None else bias.detach()[ids].float())


def export_for_vllm(model_dir: str | Path, out: str | Path, dtype: str | None = None) -> Path:
    """Write the vLLM-servable folder of a saved prmkit model (see the module docstring).
    dtype: the backbone's weights as saved (default: as loaded, fp32); the head stays fp32.
    The folder is written whole or not at all; an earlier export in it is replaced, any
    other folder that is not empty refused."""
    from prmkit.models.loading import load_reward_model

    out = Path(out)
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not is_token_classification_export(out)):
        raise PrmkitError(f"{out} exists and is not an export: choose a new folder (an "
                          "earlier export there is replaced)")
    model = load_reward_model(model_dir, dtype=dtype)
    backbone = model.backbone
    arch = type(backbone).__name__
    if not arch.endswith("ForCausalLM"):
        raise PrmkitError(f"{model_dir}: a {arch} backbone has no token-classification "
                          "counterpart in vLLM; a *ForCausalLM backbone is needed")
    weight, bias = score_head(model)
    classes = model.config.num_classes
    hf_config = copy.deepcopy(backbone.config)
    hf_config.architectures = [arch.removesuffix("ForCausalLM") + "ForTokenClassification"]
    hf_config.id2label = dict(enumerate(CLASS_NAMES[classes]))
    hf_config.label2id = {v: k for k, v in hf_config.id2label.items()}
    hf_config.tie_word_embeddings = False  # no LM head in the export
    with atomic_folder(out) as tmp:  # a failed export leaves no folder, nor half of one
        _write_export(model, backbone, hf_config, weight, bias, tmp)
    return out


def _write_export(model, backbone, hf_config, weight, bias, out: Path) -> None:
    from safetensors.torch import save_file

    from prmkit.models.card import write_model_card

    state: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for key, value in backbone.state_dict().items():
        if key.startswith("lm_head."):
            continue
        value = value.detach()
        if value.data_ptr() in seen:
            value = value.clone()  # safetensors stores no shared tensors
        seen.add(value.data_ptr())
        state[key] = value.contiguous().cpu()
    state["score.weight"] = weight.contiguous().cpu()
    if bias is not None:
        state["score.bias"] = bias.contiguous().cpu()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    hf_config.save_pretrained(out)
    model.tokenizer.save_pretrained(out)
    model.config.save(out)
    write_model_card(out, model.config, token_classification=True)


def vllm_step_probs(llm, model_dir: str | Path, items: Sequence[Any]) -> list[list[float | None]]:
    """P(correct) of every step of each item ((problem, steps) pairs, dicts or records)
    from a vLLM engine serving an export (`LLM(export, runner="pooling")`); None for a
    step cut by max_length, as `Scorer.score` gives."""
    from transformers import AutoTokenizer

    from prmkit.models.formatting import SegmentEncoder
    from prmkit.models.reward_model import correct_from_class_probs
    from prmkit.scoring.scorer import as_problem_steps, encode_for_scoring

    config = RewardModelConfig.load(model_dir)
    encoder = SegmentEncoder(AutoTokenizer.from_pretrained(model_dir), config.step_format)
    encoded = [encode_for_scoring(encoder, config, *as_problem_steps(item)) for item in items]
    requests = [{"prompt_token_ids": e.input_ids} for e in encoded if e.label_positions]
    outputs = iter(llm.encode(requests, pooling_task="token_classify", use_tqdm=False)
                   if requests else [])
    results = []
    for e in encoded:
        probs: list[float | None] = [None] * e.num_slots
        if e.label_positions:
            per_token = torch.as_tensor(next(outputs).outputs.data).float()
            for slot, pos in zip(e.slots, e.label_positions, strict=True):
                probs[slot] = float(correct_from_class_probs(per_token[pos], config))
        results.append(probs)
    return results


def export_summary(out: Path) -> str:
    cfg = json.loads((out / "config.json").read_text())
    return f"wrote {out} ({cfg['architectures'][0]}, {cfg.get('num_labels', 2)} labels)"
