"""The msgspec JSONL path of the raw PRM800K reader against the validating dict path."""

import json
from pathlib import Path

import orjson
import pytest

from prmkit.data.jsonstream import iter_any_json
from prmkit.data.prm800k import _decoder, _parse_dict, read_prm800k, to_dict, write_prm800k
from prmkit.errors import DataError

FIX = Path(__file__).parent / "fixtures" / "data"


def one_record() -> dict:
    return json.loads((FIX / "prm800k_small.jsonl").read_text().splitlines()[0])


def write_lines(path: Path, objs) -> Path:
    path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs))
    return path


def dict_path(path: Path) -> list:
    """What the reader built before msgspec: orjson dicts through the validating parser."""
    out = []
    with open(path, "rb") as f:
        for line, raw in enumerate(f, 1):
            if raw.strip():
                out.append(_parse_dict(orjson.loads(raw), str(path), line))
    return out


def test_msgspec_reader_matches_json_reader_on_prm800k_sample(shared_data, tmp_path):
    objs = []
    for p in sorted((shared_data / "prm800k/raw-examples").iterdir()):
        if not p.name.startswith("scored"):
            objs += [v for _, v in iter_any_json(p)]
    p = write_lines(tmp_path / "real.jsonl", objs)
    # Every real record has the official shape, so this compares the two paths.
    assert all(_decoder.decode(line) for line in p.read_bytes().splitlines())
    new = list(read_prm800k(p))
    assert len(new) == len(objs) == 20
    assert new == dict_path(p)
    assert [to_dict(s) for s in new] == objs


def test_msgspec_reader_matches_json_reader_on_unusual_fixture_records():
    # The fixture has unknown keys at every level, a give-up step without completions,
    # screening and quality-control rows.
    path = FIX / "prm800k_small.jsonl"
    assert list(read_prm800k(path)) == dict_path(path)


def test_wrong_field_type_names_file_line_and_field(tmp_path):
    bad = one_record()
    bad["label"]["steps"][1]["completions"][0]["flagged"] = "no"
    p = write_lines(tmp_path / "in.jsonl", [one_record(), bad, one_record()])
    with pytest.raises(DataError) as e:
        list(read_prm800k(p))
    assert (e.value.path, e.value.line) == (str(p), 2)
    assert e.value.field == "label.steps[1].completions[0].flagged"
    assert str(e.value) == f"{p}:2: field 'label.steps[1].completions[0].flagged': expected bool or null, got str"


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r["label"].update(total_time="61234"), "label.total_time"),
        (lambda r: r.update(generation=True), "generation"),
        (lambda r: r["question"].update(ground_truth_answer=14), "question.ground_truth_answer"),
        (lambda r: r["label"]["steps"][0]["completions"][0].update(rating=True), "label.steps[0].completions[0].rating"),
        (lambda r: r["label"]["steps"][2]["human_completion"].update(text=None), "label.steps[2].human_completion.text"),
        (lambda r: r["label"].update(total_time=2**64), "label.total_time"),
    ],
)
def test_wrong_field_types_name_the_field_as_before(tmp_path, mutate, field):
    rec = one_record()
    mutate(rec)
    p = write_lines(tmp_path / "one.jsonl", [rec])
    with pytest.raises(DataError) as e:
        list(read_prm800k(p))
    assert (e.value.line, e.value.field) == (1, field)


def test_source_key_named_extra_is_kept_in_step_extra(tmp_path):
    rec = one_record()
    rec["label"]["steps"][0]["completions"][0]["extra"] = {}
    rec["label"]["steps"][1]["completions"][0]["extra"] = {"note": 1}
    p = write_lines(tmp_path / "x.jsonl", [rec])
    (sol,) = read_prm800k(p)
    assert sol.steps[0].completions[0].extra == {"extra": {}}
    assert sol.steps[1].completions[0].extra == {"extra": {"note": 1}}
    assert to_dict(sol) == rec


def test_unknown_completion_keys_are_kept_not_dropped(tmp_path):
    rec = one_record()
    rec["label"]["steps"][0]["completions"][0]["model"] = "gpt-4"
    p = write_lines(tmp_path / "x.jsonl", [one_record(), rec])
    plain, odd = read_prm800k(p)
    assert plain.steps[0].completions[0].extra == {}
    assert odd.steps[0].completions[0].extra == {"model": "gpt-4"}
    out = tmp_path / "back.jsonl"
    write_prm800k([plain, odd], out)
    assert [json.loads(line) for line in out.read_text().splitlines()] == [one_record(), rec]


def test_blank_lines_keep_source_line_numbers(tmp_path):
    p = tmp_path / "gaps.jsonl"
    line = json.dumps(one_record())
    p.write_text(f"\n{line}\n   \n\n{line}\r\n{line}")
    assert [s.provenance.source_line for s in read_prm800k(p)] == [2, 5, 6]


def test_skip_bad_keeps_every_good_line_and_lists_the_bad_ones(tmp_path):
    wrong = one_record()
    wrong["label"]["finish_reason"] = "done"
    p = tmp_path / "mixed.jsonl"
    good = json.dumps(one_record())
    p.write_text("\n".join([good, "{not json", good, json.dumps(wrong), good]) + "\n")
    bad = []
    sols = list(read_prm800k(p, skip_bad=True, bad=bad))
    assert [s.provenance.source_line for s in sols] == [1, 3, 5]
    assert [line for line, _ in bad] == [2, 4]
    assert bad[0][1].startswith("invalid JSON") and "label.finish_reason" in bad[1][1]


def no_human_record() -> dict:
    rec = one_record()
    for s in rec["label"]["steps"]:
        s["human_completion"] = None
    return rec


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r["label"]["steps"][1].update(chosen_completion=4), "label.steps[1].chosen_completion"),
        (lambda r: r["label"]["steps"][1].update(chosen_completion=-1), "label.steps[1].chosen_completion"),
        (lambda r: r["label"]["steps"][1].update(chosen_completion=1.0), "label.steps[1].chosen_completion"),
        (lambda r: r["label"]["steps"][1]["completions"][2].update(rating=2), "label.steps[1].completions[2].rating"),
    ],
)
def test_decoded_steps_still_check_every_field(tmp_path, mutate, field):
    assert _decoder.decode(json.dumps(no_human_record()))
    rec = no_human_record()
    mutate(rec)
    p = write_lines(tmp_path / "one.jsonl", [rec])
    with pytest.raises(DataError) as e:
        list(read_prm800k(p))
    assert (e.value.line, e.value.field) == (1, field)


def test_step_keys_beyond_the_official_ones_are_kept(tmp_path):
    rec = no_human_record()
    rec["label"]["steps"][0]["extra"] = {}
    rec["label"]["steps"][1]["comment"] = "unclear"
    rec["label"]["steps"][2]["human_completion"] = {"text": "Hence 14.", "rating": 1, "flagged": None}
    p = write_lines(tmp_path / "x.jsonl", [no_human_record(), rec])
    plain, odd = read_prm800k(p)
    assert [s.extra for s in odd.steps] == [{"extra": {}}, {"comment": "unclear"}, {}]
    assert odd.steps[2].human_completion.extra == {}
    assert [to_dict(s) for s in (plain, odd)] == [no_human_record(), rec]
    assert [plain, odd] == dict_path(p)
