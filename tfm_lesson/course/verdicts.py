"""A check, graded where the student's code never ran (the grader's side of :mod:`tfm_lesson.checks._replay`).

The submission's kernel runs :func:`check_cell`'s code: the chapter's checker, *recorded*, with the student's answers
behind handles; the record (plain JSON, no pickle) goes to a file in the kernel's scratch folder. The grader then
reads that file (:func:`read_trace`: a regular file, not a link, under :data:`~tfm_lesson.checks._replay.TRACE_LIMIT`)
and replays the checker in its own process (:func:`verdict`): the comparison, the named mistake and the pass all
happen here, with the source rules read from the code the grader extracted. Nothing the student's code does to
``print``, ``importlib``, ``torch`` or IPython inside the kernel reaches this process; a forged record can only
hand the checker other outputs, which earn what those outputs earn.
"""
from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from .. import checks
from ..checks._replay import TRACE_LIMIT, replay_scored
from ..checks._rules_static import CELL_SEPARATOR
from .._syntax import parse
from .cells import CourseError
from .exercises import Exercise

__all__ = ["CheckCall", "check_call", "check_cell", "chapter_checkers", "seeded", "read_trace", "verdict",
           "CELL_SEPARATOR"]


class CheckCall:
    """An exercise's check call, split: the answers' source expressions, their names, the literal keywords."""

    def __init__(self, answers: list[str], names: list[str], keywords: dict[str, Any]) -> None:
        self.answers, self.names, self.keywords = answers, names, keywords


def check_call(ex: Exercise) -> CheckCall:
    """``check_x(answer, flag=True)`` of the chapter's check cell, split. CourseError for a keyword that is not a
    literal (the grader passes keywords as data, never as code of the student's kernel)."""
    call = parse(f"f({ex.arguments})", mode="eval").body
    answers = [ast.unparse(a) for a in call.args]
    names = [a.id if isinstance(a, ast.Name) else "" for a in call.args]
    keywords = {}
    for k in call.keywords:
        try:
            keywords[k.arg] = ast.literal_eval(k.value)
        except ValueError:
            raise CourseError(f"{ex.title}: the check's keyword {k.arg}= must be a literal (a number, string, "
                              f"True/False/None, or a list of them), not {ast.unparse(k.value)}") from None
    return CheckCall(answers, names, keywords)


def _binds_checkers(source: str) -> set[str]:
    try:
        tree = parse(source)
    except SyntaxError:
        return set()
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return {n for n in names if n.startswith("check_")}


def chapter_checkers(chapter: Any, exs: list[Exercise], sources: list[str]) -> dict[str, Callable]:
    """Each exercise's checker: one the chapter defines (``check_x = make_checker(...)`` or ``def check_x(fn)`` in a
    cell of its own, not an exercise's), else the package's. A chapter's checkers are the instructor's code: they are
    built here, in the grader's process, from ``sources`` (the chapter's definitions, as the kernel runs them).
    CourseError, before anything runs, for a checker found nowhere."""
    namespace: dict[str, Any] = {"__name__": "tfm_lesson_chapter"}
    if any(_binds_checkers(source) for source in sources):
        for source in sources:
            try:
                exec(compile(source, "<chapter>", "exec"), namespace)  # noqa: S102 - the instructor's chapter
            except Exception:  # a definition that needs what the chapter computes: as in the kernel, skipped
                pass
    found: dict[str, Callable] = {}
    for ex in exs:
        fn = namespace.get(ex.checker) if callable(namespace.get(ex.checker)) else getattr(checks, ex.checker, None)
        if not callable(fn):
            raise CourseError(f"{ex.title}: its check calls {ex.checker}, which is neither a checker of "
                              f"tfm_lesson.checks nor defined in the chapter (in a cell before the exercise: "
                              f"`{ex.checker} = make_checker(...)`, see the instructors' page)")
        found[ex.checker] = fn
    return found


def check_cell(ex: Exercise, trace: Path, own: bool = False, keywords: dict | None = None,
               salt: int | None = None) -> str:
    """The code the kernel runs for ``ex``'s check: record the checker into ``trace``. ``own``: the chapter defines
    the checker (the kernel ran its definition), else the package's is used; ``keywords`` are passed to it."""
    call = check_call(ex)
    checker = ex.checker if own else f"_tfm_checks.{ex.checker}"
    return (f"import tfm_lesson.checks as _tfm_checks\n"
            f"from tfm_lesson.checks._replay import record as _tfm_record\n"
            f"_tfm_record({checker}, [{', '.join(call.answers)}], {dict(call.keywords, **(keywords or {}))!r}, "
            f"{str(trace)!r}, {ex.checker!r}, {salt!r})\n")


def seeded(checker: Callable, ex: Exercise, seed: int | None) -> dict:
    """``{"seed": seed}`` when the checker draws its inputs from a ``seed`` and the chapter's check call does not
    fix one: the grader's own seed, so outputs learnt by heart for the notebook's inputs do not pass."""
    import inspect

    if seed is None or "seed" in check_call(ex).keywords:
        return {}
    try:
        return {"seed": seed} if "seed" in inspect.signature(checker).parameters else {}
    except (TypeError, ValueError):
        return {}


def read_trace(path: Path) -> Any:
    """The kernel's record, or None when there is none. Only a regular file, never through a link, at most
    TRACE_LIMIT bytes; ValueError for anything else."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a pipe would block the grader, a link lead elsewhere
            raise ValueError("the record is not a regular file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"the record cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("the record is not a regular file")
        if info.st_size > TRACE_LIMIT:
            raise ValueError(f"the record is over {TRACE_LIMIT >> 20} MB")
        try:
            return json.loads(f.read(TRACE_LIMIT + 1))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(f"the record is not JSON ({type(exc).__name__})") from None


def verdict(ex: Exercise, trace_path: Path, code: list[str], error: str | None, checker: Callable | None = None,
            keywords: dict | None = None, salt: int | None = None) -> tuple[bool, str, float, str]:
    """(passed, message, credit, checks) of ``ex``, replayed from the kernel's record in this process. ``code`` is what
    the grader extracted and ran before the check (the source rules read it); ``error`` what the check cell raised, if
    any. ``credit`` is the fraction of the exercise's points earned (1 when it passed; for a checker with named
    checks, the weight of those it passed, computed here as it replays; else 0), ``checks`` says which passed
    ("2 of 3 checks passed: shape, values; failed: masked positions"; "" for a checker without named checks)."""
    if error:  # the record did not end well: whatever file is there is not this check's record
        if error.startswith("NameError"):
            return False, f"{error}: the exercise cell must define it (keep the name the exercise asks for)", 0.0, ""
        return False, f"the check gave no verdict ({error})", 0.0, ""
    try:
        trace = read_trace(trace_path)
    except ValueError as exc:
        return False, f"the check's record could not be read: {exc}", 0.0, ""
    if trace is None:
        return False, "the check gave no verdict (no record)", 0.0, ""
    call = check_call(ex)
    checker = checker if checker is not None else getattr(checks, ex.checker, None)
    if not callable(checker):
        return False, f"the package has no checker {ex.checker}", 0.0, ""
    passed, message, credit, tally = replay_scored(checker, trace, dict(call.keywords, **(keywords or {})),
                                                   CELL_SEPARATOR.join(code), call.names, salt)
    return passed, message, credit, tally.summary() if tally is not None and not passed else ""
