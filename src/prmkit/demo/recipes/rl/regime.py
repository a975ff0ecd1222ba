"""The RL experiment's regime checks: measured before the rewards are compared, and the
line of the report that states them."""

from __future__ import annotations

from prmkit.demo.recipes.rl.eval import mean_or_none

# The regime in which rewards can be compared, checked before they are: a policy with room
# to learn (sampled accuracy on training prompts within the band), groups large enough that
# few are all-equal, reward models that rank the policy's own samples (best-of-N pick above
# a random sample), and the exact verifier's reward raising held-out accuracy in every seed.
REGIME = {"policy_accuracy": (0.30, 0.60), "min_group": 8, "verifier_gain": 0.10}


def _gain(s: dict, name: str, metric: str = "sampled_accuracy") -> float | None:
    curve = s["runs"][name]["curve"] if name in s["runs"] else []
    if not curve or curve[-1].get(metric) is None:
        return None
    return curve[-1][metric] - s["start"]["point"][metric]


def regime(per_seed: list[dict], cfg) -> dict:
    """The regime checks per seed and whether each holds (REGIME)."""
    lo, hi = REGIME["policy_accuracy"]
    accuracy = [s["start"].get("train_prompt_accuracy") for s in per_seed]
    gains = [_gain(s, "verifier") for s in per_seed]
    ranks = {m: [s["start"][key]["accuracy"] - s["start"][key]["sample_accuracy"]
                 if key in s["start"] else None for s in per_seed]
             for m, key in (("prm", "best_of_n"), ("orm", "orm_best_of_n"))}
    ranking = {m: all(v is not None and v > 0 for v in vs) for m, vs in ranks.items()}
    zero = {n: mean_or_none(v for s in per_seed
                            for v in s["runs"][n]["train_signals"].get("frac_reward_zero_std", []))
            for n in per_seed[0]["runs"]}
    checks = {
        "policy_accuracy": all(a is not None and lo <= a <= hi for a in accuracy),
        "group_size": cfg.generations >= REGIME["min_group"],
        "reward_models_rank": all(ranking.values()),
        "verifier_learns": all(g is not None and g >= REGIME["verifier_gain"] - 1e-9
                               for g in gains),
    }
    return {"rule": REGIME, "train_prompt_accuracy": accuracy, "verifier_gain": gains,
            "best_of_n_over_sample": ranks, "models_rank": ranking, "zero_std_share": zero,
            "checks": checks,
            "met": all(checks.values())}


def regime_line(result: dict) -> str:
    r = result.get("regime")
    if not r:
        return ""
    lo, hi = r["rule"]["policy_accuracy"]
    acc = ", ".join("-" if a is None else f"{100 * a:.1f}" for a in r["train_prompt_accuracy"])
    gains = ", ".join("-" if g is None else f"{100 * g:+.1f}" for g in r["verifier_gain"])
    failed = [k for k, ok in r["checks"].items() if not ok]
    if "reward_models_rank" in failed:  # which model's best-of-N pick is no better than chance
        weak = [m.upper() for m, ok in r["models_rank"].items() if not ok]
        failed[failed.index("reward_models_rank")] += f": {', '.join(weak)}"
    return (f"Regime: the policy solves {acc}% of training prompts (band {100 * lo:.0f}-"
            f"{100 * hi:.0f}%); the verifier's reward moves held-out sampled accuracy {gains} "
            f"points (needed: +{100 * r['rule']['verifier_gain']:.0f} in every seed); "
            + ("every check met, so the rewards below are compared." if r["met"] else
               f"NOT met ({', '.join(failed)}): "
               + ("the other rewards were not run." if list(result["rewards"]) == ["verifier"]
                  else "the rewards below are not a comparison.")))
