"""A chapter's exercises, as the grader and the export read them: where each exercise's cells are, its checker
call and its points (:func:`exercises`), and the definitions of the chapter's other cells that the exercises run
among (:func:`chapter_definitions`)."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from .._syntax import parse
from .cells import CourseError, is_setup_cell
from .cells import is_solution as _is_solution
from .cells import is_stub as _is_stub

_IMPORTANCE = re.compile(r"\*\*Importance\*\*\s*(\d+)\s*/\s*\d+")
_TITLE = re.compile(r"^#+\s*(Exercise\s+\d+[^\n]*)", re.MULTILINE)


@dataclass
class Exercise:
    """One exercise of a chapter: where its cells are and how it is checked."""

    number: int
    title: str  # "Exercise 1: split the heads"
    points: int  # its Importance label
    answer_index: int | None  # the "your turn" cell before the solution (None when there is none)
    solution_index: int
    check_index: int
    checker: str  # "check_split_heads"
    arguments: str  # "split_heads" or "my_attention, corner_cases=False"
    names: tuple[str, ...] = ()  # what the answer must define, found in a submission by them: ("split_heads",)


def defined_names(source: str) -> set[str]:
    """The names a cell defines at its top level (functions, classes, assigned names); none when it does not parse."""
    try:
        body = parse(source).body
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _answer_names(answer: str, solution: str, arguments: str) -> tuple[str, ...]:
    """The names an exercise's answer defines that its check is called with (``split_heads``); without such a name,
    every name the "your turn" cell (else the solution) defines."""
    defined = defined_names(answer) or defined_names(solution)
    try:
        passed = {n.id for n in ast.walk(parse(arguments or "None")) if isinstance(n, ast.Name)}
    except SyntaxError:
        passed = set()
    return tuple(sorted(defined & passed or defined))


def _check_call(source: str, where: str) -> tuple[str, str]:
    """``check_x(args)`` of a check cell, as (checker name, argument source)."""
    try:
        body = parse(source).body
    except SyntaxError as exc:
        raise CourseError(f"{where}: the check cell does not parse ({exc})") from None
    calls = [s.value for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
             and isinstance(s.value.func, ast.Name) and s.value.func.id.startswith("check_")]
    if len(calls) != 1:
        raise CourseError(f"{where}: expected one `check_...(answer)` call in the cell after the solution")
    call = calls[0]
    parts = [ast.unparse(a) for a in call.args] + [ast.unparse(k) for k in call.keywords]
    return call.func.id, ", ".join(parts)


def exercises(chapter: Any) -> list[Exercise]:
    """The exercises of an instructor's chapter (with solutions), in order."""
    cells = chapter["cells"]
    if any(_is_stub(c) for c in cells):
        raise CourseError("the chapter has no solution cells (its exercises hold the student stubs): pass the "
                          "instructor's chapter, not a student copy")
    found: list[Exercise] = []
    for i, cell in enumerate(cells):
        if not _is_solution(cell):
            continue
        n = len(found) + 1
        check = i + 1
        if check >= len(cells) or cells[check].get("cell_type") != "code" or _is_solution(cells[check]):
            raise CourseError(f"exercise {n} (cell {i + 1}): no check cell right after the solution")
        checker, arguments = _check_call(cells[check]["source"], f"cell {check + 1}")
        before = cells[i - 1] if i else None
        answer = i - 1 if before is not None and before.get("cell_type") == "code" and not _is_solution(before) else None
        text = next((c["source"] for c in reversed(cells[:i]) if c.get("cell_type") == "markdown"
                     and _TITLE.search(c["source"])), "")
        title = _TITLE.search(text).group(1).strip() if text else f"Exercise {n}"
        importance = _IMPORTANCE.search(text)
        names = _answer_names(cells[answer]["source"] if answer is not None else "", cell["source"], arguments)
        found.append(Exercise(n, title, int(importance.group(1)) if importance else 1, answer, i, check,
                              checker, arguments, names))
    if not found:
        raise CourseError("the chapter has no solution cells: pass the instructor's chapter, not a student copy")
    return found


def chapter_definitions(source: str) -> str:
    """The imports, functions, classes and call-free assignments of a chapter cell (what later cells may name), and
    the checkers it makes (``check_x = make_checker(...)``); its training runs, plots and prints are left out."""
    try:
        tree = parse(source)
    except SyntaxError:  # IPython magics, say: nothing to take
        return ""
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and not any(
                isinstance(n, ast.Call) for n in ast.walk(node.value)):
            keep.append(node)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id.startswith("check_")
                                                  for t in node.targets):
            keep.append(node)  # an instructor's checker: `check_x = make_checker(...)`
    return "\n\n".join(ast.unparse(n) for n in keep)


def chapter_sources(chapter: Any, exs: list[Exercise]) -> list[str]:
    """The definitions of the chapter's cells that are not an exercise's (what the kernel runs among the answers)."""
    skip = {i for ex in exs for i in (ex.answer_index, ex.solution_index, ex.check_index) if i is not None}
    return [src for i, cell in enumerate(chapter["cells"][:exs[-1].check_index + 1])
            if i not in skip and cell.get("cell_type") == "code" and not is_setup_cell(cell.get("source", ""))
            and (src := chapter_definitions(cell.get("source", "")))]
