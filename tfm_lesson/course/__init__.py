"""Course tooling for a learner's or an instructor's own notebooks: the set-up cell every chapter starts with,
running chapters, student copies, grading.

    python -m tfm_lesson.course execute notebooks/*.ipynb          # refresh stored outputs in place
    python -m tfm_lesson.course student notebooks/03_*.ipynb       # student copies (no solutions) in student/
    python -m tfm_lesson.course restore student/03_*.ipynb         # put the solutions back (from notebooks/)
    python -m tfm_lesson.course fold notebooks/*.ipynb             # fold solution cells (metadata only)
    python -m tfm_lesson.course setup-cell notebooks/*.ipynb       # the current set-up cell, in .ipynb and .py
    python -m tfm_lesson.course grade CHAPTER SUBMISSION... --csv F # grade a class (tfm_lesson/course/grading.py)
    python -m tfm_lesson.course export CHAPTER --format nbgrader --out DIR   # nbgrader / otter (tfm_lesson/course/export.py)

What needs the course's checkout (the Jupyter Book, README's and the book's links, the Colab links of the
chapters in notebooks/) is ``python tools/book.py`` there, not part of the package.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from .._io import atomic_open
from .cells import (_LEGACY_TEMPLATES, _SETUP_TEMPLATE, SOLUTION_TAG, STUDENT_STUB, CourseError, is_setup_cell,
                    write_notebook)
from .cells import is_solution as _is_solution
from .cells import is_stub as _is_stub
from .cells import tags as _tags
from .student_links import refuse_chapter_links, student_folder
from .solution_form import fold_cell, is_folded, strip_title, unfold  # noqa: F401  (is_folded: course's API)

# The one setting for where the course lives: the set-up cell's install, every Colab link and chapter badge,
# README's badges and the book's launch buttons (book/_config.yml) are all made from it by
# `python tools/book.py badges` in the checkout (tests/test_course_links.py checks that all four follow it).
# REF is a release tag, not a branch: a class's copies made from a release install that release for as long as
# the class runs, whatever the default branch holds later. (The commit a chapter is stored from cannot be written
# into that same commit.) Publishing: push the tag `v<version of pyproject.toml>` before sharing the links.
REPOSITORY = "tfm-lesson/tfm_lesson"
REF = "v0.1.0"
BRANCH = REF  # the name of this setting before REF; kept for older callers

COLAB_BADGE_SVG = "https://colab.research.google.com/assets/colab-badge.svg"
_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$")
_REF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def check_location(repository: str, ref: str) -> None:
    """Refuse (:class:`CourseError`) a repository not ``OWNER/NAME``, or a ref with characters a URL breaks on."""
    if not _REPO_NAME.match(repository or ""):
        raise CourseError(f"--repository must be OWNER/NAME as on GitHub (e.g. tfm-lesson/tfm_lesson), "
                          f"got {repository!r}")
    if not _REF_NAME.match(ref or "") or ".." in ref:
        raise CourseError(f"--ref must be a tag, branch or commit (letters, digits, . _ / -), got {ref!r}")


def install_source(repository: str = REPOSITORY, ref: str = REF) -> str:
    """The pip requirement the set-up cell installs: the package at ``ref`` of ``repository`` on GitHub."""
    return f"tfm-lesson @ git+https://github.com/{repository}@{ref}"


# ``TFM_LESSON_SOURCE`` (any pip requirement: a path to a checkout, a wheel, ``tfm-lesson @ git+…@tag``) replaces
# INSTALL_SOURCE, e.g. to try a chapter against a local checkout. No --upgrade: what the runtime has stays.
INSTALL_SOURCE = install_source()



def install_sources(repository: str = REPOSITORY, ref: str = REF) -> list[str]:
    """What the set-up cell installs, first that works: the release ``tfm-lesson==X.Y.Z`` from PyPI (fast, no git;
    only for the course's own repository at a tag ``vX.Y.Z``), then ``ref`` of ``repository`` on GitHub."""
    release = re.fullmatch(r"v(\d+(?:\.\d+)*)", ref)
    pypi = [f"tfm-lesson=={release.group(1)}"] if release and repository == REPOSITORY else []
    return [*pypi, install_source(repository, ref)]


def release_page(repository: str = REPOSITORY, ref: str = REF) -> str:
    """Where the release's wheel can be downloaded (the release workflow attaches it there)."""
    return f"https://github.com/{repository}/releases/tag/{ref}"


def setup_cell(repository: str = REPOSITORY, ref: str = REF) -> str:
    """The set-up cell every chapter starts with, installing from ``repository`` at ``ref``."""
    return _SETUP_TEMPLATE.format(sources=json.dumps(install_sources(repository, ref)),
                                  release=release_page(repository, ref))


SETUP_CELL = setup_cell()

LEGACY_SETUP_CELLS = tuple(t.format(source=INSTALL_SOURCE) for t in _LEGACY_TEMPLATES)





SCRIPTS = "py"  # the sub-folder of notebooks/ that holds each chapter's paired .py (jupytext: ipynb,py//py:percent)
# Tags a student copy adds to the checker cell after a solution, so "Run all" goes on past a failing check.
_ADDED_TAGS_KEY = "tfm_lesson_student_added_tags"
# Marks a cell whose stored output a student copy cleared because it shows results of the answers (_depends.py).
_CLEARED_KEY = "tfm_lesson_student_cleared"
# The tag of a cell in which `restore` keeps what a learner wrote in a solution stub.
KEPT_TAG = "learner-answer"
KEPT_HEADER = ("# Your code from the \"your turn\" cell, kept by `restore`. The reference solution is in the next cell\n"
               "# (folded: in JupyterLab click the bar at its left, in Colab click \"Show code\" under its title).\n")






def colab_url(notebook: str | Path, repository: str = REPOSITORY, ref: str = REF, folder: str = "notebooks") -> str:
    """The "Open in Colab" address of a chapter, e.g. ``notebooks/01_attention.ipynb`` (``folder``: where it is
    published, ``student`` for the student copies)."""
    return f"https://colab.research.google.com/github/{repository}/blob/{ref}/{folder}/{Path(notebook).name}"


def colab_badge(notebook: str | Path, repository: str = REPOSITORY, ref: str = REF, folder: str = "notebooks") -> str:
    """The "Open in Colab" badge of a chapter, as Markdown (an image that links to :func:`colab_url`)."""
    return f"[![Open In Colab]({COLAB_BADGE_SVG})]({colab_url(notebook, repository, ref, folder)})"


_ANY_BADGE = re.compile(r"\[!\[Open In Colab\]\(" + re.escape(COLAB_BADGE_SVG) + r"\)\]\([^)\s]*\)")
_TITLE = re.compile(r"^# \d\d · ")


def set_badge(nb: Any, name: str, repository: str = REPOSITORY, ref: str = REF, folder: str = "notebooks") -> bool:
    """Put the chapter's badge on the line under its ``# NN · Title`` heading (replacing any other badge);
    True when the notebook changed. A notebook without such a heading is left alone."""
    badge = colab_badge(name, repository, ref, folder)
    for cell in nb["cells"]:
        if cell.get("cell_type") != "markdown":
            continue
        lines = cell["source"].split("\n")
        title = next((i for i, ln in enumerate(lines) if _TITLE.match(ln)), None)
        if title is None:
            continue
        rest = lines[title + 1:]
        while rest and (not rest[0].strip() or _ANY_BADGE.fullmatch(rest[0].strip())):
            rest.pop(0)  # blank lines and earlier badges under the title
        new = "\n".join([*lines[:title + 1], "", badge, *([""] + rest if rest else [])])
        if new == cell["source"]:
            return False
        cell["source"] = new
        return True
    return False


def retarget(nb: Any, name: str, repository: str = REPOSITORY, ref: str = REF) -> bool:
    """Point a chapter's set-up cell and badge at ``repository`` and ``ref``; True when something changed."""
    check_location(repository, ref)
    changed = set_badge(nb, name, repository, ref)
    first = next((c for c in nb["cells"] if c.get("cell_type") == "code"), None)
    if first is not None and is_setup_cell(first["source"]) and first["source"] != setup_cell(repository, ref):
        first["source"] = setup_cell(repository, ref)
        changed = True
    return changed


def chapters(directory: str | Path = "notebooks") -> list[Path]:
    """The chapter notebooks ``NN_name.ipynb`` of ``directory``, in order."""
    return sorted(Path(directory).glob("[0-9][0-9]_*.ipynb"))


def execute(paths: list[Path], timeout: int = 600) -> None:
    """Run each notebook top to bottom in a fresh kernel (its own folder as working directory), saving outputs.

    Live widget views are dropped from the stored outputs, which keep each explorer's static picture.
    """
    import nbformat
    from nbclient import NotebookClient

    for path in paths:
        start = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        strip_widget_views(nb)  # stored chapters show the explorers' static pictures; running a cell brings them back
        old = copy.deepcopy(nb)
        if fold_solutions(nb):
            try:
                _sync_script(path, old, nb)  # a new solution's #@title line goes into the .py too
            except CourseError as exc:
                print(f"warning: {exc}", file=sys.stderr)
        write_notebook(nb, path)
        print(f"{path}: {time.perf_counter() - start:.1f} s", flush=True)


def strip_widget_views(nb: Any) -> int:
    """Remove the live-widget view from stored outputs that also carry a static ``image/png`` (an explorer) or
    ``text/html`` (a quiz), in place; returns how many outputs changed.

    ``nb`` is a notebook (``nbformat.NotebookNode`` or the same dict); its ``widgets`` metadata goes with the
    views. JupyterLab 4 shows a stored view whose widget model is gone as an empty output or "model not found",
    never the picture beside it; without the view every frontend shows the picture, and running the cell brings
    the live widget back.
    """
    from ..look._widget_display import WIDGET_VIEW

    changed = 0
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = output.get("data", {})
            if WIDGET_VIEW in data and ("image/png" in data or "text/html" in data):  # a static fallback
                del data[WIDGET_VIEW]
                changed += 1
    if changed:
        nb.get("metadata", {}).pop("widgets", None)
    return changed


# student copies ------------------------------------------------------------------------------------------------------
def _clear_outputs(cell: Any) -> None:
    cell["outputs"] = []
    cell["execution_count"] = None


# folding -------------------------------------------------------------------------------------------------------------
def fold_solutions(nb: Any) -> int:
    """Fold every ``solution`` cell in JupyterLab 4 / Notebook 7 (``metadata.jupyter.source_hidden``: a collapsed
    bar until clicked) and in Colab (a form: ``cellView: form`` under a ``#@title`` line, see
    :mod:`tfm_lesson.course.solution_form`). Outputs stay visible. Idempotent. Returns how many cells it changed.
    """
    return sum(fold_cell(cell) for cell in nb["cells"])


def fold_files(paths: list[Path]) -> int:
    """Fold the solution cells of each notebook in place, and carry the ``#@title`` lines into its paired ``.py``
    (only the files that changed are written)."""
    import nbformat

    total = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        old = copy.deepcopy(nb)
        changed = fold_solutions(nb)
        if changed:
            _sync_script(path, old, nb)
            write_notebook(nb, path)
        total += changed
        print(f"{path}: {changed} solution cell(s) folded", flush=True)
    return total


def student_copy(nb: Any) -> Any:
    """A copy of notebook ``nb`` with every ``solution`` cell replaced by a short "your turn" stub.

    Every other cell whose stored output shows a result of the answers (the rule: :mod:`tfm_lesson.course._depends`)
    loses it too, marked so that :func:`restore` brings it back; so does the quiz cell, whose stored page holds the
    answers. The checkers stay. The cell after a solution (its check) loses its stored output and is tagged
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
    return out


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
    The two notebooks must have the same structure (markdown cells, solution cells, the checks after them);
    on any difference :class:`CourseError` names the first cell that differs and nothing is returned.
    """
    if not any(_is_solution(c) and not _is_stub(c) for c in original["cells"]):
        raise CourseError("the chapter to restore from has no solutions (is it a student copy?)")
    out = copy.deepcopy(student)
    theirs = [c for c in out["cells"] if KEPT_TAG not in _tags(c)]
    kept_before = {id(c): [k for k in out["cells"][:j] if KEPT_TAG in _tags(k)] for j, c in enumerate(out["cells"])}
    ours = original["cells"]
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
    cells.extend(k for k in out["cells"] if KEPT_TAG in _tags(k) and not any(k is c for c in cells))
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


def paired_script(path: str | Path) -> Path:
    """The jupytext py:percent script paired with chapter ``path``: ``notebooks/py/NN_name.py`` (kept in a
    sub-folder so a learner's file browser shows each chapter once)."""
    path = Path(path)
    return path.parent / SCRIPTS / path.with_suffix(".py").name


def _sync_script(path: Path, old: Any, new: Any) -> None:
    """Carry the changed cells of chapter ``path`` (``old`` -> ``new``, same cells) into its paired ``.py``."""
    script = paired_script(path)
    if not script.exists():
        return
    text = script.read_text()
    for before, after in zip(old["cells"], new["cells"]):
        if before["source"] == after["source"]:
            continue
        if before["cell_type"] == "markdown":  # py:percent writes markdown as comments
            def comment(src: str) -> str:
                return "\n".join(("# " + ln) if ln else "#" for ln in src.split("\n"))
            was, now = comment(before["source"].strip()), comment(after["source"].strip())
        else:
            was, now = before["source"].strip(), after["source"].strip()
        if text.count(was) != 1:
            raise CourseError(f"{script}: a cell is not there as in {path}: run `jupytext --sync {path}` first")
        text = text.replace(was, now)
    with atomic_open(script, "w") as f:
        f.write(text)


def update_setup_cell(path: Path, repository: str = REPOSITORY, ref: str = REF) -> bool:
    """Replace a set-up cell of another wording, repository or ref with :func:`setup_cell` in chapter ``path``
    and in its paired ``.py``; True when something changed. Idempotent."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    first = next((c for c in nb.cells if c.cell_type == "code"), None)
    current = setup_cell(repository, ref)
    if first is None or first.source.strip() == current.strip() or not is_setup_cell(first.source):
        return False
    old = copy.deepcopy(nb)
    first.source = current
    _sync_script(path, old, nb)
    write_notebook(nb, path)
    return True


def _check_notebook_argument(parser: argparse.ArgumentParser, path: Path) -> None:
    """Exit with a usage error (status 2) unless ``path`` is a readable ``.ipynb`` notebook."""
    import nbformat

    if path.is_dir():
        parser.error(f"{path} is a directory; give notebook files (e.g. {path}/NN_name.ipynb)")
    if not path.is_file():
        parser.error(f"no notebook at {path}")
    if path.suffix != ".ipynb":
        pair = "; the .py files are the jupytext pairs: give the .ipynb beside them" if path.suffix == ".py" else ""
        parser.error(f"{path} is not a notebook (.ipynb){pair}")
    try:
        nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - JSON, schema or encoding errors all mean the same to the user
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        parser.error(f"{path} is not a readable notebook ({first[:200]})")


def class_main(argv: list[str]) -> int:
    """``grade`` and ``export``, the two class commands of ``python -m tfm_lesson.course``. Exit 0 when done,
    2 for a usage error (bad arguments, a chapter without solutions, a missing submission path)."""
    from . import grading
    from .export import export

    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.course")
    sub = parser.add_subparsers(dest="command", required=True)
    gr = sub.add_parser("grade", help="grade student notebooks against the instructor's chapter",
                        description=grading.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gr.add_argument("chapter", type=Path, help="the instructor's chapter (with solutions)")
    gr.add_argument("submissions", nargs="+", type=Path, help="student notebooks, or folders of them")
    gr.add_argument("--csv", type=Path, required=True, help="where to write the grades")
    gr.add_argument("--feedback", type=Path, help="a folder for one Markdown feedback page per submission")
    gr.add_argument("--timeout", type=int, default=grading.DEFAULT_TIMEOUT, help="seconds per cell (default %(default)s)")
    gr.add_argument("--memory", type=int, default=grading.DEFAULT_MEMORY_MB,
                    help="MB of address space per kernel, 0 = no limit (default %(default)s)")
    gr.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    ex = sub.add_parser("export", help="write the chapter as an nbgrader or Otter-Grader assignment")
    ex.add_argument("chapter", type=Path)
    ex.add_argument("--format", choices=("nbgrader", "otter"), required=True)
    ex.add_argument("--out", type=Path, required=True, help="the nbgrader course folder, or the otter folder")
    ex.add_argument("--assignment", help="the assignment's name (default: the chapter's file name)")
    ex.add_argument("--timeout", type=int, default=600,
                    help="seconds a cell may run when the tool grades (default %(default)s)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        if args.command == "grade":
            grading.grade(args.chapter, args.submissions, args.csv, args.feedback, args.timeout, args.memory, args.jobs)
        else:
            export(args.chapter, args.format, args.out, args.assignment, args.timeout)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


# the commands that moved to tools/book.py (they read or write the checkout's book/, README and notebooks/)
_MOVED = {"book": "build", "badges": "badges", "colab-links": "colab-links"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="execute notebooks in place")
    ex.add_argument("notebooks", nargs="+", type=Path)
    ex.add_argument("--timeout", type=int, default=600)
    st = sub.add_parser("student", help="write student copies (solutions replaced by stubs)")
    st.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: every chapter in notebooks/)")
    st.add_argument("--out", type=Path, default=Path("student"))
    st.add_argument("--force", action="store_true", help="overwrite earlier student copies even if changed")
    st.add_argument("--repository", help=f"OWNER/NAME on GitHub the copies install from and link to "
                                         f"(default {REPOSITORY})")
    st.add_argument("--ref", help=f"the tag, branch or commit there (default {REF})")
    rs = sub.add_parser("restore", help="put the solutions back into student copies, in place")
    rs.add_argument("notebooks", nargs="+", type=Path)
    rs.add_argument("--from", dest="originals", type=Path, default=Path("notebooks"))
    fd = sub.add_parser("fold", help="fold the solution cells of notebooks, in place (metadata only)")
    fd.add_argument("notebooks", nargs="+", type=Path)
    su = sub.add_parser("setup-cell", help="bring each chapter's set-up cell (and its .py pair) up to date")
    su.add_argument("notebooks", nargs="+", type=Path)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("grade", "export"):  # a class's notebooks: tfm_lesson/course/grading.py, tfm_lesson/course/export.py
        return class_main(argv)
    if argv and argv[0] in _MOVED:
        print(f"error: `{argv[0]}` needs the course's checkout and moved out of the package: run "
              f"`python tools/book.py {_MOVED[argv[0]]}` there", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    for path in getattr(args, "notebooks", None) or ():  # a clear usage error, not a traceback from nbformat
        _check_notebook_argument(parser, path)
    try:
        if args.command == "execute":
            execute(args.notebooks, args.timeout)
        elif args.command == "student":
            if args.repository is not None or args.ref is not None:
                check_location(args.repository or REPOSITORY, args.ref or REF)
            write_student_copies(args.notebooks or chapters(), args.out, force=args.force,
                                 repository=args.repository, ref=args.ref)
        elif args.command == "restore":
            restore_files(args.notebooks, args.originals)
        elif args.command == "fold":
            fold_files(args.notebooks)
        elif args.command == "setup-cell":
            for path in args.notebooks:
                print(f"{path}: set-up cell {'updated' if update_setup_cell(path) else 'already current'}")
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0

