"""Every checker test, graded the grader's way: with ``TFM_CHECKS_VIA_REPLAY=1`` each ``check_*`` of
``tfm_lesson.checks`` records in this process and replays from the recorded JSON (:mod:`tfm_lesson.checks._replay`),
and the test sees the replay's verdict. So every wrong answer in ``tests/test_checks_*.py`` is also a test that the
verdict computed outside the learner's code is the one the notebook gives (same message, same pass).

The source rules read code as text while replaying; here that text is the answer's own source (its function or
class, dedented) after the top-level imports of the module that defines it, as the grader would extract it.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import io
import inspect
import json
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Callable

CELL = "\n# %% cell\n"


def _imports(path: str) -> list[str]:
    """Every import of the file (inside functions too: a cell would hold them at its top)."""
    def own_module(n: ast.AST) -> bool:  # `this_module = sys.modules[__name__]`
        return isinstance(n, ast.Assign) and isinstance(n.value, ast.Subscript) and \
            ast.unparse(n.value) == "sys.modules[__name__]"
    return [ast.unparse(n) for n in ast.walk(ast.parse(Path(path).read_text()))
            if isinstance(n, ast.Import) or isinstance(n, ast.ImportFrom) and not n.level or own_module(n)]


def _lambda(text: str, code: Any) -> str | None:
    """The lambda of ``code`` among those in ``text`` (the source lines ``inspect`` gives for it), unparsed: the one
    whose arguments and names are the code's; None when none parses."""
    text = text.strip().rstrip(",")
    wanted = (code.co_varnames[:code.co_argcount], set(code.co_names))
    for candidate in (text, f"({text})", f"({text}\n)", text.split("=", 1)[-1], f"{text}\n    pass"):
        try:
            tree = ast.parse(candidate.strip())
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Lambda):
                continue
            args = tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args))
            names = {n.id for n in ast.walk(node.body) if isinstance(n, ast.Name)} | {
                n.attr for n in ast.walk(node.body) if isinstance(n, ast.Attribute)}
            if args == wanted[0] and wanted[1] <= names:
                return ast.unparse(node)
    return None


def _source_of(obj: Any) -> tuple[str, str | None]:
    """(extracted code, the answer's name in it) for a test's answer, as a notebook cell would hold it."""
    from tfm_lesson.checks._wire import importable_name

    if isinstance(obj, functools.partial):
        inner, _ = _source_of(obj.func)
        name = importable_name(obj.func)
        if name:
            module, qualname = name.split(":")
            return f"import functools\nimport {module} as _m\n_answer = functools.partial(_m.{qualname})", "_answer"
        return "", None
    for module in ("torch.nn.functional", "torch"):  # a built-in function of torch (F.gelu, torch.softmax)
        mod = importlib.import_module(module)
        if callable(obj) and not inspect.isfunction(obj) and getattr(mod, getattr(obj, "__name__", "") or "_", None) \
                is obj:
            return f"import {module} as _m\n_answer = _m.{obj.__name__}", "_answer"
    name = importable_name(type(obj)) if not inspect.isclass(obj) and not callable(getattr(obj, "__code__", None)) \
        and importable_name(type(obj)) and type(obj).__module__.startswith(("torch.nn", "tfm_lesson")) else None
    if name:  # an instance of torch's or the package's module, passed as the answer (nn.GELU())
        module, qualname = name.split(":")
        return f"import {module} as _m\n_answer = _m.{qualname}()", "_answer"
    name = importable_name(obj)
    if name:  # the package's (or torch's) own object, passed as the answer
        module, qualname = name.split(":")
        return f"import {module} as _m\n_answer = _m.{qualname}", "_answer"
    target = getattr(obj, "__func__", obj)
    target = target if inspect.isfunction(target) or inspect.isclass(target) else type(target)
    try:
        own = textwrap.dedent(inspect.getsource(target))
        imports = _imports(inspect.getsourcefile(target))
    except (OSError, TypeError):
        return "", None
    module_defs = [ast.unparse(n) for n in ast.parse(Path(inspect.getsourcefile(target)).read_text()).body
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("test_")]
    imports = [*imports, *module_defs]  # the learner's helpers, as the cells before the answer hold them
    if getattr(target, "__name__", None) == "<lambda>":
        found = _lambda(own, target.__code__)
        return (CELL.join([*imports, f"_answer = {found}"]), "_answer") if found else (CELL.join(imports), None)
    return CELL.join([*imports, own]), target.__name__


def via_replay(name: str, direct: Callable) -> Callable:
    from tfm_lesson.checks import Mistake, _replay

    @functools.wraps(direct)
    def run(*answers: Any, **kwargs: Any) -> None:
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
            path = str(Path(folder) / "trace.json")
            _replay.record(direct, list(answers), kwargs, path)
            trace = json.loads(Path(path).read_text())
        sources = [_source_of(a) for a in answers]
        code = CELL.join(s for s, _ in sources)
        ok, message = _replay.replay(direct, trace, kwargs, code, [n or f"_unknown{i}" for i, (_, n) in
                                                                  enumerate(sources)])
        if not ok:
            raise Mistake(message)
        print(message)
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
