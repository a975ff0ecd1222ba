"""`prmkit demo`: experiments in the demo world, one recipe each (prmkit.demo.recipes).

  prm-vs-orm (the default)  process vs outcome supervision: a PRM and an ORM per seed, best-of-N
                            against majority vote; OUT/metrics.json, plots and a report
  synthetic                 small reward models supervised by the demo's PRM (the paper's
                            Figure 4); OUT/synthetic
  active                    small PRMs on samples chosen by a selector PRM (Figure 5); OUT/active
  all                       synthetic, then active
  capacity                  best-of-64 against the skill of the MathMix base, pretrained 0, 1/4,
                            1/2 and 1 times its default steps; OUT/capacity
  rl                        GRPO under five rewards at matched compute (the checker's verdict,
                            the ORM, the PRM with process or min-form credit, min-form with the
                            verdict); OUT/rl
  search                    PRM-guided search (best-of-N, beam search, DVTS) against generated
                            tokens; OUT/search
  diagnose                  why best-of-N rises or falls: selections on the same scores; OUT/diagnose
  ood-shifts                out of distribution one change at a time: PRM, ORM, majority vote and
                            the base's check on each set of prmkit.demo.world.SHIFTS; OUT/ood_shifts
  base-skill                the base's regime indicator, the share of held-out step results it
                            computes exactly; OUT/base_skill.json

Every experiment takes the same options. `--set FIELD=VALUE` sets a field of its settings
(`prmkit.demo.recipes.<name>.Config`), or of the demo settings it trains its models with
(`prmkit.demo.core.config.DemoConfig`) by their bare name or as `demo.FIELD`; `--base` is
`--set base=SPEC`, `--seeds` is `--set seeds=...`, `--no-progress` is `--set progress=false`.
Each seed's models are cached under OUT/work, keyed by every demo setting, and shared by the
experiments; an interrupted run resumes. Every seed starts from the shared base `--base`
names (default: `mathmix`, the default settings' base, which ships with prmkit); `--base
seed` makes each seed pretrain its own small backbone instead.
"""

from __future__ import annotations

import argparse
import importlib

# name: (module of prmkit.demo.recipes, its report folder under --out)
RECIPES = {
    "prm-vs-orm": ("prm_vs_orm", ""),
    "synthetic": ("synthetic", "synthetic"),
    "active": ("active", "active"),
    "capacity": ("capacity", "capacity"),
    "rl": ("rl", "rl"),
    "search": ("search", "search"),
    "diagnose": ("diagnose", "diagnose"),
    "ood-shifts": ("ood_shifts", "ood_shifts"),
    "base-skill": ("base_skill", ""),
}
GROUPS = {"all": ("synthetic", "active")}


def register(sub) -> None:
    p = sub.add_parser("demo", help="experiments in a synthetic world: PRM vs ORM and more",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", choices=[*RECIPES, *GROUPS], default="prm-vs-orm",
                   help="which experiment (default: prm-vs-orm)")
    p.add_argument("--out", default="demo-output", help="report folder (default: demo-output)")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds (default: the experiment's, 0,1,2; base-skill: 0)")
    p.add_argument("--base", default=None, metavar="SPEC",
                   help="mathmix ['FIELD=VALUE ...'] (the shared MathMix base, the default: "
                   "shipped for the default settings, built and cached for others, e.g. "
                   "'mathmix steps=8000'), a saved base folder, or seed (each seed "
                   "pretrains its own backbone)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a setting, e.g. --set lora_rank=16 --set threads=1; repeatable")
    p.add_argument("--quick", action="store_true", help="a much smaller run (a smoke test)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def recipe(name: str):
    """The module of experiment `name`: its `Config`, `quick(seeds)` and `run(cfg, out, work)`."""
    return importlib.import_module(f"prmkit.demo.recipes.{RECIPES[name][0]}")


def overrides(args: argparse.Namespace) -> list[str]:
    """The command line's settings as `FIELD=VALUE` items, `--set` last."""
    from prmkit.errors import PrmkitError

    items = []
    if args.seeds is not None:
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise PrmkitError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
        if not seeds:
            raise PrmkitError("--seeds is empty")
        items.append("seeds=" + ",".join(map(str, seeds)))
    if args.no_progress:
        items.append("progress=false")
    if args.base:
        items.append(f"base={args.base}")
    return [*items, *args.set]


def build_config(name: str, args: argparse.Namespace):
    """Experiment `name`'s settings: its quick or default ones, with the command line's."""
    from prmkit.demo.settings import with_overrides
    from prmkit.errors import PrmkitError

    module = recipe(name)
    try:
        return with_overrides(module.quick() if args.quick else module.Config(), overrides(args))
    except ValueError as e:
        raise PrmkitError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    from prmkit.data.paths import check_output_location

    names = GROUPS.get(args.experiment, (args.experiment,))
    configs = {name: build_config(name, args) for name in names}  # refused before any runs
    # the report folder is written again by each run (models are cached under work/ by
    # their settings, so a run continues); that it can be written is checked first
    out = check_output_location(args.out, folder=True)
    for name, cfg in configs.items():
        recipe(name).run(cfg, out / RECIPES[name][1], out / "work")
    return 0
