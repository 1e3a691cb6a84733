"""The three graders give the same points for the same answers: `course grade`, nbgrader (`nbgrader autograde` on the
nbgrader export) and Otter (`otter run` on the Otter export), on one small class of chapter 03 typed into each tool's
own student notebook: a correct one, a partly right one (partial credit from the checkers' named checks), one with
an endless loop in an exercise, one with deleted and extra cells, and one that prints 50 MiB.

Where the graders cannot agree by design (``course grade`` grades each exercise with the chapter's solution of the
ones before it; nbgrader and Otter run the student's own), the class keeps each answer's effect to its own exercise;
the instructors' page says so."""
from __future__ import annotations

import copy
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from test_export import _env, _exercises_only, _otter_cell, _tool, otter_assigned, otter_results
from tfm_lesson.course import student_copy
from tfm_lesson.course.exercises import exercises
from tfm_lesson.course.solution_form import strip_title

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"

pytestmark = pytest.mark.slow  # three graders, five submissions, each in its own kernel: minutes

SPLIT_BUGGY = """\
def split_heads(x, heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, heads, length, d_model // heads)  # no transpose: shape and dtype right, values not
"""
LOOP = "while True:\n    pass\n"
HUGE = "print('y' * (50 * 2**20))  # 50 MiB of output\n"
EXTRA_STUB = "def split_heads(x, heads):\n    ...  # pasted twice\n"
# what each submission's answers are (None: the exercise's cells deleted), and the points every grader must give
CLASS = {
    "correct": ({}, [3, 3, 3]),
    "partly": ({1: SPLIT_BUGGY, 3: "scaled"}, [1.5, 3, 0.6]),
    "loop": ({3: LOOP + "SOLUTION"}, [3, 3, 0]),
    "cells": ({3: None}, [3, 3, 0]),
    "loud": ({2: HUGE + "SOLUTION"}, [3, 3, 3]),
}


def _answers(chapter) -> dict[str, dict[int, str | None]]:
    """Each submission's answer to each exercise (the chapter's solution unless ``CLASS`` says otherwise)."""
    solutions = {ex.number: strip_title(chapter.cells[ex.solution_index].source) for ex in exercises(chapter)}
    # exercise 3 with sqrt(d_model) for sqrt(d_k) (its projections pass), splitting the heads with a helper of its
    # own, so that exercise 1's bug stays in exercise 1 with nbgrader and Otter too (they run the student's
    # split_heads; Otter even runs every test after the whole notebook, so redefining split_heads would mend
    # exercise 1 there)
    helper = solutions[1].replace("def split_heads(", "def _to_heads(")
    scaled = helper + "\n\n" + solutions[3].replace("math.sqrt(self.d_k)", "math.sqrt(self.heads * self.d_k)"
                                                      ).replace("split_heads(", "_to_heads(")
    assert scaled.count("math.sqrt(self.heads * self.d_k)") == 1 and "split_heads" not in scaled
    out = {}
    for name, (changes, _) in CLASS.items():
        answers = dict(solutions)
        for n, source in changes.items():
            answers[n] = None if source is None else scaled if source == "scaled" else source.replace(
                "SOLUTION", solutions[n])
        out[name] = answers
    return out


def _fill(nb, cells: dict[int, list[int]], answers: dict[int, str | None], extra_before: int | None = None):
    """``nb`` with exercise n's answer typed in its answer cell (``cells[n][0]``), or all of ``cells[n]`` deleted;
    ``extra_before``: a pasted stub added before that exercise's answer cell, and a scratch cell after it."""
    out = copy.deepcopy(nb)
    drop, insert = set(), {}
    for n, source in answers.items():
        if source is None:
            drop |= set(cells[n])
        else:
            out.cells[cells[n][0]].source = source
    if extra_before is not None:
        insert[cells[extra_before][0]] = nbformat.v4.new_code_cell(EXTRA_STUB)
    new = []
    for i, cell in enumerate(out.cells):
        if i in insert:
            new.append(insert[i])
        if i not in drop:
            new.append(cell)
        if i in insert:
            new.append(nbformat.v4.new_code_cell("scratch = 1  # trying things"))
    out.cells = new
    return out


def _course_grade(tmp: Path, answers) -> dict[str, list[float]]:
    chapter = nbformat.read(CHAPTER, as_version=4)
    blank = student_copy(chapter)
    cells = {ex.number: [ex.answer_index, ex.solution_index] for ex in exercises(chapter)}
    subs = tmp / "course"
    subs.mkdir()
    for name, given in answers.items():
        nbformat.write(_fill(blank, cells, given, 1 if name == "cells" else None), subs / f"{name}.ipynb")
    from test_grading import SANDBOX

    run = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "grade", str(CHAPTER), str(subs), "--csv",
                          str(tmp / "grades.csv"), "--timeout", "30", "--jobs", "1", "--seed", "7", *SANDBOX],
                         capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    points: dict[str, list[float]] = {}
    with open(tmp / "grades.csv", newline="") as f:
        for row in csv.DictReader(f):
            if not row["exercise"].startswith("Exercise"):
                continue  # the quiz's line: tests/test_quiz_graders.py compares it across the three
            points.setdefault(Path(row["submission"]).stem, []).append(float(row["points"]))
            if row["message"]:
                print("course grade:", Path(row["submission"]).stem, row["exercise"], row["message"][:300])
    return points


def _nbgrader(tmp: Path, answers) -> dict[str, list[float]]:
    nbgrader = _tool("nbgrader")
    path = tmp / "ch.ipynb"
    nbformat.write(_exercises_only(), path)
    course = tmp / "nbgrader"
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(path), "--format", "nbgrader", "--out",
                    str(course), "--assignment", "ch03", "--timeout", "30"], check=True, cwd=ROOT, env=_env())
    run = subprocess.run([str(nbgrader), "generate_assignment", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    release = nbformat.read(course / "release" / "ch03" / "ch.ipynb", as_version=4)
    grade_ids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in release.cells]
    # exercise n: its answer cell, then the locked cell before it that shows its names
    cells = {n: [grade_ids.index(f"ex{n}-answer"), grade_ids.index(f"ex{n}-answer") - 1] for n in (1, 2, 3)}
    for name, given in answers.items():
        folder = course / "submitted" / name / "ch03"
        folder.mkdir(parents=True)
        nbformat.write(_fill(release, cells, given, 1 if name == "cells" else None), folder / "ch.ipynb")
    run = subprocess.run([str(nbgrader), "autograde", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {name: [next(g.score for g in gb.find_submission_notebook("ch", "ch03", name).grades
                            if g.name == f"ex{n}-check") for n in (1, 2, 3)] for name in answers}


def _otter(tmp: Path, answers) -> dict[str, list[float]]:
    source = tmp / "source" / "ch.ipynb"
    source.parent.mkdir()
    nbformat.write(_exercises_only(), source)
    dist, autograder = otter_assigned(source, tmp / "otter", 30)
    student = nbformat.read(dist / "student" / "ch.ipynb", as_version=4)
    cells = {n: [_otter_cell(student, word)] for n, word in
             ((1, "def split_heads"), (2, "def merge_heads"), (3, "class MyMultiHeadAttention"))}
    points = {}
    for name, given in answers.items():
        nbformat.write(_fill(student, cells, given, 1 if name == "cells" else None), tmp / f"{name}.ipynb")
        tests = otter_results(autograder, tmp / f"{name}.ipynb", tmp / f"otter-{name}", timeout=900)
        points[name] = [round(tests[f"ex{n}"].get("score", 0) or 0, 2) for n in (1, 2, 3)]
    return points


def test_course_grade_nbgrader_and_otter_give_the_same_points(tmp_path):
    answers = _answers(nbformat.read(CHAPTER, as_version=4))
    expected = {name: points for name, (_, points) in CLASS.items()}
    took = {}
    for grader, run in (("course grade", _course_grade), ("nbgrader", _nbgrader), ("otter", _otter)):
        start = time.monotonic()
        got = run(tmp_path, answers)
        took[grader] = round(time.monotonic() - start)
        assert got == expected, (grader, got)
    print(f"seconds per grader, five submissions (load {os.getloadavg()}):", took)
