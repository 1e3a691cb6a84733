"""The exception every checker raises, and how it shows itself: :class:`Mistake`.

In IPython/Jupyter a :class:`Mistake` renders itself as its message first, then only the frames of the learner's
own code (none of the checker's insides); in plain Python it is an ordinary ``AssertionError``.
:func:`_is_learners` tells the learner's frames from the package's, the standard library's and installed packages'.
"""
from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

import torch

__all__ = ["Mistake"]

_PACKAGE = str(Path(__file__).resolve().parent.parent)  # tfm_lesson/
_LIBRARIES = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                                     sysconfig.get_paths()["platlib"], torch.__path__[0])})


def _is_learners(filename: str) -> bool:
    """A frame of the learner's code: not the package, not torch, not the standard library or installed packages."""
    if filename.startswith("<frozen"):
        return False
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    if path.startswith(_PACKAGE) or path.startswith(_LIBRARIES):
        return False
    return "site-packages" not in path and "dist-packages" not in path


def learner_lines(exc: BaseException) -> list[str]:
    """The source lines of the learner's own frames where ``exc`` was raised, outermost first (for an exception the
    grader rebuilt from a submission's record, the lines the kernel read)."""
    kept = getattr(exc, "_tfm_learner_lines", None)
    if isinstance(kept, list):
        return [str(line) for line in kept]
    return [f.line or "" for f in traceback.extract_tb(exc.__traceback__) if _is_learners(f.filename)]


def _learner_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of the learner's own code, outermost first: the cell that called the checker, then (through the
    exceptions the checker caught) the learner's function where it failed."""
    frames: list[traceback.FrameSummary] = []
    seen: set[int] = set()
    chain: list[BaseException] = []
    while exc is not None and id(exc) not in seen:  # the Mistake, then what it was raised from
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    for link in chain:
        for frame in traceback.extract_tb(link.__traceback__):
            if _is_learners(frame.filename) and (frame.filename, frame.lineno, frame.name) not in {
                    (f.filename, f.lineno, f.name) for f in frames}:
                frames.append(frame)
    return frames


def _where(filename: str) -> str:
    """``Cell In[5]`` for a notebook cell (as IPython names it), else the file name."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        name = shell.compile.format_code_name(filename) if shell is not None else None
        if name:
            return " ".join(name)
    except Exception:  # no IPython, or an IPython without format_code_name
        pass
    return f'File "{filename}"'


class Mistake(AssertionError):
    """Raised by a checker: the message says what looks wrong and what to look at.

    IPython and Jupyter call :meth:`_render_traceback_` to show it: the message first, then the lines of the
    learner's own code that led there; the checker's own frames are left out."""

    def _render_traceback_(self) -> list[str]:
        red, bold, reset = "\x1b[31m", "\x1b[1m", "\x1b[0m"
        lines = [f"{red}{bold}Mistake{reset}{red}: {self}{reset}"]
        tally = getattr(self, "_tfm_tally", None)  # a checker with named checks: how far it got (checks._parts)
        if isinstance(tally, str):
            lines.append(f"{red}({tally}){reset}")
        frames = _learner_frames(self)
        if frames:
            lines.append("")
            lines.append("Where in your code (most recent call last):")
            for frame in frames:
                lines.append(f"  {_where(frame.filename)}, line {frame.lineno}, in {frame.name}")
                if frame.line:
                    lines.append(f"    {frame.line.strip()}")
        return lines
