"""What a student's submission holds: the file read as a notebook, refused with the reason when it is not one
(:func:`read_submission`), and each exercise's answer cells, found as the learner saved them (by the chapter's cell
ids where the notebook kept them, by the names the exercise defines, between its title and its check), never by
position: nbformat 4.0-4.5, Colab's ids in ``metadata.id``, deleted, added or moved cells; with notes on everything
else the student changed, which the grader ignores (:func:`answers`)."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from .._syntax import parse
from .cells import STUDENT_STUB, CourseError
from .cells import is_solution as _is_solution
from .exercises import Exercise, defined_names
from .quiz_hand_in import grade_quiz, is_hand_in_cell

MAX_BYTES = 50 * 1024 * 1024  # a bigger submission is refused unread


def read_submission(path: Path) -> Any:
    """The submission as a notebook; CourseError with the reason when it is not one (or too big)."""
    import nbformat

    if path.is_symlink():  # it may point at what the student must not hand in as theirs (the chapter itself)
        raise CourseError("the file is a symbolic link, not a notebook: hand in the notebook itself")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise CourseError(f"the file is {size / 2**20:.0f} MB, over the grader's {MAX_BYTES // 2**20} MB limit")
    if size == 0:
        raise CourseError("the file is empty (0 bytes)")
    try:
        nb = nbformat.read(path, as_version=4)
        cells = nb["cells"]
        if not isinstance(cells, list) or not all(isinstance(c, dict) and "cell_type" in c for c in cells):
            raise ValueError("its cells are not notebook cells")
    except Exception as exc:  # not JSON, not a notebook, a notebook from another planet
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CourseError(f"not a notebook Jupyter can read ({first})") from None
    return nb


def _first_line(source: str) -> str:
    """The line that names a cell on a feedback page: its first, past the markers of the tools (``# NBVAL_...``,
    ``#@title``) that say nothing to a student."""
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()
                 and not ln.strip().startswith(("# NBVAL", "#@title"))), "")
    return (line[:57] + "...") if len(line) > 60 else line


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def cell_id(cell: Any) -> str | None:
    """A cell's id: nbformat 4.5's ``id``, else the ``metadata.id`` Colab keeps; None in a 4.0-4.4 notebook saved
    without one (older Jupyter)."""
    return cell.get("id") or (cell.get("metadata") or {}).get("id") or None


def _checker_called(source: str) -> set[str]:
    try:
        tree = parse(source)
    except SyntaxError:
        return set()
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def _comment_only(source: str) -> bool:
    return all(not ln.strip() or ln.strip().startswith("#") for ln in source.splitlines())


class _Cells:
    """A submission's cells as the grader reads them: where each exercise's title and check stand (its region), which
    cells are the chapter's own (verbatim) and which define an exercise's names."""

    def __init__(self, theirs: list, ours: list, exs: list[Exercise]):
        self.theirs = theirs
        exercise_cells = {i for ex in exs for i in (ex.answer_index, ex.solution_index) if i is not None}
        self.chapter_text = {_source(c).strip() for i, c in enumerate(ours) if i not in exercise_cells}
        self.hand_in = {j for j, c in enumerate(theirs) if is_hand_in_cell(c)}  # the quiz's: graded on their own
        self.code = [j for j, c in enumerate(theirs) if c.get("cell_type") == "code" and j not in self.hand_in]
        self.ids = {cell_id(c): j for j, c in enumerate(theirs) if cell_id(c)}
        self.names = {j: defined_names(_source(theirs[j])) for j in self.code}
        titles = [self._title(ex) for ex in exs]
        checks = self._checks(exs)
        anchors = sorted(a for a in titles + checks if a is not None)
        self.regions = {}
        for ex, title, check in zip(exs, titles, checks):
            if title is None and check is None:
                self.regions[ex.number] = range(0)
                continue
            start = title + 1 if title is not None else max([a + 1 for a in anchors if a < check], default=0)
            end = check if check is not None else min([a for a in anchors if a > title], default=len(theirs))
            self.regions[ex.number] = range(start, max(start, end))

    def _title(self, ex: Exercise) -> int | None:
        """The markdown cell that heads ``ex`` ("### Exercise 1: split the heads")."""
        heading = re.compile(r"^#+\s*" + re.escape(ex.title) + r"\s*$", re.MULTILINE)
        return next((j for j, c in enumerate(self.theirs) if c.get("cell_type") == "markdown"
                     and heading.search(_source(c))), None)

    def _checks(self, exs: list[Exercise]) -> list[int | None]:
        """The cell calling each exercise's checker; a checker two exercises share is matched in order."""
        calls = {j: _checker_called(_source(self.theirs[j])) for j in self.code}
        found: list[int | None] = []
        for ex in exs:
            after = max([f for f, e in zip(found, exs) if f is not None and e.checker == ex.checker], default=-1)
            found.append(next((j for j in self.code if j > after and ex.checker in calls[j]), None))
        return found

    def chapters_own(self, j: int) -> bool:
        return _source(self.theirs[j]).strip() in self.chapter_text

    def written(self, j: int) -> bool:
        """Whether code cell ``j`` holds code of the learner's (not a comment-only stub, not a chapter cell)."""
        source = _source(self.theirs[j])
        return not _comment_only(source) and not self.chapters_own(j)


def _answer_cells(cells: _Cells, ours: list, exs: list[Exercise]) -> dict[int, list[int] | None]:
    """For each exercise, the submission's cells that hold its answer, in the submission's order; None when none is
    there. Found, in this order of trust: by the chapter's cell ids (``id`` or Colab's ``metadata.id``); by the names
    the exercise defines (``split_heads``), in its region (between its title and its check) first, anywhere else
    next; a stub tagged ``solution`` the learner wrote in; and, when none defines the names, the first cell of
    learner's code in its region. Never by position alone, so deleted, added or moved cells change nothing."""
    used: set[int] = set()
    found: dict[int, list[int] | None] = {}
    for ex in exs:
        region = cells.regions[ex.number]
        by_id = [cells.ids.get(cell_id(ours[i])) for i in (ex.answer_index, ex.solution_index) if i is not None
                 and cell_id(ours[i])]
        mine = {j for j in by_id if j is not None and cells.theirs[j].get("cell_type") == "code"}
        definers = [j for j in cells.code if set(ex.names) & cells.names[j] and not cells.chapters_own(j)]
        near = [j for j in definers if j in region]
        mine |= set(near or (definers if not mine else []))
        mine |= {j for j in region if j in cells.code and _is_solution(cells.theirs[j]) and cells.written(j)}
        mine -= used
        if not mine:
            mine = {next((j for j in region if j in cells.code and j not in used and cells.written(j)), -1)} - {-1}
        used |= mine
        # nothing to run: the check still runs (and names what is undefined) while a cell of the exercise stands
        gone = not any(j in cells.code and not cells.chapters_own(j) for j in region)
        found[ex.number] = sorted(mine) if mine or not gone else None
    return found


def _differences(cells: _Cells, ours: list, exs: list[Exercise], used: set[int]) -> list[str]:
    """Notes on the submission's other cells, compared with the chapter's student copy (by id where one matches, by
    text otherwise): changed, added, or the chapter's cells gone."""
    notes = []
    chapter_text = cells.chapter_text | {STUDENT_STUB.strip()}
    chapter_ids = {cell_id(c): c for c in ours if cell_id(c)}
    for j, cell in enumerate(cells.theirs):
        if j in used or j in cells.hand_in:
            continue
        source = _source(cell)
        mine = chapter_ids.get(cell_id(cell)) if cell_id(cell) else None
        if mine is not None:
            expected = STUDENT_STUB if _is_solution(mine) else _source(mine)
            if source.strip() != expected.strip() and not (_is_solution(mine) and _comment_only(source)):
                notes.append(f"cell {j + 1} ({cell.get('cell_type')}, {_first_line(source)!r}): changed; ignored, "
                             "the chapter's own cell was used")
        elif source.strip() not in chapter_text:
            notes.append(f"cell {j + 1} ({cell.get('cell_type')}, {_first_line(source)!r}): added; ignored (answers "
                         "go into the exercise cells)")
    exercise_cells = {i for ex in exs for i in (ex.answer_index, ex.solution_index) if i is not None}
    theirs_text = {_source(c).strip() for c in cells.theirs}
    gone = [i for i, c in enumerate(ours) if i not in exercise_cells and cell_id(c) not in cells.ids
            and _source(c).strip() not in theirs_text]
    if gone:
        notes.append(f"{len(gone)} of the chapter's cells are not in the submission (deleted or changed); the "
                     "chapter's own were used")
    return notes


def answers(student: Any, chapter: Any, exs: list[Exercise]) -> tuple[dict[int, list[str] | None], list[str]]:
    """Each exercise's answer sources, in the submission's order (the "your turn" cell, and the stub cell if the
    learner wrote in it; wherever the learner put them: see :func:`_answer_cells`), None when its cells are gone; and
    notes on what else differs from the chapter (ignored by the grader)."""
    ours = chapter["cells"]
    cells = _Cells(list(student.get("cells", [])), ours, exs)
    found: dict[int, list[str] | None] = {}
    notes: list[str] = []
    located = _answer_cells(cells, ours, exs)
    for ex in exs:
        where = located[ex.number]
        if where is None:
            found[ex.number] = None
            notes.append(f"{ex.title}: its cells are missing from the submission (deleted?), so nothing was graded")
            continue
        found[ex.number] = [_source(cells.theirs[j]) for j in where if not _comment_only(_source(cells.theirs[j]))]
    used = {j for where in located.values() for j in where or ()}
    return found, notes + _differences(cells, ours, exs, used)


def quiz_of(path: Path, cid: str) -> Any:
    """The quiz line of the submission at ``path``: its hand-in read as text, never run (:mod:`.quiz_hand_in`); a
    file that cannot be read scores 0 with the reason."""
    try:
        return grade_quiz(read_submission(path), cid)
    except (CourseError, OSError) as exc:
        return grade_quiz(None, cid, f"not graded: {exc}")
