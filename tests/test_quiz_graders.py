"""The quiz line is the same in all three graders: `course grade` (reads the hand-in cell as text), nbgrader
(`generate_assignment` + `autograde`, its test cell's partial credit) and Otter (`assign` + `run`, a test case a
question). The chapter is 03's first exercise with the definitions before it and its quiz; each submission leaves the
exercise as handed out and hands in other letters: all right, one wrong and one skipped, none, and letters the
hand-in refuses (its cell raises)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course import student_copy
from tfm_lesson.course.exercises import exercises
from tfm_lesson.course.quiz import LETTERS, load_quiz
from tfm_lesson.course.quiz_hand_in import is_hand_in_cell

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_export import ROOT, _env, _exercises_only, _tool, otter_assigned, otter_results  # noqa: E402
from test_grading import SANDBOX  # noqa: E402

pytestmark = pytest.mark.slow

RIGHT = "".join(LETTERS[q.answer] for q in load_quiz("03"))
ONE_WRONG = LETTERS[(load_quiz("03")[0].answer + 1) % len(load_quiz("03")[0].options)] + RIGHT[1] + "?" + RIGHT[3]
LETTERS_OF = {"all": json.dumps(RIGHT), "two": json.dumps(ONE_WRONG), "none": '""', "bad": '"AZ"'}
EXPECTED = {"all": 4, "two": 2, "none": 0, "bad": 0}


def _chapter() -> nbformat.NotebookNode:
    """Chapter 03 cut to its first exercise, then its quiz."""
    nb = _exercises_only()
    nb.cells = nb.cells[:exercises(nb)[0].check_index + 1] + [nbformat.v4.new_code_cell('T.quiz.show("03")')]
    return nb


def _handed_in(nb, letters: str) -> nbformat.NotebookNode:
    """``nb`` (a tool's student version) with ``letters`` (Python text) written into its hand-in cell."""
    out = nbformat.reads(nbformat.writes(nb), as_version=4)
    cells = [c for c in out.cells if is_hand_in_cell(c)]
    assert len(cells) == 1, "one hand-in cell in the student version"
    assert 'hand_in("03", "")' in cells[0].source
    cells[0].source = cells[0].source.replace('hand_in("03", "")', f'hand_in("03", {letters})')
    return out


def _course_grade(tmp: Path, chapter: Path) -> dict[str, float]:
    subs = tmp / "subs"
    subs.mkdir()
    blank = student_copy(nbformat.read(chapter, as_version=4))
    for name, letters in LETTERS_OF.items():
        nbformat.write(_handed_in(blank, letters), subs / f"{name}.ipynb")
    run = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "grade", str(chapter), str(subs), "--csv",
                          str(tmp / "grades.csv"), "--timeout", "60", *SANDBOX], capture_output=True, text=True,
                         cwd=ROOT, env=_env(), timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(tmp / "grades.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["exercise"] == "Quiz 03"]
    assert all(r["max_points"] == "4" for r in rows) and len(rows) == len(LETTERS_OF)
    # --no-quiz: the exercise's line only, and the totals without the quiz
    run = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "grade", str(chapter), str(subs / "all.ipynb"),
                          "--csv", str(tmp / "no-quiz.csv"), "--timeout", "60", "--no-quiz", *SANDBOX],
                         capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=900)
    assert run.returncode == 0 and "all.ipynb: 0 / 3" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    with open(tmp / "no-quiz.csv", newline="") as f:
        assert [r["exercise"] for r in csv.DictReader(f)] == [exercises(nbformat.read(chapter, as_version=4))[0].title]
    return {Path(r["submission"]).stem: float(r["points"]) for r in rows}


def _nbgrader(tmp: Path, chapter: Path) -> dict[str, float]:
    nbgrader = _tool("nbgrader")
    course = tmp / "course"
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(chapter), "--format", "nbgrader",
                    "--out", str(course), "--assignment", "ch03", "--timeout", "60"], check=True, cwd=ROOT, env=_env())
    run = subprocess.run([str(nbgrader), "generate_assignment", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    release = nbformat.read(course / "release" / "ch03" / "ch.ipynb", as_version=4)
    assert not any(c.get("outputs") for c in release.cells)  # the hand-out stores no quiz page, no answer
    for name, letters in LETTERS_OF.items():
        (course / "submitted" / name / "ch03").mkdir(parents=True)
        nbformat.write(_handed_in(release, letters), course / "submitted" / name / "ch03" / "ch.ipynb")
    run = subprocess.run([str(nbgrader), "autograde", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grades = {name: {g.name: g for g in gb.find_submission_notebook("ch", "ch03", name).grades}
                  for name in LETTERS_OF}
        assert all(g["quiz03"].max_score == 4 for g in grades.values())
        return {name: float(g["quiz03"].auto_score) for name, g in grades.items()}


def _otter(tmp: Path, chapter: Path) -> dict[str, float]:
    dist, autograder = otter_assigned(chapter, tmp / "otter", 60)
    student = nbformat.read(dist / "student" / "ch.ipynb", as_version=4)
    assert not any(c.get("outputs") for c in student.cells)
    scores = {}
    for name, letters in LETTERS_OF.items():
        nbformat.write(_handed_in(student, letters), tmp / f"{name}.ipynb")
        tests = otter_results(autograder, tmp / f"{name}.ipynb", tmp / f"out-{name}")
        assert tests["quiz03"]["max_score"] == 4
        scores[name] = float(tests["quiz03"].get("score") or 0)
    return scores


def test_the_three_graders_give_the_same_quiz_score(tmp_path):
    path = tmp_path / "ch.ipynb"
    nbformat.write(_chapter(), path)
    for folder in ("grade", "nbgrader", "otter"):
        (tmp_path / folder).mkdir()
    ours = _course_grade(tmp_path / "grade", path)
    assert ours == EXPECTED
    nbgrader = _nbgrader(tmp_path / "nbgrader", path)
    otter = _otter(tmp_path / "otter", path)
    assert nbgrader == otter == ours == EXPECTED, {"course grade": ours, "nbgrader": nbgrader, "otter": otter}
