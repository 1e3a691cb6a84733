"""The source rules of :mod:`._rules`, read from the learner's code as text: what the grader applies.

While grading, the learner's objects live in the submission's kernel and the checker runs in the grader
(:mod:`._replay`), so nothing about them can be asked of the live objects. The grader has the code it extracted
from the submission (the chapter's definitions and the answer cells, in the order they ran); here the answer is
found by the name the check cell passes, and everything the rules need is read from the syntax trees: the
functions and methods it defines (and, three levels deep, the learner's own functions and classes they name), the
classes it derives from, and what each name it uses was imported as (``import tfm_lesson as T``,
``from tfm_lesson.flash import flash_attention as fa``, ``fa2 = fa``), resolved by importing the package in the
grader's process. Code that builds a name at run time (``getattr`` with a built string, ``exec``) is not followed,
as in the notebook.
"""
from __future__ import annotations

import ast
import importlib
from typing import Any, Iterator

from ._mistake import Mistake

__all__ = ["Source", "CELL_SEPARATOR"]

CELL_SEPARATOR = "\n# %% cell\n"  # between the cells of the extracted code

_ROOTS = ("tfm_lesson", "torch")


class Source:
    """The extracted code, indexed by the top-level names it binds."""

    def __init__(self, code: str) -> None:
        self.bindings: dict[str, ast.AST] = {}  # name -> its last top-level def, class or assignment
        self.imports: dict[str, str] = {}  # name -> "module" or "module.attribute"
        for cell in code.split(CELL_SEPARATOR):
            for text in (cell, "\n".join(ln for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!")))):
                try:
                    tree = ast.parse(text)
                    break
                except SyntaxError:
                    tree = ast.Module(body=[], type_ignores=[])
            for node in tree.body:
                self._bind(node)
            for node in ast.walk(tree):  # an import inside a function (or a class) names the same objects
                if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
                    self._local_import(node)

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.bindings[node.name] = node
            self.imports.pop(node.name, None)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
                self.bindings.pop(alias.asname or alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    self.bindings.pop(alias.asname or alias.name, None)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    self.bindings[target.id] = node
                    self.imports.pop(target.id, None)

    def _local_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """An import inside a function: its names resolve as imported unless the cells bind them at the top."""
        before = dict(self.bindings), dict(self.imports)
        self._bind(node)
        self.bindings = before[0]
        self.imports = {**self.imports, **{k: v for k, v in before[1].items()}}
        for name in list(self.imports):
            if name in self.bindings:
                self.imports.pop(name)

    # what a name or an expression means ----------------------------------------------------------------------
    def resolve(self, expr: ast.AST, depth: int = 0) -> Any:
        """The package or torch object ``expr`` names (``T.flash_attention``, ``fa``, ``partial(fa, ...)``), else None."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Name):
            if expr.id in self.imports:
                return _load(self.imports[expr.id])
            node = self.bindings.get(expr.id)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                return self.resolve(node.value, depth + 1)
            return None
        if isinstance(expr, ast.Attribute):
            if self._own_module(expr.value, depth):  # `sys.modules[__name__].fa`: the learner's own name `fa`
                return self.resolve(ast.Name(id=expr.attr, ctx=ast.Load()), depth + 1)
            base = self.resolve(expr.value, depth + 1)
            return getattr(base, expr.attr, None) if base is not None else None
        if isinstance(expr, ast.Call):  # functools.partial(f, ...), staticmethod(f), a wrapper: its first argument
            return self.resolve(expr.args[0], depth + 1) if expr.args else None
        return None

    def _own_module(self, expr: ast.AST, depth: int) -> bool:
        """Whether ``expr`` is the learner's own module: ``sys.modules[__name__]`` (or a name bound to it)."""
        if isinstance(expr, ast.Name) and depth < 8:
            node = self.bindings.get(expr.id)
            return isinstance(node, ast.Assign) and self._own_module(node.value, depth + 1)
        return (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Name) and expr.slice.id == "__name__"
                and isinstance(expr.value, ast.Attribute) and expr.value.attr == "modules")

    def is_learners(self, name: str) -> bool:
        node = self.bindings.get(name)
        return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
            node is not None and self.resolve(ast.Name(id=name, ctx=ast.Load())) is None)

    # the learner's code of an answer ---------------------------------------------------------------------------
    def functions(self, name: str, depth: int = 3) -> list[tuple[str, ast.AST]]:
        """``(qualified name, syntax tree)`` of each function of the answer ``name`` and of the learner's functions
        and classes they name, ``depth`` levels deep."""
        found: list[tuple[str, ast.AST]] = []
        seen: set[int] = set()
        todo: list[tuple[str, int]] = [(name, 0)]
        while todo:
            item, level = todo.pop()
            for qualname, tree in self._own(item):
                if id(tree) in seen:
                    continue
                seen.add(id(tree))
                found.append((qualname, tree))
                if level < depth:
                    todo += [(n.id, level + 1) for n in ast.walk(tree) if isinstance(n, ast.Name)
                             and isinstance(n.ctx, ast.Load) and n.id in self.bindings]
        return found

    def _own(self, name: str, depth: int = 0) -> Iterator[tuple[str, ast.AST]]:
        node = self.bindings.get(name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{name}.{item.name}", item
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in self.bindings and depth < 8:
                    yield from self._own(base.id, depth + 1)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and \
                self.resolve(node.value) is None:
            yield name, node  # `answer = lambda ...`, `answer = other` (followed through the names it loads); a
            # binding to the package's own object is no code of the learner's (forbid_objects names it)

    def bases(self, name: str, depth: int = 0) -> Iterator[Any]:
        """The package or torch classes the learner's class ``name`` derives from (through its own classes too)."""
        node = self.bindings.get(name)
        if not isinstance(node, ast.ClassDef) or depth > 8:
            resolved = self.resolve(ast.Name(id=name, ctx=ast.Load()))
            if isinstance(resolved, type):  # the answer is that class: what it derives from (as its MRO[1:])
                yield from (resolved.__mro__[1:] if depth == 0 else resolved.__mro__)
            return
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in self.bindings:
                yield from self.bases(base.id, depth + 1)
            else:
                resolved = self.resolve(base)
                if isinstance(resolved, type):
                    yield from resolved.__mro__


def _load(path: str) -> Any:
    """The object ``path`` ("tfm_lesson.flash.flash_attention") names, when it is the package's or torch's."""
    if path.split(".")[0] not in _ROOTS:
        return None
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        for part in parts[cut:]:
            found = getattr(found, part, None)
            if found is None:
                return None
        return found
    return None


def where(qualname: str, node: ast.AST) -> str:
    return f"`{qualname}` (line {getattr(node, 'lineno', 1)} of its cell)"


def raise_base(source: Source, name: str, what: str, instead: str) -> None:
    for base in source.bases(name):
        module = getattr(base, "__module__", "") or ""
        if module == "tfm_lesson" or module.startswith("tfm_lesson."):
            raise Mistake(f"WRITE IT YOURSELF: your {what} derives from {module}.{base.__qualname__}, the package's "
                          f"reference, so the reference does the work. The exercise asks you to write it: {instead}")
