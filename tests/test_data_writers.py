import json
from pathlib import Path

import pytest

from prmkit.data import read_records
from prmkit.data.policies import apply_policy
from prmkit.data.prm800k import read_prm800k, write_prm800k
from prmkit.data.processbench import read_processbench, write_processbench
from prmkit.data.records import StepExample
from prmkit.data.stepwise import read_trl, write_trl
from prmkit.errors import DataError

FIX = Path(__file__).parent / "fixtures" / "data"


def strip_source(sols):
    for s in sols:
        s.provenance.source_path = s.provenance.source_line = None
    return sols


def roundtrip(src: Path, tmp_path: Path):
    first = list(read_prm800k(src))
    out = tmp_path / "out.jsonl"
    assert write_prm800k(first, out) == len(first)
    second = list(read_prm800k(out))
    return strip_source(first), strip_source(second), out


def raw_objects(path: Path):
    from prmkit.data.jsonstream import iter_any_json

    return [v for _, v in iter_any_json(path)]


def test_prm800k_roundtrip_fixture(tmp_path):
    first, second, out = roundtrip(FIX / "prm800k_small.jsonl", tmp_path)
    assert first == second
    # the written objects equal the source objects, key for key (null completions included)
    assert raw_objects(out) == raw_objects(FIX / "prm800k_small.jsonl")


@pytest.mark.parametrize(
    "name",
    [
        "mixed_phases.jsonl",
        "phase1_train.concatenated.json",
        "phase1_test.concatenated.json",
        "phase2_train.concatenated.json",
        "phase2_test.concatenated.json",
    ],
)
def test_prm800k_roundtrip_real_examples(shared_data, tmp_path, name):
    src = shared_data / "prm800k" / "raw-examples" / name
    first, second, out = roundtrip(src, tmp_path)
    assert len(first) > 0 and first == second
    assert raw_objects(out) == raw_objects(src)


def test_writer_leaves_no_partial_file_on_error(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("previous content\n")
    sols = list(read_prm800k(FIX / "prm800k_small.jsonl"))

    def broken():
        yield sols[0]
        raise DataError("in.jsonl", 2, "label", "boom")

    with pytest.raises(DataError):
        write_prm800k(broken(), out)
    assert out.read_text() == "previous content\n"
    assert list(tmp_path.iterdir()) == [out]
    with pytest.raises(DataError, match="cannot write"):
        write_prm800k([StepExample("q", ("a",), (1.0,))], tmp_path / "new.jsonl")
    assert not (tmp_path / "new.jsonl").exists()


def test_trl_output_loads_with_datasets(tmp_path):
    out = tmp_path / "train.jsonl"
    examples = list(apply_policy(read_records(FIX / "prm800k_small.jsonl")))
    written, skipped = write_trl(examples, out)
    assert written == len(examples) > 0 and skipped == 0
    import datasets

    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert ds.column_names == ["prompt", "completions", "labels"]
    assert len(ds) == written
    row = ds[1]
    assert isinstance(row["labels"][0], bool) and len(row["labels"]) == len(row["completions"])
    # and it reads back through prmkit's TRL reader
    back = list(read_trl(out))
    assert [b.steps for b in back] == [e.steps for e in examples]


def test_trl_writer_truncates_and_skips_unlabelled(tmp_path):
    exs = [
        StepExample("q", ("a", "b", "c"), (1.0, 0.0, None)),
        StepExample("q", ("a", "b"), (None, 1.0)),  # interior step without a label
        StepExample("q", ("a", "b"), (0.7, 0.2)),
    ]
    out = tmp_path / "t.jsonl"
    assert write_trl(exs, out) == (2, 1)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0] == {"prompt": "q", "completions": ["a", "b"], "labels": [True, False]}
    assert rows[1]["labels"] == [True, False]
    assert write_trl(exs[2:], out, soft=True) == (1, 0)
    assert json.loads(out.read_text())["labels"] == [0.7, 0.2]


def test_processbench_roundtrip(tmp_path):
    items = list(read_processbench(FIX / "processbench_small.json"))
    out = tmp_path / "processbench_small.json"
    assert write_processbench(items, out) == 3
    assert list(read_processbench(out)) == items
    assert json.loads(out.read_text(encoding="utf-8"))[2]["steps"] == ["80 km/h — schnell!"]
    write_processbench([], tmp_path / "empty.json")
    assert json.loads((tmp_path / "empty.json").read_text()) == []
