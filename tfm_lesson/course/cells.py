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

# The set-up cell. ``{sources}``: the pip requirements it tries in order, a Python list (course.install_sources: the
# release on PyPI, then the same tag on GitHub); ``{release}``: the release's page, where its wheel can be downloaded.
# When every install fails it stops "Run all" with one message (no traceback: IPython shows an exception's
# ``_render_traceback_`` instead), and a later cell's ``import tfm_lesson`` says one line, not a traceback.
_SETUP_TEMPLATE = """\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import glob, importlib, importlib.util, os, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    # the course's release from PyPI, else from GitHub; or a wheel put beside this notebook; or what you name
    sources = {sources}
    sources = sorted(glob.glob("tfm_lesson-*.whl"))[-1:] or sources  # or a wheel put beside this notebook
    if os.environ.get("TFM_LESSON_SOURCE"):  # anything pip can install
        sources = [os.environ["TFM_LESSON_SOURCE"]]
    failures = []
    for source in sources:
        print("installing tfm_lesson from", source, flush=True)
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], capture_output=True, text=True)
        if pip.returncode == 0:
            break
        failures.append("  " + source + ": " + ((pip.stderr or pip.stdout).strip().splitlines() or ["?"])[-1])
    importlib.invalidate_caches()
    if importlib.util.find_spec("tfm_lesson") is None:
        class SetupFailed(Exception):
            def _render_traceback_(self):  # Jupyter and Colab show this message alone, without a traceback
                return str(self).splitlines()

        def not_installed(shell, etype, value, tb, tb_offset=None):  # later cells: one line, not a traceback
            if str(getattr(value, "name", "")).split(".")[0] == "tfm_lesson":
                value = SetupFailed("tfm_lesson is not installed: the set-up cell (the first code cell) says why.")
            shell.showtraceback((type(value), value, tb))

        if "get_ipython" in globals():
            get_ipython().set_custom_exc((ModuleNotFoundError,), not_installed)
        raise SetupFailed("\\n".join([
            "The set-up failed: pip could not install tfm_lesson. What pip said:", *failures,
            "Two ways out; then run this cell again:",
            "  1. set TFM_LESSON_SOURCE to something pip can install, in a cell above this one, e.g.",
            "     os.environ['TFM_LESSON_SOURCE'] = 'git+https://github.com/OWNER/REPOSITORY@TAG' (or a wheel's path);",
            "  2. or download the wheel (tfm_lesson-...-py3-none-any.whl) from the release page",
            "     {release}",
            "     and put it beside this notebook (Colab: the folder icon on the left, then upload).",
            "The cells below need tfm_lesson: they will not run until this one succeeds."]))"""

# Earlier wordings of the set-up cell (``{source}``: the pip requirement it installed); still recognised (book
# pages, tests, `setup-cell`, which rewrites them to the current one).
_LEGACY_TEMPLATES = ("""\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           "{source}"])""", """\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           os.environ.get("TFM_LESSON_SOURCE", "{source}")])""")

# What each placeholder of a template may hold, for recognising a set-up cell made from any repository and ref.
_PLACEHOLDERS = {
    "source": r'tfm-lesson @ git\+https://github\.com/[^\s"@]+@[^\s"]+',
    "sources": r'\[(?:"[^"\n]*"(?:, )?)+\]',
    "release": r'https://github\.com/[^\s"]+',
}


def _pattern(template: str) -> re.Pattern:
    parts = re.split(r"\{(\w+)\}", template.strip())
    return re.compile("".join(_PLACEHOLDERS[p] if i % 2 else re.escape(p) for i, p in enumerate(parts)))


_SETUP_PATTERNS = tuple(_pattern(t) for t in (_SETUP_TEMPLATE, *_LEGACY_TEMPLATES))


def is_setup_cell(source: str) -> bool:
    """Whether ``source`` is the set-up cell: this or an earlier wording, made from any repository and ref."""
    return any(p.fullmatch(source.strip()) for p in _SETUP_PATTERNS)


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
