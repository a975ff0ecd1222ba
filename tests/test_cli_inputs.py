"""What a command reads: an empty file, a directory, a missing path (with what a relative
path was read relative to), a missing score key and a file of another kind are errors
(exit code 2) that name the file, never tracebacks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prmkit.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = FIXTURES / "eval" / "scored_samples.jsonl"
TINY_RECIPE = ROOT / "recipes" / "tiny_ci.yaml"
GOOD_BAD = FIXTURES / "training" / "good_bad.jsonl"


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_eval_bon_empty_samples_names_file(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["eval", "bon", "--samples", str(empty), "--score-key", "score"]) == 2
    assert f"{empty}: no samples: the file has no records" in _error(capsys)


def test_bon_curves_of_no_pools_is_a_clear_error():
    from prmkit.errors import PrmkitError
    from prmkit.evaluation.bon import bon_curves

    with pytest.raises(PrmkitError, match="no problems to evaluate"):
        bon_curves([])


def test_train_data_path_is_directory(tmp_path, capsys):
    folder = tmp_path / "somedir"
    folder.mkdir()
    assert main(["train", "--config", str(TINY_RECIPE), f"data.train=[{folder}]",
                 f"output_dir={tmp_path / 'run'}"]) == 2
    assert f"data.train[0]: {folder} is a directory, not a data file" in _error(capsys)
    assert not (tmp_path / "run").exists()


def test_train_data_path_is_directory_in_python_too(tmp_path):
    from prmkit.errors import PrmkitError
    from prmkit.training import RewardTrainingConfig, train

    cfg = RewardTrainingConfig.from_dict({"data": {"train": [str(GOOD_BAD)],
                                                   "eval": [str(tmp_path)]},
                                          "output_dir": str(tmp_path / "run")})
    with pytest.raises(PrmkitError, match=r"data\.eval\[0\]: .* is a directory"):
        train(cfg)


def test_train_missing_data_path_on_the_command_line_names_the_working_directory(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(TINY_RECIPE),
                 "data.train=[../shared/data/prm800k/nope.parquet]"]) == 2
    err = _error(capsys)
    assert "data.train[0]: ../shared/data/prm800k/nope.parquet: no such file (read relative " \
        f"to the working directory {tmp_path}" in err
    assert "in a recipe file, relative paths are read relative to the recipe's folder" in err


def test_train_missing_data_path_in_a_recipe_names_the_recipe_folder(tmp_path, capsys):
    recipe = tmp_path / "conf" / "r.yaml"
    recipe.parent.mkdir()
    recipe.write_text(TINY_RECIPE.read_text())  # its ../tests/fixtures/... is not beside it
    assert main(["train", "--config", str(recipe)]) == 2
    err = _error(capsys)
    assert f"data.train[0]: {tmp_path / 'tests/fixtures/training/good_bad.jsonl'}: no such " \
        "file" in err
    assert f"{recipe} gives data.train[0] as '../tests/fixtures/training/good_bad.jsonl'; a " \
        f"recipe's relative paths are read relative to its folder, {recipe.parent}" in err


def test_recipe_paths_are_relative_to_the_recipe_folder_from_any_working_directory(
        tmp_path, capsys, monkeypatch):
    """The shipped recipes name the same files run from the repository root or elsewhere;
    overrides stay relative to the working directory."""
    from prmkit.training.reward_config import load_recipe

    for name in ("tiny_ci.yaml", "prm800k_phase1_smollm2_prm.yaml",
                 "prm800k_phase1_smollm2_orm.yaml", "prm800k_phase1_smollm2_prm_gpu.yaml"):
        monkeypatch.chdir(ROOT)
        at_root, _ = load_recipe(Path("recipes") / name)
        monkeypatch.chdir(tmp_path)
        elsewhere, _ = load_recipe(ROOT / "recipes" / name, ["data.eval=[mine.jsonl]"])
        for a, b in zip(at_root.data.train, elsewhere.data.train, strict=True):
            assert (ROOT / a).resolve() == Path(b).resolve(), name
        assert (ROOT / at_root.output_dir).resolve() == Path(elsewhere.output_dir).resolve()
        assert elsewhere.data.eval == ["mine.jsonl"]  # as given, read from the working dir
        assert at_root.backbone == elsewhere.backbone  # an alias stays an alias
    monkeypatch.chdir(ROOT)
    tiny, _ = load_recipe(Path("recipes") / "tiny_ci.yaml")
    assert tiny.data.train == ["tests/fixtures/training/good_bad.jsonl"]
    assert tiny.output_dir == "runs/tiny_ci"  # the same strings as before, from the root


def test_recipe_keeps_hub_dataset_names_and_absolute_paths(tmp_path):
    from prmkit.training.reward_config import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data:\n  train: [Qwen/ProcessBench:gsm8k, {GOOD_BAD}, local.jsonl]\n"
                      "backbone: sub/model\n")
    (tmp_path / "sub" / "model").mkdir(parents=True)
    cfg, paths = load_recipe(recipe)
    assert cfg.data.train == ["Qwen/ProcessBench:gsm8k", str(GOOD_BAD),
                              str(tmp_path / "local.jsonl")]
    assert cfg.backbone == str(tmp_path / "sub" / "model")  # a folder beside the recipe
    assert paths.written[str(tmp_path / "local.jsonl")] == ("data.train[2]", "local.jsonl")


@pytest.mark.parametrize("argv", [
    ["score", "--model", "m", "--input", "{dir}", "-o", "{tmp}/o.jsonl"],
    ["eval", "bon", "--samples", "{dir}", "--score-key", "score"],
    ["select", "--input", "{dir}", "--score-key", "score"],
    ["grade", "{dir}"],
    ["data", "convert", "{dir}", "{tmp}/o.jsonl", "--to", "trl", "--no-holdout"],
    ["data", "stats", "{dir}"],
    ["eval", "steps", "--predictions", "{dir}"],
    ["generate", "--model", "m", "--problems", "{dir}", "-o", "{tmp}/o.jsonl"],
    ["train", "--config", "{dir}"],
])
def test_a_directory_given_as_input_is_reported_as_a_directory(argv, tmp_path, capsys):
    folder = tmp_path / "somedir"
    folder.mkdir()
    argv = [a.replace("{dir}", str(folder)).replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = _error(capsys)
    assert f"{folder}: is a directory, not a file" in err and "no such" not in err


@pytest.mark.parametrize("argv", [
    ["eval", "bon", "--samples", "nope.jsonl", "--score-key", "score"],
    ["score", "--model", "m", "--input", "nope.jsonl", "-o", "o.jsonl"],
    ["grade", "nope.jsonl"],
    ["eval", "processbench", "--predictions", "p.jsonl", "--data", "nope.jsonl"],
    ["eval", "prmbench", "--predictions", "p.jsonl", "--data", "nope.jsonl"],
])
def test_a_missing_relative_input_names_the_working_directory(argv, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = _error(capsys)
    assert "nope.jsonl: no such" in err
    assert f"(read relative to the working directory {tmp_path})" in err


@pytest.mark.parametrize("command", [["eval", "bon", "--samples"], ["select", "--input"]])
def test_score_key_missing_lists_the_keys_that_exist(command, capsys):
    assert main([*command, str(SAMPLES), "--score-key", "prm"]) == 2
    err = _error(capsys)
    assert f"{SAMPLES}:1: field 'prm': no such score field; this sample's score fields: " \
        "prm_score, orm_score" in err


def test_score_key_missing_where_a_sample_has_no_scores_lists_its_fields(tmp_path, capsys):
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"problem": "p", "answer": "1", "is_correct": true, "level": 2}\n')
    assert main(["eval", "bon", "--samples", str(samples), "--score-key", "score"]) == 2
    assert "this sample has no score fields (its fields: problem, answer, is_correct, level)" \
        in _error(capsys)


def test_eval_processbench_predictions_given_a_scores_file_names_its_kind(tmp_path, capsys):
    """A best-of-N file scored with `prmkit score` is no ProcessBench predictions file:
    the error says what it holds instead of 'no prediction for N items'."""
    scored = tmp_path / "scored.jsonl"
    scored.write_text("".join(json.dumps(
        {"id": f"test/algebra/{i}.json#0", "problem": "p", "steps": ["a"], "step_scores": [0.5],
         "score": 0.5, "generated_by": {"backend": "hf"}, "scored_by": {"model": "m"}}) + "\n"
        for i in range(3)))
    argv = ["eval", "processbench", "--predictions", str(scored), "--data",
            str(FIXTURES / "eval" / "processbench")]
    assert main(argv) == 2
    err = _error(capsys)
    assert f"{scored}: it holds scored samples (`prmkit generate`, then `prmkit score`), not " \
        "predictions for ProcessBench: none of its 3 ids ('test/algebra/0.json#0'" in err
    assert "no prediction for" not in err
    scored.write_text(json.dumps({"id": "x", "step_scores": [0.5], "scored_by": {}}) + "\n")
    assert main(argv) == 2
    assert "it holds `prmkit score` output, not predictions for ProcessBench" in _error(capsys)


def test_eval_prmbench_predictions_of_another_kind_name_it(tmp_path, capsys):
    results = tmp_path / "beam.jsonl"
    results.write_text(json.dumps({"id": "a", "step_scores": [0.5], "search": {}}) + "\n")
    assert main(["eval", "prmbench", "--predictions", str(results), "--data",
                 str(FIXTURES / "eval" / "prmbench.jsonl")]) == 2
    assert "it holds `prmkit search` results, not predictions for PRMBench" in _error(capsys)


def test_a_missing_recipe_and_a_recipe_directory_are_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "nope.yaml"]) == 2
    assert f"nope.yaml: no such recipe (read relative to the working directory {tmp_path})" \
        in _error(capsys)
    os.mkdir(tmp_path / "r")
    assert main(["train", "--config", "r"]) == 2
    assert "r: is a directory, not a file" in _error(capsys)
