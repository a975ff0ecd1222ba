import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prmkit.data import read_records
from prmkit.data.jsonstream import iter_json_values
from prmkit.data.prm800k import read_prm800k
from prmkit.data.prmbench import PRMBenchItem
from prmkit.data.readers import SUPPORTED, detect_format
from prmkit.data.records import (
    LabelledSolution,
    Problem,
    ProcessBenchItem,
    ScoredSample,
    StepExample,
)
from prmkit.data.stepwise_critic import read_stepwise_critic
from prmkit.errors import DataError

FIX = Path(__file__).parent / "fixtures" / "data"


def write_concatenated(src: Path, dst: Path, indent: int = 4) -> None:
    """The PRM800K 'concatenated' form: pretty-printed objects one after another."""
    with open(dst, "w", encoding="utf-8") as f:
        for line in src.read_text(encoding="utf-8").splitlines():
            f.write(json.dumps(json.loads(line), indent=indent, ensure_ascii=False) + "\n")


def strip_source(sol: LabelledSolution) -> LabelledSolution:
    sol.provenance.source_path = sol.provenance.source_line = None
    return sol


# --- raw PRM800K ------------------------------------------------------------------------


def test_prm800k_reads_every_field():
    sols = list(read_records(FIX / "prm800k_small.jsonl"))
    assert len(sols) == 6 and all(isinstance(s, LabelledSolution) for s in sols)
    p1, p2, qc, screen, give_up, odd = sols
    assert p1.provenance.labeler == "lab-a" and p1.provenance.generation is None
    assert p1.provenance.timestamp == "2022-08-01T10:00:00.000001"
    assert p1.total_time == 61234 and p1.finish_reason == "solution"
    assert p1.problem.answer == "14" and p1.problem.solution is None
    assert [len(s.completions) for s in p1.steps] == [1, 4, 2]
    assert p1.steps[1].chosen == 2 and p1.steps[1].kept.text == "So $2+12 = 14$."
    assert p1.steps[2].completions[1].rating is None and p1.steps[2].completions[1].flagged is None
    human = p1.steps[2].human_completion
    assert human.extra == {"source": "human"} and human.rating is None
    assert p1.steps[2].kept is human
    assert p2.provenance.generation == 6 and p2.pre_generated_answer == "22"
    assert p2.pre_generated_verifier_score == pytest.approx(0.4123)
    assert p2.pre_generated_steps[0] == "21 is divisible by 3."
    assert p2.problem.solution.startswith("The primes after 20")
    assert qc.provenance.is_quality_control_question
    assert screen.provenance.generation == -1 and screen.provenance.is_initial_screening_question
    assert give_up.steps[1].completions == [] and give_up.finish_reason == "give_up"
    assert "fährt" in give_up.problem.text and "速度" in give_up.problem.text
    # unknown keys at every level are kept
    assert odd.extra == {
        "batch": "b7",
        "question_extra": {"source_split": "train"},
        "label_extra": {"reviewed": True},
    }
    assert odd.steps[0].extra == {"note": "fast"}
    assert odd.steps[0].completions[0].extra == {"model": "m1"}
    assert p1.provenance.source_line == 1 and odd.provenance.source_line == 6


def test_concatenated_form_reads_like_jsonl(tmp_path):
    cat = tmp_path / "small.concatenated.json"
    write_concatenated(FIX / "prm800k_small.jsonl", cat)
    a = [strip_source(s) for s in read_prm800k(FIX / "prm800k_small.jsonl")]
    b = list(read_prm800k(cat))
    # line numbers point at each object's first line
    starts = [i + 1 for i, line in enumerate(cat.read_text().splitlines()) if line == "{"]
    assert [s.provenance.source_line for s in b] == starts
    assert a == [strip_source(s) for s in b]
    assert detect_format(cat) == "prm800k"


def test_concatenated_reader_crosses_chunk_boundaries(tmp_path, monkeypatch):
    import prmkit.data.jsonstream as js

    monkeypatch.setattr(js, "CHUNK_CHARS", 7)
    cat = tmp_path / "c.json"
    write_concatenated(FIX / "prm800k_small.jsonl", cat, indent=2)
    vals = [v for _, v in iter_json_values(cat)]
    expect = [json.loads(line) for line in (FIX / "prm800k_small.jsonl").read_text().splitlines()]
    assert vals == expect
    (tmp_path / "nums.json").write_text("12345 67890\n[1, 2]\n")
    assert [v for _, v in iter_json_values(tmp_path / "nums.json")] == [12345, 67890, [1, 2]]


def test_concatenated_bad_object_names_line_and_skip_bad_resumes(tmp_path):
    good = json.dumps({"a": 1}, indent=2)
    text = good + "\n" + '{\n  "a": 2,\n  "b": [1, 2\n}\n' + good + "\n"
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(DataError) as e:
        list(iter_json_values(p))
    assert e.value.path == str(p) and e.value.line in (7, 8)
    bad = []
    assert [v for _, v in iter_json_values(p, skip_bad=True, bad=bad)] == [{"a": 1}, {"a": 1}]
    assert len(bad) == 1


def test_prm800k_bad_field_names_file_line_and_field(tmp_path):
    lines = (FIX / "prm800k_small.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["label"]["steps"][2]["completions"][0]["rating"] = 2
    lines[1] = json.dumps(rec)
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as e:
        list(read_records(p))
    assert (e.value.path, e.value.line) == (str(p), 2)
    assert e.value.field == "label.steps[2].completions[0].rating"
    assert f"{p}:2: field 'label.steps[2].completions[0].rating'" in str(e.value)
    stream = read_records(p, skip_bad=True)
    assert len(list(stream)) == 5 and stream.skipped == 1 and stream.bad[0][0] == 2


def test_prm800k_invalid_json_line_is_reported(tmp_path):
    lines = (FIX / "prm800k_small.jsonl").read_text().splitlines()
    lines.insert(2, '{"labeler": "x", "question": ')
    p = tmp_path / "broken.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"broken.jsonl:3: invalid JSON"):
        list(read_records(p, format="prm800k"))
    stream = read_records(p, format="prm800k", skip_bad=True)
    assert len(list(stream)) == 6 and stream.skipped == 1


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: r["label"].pop("steps"), "label.steps"),
        (lambda r: r["question"].update(problem=None), "question.problem"),
        (lambda r: r["label"]["steps"][0].update(chosen_completion=5), "label.steps[0].chosen_completion"),
        (lambda r: r["label"].update(finish_reason="done"), "label.finish_reason"),
        (lambda r: r["label"]["steps"][0]["completions"][0].pop("text"), "label.steps[0].completions[0].text"),
    ],
)
def test_prm800k_missing_or_wrong_fields(tmp_path, mutate, field):
    rec = json.loads((FIX / "prm800k_small.jsonl").read_text().splitlines()[0])
    mutate(rec)
    p = tmp_path / "one.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    with pytest.raises(DataError) as e:
        list(read_prm800k(p))
    assert e.value.field == field and e.value.line == 1


def test_empty_step_list_and_missing_ratings(tmp_path):
    rec = json.loads((FIX / "prm800k_small.jsonl").read_text().splitlines()[0])
    rec["label"]["steps"] = []
    rec2 = json.loads((FIX / "prm800k_small.jsonl").read_text().splitlines()[0])
    for s in rec2["label"]["steps"]:
        for c in s["completions"]:
            c.pop("rating")
    p = tmp_path / "e.jsonl"
    p.write_text(json.dumps(rec) + "\n" + json.dumps(rec2) + "\n")
    a, b = read_records(p)
    assert a.steps == [] and a.trajectory() == []
    assert all(c.rating is None for s in b.steps for c in s.completions)


def test_very_long_line(tmp_path):
    rec = json.loads((FIX / "prm800k_small.jsonl").read_text().splitlines()[0])
    long_text = "x" * 3_000_000 + " é"
    rec["label"]["steps"][0]["completions"][0]["text"] = long_text
    p = tmp_path / "long.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    (sol,) = read_records(p)
    assert sol.steps[0].completions[0].text == long_text
    cat = tmp_path / "long.concatenated.json"
    write_concatenated(p, cat)
    (sol2,) = read_records(cat)
    assert sol2.steps[0].completions[0].text == long_text


# --- stepwise-critic parquet ------------------------------------------------------------


def critic_rows():
    q1, q2 = "Compute $1+1$.", "Compute $2\\cdot 3$."
    r = []

    def add(q, prev, nxt, rating, pref=False, human=False, answer=None, sol=False, err=None):
        r.append(dict(instruction=q, responses=list(prev), next_response=nxt, answer=answer,
                      is_human_response=human, is_solution=sol, is_preferred_response=pref,
                      rating=rating, error_reason=err))

    # trajectory 1 of q1: alternatives, a human step, an answer step
    add(q1, [], "We add.", 1.0, pref=True)
    add(q1, ["We add."], "1+1=3.", -1.0, err="incorrect_arithmetic")
    add(q1, ["We add."], "1+1=11.", -1.0)
    add(q1, ["We add."], "So $1+1=2$.", float("nan"), pref=True, human=True)
    add(q1, ["We add.", "So $1+1=2$."], "Hmm.", 0.0)
    add(q1, ["We add.", "So $1+1=2$."], "The answer is 2.", 1.0, pref=True, answer="2", sol=True)
    # trajectory 2 of the same problem, labelled again: must stay separate
    add(q1, [], "We add.", 1.0, pref=True)
    add(q1, ["We add."], "It is 2.", 1.0, pref=True, answer="2", sol=True)
    # q2: ends without a preferred step, unrated
    add(q2, [], "Six.", float("nan"))
    add(q2, [], "Multiply.", float("nan"))
    return r


def write_parquet(path, rows, rating_type=None):
    rating_type = rating_type or pa.float64()
    schema = pa.schema([
        ("instruction", pa.string()), ("responses", pa.list_(pa.string())),
        ("next_response", pa.string()), ("answer", pa.string()),
        ("is_human_response", pa.bool_()), ("is_solution", pa.bool_()),
        ("is_preferred_response", pa.bool_()), ("rating", rating_type),
        ("error_reason", pa.string()),
    ])
    rows = [dict(r, rating=None if r["rating"] != r["rating"] else r["rating"]) for r in rows]
    if pa.types.is_integer(rating_type):
        rows = [dict(r, rating=None if r["rating"] is None else int(r["rating"])) for r in rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=3)


@pytest.mark.parametrize("rating_type", [pa.float64(), pa.int8()])
def test_stepwise_critic_rebuilds_trajectories(tmp_path, rating_type):
    p = tmp_path / "t.parquet"
    write_parquet(p, critic_rows(), rating_type)
    sols = list(read_stepwise_critic(p, batch_rows=4))
    assert len(sols) == 3
    a, b, c = sols
    assert [len(s.completions) for s in a.steps] == [1, 2, 2]
    assert a.steps[1].chosen is None and a.steps[1].human_completion.text == "So $1+1=2$."
    assert a.steps[1].completions[0].extra == {"error_reason": "incorrect_arithmetic"}
    assert a.steps[2].chosen == 1
    assert a.steps[2].completions[1].text == "The answer is 2.\n\n# Answer\n\n2"
    assert [s.text for s in a.trajectory()] == [
        "We add.", "So $1+1=2$.", "The answer is 2.\n\n# Answer\n\n2"
    ]
    assert a.finish_reason == "solution" and a.provenance.source_line == 1
    assert len(b.steps) == 2 and b.provenance.source_line == 7
    assert c.finish_reason is None and c.steps[0].chosen is None
    assert [x.rating for x in c.steps[0].completions] == [None, None]
    assert detect_format(p) == "stepwise-critic"


def test_stepwise_critic_bad_rating_and_missing_column(tmp_path):
    rows = critic_rows()
    rows[4]["rating"] = 3.0
    p = tmp_path / "bad.parquet"
    write_parquet(p, rows)
    with pytest.raises(DataError) as e:
        list(read_records(p))
    assert (e.value.line, e.value.field) == (5, "rating")
    stream = read_records(p, skip_bad=True)
    assert len(list(stream)) == 3 and stream.skipped == 1
    table = pq.read_table(p).drop_columns(["is_preferred_response"])
    pq.write_table(table, tmp_path / "nocol.parquet")
    with pytest.raises(DataError, match="is_preferred_response"):
        list(read_records(tmp_path / "nocol.parquet"))


# --- other formats ----------------------------------------------------------------------


def test_processbench_subset_from_file_stem(tmp_path):
    items = list(read_records(FIX / "processbench_small.json"))
    assert all(isinstance(i, ProcessBenchItem) for i in items)
    assert [i.label for i in items] == [-1, 1, -1]
    assert items[0].subset == "processbench_small" and items[2].steps == ["80 km/h — schnell!"]
    bad = json.loads((FIX / "processbench_small.json").read_text())
    bad[1]["label"] = 7
    p = tmp_path / "math.json"
    p.write_text(json.dumps(bad, indent=2))
    with pytest.raises(DataError) as e:
        list(read_records(p))
    assert e.value.field == "label" and e.value.line == 13


def test_prmbench_items():
    a, b = read_records(FIX / "prmbench_small.jsonl")
    assert isinstance(a, PRMBenchItem) and a.error_steps == [2, 3] and a.first_error == 1
    assert a.classification == "counterfactual" and a.idx == "x_0"
    assert b.first_error == -1 and b.extra == {"ground_truth": "23", "original_response": "23"}


def test_math_shepherd_tags_and_labels():
    a, b = read_records(FIX / "math_shepherd_small.jsonl")
    assert isinstance(a, StepExample)
    assert a.problem == "What is $2+3\\cdot 4$?"
    assert a.steps == ("$3\\cdot 4=12$.", "$2+12=14$. The answer is: 14")
    assert a.labels == (1.0, 1.0) and b.labels == (0.0, 0.0)


def test_math_shepherd_mismatched_label(tmp_path):
    rec = json.loads((FIX / "math_shepherd_small.jsonl").read_text().splitlines()[0])
    rec["label"] = rec["label"].replace(" +", " ?", 1)
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(rec, ensure_ascii=False) + "\n")
    with pytest.raises(DataError) as e:
        list(read_records(p))
    assert e.value.field == "label"


def test_trl_bool_and_soft_labels(tmp_path):
    a, b, c = read_records(FIX / "trl_small.jsonl")
    assert a.labels == (1.0, 1.0) and b.labels == (1.0, 0.0) and c.labels == (0.9, 0.35)
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"prompt": "q", "completions": ["a", "b"], "labels": [True]}) + "\n")
    with pytest.raises(DataError) as e:
        list(read_records(p))
    assert e.value.field == "labels"


def test_math_problems_and_answers(shared_data):
    probs = list(read_records(FIX / "math500_small.jsonl"))
    assert isinstance(probs[0], Problem) and [p.level for p in probs] == [1, 2]
    assert probs[0].id == "test/prealgebra/1.json" and probs[0].answer == "14"
    ans = read_records(shared_data / "math" / "math_train_7500_answers.json")
    assert ans.format == "math-answers"
    first = next(iter(ans))
    assert first.answer == "\\frac{1}{4}" and first.text.startswith("A board game spinner")


def test_scored_samples_list_object_and_jsonl(tmp_path):
    samples = list(read_records(FIX / "scored_small.json"))
    assert all(isinstance(s, ScoredSample) for s in samples)
    s = samples[0]
    assert s.scores == {"orm_score": 0.8, "prm_score": 0.675}
    assert s.step_scores == pytest.approx([0.9, 0.75]) and s.level == 1
    assert s.extra["rating_probs"][0]["1"] == 0.7
    one = tmp_path / "one.json"
    one.write_text(json.dumps(json.loads((FIX / "scored_small.json").read_text())[1], indent=2))
    assert [x.is_correct for x in read_records(one)] == [False]
    jl = tmp_path / "s.jsonl"
    jl.write_text("".join(json.dumps(x) + "\n" for x in json.loads((FIX / "scored_small.json").read_text())))
    assert len(list(read_records(jl))) == 2


def test_openai_scored_sample_prm_score_is_product(shared_data):
    (s,) = read_records(shared_data / "prm800k" / "raw-examples" / "scored_test_sample.json")
    prod = 1.0
    for v in s.step_scores:
        prod *= v
    assert prod == pytest.approx(s.scores["prm_score"], rel=1e-9)
    assert set(s.scores) == {"orm_score", "prm_score"} and s.ground_truth_answer == "-2+7i"


# --- detection --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("prm800k_small.jsonl", "prm800k"),
        ("processbench_small.json", "processbench"),
        ("prmbench_small.jsonl", "prmbench"),
        ("math_shepherd_small.jsonl", "math-shepherd"),
        ("trl_small.jsonl", "trl"),
        ("math500_small.jsonl", "math"),
        ("scored_small.json", "scored"),
    ],
)
def test_detect_format(name, fmt):
    assert detect_format(FIX / name) == fmt
    assert read_records(FIX / name).format == fmt


def test_unknown_format_lists_supported(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"foo": 1}\n')
    with pytest.raises(DataError) as e:
        read_records(p)
    for name in SUPPORTED:
        assert name in str(e.value)
    with pytest.raises(DataError, match="unknown format 'csv'.*prm800k"):
        read_records(p, format="csv")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="extension"):
        read_records(tmp_path / "x.csv")


def test_format_override(tmp_path):
    stream = read_records(FIX / "trl_small.jsonl", format="trl")
    assert len(list(stream)) == 3
    with pytest.raises(DataError, match="field 'question'"):
        list(read_records(FIX / "trl_small.jsonl", format="prm800k"))


def test_fast_path_matches_validating_parser(shared_data):
    """Official-shaped records take the fast path and give exactly what the validating
    parser gives."""
    from prmkit.data.jsonstream import iter_any_json
    from prmkit.data.prm800k import _fast_record, _Unusual, parse_record

    files = [FIX / "prm800k_small.jsonl", *sorted((shared_data / "prm800k/raw-examples").glob("*"))]
    fast = 0
    for path in files:
        if path.name.startswith("scored"):
            continue
        for line, obj in iter_any_json(path):
            slow = parse_record(obj, str(path), line)
            try:
                quick = _fast_record(obj, str(path), line)
            except (_Unusual, KeyError, TypeError, DataError):
                continue
            assert quick == slow
            fast += 1
    assert fast >= 23  # every real example and the plain fixture records


def test_stepwise_critic_duplicate_preferred_rows_keep_first(tmp_path):
    """Real phase-1 data has a position whose chosen text appears twice, both marked
    preferred, and a position with a human step that was not kept."""
    q = "Compute $3+3$."
    base = dict(instruction=q, answer=None, is_solution=False, error_reason=None)
    rows = [
        dict(base, responses=[], next_response="Add.", is_human_response=False,
             is_preferred_response=True, rating=1.0),
        dict(base, responses=[], next_response="Add.", is_human_response=False,
             is_preferred_response=True, rating=1.0),
        dict(base, responses=["Add."], next_response="It is 6.", is_human_response=False,
             is_preferred_response=True, rating=1.0),
        dict(base, responses=["Add."], next_response="Six, I think", is_human_response=True,
             is_preferred_response=False, rating=None),
    ]
    p = tmp_path / "dup.parquet"
    write_parquet(p, rows)
    (sol,) = read_records(p)
    assert sol.steps[0].chosen == 0 and len(sol.steps[0].completions) == 2
    assert sol.steps[1].chosen == 0 and sol.steps[1].human_completion.text == "Six, I think"
    assert [s.text for s in sol.trajectory()] == ["Add.", "It is 6."]


def test_prmbench_error_step_past_the_last_step_is_kept_with_a_warning(tmp_path, caplog):
    # As in prm800k_test_p1_4o_circular.jsonl:54 (error step 34 of 33 steps).
    rec = {"original_question": "q", "modified_question": "q", "original_process": ["a", "b"],
           "modified_process": ["a", "b"], "modified_steps": [2], "error_steps": [3],
           "idx": 1, "classification": "circular"}
    f = tmp_path / "prmbench.jsonl"
    f.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "error_steps": [0]}) + "\n")
    with caplog.at_level("WARNING", logger="prmkit.data"):
        stream = read_records(f, format="prmbench", skip_bad=True)
        items = list(stream)
    assert [it.error_steps for it in items] == [[3]]
    assert "1 item(s) name an error step past their last step (first at line 1)" in caplog.text
    assert len(stream.bad) == 1 and "must start at 1" in str(stream.bad[0])


def test_every_real_prmbench_file_reads_without_skipping(shared_data):
    files = sorted((shared_data / "prmbench").glob("*.jsonl"))
    assert len(files) == 25
    assert sum(sum(1 for _ in read_records(f)) for f in files) == 6216


def test_truncated_jsonl_line_error_gives_the_column_in_that_line_not_line_2(tmp_path):
    # orjson counts the line's own newline: "unexpected end of data: line 2 column 1"
    from prmkit.data.io import iter_jsonl

    p = tmp_path / "cut.jsonl"
    p.write_text('{"a": 1}\n{"a": 2\n')
    with pytest.raises(DataError) as e:
        list(iter_jsonl(p))
    assert str(e.value).endswith("cut.jsonl:2: invalid JSON at column 8: unexpected end of data")
    assert "line 2" not in str(e.value)
