"""The plan of one submission's grading: which cells run in its kernel, in which order (the chapter's definitions,
the student's answers, a check after each exercise, the chapter's solution where an exercise failed), and how each
exercise is checked (:class:`Checking`). Run by :mod:`.grading`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

from .. import checks
from .cells import is_setup_cell
from .exercises import Exercise, chapter_definitions, chapter_sources
from .verdicts import chapter_checkers, check_cell, seeded

__all__ = ["Step", "Checking"]


# the plan of one submission -----------------------------------------------------------------------------------------
class Step(NamedTuple):
    """One cell to run: a chapter definition, an answer cell, a check, or the chapter's solution of an exercise that
    did not pass (``exercise`` None for the chapter's definitions)."""

    kind: str  # "chapter", "answer", "check" or "reference"
    exercise: Exercise | None
    source: str


@dataclass
class Checking:
    """How a chapter's exercises are checked: each one's checker (the chapter's own or the package's), which ones
    the chapter defines, the keywords the grader adds (its seed) and the salt of every seed the checkers set (the
    same seed: inputs no submission saw before, drawn again with ``--seed``)."""

    checkers: dict[str, Callable]
    own: set[str]
    keywords: dict[int, dict]
    salt: int | None  # mixed into every seed a checker sets (tfm_lesson.checks._salt); None: the notebook's inputs
    solutions: bool = True  # the chapter's solution of a failed exercise stands in for the student's (False: never)

    @classmethod
    def of(cls, chapter: Any, exs: list[Exercise], seed: int | None = None, solutions: bool = True) -> "Checking":
        sources = chapter_sources(chapter, exs)
        checkers = chapter_checkers(chapter, exs, sources)
        own = {name for name, fn in checkers.items() if fn is not getattr(checks, name, None)}
        return cls(checkers, own, {ex.number: seeded(checkers[ex.checker], ex, seed) for ex in exs}, seed, solutions)


def _plan(chapter: Any, exs: list[Exercise], found: dict[int, list[str] | None], scratch: Path,
          checking: Checking, token: str) -> list[Step]:
    """The chapter's definitions and the answers in chapter order, a check after each exercise."""
    plan: list[Step] = []
    skip = {i for ex in exs for i in (ex.answer_index, ex.solution_index, ex.check_index) if i is not None}
    by_solution = {ex.solution_index: ex for ex in exs}
    for i, cell in enumerate(chapter["cells"][:exs[-1].check_index + 1]):
        if i in by_solution:
            ex = by_solution[i]
            for source in found[ex.number] or []:
                plan.append(Step("answer", ex, source))
            plan.append(Step("check", ex, check_cell(ex, _trace_path(scratch, ex, token), ex.checker in checking.own,
                                                     checking.keywords[ex.number], checking.salt)))
            # once checked, the definitions of an exercise that did not pass make way for the chapter's solution:
            # each later exercise is graded with working pieces before it, so one bug (or one endless loop) costs one
            # exercise. Only then: code in the kernel can read what runs there, so a solution never reaches the
            # kernel of a student whose own answer passed
            if checking.solutions:
                plan.append(Step("reference", ex, chapter["cells"][i].get("source", "")))
        elif i not in skip and cell.get("cell_type") == "code" and not is_setup_cell(cell.get("source", "")):
            source = chapter_definitions(cell.get("source", ""))
            if source:
                plan.append(Step("chapter", None, source))
    return plan


def _trace_path(scratch: Path, ex: Exercise, token: str) -> Path:
    """Where the kernel writes the record of ``ex``'s check: its scratch folder, which the grader reads, under a name
    drawn for this submission (``token``), so that no answer cell can plant a record there beforehand."""
    return scratch / f"tfm-check-{ex.number}-{token}.json"
