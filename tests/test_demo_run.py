import json

import numpy as np
import pytest

from prmkit.cli import main
from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig, quick_config
from prmkit.demo.core.evaluate import evaluate_seed
from prmkit.demo.core.seed import seed_world, train_reward_model
from prmkit.demo.recipes.prm_vs_orm import PICK_KEYS, over_optimisation, run
from prmkit.evaluation.report import read_axes

FIGURES = ("prm", "orm", "majority", "pass", "first_error", "top_picks", "step_auroc",
           "lm_loss", "train_examples")


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """The quick demo run twice with the same seeds, in two folders."""
    runs = []
    for name in ("a", "b"):
        cfg = quick_config((0, 1))
        cfg.progress = False
        out = tmp_path_factory.mktemp(name)
        runs.append((out, run(cfg, out)))
    return runs


def test_quick_demo_writes_metrics_report_and_plots(quick_runs):
    out, summary = quick_runs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("prm", "orm", "majority", "pass", "prm_std", "orm_std", "majority_std"):
        assert len(metrics[key]) == len(metrics["n"]) == 4
    assert metrics["seeds"] == 2 and metrics["seconds"] > 0
    # pass@N bounds every selection method (majority is Monte Carlo: allow its noise)
    for key, tol in (("prm", 1e-9), ("orm", 1e-9), ("majority", 0.05)):
        assert all(v <= p + tol for v, p in zip(metrics[key], metrics["pass"]))
    assert summary["statement"].startswith("At N=8")
    html = (out / "report.html").read_text()
    assert "bon_curves.png" in html and (out / "bon_curves.png").stat().st_size > 0
    assert (out / "calibration.png").stat().st_size > 0


def test_quick_demo_reports_each_error_kind_for_both_reward_models(quick_runs):
    from prmkit.demo.world.error_kinds import KINDS

    out, _ = quick_runs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    kinds = metrics["error_kinds"]
    assert set(kinds) == {*KINDS, "right", "other"}
    for model in ("prm", "orm"):
        picks = sum(kinds[k][f"{model}_picks"] for k in kinds)
        assert picks == pytest.approx(1.0)  # every best-of-N pick has exactly one kind
        for seed in metrics["per_seed"]:
            auroc = seed["error_kinds"][model]["step_auroc"]
            assert all(v is None or 0.0 <= v <= 1.0 for v in auroc.values())
    assert sum(kinds[k]["pool"] for k in kinds) == pytest.approx(1.0)
    assert "Per error kind" in (out / "report.html").read_text()
    forms = metrics["error_kinds_by_form"]  # the same check per problem form
    assert forms and set(forms) <= {"word", "equation", "two-sided"}
    for form, row in forms.items():
        assert set(row) == set(KINDS)
        per_seed = [s["error_kinds"]["prm"]["step_auroc_by_form"].get(form, {}).get("slip")
                    for s in metrics["per_seed"]]
        seen = [v for v in per_seed if v is not None]
        assert row["slip"]["prm_step_auroc"] == (pytest.approx(np.mean(seen)) if seen else None)
    assert "per problem form" in (out / "report.html").read_text()


def test_quick_demo_reports_out_of_distribution_beside_in_distribution(quick_runs):
    from html import escape

    from prmkit.demo.world import OOD_RULE

    out, summary = quick_runs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    ood = metrics["ood"]
    assert ood["rule"] == OOD_RULE and ood["n"] == [1, 2, 4, 8]  # quick: 8 samples each
    for key in ("prm", "orm", "majority", "pass"):
        per_seed = [r["ood"][key] for r in metrics["per_seed"]]
        assert np.allclose(ood[key], np.mean(per_seed, axis=0)), key
        assert per_seed[0] != metrics["per_seed"][0][key] or key == "pass"  # other problems
    assert all(v <= p + 1e-9 for v, p in zip(ood["prm"], ood["pass"]))
    assert "Out of distribution (" in summary["statement"]
    html = (out / "report.html").read_text()
    assert "In and out of distribution" in html and escape(OOD_RULE) in html


def test_quick_demo_reports_figure_3_on_the_hard_set(quick_runs):
    from html import escape

    out, summary = quick_runs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    hard = metrics["hard"]
    assert hard["n"] == metrics["n"] and hard["rule"] == world.HARD_RULE
    for key in ("prm", "orm", "majority", "pass"):
        per_seed = [r["hard"][key] for r in metrics["per_seed"]]
        assert np.allclose(hard[key], np.mean(per_seed, axis=0)), key
    assert all(v <= p + 1e-9 for v, p in zip(hard["prm"], hard["pass"]))
    assert hard["pass"][0] < metrics["pass"][0]  # hard problems are solved less often
    assert hard["hard_problems"] == [r["hard"]["hard_problems"] for r in metrics["per_seed"]]
    for key in PICK_KEYS:  # Gao et al.'s view there too
        per_seed = [r["hard"][key] for r in metrics["per_seed"]]
        assert np.allclose(hard[key], np.mean(per_seed, axis=0)), key
    assert "On the hard set (" in summary["statement"]
    assert "On the hard set: The PRM's own score of its best-of-N pick" in summary["statement"]
    html = (out / "report.html").read_text()
    assert "The hard set" in html and escape(world.HARD_RULE) in html
    assert "The hard set: the best-of-N pick" in html
    assert (out / "bon_curves_hard.png").stat().st_size > 0


def test_quick_demo_reports_the_picks_proxy_score_beside_the_checkers_verdict(quick_runs):
    out, summary = quick_runs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    for key in PICK_KEYS:
        per_seed = [r[key] for r in metrics["per_seed"]]
        assert all(len(v) == len(metrics["n"]) for v in (metrics[key], *per_seed)), key
        assert np.allclose(metrics[key], np.mean(per_seed, axis=0)), key
    for r in metrics["per_seed"]:
        for model in ("prm", "orm"):
            assert np.all(np.diff(r[f"{model}_pick_score"]) >= -1e-12)  # the max of more draws
            # right among draws with a pick: at least best-of-N, which counts the rest wrong
            assert np.all(np.array(r[f"{model}_pick_right"]) >= np.array(r[model]) - 1e-12)
    prm_axes, orm_axes = read_axes(out / "pick_scores.png")
    assert prm_axes["legend"] == ["proxy score (min of step probabilities)", "right (checker)"]
    assert orm_axes["legend"][0] == "proxy score (outcome probability)"
    assert "pick_scores.png" in (out / "report.html").read_text()
    assert "The PRM's own score of its best-of-N pick goes from" in summary["statement"]


def test_over_optimisation_names_each_n_where_the_proxy_rises_and_the_verdict_falls():
    summary = {"n": [1, 2, 4, 8],
               "prm_pick_score": [0.5, 0.6, 0.7, 0.8], "prm_pick_right": [0.4, 0.5, 0.45, 0.44],
               "orm_pick_score": [0.5, 0.5, 0.6, 0.7], "orm_pick_right": [0.4, 0.3, 0.6, 0.6]}
    prm, orm = over_optimisation(summary)
    assert prm.endswith("falls at N in [4, 8] (50.0% at N=2, 44.0% at N=8): "
                        "over-optimisation of the proxy.")
    assert orm.endswith("that share never falls while the score rises.")  # N=2: flat score


def test_demo_same_seed_same_figures(quick_runs):
    (_, a), (_, b) = quick_runs
    assert a["seconds"] != 0
    for ra, rb in zip(a["per_seed"], b["per_seed"], strict=True):
        for key in FIGURES:
            assert ra[key] == rb[key], key
    for key in ("prm", "orm", "majority", "step_auroc", "first_error_f1"):
        assert a[key] == b[key], key


def test_best_of_1_is_the_mean_accuracy_of_the_samples(quick_runs):
    _, summary = quick_runs[0]
    cfg = quick_config((0, 1))
    for r in summary["per_seed"]:
        sw = seed_world(r["seed"], cfg)
        acc = np.mean([[world.check_solution(p, s).final_correct for s in pool]
                       for p, pool in zip(sw.splits.test, sw.test_pools)])
        assert r["prm"][0] == pytest.approx(acc) and r["orm"][0] == pytest.approx(acc)
        assert r["pass"][0] == pytest.approx(acc)


def test_demo_test_problems_are_never_seen_in_training_or_pretraining():
    cfg = quick_config()
    cfg.test_problems, cfg.train_problems, cfg.pretrain_problems = 120, 2000, 3000
    for seed in (0, 1, 2, 7):
        splits = seed_world(seed, cfg).splits
        sizes = [len(splits.test), len(splits.train), len(splits.pretrain)]
        assert sizes == [120, 2000, 3000]
        test, train, pre = ({p.key for p in s} for s in (splits.test, splits.train, splits.pretrain))
        assert len(test) + len(train) + len(pre) == sum(sizes)  # distinct within each split
        assert not test & train and not test & pre and not train & pre
        # nor by text: the problem the model is tested on never appears in its training text
        texts = {p.text for p in splits.train} | {p.text for p in splits.pretrain}
        assert not any(p.text in texts for p in splits.test)
    # a test set does not depend on the sizes of the other splits
    small = world.make_splits(0, test=120, train=10, pretrain=10, difficulty=cfg.difficulty)
    assert [p.key for p in small.test] == [p.key for p in seed_world(0, cfg).splits.test]


def test_truncated_solution_never_outranks_a_complete_one():
    cfg = quick_config()
    cfg.ns = (1, 2)
    prob = world.make_problems(1, seed=0)[0]
    full = prob.reference_solution()
    cut = full[:-1] + ["Answer: 0"]
    # the cut solution's last step (its answer) was never scored: a null score
    r = evaluate_seed(0, cfg, [prob], [[full, cut]],
                      prm_scores=[[[0.9] * len(full), [0.99] * (len(cut) - 1) + [None]]],
                      orm_scores=[[[0.9] * len(full), [0.5] * len(cut)]])
    assert r["top_picks"]["prm"]["right_answer"] == 1.0


def test_demo_cli_rejects_bad_seeds(capsys):
    assert main(["demo", "--seeds", "a,b"]) == 2
    assert "--seeds" in capsys.readouterr().err


def test_demo_set_overrides_are_typed_and_unknown_fields_are_refused():
    from prmkit.demo.settings import with_overrides

    cfg = with_overrides(DemoConfig(), ["reward_steps=7", "lr=0.5", "aggregation=prod"])
    assert (cfg.reward_steps, cfg.lr, cfg.aggregation) == (7, 0.5, "prod")
    for bad, says in (("nope=1", "no field 'nope'"), ("reward_steps=x", "reward_steps=x")):
        with pytest.raises(ValueError, match=says):
            with_overrides(DemoConfig(), [bad])


def test_prm_from_a_shared_base_repeats_whatever_ran_before_it(tmp_path):
    """The PRM's new head was drawn from whatever state the global RNG was left in (a base
    built in the same process, or not); the ORM, built after the PRM's seeded training,
    repeated to the digit while the PRM did not."""
    import torch
    from safetensors.torch import load_file

    from prmkit.demo import world
    from prmkit.models.backbones import tiny_random

    cfg = quick_config()
    backbone, tokenizer = tiny_random(seed=0, hidden_size=32, layers=1)
    base = tmp_path / "base"
    backbone.save_pretrained(base)
    tokenizer.save_pretrained(base)
    splits = world.make_splits(0, test=2, train=6, pretrain=2)
    pools = world.sample_pools(splits.train, 2, seed=1)
    examples = world.to_step_examples(splits.train, pools, kind="prm", dedupe=True)
    heads = []
    for k, state in enumerate((1, 2)):
        torch.manual_seed(state)  # what ran before differs
        model = train_reward_model("prm", base, examples, tmp_path / f"prm{k}", cfg, seed=0)
        heads.append(load_file(str(model / "reward_head.safetensors")))
    assert heads[0].keys() == heads[1].keys()
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
