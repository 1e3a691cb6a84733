"""What a student's submission holds: the file read as a notebook, refused with the reason when it is not one
(:func:`read_submission`), and each exercise's answer cells, matched to the chapter by cell id or by order, with
notes on everything else the student changed, which the grader ignores (:func:`answers`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .cells import STUDENT_STUB, CourseError
from .cells import is_solution as _is_solution
from .exercises import Exercise

MAX_BYTES = 50 * 1024 * 1024  # a bigger submission is refused unread


def read_submission(path: Path) -> Any:
    """The submission as a notebook; CourseError with the reason when it is not one (or too big)."""
    import nbformat

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
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()), "")
    return (line[:57] + "...") if len(line) > 60 else line


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _answer_cells(theirs: list, ours: list, exs: list[Exercise], by_id: dict) -> list[tuple[int | None, int | None]]:
    """For each exercise, the submission's (your-turn cell, stub cell) indices: by cell id, else by the order of
    the solution-tagged cells (a your-turn cell is then the code cell just before the stub); None where missing."""
    stubs = [j for j, c in enumerate(theirs) if _is_solution(c)]
    by_order = len(stubs) == len(exs)
    found = []
    for k, ex in enumerate(exs):
        sol_id = ours[ex.solution_index].get("id")
        stub = by_id.get(sol_id) if sol_id else None
        if stub is None and by_order:
            stub = stubs[k]
        turn = None
        if ex.answer_index is not None:
            turn_id = ours[ex.answer_index].get("id")
            turn = by_id.get(turn_id) if turn_id else None
            if turn is None and stub is not None and stub > 0 and theirs[stub - 1].get("cell_type") == "code" \
                    and not _is_solution(theirs[stub - 1]):
                turn = stub - 1
        found.append((turn, stub))
    return found


def _differences(theirs: list, ours: list, used: set[int], by_id: dict) -> list[str]:
    """Notes on the submission's other cells, compared with the chapter's student copy cell by cell (ids where both
    have them): changed, added, or the chapter's cells gone."""
    notes = []
    chapter_text = {c.get("source", "").strip() for c in ours} | {STUDENT_STUB.strip()}
    chapter_ids = {c.get("id"): c for c in ours if c.get("id")}
    for j, cell in enumerate(theirs):
        if j in used:
            continue
        source = _source(cell)
        mine = chapter_ids.get(cell.get("id")) if cell.get("id") else None
        if mine is not None:
            expected = STUDENT_STUB if _is_solution(mine) else mine.get("source", "")
            if source.strip() != expected.strip():
                notes.append(f"cell {j + 1} ({cell.get('cell_type')}, {_first_line(source)!r}): changed; ignored, "
                             "the chapter's own cell was used")
        elif source.strip() not in chapter_text:
            notes.append(f"cell {j + 1} ({cell.get('cell_type')}, {_first_line(source)!r}): added; ignored (answers "
                         "go into the exercise cells)")
    if chapter_ids and by_id:
        gone = [i for i, c in enumerate(ours) if c.get("id") and c["id"] not in by_id and not _is_solution(c)]
        if gone:
            notes.append(f"{len(gone)} of the chapter's cells are not in the submission (deleted or re-created); "
                         "the chapter's own were used")
    return notes


def answers(student: Any, chapter: Any, exs: list[Exercise]) -> tuple[dict[int, list[str] | None], list[str]]:
    """Each exercise's answer sources (the "your turn" cell, then the stub cell if the student wrote in it; None when
    both are gone), and notes on what else differs from the chapter (ignored by the grader)."""
    theirs = list(student.get("cells", []))
    ours = chapter["cells"]
    by_id = {c.get("id"): j for j, c in enumerate(theirs) if c.get("id")}
    used: set[int] = set()
    found: dict[int, list[str] | None] = {}
    notes: list[str] = []
    for ex, (turn, stub) in zip(exs, _answer_cells(theirs, ours, exs, by_id)):
        sources = []
        for j in (turn, stub):
            if j is None:
                continue
            used.add(j)
            source = _source(theirs[j])
            if source.strip() and source.strip() != STUDENT_STUB.strip():
                sources.append(source)
        found[ex.number] = sources if (turn is not None or stub is not None) else None
        if found[ex.number] is None:
            notes.append(f"{ex.title}: its cells are missing from the submission (deleted?), so nothing was graded")
    return found, notes + _differences(theirs, ours, used, by_id)
