"""Course tooling for a learner's or an instructor's own notebooks: the set-up cell every chapter starts with,
running chapters, student copies, grading.

    python -m tfm_lesson.course execute notebooks/*.ipynb          # refresh stored outputs in place
    python -m tfm_lesson.course student notebooks/03_*.ipynb       # student copies (no solutions) in student/
    python -m tfm_lesson.course restore student/03_*.ipynb         # put the solutions back (from notebooks/)
    python -m tfm_lesson.course fold notebooks/*.ipynb             # fold solution cells (metadata only)
    python -m tfm_lesson.course setup-cell notebooks/*.ipynb       # the current set-up cell, in .ipynb and .py
    python -m tfm_lesson.course grade CHAPTER SUBMISSION... --csv F # grade a class (tfm_lesson/course/grading.py)
    python -m tfm_lesson.course export CHAPTER --format nbgrader --out DIR   # nbgrader / otter (tfm_lesson/course/export.py)
    python -m tfm_lesson.course gradebook --roster R --grades ch03=G.csv --out F  # the term (course/gradebook.py)

The parts: ``location`` (where the course lives: the setting, the set-up cell, Colab links and badges), ``chapters``
(listing, executing, folding, paired scripts), ``student`` (student copies and ``restore``), ``cli`` (the command
line); ``grading`` and ``export`` for a class; ``quiz`` and ``quizzes/``. Their names are importable from here.

What needs the course's checkout (the Jupyter Book, README's and the book's links, the Colab links of the
chapters in notebooks/) is ``python tools/book.py`` there, not part of the package.
"""
from __future__ import annotations

from .cells import STUDENT_STUB, CourseError, is_setup_cell, write_notebook
from .cells import is_solution as _is_solution
from .cells import is_stub as _is_stub
from .chapters import (SCRIPTS, _sync_script, chapters, execute, fold_files, fold_solutions, paired_script,
                       strip_widget_views, update_setup_cell)
from .cli import class_main, main
from .location import (_ANY_BADGE, BRANCH, COLAB_BADGE_SVG, INSTALL_SOURCE, LEGACY_SETUP_CELLS, REF, REPOSITORY,
                       SETUP_CELL, check_location, colab_badge, colab_url, install_source, install_sources,
                       release_page, retarget, set_badge, setup_cell)
from .solution_form import fold_cell, is_folded, strip_title, unfold
from .student import (_CLEARED_KEY, KEPT_HEADER, KEPT_TAG, copy_chapter_answers, restore, restore_files, student_copy,
                      write_student_copies)

__all__ = ["STUDENT_STUB", "CourseError", "is_setup_cell", "write_notebook", "SCRIPTS", "chapters", "execute",
           "fold_files", "fold_solutions", "paired_script", "strip_widget_views", "update_setup_cell", "class_main",
           "main", "BRANCH", "COLAB_BADGE_SVG", "INSTALL_SOURCE", "LEGACY_SETUP_CELLS", "REF", "REPOSITORY",
           "SETUP_CELL", "check_location", "colab_badge", "colab_url", "install_source", "install_sources",
           "release_page", "retarget", "set_badge", "setup_cell", "fold_cell", "is_folded", "strip_title", "unfold",
           "KEPT_HEADER", "KEPT_TAG", "copy_chapter_answers", "restore", "restore_files", "student_copy",
           "write_student_copies"]


def __getattr__(name: str):
    """``tfm_lesson.course.quiz`` (and its ``quizzes/``) on first use: the set-up cell's tools do not need them."""
    if name in ("quiz", "quizzes"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
