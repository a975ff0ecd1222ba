"""Out of distribution one change at a time (the paper's section 6): each seed's PRM, ORM and
majority vote, and the base's own check, on the sets of `prmkit.demo.world.SHIFTS`.

    prmkit demo --experiment ood-shifts --out OUT [--set shifts=wording,all]

The demo's out-of-distribution set changes three things at once (a new wording, more
operations, larger starts). Here each set changes one of them, on easy word problems (the
levels the reward models and the base read) or on level-5 ones, and `all` is the demo's
set. Each seed reads (or trains) its models as `prmkit demo` does; per set:
`ood_problems` problems x `samples_per_ood_problem` samples (the demo's sizes), none with
the key of a problem the seed's models or its base read (`read_keys`), the PRM's and the
ORM's scores (cached beside the models), best-of-N, majority vote and pass@N, step AUROC
per kind of first error, and the base's whole-step check per kind
(`prmkit.demo.lm.skill.written_probs`: the regime indicator read on that set). Writes
ood_shifts.json and prints a table.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.core.evaluate import SET_KEEP, evaluate_seed, ood_ns
from prmkit.demo.core.ood import summarise_set
from prmkit.demo.core.parallel import map_seeds
from prmkit.demo.core.scores import cached_scores
from prmkit.demo.core.seed import seed_models, seed_world
from prmkit.demo.world import SHIFTS, shifted_problems
from prmkit.demo.world.error_kinds import KINDS
from prmkit.errors import PrmkitError


@dataclass
class OodShiftsConfig:
    demo: DemoConfig = field(default_factory=DemoConfig)
    shifts: tuple[str, ...] = tuple(SHIFTS)  # names of prmkit.demo.world.SHIFTS

    def check(self) -> None:
        unknown = [s for s in self.shifts if s not in SHIFTS]
        if unknown or not self.shifts:
            raise PrmkitError(f"shifts must name sets of {', '.join(SHIFTS)}; got "
                              f"{', '.join(self.shifts) or 'none'}")


Config = OodShiftsConfig


def quick(seeds: tuple[int, ...] = (0, 1, 2)) -> Config:
    """Seconds-long settings (smoke tests), not a result."""
    return OodShiftsConfig(demo=quick_config(seeds))


def shift_set(shift: str, seed: int, cfg: DemoConfig, exclude: frozenset[str]
              ) -> tuple[list, list]:
    """The problems and pools of one set for one seed, sampled as the demo samples its
    out-of-distribution pools ("all": the demo's own); exclude: `read_keys`."""
    if shift == "all":
        sw = seed_world(seed, cfg)
        return sw.ood, sw.ood_pools
    problems = shifted_problems(shift, cfg.ood_problems, seed=seed, exclude=exclude)
    return problems, world.sample_pools(problems, cfg.samples_per_ood_problem, seed=seed + 1)


def read_keys(seed: int, cfg: DemoConfig) -> frozenset[str]:
    """The keys of every problem the seed's models or their base read: the seed's splits
    and, for a MathMix base (named or saved with its record), its reading stage's problems
    (which hold its first stage's)."""
    from prmkit.demo.lm.base_settings import base_config, reading_problems

    splits = seed_world(seed, replace(cfg, ood_problems=0, hard_share=0)).splits
    keys = {p.key for part in (splits.test, splits.train, splits.pretrain) for p in part}
    base = base_config(cfg.base)
    if base is not None:
        keys |= {p.key for p in reading_problems(base)}
    return frozenset(keys)


def scores_file(folder: Path, kind: str, shift: str, problems: list, pools: list) -> Path:
    """Where a reward model's scores of a set are cached: "all" shares the demo's file;
    the others' names carry a digest of their problems and pools, so a set drawn otherwise
    is scored again, never read from another's file."""
    if shift == "all":
        return folder / f"{kind}_ood_scores.json"
    digest = hashlib.sha256(json.dumps([[p.text for p in problems], pools]).encode())
    return folder / f"{kind}_ood-{shift}-{digest.hexdigest()[:12]}_scores.json"


def shifts_seed(seed: int, cfg: DemoConfig, work: Path, shifts: tuple[str, ...]) -> dict:
    """One seed's figures on each set (its models' scores cached per set)."""
    from prmkit.demo.lm.skill import check_aurocs
    from prmkit.models.backbones import load_backbone

    models = seed_models(seed, cfg, work)
    base, tokenizer = load_backbone(str(models.backbone_dir))
    exclude = read_keys(seed, cfg)
    out = {}
    for shift in shifts:
        print(f"[ood-shifts] seed {seed}: {shift}", flush=True)
        problems, pools = shift_set(shift, seed, cfg, exclude)
        scores = {kind: cached_scores(scores_file(models.folder, kind, shift, problems, pools),
                                      getattr(models, f"{kind}_dir"), pools, problems,
                                      cfg.progress)
                  for kind in ("prm", "orm")}
        full = evaluate_seed(seed, replace(cfg, ns=ood_ns(cfg)), problems, pools,
                             scores["prm"], scores["orm"])
        out[shift] = {k: full[k] for k in SET_KEEP}
        out[shift]["base_step_auroc"] = check_aurocs(base, tokenizer, problems, pools)
    return out


def summarise(per_seed: list[dict], ns: list[int]) -> dict:
    """Per set: means and stds over seeds (`summarise_set`) and the base's check per kind."""
    out = {}
    for shift in per_seed[0]:
        rows = [{shift: r[shift]} for r in per_seed]
        summary = summarise_set(rows, ns, shift, SHIFTS[shift].rule)
        base = {}
        for kind in KINDS:
            vals = [r[shift]["base_step_auroc"][kind] for r in per_seed
                    if r[shift]["base_step_auroc"][kind] is not None]
            base[kind] = float(np.mean(vals)) if vals else None
        summary["base_step_auroc"] = base
        out[shift] = summary
    return out


def _pct(summary: dict, key: str) -> str:
    return f"{100 * summary[key][-1]:.1f} ± {100 * summary[f'{key}_std'][-1]:.1f}"


def table(summaries: dict) -> str:
    """A markdown table: per set, best-of-N at the largest N and the checks per kind."""
    n = next(iter(summaries.values()))["n"][-1]
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    head = (f"| set | PRM bo{n} | ORM bo{n} | majority | one sample | pass@{n} | "
            "PRM step AUROC per kind | base check per kind |")
    lines = [head, "|" + "---|" * 8,
             f"| (kinds) | | | | | | {' / '.join(KINDS)} | {' / '.join(KINDS)} |"]
    for shift, s in summaries.items():
        kinds = s["error_kinds"]
        prm = " / ".join(fmt(kinds[k]["prm_step_auroc"]) for k in KINDS)
        base = " / ".join(fmt(s["base_step_auroc"][k]) for k in KINDS)
        lines.append(f"| {shift} | {_pct(s, 'prm')} | {_pct(s, 'orm')} | "
                     f"{_pct(s, 'majority')} | {100 * s['prm'][0]:.1f} | {_pct(s, 'pass')} | "
                     f"{prm} | {base} |")
    return "\n".join(lines)


def run(cfg: Config, out: str | Path, work: str | Path) -> dict:
    """Every seed's figures on every set, summarised over seeds, to out/ood_shifts.json."""
    cfg.check()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fn = functools.partial(shifts_seed, shifts=tuple(cfg.shifts))
    per_seed = map_seeds(fn, cfg.demo, Path(work))
    ns = list(ood_ns(cfg.demo))
    summaries = summarise(per_seed, ns)
    result = {"n": ns, "seeds": list(cfg.demo.seeds),
              "rules": {k: SHIFTS[k].rule for k in cfg.shifts},
              "sets": summaries, "per_seed": per_seed, "config": asdict(cfg)}
    (out / "ood_shifts.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(summaries))
    print(f"[ood-shifts] {out / 'ood_shifts.json'}")
    return result
