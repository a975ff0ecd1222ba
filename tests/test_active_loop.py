"""The active-learning loop end to end on a tiny random Llama (hf sampler, grader labels)."""

from __future__ import annotations

import json

import pytest
from active_support import loop_config, write_problems

from prmkit.active.loop import STEPS, LabelsPending, run_loop
from prmkit.cli import main
from prmkit.data import read_records
from prmkit.errors import PrmkitError


@pytest.fixture
def problems(tmp_path):
    return write_problems(tmp_path / "problems.jsonl")


def test_two_generations_keep_data_models_and_manifest(tmp_path, tiny_lm, problems):
    manifest = run_loop(loop_config(tmp_path, tiny_lm, problems))
    run = tmp_path / "run"
    assert manifest["finished"]
    on_disk = json.loads((run / "manifest.json").read_text())
    for g in ("0", "1"):
        steps = on_disk["generations"][g]["steps"]
        assert list(steps) == list(STEPS) and all(s["done"] for s in steps.values())
        assert (run / f"gen_{g}/train/model/prmkit_config.json").is_file()
        assert len(steps["label"]["files"]["labels.jsonl"]) == 64  # sha256
    gen0, gen1 = (on_disk["generations"][g]["steps"] for g in ("0", "1"))
    assert gen0["select"]["counts"]["method"] == "uniform"  # no selector PRM yet
    assert gen1["select"]["counts"]["method"] == "convincing"  # gen 0's PRM selects
    assert gen1["score"]["counts"]["selector"] == gen0["train"]["counts"]["model_dir"]
    assert gen0["select"]["counts"]["selected"] == 4
    weights = [g["train"]["files"]["train/model/model.safetensors"] for g in (gen0, gen1)]
    assert len(weights[0]) == 64 and weights[0] != weights[1]
    assert gen1["merge"]["counts"]["per_generation"] == [4, gen1["label"]["counts"]["examples"]]
    merged = list(read_records(run / "gen_1/merged.jsonl"))
    assert len(merged) == gen1["merge"]["counts"]["examples"]
    assert all(ex.labels and set(ex.labels) <= {0.0, 1.0} for ex in merged)


def test_generation_never_relabels_a_sample_labelled_before(tmp_path, tiny_lm, problems):
    run_loop(loop_config(tmp_path, tiny_lm, problems, generator={"seed": 5}))
    rows = [json.loads(line) for g in (0, 1)
            for line in (tmp_path / f"run/gen_{g}/selected.jsonl").read_text().splitlines()]
    keys = [(r["unique_id"], "\n".join(r["steps"])) for r in rows]
    assert len(keys) == len(set(keys))


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("stop_at", [(0, "select"), (1, "merge")])
def test_killed_loop_resumes_at_the_step_where_it_stopped(tmp_path, tiny_lm, problems, stop_at):
    config = loop_config(tmp_path, tiny_lm, problems)
    ran: list[tuple[int, str]] = []

    def interrupt(g, step):
        ran.append((g, step))
        if (g, step) == stop_at:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_loop(config, after_step=interrupt)
    before = (tmp_path / "run/gen_0/samples.jsonl").read_bytes()
    first = len(ran)
    run_loop(config, after_step=lambda g, s: ran.append((g, s)))
    all_steps = [(g, s) for g in (0, 1) for s in STEPS]
    assert ran[:first] == all_steps[:first] and ran[first:] == all_steps[first:]
    assert (tmp_path / "run/gen_0/samples.jsonl").read_bytes() == before


def test_resume_with_a_changed_config_names_the_changed_key(tmp_path, tiny_lm, problems):
    config = loop_config(tmp_path, tiny_lm, problems, generations=1)
    with pytest.raises(Interrupt):
        run_loop(config, after_step=lambda g, s: (_ for _ in ()).throw(Interrupt()))
    with pytest.raises(PrmkitError, match="changed since this run started.*select"):
        run_loop(loop_config(tmp_path, tiny_lm, problems, generations=1,
                             select={"per_problem": 3}))


def test_edited_artefact_of_a_done_step_is_an_error_on_resume(tmp_path, tiny_lm, problems):
    config = loop_config(tmp_path, tiny_lm, problems, generations=1)
    with pytest.raises(Interrupt):
        run_loop(config, after_step=lambda g, s: (_ for _ in ()).throw(Interrupt()))
    with open(tmp_path / "run/gen_0/samples.jsonl", "a") as f:
        f.write("\n")
    with pytest.raises(PrmkitError, match="samples.jsonl: changed or missing"):
        run_loop(config)


def test_queue_source_waits_for_labels_then_trains_on_them(tmp_path, tiny_lm, problems):
    from prmkit.active.queue import label_record
    from prmkit.data import read_prm800k, write_prm800k

    config = loop_config(tmp_path, tiny_lm, problems, generations=1, label={"source": "queue"})
    with pytest.raises(LabelsPending, match="queue_labelled.jsonl"):
        run_loop(config)
    gen = tmp_path / "run/gen_0"
    queue = list(read_prm800k(gen / "queue.jsonl"))
    assert len(queue) == 4 and all(r.provenance.generation == 0 for r in queue)
    labelled = [label_record(r, [1] * (len(r.pre_generated_steps) - 1) + [-1], "tester")
                for r in queue]
    write_prm800k(labelled[:3] + queue[3:], gen / "queue_labelled.jsonl")
    with pytest.raises(LabelsPending, match="1 of 4 samples not labelled"):
        run_loop(config)
    write_prm800k(labelled, gen / "queue_labelled.jsonl")
    manifest = run_loop(config)
    assert manifest["generations"]["0"]["steps"]["label"]["counts"]["examples"] == 4
    assert (gen / "train/model/prmkit_config.json").is_file()


def test_cli_runs_the_loop_and_reports_the_model(tmp_path, tiny_lm, problems, capsys):
    cfg = tmp_path / "loop.yaml"
    import yaml
    cfg.write_text(yaml.safe_dump(loop_config(tmp_path, tiny_lm, problems).to_dict()))
    assert main(["active", "run", "--config", str(cfg), "generations=1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"].endswith("gen_0/train/model") and out["examples"] == 4


def test_cli_bad_config_value_names_file_and_line(tmp_path, capsys):
    cfg = tmp_path / "loop.yaml"
    cfg.write_text("generations: 2\nlabel:\n  source: oracle\n")
    assert main(["active", "run", "--config", str(cfg)]) == 2
    assert "loop.yaml:3" in capsys.readouterr().err


def test_row_without_steps_gets_a_null_score_and_the_step_is_marked_done(tmp_path, tiny_lm,
                                                                       problems, monkeypatch):
    from prmkit.active.loop import ActiveLoop, write_jsonl

    rows = [{"id": f"a#{i}", "problem": "What is 2+3?", "unique_id": "a", "sample_index": i,
             "steps": steps, "answer": None, "ground_truth_answer": "5", "is_correct": None}
            for i, steps in enumerate([["2+3 = 5.", "# Answer\n\n5"], []])]

    def sample(self, g):
        write_jsonl(self._gen_dir(g) / "samples.jsonl", rows)
        return ["samples.jsonl"], {"samples": len(rows)}

    class Selector:
        fingerprint = "f" * 16

        @classmethod
        def from_pretrained(cls, folder, **kwargs):
            return cls()

        def score(self, items):
            assert all(steps for _, steps in items)  # the empty row is not sent
            return [[0.9] * len(steps) for _, steps in items]

        def record(self, aggregation):
            return {"aggregation": aggregation}

    monkeypatch.setattr(ActiveLoop, "_sample", sample)
    monkeypatch.setattr("prmkit.scoring.Scorer", Selector)
    config = loop_config(tmp_path, tiny_lm, problems, generations=1,
                         selector={"model": str(tiny_lm)})

    def stop_after_score(g, step):
        if step == "score":
            raise Interrupt

    with pytest.raises(Interrupt):
        run_loop(config, after_step=stop_after_score)
    manifest = json.loads((tmp_path / "run/manifest.json").read_text())
    score = manifest["generations"]["0"]["steps"]["score"]
    assert score["done"] and score["counts"]["scored"] == 1
    scored = [json.loads(line) for line in
              (tmp_path / "run/gen_0/scored.jsonl").read_text().splitlines()]
    assert [r["score"] for r in scored] == [pytest.approx(0.81), None]
