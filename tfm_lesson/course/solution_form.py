"""A reference solution folded in every front end a learner opens it in.

JupyterLab 4 and Notebook 7 fold a code cell whose metadata says ``jupyter.source_hidden``; Colab ignores that key
and folds a code cell only when it is a *form*: ``metadata.cellView = "form"`` and a first line ``#@title ...``,
which Colab shows as the cell's heading, with a "Show code" link under it. A folded solution carries both, and its
``solution`` tag. Only metadata and that one comment line change: the code and its outputs stay as they were.

Student copies, the graders' exports and the book take both away again with :func:`unfold`.
"""
from __future__ import annotations

import re
from typing import Any

from .cells import is_solution, is_stub

__all__ = ["SOLUTION_TITLE", "fold_cell", "is_folded", "is_form", "strip_title", "unfold"]

# Colab shows the text after "#@title" as the form's heading; JupyterLab shows the line as a comment.
SOLUTION_TITLE = "#@title Reference solution — open it after your own attempt"
_ANY_TITLE = re.compile(r"#\s*@title\b[^\n]*(\n|$)")


def strip_title(source: str) -> str:
    """``source`` without a first line ``#@title ...`` (Colab's form heading); any other source is returned as is."""
    match = _ANY_TITLE.match(source)
    return source[match.end():] if match else source


def is_folded(cell: Any) -> bool:
    """Whether JupyterLab and Notebook 7 show ``cell`` folded (``metadata.jupyter.source_hidden``)."""
    return cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") is True


def is_form(cell: Any) -> bool:
    """Whether Colab shows ``cell`` as the solution's form: ``cellView: form`` and :data:`SOLUTION_TITLE` first."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source
    return cell.get("metadata", {}).get("cellView") == "form" and source.split("\n", 1)[0] == SOLUTION_TITLE


def fold_cell(cell: Any) -> bool:
    """Fold solution ``cell`` in JupyterLab (``source_hidden``) and in Colab (a form under :data:`SOLUTION_TITLE`),
    in place; True when something changed. A cell that is not a solution, or a student's stub, is left alone.
    Idempotent: a title of another wording is replaced, never doubled."""
    if not is_solution(cell) or is_stub(cell):
        return False
    meta = cell.setdefault("metadata", {})
    changed = False
    jupyter = meta.setdefault("jupyter", {})
    if jupyter.get("source_hidden") is not True:
        jupyter["source_hidden"] = True
        changed = True
    if meta.get("cellView") != "form":
        meta["cellView"] = "form"
        changed = True
    titled = f"{SOLUTION_TITLE}\n{strip_title(cell.get('source', ''))}"
    if cell.get("source") != titled:
        cell["source"] = titled
        changed = True
    return changed


def unfold(cell: Any) -> Any:
    """Take the fold away from ``cell``, in place (and return it): no ``source_hidden``, no ``cellView``, no
    ``#@title`` line. For what a learner must see open (a student's stub) or a tool that has its own markers."""
    meta = cell.get("metadata", {})
    jupyter = meta.get("jupyter")
    if jupyter is not None:
        jupyter.pop("source_hidden", None)
        if not jupyter:
            del meta["jupyter"]
    meta.pop("cellView", None)
    if cell.get("cell_type") == "code" and isinstance(cell.get("source"), str):
        cell["source"] = strip_title(cell["source"])
    return cell
