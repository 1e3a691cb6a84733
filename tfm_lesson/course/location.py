"""Where the course lives: the one setting (``REPOSITORY``, ``REF``), the set-up cell every chapter starts with
(made from it), and the Colab links and badges that point at the chapters.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .cells import _LEGACY_TEMPLATES, _SETUP_TEMPLATE, CourseError, is_setup_cell

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
