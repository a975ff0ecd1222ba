from prmkit.cli import main


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: prmkit" in capsys.readouterr().out


def test_output_piped_into_head_ends_quietly_without_a_traceback(tmp_path):
    # `prmkit select ... | head -n 1`: the reader closes the pipe long before the end
    import json
    import subprocess
    import sys
    from pathlib import Path

    samples = tmp_path / "scored.jsonl"
    with samples.open("w") as f:
        for i in range(2000):  # ~500 KB of selections, far more than a pipe buffers
            f.write(json.dumps({"problem": f"p{i} " + "x" * 200, "answer": str(i),
                                "is_correct": True, "prm_score": 0.5}) + "\n")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("prmkit")), "select", "--input", str(samples),
         "--score-key", "prm_score", "--grader", "exact"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert json.loads(first)["answer"] == "0"
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_deepspeed_accelerator_warning_goes_to_stderr_not_before_json_output():
    """DeepSpeed's logger writes to stdout; imported by transformers/accelerate during model
    loading, its "Setting accelerator to CPU" line landed before `--json` output."""
    import os
    import subprocess
    import sys

    code = ("from prmkit.cli import keep_stdout_for_results; keep_stdout_for_results(); "
            "from deepspeed.accelerator import get_accelerator; get_accelerator(); "
            "print('{\"ok\": true}')")
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"ok": true}\n'
    assert "Setting accelerator to CPU" in done.stderr


def _parsers(parser, path=("prmkit",)):
    """Every parser of the command tree, with its command path."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_no_option_of_any_command_is_read_from_an_abbreviation():
    from prmkit.cli import build_parser

    found = list(_parsers(build_parser()))
    assert len(found) > 30  # every command and subcommand
    assert [" ".join(p) for p, parser in found if parser.allow_abbrev] == []


def test_serve_api_key_is_not_read_as_api_key_file(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as stop:
        main(["serve", str(tmp_path), "--api-key", "abc"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "usage: prmkit serve" in err and "--api-key: a key is never read from the command " \
        "line" in err and "$PRMKIT_API_KEY" in err and "--api-key-file FILE" in err


def test_train_recipe_settings_given_as_options_show_the_override_form(tmp_path, capsys):
    import pytest

    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  train: [x.jsonl]\n")
    for argv, form in ((["--max_steps", "5"], "max_steps=5"),
                       (["--lora.r=8", "--final-eval"], "lora.r=8 final_eval=true")):
        with pytest.raises(SystemExit) as stop:
            main(["train", "--config", str(recipe), *argv])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "usage: prmkit train" in err and "usage: prmkit [-h]" not in err
        assert f"key=value overrides: {form}" in err, err


def test_top_level_help_names_every_eval_subcommand(monkeypatch):
    """`prmkit --help` listed eval as "best-of-N, ProcessBench, PRMBench" while eval also
    held `steps` and `search`."""
    import re

    from prmkit.cli import build_parser

    monkeypatch.setenv("COLUMNS", "400")  # one line per command, unwrapped
    parser = build_parser()
    line = next(x for x in parser.format_help().splitlines() if x.split()[:1] == ["eval"])
    eval_parser = dict(_parsers(parser))[("prmkit", "eval")]
    subcommands = [p[-1] for p, _ in _parsers(eval_parser, ("eval",)) if len(p) == 2]
    assert {"bon", "processbench", "prmbench", "steps", "search"} <= set(subcommands)
    missing = [s for s in subcommands if not re.search(rf"\b{s}\b", line, re.IGNORECASE)]
    assert not missing, f"{line!r} does not name {missing}"
