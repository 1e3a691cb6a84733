"""The class grader (tfm_lesson/course/grading.py, `python -m tfm_lesson.course grade`): correct, buggy, empty and hostile
submissions of chapter 03 (a tampered checker, an endless loop, a memory hog, a kernel that dies, deleted and added
cells, files that are not notebooks) each get the score and the reason they should, and never stop the others."""
from __future__ import annotations

import copy
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tfm_lesson import grading
from tfm_lesson.course import student_copy
from tfm_lesson.course import copy_chapter_answers
from tfm_lesson.course import submission
from tfm_lesson.course.grading import exercises
from tfm_lesson.course.grading_kernel import kernel_spec
from tfm_lesson.course.quiz import LETTERS, load_quiz

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"
COLAB = ROOT / "tests" / "fixtures" / "colab_03_multi_head_attention.ipynb"  # tests/make_colab_fixture.py writes it

pytestmark = pytest.mark.slow  # each submission runs in its own kernel: several seconds each

try:  # the grader sandboxes every submission with bubblewrap; where it cannot run, the class is graded without
    from tfm_lesson.course.sandbox import SandboxUnavailable, check_sandbox

    check_sandbox()
    SANDBOX: list[str] = []
except SandboxUnavailable:
    SANDBOX = ["--no-sandbox"]
needs_sandbox = pytest.mark.skipif(bool(SANDBOX), reason="bubblewrap cannot run here")


def _chapter():
    return nbformat.read(CHAPTER, as_version=4)


def _with(nb, number: int, source: str):
    """The student copy ``nb`` with ``source`` typed into exercise ``number``'s "your turn" cell."""
    out = copy.deepcopy(nb)
    ex = exercises(_chapter())[number - 1]
    out["cells"][ex.answer_index]["source"] = source
    return out


def _write(nb, path: Path) -> Path:
    nbformat.write(nbformat.from_dict(nb), path)
    return path


QUIZ_RIGHT = "".join(LETTERS[q.answer] for q in load_quiz("03"))


def _hand_in(nb, letters: str):
    """``nb`` with ``letters`` written into its quiz hand-in cell."""
    out = copy.deepcopy(nb)
    cell = next(c for c in out["cells"] if "quiz-answers" in c.get("metadata", {}).get("tags", []))
    cell["source"] = cell["source"].replace('hand_in("03", "")', f'hand_in("03", "{letters}")')
    return out


SPLIT_BUGGY = """\
def split_heads(x, heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, heads, length, d_model // heads)  # no transpose
"""

TAMPER = """\
import tfm_lesson.checks, tfm_lesson.checks.heads
check_multi_head_attention = lambda cls: print("✔ passed")              # rebinding the name
tfm_lesson.checks.check_multi_head_attention = lambda cls: None           # patching the module
tfm_lesson.checks.heads.check_multi_head_attention = lambda cls: None


class MyMultiHeadAttention(T.MultiHeadAttention):  # the package's reference does the work
    pass
"""


SNOOP = """\
import os, subprocess, sys
for _try in (lambda: open({out!r} + "/stolen.txt", "w").write(open({chapter!r}).read()),  # the solutions, copied out
             lambda: open({out!r} + "/planted.txt", "w").write("x"),  # a file beside the grades
             lambda: os.listdir("/proc/" + str(os.getppid()) + "/cwd")):
    try:
        _try()
    except Exception:
        pass
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(6); open({out!r} + '/late.txt', 'w').write('x')"],
                 start_new_session=True)  # a process meant to outlive the grade
"""


FORGE = """\
import builtins, importlib, json, sys, types
import torch
import tfm_lesson.checks as _checks
from tfm_lesson.checks import _replay, _replay_state
_print = builtins.print
builtins.print = lambda *a, **k: _print(*[str(x).replace('"passed": false', '"passed": true') for x in a], **k)
torch.allclose = lambda *a, **k: True                       # every comparison made in this process says "equal"
torch.equal = lambda *a, **k: True
_fake = types.ModuleType("tfm_lesson.checks")                # checkers that pass everything, served on import
_fake.__getattr__ = lambda name: (lambda *a, **k: None)
importlib.import_module = lambda name, package=None: _fake
class _Finder:
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, loader=None) if name.startswith("tfm_lesson.check") else None
sys.meta_path.insert(0, _Finder())
get_ipython().events.register("post_run_cell", lambda result: _print("✔ passed"))
def _forged_record(checker, answers, kwargs, path, *rest):   # a record that says nothing went wrong
    with open(path, "w") as f:
        json.dump({"version": 1, "checker": checker.__name__, "start": _replay_state.snapshot_globals(),
                   "answers": [], "entries": [], "record": "passed"}, f)
_replay.record = _forged_record
"""


LOUD_MERGE = """\
def merge_heads(x):
    print("y" * 400_000)  # at every call of the check: megabytes in all
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * d_k)
"""


def _old_jupyter(nb):
    """``nb`` as an older Jupyter saves it (nbformat 4.4, no cell ids, the quiz hand-in's tag lost), after the learner
    deleted exercise 1's stub, pasted one more stub after exercise 2's and moved exercise 2's answer below its check."""
    out = copy.deepcopy(nb)
    out["nbformat_minor"] = 4
    for cell in out["cells"]:
        cell.pop("id", None)
        if "quiz-answers" in cell.get("metadata", {}).get("tags", []):
            del cell["metadata"]["tags"]
    cells = out["cells"]
    stubs = [j for j, c in enumerate(cells) if "solution" in c.get("metadata", {}).get("tags", [])]
    del cells[stubs[0]]
    merge = next(j for j, c in enumerate(cells) if c["source"].startswith("def merge_heads"))
    answer = cells.pop(merge)
    cells.insert(merge + 1, nbformat.v4.new_code_cell(cells[merge]["source"], metadata={"tags": ["solution"]}))
    cells.insert(merge + 3, answer)  # after the stub, the pasted stub and the check
    return out


# exercise 3's answer, reading what ran in its kernel before it: which exercises' solutions (the chapter's solution
# cells keep their "Reference solution" title; a student's answers do not) it can find there
PEEK = """\
_title, _def = "Reference " + "solution", "def " + "{}_heads("  # not as such in this cell, which In holds too
_ran = [cell for cell in get_ipython().user_ns.get("In", []) if _title in cell]
raise ValueError(f"split_heads solution seen: {any(_def.format('split') in c for c in _ran)}; "
                 f"merge_heads solution seen: {any(_def.format('merge') in c for c in _ran)}")
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class of twelve submissions, graded once through the command line (two at a time)."""
    tmp = tmp_path_factory.mktemp("class")
    chapter = _chapter()
    right = _hand_in(copy_chapter_answers(chapter), QUIZ_RIGHT)  # and every submission made from it
    blank = student_copy(chapter)
    subs = tmp / "subs"
    subs.mkdir()
    _write(right, subs / "correct.ipynb")
    _write(blank, subs / "empty.ipynb")
    buggy = _with(right, 1, SPLIT_BUGGY)
    buggy = _with(buggy, 3, TAMPER)
    ex2 = exercises(chapter)[1]
    buggy["cells"].insert(ex2.check_index + 1, nbformat.v4.new_code_cell("check_merge_heads = print  # added"))
    buggy["cells"][ex2.check_index]["source"] = "print('check skipped')"  # a changed check cell
    _write(buggy, subs / "buggy_and_tampered.ipynb")
    hostile = _with(right, 1, "while True:\n    pass\n")  # an endless loop where the exercise is
    hostile = _with(hostile, 2, "import os\nos._exit(1)\n")  # the kernel dies
    ex3 = exercises(chapter)[2]
    del hostile["cells"][ex3.answer_index:ex3.check_index + 1]  # exercise 3's cells deleted
    _write(hostile, subs / "hostile.ipynb")
    hog = _with(right, 3, "x = bytearray(64 * 2**30)\n" + chapter["cells"][ex3.solution_index]["source"])
    _write(hog, subs / "memory_hog.ipynb")
    ex1 = exercises(chapter)[0]
    snoop = _with(right, 1, SNOOP.format(chapter=CHAPTER, out=tmp) + right["cells"][ex1.answer_index]["source"])
    _write(snoop, subs / "snoop.ipynb")
    _write(_with(blank, 1, FORGE + blank["cells"][ex1.answer_index]["source"]), subs / "forger.ipynb")
    (subs / "colab.ipynb").write_bytes(COLAB.read_bytes())  # downloaded from Colab: exercise 3 wrong on purpose
    _write(_old_jupyter(right), subs / "old_jupyter.ipynb")
    peek = _with(right, 2, "def merge_heads(x):\n    return x.reshape(x.shape[0], x.shape[2], -1)  # no transpose\n")
    _write(_with(peek, 3, PEEK), subs / "peek.ipynb")
    loud = _with(right, 1, "print('x' * 3_000_000)  # 3 MB in one cell\n" + right["cells"][ex1.answer_index]["source"])
    loud = _with(loud, 2, LOUD_MERGE)
    _write(loud, subs / "loud.ipynb")
    (subs / "notes.ipynb").write_text("these are my notes, not a notebook")
    (subs / "zero.ipynb").write_bytes(b"")
    out = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "grade", str(CHAPTER), str(subs),
                          "--csv", str(tmp / "grades.csv"), "--feedback", str(tmp / "feedback"), "--timeout", "20",
                          "--jobs", "2", *SANDBOX], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stderr
    with open(tmp / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    table = {(Path(r["submission"]).stem, "quiz" if r["exercise"] == "Quiz 03" else
              int(r["exercise"].split()[1].rstrip(":"))): r for r in rows}
    return table, tmp / "feedback", out.stdout


def test_csv_has_one_row_per_submission_and_exercise(graded):
    table, _, _ = graded
    assert len(table) == 13 * 4  # three exercises and the quiz
    assert all(set(r) == {"submission", "exercise", "passed", "points", "max_points", "message"}
               for r in table.values())
    assert table[("correct", 3)]["exercise"] == "Exercise 3: the whole module"
    assert table[("correct", 3)]["max_points"] == "3"  # the Importance label: 3/3


def test_correct_scores_full_marks_and_empty_scores_zero(graded):
    table, _, _ = graded
    for n in (1, 2, 3):
        assert table[("correct", n)]["passed"] == "True" and table[("correct", n)]["points"] == "3"
        assert table[("empty", n)]["passed"] == "False" and table[("empty", n)]["points"] == "0"
    assert "not written yet" in table[("empty", 1)]["message"]


def test_buggy_gets_the_named_mistake_and_tampering_changes_nothing(graded):
    table, feedback, _ = graded
    from tfm_lesson.checks.heads import SPLIT_NO_TRANSPOSE

    assert table[("buggy_and_tampered", 1)]["passed"] == "False"
    assert SPLIT_NO_TRANSPOSE in table[("buggy_and_tampered", 1)]["message"]  # verbatim
    assert table[("buggy_and_tampered", 2)]["passed"] == "True"  # its changed check cell is not what runs
    three = table[("buggy_and_tampered", 3)]
    assert three["passed"] == "False" and "WRITE IT YOURSELF" in three["message"]
    page = (feedback / next(p.name for p in feedback.iterdir() if "buggy" in p.name)).read_text()
    assert "added; ignored" in page and "check_merge_heads = print" in page
    assert "changed; ignored" in page and "print('check skipped')" in page
    assert SPLIT_NO_TRANSPOSE in page


def test_a_forging_answer_cell_earns_nothing(graded):
    """One answer cell that rewrites print, makes torch.allclose and torch.equal say "equal", serves fake checkers
    through importlib and sys.meta_path, prints a pass after every cell and replaces the recorder with one that
    writes an empty record: the verdicts are computed in the grader's process, so the empty answers score 0."""
    table, _, _ = graded
    for number in (1, 2, 3):
        row = table[("forger", number)]
        assert row["passed"] == "False", (number, row["message"])
    assert "could not replay" in table[("forger", 1)]["message"]


def test_endless_loop_dead_kernel_and_deleted_cells_cost_only_their_exercise(graded):
    table, _, _ = graded
    assert "ran past the 20 s limit" in table[("hostile", 1)]["message"]
    assert "the kernel died" in table[("hostile", 2)]["message"]
    assert "missing from the submission" in table[("hostile", 3)]["message"]
    assert all(table[("hostile", n)]["points"] == "0" for n in (1, 2, 3))
    # the memory hog: a MemoryError in its exercise; the exercises around it still pass
    assert table[("memory_hog", 3)]["points"] == "0" and "MemoryError" in table[("memory_hog", 3)]["message"]
    assert table[("memory_hog", 1)]["points"] == "3" and table[("memory_hog", 2)]["points"] == "3"


def test_a_solution_runs_in_the_kernel_only_where_the_exercise_did_not_pass(graded):
    """Code in a kernel can read whatever ran there (a hostile class read the solutions and raised them into its
    feedback): the chapter's solution of an exercise runs in a student's kernel only after that student's own
    answer failed, so that later exercises still get working pieces."""
    table, _, _ = graded
    assert table[("peek", 1)]["points"] == "3" and float(table[("peek", 2)]["points"]) < 3  # exercise 2 failed
    message = table[("peek", 3)]["message"]
    assert "split_heads solution seen: False; merge_heads solution seen: True" in message, message


def test_files_that_are_not_notebooks_score_zero_with_the_reason(graded):
    table, feedback, stdout = graded
    assert "not a notebook Jupyter can read" in table[("notes", 1)]["message"]
    assert "the file is empty" in table[("zero", 2)]["message"]
    assert len(list(feedback.glob("*.md"))) == 13
    assert "13 submission(s) graded" in stdout


def test_notebooks_from_colab_and_older_jupyter_are_graded_on_their_answers(graded):
    """The Colab download (nbformat 4.0, ids in metadata.id) and the 4.4 notebook without ids, a stub deleted, one
    pasted and an answer moved: each exercise scores what its answer earns (the Colab one's exercise 3 is wrong)."""
    table, feedback, _ = graded
    from tfm_lesson.checks.heads import SCALE_D_MODEL

    # exercise 3: its projections pass, the settings without a mask do not (1 of its 5 weights: 0.6 of 3 points)
    assert [table[("colab", n)]["points"] for n in (1, 2, 3)] == ["3", "3", "0.6"]
    assert SCALE_D_MODEL in table[("colab", 3)]["message"]
    assert [table[("old_jupyter", n)]["points"] for n in (1, 2, 3)] == ["3", "3", "3"]
    page = (feedback / next(p.name for p in feedback.iterdir() if "old_jupyter" in p.name)).read_text()
    assert "missing" not in page and "**Score: 13 / 13**" in page  # the quiz's 4 with them: its tag lost, read by
    # its call


def test_the_quiz_is_one_more_line_a_point_a_right_answer(graded):
    """Read from the hand-in cell as text: the right letters 4 / 4 (also where the submission's exercises hang, die,
    or were deleted), the hand-out's empty letters 0, and a file that is not a notebook 0 with the reason."""
    table, feedback, stdout = graded
    for name in ("correct", "hostile", "memory_hog", "old_jupyter", "buggy_and_tampered"):
        row = table[(name, "quiz")]
        assert (row["points"], row["max_points"], row["passed"]) == ("4", "4", "True"), (name, row)
    assert table[("correct", "quiz")]["message"] == "4 of 4 right (questions right: 1, 2, 3, 4)"
    for name in ("empty", "forger", "colab"):  # the colab learner left the letters empty
        row = table[(name, "quiz")]
        assert (row["points"], row["passed"]) == ("0", "False") and "unanswered: 1, 2, 3, 4" in row["message"]
    assert "not a notebook Jupyter can read" in table[("notes", "quiz")]["message"]
    page = (feedback / next(p.name for p in feedback.iterdir() if p.stem.endswith("empty"))).read_text()
    assert "## Quiz 03: 0 / 4 (not passed)" in page and "**Score: 0 / 13**" in page
    assert "correct.ipynb: 13 / 13" in stdout


def test_huge_output_is_dropped_with_a_note_and_costs_no_points(graded):
    """3 MB printed by an exercise cell and megabytes printed by an answer while its check runs: the grader keeps
    1 MB a cell, says so on the page, and the score is the answers' (full marks)."""
    table, feedback, _ = graded
    assert [table[("loud", n)]["points"] for n in (1, 2, 3)] == ["3", "3", "3"]
    page = (feedback / next(p.name for p in feedback.iterdir() if "loud" in p.name)).read_text()
    assert "Exercise 1: split the heads: your exercise cell printed" in page
    assert "Exercise 2: merge the heads: your code, while its check ran, printed" in page
    assert "the score does not depend on it" in page and len(page) < 100_000


def test_a_huge_file_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(submission, "MAX_BYTES", 1000)  # read_submission reads it there
    big = tmp_path / "big.ipynb"
    big.write_text("x" * 2000)
    g = grading.grade_one(_chapter(), exercises(_chapter()), big, tmp_path, 10, 0)
    assert all(not r.passed and "over the grader's" in r.message for r in g.results)


def test_the_kernel_imports_this_package(tmp_path):
    """The grader's kernel puts the folder that holds tfm_lesson first on its path (not tfm_lesson/ itself)."""
    kernel_spec(tmp_path, 0, 60)
    env = json.loads((tmp_path / "tfm-grade" / "kernel.json").read_text())["env"]
    first = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    assert (first / "tfm_lesson" / "__init__.py").is_file()
    assert first.resolve() == Path(grading.__file__).resolve().parents[2]


@pytest.mark.parametrize("args, why", [
    (["grade", "CHAPTER_COPY", "MISSING", "--csv", "g.csv"], "no such file or folder"),
    (["grade", "STUDENT", "STUDENT", "--csv", "g.csv"], "has no solution cells"),
    (["grade", "CHAPTER_COPY", "--csv", "g.csv"], ""),  # no submission at all: argparse's usage
])
def test_usage_errors_exit_2(tmp_path, args, why):
    (tmp_path / "ch.ipynb").write_bytes(CHAPTER.read_bytes())
    _write(student_copy(_chapter()), tmp_path / "student.ipynb")
    subst = {"CHAPTER_COPY": str(tmp_path / "ch.ipynb"), "STUDENT": str(tmp_path / "student.ipynb"),
             "MISSING": str(tmp_path / "missing"), "g.csv": str(tmp_path / "g.csv")}
    out = subprocess.run([sys.executable, "-m", "tfm_lesson.course", *[subst.get(a, a) for a in args]],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert why in out.stderr
    assert not (tmp_path / "g.csv").exists()


def test_exercises_of_the_chapters_with_rules():
    """Chapter 03, 10 and 16: every exercise found, its checker in tfm_lesson.checks, its points its Importance."""
    import tfm_lesson.checks as checks

    for name, count in (("03_multi_head_attention", 3), ("10_training_toy_tasks", 5), ("16_todays_block", 4)):
        exs = exercises(nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4))
        assert len(exs) == count
        assert all(hasattr(checks, e.checker) and 1 <= e.points <= 3 for e in exs)


def _has_exercises(path: Path) -> bool:
    from tfm_lesson.course.cells import is_solution

    return any(is_solution(c) for c in nbformat.read(path, as_version=4).cells)


def test_every_chapter_scores_full_marks_with_its_own_solutions(tmp_path):
    """Each chapter with exercises, graded with the instructor's chapter itself as the submission: every exercise
    passes. The grader runs the exercise cells among the chapter's definitions only (no training runs, no plots);
    an exercise that needed something else of its chapter would fail here with the checker's or a NameError's
    message. Two chapters at a time, as `--jobs 2` does."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) if _has_exercises(p)]
    assert len(paths) >= 15  # nearly every chapter ends with exercises
    kernel_spec(tmp_path, grading.DEFAULT_MEMORY_MB, 120)

    def one(path: Path) -> grading.Graded:
        chapter = nbformat.read(path, as_version=4)
        return grading.grade_one(chapter, exercises(chapter), path, tmp_path, 120, grading.DEFAULT_MEMORY_MB)

    with ThreadPoolExecutor(max_workers=2) as pool:
        graded = list(pool.map(one, paths))
    failed = {f"{Path(g.submission).stem}, {r.exercise.title}": r.message for g in graded for r in g.results
              if not r.passed}
    assert failed == {}
    assert all(len(g.results) >= 3 for g in graded)


@needs_sandbox
def test_a_snooping_submission_reaches_nothing_outside_its_sandbox(graded):
    """It could not read the chapter, write beside the grades or leave a process behind; its answers still count."""
    import time

    table, feedback, _ = graded
    out = feedback.parent
    time.sleep(7)  # longer than the process it started waits
    assert not any((out / name).exists() for name in ("stolen.txt", "planted.txt", "late.txt"))
    assert table[("snoop", 1)]["passed"] == "True" and table[("snoop", 2)]["passed"] == "True"


def test_without_bubblewrap_grading_refuses_before_it_starts(tmp_path, monkeypatch):
    """No sandbox to be had: a usage error that names the way out, before any submission runs."""
    from tfm_lesson.course import CourseError

    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    sub = _write(student_copy(_chapter()), tmp_path / "s.ipynb")
    with pytest.raises(CourseError, match="bubblewrap.*--no-sandbox"):
        grading.grade(CHAPTER, [sub], tmp_path / "g.csv")
    assert not (tmp_path / "g.csv").exists()


def test_no_solutions_keeps_every_solution_out_of_the_kernels(tmp_path):
    """--no-solutions: not even a failed exercise's solution runs in the student's kernel (its bug then reaches the
    exercises after it, as under nbgrader and Otter)."""
    right = copy_chapter_answers(_chapter())
    peek = _with(right, 2, "def merge_heads(x):\n    return x.reshape(x.shape[0], x.shape[2], -1)  # no transpose\n")
    _write(_with(peek, 3, PEEK), tmp_path / "peek.ipynb")
    out = subprocess.run([sys.executable, "-m", "tfm_lesson.course", "grade", str(CHAPTER), str(tmp_path / "peek.ipynb"),
                          "--csv", str(tmp_path / "grades.csv"), "--no-solutions", "--no-quiz", *SANDBOX],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    with open(tmp_path / "grades.csv", newline="") as f:
        message = next(r for r in csv.DictReader(f) if r["exercise"].startswith("Exercise 3"))["message"]
    assert "split_heads solution seen: False; merge_heads solution seen: False" in message, message
