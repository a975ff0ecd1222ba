"""Experiment tracking of a training run through accelerate's trackers.

`report_to` names trackers as transformers' TrainingArguments does (tensorboard, wandb,
trackio; none or [] for none). The records a run writes to metrics.jsonl also go, on
the main process, to `accelerator.log` as scalars named `<type>/<field>` (`train/loss`,
`train/lr`, `eval/loss`, `eval/auroc`), at the record's step. Tracking only reads what
the run logs: it draws no random numbers and changes no loss or weight.

accelerate writes TensorBoard events under `<logging_dir>/<run_name>` (default
`<output_dir>/trackers/<output_dir's folder name>`). A resumed run purges the events logged
after its checkpoint (SummaryWriter's purge_step), as metrics.jsonl drops those records.
The trackers are finished one by one rather than with `accelerator.end_training`, which
also ends the process group that the caller of a launched run ends itself.
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

from prmkit.errors import PrmkitError
from prmkit.training.run_folder import TRACKERS_DIR

# tracker name -> the package it needs
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def tracker_names(report_to) -> list[str]:
    """`report_to` as a list of tracker names: none, [] or None for none; an unknown name
    is an error that lists the known ones."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if names == ["none"]:
        return []
    out: list[str] = []
    for name in names:
        if name == "none":
            raise PrmkitError("report_to: 'none' cannot be combined with trackers "
                              f"({', '.join(n for n in names if n != 'none')})")
        if name not in TRACKERS:
            close = difflib.get_close_matches(str(name), TRACKERS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise PrmkitError(f"report_to: unknown tracker {name!r}{hint}; choose from "
                              f"{', '.join(TRACKERS)}, or none")
        if name not in out:
            out.append(name)
    return out


def check_installed(names: list[str]) -> None:
    """Refuse, before anything is loaded, a tracker whose package is not installed."""
    for name in names:
        package = TRACKERS[name]
        if importlib.util.find_spec(package) is None:
            extra = " (or pip install 'prmkit[tracking]')" if name == "tensorboard" else ""
            raise PrmkitError(f"report_to={name} needs the '{package}' package, which is "
                              f"not installed: pip install {package}{extra}")


def logging_dir(cfg) -> Path:
    return Path(cfg.logging_dir) if cfg.logging_dir else Path(cfg.output_dir) / TRACKERS_DIR


def run_name(cfg) -> str:
    return cfg.run_name or Path(cfg.output_dir).resolve().name


def accelerator_options(cfg) -> dict:
    """Keyword arguments of the run's Accelerator: its trackers and their folder."""
    if not cfg.report_to:
        return {}
    return {"log_with": list(cfg.report_to), "project_dir": str(logging_dir(cfg))}


def hparams(config: dict, prefix: str = "") -> dict:
    """A config as flat `a.b` keys with values every tracker takes (str, int, float,
    bool): lists become their text, None values are left out."""
    out: dict = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(hparams(value, name + "."))
        elif isinstance(value, (str, int, float, bool)):
            out[name] = value
        elif value is not None:
            out[name] = str(value)
    return out


def start(acc, cfg, start_step: int) -> None:
    """Start the trackers (a no-op without report_to), with the config as hyperparameters;
    a resumed run (start_step > 0) hides the events logged after its checkpoint."""
    if not cfg.report_to:
        return
    init_kwargs = {"wandb": {"name": run_name(cfg)}}
    if start_step:
        init_kwargs["tensorboard"] = {"purge_step": start_step + 1}
    if acc.is_main_process:
        logging_dir(cfg).mkdir(parents=True, exist_ok=True)
    acc.init_trackers(run_name(cfg), config=hparams(cfg.to_dict()), init_kwargs=init_kwargs)


def scalars(record: dict) -> dict:
    """A metrics.jsonl record as tracker scalars: `eval_loss` of an eval record is
    `eval/loss`, `loss` of a train record `train/loss`; the step is left out."""
    kind = record.get("type", "train")
    out = {}
    for key, value in record.items():
        if key in ("type", "step") or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[f"{kind}/{key.removeprefix(kind + '_')}"] = value
    return out


def log(acc, cfg, record: dict) -> None:
    if cfg.report_to:
        acc.log(scalars(record), step=record["step"])


def finish(acc) -> None:
    """Flush and close the trackers (main process; the others hold none)."""
    for tracker in acc.trackers:
        tracker.finish()
    acc.trackers = []
