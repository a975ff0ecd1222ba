import hashlib
import json
from pathlib import Path

import pytest

import prmkit.data.fetch as fetch_mod
from prmkit.cli import main
from prmkit.data.fetch import OfficialFile, fetch

FIX = Path(__file__).parent / "fixtures" / "data"


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


# --- stats ------------------------------------------------------------------------------


def test_stats_json_fixture(capsys):
    s = run_json(capsys, ["data", "stats", str(FIX / "prm800k_small.jsonl"), "--json"])
    assert s["format"] == "prm800k"
    assert (s["problems"], s["solutions"], s["steps"]) == (4, 6, 15)
    assert s["ratings"] == {"-1": 4, "0": 2, "1": 7, "null": 2}
    assert s["finish_reasons"] == {"bad_problem": 1, "found_error": 2, "give_up": 1, "solution": 2}
    s = run_json(capsys, ["data", "stats", str(FIX / "processbench_small.json"), "--json"])
    assert s["erroneous"] == 1 and s["solutions"] == 3


def test_stats_text_output_and_format_override(capsys):
    assert main(["data", "stats", str(FIX / "trl_small.jsonl"), "--format", "trl"]) == 0
    out = capsys.readouterr().out
    assert "format: trl" in out and "problems: 3" in out


def test_stats_bad_input_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.jsonl"
    p.write_text(
        (FIX / "trl_small.jsonl").read_text() + '{"prompt": "q", "completions": ["a"], "labels": [2]}\n'
    )
    assert main(["data", "stats", str(p), "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{p}:4: field 'labels[0]'" in err
    s = run_json(capsys, ["data", "stats", str(p), "--json", "--skip-bad"])
    assert s["skipped_bad"] == 1 and s["solutions"] == 3


@pytest.mark.slow
def test_stats_phase1_train_parquet_exact(shared_data, capsys):
    path = shared_data / "prm800k" / "phase1_train.stepwise-critic.parquet"
    s = run_json(capsys, ["data", "stats", str(path), "--json"])
    assert s["format"] == "stepwise-critic"
    assert s["problems"] == 900
    assert s["ratings"] == {"-1": 19_656, "0": 10_234, "1": 18_782, "null": 3_163}
    assert s["steps"] == 51_835 and s["solutions"] == 942
    assert s["finish_reasons"]["solution"] == 808


@pytest.mark.slow
def test_stats_processbench_subsets(shared_data, capsys):
    expect = {"gsm8k": (400, 207), "math": (1000, 594), "olympiadbench": (1000, 661),
              "omnimath": (1000, 759)}
    for subset, (n, erroneous) in expect.items():
        s = run_json(capsys, ["data", "stats", str(shared_data / "processbench" / f"{subset}.json"),
                              "--json"])
        assert (s["solutions"], s["erroneous"]) == (n, erroneous), subset
        assert s["subsets"] == {subset: n}
        # One wrong step per erroneous item; every step is counted once.
        assert s["ratings"]["-1"] == erroneous and s["ratings"]["0"] == 0
        assert sum(s["ratings"].values()) == s["steps"]


@pytest.mark.slow
def test_parquet_trajectory_equals_raw_record(shared_data):
    """The rebuilt phase-1 test trajectory matches the raw record (flags are not in parquet)."""
    from prmkit.data import read_records

    (raw,) = read_records(shared_data / "prm800k/raw-examples/phase1_test.concatenated.json")
    rebuilt = [s for s in read_records(shared_data / "prm800k/phase1_test.stepwise-critic.parquet")
               if s.problem.text == raw.problem.text]
    assert len(rebuilt) == 1
    for a, b in zip(rebuilt[0].steps, raw.steps, strict=True):
        assert [(c.text, c.rating) for c in a.completions] == [(c.text, c.rating) for c in b.completions]
        assert a.chosen == b.chosen
        assert (a.human_completion is None) == (b.human_completion is None)
        if a.human_completion:
            assert a.human_completion.text == b.human_completion.text
            assert a.human_completion.extra == b.human_completion.extra == {"source": "human"}
    assert rebuilt[0].finish_reason == raw.finish_reason == "solution"


# --- convert ----------------------------------------------------------------------------


def test_convert_to_trl_with_policy_options(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    argv = ["data", "convert", str(FIX / "prm800k_small.jsonl"), str(out), "--to", "trl",
            "--holdout", str(FIX / "math500_small.jsonl"), "--report"]
    summary = run_json(capsys, argv)
    assert summary["written"] == 3 and summary["policy"]["holdout_overlap"] == 1
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[-1]["labels"] == [True, True, False]
    argv += ["--overwrite"]  # the same output again
    summary = run_json(capsys, argv + ["--alternatives", "chosen", "--neutral", "negative"])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert summary["written"] == 1 and rows == [
        {"prompt": "Find the smallest prime greater than 20.",
         "completions": ["21 is divisible by 3.", "22 is even."], "labels": [True, False]}
    ]
    summary = run_json(capsys, argv + ["--keep-quality-control", "--keep-bad-problems",
                                       "--no-holdout"])
    assert summary["policy"]["records_kept"] == 6


def test_convert_bad_input_exit_2_no_output(tmp_path, capsys):
    lines = (FIX / "prm800k_small.jsonl").read_text().splitlines()
    rec = json.loads(lines[3])
    rec["label"]["steps"][0]["completions"][0]["rating"] = "good"
    lines[3] = json.dumps(rec)
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    for to in ("trl", "prm800k", "processbench"):
        assert main(["data", "convert", str(src), str(out), "--to", to]) == 2
        err = capsys.readouterr().err
        assert f"{src}:4: field 'label.steps[0].completions[0].rating'" in err
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
    assert main(["data", "convert", str(src), str(out), "--to", "prm800k", "--skip-bad"]) == 0
    assert "skipped 1 bad record(s)" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 5


def test_convert_parquet_to_prm800k_and_processbench(tmp_path, capsys):
    from test_data_readers import critic_rows, write_parquet

    pq_path = tmp_path / "c.parquet"
    write_parquet(pq_path, critic_rows())
    raw = tmp_path / "raw.jsonl"
    assert main(["data", "convert", str(pq_path), str(raw), "--to", "prm800k"]) == 0
    objs = [json.loads(x) for x in raw.read_text().splitlines()]
    assert len(objs) == 3 and objs[0]["label"]["steps"][1]["human_completion"]["source"] == "human"
    pb = tmp_path / "pb.json"
    assert main(["data", "convert", str(raw), str(pb), "--to", "processbench"]) == 0
    items = json.loads(pb.read_text())
    assert [i["label"] for i in items] == [-1, -1]  # the unrated q2 trajectory has no label
    assert "skipped" not in capsys.readouterr().out


def test_convert_refuses_impossible_targets(tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["data", "convert", str(FIX / "trl_small.jsonl"), str(out), "--to", "prm800k"]) == 2
    assert "needs labelled solutions" in capsys.readouterr().err
    assert not out.exists()


def test_convert_non_ascii_roundtrip(tmp_path):
    out = tmp_path / "p.jsonl"
    assert main(["data", "convert", str(FIX / "prm800k_small.jsonl"), str(out), "--to", "prm800k"]) == 0
    assert "fährt" in out.read_text(encoding="utf-8")


# --- fetch ------------------------------------------------------------------------------


def fake_files(folder: Path) -> tuple[OfficialFile, ...]:
    specs = []
    for name, content in [("phase1_train.jsonl", b'{"a": 1}\n'), ("math_splits/test.jsonl", b"{}\n")]:
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        repo_path = name if "/" in name else f"data/{name}"
        specs.append(OfficialFile(name, repo_path, len(content), hashlib.sha256(content).hexdigest()))
    return tuple(specs)


def test_fetch_from_folder_accepts_matching_checksums(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    specs = fake_files(src)
    monkeypatch.setattr(fetch_mod, "OFFICIAL_FILES", specs)
    dest = tmp_path / "dest"
    assert main(["data", "fetch", "--from", str(src), "--dest", str(dest)]) == 0
    assert (dest / "phase1_train.jsonl").read_bytes() == b'{"a": 1}\n'
    assert (dest / "math_splits" / "test.jsonl").is_file()
    assert "checksum verified" in capsys.readouterr().err
    # second run: already present
    assert main(["data", "fetch", "--from", str(src), "--dest", str(dest)]) == 0
    assert "already present" in capsys.readouterr().err


def test_fetch_reports_wrong_checksum(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    specs = fake_files(src)
    (src / "phase1_train.jsonl").write_bytes(b'{"a": 2}\n')  # same size, other content
    monkeypatch.setattr(fetch_mod, "OFFICIAL_FILES", specs)
    dest = tmp_path / "dest"
    assert main(["data", "fetch", "--from", str(src), "--dest", str(dest)]) == 2
    err = capsys.readouterr().err
    assert "sha256" in err and "does not match the official" in err and "phase1_train" in err
    assert not (dest / "phase1_train.jsonl").exists()


def test_fetch_real_table_rejects_fake_file(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    fake_files(src)
    monkeypatch.delenv("PRMKIT_DATA", raising=False)
    assert main(["data", "fetch", "--from", str(src), "--dest", str(tmp_path / "d")]) == 2
    assert "expected 7,900,236 B" in capsys.readouterr().err


def test_fetch_lfs_pointer_hint(tmp_path):
    spec = OfficialFile("phase2_train.jsonl", "data/phase2_train.jsonl", 10_000, "0" * 64, lfs=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "phase2_train.jsonl").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:1110\nsize 456135365\n"
    )
    with pytest.raises(fetch_mod.ChecksumError, match="git LFS pointer"):
        fetch(tmp_path / "d", source=tmp_path / "src", files=(spec,), log=lambda m: None)
    assert spec.url().startswith("https://media.githubusercontent.com/media/openai/prm800k/")


def test_fetch_env_var_and_missing_sources(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    specs = fake_files(src)
    monkeypatch.setattr(fetch_mod, "OFFICIAL_FILES", specs)
    monkeypatch.setenv("PRMKIT_DATA", str(src))
    assert main(["data", "fetch", "--dest", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    monkeypatch.setenv("PRMKIT_DATA", str(tmp_path / "nowhere"))
    assert main(["data", "fetch", "--dest", str(tmp_path / "d2")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_fetch_download_verifies_and_explains_offline(tmp_path, monkeypatch):
    src = tmp_path / "mirror"
    specs = fake_files(tmp_path / "flat")
    for spec in specs:  # the repository layout: prm800k/data/..., prm800k/math_splits/...
        (src / "prm800k" / spec.repo_path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "flat" / spec.name).rename(src / "prm800k" / spec.repo_path)
    monkeypatch.delenv("PRMKIT_DATA", raising=False)
    # a file:// mirror stands in for GitHub
    monkeypatch.setattr(fetch_mod, "RAW_BASE", (src / "prm800k").as_uri())
    got = fetch(tmp_path / "d", files=specs, log=lambda m: None)
    assert [p.read_bytes() for p in got] == [b'{"a": 1}\n', b"{}\n"]
    bad = (OfficialFile("phase1_train.jsonl", "data/phase1_train.jsonl", 9, "f" * 64),)
    with pytest.raises(fetch_mod.ChecksumError, match="sha256"):
        fetch(tmp_path / "d3", files=bad, log=lambda m: None)
    assert not (tmp_path / "d3" / "phase1_train.jsonl").exists()
    monkeypatch.setattr(fetch_mod, "RAW_BASE", "http://127.0.0.1:9/prm800k")
    with pytest.raises(fetch_mod.PrmkitError, match="--from DIR or set \\$PRMKIT_DATA"):
        fetch(tmp_path / "d4", files=specs, timeout=2, log=lambda m: None)


def test_stats_processbench_ratings_follow_the_first_error(tmp_path, capsys):
    items = [
        {"id": "a", "generator": "g", "problem": "p", "steps": ["s1", "s2", "s3"],
         "final_answer_correct": False, "label": 1},
        {"id": "b", "generator": "g", "problem": "q", "steps": ["s1", "s2"],
         "final_answer_correct": True, "label": -1},
    ]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(items))
    s = run_json(capsys, ["data", "stats", str(path), "--format", "processbench", "--json"])
    assert s["ratings"] == {"-1": 1, "0": 0, "1": 3, "null": 1}
    assert (s["steps"], s["erroneous"]) == (5, 1)
