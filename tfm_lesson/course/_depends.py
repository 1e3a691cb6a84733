"""Which cells of a chapter show results of the learner's answers: their stored outputs say nothing true in a copy
where the answers are not written yet.

The rule: a code cell depends on the exercises when it names (reads) a name that a solution cell defines, or a name
that an earlier dependent cell assigns (``my_loss = yours_or_reference(label_smoothing_loss, ...)``, then
``history = train_loop(...)``, then the plot of ``history``): dependence flows through assignments, in cell order.
The check cell right after a solution is one of them.
"""
from __future__ import annotations

import ast
from typing import Any

from .._syntax import parse


def _defined(tree: ast.AST) -> set[str]:
    """The names a cell binds at top level (functions, classes, assignment and loop targets, imports); the local
    names inside its functions, classes and comprehensions are theirs, not the notebook's (``[f(l) for l in ...]``
    binds no ``l``; a ``:=`` inside it does bind its name)."""
    names: set[str] = set()
    todo = list(getattr(tree, "body", []))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(n.target for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        todo.extend(ast.iter_child_nodes(node))
    return names


def _read(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _parse(source: str) -> ast.AST | None:
    try:
        return parse(source)
    except SyntaxError:  # IPython magics: judged by their words
        return None


def answer_dependent_cells(cells: list[Any], is_solution: Any) -> list[int]:
    """Indices of the code cells (not solutions) whose outputs come from the learner's answers, by the rule above."""
    tainted: set[str] = set()
    found: list[int] = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        tree = _parse(source)
        if is_solution(cell):
            if tree is not None:
                tainted |= _defined(tree)
            continue
        if not tainted:
            continue
        if tree is None:
            if any(w in source for w in tainted):
                found.append(i)
            continue
        depends = False
        for statement in tree.body:  # in order: `y = other(); print(y)` no longer shows the answer's y
            if _read(statement) & tainted:
                depends = True
                tainted |= _defined(ast.Module(body=[statement], type_ignores=[]))
            else:
                tainted -= _defined(ast.Module(body=[statement], type_ignores=[]))
        if depends:
            found.append(i)
    return found
