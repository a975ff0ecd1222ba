"""Where every command writes: an output that cannot be written is an error (exit code 2)
naming it before any work, and an existing output follows one rule: refused unless
--overwrite, or --resume where the command can continue it (prmkit.data.paths)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from prmkit.cli import main

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "scoring" / "solutions.jsonl"
SAMPLES = ROOT / "tests" / "fixtures" / "eval" / "scored_samples.jsonl"
PRM800K = ROOT / "tests" / "fixtures" / "data" / "prm800k_small.jsonl"
TINY_RECIPE = ROOT / "recipes" / "tiny_ci.yaml"


def _unwritable(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """An output path that cannot be written, and what the error says about it."""
    if kind == "under a file":
        (tmp_path / "afile").write_text("x")
        return tmp_path / "afile" / "out.jsonl", "afile is a file, not a folder"
    if kind == "read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder / "out.jsonl", "Permission denied"
    try:
        fd, probe = tempfile.mkstemp(dir="/sys")
    except OSError:
        return Path("/sys/prmkit-out.jsonl"), "cannot write in /sys"
    os.close(fd)
    os.unlink(probe)
    pytest.skip("/sys takes files here")


@pytest.fixture
def no_model_loading(monkeypatch):
    """Any reward-model or generator loading fails the test: the checks come first."""
    import prmkit.generation
    from prmkit.scoring.scorer import Scorer

    def loaded(*_a, **_k):
        raise AssertionError("a model was loaded before the output was checked")

    monkeypatch.setattr(Scorer, "from_pretrained", loaded)
    monkeypatch.setattr(prmkit.generation, "get_sampler", loaded)


@pytest.mark.parametrize("kind", ["under a file", "read-only folder", "/sys"])
def test_score_unwritable_output_exits_2_before_loading_model(kind, tmp_path, capsys,
                                                              no_model_loading):
    out, says = _unwritable(kind, tmp_path)
    assert main(["score", "--model", str(tmp_path / "m"), "--input", str(SOLUTIONS), "-o",
                 str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and says in err and "Traceback" not in err


def test_score_checks_input_schema_before_loading_model(tmp_path, capsys, no_model_loading):
    bad = tmp_path / "in.jsonl"
    bad.write_text('{"problem": "p", "steps": ["a"]}\n{"problem": "p"}\n')
    assert main(["score", "--model", str(tmp_path / "m"), "--input", str(bad), "-o",
                 str(tmp_path / "out.jsonl")]) == 2
    assert f"{bad}:2: field 'steps': missing" in capsys.readouterr().err
    existing = tmp_path / "old.jsonl"
    existing.write_text("kept\n")
    assert main(["score", "--model", str(tmp_path / "m"), "--input", str(SOLUTIONS), "-o",
                 str(existing)]) == 2
    assert "pass --resume (resume=True) to continue it or --overwrite" in capsys.readouterr().err
    assert existing.read_text() == "kept\n"


@pytest.mark.parametrize("argv", [
    ["data", "convert", str(PRM800K), "{out}", "--to", "trl", "--no-holdout"],
    ["eval", "bon", "--samples", str(SAMPLES), "--score-key", "prm_score", "-o", "{out}"],
    ["eval", "bon", "--samples", str(SAMPLES), "--score-key", "prm_score", "--plot", "{out}"],
    ["select", "--input", str(SAMPLES), "--score-key", "prm_score", "-o", "{out}"],
    ["grade", str(SAMPLES), "-o", "{out}"],
    ["train", "--config", str(TINY_RECIPE), "output_dir={out}"],
    ["export", "vllm", "--model", "nowhere", "-o", "{out}"],
    ["eval", "search", "--results", "nowhere.jsonl", "--out-dir", "{out}"],
    ["eval", "steps", "--predictions", "nowhere.jsonl", "--plot", "{out}"],
    ["data", "fetch", "--from", "nowhere", "--dest", "{out}"],
    ["active", "run", "--config", str(ROOT / "recipes" / "active_smollm2_small.yaml"),
     "output_dir={out}"],
    ["demo", "--experiment", "base-skill", "--quick", "--out", "{out}"],
])
def test_every_writing_command_exits_2_on_an_output_under_a_file(argv, tmp_path, capsys,
                                                                 no_model_loading):
    out, says = _unwritable("under a file", tmp_path)
    assert main([a.replace("{out}", str(out)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and says in err and "Traceback" not in err


def test_generate_and_search_unwritable_output_exit_2_before_loading_models(
        tmp_path, capsys, no_model_loading):
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"problem": "1 + 1?", "answer": "2", "unique_id": "a"}\n')
    out = Path("/sys/prmkit-out.jsonl")
    for argv in (["generate", "--model", "m", "--backend", "vllm"],
                 ["search", "--model", "m", "--backend", "vllm", "--prm", str(tmp_path)]):
        assert main([*argv, "--problems", str(problems), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{out}: cannot write in /sys" in err, argv


def test_data_convert_refuses_existing_output_without_overwrite(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    out.write_text("kept\n")
    argv = ["data", "convert", str(PRM800K), str(out), "--to", "trl", "--no-holdout"]
    assert main(argv) == 2
    assert f"{out} exists: pass --overwrite to replace it" in capsys.readouterr().err
    assert out.read_text() == "kept\n"
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads(out.read_text().splitlines()[0])["prompt"]


def test_eval_bon_output_and_plot_refused_when_they_exist_without_overwrite(tmp_path, capsys):
    metrics, plot = tmp_path / "bon.json", tmp_path / "bon.png"
    argv = ["eval", "bon", "--samples", str(SAMPLES), "--score-key", "prm_score", "--n", "1,2",
            "-o", str(metrics), "--plot", str(plot)]
    assert main(argv) == 0
    written = metrics.read_bytes(), plot.read_bytes()
    capsys.readouterr()
    assert main(argv) == 2
    assert f"{metrics} exists: pass --overwrite to replace it" in capsys.readouterr().err
    metrics.unlink()
    assert main(argv) == 2  # the plot alone is an output too
    assert f"{plot} exists" in capsys.readouterr().err
    assert plot.read_bytes() == written[1] and not metrics.exists()
    assert main([*argv, "--overwrite"]) == 0
    assert metrics.read_bytes() == written[0]


def test_eval_search_report_folder_refuses_an_earlier_report(tmp_path, capsys):
    report = tmp_path / "report"
    report.mkdir()
    (report / "notes.txt").write_text("mine\n")  # a folder with other files is fine
    (report / "metrics.json").write_text("{}\n")
    assert main(["eval", "search", "--results", "nowhere.jsonl", "--out-dir", str(report)]) == 2
    err = capsys.readouterr().err
    assert f"{report} holds an earlier report (metrics.json): pass --overwrite" in err


def test_generate_existing_output_needs_resume_or_overwrite(tmp_path, capsys, monkeypatch):
    from test_generate_cli import PROBLEMS, FakeSampler

    import prmkit.generation

    monkeypatch.setattr(prmkit.generation, "get_sampler", lambda *a, **k: FakeSampler())
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    out = tmp_path / "samples.jsonl"
    argv = ["generate", "--model", "m", "--problems", str(problems), "--n", "2",
            "--no-progress", "-o", str(out)]
    assert main(argv) == 0
    first = out.read_bytes()
    lines = first.splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:3]))  # an interrupted run
    capsys.readouterr()
    assert main(argv) == 2  # no silent resume
    assert f"{out} exists: pass --resume to continue it or --overwrite to replace it" \
        in capsys.readouterr().err
    assert out.read_bytes() == b"".join(lines[:3])
    assert main([*argv, "--resume"]) == 0
    assert f"{len(lines) - 3} samples" in capsys.readouterr().err and out.read_bytes() == first
    assert main([*argv, "--overwrite", "--n", "1"]) == 0
    assert len(out.read_bytes().splitlines()) == len(PROBLEMS)


@pytest.mark.parametrize("command", [
    ["score", "--model", "m", "--input", "i.jsonl", "-o", "o.jsonl"],
    ["generate", "--model", "m", "--problems", "p.jsonl", "-o", "o.jsonl"],
    ["search", "--model", "m", "--prm", "p", "--problems", "p.jsonl", "-o", "o.jsonl"],
])
def test_resume_and_overwrite_exclude_each_other(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--resume", "--overwrite"])
    assert stop.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_export_existing_export_needs_overwrite(tmp_path, capsys, no_model_loading):
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForTokenClassification"]}))
    assert main(["export", "vllm", "--model", str(tmp_path / "nowhere"), "-o", str(out)]) == 2
    assert f"{out} exists: pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["export", "vllm", "--model", str(tmp_path / "nowhere"), "-o", str(out),
                 "--overwrite"]) == 2  # now the missing model is what stops it
    assert "nowhere" in capsys.readouterr().err


def test_train_output_dir_holding_a_run_needs_resume_or_overwrite(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--config", str(TINY_RECIPE), f"output_dir={run}", "max_steps=2",
            "save_every=1", "eval_every=0", "final_eval=false", "progress=false",
            "data.cache=false", "num_threads=1"]
    assert main(argv) == 0
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-0000001"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{run} exists: pass resume=true to continue it or overwrite=true to replace it" in err
    assert main([*argv, "resume=true", "overwrite=true"]) == 2
    assert "choose one" in capsys.readouterr().err
    (run / "notes.txt").write_text("mine\n")
    assert main([*argv[:4], "max_steps=1", *argv[5:], "save_every=0", "overwrite=true"]) == 0
    # the earlier run's checkpoints and logs are gone, other files stay
    assert not (run / "checkpoints").exists() and (run / "notes.txt").read_text() == "mine\n"
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in logged if m["type"] == "train"] == [1]
    assert json.loads((run / "config.json").read_text())["max_steps"] == 1


def test_check_output_tells_a_file_from_a_folder(tmp_path):
    from prmkit.data.paths import check_output
    from prmkit.errors import PrmkitError

    (tmp_path / "f").write_text("x")
    with pytest.raises(PrmkitError, match="is a folder; the output here is a file"):
        check_output(tmp_path)
    with pytest.raises(PrmkitError, match="is a file; the output here is a folder"):
        check_output(tmp_path / "f", folder=True)
    assert check_output(tmp_path / "new" / "deeper" / "o.jsonl") == tmp_path / "new" / \
        "deeper" / "o.jsonl"
    assert not (tmp_path / "new").exists()  # checked, not created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no probe left behind
