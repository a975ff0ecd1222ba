"""prmkit.grading: final-answer extraction and conservative equivalence checking.

    from prmkit.grading import grade_answer, extract_answer, Grade, grade_many
"""

from prmkit.grading.extract import extract_answer
from prmkit.grading.grader import (
    DEFAULT_TIMEOUT_S,
    Grade,
    clear_cache,
    grade_answer,
    grade_many,
)
from prmkit.grading.normalize import answer_key, clean_answer

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Grade",
    "answer_key",
    "clean_answer",
    "clear_cache",
    "extract_answer",
    "grade_answer",
    "grade_many",
]
