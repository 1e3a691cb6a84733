"""What ``export`` may write over: never its input chapter (nor any chapter), and an earlier export only while it is
as ``export`` left it.

Each export folder keeps a small record, ``OUT/.tfm_lesson_export.json``: the SHA-256 of every file ``export`` wrote
there, by its path inside ``OUT``. Before anything is written, each file about to be written is checked: the chapter
itself (the same file by any path: a symlink, a hard link) or a notebook holding solutions is refused outright; a
file that exists but is not in the record, or whose content differs from the record (an instructor edited the
nbgrader ``source/`` notebook, the Otter master notebook or ``nbgrader_config.py``), is refused unless ``force``.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .._io import atomic_open
from .cells import CourseError
from .student import _is_chapter, _same_file

__all__ = ["RECORD", "check_targets", "remember"]

RECORD = ".tfm_lesson_export.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _key(out: Path, target: Path) -> str:
    return Path(target).resolve().relative_to(Path(out).resolve()).as_posix()


def _recorded(out: Path) -> dict[str, str]:
    try:
        written = json.loads((Path(out) / RECORD).read_text(encoding="utf-8")).get("written", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return written if isinstance(written, dict) else {}


def check_targets(chapter: Path, out: Path, targets: list[Path], force: bool = False) -> None:
    """Refuse (:class:`CourseError`, before anything is written) to write any of ``targets``, the files an export
    of ``chapter`` into ``out`` would write, where it would replace the chapter, a chapter, or (unless ``force``) a
    file ``export`` did not write or that changed since it did."""
    if Path(out).exists() and not Path(out).is_dir():
        raise CourseError(f"--out {out} is a file, not a folder: give the folder to export into")
    record = _recorded(out)
    for target in targets:
        if _same_file(Path(target), Path(chapter)):
            raise CourseError(f"{target} is the chapter {chapter} itself: export never writes over its input, "
                              "--force or not. Choose another --out folder.")
        if not Path(target).exists():
            continue
        if Path(target).is_dir():
            raise CourseError(f"{target} is a folder where export writes a file: move it away")
        if Path(target).suffix == ".ipynb" and _is_chapter(Path(target)):
            raise CourseError(f"{target} holds solutions (it is a chapter, not an export): export never writes over "
                              "a chapter, --force or not. Choose another --out folder.")
        if force:
            continue
        known = record.get(_key(out, target))
        if known is None:
            raise CourseError(f"{target} already exists and was not written by export (no record of it in "
                              f"{Path(out) / RECORD}): refusing to overwrite it. Move it away, or pass --force.")
        if known != _digest(target):
            raise CourseError(f"{target} was edited since export wrote it: refusing to overwrite the edits. Move "
                              "it away, or pass --force to replace it.")


def remember(out: Path, written: list[Path]) -> None:
    """Add the files just ``written`` into ``out`` (and their content) to its record."""
    record = _recorded(out)
    record.update({_key(out, path): _digest(path) for path in written})
    with atomic_open(Path(out) / RECORD, "w") as f:
        json.dump({"about": "what `python -m tfm_lesson.course export` wrote here (SHA-256 by path): a file that "
                            "differs was edited, and export leaves it alone unless --force",
                   "written": dict(sorted(record.items()))}, f, indent=1)
        f.write("\n")
