"""`prmkit demo`: process vs outcome supervision in a controlled world, end to end.

`--experiment synthetic|active|all` runs the paper's small-scale experiments instead:
small reward models supervised by the demo's PRM (synthetic supervision) and labelled
samples chosen by a selector PRM (active learning); reports under OUT/synthetic and
OUT/active, trained models cached under OUT/work (the demo's PRM is reused from there).

`--experiment capacity`: best-of-64 (PRM, ORM, majority vote) against the skill of the shared
MathMix base (pretrained 0, 1/4, 1/2 and 1 times its default steps), per seed of
`--seeds`, with the base's regime indicator and per-kind step AUROC beside each point;
OUT/capacity/capacity.json and .png, each (base, seed) cached under OUT/work (resumable).

`--experiment rl`: GRPO (TRL, through prmkit's adapter) on a policy fine-tuned from the shared
MathMix base, under five rewards at matched compute (the checker's verdict, the ORM, the PRM
with process or min-form credit, min-form mixed with the verdict), measured on held-out
problems every few steps, per seed of `--seeds`; OUT/rl/rl_world.json, .png and a report,
each (seed, reward) cached under OUT/work (resumable); `--set FIELD=VALUE` overrides a
setting of prmkit.demo.rl_experiment.RLConfig (`steps=60`, `policy.steps=300`,
`demo.reward_steps=500`).

`--experiment base-skill` builds (or reads from the cache) the MathMix base named by
`--base` and prints its regime indicator, the share of held-out step results it computes
exactly per operation, into OUT/base_skill.json. Every seed of the demo starts from the
shared base `--base` names (default: `mathmix`, the default settings' base, which ships
with prmkit); `--base seed` makes each seed pretrain its own small backbone instead.
"""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("demo", help="train a PRM and an ORM in a synthetic world and compare them",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="demo-output", help="report folder (default: demo-output)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    p.add_argument("--experiment", choices=["synthetic", "active", "all", "base-skill", "capacity", "rl"],
                   default=None, help="the paper's small-scale experiments, or the base "
                   "model's regime indicator, instead of the main demo")
    p.add_argument("--base", default=None, metavar="SPEC",
                   help="mathmix ['FIELD=VALUE ...'] (the shared MathMix base, the default: "
                   "shipped for the default settings, built and cached for others, e.g. "
                   "'mathmix steps=8000'), a saved base folder, or seed (each seed "
                   "pretrains its own backbone)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a setting of the main demo (prmkit.demo.run.DemoConfig), "
                   "e.g. --set lora_rank=16 --set threads=1; repeatable")
    p.add_argument("--quick", action="store_true", help="a much smaller run (a smoke test)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from prmkit.errors import PrmkitError

    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        raise PrmkitError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not seeds:
        raise PrmkitError("--seeds is empty")
    if args.experiment == "base-skill":
        return _base_skill(args.base or "mathmix", Path(args.out), not args.no_progress)
    if args.experiment == "capacity":
        return _capacity(seeds, Path(args.out), args.quick, not args.no_progress)
    if args.experiment == "rl":
        return _rl(seeds, Path(args.out), args.quick, not args.no_progress, args.set)
    if args.experiment:
        from dataclasses import replace

        from prmkit.demo.active_experiment import run_active
        from prmkit.demo.small_scale import SmallScaleConfig, quick_small_scale
        from prmkit.demo.synthetic_experiment import run_synthetic

        cfg = quick_small_scale(seeds) if args.quick else SmallScaleConfig(seeds=seeds)
        cfg = replace(cfg, progress=not args.no_progress)
        out = Path(args.out)
        if args.experiment in ("synthetic", "all"):
            run_synthetic(out / "synthetic", cfg, out / "work")
        if args.experiment in ("active", "all"):
            run_active(out / "active", cfg, out / "work")
        return 0
    from prmkit.demo.run import DemoConfig, quick_config, run_demo

    cfg = quick_config(seeds) if args.quick else DemoConfig(seeds=seeds)
    cfg.progress = not args.no_progress
    if args.base:
        cfg.base = args.base
    if args.set:
        from prmkit.demo.settings import with_overrides

        try:
            cfg = with_overrides(cfg, args.set)
        except ValueError as e:
            raise PrmkitError(str(e)) from None
    run_demo(args.out, cfg)
    return 0


def _base_skill(spec: str, out, progress: bool) -> int:
    import json

    from prmkit.demo.lm.base import base_info, resolve_base
    from prmkit.demo.lm.skill import format_skill, heldout_text, step_result_skill
    from prmkit.errors import PrmkitError
    from prmkit.models.backbones import load_backbone

    folder = resolve_base(spec, progress=progress)
    if folder is None:
        raise PrmkitError("--experiment base-skill needs a shared base: --base mathmix "
                          "['FIELD=VALUE ...'] or a saved base folder")
    model, tokenizer = load_backbone(str(folder))
    skill = step_result_skill(model, tokenizer, *heldout_text())
    info = base_info(folder) if (folder / "base.json").is_file() else {}
    out.mkdir(parents=True, exist_ok=True)
    (out / "base_skill.json").write_text(json.dumps(
        {"base": str(folder), "settings": info.get("config"),
         "build_seconds": info.get("seconds"), "skill": skill}, indent=1))
    print(f"[demo] base {folder}: {format_skill(skill)}")
    return 0


def _capacity(seeds, out, quick: bool, progress: bool) -> int:
    from dataclasses import replace

    from prmkit.demo.capacity import CapacityConfig, quick_capacity, run_capacity
    from prmkit.demo.run import DemoConfig

    cfg = quick_capacity(seeds) if quick else CapacityConfig(demo=DemoConfig(seeds=seeds))
    run_capacity(out / "capacity", replace(cfg, demo=replace(cfg.demo, progress=progress)),
                 out / "work")
    return 0


def _rl(seeds, out, quick: bool, progress: bool, items: list[str]) -> int:
    from dataclasses import replace

    from prmkit.demo.rl_experiment import RLConfig, quick_rl, run_rl
    from prmkit.demo.settings import with_overrides
    from prmkit.errors import PrmkitError

    cfg = quick_rl(seeds) if quick else RLConfig()
    cfg = replace(cfg, demo=replace(cfg.demo, seeds=seeds, progress=progress))
    try:  # RLConfig fields: steps=60, lr=5e-5, policy.steps=300, demo.reward_steps=500
        cfg = with_overrides(cfg, items)
    except ValueError as e:
        raise PrmkitError(str(e)) from None
    run_rl(out / "rl", cfg, out / "work")
    return 0
