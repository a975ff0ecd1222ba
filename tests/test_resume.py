"""Continuing an output (`prmkit generate`, `score` and `search` alike): what its lines
hold, and the refusal to append to another writer's lines."""

from __future__ import annotations

import pytest

from prmkit.data.resume import read_written, refuse_other_writer
from prmkit.errors import DataError, PrmkitError


def line_id(path, lineno, obj):
    if "id" not in obj:
        raise DataError(path, lineno, "id", "not a line of this output")
    return obj["id"]


def test_output_whose_first_lines_have_no_writer_record_is_checked_against_a_later_one(
        tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"id": "a", "by": "text"}\n\n{"id": "b"}\n{"id": "c", "by": {"m": 1}}\n'
                    b'{"id": "d", "by": {"m": 2}}\n{"id": "e", "b')
    written = read_written(out, line_id, "by")
    assert written.keys == {"a", "b", "c", "d"} and written.lines == 4
    assert written.record == {"m": 1}
    assert out.read_bytes().endswith(b'{"m": 2}}\n')  # the partial line is cut off


def test_line_that_the_output_cannot_have_is_named_by_file_and_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n{"other": 1}\n')
    with pytest.raises(DataError, match=r"out.jsonl:2: field 'id': not a line of this output"):
        read_written(out, line_id, "by")


def test_refusal_to_append_names_each_difference_and_both_ways_on():
    saved = {"model": "m1", "seed": 5, "sampling": {"n": 4}, "same": "x"}
    current = {"model": "m2", "seed": 6, "sampling": {"n": 8}, "same": "x"}
    refuse_other_writer("out.jsonl", saved, current, ["same"], "written by m1")
    with pytest.raises(PrmkitError) as err:
        refuse_other_writer("out.jsonl", saved, current, ["seed", "sampling", "same"],
                            "written by m1")
    assert str(err.value) == (
        'out.jsonl was written by m1: seed 5 -> 6; sampling {"n": 4} -> {"n": 8}. Pass '
        "overwrite (--overwrite) to start it again, or force (--force) to append anyway "
        "(the file then mixes both)")
