"""A student copy links to student copies: no link in it may open a chapter with its solutions.

``course student`` points each copy's Colab badge at the published copy (the output folder's name, ``student`` by
default, at the release: ``…/blob/v0.1.0/student/03_….ipynb``) and then refuses to write a copy that still links to
a notebook in a ``notebooks/`` folder on GitHub or Colab, where the chapters with solutions live.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .cells import CourseError

__all__ = ["CHAPTERS_FOLDER", "STUDENT_FOLDER", "chapter_links", "refuse_chapter_links", "student_folder"]

CHAPTERS_FOLDER = "notebooks"  # the chapters, with solutions
STUDENT_FOLDER = "student"  # the student copies, as `course student` writes and the release publishes them
# a notebook on GitHub, or opened from GitHub in Colab or nbviewer: …/blob/<ref>/<path>.ipynb
_NOTEBOOK_LINK = re.compile(r"https?://[^\s)\"'<>]*/blob/[^\s)\"'<>]+?\.ipynb")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def student_folder(out_dir: str | Path) -> str:
    """The folder name the copies written into ``out_dir`` are published under (``student`` for ``student/``)."""
    name = Path(out_dir).resolve().name
    if not _NAME.match(name) or name == CHAPTERS_FOLDER:
        raise CourseError(f"--out {out_dir}: its name {name!r} is where the copies' badges point in the repository; "
                          f"use a plain folder name other than {CHAPTERS_FOLDER!r} (the default is {STUDENT_FOLDER}/)")
    return name


def chapter_links(nb: Any) -> list[str]:
    """Every link in ``nb`` (any cell's text) that opens a notebook of a ``notebooks/`` folder on GitHub or Colab."""
    found = []
    for cell in nb["cells"]:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        for link in _NOTEBOOK_LINK.findall(source):
            parts = link.split("/blob/", 1)[1].split("/")[1:]  # the path after the ref
            if CHAPTERS_FOLDER in parts[:-1]:
                found.append(link)
    return found


def refuse_chapter_links(nb: Any, what: str) -> None:
    """Raise :class:`CourseError` when ``nb`` links to a chapter with solutions (see :func:`chapter_links`)."""
    links = chapter_links(nb)
    if links:
        raise CourseError(f"{what} would link to chapters with solutions: {', '.join(sorted(set(links)))}")
