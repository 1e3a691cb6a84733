"""No stale stored output: what a chapter shows without a kernel is what its code gives today.

nbval re-runs a chapter and compares the cells marked ``# NBVAL_CHECK_OUTPUT``; but it needs a kernel and minutes,
and it does not compare rich outputs such as the quiz's static page. This test re-renders, without a kernel, every
stored output that is a pure function of the package and the cell's source, and compares it with what is stored:

- every **quiz** cell (``quiz.show("NN")``): its stored ``text/plain`` and ``text/html`` must equal
  ``quiz.to_text`` and ``quiz.to_html`` of today's ``tfm_lesson/course/quizzes/chNN.py`` (a quiz edited without
  re-running its cell is what this catches);
- every cell whose code only **prints string literals** (``print("...")``, nothing computed): its stored text must
  be those strings;
- every **checker cell** (``# NBVAL_CHECK_OUTPUT`` and a single ``check_...(name)`` call) whose piece the chapter's
  solution cells define on their own: the solution cells run in a fresh namespace (imports only), then the
  checker, and its printed verdict must equal the stored one. A checker whose message was reworded, or whose
  count of cases changed, shows here without executing the chapter (marked ``slow``: about a minute for all
  chapters on a 2-core CPU). Cells whose solution needs the chapter's earlier state are skipped.

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


PRELUDE = ("import math, copy, contextlib\nimport torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
           "from tfm_lesson.checks import *\n")


def _checker_call(source: str) -> str | None:
    """The code of a cell that is one ``check_...(...)`` call (comments aside), else None."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#")).strip()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    ok = (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Call)
          and isinstance(tree.body[0].value.func, ast.Name) and tree.body[0].value.func.id.startswith("check_"))
    return code if ok else None


def stale_checker_cells(nb) -> tuple[list[str], int]:
    """(what differs, how many checker cells were compared) for the checker cells described above."""
    import contextlib
    import io

    from tfm_lesson.checks import Mistake

    namespace: dict = {}
    exec(PRELUDE, namespace)
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            try:
                exec(cell.source, namespace)
            except Exception:  # the solutions need the chapter's earlier cells: nothing to compare here
                return [], 0
    found, compared = [], 0
    for i, cell in enumerate(nb.cells):
        code = _checker_call(cell.source) if cell.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in cell.source else None
        if code is None:
            continue
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(code, namespace)
        except (Mistake, NameError) as exc:
            if "NameError" in f"{type(exc).__name__}: {exc}":
                continue  # the piece leans on a name from the chapter's other cells
            found.append(f"cell {i}: the reference solution no longer passes `{code}`: {str(exc)[:160]}")
            continue
        compared += 1
        stored = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        if stored != printed.getvalue():
            found.append(f"cell {i}: `{code}` prints {printed.getvalue()[:160]!r}, the stored output is "
                         f"{stored[:160]!r}")
    return found, compared


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_stored_checker_verdicts_are_not_stale(path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TFM_DEVICE", "cpu")
    found, _ = stale_checker_cells(nbformat.read(path, as_version=4))
    assert not found, (f"{path.name}: checker verdicts that today's checkers print differently (re-execute the "
                       "chapter):\n  " + "\n  ".join(found))


def test_a_stale_checker_verdict_is_caught() -> None:
    solution = nbformat.v4.new_code_cell("def double(x):\n    return 2 * x\n", metadata={"tags": ["solution"]})
    source = "# NBVAL_CHECK_OUTPUT\ncheck_demo(double)"
    check = nbformat.v4.new_code_cell(source, outputs=[nbformat.v4.new_output("stream", name="stdout", text="ok 2\n")])
    define = nbformat.v4.new_code_cell("def check_demo(f):\n    print('ok', f(1))\n", metadata={"tags": ["solution"]})
    nb = nbformat.v4.new_notebook(cells=[define, solution, check])
    assert stale_checker_cells(nb) == ([], 1)
    check.outputs[0]["text"] = "ok 3\n"
    found, compared = stale_checker_cells(nb)
    assert compared == 1 and "prints 'ok 2\\n'" in found[0]


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
