"""Export to nbgrader and Otter-Grader (tfm_lesson/export.py), run through the real tools: `nbgrader
generate_assignment` + `nbgrader autograde`, and `otter assign` + `otter run` (Otter's runner without Docker), on a
correct, a buggy (the package's module subclassed, the checker's name rebound: named "WRITE IT YOURSELF"), an empty
and (nbgrader) an endless-loop submission. The chapter is 03's exercises with the definitions before them (the
chapter's plots and widgets left out, to keep CI short)."""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.export import nbgrader_notebook, otter_notebook
from tfm_lesson.grading import _definitions, exercises

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

TAMPER = """\
check_multi_head_attention = lambda cls: None  # rebinding the checker's name


class MyMultiHeadAttention(T.MultiHeadAttention):  # the package's reference does the work
    pass
"""
LOOP = "while True:\n    pass\n"


def _exercises_only() -> nbformat.NotebookNode:
    """Chapter 03 cut to its exercises, after the imports and definitions of the cells before them."""
    nb = nbformat.read(CHAPTER, as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## Exercises"))
    head = []
    for cell in nb.cells[1:start]:
        source = _definitions(cell.source) if cell.cell_type == "code" else ""
        if source:
            head.append(nbformat.v4.new_code_cell(source))
    nb.cells = head + nb.cells[start:]
    return nb


def _env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "TFM_DEVICE": "cpu"}


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in this environment (requirements.txt lists it)")
    return path


def test_nbgrader_metadata_and_regions():
    nb = nbgrader_notebook(_exercises_only())
    meta = [c.metadata["nbgrader"] for c in nb.cells]
    assert all(m["schema_version"] == 3 and "grade_id" in m for m in meta)
    assert len({m["grade_id"] for m in meta}) == len(meta)  # unique
    answers = [c for c in nb.cells if c.metadata["nbgrader"]["solution"]]
    tests = [c for c in nb.cells if c.metadata["nbgrader"]["grade"]]
    assert len(answers) == len(tests) == 3
    assert all(c.source.startswith("### BEGIN SOLUTION\n") and "### END SOLUTION" in c.source for c in answers)
    assert [c.metadata["nbgrader"]["points"] for c in tests] == [3, 3, 3]
    assert all(c.metadata["nbgrader"]["locked"] for c in nb.cells if c not in answers)


def test_otter_format_cells():
    nb = otter_notebook(_exercises_only(), "ch03")
    raws = [c.source for c in nb.cells if c.cell_type == "raw"]
    assert raws[0].startswith("# ASSIGNMENT CONFIG")
    assert [r for r in raws if r.startswith("# BEGIN QUESTION")] == [
        f"# BEGIN QUESTION\nname: ex{n}\npoints: 3" for n in (1, 2, 3)]
    assert raws.count("# BEGIN SOLUTION") == raws.count("# BEGIN TESTS") == 3
    tests = [c.source for c in nb.cells if c.cell_type == "code" and "BEGIN TEST CONFIG" in c.source]
    assert len(tests) == 3 and all("failure_message:" in t for t in tests)


def _fill(nb, answers: dict[int, str], is_answer) -> nbformat.NotebookNode:
    """``nb`` with exercise n's answer cell (the n-th cell ``is_answer`` picks) replaced by ``answers[n]``."""
    out = copy.deepcopy(nb)
    cells = [c for c in out.cells if is_answer(c)]
    for n, source in answers.items():
        cells[n - 1].source = source
    return out


def test_nbgrader_autograde_scores_and_names_the_mistake(tmp_path):
    nbgrader = _tool("nbgrader")
    chapter = _exercises_only()
    path = tmp_path / "ch.ipynb"
    nbformat.write(chapter, path)
    solutions = {ex.number: chapter.cells[ex.solution_index].source for ex in exercises(chapter)}
    course = tmp_path / "course"
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(path), "--format", "nbgrader",
                    "--out", str(course), "--assignment", "ch03"], check=True, cwd=ROOT, env=_env())
    with open(course / "nbgrader_config.py", "a") as f:
        f.write("c.Execute.timeout = 30\n")  # the endless loop below is stopped after 30 s
    run = subprocess.run([str(nbgrader), "generate_assignment", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    release = nbformat.read(course / "release" / "ch03" / "ch.ipynb", as_version=4)
    is_answer = lambda c: c.metadata.get("nbgrader", {}).get("solution")  # noqa: E731
    assert all("raise NotImplementedError()" in c.source for c in release.cells if is_answer(c))
    subs = {"correct": _fill(release, solutions, is_answer),
            "buggy": _fill(release, {**solutions, 3: TAMPER}, is_answer),
            "empty": release,
            "loop": _fill(release, {**solutions, 1: LOOP + solutions[1]}, is_answer)}
    for student, nb in subs.items():
        (course / "submitted" / student / "ch03").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "ch03" / "ch.ipynb")
    run = subprocess.run([str(nbgrader), "autograde", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission("ch03", s).score for s in subs}
    assert scores == {"correct": 9, "buggy": 6, "empty": 0, "loop": 3}  # the loop: exercise 1, and 3 that uses it
    graded = nbformat.read(course / "autograded" / "buggy" / "ch03" / "ch.ipynb", as_version=4)
    feedback = json.dumps([c.outputs for c in graded.cells if c.cell_type == "code"])
    assert "WRITE IT YOURSELF" in feedback and "derives from tfm_lesson.attention.MultiHeadAttention" in feedback


def test_otter_assign_and_run_score_and_name_the_mistake(tmp_path):
    otter = _tool("otter")
    chapter = _exercises_only()
    path = tmp_path / "ch.ipynb"
    nbformat.write(chapter, path)
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(path), "--format", "otter",
                    "--out", str(tmp_path / "otter"), "--assignment", "ch03"], check=True, cwd=ROOT, env=_env())
    run = subprocess.run([str(otter), "assign", "ch.ipynb", "dist"], cwd=tmp_path / "otter", env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    dist = tmp_path / "otter" / "dist"
    autograder = next((dist / "autograder").glob("*.zip"))
    solved = nbformat.read(dist / "autograder" / "ch.ipynb", as_version=4)
    student = nbformat.read(dist / "student" / "ch.ipynb", as_version=4)
    buggy = copy.deepcopy(solved)
    for cell in buggy.cells:
        if cell.cell_type == "code" and "def masked_softmax" in cell.source and "class MyMultiHeadAttention" in cell.source:
            cell.source = TAMPER
    results = {}
    for name, nb in {"correct": solved, "buggy": buggy, "empty": student}.items():
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        out = tmp_path / f"out-{name}"
        out.mkdir()
        run = subprocess.run([str(otter), "run", "-a", str(autograder), "-o", str(out), str(tmp_path / f"{name}.ipynb")],
                             cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        results[name] = json.loads((out / "results.json").read_text())
    def score(r):
        return sum(t.get("score", 0) or 0 for t in r["tests"] if t["name"].startswith("ex"))
    assert [score(results[n]) for n in ("correct", "buggy", "empty")] == [9, 6, 0]
    ex3 = next(t for t in results["buggy"]["tests"] if t["name"] == "ex3")
    assert "WRITE IT YOURSELF" in ex3["output"] and "the checker's message above names the mistake" in ex3["output"]


def test_export_refuses_a_student_copy_with_exit_2(tmp_path):
    from tfm_lesson.course import student_copy

    nbformat.write(nbformat.from_dict(student_copy(nbformat.read(CHAPTER, as_version=4))), tmp_path / "s.ipynb")
    run = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(tmp_path / "s.ipynb"), "--format",
                          "otter", "--out", str(tmp_path / "o")], cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert run.returncode == 2 and "student copy" in run.stderr
    assert not (tmp_path / "o").exists()
    shutil.rmtree(tmp_path, ignore_errors=True)
