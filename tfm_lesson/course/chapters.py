"""The chapters as files: listing them, executing them in place, folding their solutions, their paired ``.py``
scripts, the set-up cell written into both.
"""
from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

from .._io import atomic_open
from .cells import CourseError, is_setup_cell, write_notebook
from .solution_form import fold_cell
from .location import REF, REPOSITORY, setup_cell

SCRIPTS = "py"  # the sub-folder of notebooks/ that holds each chapter's paired .py (jupytext: ipynb,py//py:percent)


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
