"""When process supervision pays: best-of-N against the base model's skill.

Each point is one shared MathMix base (`prmkit.demo.lm.base`), pretrained for a fraction of a
default budget (0, 1/4, 1/2 and 1 times `BaseConfig().steps` by default; 0 is the untrained
network), first stage only (`reading.steps=0`). For each base: its regime indicator (the
share of held-out step results it computes exactly, `prmkit.demo.lm.skill`), then per seed the demo's PRM and ORM trained from it
and best-of-N on the seed's test pools (PRM, ORM, majority vote), with the step AUROC per
error kind. One result per (base, seed) is cached under the work folder, keyed by the base's
settings and the demo's, so an interrupted run resumes where it stopped; the bases
themselves are cached as the demo caches them. Writes capacity.json and capacity.png.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from prmkit.data.io import cached_json
from prmkit.demo.core.config import DemoConfig, quick_config, torch_settings
from prmkit.demo.core.evaluate import run_seed
from prmkit.demo.lm.base import BaseConfig
from prmkit.demo.settings import settings_key, with_overrides
from prmkit.demo.world.error_kinds import KINDS, summarise_kinds
from prmkit.errors import PrmkitError

KEEP = ("seed", "prm", "orm", "majority", "pass", "step_auroc", "first_error", "error_kinds",
        "seconds")


@dataclass
class CapacityConfig:
    # demo.base: the MathMix base whose pretraining budget varies (mathmix [FIELD=VALUE ...])
    demo: DemoConfig = field(default_factory=DemoConfig)
    # twice the default budget is left out by default: its base alone would take a large
    # share of the time budget
    # (BENCHMARKS.md, "Capacity: when process supervision pays")
    fractions: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0)
    default_steps: int = BaseConfig().steps
    # further `FIELD=VALUE` base settings, every budget: the first stage's budget varies, with
    # no reading stage (prmkit.demo.lm.base), as the figure was measured
    base_items: tuple[str, ...] = ("reading.steps=0",)
    skill_samples: int = 8  # held-out samples per test problem the indicator reads

    def check(self) -> None:
        if self.demo.base.split()[:1] != ["mathmix"]:
            raise PrmkitError(f"capacity varies the pretraining of a MathMix base: base must be"
                              f" mathmix [FIELD=VALUE ...], got {self.demo.base!r}")

    def steps(self) -> list[int]:
        return [round(f * self.default_steps) for f in self.fractions]

    def items(self, steps: int) -> list[str]:
        return [*self.demo.base.split()[1:], *self.base_items, f"steps={steps}"]

    def base_spec(self, steps: int) -> str:
        return " ".join(["mathmix", *self.items(steps)])

    def base_key(self, steps: int) -> str:
        return with_overrides(BaseConfig(), self.items(steps)).key()

    def demo_key(self) -> str:
        return settings_key(self.demo, leave_out=("base",))

    def point_cache(self, steps: int, seed: int) -> Path:
        """Where one (base, seed) result is cached, relative to the work folder."""
        return Path("capacity", f"base-{self.base_key(steps)}", f"seed{seed}-demo-{self.demo_key()}.json")


Config = CapacityConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> CapacityConfig:
    """Seconds-long settings (smoke tests), not a result: tiny bases and the quick demo."""
    return CapacityConfig(
        demo=replace(quick_config(seeds), base="mathmix"), fractions=(0.0, 1.0),
        default_steps=3, skill_samples=1,
        base_items=("reading.steps=0", "hidden_size=32", "layers=1", "heads=2", "vocab_size=300", "block=64",
                    "batch_size=2", "mathmix.problems=40", "mathmix.fact_samples=1",
                    "mathmix.fact_lines=64", "mathmix.exclude_seeds=0", "mathmix.reserve=150"))


def run_point(steps: int, cfg: CapacityConfig, work: Path) -> dict:
    """One base: its skill and every seed's results, each from the cache when there."""
    from prmkit.demo.lm.base import resolve_base
    from prmkit.demo.lm.skill import base_skill

    key = cfg.base_key(steps)
    demo = replace(cfg.demo, base=cfg.base_spec(steps))
    skill = cached_json(work / "capacity" / f"base-{key}" / f"skill-{cfg.skill_samples}.json",
                        lambda: base_skill(resolve_base(demo.base, progress=False),
                                           samples=cfg.skill_samples))
    per_seed = []
    for seed in demo.seeds:
        def compute(seed=seed):
            print(f"[capacity] base of {steps} steps, seed {seed}: PRM, ORM, evaluation",
                  flush=True)
            r = run_seed(seed, demo, work)
            return {k: r[k] for k in KEEP}
        per_seed.append(cached_json(work / cfg.point_cache(steps, seed), compute))
    return {"steps": steps, "base": demo.base, "base_key": key, "skill": skill,
            "per_seed": per_seed}


def summarise_point(point: dict, fraction: float) -> dict:
    per_seed = point["per_seed"]
    out = {"fraction": fraction, "steps": point["steps"], "base": point["base"],
           "base_key": point["base_key"], "skill": point["skill"]["all"]["exact"],
           "skill_per_op": {op: v["exact"] for op, v in point["skill"].items() if op != "all"}}
    for key in ("prm", "orm", "majority", "pass"):
        last = [r[key][-1] for r in per_seed]
        out[key], out[f"{key}_std"] = float(np.mean(last)), float(np.std(last))
    aurocs = [r["step_auroc"] for r in per_seed]
    out["step_auroc"], out["step_auroc_std"] = float(np.mean(aurocs)), float(np.std(aurocs))
    out["error_kinds"] = summarise_kinds(per_seed)
    out["per_seed"] = [{"seed": r["seed"], "prm": r["prm"][-1], "orm": r["orm"][-1],
                        "majority": r["majority"][-1], "step_auroc": r["step_auroc"]}
                       for r in per_seed]
    return out


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def plot_capacity(points: list[dict], n: int, path: Path) -> Path:
    """Best-of-n of the PRM, the ORM and majority vote against the base's pretraining steps;
    each PRM point labelled with the base's skill and the PRM's slip AUROC."""
    from prmkit.evaluation.plots import Curve, Panel, plot_curves

    x = [p["steps"] for p in points]
    labels = [f"skill {100 * p['skill']:.0f}%, slip {_fmt(p['error_kinds']['slip']['prm_step_auroc'])}"
              for p in points]
    curves = [Curve("PRM (process supervision)", x, [p["prm"] for p in points],
                    [p["prm_std"] for p in points], point_labels=labels),
              Curve("ORM (outcome supervision)", x, [p["orm"] for p in points],
                    [p["orm_std"] for p in points]),
              Curve("majority vote", x, [p["majority"] for p in points],
                    [p["majority_std"] for p in points], kind="reference")]
    panel = Panel(curves, "base pretraining steps on MathMix", x_axis="linear",
                  ylabel=f"% problems solved, best-of-{n}")
    return plot_curves([panel], path, title=f"Best-of-{n} against the base's skill "
                       "(labels: step results computed exactly, PRM slip AUROC)")


def run(cfg: CapacityConfig | None = None, out: str | Path = "capacity-output",
        work: str | Path | None = None) -> dict:
    cfg = cfg or CapacityConfig()
    cfg.check()
    out = Path(out)
    work = Path(work) if work is not None else out / "work"
    t0 = time.perf_counter()
    with torch_settings(cfg.demo.threads):
        points = [summarise_point(run_point(s, cfg, work), f)
                  for s, f in zip(cfg.steps(), cfg.fractions)]
    n = cfg.demo.ns[-1]
    result = {"n": n, "seeds": list(cfg.demo.seeds), "kinds": list(KINDS), "points": points,
              "config": asdict(cfg), "seconds": time.perf_counter() - t0}
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_capacity(points, n, out / "capacity.png")
    for p in points:
        kinds = ", ".join(f"{k} {_fmt(p['error_kinds'][k]['prm_step_auroc'])}" for k in KINDS)
        print(f"[capacity] {p['steps']:>5} steps: skill {100 * p['skill']:.1f}%, best-of-{n} "
              f"PRM {100 * p['prm']:.1f} ± {100 * p['prm_std']:.1f}, ORM {100 * p['orm']:.1f} "
              f"± {100 * p['orm_std']:.1f}, majority {100 * p['majority']:.1f}; PRM step "
              f"AUROC per kind: {kinds}", flush=True)
    print(f"[capacity] {out / 'capacity.json'}, {out / 'capacity.png'}")
    return result
