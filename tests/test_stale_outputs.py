"""No stale stored output: what a chapter shows without a kernel is what its code gives today.

nbval re-runs a chapter and compares the cells marked ``# NBVAL_CHECK_OUTPUT``; but it needs a kernel and minutes,
and it does not compare rich outputs such as the quiz's static page. This test re-renders, without a kernel, every
stored output that is a pure function of the package and the cell's source, and compares it with what is stored:

- every **quiz** cell (``quiz.show("NN")``): its stored ``text/plain`` and ``text/html`` must equal
  ``quiz.to_text`` and ``quiz.to_html`` of today's ``tfm_lesson/quizzes/chNN.py`` (a quiz edited without
  re-running its cell is what this catches);
- every cell whose code only **prints string literals** (``print("...")``, nothing computed): its stored text must
  be those strings.

To bring the stored quiz pages up to date without re-executing a chapter (the quiz cell draws only what its
questions say), run ``python tests/test_stale_outputs.py --fix``; it rewrites the affected notebooks atomically.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
QUIZ_CALL = re.compile(r"""(?:^|[\s.])quiz\.show\(\s*["'](\d\d)["']\s*\)""")


def _quiz_render(chapter: str) -> dict[str, str]:
    from tfm_lesson import quiz

    questions = quiz.load_quiz(chapter)
    return {"text/plain": quiz.to_text(questions), "text/html": quiz.to_html(questions)}


def _printed_literals(source: str) -> str | None:
    """The text a cell prints when its code is nothing but ``print`` calls of string literals; else None."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    if not code.strip():
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    out = []
    for node in tree.body:
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "print"
                and not node.value.keywords and node.value.args
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.value.args)):
            return None
        out.append(" ".join(a.value for a in node.value.args) + "\n")
    return "".join(out)


def stale_cells(nb) -> list[str]:
    """What differs between the stored outputs and a fresh render, one line per cell."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        quiz = QUIZ_CALL.search(cell.source)
        if quiz:
            fresh = _quiz_render(quiz.group(1))
            stored = [o.get("data", {}) for o in cell.get("outputs", []) if o.get("output_type") == "execute_result"]
            if not stored:
                found.append(f"cell {i}: quiz {quiz.group(1)} has no stored page")
                continue
            for mime, text in fresh.items():
                if stored[-1].get(mime) != text:
                    found.append(f"cell {i}: quiz {quiz.group(1)}'s stored {mime} differs from today's questions")
            continue
        printed = _printed_literals(cell.source)
        if printed is not None and cell.get("outputs"):
            stored_text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            if stored_text != printed:
                found.append(f"cell {i}: stored print output differs from the literals it prints")
    return found


def refresh_quizzes(path: Path) -> int:
    """Rewrite the stored pages of the quiz cells of one chapter; returns how many cells changed."""
    from tfm_lesson._io import atomic_open

    nb = nbformat.read(path, as_version=4)
    changed = 0
    for cell in nb.cells:
        quiz = QUIZ_CALL.search(cell.source) if cell.cell_type == "code" else None
        if not quiz:
            continue
        fresh = _quiz_render(quiz.group(1))
        for output in cell.get("outputs", []):
            if output.get("output_type") == "execute_result":
                for mime, text in fresh.items():
                    if output["data"].get(mime) != text:
                        output["data"][mime] = text
                        changed += 1
    if changed:
        with atomic_open(path, "w") as f:
            nbformat.write(nb, f)
    return changed


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_stored_outputs_are_not_stale(path: Path) -> None:
    found = stale_cells(nbformat.read(path, as_version=4))
    assert not found, (f"{path.name}: stored outputs that today's code renders differently (re-run the cell, or "
                       "`python tests/test_stale_outputs.py --fix` for quiz pages):\n  " + "\n  ".join(found))


def test_every_chapter_with_a_quiz_shows_it_here() -> None:
    """The quiz pattern finds the quiz cell of every chapter that has a quiz, so the check above is not empty."""
    from tfm_lesson import quiz

    shown = {m.group(1) for p in CHAPTERS for c in nbformat.read(p, as_version=4).cells
             if c.cell_type == "code" for m in [QUIZ_CALL.search(c.source)] if m}
    chapters = {p.name[:2] for p in CHAPTERS}
    assert set(quiz.quiz_chapters()) & chapters <= shown


def test_a_stale_quiz_and_a_stale_print_are_caught() -> None:
    fresh = _quiz_render("12")
    cell = nbformat.v4.new_code_cell('T.quiz.show("12")', outputs=[nbformat.v4.new_output(
        "execute_result", data={**fresh, "text/plain": fresh["text/plain"].replace("−0.27", "−0.4")},
        execution_count=1)])
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert stale_cells(nb) == ["cell 0: quiz 12's stored text/plain differs from today's questions"]
    cell.outputs[0]["data"] = fresh
    assert stale_cells(nb) == []
    printing = nbformat.v4.new_code_cell('print("a", "b")\nprint("c")', outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="a b\nc\n")])
    assert stale_cells(nbformat.v4.new_notebook(cells=[printing])) == []
    printing.outputs[0]["text"] = "a b\n"
    assert stale_cells(nbformat.v4.new_notebook(cells=[printing])) != []
    assert _printed_literals("print(x)") is None and _printed_literals("x = 1") is None


if __name__ == "__main__":
    if "--fix" in sys.argv[1:]:
        for chapter in CHAPTERS:
            n = refresh_quizzes(chapter)
            if n:
                print(f"{chapter.name}: {n} stored quiz output(s) refreshed")
    else:
        for chapter in CHAPTERS:
            for line in stale_cells(nbformat.read(chapter, as_version=4)):
                print(chapter.name, line)
