"""Student copies say nothing false: a stored output that shows a result of the exercises' answers (chapter 10's
"your loop == tfm_lesson.train.loop.train ... True") is cleared in the student copy, and `restore` brings it back.
The rule (tfm_lesson/course/_depends.py): a cell depends on the answers when it reads a name a solution defines, or a name
an earlier dependent cell assigned."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course._depends import answer_dependent_cells
from tfm_lesson.course import _CLEARED_KEY, _is_solution, chapters, restore, student_copy

ROOT = Path(__file__).resolve().parent.parent


def _code(source: str, tags=()):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("stream", text="stored\n")]
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def test_the_rule_follows_assignments_in_order():
    cells = [_code("import torch\nx = torch.ones(3)"),  # before any solution: kept
             _code("def f(a):\n    local = a\n    return a", tags=["solution"]),
             _code("print(f(x))"),  # reads f: cleared
             _code("y = f(x)"),  # y now carries the answer
             _code("print(y.sum())"),  # cleared through y
             _code("local = 3\nprint(local)"),  # a local name of the solution's function is not the answer's
             _code("y = torch.zeros(2)\nprint(y)"),  # y rebound to something else: kept
             _code("print(y)")]
    assert answer_dependent_cells(cells, _is_solution) == [2, 3, 4]


def test_a_comprehension_variable_is_not_the_notebooks():
    """``[f(l) for l in ...]`` in a dependent cell binds no ``l``: a later cell that loops over its own ``l`` does not
    depend on the answers; a ``:=`` inside a comprehension does bind its name."""
    cells = [_code("def f(a):\n    return a", tags=["solution"]),
             _code("ys = [f(l) for l in range(2)]\nlast = [(n := f(l)) for l in range(2)]"),  # reads f: cleared
             _code("print([l * 2 for l in range(3)])"),  # its own l: kept
             _code("print(n)")]  # n was bound by := in a dependent statement: cleared
    assert answer_dependent_cells(cells, _is_solution) == [1, 3]


def test_chapter_10_student_copy_claims_nothing_for_work_not_done():
    nb = nbformat.read(ROOT / "notebooks" / "10_training_toy_tasks.ipynb", as_version=4)
    copy = student_copy(nb)
    texts = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                      for c in copy.cells if c.cell_type == "code" for o in c.outputs)
    assert "your loop == tfm_lesson.train.loop.train" not in texts
    assert "your greedy_decode == tfm_lesson's" not in texts
    assert "passed:" not in texts  # no checker's success line either
    assert any(_CLEARED_KEY in c.metadata for c in copy.cells)


@pytest.mark.parametrize("path", chapters(ROOT / "notebooks"), ids=lambda p: p.stem[:2])
def test_every_student_copy_clears_what_depends_on_answers_and_restore_undoes_it(path):
    nb = nbformat.read(path, as_version=4)
    copy = student_copy(nb)
    for i in answer_dependent_cells(nb.cells, _is_solution):
        assert copy.cells[i].outputs == [], f"cell {i + 1} keeps an output that depends on the answers"
    assert nbformat.from_dict(restore(copy, nb)) == nb
