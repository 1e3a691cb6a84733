"""The chapter's quiz in the nbgrader and Otter exports: after the quiz cell, the learner's hand-in cell
(:mod:`.quiz_hand_in`) and the tool's test of it, a point per right answer, so that each tool gives a submission
the quiz score ``course grade`` gives it.

Both tests run in the submission's kernel, as those tools run every test: they read what ``hand_in`` recorded
there (``tfm_lesson.course.quiz.HANDED_IN``, whatever name its result was bound to) and score it with the
package's quiz data. No right answer is written into the exports (the package holds them, and the quiz shows them).
"""
from __future__ import annotations

import json

from .quiz import load_quiz

__all__ = ["nbgrader_quiz_test", "otter_quiz_tests", "quiz_points"]


def quiz_points(cid: str) -> int:
    """The quiz's points: one a question."""
    return len(load_quiz(cid))


def nbgrader_quiz_test(cid: str) -> str:
    """nbgrader's test cell: it prints which questions are right and ends on the number right, which nbgrader takes
    as the cell's partial credit (out of the cell's points, one a question)."""
    return "\n".join([
        f"# Quiz {cid}: a point per right answer handed in above (nbgrader counts the number this cell shows).",
        "import tfm_lesson.course.quiz as _quiz",
        f"_right, _questions, _message = _quiz.quiz_score({cid!r}, _quiz.HANDED_IN.get({cid!r}))",
        "print(_message)",
        "_right",
    ])


def otter_quiz_tests(cid: str) -> list[str]:
    """Otter's test cases, one a question and worth 1 point: each passes when that question's letter is right."""
    tests = []
    for n in range(1, quiz_points(cid) + 1):
        message = (f"Quiz {cid}, question {n}: not right, unanswered, or the quiz was not handed in (the cell after "
                   "the quiz)")
        tests.append("\n".join([
            '""" # BEGIN TEST CONFIG', "points: 1", f"failure_message: {json.dumps(message)}", '""" # END TEST CONFIG',
            f"def test_quiz{cid}_{n}():",
            "    import tfm_lesson.course.quiz as quiz",
            f"    marks, why = quiz.handed_in_marks({cid!r}, quiz.HANDED_IN.get({cid!r}))",
            f"    assert marks[{n - 1}] is True, why or {f'question {n}: '!r} + (",
            f"        'unanswered' if marks[{n - 1}] is None else 'not right')",
            "", f"test_quiz{cid}_{n}()"]))
    return tests
