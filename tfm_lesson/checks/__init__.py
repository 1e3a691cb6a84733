"""Exercise checkers. Each takes the learner's function or class, tests it against the reference on
random shapes, masks and dtypes, prints one success line, or raises ``AssertionError`` (a
:class:`Mistake`) whose message names the likely mistake.

Checkers live in one module per topic (``checks/attention.py``, ``checks/norm.py``, ...); every name in a
topic module's ``__all__`` is available here: ``from tfm_lesson.checks import check_attention``.
"""
from __future__ import annotations

import importlib
import pkgutil

from ._harness import Mistake
from ._parts import named_checks, part, parts

__all__ = ["Mistake", "named_checks", "parts", "part"]

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_"):
        _module = importlib.import_module(f"{__name__}.{_info.name}")
        for _name in getattr(_module, "__all__", ()):
            globals()[_name] = getattr(_module, _name)
            __all__.append(_name)
