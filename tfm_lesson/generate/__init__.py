"""Using a trained model: greedy decoding and beam search (``decoding``), choosing the next token from a language
model's logits (``sampling``), and two command lines: ``python -m tfm_lesson.generate`` samples text from a language
model (``sample_text``), ``python -m tfm_lesson.generate.translate`` translates with a checkpoint.
"""
from __future__ import annotations

import importlib

_CLI_NAMES = {"main", "build_parser"}


def __getattr__(name: str):
    if name in _CLI_NAMES:  # the command line's names, reachable here as before the package had folders
        return getattr(importlib.import_module(f"{__name__}.sample_text"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
