"""Published PRM families as format specs (YAML or JSON), not code.

A spec says how a family formats a solution (`prompt`: a plain text template, the
tokenizer's chat template over messages, one chat turn per step, or every line tokenised
on its own), which token carries each step's label (`label.marker`, read at the marker's
last token or at the token before it) and how P(correct) is read there (`label.read`: the
model's own per-token class logits, the LM head's logits over a pair of label tokens, a
value head's sigmoid, or an implicit PRM's log-likelihood ratio). The built-in families
are the specs in prmkit/models/specs/; a user adds one by passing a spec file as
`--format`, which may start from another spec (`base: eurus-prm`) and change some fields.

    spec = load_spec("qwen2.5-math-prm")           # or load_spec("my_family.yaml")
    spec = detect_spec(folder)                     # from config.json, where unambiguous
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from prmkit.errors import PrmkitError

PROMPT_KINDS = ("text", "chat", "chat_turns", "lines")
LABEL_AT = ("marker", "before_marker", "step_end")
READS = ("classes", "lm_tokens", "implicit", "value_head")
IMPLICIT_REWARDS = ("cumulative", "step")
IMPLICIT_SUM_FROM = ("boundary", "after_boundary")


@dataclass(frozen=True)
class SolutionLayout:
    """How (problem, steps) becomes text, and where each step's label sits. Templates are
    filled in one pass (prmkit.models.formatting.fill_template): `{problem}`, `{steps}`,
    `{step}`, `{n}` (the step's number, from 1) and, kind lines, `{bos}`."""

    kind: str = "text"
    text: str = "{problem}\n\n{steps}"  # kind text; kind lines: the prompt
    messages: tuple[tuple[str, str], ...] = ()  # kind chat: (role, content) pairs
    step: str = "{step}\n\n"  # one step as it appears in the text
    step_join: str = ""  # between two steps
    first_step: str = "{problem} {step}"  # kind chat_turns: the first user turn
    reply: str = "+"  # kind chat_turns: the assistant's answer to each step
    add_special_tokens: bool = False
    strip_steps: bool = False  # each step stripped first, as its authors' code does
    marker: str = "\n\n"
    at: str = "marker"
    sum_from: str = "boundary"  # read implicit: the first summed token (ImplicitLayout)


@dataclass(frozen=True)
class FamilySpec:
    name: str
    layout: SolutionLayout
    read: str = "classes"
    num_classes: int = 2
    correct_class: int = 0  # read classes: the index of the "correct" class
    tokens: tuple[str, ...] = ()  # read lm_tokens: label tokens, correct first
    architectures: tuple[str, ...] = ()  # glob patterns the config's architecture must match
    detect: bool = False
    remote_code: bool = False
    split_on: str = "\n\n"
    aggregation: str = "min"
    max_length: int = 4096
    description: str = ""
    models: tuple[str, ...] = ()
    source: str = ""  # the file the spec was read from
    reference: str | None = None  # read implicit: the reference model (folder or Hub id)
    beta: float = 1.0  # read implicit: reward = beta * sum of log pi/pi_ref
    reward: str = "cumulative"  # read implicit: from the response's start, or each step's own
    head: str = ""  # read value_head: the head's weight prefix in the checkpoint

    def matches(self, architecture: str) -> bool:
        return any(fnmatch.fnmatchcase(architecture, p) for p in self.architectures)

    def check_architecture(self, architecture: str, folder) -> None:
        if self.architectures and not self.matches(architecture):
            raise PrmkitError(
                f"{folder} is a {architecture}, but format {self.name!r} expects "
                f"{' or '.join(self.architectures)} (config.json `architectures`)")

    @property
    def class_order(self) -> list[int]:
        """Class indices with the correct class first (prmkit's convention)."""
        return [self.correct_class, *(c for c in range(self.num_classes)
                                      if c != self.correct_class)]


def _need(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise PrmkitError(f"{where}: {message}")


def spec_from_dict(d: dict, source: str = "<dict>") -> FamilySpec:
    """Validate a spec's fields (errors name the file and the field)."""
    _need(isinstance(d, dict) and isinstance(d.get("name"), str), source, "a spec needs a `name`")
    prompt, label = d.get("prompt") or {}, d.get("label") or {}
    kind = prompt.get("kind", "text")
    _need(kind in PROMPT_KINDS, source, f"prompt.kind must be one of {PROMPT_KINDS}, got {kind!r}")
    messages = tuple((m["role"], m["content"]) for m in prompt.get("messages", ()))
    layout = SolutionLayout(
        kind=kind, text=prompt.get("text", SolutionLayout.text), messages=messages,
        step=prompt.get("step", SolutionLayout.step),
        step_join=prompt.get("step_join", ""),
        first_step=prompt.get("first_step", SolutionLayout.first_step),
        reply=prompt.get("reply", "+"),
        add_special_tokens=bool(prompt.get("add_special_tokens", kind in ("text", "lines"))),
        strip_steps=bool(prompt.get("strip_steps", False)),
        marker=label.get("marker", ""), at=label.get("at", "marker"),
        sum_from=label.get("sum_from", "boundary"))
    _need(layout.at in LABEL_AT, source, f"label.at must be one of {LABEL_AT}")
    step_end = layout.at == "step_end"  # the label is the step's own last token
    _need(bool(layout.marker) or step_end, source, "label.marker is required (the text "
          "whose token carries each step's label)")
    if kind == "text":
        _need(layout.text.count("{steps}") == 1 and "{problem}" in layout.text, source,
              "prompt.text needs {problem} and {steps} (once)")
    if kind == "chat":
        contents = " ".join(c for _, c in messages)
        _need(bool(messages) and messages[-1][1].count("{steps}") == 1
              and contents.count("{steps}") == 1 and "{problem}" in contents, source,
              "prompt.messages need {problem} in a content and {steps} once, in the last "
              "message's content")
    if kind == "lines":
        _need("{problem}" in layout.text and layout.at == "marker", source, "prompt.kind "
              "lines needs {problem} in prompt.text and label.at marker (the marker ends "
              "every line)")
    elif kind == "chat_turns" and not step_end:
        _need(layout.marker in layout.reply, source, "label.marker must be in prompt.reply")
    elif kind == "chat_turns":
        raise PrmkitError(f"{source}: label.at step_end needs prompt.kind text or chat")
    elif step_end:
        _need("{step}" in layout.step, source, "prompt.step needs {step}")
    else:
        _need("{step}" in layout.step and layout.marker in layout.step.split("{step}", 1)[1],
              source, "prompt.step needs {step} followed by label.marker")
    read = label.get("read", "classes")
    _need(read in READS, source, f"label.read must be one of {READS}, got {read!r}")
    tokens = tuple(label.get("tokens", ()))
    num_classes = int(label.get("num_classes", len(tokens) or 2))
    if read == "lm_tokens":
        _need(len(tokens) in (2, 3), source, "label.tokens: 2 or 3 label tokens, correct first")
    if read == "implicit":
        _need(step_end and kind == "chat" and bool(label.get("reference")), source,
              "label.read implicit needs prompt.kind chat, label.at step_end and "
              "label.reference (the reference model)")
    _need(layout.sum_from in IMPLICIT_SUM_FROM, source, "label.sum_from must be one of "
          f"{IMPLICIT_SUM_FROM}, got {layout.sum_from!r}")
    reward = label.get("reward", "cumulative")
    _need(reward in IMPLICIT_REWARDS, source, f"label.reward must be one of {IMPLICIT_REWARDS}")
    if read == "value_head":
        _need(bool(label.get("head")), source, "label.read value_head needs label.head (the "
              "head's weight prefix in the checkpoint, e.g. v_head.summary)")
    correct = int(label.get("correct_class", 0))
    _need(0 <= correct < num_classes, source, f"label.correct_class {correct} is not a class "
          f"of {num_classes}")
    return FamilySpec(
        name=d["name"], layout=layout, read=read, num_classes=num_classes,
        correct_class=correct, tokens=tokens, architectures=tuple(d.get("architectures", ())),
        detect=bool(d.get("detect", False)), remote_code=bool(d.get("remote_code", False)),
        split_on=d.get("split_on", "\n\n"), aggregation=d.get("aggregation", "min"),
        max_length=int(d.get("max_length", 4096)), description=d.get("description", ""),
        models=tuple(d.get("models", ())), source=source, reference=label.get("reference"),
        beta=float(label.get("beta", 1.0)), reward=reward, head=label.get("head", ""))


def _spec_dict(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A spec file's fields, over those of its `base` (a built-in name or a file beside it)
    where it names one: mappings merged key by key, anything else replaced."""
    text = path.read_text()
    try:
        if path.suffix == ".json":
            d = json.loads(text)
        else:
            import yaml

            d = yaml.safe_load(text)
    except Exception as e:  # yaml and json errors carry the line
        raise PrmkitError(f"{path}: not a valid spec file: {e}") from None
    if not isinstance(d, dict) or "base" not in d:
        return d
    base = _builtin_folder() / f"{d['base']}.yaml"
    if not base.is_file():
        base = path.parent / str(d["base"])
    _need(base.is_file() and base not in seen, str(path), f"base {d['base']!r} is neither a "
          "built-in family nor a spec file (or names this spec again)")
    return _merged(_spec_dict(base, (*seen, path)), {k: v for k, v in d.items() if k != "base"})


def _merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(base[k], v) if isinstance(v, dict) and isinstance(
            base.get(k), dict) else v
    return out


def _read_spec_file(path: Path) -> FamilySpec:
    return spec_from_dict(_spec_dict(path), str(path))


def _builtin_folder() -> Path:
    return Path(str(resources.files("prmkit.models") / "specs"))


def builtin_specs() -> dict[str, FamilySpec]:
    specs = [_read_spec_file(f) for f in _builtin_folder().iterdir() if f.suffix == ".yaml"]
    return {s.name: s for s in sorted(specs, key=lambda s: s.name)}


def load_spec(name_or_path: str | Path) -> FamilySpec:
    """A built-in family by name, or a spec file (.yaml, .yml, .json)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json"):
        if not path.is_file():
            raise PrmkitError(f"format spec {path}: no such file")
        return _read_spec_file(path)
    specs = builtin_specs()
    if str(name_or_path) not in specs:
        raise PrmkitError(f"unknown format {str(name_or_path)!r}: expected one of "
                          f"{', '.join(specs)} or a spec file (.yaml/.json)")
    return specs[str(name_or_path)]


def read_hf_config(folder: str | Path) -> dict:
    path = Path(folder, "config.json")
    if not path.is_file():
        raise PrmkitError(f"{folder} is not a prmkit model folder: prmkit_config.json is "
                          "missing, nor a Hugging Face model folder (no config.json)")
    return json.loads(path.read_text())


def architecture_of(hf_config: dict, folder) -> str:
    archs = hf_config.get("architectures") or []
    if len(archs) != 1:
        raise PrmkitError(f"{folder}/config.json: expected one entry in `architectures`, "
                          f"got {archs}")
    return archs[0]


def detect_spec(folder: str | Path, hf_config: dict | None = None) -> FamilySpec:
    """The family whose spec claims this architecture (`detect: true`); an architecture
    several families share (a plain causal LM) needs `--format`."""
    hf_config = hf_config if hf_config is not None else read_hf_config(folder)
    arch = architecture_of(hf_config, folder)
    specs = builtin_specs()
    found = [s for s in specs.values() if s.detect and s.matches(arch)]
    if len(found) == 1:
        return found[0]
    could = [s.name for s in specs.values() if s.matches(arch)]
    repo = hub_repo_of(folder)
    named = [s.name for s in specs.values() if repo in s.models and s.matches(arch)]
    if repo and named:
        raise PrmkitError(f"{folder} is {repo}, a published PRM of the {named[0]} family, "
                          f"which config.json alone does not tell (a {arch} could be read as "
                          f"{', '.join(could)}): pass --format {named[0]}")
    formats = f"--format ({', '.join(could or specs)}) or a spec file (docs/models.md)"
    if arch.endswith("ForCausalLM") or not could:
        why = (f"every causal LM is a {arch}, base models included" if could
               else f"no published family reads a {arch}")
        raise PrmkitError(
            f"{folder} is not a reward model prmkit knows: prmkit_config.json is missing (a "
            f"model prmkit trained has one) and config.json names no published PRM family "
            f"({why}). A base model gives no step scores until it is trained as one "
            f"(`prmkit train`, backbone: {folder}); a published PRM is read by naming its "
            f"family with {formats}")
    raise PrmkitError(
        f"{folder} is not a prmkit model folder (prmkit_config.json is missing), and its "
        f"published format cannot be told from config.json ({arch}): pass {formats}")


def hub_repo_of(folder: str | Path) -> str | None:
    """OWNER/NAME of a Hub cache snapshot folder (.../models--OWNER--NAME/snapshots/C)."""
    for part in reversed(Path(folder).parts):
        if part.startswith("models--") and part.count("--") == 2:
            return part.removeprefix("models--").replace("--", "/")
    return None
