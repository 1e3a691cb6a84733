"""Every checker test, graded the grader's way: with ``TFM_CHECKS_VIA_REPLAY=1`` each ``check_*`` of
``tfm_lesson.checks`` records in this process and replays from the recorded JSON (:mod:`tfm_lesson.checks._replay`),
and the test sees the replay's verdict. So every wrong answer in ``tests/test_checks_*.py`` is also a test that the
verdict computed outside the learner's code is the one the notebook gives (same message, same pass).

The source rules read code as text while replaying; here that text is the answer's own source (its function or
class, dedented) after the top-level imports of the module that defines it, as the grader would extract it.
"""
from __future__ import annotations

import ast
import functools
import inspect
import json
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Callable

CELL = "\n# %% cell\n"


def _source_of(obj: Any) -> tuple[str, str | None]:
    """(extracted code, the answer's name in it) for a test's answer, as far as its source can be read."""
    target = getattr(obj, "__func__", obj)
    target = target if inspect.isfunction(target) or inspect.isclass(target) else type(target)
    try:
        own = textwrap.dedent(inspect.getsource(target))
        module = Path(inspect.getsourcefile(target)).read_text()
    except (OSError, TypeError):
        return "", None
    imports = [ast.unparse(n) for n in ast.parse(module).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    name = getattr(target, "__name__", None)
    if name == "<lambda>":  # `fn = lambda ...` or a lambda argument: keep the line, bind it to a name
        own, name = f"_answer = {own.strip().split('=', 1)[-1].strip() if '=' in own else own.strip()}", "_answer"
        try:
            ast.parse(own)
        except SyntaxError:
            return CELL.join(imports), None
    return CELL.join([*imports, own]), name


def via_replay(name: str, direct: Callable) -> Callable:
    from tfm_lesson.checks import Mistake, _replay

    @functools.wraps(direct)
    def run(*answers: Any, **kwargs: Any) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "trace.json")
            _replay.record(direct, list(answers), kwargs, path)
            trace = json.loads(Path(path).read_text())
        sources = [_source_of(a) for a in answers]
        code = CELL.join(s for s, _ in sources)
        ok, message = _replay.replay(direct, trace, kwargs, code, [n or f"_unknown{i}" for i, (_, n) in
                                                                  enumerate(sources)])
        if not ok:
            raise Mistake(message)
        print(f"✔ {name} passed (replayed)")
    return run


def install() -> None:
    """Put :func:`via_replay` in front of every checker, wherever tests import it from."""
    import tfm_lesson.checks as checks

    for name in list(checks.__all__):
        if not name.startswith("check_"):
            continue
        direct = getattr(checks, name)
        wrapped = via_replay(name, direct)
        setattr(checks, name, wrapped)
        module = sys.modules.get(direct.__module__)
        if module is not None and getattr(module, name, None) is direct:
            setattr(module, name, wrapped)
