"""What a chapter's cells are, for every tool that reads chapters (course, grading, export): the set-up cell,
solution cells and the stub a student copy puts in their place, and writing a notebook atomically. It imports
nothing else of the package but ``_io``, so those tools can share it without importing each other."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._io import atomic_open

__all__ = ["CourseError", "SOLUTION_TAG", "STUDENT_STUB", "is_setup_cell", "is_solution", "is_stub", "tags",
           "write_notebook"]

# The set-up cell; ``{source}`` is the pip requirement made from course.REPOSITORY and course.REF.
_SETUP_TEMPLATE = """\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           os.environ.get("TFM_LESSON_SOURCE", "{source}")])"""

# The set-up cell before TFM_LESSON_SOURCE existed; still recognised (book pages, tests, `setup-cell`).
_LEGACY_TEMPLATES = ("""\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           "{source}"])""",)

_ANY_SOURCE = re.compile(r"tfm-lesson @ git\+https://github\.com/[^\s\"@]+@[^\s\"]+")


def is_setup_cell(source: str) -> bool:
    """Whether ``source`` is the set-up cell: this or an earlier wording, made from any repository and ref."""
    found = _ANY_SOURCE.sub("{source}", source.strip())
    return found in {t.strip() for t in (_SETUP_TEMPLATE, *_LEGACY_TEMPLATES)}


SOLUTION_TAG = "solution"
# What a student copy puts where a solution was.
STUDENT_STUB = ("# Your turn: complete the exercise in the cell above (keep the name it defines),\n"
                "# then run the check below. Its message tells you what to fix.")


class CourseError(Exception):
    """A course command refused to run: nothing was written. The message says why and what to do."""


def write_notebook(nb: Any, path: str | Path) -> None:
    """Write notebook ``nb`` to ``path`` atomically: a temporary file beside it, then a rename.

    A write that fails midway (full disk, Ctrl-C) leaves the old file as it was. A symlink is written through.
    """
    import nbformat

    target = Path(path).resolve()
    text = nbformat.writes(nbformat.from_dict(nb))
    if not text.endswith("\n"):
        text += "\n"
    with atomic_open(target, "w") as f:
        f.write(text)


def tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_solution(cell: Any) -> bool:
    return cell.get("cell_type") == "code" and SOLUTION_TAG in tags(cell)


def is_stub(cell: Any) -> bool:
    return is_solution(cell) and cell.get("source", "").strip() == STUDENT_STUB.strip()
