import json
import multiprocessing
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from prmkit.cli import main
from prmkit.grading import Grade, extract_answer, grade_answer, grade_many
from prmkit.grading.normalize import answer_key, clean_answer
from prmkit.grading.rewrites import equivalent_rewrites

FIXTURES = Path(__file__).parent / "fixtures" / "grading"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


# ---- extraction ----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Step one.\n\n# Answer\n\n42", "42"),
        ("so $\\boxed{\\frac{1}{2}}$ and then $\\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}"),
        ("nested $\\boxed{\\frac{\\sqrt{2}}{\\{1\\}}}$", "\\frac{\\sqrt{2}}{\\{1\\}}"),
        ("a \\fbox{7} b", "7"),
        ("thus \\boxed 5 apples", "5"),
        ("Thus the answer is $\\dfrac{3}{4}$.", "\\dfrac{3}{4}"),
        ("The final answer is 12. Done", "12"),
        ("We compute.\nSo the total is $42$.", "42"),
        ("**73**", "73"),
        ("17", "17"),
        ("The price is $\\$18.90$.", "\\$18.90"),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text, last_line=True) == expected


def test_extract_answer_from_steps():
    steps = ["First, 2+2=4.", "So it is 8.\n\n# Answer\n\n8"]
    assert extract_answer(steps) == "8"
    assert extract_answer([]) is None


# ---- normalisation ----


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\frac12", "\\frac{1}{2}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
        ("40,\\!000", "40000"),
        ("40{,}000", "40000"),
        ("11,\\! 111,\\! 111,\\! 100", "11111111100"),
        ("\\$32,\\!348", "32348"),
        ("106^\\circ", "106"),
        ("50\\%", "50"),
        ("5.4 \\text{ cents}", "5.4"),
        ("864 \\mbox{ inches}^2", "864"),
        ("x = 5", "5"),
        ("x \\in [-2,7]", "[-2,7]"),
        ("\\text{(B)}", "B"),
        ("\\text{Evelyn}", "evelyn"),
        ("3.50", "3.5"),
        (".35625", "0.35625"),
        ("\\cot x", "\\cot{}x"),
        ("0.\\overline{3}", "\\frac{1}{3}"),
    ],
)
def test_answer_key(raw, key):
    assert answer_key(raw) == key


def test_clean_keeps_equations_with_two_sides():
    assert clean_answer("5x - 7y + 11z + 4 = 0") == "5x - 7y + 11z + 4 = 0"


# ---- grading rules ----


@pytest.mark.parametrize(
    ("given", "gold", "reason"),
    [
        ("\\dfrac{1}{2}", "\\frac12", "exact"),
        ("0.5", "\\frac{1}{2}", "rational-equal"),
        ("B", "\\text{(B)}", "exact"),
        ("So $\\boxed{10,\\!080}$.", "10080", "exact"),
        ("2(k+1)", "2k+2", "math-verify"),
        ("7i - 2", "-2 + 7i", "math-verify"),
    ],
)
def test_equal(given, gold, reason):
    grade = grade_answer(given, gold, timeout=10)
    assert grade.correct is True
    assert grade.reason == reason


@pytest.mark.parametrize(
    ("given", "gold", "reason"),
    [
        ("8", "9", "rational-unequal"),
        ("C", "\\text{(B)}", "choice-mismatch"),
        ("Nivan", "\\text{Navin}", "text-mismatch"),
        ("\\{2,4\\}", "(2,4)", "bracket-mismatch"),
        ("(3,4)", "(3,4]", "math-verify-unequal"),
        ("0.333333", "\\frac13", "rational-unequal"),
    ],
)
def test_unequal(given, gold, reason):
    grade = grade_answer(given, gold, timeout=10)
    assert grade.correct is False
    assert grade.reason == reason


def test_missing_answers():
    assert grade_answer("", "5").reason == "no-answer"
    assert grade_answer("5", None).correct is None
    assert grade_answer("1+" * 3000 + "1", "5", max_chars=5000).reason == "too-long"


def test_grade_explain_has_audit_trail():
    grade = grade_answer("The answer is $\\dfrac{3}{4}$.", "\\frac34")
    assert isinstance(grade, Grade)
    trail = grade.explain()
    assert trail["given_extracted"] == "\\dfrac{3}{4}"
    assert trail["given_normalised"] == trail["gold_normalised"] == "\\frac{3}{4}"
    assert trail["reason"] == "exact"


def test_rewrites_are_distinct_and_graded_equal():
    rewrites = equivalent_rewrites("\\left( \\frac{3}{2}, -13 \\right)")
    assert len(rewrites) >= 3
    assert all(g.correct for g in grade_many([(r, "\\left( \\frac{3}{2}, -13 \\right)") for r in rewrites], workers=1, progress=False))


# ---- time limits ----


def test_timeout_is_undecided_and_bounded():
    grade_answer("x+1", "1+x", timeout=10)  # warm the worker
    started = time.monotonic()
    grade = grade_answer("10^{10^{10^{10}}}", "5", timeout=1.0)
    elapsed = time.monotonic() - started
    assert grade.correct is None and grade.reason == "timeout"
    assert elapsed < 1.1
    assert grade_answer("2x", "x+x", timeout=10).correct is True  # worker recovered


def test_grade_answer_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(grade_answer("x^2", "x \\cdot x")))
    thread.start()
    thread.join(60)
    assert results and results[0].correct is True


def test_concurrent_threads_share_the_default_pool():
    with ThreadPoolExecutor(3) as executor:
        grades = list(executor.map(lambda k: grade_answer(f"{k}x", f"x*{k}"), range(1, 4)))
    assert all(g.correct for g in grades)


def _grade_in_daemon(queue):
    queue.put(grade_answer("\\sqrt{8}", "2\\sqrt{2}", timeout=20).correct)


def test_grade_answer_inside_a_daemonic_worker_process():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=_grade_in_daemon, args=(queue,), daemon=True)
    process.start()
    assert queue.get(timeout=90) is True
    process.join(10)


# ---- batch ----


def test_grade_many_keeps_order_and_caches_duplicates():
    pairs = [("x+x", "2x"), ("3", "4"), ("x+x", "2x"), ("\\frac{1}{2006!}", "\\frac{1}{2004!}")]
    grades = grade_many(pairs, workers=2, timeout=10, progress=False)
    assert [g.correct for g in grades] == [True, False, True, False]
    assert grades[0] == grades[2]


# ---- CLI ----


def test_cli_grade_explain_and_summary(tmp_path, capsys):
    out = tmp_path / "graded.jsonl"
    assert main(["grade", str(FIXTURES / "pairs.jsonl"), "-o", str(out), "--explain"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["correct"] for r in rows] == [True, True, False, False, True]
    assert rows[3]["reason"] == "exact-unequal"
    assert rows[1]["given_extracted"] == "10,\\!080" and rows[1]["given_normalised"] == "10080"
    assert main(["grade", str(FIXTURES / "pairs.jsonl"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == {"n": 5, "correct": 3, "incorrect": 2, "undecided": 0}


def test_cli_bad_line_fails_without_output(tmp_path, capsys):
    out = tmp_path / "graded.jsonl"
    assert main(["grade", str(FIXTURES / "bad.jsonl"), "-o", str(out)]) == 2
    assert "bad.jsonl:2: field 'given'" in capsys.readouterr().err
    assert not out.exists()


def test_cli_skip_bad(tmp_path, capsys):
    assert main(["grade", str(FIXTURES / "bad.jsonl"), "--skip-bad", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 1
    assert "bad.jsonl:2" in captured.err and "bad.jsonl:3" in captured.err


# ---- real data ----


@pytest.mark.slow
def test_math500_self_agreement(shared_data):
    from bench_grading import load_math500_answers, math500_pairs

    answers = load_math500_answers(shared_data / "math" / "math500.jsonl")
    equal, unequal = math500_pairs(answers)
    grades = grade_many([(g, t) for g, t, _ in equal + unequal], workers=2, timeout=5, progress=False)
    self_agreement = sum(g.correct is True for g in grades[: len(equal)]) / len(equal)
    cross_agreement = sum(g.correct is False for g in grades[len(equal) :]) / len(unequal)
    assert len(equal) >= 4 * len(answers)
    assert self_agreement >= 0.995
    assert cross_agreement >= 0.995


# ---- a generated solution must state its final answer ----


@pytest.mark.parametrize(
    "steps",
    [["Let $x = 3$.", "It"], ["We try again.", "So"], ["Thus $x = 5$."], ["Step.", "# Answer"]],
)
def test_generated_sample_without_a_final_answer_has_no_answer(steps):
    assert extract_answer(steps) is None
    grade = grade_answer(steps, "5", last_line=False)
    assert grade.correct is False and grade.reason == "no-answer"


def test_last_line_is_the_answer_only_when_asked():
    assert extract_answer(["Let $x = 3$.", "It"], last_line=True) == "It"
    assert extract_answer("Thus $x = 5$.", last_line=True) == "x = 5"
    assert grade_answer(["Thus $x = 5$."], "5").correct is True  # human-written text


@pytest.mark.parametrize(
    "steps",
    [
        ["Add.", "# Answer\n\n5"],
        ["Add.", "So $x = \\boxed{5}$."],
        ["Add.", "The answer is $5$."],
        ["Add.", "Final Answer: 5"],
    ],
)
def test_generated_sample_with_a_stated_answer_keeps_it(steps):
    assert extract_answer(steps) == "5"
    assert grade_answer(steps, "5", last_line=False).correct is True


def test_grade_many_reads_generated_samples_strictly_and_golds_by_their_last_line():
    pairs = [(["Step.", "5"], "5"), (["Step.", "# Answer\n\n5"], "The sum is\n5")]
    strict = grade_many(pairs, workers=1, progress=False, last_line=False)
    assert [(g.correct, g.reason) for g in strict] == [(False, "no-answer"), (True, "exact")]
    assert grade_many(pairs[:1], workers=1, progress=False)[0].correct is True
