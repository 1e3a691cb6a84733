"""Student copies: solutions taken out (with the stored outputs that show them), and put back by :func:`restore`
without losing what the learner wrote.
"""
from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Any

from .cells import STUDENT_STUB, CourseError, is_setup_cell, write_notebook
from .cells import is_solution as _is_solution
from .cells import is_stub as _is_stub
from .cells import tags as _tags
from .student_links import refuse_chapter_links, student_folder
from .solution_form import strip_title, unfold
from .location import _ANY_BADGE, REF, REPOSITORY, retarget, set_badge

# Tags a student copy adds to the checker cell after a solution, so "Run all" goes on past a failing check.
_ADDED_TAGS_KEY = "tfm_lesson_student_added_tags"
# Marks a cell whose stored output a student copy cleared because it shows results of the answers (_depends.py).
_CLEARED_KEY = "tfm_lesson_student_cleared"
# The tag of a cell in which `restore` keeps what a learner wrote in a solution stub.
KEPT_TAG = "learner-answer"
KEPT_HEADER = ("# Your code from the \"your turn\" cell, kept by `restore`. The reference solution is in the next cell\n"
               "# (folded: in JupyterLab click the bar at its left, in Colab click \"Show code\" under its title).\n")







# student copies ------------------------------------------------------------------------------------------------------
def _clear_outputs(cell: Any) -> None:
    cell["outputs"] = []
    cell["execution_count"] = None


def student_copy(nb: Any) -> Any:
    """A copy of notebook ``nb`` with every ``solution`` cell replaced by a short "your turn" stub.

    Every other cell whose stored output shows a result of the answers (the rule: :mod:`tfm_lesson.course._depends`)
    loses it too, marked so that :func:`restore` brings it back; so does the quiz cell, whose stored page holds the
    answers. After each quiz cell comes a cell to hand in its answers (:mod:`.quiz_hand_in`; no stored output).
    The checkers stay. The cell after a solution (its check) loses its stored output and is tagged
    ``raises-exception`` so that running the whole notebook goes on past a check that fails (it will,
    until the learner solves the exercise); the added tag is recorded so :func:`restore` can undo it.
    """
    from ._depends import answer_dependent_cells  # outputs that show results of answers not written yet

    dependent = answer_dependent_cells(nb["cells"], _is_solution)
    out = copy.deepcopy(nb)
    cells = out["cells"]
    for i, cell in enumerate(cells):
        if not _is_solution(cell):
            continue
        unfold(cell)  # the stub is for the learner to read: never folded, in JupyterLab or Colab
        cell["source"] = STUDENT_STUB
        _clear_outputs(cell)
        if i + 1 < len(cells) and cells[i + 1].get("cell_type") == "code" and not _is_solution(cells[i + 1]):
            check = cells[i + 1]
            _clear_outputs(check)
            meta = check.setdefault("metadata", {})
            if "raises-exception" not in meta.get("tags", []):
                meta.setdefault("tags", []).append("raises-exception")
                meta[_ADDED_TAGS_KEY] = ["raises-exception"]
    from .quiz import is_quiz_cell  # a quiz's stored page holds its answers: the learner runs the cell instead

    for i in [*dependent, *(j for j, c in enumerate(cells) if is_quiz_cell(c))]:
        if cells[i].get("outputs"):
            _clear_outputs(cells[i])
            cells[i].setdefault("metadata", {})[_CLEARED_KEY] = True
    from .quiz_hand_in import add_hand_in_cells

    return add_hand_in_cells(out)


def copy_chapter_answers(chapter: Any) -> Any:
    """A student copy of ``chapter`` with every solution typed into its "your turn" cell: a submission that should
    score full marks (used by the tests and to try the grader on a chapter)."""
    from .grading import exercises  # course -> grading, as the CLI's grade command

    out = student_copy(chapter)
    for ex in exercises(chapter):
        if ex.answer_index is not None:
            out["cells"][ex.answer_index]["source"] = strip_title(chapter["cells"][ex.solution_index]["source"])
    return out


def _describe(cell: Any | None) -> str:
    if cell is None:
        return "nothing (the notebook ends)"
    first = next((ln.strip() for ln in cell.get("source", "").splitlines() if ln.strip()), "")
    kind = "a solution cell" if _is_solution(cell) else f"a {cell.get('cell_type')} cell"
    return f"{kind} starting {first[:60]!r}" if first else f"an empty {cell.get('cell_type')} cell"


def _mismatch(i: int, theirs: Any | None, ours: Any | None, why: str) -> CourseError:
    return CourseError(
        f"cell {i + 1} differs from the chapter ({why}): the student copy has {_describe(theirs)}, the chapter "
        f"has {_describe(ours)}. Nothing was written. Put the notebook's cells back in the chapter's order "
        "(your own extra cells can go into the exercise cells), or copy the solutions across by hand.")


def restore(student: Any, original: Any) -> Any:
    """Put the solutions of ``original`` back into a student copy; with nothing changed the result equals ``original``.

    The learner's work stays: exercise cells are kept as written, and code typed into a "your turn" stub is
    kept in its own cell (tagged ``learner-answer``, headed by a comment) just before the restored solution.
    A cell handing in the quiz stays where it is (dropped while it is as the copy wrote it). The two notebooks must
    have the same structure (markdown cells, solution cells, the checks after them); on any difference
    :class:`CourseError` names the first cell that differs and nothing is returned.
    """
    if not any(_is_solution(c) and not _is_stub(c) for c in original["cells"]):
        raise CourseError("the chapter to restore from has no solutions (is it a student copy?)")
    from .quiz_hand_in import is_hand_in_cell, untouched_hand_ins

    ours = original["cells"]
    hand_in = not any(map(is_hand_in_cell, ours))  # the copy's quiz hand-in cells are kept, as the learner's cells
    out = copy.deepcopy(student)
    if hand_in:  # one the learner left as the copy wrote it goes: nothing changed, the chapter comes back whole
        out["cells"] = [c for c in out["cells"] if c.get("source") not in untouched_hand_ins(original)]

    def learners(c: Any) -> bool:
        return KEPT_TAG in _tags(c) or (hand_in and is_hand_in_cell(c))

    theirs = [c for c in out["cells"] if not learners(c)]
    kept_before = {id(c): [k for k in out["cells"][:j] if learners(k)] for j, c in enumerate(out["cells"])}
    cells: list[Any] = []
    for i in range(max(len(theirs), len(ours))):
        cell = theirs[i] if i < len(theirs) else None
        orig = ours[i] if i < len(ours) else None
        if cell is None or orig is None:
            raise _mismatch(i, cell, orig, "one notebook has more cells")
        if cell.get("cell_type") != orig.get("cell_type"):
            raise _mismatch(i, cell, orig, "different kinds of cell")
        if orig.get("cell_type") != "code":  # the same text; the badge may open the student copy instead
            if _ANY_BADGE.sub("", cell.get("source", "")).strip() != _ANY_BADGE.sub("", orig.get("source", "")).strip():
                raise _mismatch(i, cell, orig, "different text")
            cell["source"] = orig.get("source", "")
        elif is_setup_cell(cell.get("source", "")) and is_setup_cell(orig.get("source", "")):
            cell["source"] = orig.get("source", "")  # the chapter's own (a copy's may install another release)
        if _is_solution(cell) != _is_solution(orig):
            raise _mismatch(i, cell, orig, "a solution cell in one notebook only")
        meta = cell.get("metadata", {})
        added = meta.pop(_ADDED_TAGS_KEY, None)
        if meta.pop(_CLEARED_KEY, None) and not cell.get("outputs") and cell.get("source") == orig.get("source"):
            for key in ("outputs", "execution_count"):  # the chapter's outputs, which the student copy cleared
                if key in orig:
                    cell[key] = copy.deepcopy(orig[key])
        is_check = i > 0 and _is_solution(ours[i - 1]) and orig.get("cell_type") == "code" and not _is_solution(orig)
        if added and not is_check:
            raise _mismatch(i, cell, orig, "a check that follows no solution in the chapter")
        if is_check and not added and cell.get("source", "").strip() != orig.get("source", "").strip():
            raise _mismatch(i, cell, orig, "the chapter has the exercise's check here")
        if added:
            meta["tags"] = [t for t in meta.get("tags", []) if t not in added]
            if not meta["tags"]:
                del meta["tags"]
        # cells `restore` kept earlier go back where they were
        cells.extend(k for k in kept_before.get(id(cell), []) if not any(k is c for c in cells))
        if _is_solution(cell):
            source = cell.get("source", "")
            if source.strip() not in (STUDENT_STUB.strip(), orig.get("source", "").strip(), ""):
                kept = {"cell_type": "code", "execution_count": None, "outputs": [],
                        "metadata": {"tags": [KEPT_TAG]}, "source": KEPT_HEADER + source}
                if "id" in cell:  # nbformat 4.5 ids: unique, stable for the same text
                    kept["id"] = "mine-" + hashlib.sha1(source.encode()).hexdigest()[:12]
                cells.append(kept)
            for key in ("source", "outputs", "execution_count", "metadata"):
                if key in orig:
                    cell[key] = copy.deepcopy(orig[key])
        elif added and cell.get("source", "").strip() == orig.get("source", "").strip():
            for key in ("outputs", "execution_count"):  # the check as the chapter stores it
                if key in orig:
                    cell[key] = copy.deepcopy(orig[key])
        cells.append(cell)
    cells.extend(k for k in out["cells"] if learners(k) and not any(k is c for c in cells))
    out["cells"] = cells
    return out


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same file: same path, a symlink, a hard link, another case on a
    case-insensitive disk. A path that does not exist yet is compared by its resolved, case-folded name."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.normcase(str(a.resolve())).casefold() == os.path.normcase(str(b.resolve())).casefold()


def _is_chapter(path: Path) -> bool:
    """Whether ``path`` holds a chapter's solutions (solution cells, and no mark of a student copy)."""
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # not a notebook we can read: not a chapter
        return False
    student_marks = any(_is_stub(c) or _ADDED_TAGS_KEY in c.get("metadata", {}) or _CLEARED_KEY in c.get("metadata", {})
                        for c in nb.cells)
    return not student_marks and any(_is_solution(c) for c in nb.cells)


def write_student_copies(paths: list[Path], out_dir: Path, force: bool = False, repository: str | None = None,
                         ref: str | None = None) -> list[Path]:
    """Write a student copy of each chapter into ``out_dir`` (same file names); return their paths.

    Each copy's Colab badge opens the published student copy, ``<out_dir's name>/<chapter>`` at the release (e.g.
    ``student/03_….ipynb``), never the chapter with solutions; its set-up cell installs the same release.
    ``repository`` / ``ref`` (e.g. an instructor's fork and tag): badges and set-up cells point there instead of at
    :data:`REPOSITORY` / :data:`REF`.

    Refuses (:class:`CourseError`, nothing written) when a copy would land on a chapter (the same folder or
    file, through a symlink, or by a name differing only in case), on any notebook that holds solutions, or,
    unless ``force``, on an earlier student copy that has changed since it was written (a learner's work).
    """
    import nbformat

    plans = []
    sources = [Path(p) for p in paths]
    for path in sources:
        target = Path(out_dir) / path.name
        if _same_file(Path(out_dir), path.parent):
            raise CourseError(f"--out {out_dir} is the folder of {path}: the student copy would overwrite the "
                              "chapter. Choose another folder (the default is student/).")
        clash = next((s for s in sources if _same_file(target, s)), None)
        if clash is not None:
            raise CourseError(f"{target} is the chapter {clash} itself (the same file): refusing to overwrite it.")
        nb = nbformat.read(path, as_version=4)
        fresh = student_copy(nb)
        # its set-up cell installs the release; its badge opens the published copy (OUT's name at the release)
        retarget(fresh, path.name, repository or REPOSITORY, ref or REF)
        set_badge(fresh, path.name, repository or REPOSITORY, ref or REF, folder=student_folder(out_dir))
        refuse_chapter_links(fresh, f"the student copy of {path}")
        if target.exists():
            if _is_chapter(target):
                raise CourseError(f"{target} holds solutions (it is a chapter, not a student copy): "
                                  "refusing to overwrite it. Choose another --out folder.")
            if not force and nbformat.read(target, as_version=4) != nbformat.from_dict(fresh):
                raise CourseError(f"{target} already exists and has changed since it was written (a learner's "
                                  "answers or outputs): refusing to overwrite it. Move it away, or pass --force.")
        plans.append((target, fresh, sum(map(_is_solution, nb.cells))))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = []
    for target, fresh, count in plans:
        write_notebook(fresh, target)
        written.append(target)
        print(f"{target}: {count} solution cells replaced", flush=True)
    return written


def restore_files(paths: list[Path], originals: Path) -> None:
    """Put the solutions back into student copies, in place, from the chapters in ``originals``.

    Every file is checked first; on any problem nothing is written (:class:`CourseError` says which file and cell).
    """
    import nbformat

    plans = []
    for path in map(Path, paths):
        source = Path(originals) / path.name
        if _same_file(path, source):
            raise CourseError(f"{path} would be restored from itself ({source}): restore reads the chapters from "
                              "another folder (--from, default notebooks/) and writes into the student copy.")
        if not source.exists():
            raise CourseError(f"{path}: no chapter {source} to take the solutions from (see --from)")
        try:
            nb = restore(nbformat.read(path, as_version=4), nbformat.read(source, as_version=4))
        except CourseError as exc:
            raise CourseError(f"{path}: {exc}") from None
        kept = sum(KEPT_TAG in _tags(c) for c in nb["cells"])
        plans.append((path, nb, source, kept))
    for path, nb, source, kept in plans:
        write_notebook(nb, path)
        note = f"; your code from {kept} stub cell(s) kept beside the solutions (tagged {KEPT_TAG})" if kept else ""
        print(f"{path}: solutions restored from {source}{note}", flush=True)
