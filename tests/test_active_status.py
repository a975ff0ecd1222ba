"""`loop_status` / `prmkit active status`: where a loop run stands, read from its manifest."""

from __future__ import annotations

import json
import shutil

import pytest
from active_support import loop_config, write_problems

from prmkit.active.loop import STEPS, LabelsPending, loop_status, run_loop
from prmkit.cli import main
from prmkit.errors import PrmkitError


class Interrupt(Exception):
    pass


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_lm):
    """One two-generation loop: a copy of it stopped after generation 1's score step
    ("interrupted"), then the loop finished ("finished")."""
    root = tmp_path_factory.mktemp("status")
    config = loop_config(root, tiny_lm, write_problems(root / "problems.jsonl"))

    def stop(g, step):
        if (g, step) == (1, "score"):
            raise Interrupt

    with pytest.raises(Interrupt):
        run_loop(config, after_step=stop)
    shutil.copytree(root / "run", root / "interrupted")
    run_loop(config)
    return {"interrupted": root / "interrupted", "finished": root / "run", "config": config}


def manifest_of(run):
    return json.loads((run / "manifest.json").read_text())


def test_interrupted_run_lists_done_steps_and_the_next_one(runs):
    st = loop_status(runs["interrupted"])
    assert [g["done"] for g in st["generations"]] == [list(STEPS), ["sample", "score"]]
    assert st["next"] == {"generation": 1, "step": "select"} and not st["finished"]
    recorded = manifest_of(runs["interrupted"])["generations"]
    sample = st["generations"][0]["steps"]["sample"]
    assert sample["counts"] == recorded["0"]["steps"]["sample"]["counts"]
    assert sample["counts"]["samples"] == 8
    assert sample["files"] == {"problems.jsonl": "ok", "samples.jsonl": "ok"}
    assert st["generations"][0]["steps"]["train"]["files"]["train/model/model.safetensors"] == "ok"
    seconds = sum(s["seconds"] for gen in recorded.values() for s in gen["steps"].values())
    assert st["seconds"] == pytest.approx(seconds, abs=1e-3) and st["seconds"] > 0
    assert st["intact"] and st["changed_files"] == [] and st["waiting_for_labels"] is None


def test_finished_run_says_finished(runs):
    st = loop_status(runs["finished"])
    assert st["finished"] and st["next"] is None
    assert [g["done"] for g in st["generations"]] == [list(STEPS)] * 2
    assert st["seconds"] == pytest.approx(manifest_of(runs["finished"])["seconds"], abs=1e-3)


def test_cli_table_has_a_row_per_generation_and_step_then_the_next_step(runs, capsys):
    assert main(["active", "status", str(runs["interrupted"])]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["gen", "step", "done", "seconds", "counts"]
    rows = [line.split()[:3] for line in lines[1:13]]
    assert rows == [[str(g), s, "yes" if g == 0 or s in ("sample", "score") else "-"]
                    for g in (0, 1) for s in STEPS]
    assert "8 samples of 2 problems" in lines[1] and "4 of 8 selected (uniform)" in lines[3]
    assert lines[-1] == "next: generation 1, step select" and err == ""
    assert main(["active", "status", str(runs["finished"])]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "finished"


def test_cli_json_prints_the_status_dict(runs, capsys):
    assert main(["active", "status", str(runs["interrupted"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == loop_status(runs["interrupted"])


def test_changed_and_missing_files_of_done_steps_are_listed_not_raised(runs, tmp_path, capsys):
    run = shutil.copytree(runs["finished"], tmp_path / "run")
    with open(run / "gen_0/samples.jsonl", "a") as f:
        f.write("\n")
    (run / "gen_1/selected.jsonl").unlink()
    with open(run / "gen_0/train/model/model.safetensors", "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    st = loop_status(run)
    assert not st["intact"] and st["finished"]
    assert st["changed_files"] == [
        {"generation": 0, "step": "sample", "path": str(run / "gen_0/samples.jsonl"),
         "state": "changed"},
        {"generation": 0, "step": "train",
         "path": str(run / "gen_0/train/model/model.safetensors"), "state": "changed"},
        {"generation": 1, "step": "select", "path": str(run / "gen_1/selected.jsonl"),
         "state": "missing"}]
    assert st["generations"][0]["steps"]["sample"]["files"]["samples.jsonl"] == "changed"
    assert main(["active", "status", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {run / 'gen_1/selected.jsonl'}: missing since step select" in err
    assert f"warning: {run / 'gen_0/samples.jsonl'}: changed since step sample" in err


def test_queue_source_next_label_step_waits_for_human_labels(tmp_path, tiny_lm, capsys):
    from prmkit.active.queue import label_record
    from prmkit.data import read_prm800k, write_prm800k

    config = loop_config(tmp_path, tiny_lm, write_problems(tmp_path / "problems.jsonl"),
                         generations=1, label={"source": "queue"})
    with pytest.raises(LabelsPending):
        run_loop(config)
    run, gen = tmp_path / "run", tmp_path / "run/gen_0"
    wait = loop_status(run)["waiting_for_labels"]
    assert loop_status(run)["next"] == {"generation": 0, "step": "label"}
    assert wait["waiting"] and wait["queue_written"] and not wait["labels_present"]
    assert wait["queue"] == str(gen / "queue.jsonl")
    assert wait["labels"] == str(gen / "queue_labelled.jsonl")
    assert main(["active", "status", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"waiting for human labels: label {gen / 'queue.jsonl'} and save it as "
        f"{gen / 'queue_labelled.jsonl'}")

    (gen / "queue_labelled.jsonl").write_text('{"label": }\n')
    wait = loop_status(run)["waiting_for_labels"]
    assert wait["waiting"] and "queue_labelled.jsonl:1" in wait["error"]
    assert main(["active", "status", str(run)]) == 0
    assert "the labels file is unreadable" in capsys.readouterr().out

    queue = list(read_prm800k(gen / "queue.jsonl"))
    labelled = [label_record(r, [1] * (len(r.pre_generated_steps) - 1) + [-1], "tester")
                for r in queue]
    write_prm800k(labelled[:3] + queue[3:], gen / "queue_labelled.jsonl")
    wait = loop_status(run)["waiting_for_labels"]
    assert wait["waiting"] and (wait["labelled"], wait["pending"]) == (3, 1)
    write_prm800k(labelled, gen / "queue_labelled.jsonl")
    wait = loop_status(run)["waiting_for_labels"]
    assert not wait["waiting"] and (wait["labelled"], wait["pending"]) == (4, 0)
    assert main(["active", "status", str(run)]) == 0
    assert "labels ready" in capsys.readouterr().out


def test_queue_source_before_the_queue_is_written_names_both_files(runs, tmp_path, capsys):
    run = shutil.copytree(runs["finished"], tmp_path / "run")
    manifest = manifest_of(run)
    manifest["config"]["label"]["source"] = "queue"
    for step in ("label", "merge", "train"):
        del manifest["generations"]["1"]["steps"][step]
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "gen_1/queue.jsonl").unlink()
    st = loop_status(run)
    wait = st["waiting_for_labels"]
    assert st["next"] == {"generation": 1, "step": "label"} and st["intact"]
    assert wait["waiting"] and not wait["queue_written"] and not wait["labels_present"]
    assert main(["active", "status", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"waiting for human labels: label {run / 'gen_1/queue.jsonl'} (written when the label "
        f"step runs) and save it as {run / 'gen_1/queue_labelled.jsonl'}")


def test_missing_manifest_is_an_error_naming_the_path(tmp_path, capsys):
    with pytest.raises(PrmkitError, match="manifest.json: no loop manifest"):
        loop_status(tmp_path)
    assert main(["active", "status", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere' / 'manifest.json'}: no loop manifest" in capsys.readouterr().err


def test_corrupt_manifest_error_names_file_and_line(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text('{\n  "config": {},\n  oops\n}\n')
    with pytest.raises(PrmkitError, match=r"manifest.json:3:3: not valid JSON"):
        loop_status(tmp_path)
    assert main(["active", "status", str(tmp_path)]) == 2
    assert f"{tmp_path / 'manifest.json'}:3:3: not valid JSON" in capsys.readouterr().err


def test_json_that_is_not_a_loop_manifest_is_an_error(tmp_path):
    (tmp_path / "manifest.json").write_text("[1, 2]\n")
    with pytest.raises(PrmkitError, match="manifest.json: not a loop manifest"):
        loop_status(tmp_path)


def test_loop_resumed_on_a_corrupt_manifest_names_file_and_line(tmp_path):
    config = loop_config(tmp_path, tmp_path / "no-model", tmp_path / "problems.jsonl")
    (tmp_path / "run").mkdir()
    (tmp_path / "run/manifest.json").write_text('{"config": {}, "generations": {')
    with pytest.raises(PrmkitError, match=r"run/manifest.json:1:32: not valid JSON"):
        run_loop(config)
