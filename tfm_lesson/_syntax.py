"""Parsing code with :mod:`ast` safely while the grader runs several submissions in threads.

CPython 3.11's AST conversion keeps one recursion counter per interpreter: a garbage-collection finalizer that
formats a traceback (which parses source lines with ``ast``) in the middle of another parse breaks the one under
way with "SystemError: AST constructor recursion depth mismatch", and a correct answer would score 0. Every parse
the grader makes, and every check it replays, runs under :func:`no_collection`: one lock for the process, cyclic
garbage collection off until the outermost one ends.
"""
from __future__ import annotations

import ast
import gc
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["no_collection", "parse"]

_LOCK = threading.RLock()
_state = {"depth": 0, "was_enabled": False}


@contextmanager
def no_collection() -> Iterator[None]:
    """No cyclic garbage collection inside (nested and from several threads: one holder at a time)."""
    with _LOCK:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
        try:
            yield
        finally:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()


def parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` under :func:`no_collection`."""
    with no_collection():
        return ast.parse(source, mode=mode)
