"""The demo's shared base model: a small Llama pretrained on the world's MathMix, built once per
machine and configuration and shared across seeds and experiments.

The folder is `cache_dir()/demo-base/<key>`, the key a hash of every setting (`BaseConfig`),
so a changed setting builds a new base and an unchanged one is read back. A file lock makes
concurrent callers wait for one build; the folder appears whole (written aside, then
renamed) with `base.json` (settings, loss curve ends, build time, where it was built).

A base is built in two stages. The first pretrains a new model on MathMix (worked solutions
and arithmetic facts): it learns to compute. The second (`base_settings.ReadingConfig`, skipped with
`reading.steps=0`) goes on pretraining it on worked solutions alone, of many more problems
and in every order the world allows: it learns to read a problem, to copy its quantities and
results written before, and which steps may come next, so that its own probability of a
written step checks every kind of mistake (`prmkit.demo.lm.skill.written_probs`,
benchmarks/bench_demo_base_check.py). A first stage is a base of its own, cached under its
own key (the key it had before the second stage existed).

Both stages of the default settings ship with prmkit (`SHIPPED_BASE` and
`SHIPPED_FIRST_STAGE`, about 4 MB each): together they cost over half an hour of CPU in fp32,
more than the demo's budget. They were made by `python -m prmkit.demo.lm.base --out FOLDER`
(the default settings, 1 thread; the first stage with `--set reading.steps=0`, the second
from it); tests/test_demo_shipped_base.py rebuilds them with that command and checks them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from prmkit.data.io import atomic_folder, cache_dir
from prmkit.demo.lm.backbone import build_backbone, pretrain_lm, save_backbone
from prmkit.demo.lm.base_settings import BaseConfig, reading_problems
from prmkit.demo.lm.mathmix import build_mathmix, worked_documents, world_mix, world_mix_repeats
from prmkit.demo.settings import config_key, with_overrides

SHIPPED_BASE = Path(__file__).with_name("shipped_base")  # the default settings' base
SHIPPED_FIRST_STAGE = Path(__file__).with_name("shipped_first_stage")  # its first stage
TOKENIZER_FACT_DOCS = 2000  # fact documents the tokenizer is trained on (beside solutions)
REGIME = 0.95  # the regime indicators' threshold (regime_misses)
PREFIX_STEPS = 24  # first losses a build records (prmkit.demo.lm.base_prefix checks them)


def base_folder(cfg: BaseConfig | None = None, progress: bool = True,
                device: str | torch.device | None = None) -> Path:
    """The cached base for `cfg`, built first when this machine has none."""
    from filelock import FileLock

    cfg = cfg or BaseConfig()
    root = cache_dir() / "demo-base"
    folder = root / cfg.key()
    if _built(folder):
        return folder
    for shipped in (SHIPPED_BASE, SHIPPED_FIRST_STAGE):
        if _built(shipped) and base_info(shipped)["key"] == cfg.key():
            return shipped
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{cfg.key()}.lock")):
        if not _built(folder):
            build_base(cfg, folder, progress=progress, device=device)
    return folder


def _built(folder: Path) -> bool:
    return (folder / "base.json").is_file() and (folder / "config.json").is_file()


def base_info(folder: str | Path) -> dict:
    return json.loads((Path(folder) / "base.json").read_text())


def build_base(cfg: BaseConfig, out: Path, progress: bool = True,
               device: str | torch.device | None = None, bf16: bool | str = "auto") -> Path:
    """Pretrain a base on MathMix (its second stage from its cached first stage) and write it
    to `out` whole (aside, then renamed). bf16: autocast; auto: where `device` computes bf16
    natively (`prmkit.models.precision.use_bf16`)."""
    from prmkit.models.precision import use_bf16

    bf16 = use_bf16(bf16, device or "cpu")
    if cfg.reading.steps:  # built (or found) first: a stage's time is its own
        base_folder(cfg.first_stage(), progress=progress, device=device)
    t0 = time.perf_counter()
    model, tokenizer, losses, extra = train_stage(cfg, progress, device, bf16)
    return _save_base(out, cfg, model, tokenizer, losses, t0, device, bf16, **extra)


def train_stage(cfg: BaseConfig, progress: bool = True, device: str | torch.device | None = None,
                bf16: bool = False, stop_after: int | None = None):
    """The last stage of `cfg` trained (its first `stop_after` steps only, when given): the
    model, its tokenizer, the loss curve and what base.json records of its data. A reading
    stage starts from its first stage's base (`base_folder`)."""
    if cfg.reading.steps:
        return _reading_stage(cfg, progress, device, bf16, stop_after)
    mm = build_mathmix(cfg.mathmix)
    model, tokenizer = build_backbone(mm.solutions + mm.facts[:TOKENIZER_FACT_DOCS],
                                      seed=cfg.seed, hidden_size=cfg.hidden_size,
                                      layers=cfg.layers, heads=cfg.heads,
                                      vocab_size=cfg.vocab_size)
    losses = pretrain_lm(model, tokenizer, mm.documents, steps=cfg.steps, seed=cfg.seed,
                         block=cfg.block, batch_size=cfg.batch_size, lr=cfg.lr,
                         progress=progress, device=device, bf16=bf16, stop_after=stop_after)
    return model, tokenizer, losses, {"facts": len(mm.table), "solutions": len(mm.solutions),
                                      "fact_lines": cfg.mathmix.fact_lines}


def _reading_stage(cfg: BaseConfig, progress: bool, device: str | torch.device | None,
                   bf16: bool, stop_after: int | None):
    from prmkit.models.backbones import load_backbone

    first = base_folder(cfg.first_stage(), progress=progress, device=device)
    r = cfg.reading
    problems = reading_problems(cfg)
    mathmix = problems[: r.problems]
    repeats = world_mix_repeats(mathmix, world_mix(cfg.mathmix)) if r.world_mix else {}
    docs = [d for p in problems for d in worked_documents([p], r.orders) * repeats.get(p.form, 1)]
    model, tokenizer = load_backbone(str(first))
    losses = pretrain_lm(model, tokenizer, docs, steps=r.steps, seed=r.seed, block=cfg.block,
                         batch_size=cfg.batch_size, lr=r.lr, progress=progress, device=device,
                         bf16=bf16, stop_after=stop_after)
    return model, tokenizer, losses, {"first_stage": base_info(first)["key"],
                                      "documents": len(docs)}


def _save_base(out: Path, cfg: BaseConfig, model, tokenizer, losses: list[float], t0: float,
               device, bf16: bool, **extra) -> Path:
    """The pretrained model and its base.json (settings, loss ends, build time, where it was
    built, and `extra`), written to `out` whole."""
    model.to("cpu")
    info = {"key": cfg.key(), "config": cfg.settings(), "seconds": time.perf_counter() - t0,
            "lm_loss": [losses[0], losses[-1]] if losses else [],
            "device": str(next(model.parameters()).device if device is None else device),
            "threads": torch.get_num_threads(), "bf16": bf16,
            "prefix_losses": losses[:PREFIX_STEPS], **extra}
    with atomic_folder(out) as tmp:
        save_backbone(model, tokenizer, tmp)
        (tmp / "base.json").write_text(json.dumps(info, indent=1))
    return out


def resolve_base(spec: str, progress: bool = True,
                 device: str | torch.device | None = None) -> Path | None:
    """The base a demo starts from. `seed` (or empty): None, each seed pretrains its own
    backbone (the demo's default); `mathmix`: the cached MathMix base of the default
    settings, `mathmix steps=8000 mathmix.fact_alpha=0`: with those overrides; any other
    value: a saved base folder."""
    from prmkit.errors import PrmkitError

    if spec.strip() in ("", "seed"):
        return None
    name, *items = spec.split()
    if name != "mathmix":
        folder = Path(spec)
        if not (folder / "config.json").is_file():
            raise PrmkitError(f"base {spec!r}: use seed, mathmix [FIELD=VALUE ...] or a saved "
                              "model folder (no config.json there)")
        return folder
    try:
        cfg = with_overrides(BaseConfig(), items)
    except ValueError as e:
        raise PrmkitError(f"base {spec!r}: {e}") from None
    return base_folder(cfg, progress=progress, device=device)


def base_key(spec: str) -> str | None:
    """What names the base `spec` resolves to, without building it: None for `seed` (each
    seed pretrains its own), a MathMix base's settings key, a saved folder's recorded key
    (base.json) or else its config and weight files' sizes and times. Caches of models
    trained from a shared base carry it, so a changed base is never read as the old one."""
    if spec.strip() in ("", "seed"):
        return None
    name, *items = spec.split()
    if name == "mathmix":
        try:
            return with_overrides(BaseConfig(), items).key()
        except ValueError:
            return None  # resolve_base reports the bad setting
    folder = Path(spec)
    if (folder / "base.json").is_file():
        return base_info(folder)["key"]
    stats = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                   for f in folder.glob("*") if f.is_file())
    return config_key({"files": stats}, length=16)


def regime_misses(cfg: BaseConfig, indicators: dict) -> list[str]:
    """Where a built base falls short of the regime its stage is for (`REGIME`): a first
    stage computes held-out step results exactly, a two-stage base checks every kind of step
    with its own probability of it (step AUROC)."""
    if not cfg.reading.steps:
        shares = {"step results computed exactly": indicators["exact"]}
    else:
        shares = {f"{kind} step AUROC": v for kind, v in indicators["step_auroc"].items()
                  if v is not None}
    return [f"{name} {v:.3f} < {REGIME}" for name, v in shares.items() if v < REGIME]


def main(argv: list[str] | None = None) -> None:
    """`python -m prmkit.demo.lm.base --out FOLDER [--set FIELD=VALUE ...]`: build a base (the
    default settings unless overridden) into FOLDER with one CPU thread, the way the shipped
    base was made, then measure its regime indicators (`prmkit.demo.lm.skill.base_indicators`,
    about half a minute) and warn where the base misses them: on another CPU a build is
    another draw of the recipe (BENCHMARKS.md, "The demo base rebuilt on other CPUs")."""
    import argparse
    import sys

    from prmkit.demo.lm.skill import base_indicators

    p = argparse.ArgumentParser(prog="python -m prmkit.demo.lm.base", description=main.__doc__)
    p.add_argument("--out", required=True, help="folder to write (must not exist)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-check", action="store_true", help="do not measure the indicators")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        p.error(f"{out} exists: choose a new folder")
    torch.set_num_threads(args.threads)
    cfg = with_overrides(BaseConfig(), args.set)
    build_base(cfg, out)
    info, misses = base_info(out), []
    if not args.no_check:
        info["indicators"] = base_indicators(out)
        misses = regime_misses(cfg, info["indicators"])
    print(json.dumps(info, indent=1))
    for miss in misses:
        print(f"warning: the base in {out} misses the regime indicator: {miss}", file=sys.stderr)


if __name__ == "__main__":
    main()
