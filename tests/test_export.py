"""Export to nbgrader and Otter-Grader (tfm_lesson/course/export.py), run through the real tools: `nbgrader
generate_assignment` + `nbgrader autograde`, and `otter assign` + `otter run` (Otter's runner without Docker), on a
correct, a buggy (the package's module subclassed, the checker's name rebound: named "WRITE IT YOURSELF"), an empty,
an endless-loop and a hostile submission (a bug, a tampered or patched checker, an exercise's cells deleted, cells
added) and a file that is not a notebook. The chapter is 03's exercises with the definitions before them (the
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

from tfm_lesson.course.export import nbgrader_notebook, otter_notebook
from tfm_lesson.course.exercises import chapter_definitions, exercises

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
SPLIT_BUGGY = """\
def split_heads(x, heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, heads, length, d_model // heads)  # no transpose
"""
PATCH = """\
import tfm_lesson.checks, tfm_lesson.checks.heads
tfm_lesson.checks.check_split_heads = lambda fn: None  # the checker patched where it lives
tfm_lesson.checks.heads.check_split_heads = lambda fn: None
check_split_heads = lambda fn: None
"""


def _exercises_only() -> nbformat.NotebookNode:
    """Chapter 03 cut to its exercises, after the imports and definitions of the cells before them."""
    nb = nbformat.read(CHAPTER, as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## Exercises"))
    head = []
    for cell in nb.cells[1:start]:
        source = chapter_definitions(cell.source) if cell.cell_type == "code" else ""
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


def test_exports_carry_no_fold_of_the_chapter():
    """A solution is folded twice in the chapter (JupyterLab's source_hidden, Colab's form); each tool marks the
    answer its own way, and a Colab form would hide the student's answer cell in Colab."""
    chapter = nbformat.read(CHAPTER, as_version=4)
    assert any(c.metadata.get("cellView") == "form" for c in chapter.cells), "chapter 03 is not folded"
    for nb in (nbgrader_notebook(chapter), otter_notebook(chapter, "ch03")):
        assert not any("cellView" in c.metadata or "jupyter" in c.metadata or "@title" in c.source
                       for c in nb.cells)


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
                    "--out", str(course), "--assignment", "ch03", "--timeout", "30"], check=True, cwd=ROOT, env=_env())
    assert "c.Execute.timeout = 30" in (course / "nbgrader_config.py").read_text()  # the endless loop: 30 s
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
    # hostile: a bug in exercise 1 whose test cell is emptied, an added cell patching the checker, and exercise 3's
    # answer and test cells deleted
    hostile = _fill(release, {**solutions, 1: SPLIT_BUGGY}, is_answer)
    is_test = lambda c: c.metadata.get("nbgrader", {}).get("grade")  # noqa: E731
    tests = [i for i, c in enumerate(hostile.cells) if is_test(c)]
    hostile.cells[tests[0]].source = "pass  # no check here"
    hostile.cells.insert(tests[0], nbformat.v4.new_code_cell(PATCH))
    answers = [i for i, c in enumerate(hostile.cells) if is_answer(c)]
    del hostile.cells[answers[2]:tests[2] + 2]
    subs["hostile"] = hostile
    for student, nb in subs.items():
        (course / "submitted" / student / "ch03").mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / "ch03" / "ch.ipynb")
    (course / "submitted" / "notes" / "ch03").mkdir(parents=True)
    (course / "submitted" / "notes" / "ch03" / "ch.ipynb").write_text("these are my notes, not a notebook")
    run = subprocess.run([str(nbgrader), "autograde", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=900)
    log = run.stdout + run.stderr
    # nbgrader grades every other submission and reports the file that is not a notebook (exit 1 for it)
    assert run.returncode == 1 and "notes" in log and "NotJSONError" in log, log[-3000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission("ch03", s).score for s in subs}
        hostile_grades = {g.name: (g.auto_score, g.needs_manual_grade)
                          for g in gb.find_submission_notebook("ch", "ch03", "hostile").grades}
    # the loop: exercise 1, and 3 that uses it; hostile: its emptied test cell is nbgrader's again and the patched
    # checker is imported afresh (exercise 1: 0), and its deleted test cell waits for the instructor
    assert scores == {"correct": 9, "buggy": 6, "empty": 0, "loop": 3, "hostile": 3}
    assert hostile_grades == {"ex1-check": (0, False), "ex2-check": (3, False), "ex3-check": (None, True)}
    graded = nbformat.read(course / "autograded" / "buggy" / "ch03" / "ch.ipynb", as_version=4)
    feedback = json.dumps([c.outputs for c in graded.cells if c.cell_type == "code"])
    assert "WRITE IT YOURSELF" in feedback and "derives from tfm_lesson.attention.MultiHeadAttention" in feedback
    from tfm_lesson.checks.heads import SPLIT_NO_TRANSPOSE

    graded = nbformat.read(course / "autograded" / "hostile" / "ch03" / "ch.ipynb", as_version=4)
    assert SPLIT_NO_TRANSPOSE in json.dumps([c.outputs for c in graded.cells if c.cell_type == "code"])
    assert not (course / "autograded" / "notes").exists()


def _otter_cell(nb, *words) -> int:
    """The index of the first code cell of ``nb`` whose source holds every one of ``words``."""
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and all(w in c.source for w in words))


def test_otter_assign_and_run_score_and_name_the_mistake(tmp_path):
    """`otter run` on correct, buggy, empty and hostile submissions. Otter's local runner has no time limit of its
    own: the exported config's plugin (OtterCellTimeLimit) stops the endless loop after --timeout seconds."""
    otter = _tool("otter")
    chapter = _exercises_only()
    path = tmp_path / "ch.ipynb"
    nbformat.write(chapter, path)
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(path), "--format", "otter",
                    "--out", str(tmp_path / "otter"), "--assignment", "ch03", "--timeout", "30"], check=True, cwd=ROOT,
                   env=_env())
    run = subprocess.run([str(otter), "assign", "ch.ipynb", "dist"], cwd=tmp_path / "otter", env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    dist = tmp_path / "otter" / "dist"
    autograder = next((dist / "autograder").glob("*.zip"))
    solved = nbformat.read(dist / "autograder" / "ch.ipynb", as_version=4)
    student = nbformat.read(dist / "student" / "ch.ipynb", as_version=4)
    ex1, ex3 = _otter_cell(solved, "def split_heads"), _otter_cell(solved, "class MyMultiHeadAttention")
    buggy = copy.deepcopy(solved)
    buggy.cells[ex3].source = TAMPER
    loop = copy.deepcopy(solved)
    loop.cells[ex1].source = LOOP + loop.cells[ex1].source
    hostile = copy.deepcopy(solved)  # a bug in exercise 1, a patched checker, and exercise 3's cells deleted
    hostile.cells[ex1].source = SPLIT_BUGGY
    for cell in hostile.cells:
        if cell.cell_type == "code" and "grader.check(" in cell.source:
            cell.source = "pass  # the check call, deleted"
    hostile.cells.insert(ex1 + 1, nbformat.v4.new_code_cell(PATCH))
    del hostile.cells[ex3 + 1:]
    subs = {"correct": solved, "buggy": buggy, "empty": student, "loop": loop, "hostile": hostile}
    results, outputs = {}, {}
    for name, nb in subs.items():
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    (tmp_path / "notes.ipynb").write_text("these are my notes, not a notebook")
    for name in [*subs, "notes"]:
        out = tmp_path / f"out-{name}"
        out.mkdir()
        run = subprocess.run([str(otter), "run", "-a", str(autograder), "-o", str(out),
                              str(tmp_path / f"{name}.ipynb")], cwd=tmp_path, env=_env(), capture_output=True,
                             text=True, timeout=600)
        outputs[name] = (run.returncode, run.stdout + run.stderr)
        if name != "notes":
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            results[name] = {t["name"]: t for t in json.loads((out / "results.json").read_text())["tests"]}

    def scores(name):
        return [results[name][f"ex{n}"].get("score", 0) or 0 for n in (1, 2, 3)]

    assert [sum(scores(n)) for n in ("correct", "buggy", "empty")] == [9, 6, 0]
    assert "WRITE IT YOURSELF" in results["buggy"]["ex3"]["output"]
    assert "the checker's message above names the mistake" in results["buggy"]["ex3"]["output"]
    # the endless loop costs exercise 1 (and 3, which uses split_heads); exercise 2 still scores
    assert scores("loop") == [0, 3, 0]
    # deleted check calls and a patched checker change nothing; the deleted exercise scores 0
    from tfm_lesson.checks.heads import SPLIT_NO_TRANSPOSE

    assert scores("hostile") == [0, 3, 0]
    assert SPLIT_NO_TRANSPOSE in results["hostile"]["ex1"]["output"]
    assert "MyMultiHeadAttention" in results["hostile"]["ex3"]["output"]  # NameError: the class is not there
    # a file that is not a notebook: `otter run` stops on it with the reason (no results.json); one run per file
    code, text = outputs["notes"]
    assert code != 0 and "NotJSONError" in text and not (tmp_path / "out-notes" / "results.json").exists()


def test_otter_time_limit_plugin_stops_a_cell_and_goes_on():
    """The plugin's cells in an ordinary kernel: a loop stops after the limit with the reason, the next cell runs,
    and after the last (Otter's own test cell goes there) nothing is limited."""
    from nbclient import NotebookClient

    from tfm_lesson.course.export import OtterCellTimeLimit

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LOOP), nbformat.v4.new_code_cell("x = 1")])
    assert OtterCellTimeLimit("", {}, {}).seconds == 600  # the default
    assert OtterCellTimeLimit("", {}, {"seconds": 2}).before_execution("print(1)") == "print(1)"  # a .py: as it is
    with pytest.raises(ValueError, match="seconds must be > 0"):
        OtterCellTimeLimit("", {}, {"seconds": 0})
    armed = OtterCellTimeLimit("", {}, {"seconds": 2}).before_execution(nb)
    assert len(nb.cells) == 2 and len(armed.cells) == 4  # the submission itself is left as it was
    armed.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(3)\nprint('after', x)"))
    NotebookClient(armed, timeout=60, allow_errors=True, kernel_name="python3").execute()
    loop, after = armed.cells[1], armed.cells[-1]
    assert loop.outputs[0]["ename"] == "TimeoutError" and "past the grader's 2 s limit" in loop.outputs[0]["evalue"]
    assert [o.get("text") for o in after.outputs] == ["after 1\n"]


def test_export_refuses_a_student_copy_with_exit_2(tmp_path):
    from tfm_lesson.course import student_copy

    nbformat.write(nbformat.from_dict(student_copy(nbformat.read(CHAPTER, as_version=4))), tmp_path / "s.ipynb")
    run = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(tmp_path / "s.ipynb"), "--format",
                          "otter", "--out", str(tmp_path / "o")], cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert run.returncode == 2 and "student copy" in run.stderr
    assert not (tmp_path / "o").exists()
    run = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(CHAPTER), "--format", "otter",
                          "--out", str(tmp_path / "o"), "--timeout", "0"], cwd=ROOT, env=_env(), capture_output=True,
                         text=True)
    assert run.returncode == 2 and "--timeout must be > 0" in run.stderr
    assert not (tmp_path / "o").exists()
    shutil.rmtree(tmp_path, ignore_errors=True)
