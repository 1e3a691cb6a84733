"""The quiz handed in: the cell a learner writes the letters into, and the grader's reading of it.

A student copy (and each export) has, right after a chapter's quiz cell, a code cell tagged ``quiz-answers``::

    my_quiz = T.quiz.hand_in("03", "")   # one letter per question between the quotes: "BAC"

The grader never runs it: :func:`read_hand_in` reads the letters from the cell's text with :mod:`ast` (the
tag finds the cell; where a tool dropped tags, the ``hand_in("03", ...)`` call does). A call whose letters are not
written in quotes, or no call at all, is "not handed in". :func:`grade_quiz` turns the letters into one more
line of the grades: ``Quiz 03``, a point per right answer.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from .._syntax import parse
from .cells import tags as _tags
from .quiz import QUIZ_CALL, is_quiz_cell, quiz_score

__all__ = ["HAND_IN_TAG", "hand_in_source", "add_hand_in_cells", "is_hand_in_cell", "untouched_hand_ins",
           "read_hand_in", "chapter_quiz", "QuizItem", "QuizResult", "quiz_item", "grade_quiz"]

HAND_IN_TAG = "quiz-answers"
_HAND_IN_CALL = re.compile(r"""\bhand_in\(\s*["'](\d\d)["']""")


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source  # nbformat's JSON may store a list of lines


def hand_in_source(quiz_source: str, cid: str) -> str:
    """The hand-in cell for the quiz cell ``quiz_source`` (whose ``...quiz.show(...)`` names the module the same
    way: ``T.quiz``), its letters empty."""
    found = re.search(r"([\w.]*quiz)\.show\(", quiz_source)
    module = found.group(1) if found else "T.quiz"
    return ("# Hand in the quiz: your letter for each question above, in order, between the quotes (\"BAC\"; \"?\"\n"
            "# skips one). Running the cell shows what it recorded; the quiz itself says which answers are right.\n"
            f"my_quiz = {module}.hand_in(\"{cid}\", \"\")\n")


def is_hand_in_cell(cell: Any) -> bool:
    """A code cell tagged ``quiz-answers`` or calling ``hand_in("NN", ...)``."""
    return cell.get("cell_type") == "code" and (HAND_IN_TAG in _tags(cell) or bool(_HAND_IN_CALL.search(_source(cell))))


def add_hand_in_cells(nb: Any) -> Any:
    """``nb`` with a hand-in cell after each quiz cell that has none after it (in place; returned). The new cell
    has no stored output."""
    import nbformat

    cells = nb["cells"]
    with_ids = any("id" in c for c in cells)
    i = 0
    while i < len(cells):
        cell = cells[i]
        if is_quiz_cell(cell) and not (i + 1 < len(cells) and is_hand_in_cell(cells[i + 1])):
            cid = QUIZ_CALL.search(_source(cell)).group(1)
            new = {"cell_type": "code", "execution_count": None, "metadata": {"tags": [HAND_IN_TAG]}, "outputs": [],
                   "source": hand_in_source(_source(cell), cid)}
            if with_ids:  # nbformat 4.5: every cell has a unique id
                new["id"] = f"quiz-answers-{cid}"
            cells.insert(i + 1, nbformat.from_dict(new))
            i += 1
        i += 1
    return nb


def untouched_hand_ins(chapter: Any) -> set[str]:
    """The sources of the hand-in cells :func:`add_hand_in_cells` gives ``chapter``, letters still empty."""
    return {hand_in_source(_source(c), QUIZ_CALL.search(_source(c)).group(1))
            for c in chapter["cells"] if is_quiz_cell(c)}


def chapter_quiz(chapter: Any) -> str | None:
    """The chapter's quiz (``"03"``): the one its quiz cell shows; None without one."""
    for cell in chapter["cells"]:
        if is_quiz_cell(cell):
            return QUIZ_CALL.search(_source(cell)).group(1)
    return None


def _calls(source: str, cid: str) -> list[ast.Call]:
    """The top-level ``hand_in("NN", ...)`` calls of a cell (a statement, or the value it assigns), in order."""
    try:
        body = parse(source).body
    except SyntaxError:
        return []
    found = []
    for node in body:
        value = node.value if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
        if not isinstance(value, ast.Call):
            continue
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "chapter"), None)
        chapter = first.value if isinstance(first, ast.Constant) else None
        if name == "hand_in" and (chapter == cid or (type(chapter) is int and f"{chapter:02d}" == cid)):
            found.append(value)
    return found


def read_hand_in(nb: Any, cid: str) -> tuple[str | None, str]:
    """``(letters, "")`` from the last ``hand_in("NN", "...")`` call of the submission ``nb`` (where the kernel
    would leave it), read as text, never run; ``(None, why)`` when there is none or its letters are not a string
    written in quotes."""
    calls = [call for cell in nb["cells"] if cell.get("cell_type") == "code" for call in _calls(_source(cell), cid)]
    if not calls:
        tagged = any(HAND_IN_TAG in _tags(c) for c in nb["cells"])
        where = f"the {HAND_IN_TAG} cell" if tagged else "the notebook"
        return None, (f"{where} has no hand_in(\"{cid}\", \"...\") call: the letters go between the quotes of the "
                      "cell after the quiz")
    call = calls[-1]
    letters = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "letters"), None)
    if len(call.args) + len(call.keywords) != 2:
        return None, f"hand_in takes the chapter and the letters, nothing else: hand_in(\"{cid}\", \"BAC\")"
    if not (isinstance(letters, ast.Constant) and isinstance(letters.value, str)):
        return None, "the letters must be written in quotes in the hand_in call itself (\"BAC\"), not computed"
    return letters.value, ""


@dataclass(frozen=True)
class QuizItem:
    """The quiz as a line of the grades: its title and its points (one a question)."""

    title: str
    points: int


@dataclass
class QuizResult:
    """A submission's quiz: ``points`` answers right out of ``exercise.points`` questions."""

    exercise: QuizItem
    right: int = 0
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.right == self.exercise.points

    @property
    def points(self) -> int:
        return self.right


def quiz_item(cid: str) -> QuizItem:
    """The line ``Quiz NN`` of chapter ``cid``'s grades."""
    return QuizItem(f"Quiz {cid}", quiz_score(cid, None)[1])


def grade_quiz(nb: Any | None, cid: str, why: str = "") -> QuizResult:
    """The quiz line of the submission ``nb`` (None: unreadable, for ``why``)."""
    letters, reason = read_hand_in(nb, cid) if nb is not None else (None, why)
    right, total, message = quiz_score(cid, letters)
    if letters is None and reason:
        message = f"{message}: {reason}"
    return QuizResult(QuizItem(f"Quiz {cid}", total), right, message)
