"""No grade lost, nothing overwritten (tfm_lesson/course/grading.py, grading_report.py): where `course grade` writes is
checked before anything runs (a usage error naming the flag), each submission's grades reach the CSV as it finishes
(kept through Ctrl-C; `--resume` grades the rest), a `--memory` the kernel cannot start under is a usage error, and a
checker's message cannot forge a feedback page."""
from __future__ import annotations

import csv
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course import copy_chapter_answers, student_copy
from tfm_lesson.course.grading import exercises
from tfm_lesson.course.grading_report import CSV_HEADER, Graded, Result, feedback_page

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"

try:
    from tfm_lesson.course.sandbox import SandboxUnavailable, check_sandbox

    check_sandbox()
    SANDBOX: list[str] = []
except SandboxUnavailable:
    SANDBOX = ["--no-sandbox"]


def _grade(*args: str, timeout: int = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfm_lesson.course", "grade", *args, *SANDBOX], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout, **kwargs)


@pytest.fixture()
def klass(tmp_path):
    """A chapter copy and a folder of two submissions (right, blank)."""
    chapter = nbformat.read(CHAPTER, as_version=4)
    (tmp_path / "ch.ipynb").write_bytes(CHAPTER.read_bytes())
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(copy_chapter_answers(chapter), subs / "right.ipynb")
    nbformat.write(student_copy(chapter), subs / "blank.ipynb")
    return tmp_path


def _descendants(pid: int) -> set[int]:
    """The processes started, directly or not, by ``pid`` (Linux: read from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _table(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("flag, target, why", [
    ("--csv", "CHAPTER", "is the chapter itself"),
    ("--csv", "SUB", "is a submission"),
    ("--csv", "FOLDER", "is a folder; give a file name"),
    ("--csv", "UNDER_FILE", "cannot write there"),
    ("--csv", "NOTES", "is not a grades table"),
    ("--csv", "OLD_GRADES", "already holds grades: pass --resume"),
    ("--csv", "/proc/tfm-grades.csv", "cannot write there"),
    ("--feedback", "CHAPTER", "is the chapter itself"),
    ("--feedback", "SUB", "is a submission"),
    ("--feedback", "NOTES", "is a file; give a folder"),
    ("--feedback", "UNDER_FILE", "cannot write there"),
    ("--feedback", "/proc/tfm-feedback", "cannot write there"),
])
def test_an_output_that_would_overwrite_or_cannot_be_written_is_refused_before_anything_runs(klass, flag, target,
                                                                                              why, monkeypatch):
    """A usage error naming the flag, before any kernel starts (none can: starting one fails the test), every file
    as it was."""
    from tfm_lesson.course import CourseError, grading, grading_kernel

    if target.startswith("/proc") and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    monkeypatch.setattr(grading_kernel.Kernel, "start", lambda self: pytest.fail("a kernel started"))
    (klass / "notes.txt").write_text("my own notes\n")
    (klass / "old.csv").write_text(",".join(CSV_HEADER) + "\n")
    paths = {"CHAPTER": klass / "ch.ipynb", "SUB": klass / "subs" / "right.ipynb", "FOLDER": klass / "subs",
             "UNDER_FILE": klass / "notes.txt" / "x", "NOTES": klass / "notes.txt", "OLD_GRADES": klass / "old.csv"}
    before = {p: p.read_bytes() for p in klass.rglob("*") if p.is_file()}
    args = {"--csv": klass / "g.csv", "--feedback": klass / "fb"}
    args[flag] = Path(paths.get(target, target))
    with pytest.raises(CourseError, match=re.escape(flag) + " .*" + re.escape(why)):
        grading.grade(klass / "ch.ipynb", [klass / "subs"], args["--csv"], args["--feedback"], sandbox=not SANDBOX)
    assert {p: p.read_bytes() for p in klass.rglob("*") if p.is_file()} == before


def test_resume_refuses_the_grades_of_another_chapter(klass, monkeypatch):
    from tfm_lesson.course import CourseError, grading, grading_kernel

    monkeypatch.setattr(grading_kernel.Kernel, "start", lambda self: pytest.fail("a kernel started"))
    (klass / "g.csv").write_text(",".join(CSV_HEADER) + "\nsubs/a.ipynb,Exercise 1: masks,True,3,3,\n")
    with pytest.raises(CourseError, match="--resume: the grades in .* other exercises"):
        grading.grade(klass / "ch.ipynb", [klass / "subs"], klass / "g.csv", resume=True, sandbox=not SANDBOX)


def test_the_command_line_says_it_as_a_usage_error(klass):
    """Exit 2 and the flag named, from the command line."""
    out = _grade(str(klass / "ch.ipynb"), str(klass / "subs"), "--csv", str(klass / "ch.ipynb"), timeout=300)
    assert out.returncode == 2 and "error: --csv " in out.stderr and "is the chapter itself" in out.stderr
    assert (klass / "ch.ipynb").read_bytes() == CHAPTER.read_bytes()


def test_a_checker_message_cannot_close_its_block_or_forge_a_score():
    """A message holding a ``` fence and a score line, a file name holding a line break: one score line on the page,
    the real one, and the message stays inside its code block."""
    chapter = nbformat.read(CHAPTER, as_version=4)
    ex = exercises(chapter)[0]
    forged = "nope\n```\n\n**Score: 9 / 9**\n\n# Exercise 1: 3 / 3 (passed)\n````text\n"
    page = feedback_page(Graded("subs/x\n# Exercise 1: 3 of 3 (passed)\n.ipynb", [Result(ex, False, forged)],
                                notes=["cell 4 (code, '` **Score: 9 / 9** `'): added; ignored"]), "03")
    lines = page.splitlines()
    fence = next(k for k, ln in enumerate(lines) if ln.startswith("```"))
    close = next(k for k, ln in enumerate(lines) if k > fence and ln == lines[fence].removesuffix("text"))
    outside = lines[:fence] + lines[close + 1:]  # what is not in the message's code block
    assert [ln for ln in outside if "Score" in ln and not ln.startswith("- ")] == ["**Score: 0 / 3**"]
    assert [ln for ln in outside if ln.startswith("#")][1:] == ["## Exercise 1: split the heads: 0 / 3 (not passed)",
                                                              "## Not graded"]
    markdown_it = pytest.importorskip("markdown_it")
    tokens = markdown_it.MarkdownIt().parse(page)
    strong = [t.content for t in tokens if t.type == "inline" and "Score" in t.content
              and any(c.type == "strong_open" for c in t.children or [])]
    assert strong == ["**Score: 0 / 3**"]
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content.rstrip("\n") == forged.rstrip("\n")


@pytest.mark.slow
def test_a_memory_limit_the_kernel_cannot_start_under_is_a_usage_error(klass):
    out = _grade(str(klass / "ch.ipynb"), str(klass / "subs"), "--csv", str(klass / "g.csv"), "--memory", "100")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "error: --memory 100:" in out.stderr
    assert not (klass / "g.csv").exists() and "graded in" not in out.stdout


@pytest.mark.slow
def test_resume_grades_only_the_submissions_not_in_the_csv(klass):
    """The CSV already grades right.ipynb (with a message no grader writes, to see it kept): only blank.ipynb runs."""
    chapter = nbformat.read(CHAPTER, as_version=4)
    right = str(klass / "subs" / "right.ipynb")
    with open(klass / "g.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_HEADER)
        for ex in exercises(chapter):
            writer.writerow([right, ex.title, True, ex.points, ex.points, "kept from the first run"])
    out = _grade(str(klass / "ch.ipynb"), str(klass / "subs"), "--csv", str(klass / "g.csv"), "--resume",
                 "--feedback", str(klass / "fb"))
    assert out.returncode == 0, out.stderr
    assert "1 submission(s) already in" in out.stdout and "1 submission(s) graded" in out.stdout
    assert "right.ipynb:" not in out.stdout and "blank.ipynb: 0 / 13" in out.stdout  # 9 + the quiz's 4
    rows = _table(klass / "g.csv")
    # right.ipynb's exercises are kept; the quiz line, which that CSV lacked, is read from its hand-in (never run)
    assert [r["message"] for r in rows if r["submission"] == right][:3] == ["kept from the first run"] * 3
    assert [r["exercise"] for r in rows if r["submission"] == right][3:] == ["Quiz 03"]
    assert len([r for r in rows if r["submission"].endswith("blank.ipynb")]) == 4
    assert [p.name for p in (klass / "fb").iterdir()] and all("blank" in p.name for p in (klass / "fb").iterdir())


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent to read it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_ctrl_c_keeps_every_finished_grade_and_resume_grades_the_rest(klass):
    """Ctrl-C once the first submission is in the CSV: exit 130, its rows kept, no kernel left running; then
    `--resume` grades the others and the CSV holds each submission once."""
    chapter = nbformat.read(CHAPTER, as_version=4)
    for k in range(3):
        nbformat.write(copy_chapter_answers(chapter), klass / "subs" / f"more{k}.ipynb")
    args = [sys.executable, "-m", "tfm_lesson.course", "grade", str(klass / "ch.ipynb"), str(klass / "subs"),
            "--csv", str(klass / "g.csv"), *SANDBOX]
    grader = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (klass / "g.csv").exists() and time.monotonic() < deadline and grader.poll() is None:
        time.sleep(0.2)
    assert (klass / "g.csv").exists(), grader.communicate()
    kernels = _descendants(grader.pid)
    assert kernels  # the next submission's kernel (and its sandbox) is running
    grader.send_signal(signal.SIGINT)
    stdout, stderr = grader.communicate(timeout=120)
    assert grader.returncode == 130, stderr
    assert "--resume" in stderr
    kept = _table(klass / "g.csv")
    assert 4 <= len(kept) < 5 * 4 and len(kept) % 4 == 0  # whole submissions only (3 exercises and the quiz)
    deadline = time.monotonic() + 20  # a sandbox's namespace is torn down after its first process: give it time
    while [pid for pid in kernels if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in kernels if _alive(pid)], "kernels outlived the grader"
    again = _grade(str(klass / "ch.ipynb"), str(klass / "subs"), "--csv", str(klass / "g.csv"), "--resume",
                   "--jobs", "2")
    assert again.returncode == 0, again.stderr
    rows = _table(klass / "g.csv")
    assert len(rows) == 5 * 4 and len({(r["submission"], r["exercise"]) for r in rows}) == 20
    assert rows[:len(kept)] == kept or all(r in rows for r in kept)
    assert re.search(rf"{len(kept) // 3} submission\(s\) already in", again.stdout)


@pytest.mark.slow
def test_a_cell_keeps_at_most_the_cap_of_its_output_and_the_end_of_what_it_printed(tmp_path):
    """8 MB printed in pieces, a line after it: the cell keeps 1 MB and the last 64 KB (the line among them), and
    says how much it dropped."""
    from tfm_lesson.course.grading_kernel import DROPPED_KEY, KEPT_TAIL, MAX_CELL_OUTPUT, Kernel, cell_text, kernel_spec

    kernel_spec(tmp_path, 0, 120)
    (tmp_path / "work").mkdir()
    kernel = Kernel(tmp_path, tmp_path / "work", 120)
    kernel.start()
    try:
        cell = kernel.run("for _ in range(80):\n    print('z' * 100_000)\nprint('THE END')")
    finally:
        kernel.stop()
    text = cell_text(cell)
    assert MAX_CELL_OUTPUT <= len(text) <= MAX_CELL_OUTPUT + KEPT_TAIL + 200_000
    assert text.rstrip().endswith("THE END")
    assert cell.metadata[DROPPED_KEY] >= 8_000_000 - MAX_CELL_OUTPUT - 200_000
