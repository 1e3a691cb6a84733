"""Training: the loop of the paper's section 5 (``loop``), the command line (``cli``: ``python -m tfm_lesson.train``;
its flags in ``cli_flags``, the checks both kinds of run make in ``cli_checks``, the runs in ``cli_translation`` and
``cli_lm``), checkpoints, the run contract every trainer keeps (``runstate``), the recipes' numbers (``recipes``),
the language model's trainer (``lm``), reference runs (``reference``), translation metrics (``metrics``), the
ablation of today's block (``ablation``), and two command lines that use a trained run: ``python -m tfm_lesson.generate``
(``generate``: text from a language model) and ``python -m tfm_lesson.translate`` (``translate``).

Nothing is imported here, so ``import tfm_lesson.train.recipes`` stays light; the command line's names are still
reachable from the package (``from tfm_lesson.train import main``), as they were before the package had folders.
"""
from __future__ import annotations

import importlib

_CLI_NAMES = {"main", "build_parser", "resolve", "resolve_lm", "LM_ONLY", "TRANSLATION_ONLY", "TASKS", "RECIPES"}


def __getattr__(name: str):
    if name in _CLI_NAMES:
        return getattr(importlib.import_module(f"{__name__}.cli"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
