"""The model card (README.md) written beside a saved reward model: what it was built
from, on which data and labelling policy, how it reads steps, and the run's metrics.

    write_model_card(folder, config, run={"data": "data/prm800k/phase2_train.jsonl",
                                          "policy": {...}, "metrics": {"auroc": 0.81}})

A README.md that prmkit did not write is left alone (peft's blank template is replaced).
"""

from __future__ import annotations

import json
from pathlib import Path

from prmkit.models.config import RewardModelConfig

MARK = "<!-- written by prmkit -->"


def _yaml_list(values) -> str:
    return "".join(f"\n  - {v}" for v in values)


def model_card(config: RewardModelConfig, run: dict | None = None,
               token_classification: bool = False) -> str:
    run = run or {}
    fmt = config.step_format
    if token_classification:
        reading = (f"a `*ForTokenClassification` head with {config.num_classes} classes "
                   "(class 0 = correct); read P(correct) at each step's label token")
    elif config.formulation == "token":
        reading = (f"the LM head's logits of the label tokens {list(config.label_tokens)} "
                   "(correct first), softmax over them")
    else:
        reading = f"a {config.head} head with {config.num_classes} classes (class 0 = correct)"
    base = config.backbone or run.get("base_model")
    header = ["---", "library_name: transformers", "tags:" + _yaml_list(
        ["prmkit", "process-reward-model", "reward-model", "math"])]
    if base:
        header.append("base_model:" + _yaml_list([base]))
    if run.get("data"):
        header.append("datasets:" + _yaml_list(run["data"] if isinstance(run["data"], list)
                                               else [run["data"]]))
    header.append("---")
    lines = [*header, MARK, "",
             f"# {run.get('name') or 'A prmkit ' + config.objective.upper()}", "",
             f"A {'process' if config.objective == 'prm' else 'outcome'} reward model "
             "trained with prmkit.", "",
             f"- Base model: {base or 'not recorded'}",
             f"- Data: {run.get('data') or 'not recorded'}",
             f"- Labelling policy: {json.dumps(run['policy']) if run.get('policy') else 'not recorded'}",
             f"- Formulation: {config.formulation}, {config.num_classes} classes; {reading}",
             f"- Step format: prompt {fmt.prompt_template!r}"
             f"{' (chat template)' if fmt.use_chat_template else ''}, each step followed by "
             f"{fmt.step_separator!r}, its label at the separator's last token; "
             f"max_length {fmt.max_length}",
             f"- Solution score: `{config.aggregation}` of the step probabilities", ""]
    if run.get("metrics"):
        lines += ["## Metrics from the run", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |"
                  for k, v in run["metrics"].items()]
        lines.append("")
    lines += ["## Use", "", "```python", "from prmkit.scoring import Scorer", "",
              f"scorer = Scorer.from_pretrained({run.get('hub_id', 'FOLDER_OR_HUB_ID')!r})",
              'scorer.score([("problem", ["step 1", "step 2"])])  # P(correct) per step',
              "```", ""]
    return "\n".join(lines)


def write_model_card(folder: str | Path, config: RewardModelConfig, run: dict | None = None,
                     token_classification: bool = False) -> Path | None:
    """Write README.md unless a README.md that prmkit did not write is there."""
    path = Path(folder, "README.md")
    text = path.read_text(errors="replace") if path.is_file() else MARK
    if MARK not in text and "[More Information Needed]" not in text:  # peft's blank template
        return None
    path.write_text(model_card(config, run, token_classification))
    return path
