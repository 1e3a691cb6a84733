"""Export to nbgrader and Otter-Grader (tfm_lesson/course/export.py), run through the real tools: `nbgrader
generate_assignment` + `nbgrader autograde`, and `otter assign` + `otter run` (Otter's runner without Docker), on a
correct, a buggy (the package's module subclassed, the checker's name rebound: named "WRITE IT YOURSELF"), an empty,
an endless-loop, a loop that catches whatever is sent into the kernel, and a hostile submission (a bug, a tampered or
patched checker, an exercise's cells deleted, cells added) and a file that is not a notebook. The chapter is 03's
exercises with the definitions before them (the chapter's plots and widgets left out, to keep CI short). The
export's own rules (what it may write over, the Otter stub, requirements) are in tests/test_export_guard.py, the
watchdog's in tests/test_kernel_watchdog.py."""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course.export import nbgrader_notebook, otter_notebook
from tfm_lesson.course.exercises import chapter_definitions, exercises
from tfm_lesson.course.quiz_hand_in import is_hand_in_cell

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
# an endless loop that catches whatever the kernel is sent inside (SIGALRM's exception, the interrupt)
SWALLOW = "import time\nwhile True:\n    try:\n        time.sleep(.1)\n    except BaseException:\n        pass\n"
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
    hand_in = [c for c in nb.cells if is_hand_in_cell(c)]  # the learner's, as they write it: no nbgrader metadata
    assert len(hand_in) == 1 and "nbgrader" not in hand_in[0].metadata
    meta = [c.metadata["nbgrader"] for c in nb.cells if c not in hand_in]
    assert all(m["schema_version"] == 3 and "grade_id" in m for m in meta)
    assert len({m["grade_id"] for m in meta}) == len(meta)  # unique
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(answers) == 3 and len(tests) == 4  # the exercises' and the quiz's
    assert all(c.source.startswith("### BEGIN SOLUTION\n") and "### END SOLUTION" in c.source for c in answers)
    assert [c.metadata["nbgrader"]["points"] for c in tests] == [3, 3, 3, 4]  # the quiz: a point a question
    # the exercises' test cells show the points a checker with named checks earned (nbgrader's partial credit)
    assert all("tfm_lesson.checks._parts.partial_points(3, tfm_lesson.checks.check_" in c.source for c in tests[:3])
    assert all(c.metadata["nbgrader"]["locked"] for c in nb.cells if c not in answers and c not in hand_in)


def test_otter_format_cells():
    nb = otter_notebook(_exercises_only(), "ch03")
    raws = [c.source for c in nb.cells if c.cell_type == "raw"]
    assert raws[0].startswith("# ASSIGNMENT CONFIG")
    # each named check of a checker is a test case worth its share of the points (tfm_lesson.checks._parts)
    assert [r for r in raws if r.startswith("# BEGIN QUESTION")] == [
        *(f"# BEGIN QUESTION\nname: ex{n}\npoints: {p}" for n, p in ((1, "[0.75, 0.75, 1.5]"), (2, "[0.75, 0.75, 1.5]"),
                                                                    (3, "[0.6, 1.2, 0.6, 0.6]"))),
        "# BEGIN QUESTION\nname: quiz03\npoints: 4"]
    assert raws.count("# BEGIN SOLUTION") == 3 and raws.count("# BEGIN TESTS") == 4
    tests = [c.source for c in nb.cells if c.cell_type == "code" and "BEGIN TEST CONFIG" in c.source]
    assert len(tests) == 10 + 4 and all("failure_message:" in t for t in tests)  # the quiz: a test a question
    assert any("_parts.reached(4, tfm_lesson.checks.check_multi_head_attention, MyMultiHeadAttention)" in t
               for t in tests)


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
    # nbgrader runs `alembic` by name when it creates the gradebook: the exported config finds it beside nbgrader,
    # with the environment not activated (its bin not on PATH)
    bare = {**_env(), "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                              if p and not (Path(p) / "alembic").exists())}
    run = subprocess.run([str(nbgrader), "generate_assignment", "ch03", "--create"], cwd=course, env=bare,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    release = nbformat.read(course / "release" / "ch03" / "ch.ipynb", as_version=4)
    is_answer = lambda c: c.metadata.get("nbgrader", {}).get("solution")  # noqa: E731
    assert all("raise NotImplementedError()" in c.source for c in release.cells if is_answer(c))
    subs = {"correct": _fill(release, solutions, is_answer),
            "buggy": _fill(release, {**solutions, 3: TAMPER}, is_answer),
            "empty": release,
            "loop": _fill(release, {**solutions, 1: LOOP + solutions[1]}, is_answer),
            "swallow": _fill(release, {**solutions, 1: SWALLOW + solutions[1]}, is_answer)}
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
    # the loop: exercise 1, and 3 that uses it (its projections pass: 1 of its 5 weights); hostile: its emptied
    # test cell is nbgrader's again and the patched checker is imported afresh (exercise 1: shape and dtype pass,
    # half its points), and its deleted test cell waits for the instructor
    assert scores == {"correct": 9, "buggy": 6, "empty": 0, "loop": 3.6, "swallow": 0, "hostile": 4.5}
    # the loop that catches the interrupt: nbgrader's limit acts from its own process (nbclient there waits
    # --timeout, interrupts, gives up 4 s later and shuts the kernel down): that submission is reported as not
    # graded (0 in the gradebook) and the others are graded
    assert "Timeout waiting for IOPub output" in log and "for student 'swallow'" in log, log[-3000:]
    assert not (course / "autograded" / "swallow" / "ch03").exists()
    assert hostile_grades == {"ex1-check": (1.5, False), "ex2-check": (3, False), "ex3-check": (None, True),
                              "quiz03": (0, False)}  # the quiz left unanswered, as handed out: 0 of its 4
    graded = nbformat.read(course / "autograded" / "buggy" / "ch03" / "ch.ipynb", as_version=4)
    feedback = json.dumps([c.outputs for c in graded.cells if c.cell_type == "code"])
    assert "WRITE IT YOURSELF" in feedback and "derives from tfm_lesson.attention.MultiHeadAttention" in feedback
    from tfm_lesson.checks.heads import SPLIT_NO_TRANSPOSE

    graded = nbformat.read(course / "autograded" / "hostile" / "ch03" / "ch.ipynb", as_version=4)
    assert SPLIT_NO_TRANSPOSE in json.dumps([c.outputs for c in graded.cells if c.cell_type == "code"])
    assert not (course / "autograded" / "notes").exists()


def otter_assigned(chapter: Path, folder: Path, timeout: int) -> tuple[Path, Path]:
    """Export ``chapter`` for Otter into ``folder`` and run `otter assign`: its ``dist`` folder and autograder zip."""
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(chapter), "--format", "otter", "--out",
                    str(folder), "--assignment", "ch03", "--timeout", str(timeout)], check=True, cwd=ROOT, env=_env())
    run = subprocess.run([str(_tool("otter")), "assign", "ch.ipynb", "dist"], cwd=folder, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return folder / "dist", next((folder / "dist" / "autograder").glob("*.zip"))


def otter_results(autograder: Path, notebook: Path, out: Path, timeout: int = 600) -> dict[str, dict]:
    """`otter run` of one submission: its results.json's tests by name. Run once: a stray local client that once hung
    Otter's log server (seen in CI: recv(4278190074), a ZMQ greeting read as a length) is dropped by the guard the
    exported plugin puts into `otter run` (tests/test_otter_log_guard.py), so a run that hangs now is a bug to see."""
    out.mkdir()
    run = subprocess.run([str(_tool("otter")), "run", "-a", str(autograder), "-o", str(out), str(notebook)],
                         cwd=notebook.parent, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {t["name"]: t for t in json.loads((out / "results.json").read_text())["tests"]}


def _otter_cell(nb, *words) -> int:
    """The index of the first code cell of ``nb`` whose source holds every one of ``words``."""
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and all(w in c.source for w in words))


def test_otter_assign_and_run_score_and_name_the_mistake(tmp_path):
    """`otter run` on correct, buggy, empty and hostile submissions. Otter's local runner has no time limit of its
    own: the exported config's plugin (OtterCellTimeLimit) starts a watchdog in `otter run`'s process, which
    interrupts the endless loop after --timeout seconds and kills the kernel of a loop that catches the interrupt
    (then runs the notebook again without that cell)."""
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
    # the student version keeps each exercise's stub (signature and body stub), not a bare `...`
    stub = "def split_heads(x, heads):\n    ...  # your turn"
    assert any(c.source.startswith(stub) for c in student.cells if c.cell_type == "code")
    # the autograder's environment installs torch and the course as the course pins them
    from tfm_lesson.course.export import course_requirements

    with zipfile.ZipFile(autograder) as zf:
        environment = zf.read("environment.yml").decode()
    assert all(f"- {r}" in environment or f"- '{r}'" in environment for r in course_requirements()), environment
    ex1, ex3 = _otter_cell(solved, "def split_heads"), _otter_cell(solved, "class MyMultiHeadAttention")
    buggy = copy.deepcopy(solved)
    buggy.cells[ex3].source = TAMPER
    loop = copy.deepcopy(solved)
    loop.cells[ex1].source = LOOP + loop.cells[ex1].source
    swallow = copy.deepcopy(solved)
    swallow.cells[ex1].source = SWALLOW + swallow.cells[ex1].source
    hostile = copy.deepcopy(solved)  # a bug in exercise 1, a patched checker, and exercise 3's cells deleted
    hostile.cells[ex1].source = SPLIT_BUGGY
    for cell in hostile.cells:
        if cell.cell_type == "code" and "grader.check(" in cell.source:
            cell.source = "pass  # the check call, deleted"
    hostile.cells.insert(ex1 + 1, nbformat.v4.new_code_cell(PATCH))
    del hostile.cells[ex3 + 1:]
    subs = {"correct": solved, "buggy": buggy, "empty": student, "loop": loop, "swallow": swallow, "hostile": hostile}
    results, outputs, took = {}, {}, {}
    for name, nb in subs.items():
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    (tmp_path / "notes.ipynb").write_text("these are my notes, not a notebook")
    for name in [*subs, "notes"]:
        out = tmp_path / f"out-{name}"
        out.mkdir()
        start = time.monotonic()
        run = subprocess.run([str(otter), "run", "-a", str(autograder), "-o", str(out),
                              str(tmp_path / f"{name}.ipynb")], cwd=tmp_path, env=_env(), capture_output=True,
                             text=True, timeout=600)
        outputs[name], took[name] = (run.returncode, run.stdout + run.stderr), time.monotonic() - start
        if name != "notes":
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            results[name] = {t["name"]: t for t in json.loads((out / "results.json").read_text())["tests"]}

    def scores(name):
        return [round(results[name][f"ex{n}"].get("score", 0) or 0, 2) for n in (1, 2, 3)]

    assert [sum(scores(n)) for n in ("correct", "buggy", "empty")] == [9, 6, 0]
    assert "WRITE IT YOURSELF" in results["buggy"]["ex3"]["output"]
    # the test's failure text comes first and points down to the result, where the checker's message is
    text = results["buggy"]["ex3"]["output"]
    assert text.index("the checker's message, in the result below, names the mistake") < text.index("WRITE IT")
    # the endless loop costs exercise 1 (and 3, which uses split_heads, but for its projections); exercise 2 scores
    assert scores("loop") == [0, 3, 0.6]
    # the loop that catches the interrupt: its kernel is killed `grace` (5) s later, and the notebook runs again
    # without that cell (course/otter_rerun.py): it costs what the loop cost, the reason in the question's output
    code, text = outputs["swallow"]
    assert "killed" in text, text[-3000:]
    assert scores("swallow") == [0, 3, 0.6]
    assert "replaced by one that raises TimeoutError" in text, text[-3000:]
    print(f"otter run, seconds per submission (load {os.getloadavg()}):", {k: round(v) for k, v in took.items()})
    # deleted check calls and a patched checker change nothing; the deleted exercise scores 0
    from tfm_lesson.checks.heads import SPLIT_NO_TRANSPOSE

    assert scores("hostile") == [1.5, 3, 0]  # exercise 1: shape and dtype pass, the values do not
    assert SPLIT_NO_TRANSPOSE in results["hostile"]["ex1"]["output"]
    assert "MyMultiHeadAttention" in results["hostile"]["ex3"]["output"]  # NameError: the class is not there
    # a file that is not a notebook: `otter run` stops on it with the reason (no results.json); one run per file
    code, text = outputs["notes"]
    assert code != 0 and "NotJSONError" in text and not (tmp_path / "out-notes" / "results.json").exists()


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
