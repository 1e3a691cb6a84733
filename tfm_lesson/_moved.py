"""Module paths from before the package had folders (``tfm_lesson.viz``, ``tfm_lesson.training``, ...) still import:
each old name is served the module at its new path, the very same object, so outside code, old notebooks and
``python -m tfm_lesson.translate`` keep working. New code uses the new paths (CONTRIBUTING, "How the package is laid
out"); ``tests/test_layout.py`` keeps this table and the folders in step.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old path -> new path; a moved folder (quizzes) carries its sub-modules along
MOVED = {
    "tokenizer": "data.tokenizer",
    "generate": "train.generate", "translate": "train.translate",
    "training": "train.loop", "checkpoint": "train.checkpoint", "runstate": "train.runstate",
    "recipes": "train.recipes", "lm": "train.lm", "reference": "train.reference", "ablation": "train.ablation",
    "metrics": "train.metrics",
    "viz": "look.viz", "widgets": "look.widgets", "_widget_display": "look._widget_display",
    "interpret": "look.interpret", "memory": "look.memory", "recording": "look.recording", "depth": "look.depth",
    "shapes": "look.shapes", "toy_heads": "look.toy_heads",
    "quiz": "course.quiz", "quizzes": "course.quizzes", "cells": "course.cells", "_depends": "course._depends",
    "grading": "course.grading", "export": "course.export", "_grade_kernel": "course._grade_kernel",
}
_PACKAGE = __name__.rpartition(".")[0]


def new_name(name: str) -> str | None:
    """``tfm_lesson.viz`` -> ``tfm_lesson.look.viz``; None for a name that did not move."""
    prefix = _PACKAGE + "."
    if not name.startswith(prefix):
        return None
    head, dot, tail = name[len(prefix):].partition(".")
    return prefix + MOVED[head] + dot + tail if head in MOVED else None


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new path (for ``-m`` too: :meth:`get_code`)."""

    def find_spec(self, name, path=None, target=None):
        new = new_name(name)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=name.rpartition(".")[2] == "quizzes")

    def create_module(self, spec):
        module = importlib.import_module(new_name(spec.name))
        spec.loader_state = module.__spec__  # importlib writes this spec over the module's own: put it back below
        return module

    def exec_module(self, module) -> None:  # the module at the new path has run already
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, name):  # `python -m tfm_lesson.translate` runs the new module's code as __main__
        new = new_name(name)
        return importlib.util.find_spec(new).loader.get_code(new)


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):  # first, so an old folder's files load once
        sys.meta_path.insert(0, _OldPaths())
