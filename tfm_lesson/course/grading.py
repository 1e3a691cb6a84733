"""Grade a class: run each student's exercise cells inside the instructor's chapter and score them with the checkers.

    python -m tfm_lesson.course grade notebooks/03_multi_head_attention.ipynb submissions/ --csv grades.csv \\
        --feedback feedback/ [--timeout 60] [--memory 4096] [--jobs 2] [--resume] \\
        [--processes 256] [--memory-total 4096] [--disk 1024]

Before anything runs, ``--csv`` and ``--feedback`` are checked (never the chapter, a submission or a file that is not
a grades table; a file where a file goes, a folder where a folder goes; writable), and one kernel is started under
``--memory``: a usage error (exit 2) names the flag. Each submission's rows are written into the CSV as soon as it is
graded (the whole table again, atomically), so Ctrl-C or a crash keeps them; ``--resume`` grades only the submissions
not yet in it.

For each submission (a student copy the student worked in, saved by any Jupyter or Colab):

* only its exercise cells are taken: the "your turn" cell before each solution and the stub that replaced the
  solution, found by the chapter's cell ids where the notebook kept them, else by the names the exercise defines
  (``split_heads``) between its title and its check, never by position (:mod:`.submission`). They run, in order,
  among the chapter's own definitions (its imports, functions and classes; no training, no plots), in a fresh
  kernel with a memory limit and a time limit per cell. Anything else the student added or changed is ignored and
  listed.
* each check is computed in the grader's own process, not in the kernel: the kernel only runs the student's code on
  the checker's inputs and records what it returned (:mod:`tfm_lesson.course.verdicts`,
  :mod:`tfm_lesson.checks._replay`); the comparison, the named mistake and the pass happen here, and the source rules
  read the code the grader extracted. Nothing an answer patches inside its kernel (``print``, ``importlib``,
  ``torch``, IPython's events) can change a verdict; the chapter's own check cell is not run.
* a rule about how the answer runs (chapter 18's memory) is enforced from outside the kernel: after its check passes,
  the exercise runs once more in a fresh sandboxed process under a hard memory limit set before its cells run
  (:mod:`.probe`);
* once an exercise is checked and did not pass, the chapter's solution to it replaces the student's definitions, so
  each later exercise is graded with working pieces before it: one bug costs one exercise (a solution never runs
  in the kernel of a student whose answer passed: code there could read it);
* an endless loop, a memory hog or a submission past its caps on the whole (``--processes``, ``--memory-total``,
  ``--disk``: :mod:`.sandbox_limits`) costs that exercise its points (the kernel is restarted and the other
  exercises go on); an empty, broken, huge or non-notebook file scores 0 with the reason; of a cell's output the
  grader keeps 1 MB (and the end of what it printed), the rest is dropped with a note, whatever the score.

Points: each exercise is worth its **Importance** (1 to 3, the label above it in the chapter); an exercise without
the label is worth 1; a checker with named checks (:mod:`tfm_lesson.checks._parts`) that passes some of them earns
that fraction of the points (two decimals), computed as the grader replays it. The chapter's quiz is one more line,
``Quiz NN``: a point per right answer of the letters the learner wrote into the cell after the quiz (read as text,
never run; ``--no-quiz`` leaves the line out). The CSV has one row per submission and exercise (and the quiz):
``submission, exercise, passed, points, max_points, message`` (the checker's message verbatim, after which of its
named checks passed); ``--feedback`` writes one Markdown page per submission
(the checker's messages fenced so that nothing in them can end the code block or write a score line).
"""
from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .cells import CourseError
from .exercises import Exercise, exercises
from .grading_kernel import DEFAULT_MEMORY_MB, Kernel, KernelGroup, cell_error, check_kernel, kernel_spec
from .quiz_hand_in import chapter_quiz, quiz_item
from .probe import run_probe
from .grading_report import (GradeBook, Graded, Result, check_outputs, dropped_note, feedback_page, page_names,
                             write_csv, write_page)
from .sandbox_container import choose_or_say
from .sandbox_limits import Limits, ScratchDisk, describe
from .submission import MAX_BYTES, answers, quiz_of, read_submission
from .grading_plan import Checking, Step, _plan, _trace_path
from .verdicts import check_call, verdict

# The grader in parts: the chapter's exercises (exercises), reading a submission (submission), the kernel it runs in
# (grading_kernel), scores and reports (grading_report); here, running one submission and grading a class.
__all__ = ["grade", "grade_one", "submissions", "exercises", "read_submission", "write_csv", "feedback_page",
           "Exercise", "Result", "Graded", "DEFAULT_TIMEOUT", "DEFAULT_MEMORY_MB", "MAX_BYTES"]

MESSAGE_LIMIT = 4000  # characters of a verdict's message kept in the CSV and the feedback page
DEFAULT_TIMEOUT = 60  # seconds per cell (an exercise cell, a check)


# running it ---------------------------------------------------------------------------------------------------------
@dataclass
class _Outcome:
    """What running one submission's plan found, exercise by exercise."""

    results: dict[int, Result]
    scratch: Path  # the kernel's scratch folder, where it writes each check's record
    checking: Checking
    token: str  # in the records' names
    answer_errors: dict[int, list[str]] = field(default_factory=dict)
    broken: dict[int, str] = field(default_factory=dict)  # exercises whose answer hung or killed the kernel
    code: list[str] = field(default_factory=list)  # what ran before each check, for the source rules
    trusted: list[str] = field(default_factory=list)  # the chapter's own cells run so far, for a probe
    kept: list[str] = field(default_factory=list)  # the answers of the exercises passed so far, for a probe
    answered: dict[int, list[str]] = field(default_factory=dict)
    probe: Callable[[Exercise, list[str], list[str]], tuple[str, float] | None] | None = None  # .probe.run_probe

    def record(self, step: Step, cell: Any) -> None:
        """Note an answer cell's error; after a check, replay the checker from the kernel's record in this process
        (:mod:`tfm_lesson.course.verdicts`): the verdict is computed here, never read from the kernel; a pass of an
        exercise with a probe (:mod:`.probe`) stands only if the probe, run outside the kernel, finds no fault."""
        kind, ex = step.kind, step.exercise
        if kind != "check":
            self.code.append(step.source)
        if kind in ("chapter", "reference"):
            self.trusted.append(step.source)
        if kind == "answer":
            self.answered.setdefault(ex.number, []).append(step.source)
            error = cell_error(cell)
            if error:
                self.answer_errors.setdefault(ex.number, []).append(error)
        elif kind == "check":
            r = self.results[ex.number]
            r.passed, r.message, r.credit, r.checks = verdict(
                ex, _trace_path(self.scratch, ex, self.token), self.code, cell_error(cell),
                self.checking.checkers[ex.checker], self.checking.keywords[ex.number], self.checking.salt)
            fault = self.probe(ex, list(self.trusted), list(self.kept)) if r.passed and self.probe else None
            if fault is not None:
                r.passed, (r.message, r.credit) = False, fault
            if r.passed:  # its definitions stay in the kernel (no solution replaces them): a later probe needs them
                self.kept += self.answered.get(ex.number, [])

    def final(self) -> list[Result]:
        """The results, once broken exercises and answer errors are told (a passed exercise carries no message)."""
        for number, reason in self.broken.items():
            r = self.results[number]
            r.passed, r.message, r.credit, r.checks = False, reason, 0.0, ""
        for number, errors in self.answer_errors.items():
            if not self.results[number].passed:
                self.results[number].message += f" (your exercise cell raised {errors[0]})"
        for r in self.results.values():
            if r.passed:
                r.message = ""
            elif len(r.message) > MESSAGE_LIMIT:  # an answer can raise a message of any size: the CSV keeps a page
                r.message = f"{r.message[:MESSAGE_LIMIT]}... ({len(r.message) - MESSAGE_LIMIT} more characters cut)"
            if r.checks and not r.passed:  # a checker with named checks: which passed, before its message
                r.message = f"{r.checks} — {r.message}"
        return list(self.results.values())


def _failure(kind: str, timed_out: bool, timeout: int, memory_mb: int) -> str:
    """Why a cell of ``kind`` stopped the kernel (it ran too long, or the kernel died)."""
    what = "the check of your answer" if kind == "check" else (
        "your exercise cell" if kind == "answer" else "a cell of the chapter")
    return (f"{what} ran past the {timeout} s limit (an endless loop?); the kernel was restarted"
            if timed_out else f"the kernel died while running {what} (over the {memory_mb} MB "
                              "memory limit, or the code ended the process); it was restarted")


def _skipped(step: Step, outcome: _Outcome) -> bool:
    """Whether ``step`` is not to run: the answers of an exercise that broke the kernel, the solution of one that
    passed."""
    kind, ex, _ = step
    if ex is None:
        return False
    if kind == "reference":
        return outcome.results[ex.number].passed and ex.number not in outcome.broken
    return ex.number in outcome.broken


def _restart(kernel: Kernel, before: list[Step], outcome: _Outcome) -> None:
    """A fresh kernel, with what stands ``before`` replayed (no checks, no broken exercise's answers, the solutions
    of the exercises that did not pass)."""
    kernel.stop()
    kernel.start()
    for step in before:
        if step.kind != "check" and not _skipped(step, outcome):
            kernel.run(step.source)


def _run_plan(kernel: Kernel, plan: list[Step], outcome: _Outcome, timeout: int, memory_mb: int,
              notes: list[str] | None = None) -> None:
    """Run the plan cell by cell. A cell that hangs or kills the kernel costs its exercise (the kernel is restarted,
    the rest goes on); a chapter cell that does leaves every exercise not yet graded with the reason. Output over
    the grader's limit is noted in ``notes``."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    for done, step in enumerate(plan, start=1):
        kind, ex, source = step
        if _skipped(step, outcome):
            continue
        try:
            cell, reason = kernel.run(source), None
        except (CellTimeoutError, DeadKernelError, RuntimeError) as exc:
            reason = _failure(kind, isinstance(exc, CellTimeoutError), timeout, memory_mb)
        reason = kernel.over_limit() or reason  # a cap on the whole submission hit: its kernel is killed
        if reason is not None:
            if ex is None or kind == "reference":  # the chapter itself failed: nothing after it can be trusted
                for r in outcome.results.values():
                    if not r.message:
                        r.message = f"not graded: {reason}"
                return
            outcome.broken[ex.number] = reason
            _restart(kernel, plan[:done], outcome)  # replay what stands before it
            continue
        note = dropped_note(step.kind, step.exercise, cell)
        if note and notes is not None:
            notes.append(note)
        outcome.record(step, cell)


def _all_zero(name: str, exs: list[Exercise], reason: str, notes: list[str] | None = None) -> Graded:
    """A submission that scores 0 in every exercise, for ``reason``."""
    return Graded(name, [Result(ex, False, reason) for ex in exs], notes or [])


def grade_one(chapter: Any, exs: list[Exercise], path: Path, kernel_dir: Path, timeout: int, memory_mb: int,
              name: str | None = None, sandbox: bool = False, whole: KernelGroup | None = None,
              checking: Checking | None = None, limits: Limits | None = None) -> Graded:
    """Grade one submission; never raises for anything the submission does. ``whole``: the class it belongs to,
    which can stop its kernel (Ctrl-C); ``limits``: the caps on the whole submission (:mod:`.sandbox_limits`)."""
    import nbclient.exceptions  # noqa: F401  (the grader's own dependency: missing, it raises here, not as a score)

    name = name or str(path)
    start = time.perf_counter()
    try:
        student = read_submission(path)
    except (CourseError, OSError) as exc:
        return _all_zero(name, exs, f"not graded: {exc}")
    found, notes = answers(student, chapter, exs)
    work = tempfile.mkdtemp(prefix="tfm-grade-")
    disk = ScratchDisk.mount(Path(work), limits.disk_mb) if limits is not None and sandbox else None
    try:
        scratch = Path(work) / "scratch"  # the kernel's working folder (the sandbox shows it at the same path)
        scratch.mkdir()
        checking = checking or Checking.of(chapter, exs)
        token = secrets.token_hex(16)
        plan = _plan(chapter, exs, found, scratch, checking, token)
        outcome = _Outcome({ex.number: Result(ex) for ex in exs}, scratch, checking, token, probe=lambda ex, prelude, kept:
                           run_probe(ex, prelude, kept + (found[ex.number] or []), checking.checkers[ex.checker],
                                     workdir=Path(work), sandbox=sandbox, timeout=timeout, salt=checking.salt,
                                     limits=limits))
        for ex in exs:
            if found[ex.number] is None:
                outcome.broken[ex.number] = "the exercise's cells are missing from the submission (deleted?)"
        kernel = (whole.kernel if whole is not None else Kernel)(kernel_dir, Path(work), timeout, sandbox=sandbox,
                                                                 limits=limits, disk=disk)
        try:
            kernel.start()
        except Exception as exc:
            kernel.stop()
            return _all_zero(name, exs, f"not graded: the kernel did not start ({type(exc).__name__}: {exc})",
                             notes)
        try:
            _run_plan(kernel, plan, outcome, timeout, memory_mb, notes)
        except Exception as exc:  # the replay failed too, or something nobody foresaw: the rest scores 0
            for r in outcome.results.values():
                if not r.passed and not r.message:
                    r.message = f"not graded: {type(exc).__name__}: {exc}"
        finally:
            kernel.stop()
    finally:
        if disk is not None:
            disk.close()
        _remove(work)
    return Graded(name, outcome.final(), notes, time.perf_counter() - start)


def _remove(folder: str) -> None:
    """Remove a submission's working folder whatever its kernel left there (thousands of nested folders make
    ``shutil.rmtree`` recurse too deep): ``rm -rf`` where there is one, else ``rmtree``, never an exception."""
    try:
        if shutil.which("rm"):
            subprocess.run(["rm", "-rf", "--one-file-system", folder], capture_output=True, timeout=300)
        shutil.rmtree(folder, ignore_errors=True)
    except BaseException:  # a folder left in /tmp is better than a class not graded
        pass


# the class ----------------------------------------------------------------------------------------------------------
def submissions(paths: list[Path]) -> list[Path]:
    """Each path as given, or the notebooks of a folder (recursively, checkpoints left out), sorted."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        elif path.exists():
            found.append(path)
        else:
            raise CourseError(f"submission {path}: no such file or folder")
    if not found:
        raise CourseError(f"no submissions found in {', '.join(map(str, paths))} (a folder is searched for *.ipynb)")
    return found


def _grade_all(todo: list[Path], one: Callable[[Path, KernelGroup], None], jobs: int) -> None:
    """Grade ``todo`` ``jobs`` at a time; on Ctrl-C or a failure (the CSV cannot be written), stop every kernel,
    start nothing more, and raise it."""
    whole = KernelGroup()

    def guarded(path: Path) -> None:
        if not whole.stopped.is_set():
            one(path, whole)

    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(guarded, path) for path in todo]
    try:
        for future in futures:
            future.result()
    except BaseException:
        whole.stop()
        for future in futures:
            future.cancel()
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)


def _announce(limits: Limits | None, sandbox: bool | str, seed: int, resumed: str | None) -> None:
    """What the instructor reads before the class runs: the caps, what --resume left, the seed."""
    if limits is not None:
        print(describe(limits, sandbox), flush=True)
    if resumed:
        print(resumed, flush=True)
    print(f"the checkers draw their inputs from seed {seed}, which no submission could know in advance (--seed {seed} "
          "draws the same inputs again)", flush=True)


def _add_quiz_lines(book: GradeBook, cid: str | None) -> None:
    """--resume of a CSV written before the quiz line: each submission whose exercises it grades gets its quiz line
    (read from its hand-in, never run) and keeps the rest."""
    if cid:
        for name in book.done(exercise_titles=True) - book.done():
            book.add_rows(Graded(name, [quiz_of(Path(name), cid)]))


def grade(chapter_path: Path, paths: list[Path], csv_path: Path, feedback: Path | None = None,
          timeout: int = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB, jobs: int = 1,
          sandbox: bool | str = True, resume: bool = False, seed: int | None = None,
          limits: Limits | None = Limits(), quiz: bool = True, solutions: bool = True) -> list[Graded]:
    """Grade every submission against ``chapter_path`` (with ``resume``, those not yet in ``csv_path``); each one's
    rows go into the CSV (and its feedback page is written) as soon as it is graded, so an interruption keeps them.
    Each submission's kernel runs in the sandbox ``sandbox`` names (True or "auto": bubblewrap, else a Podman or
    Docker container: :mod:`.sandbox`, :mod:`.sandbox_container`) unless it is False or "none",
    under ``limits`` (:mod:`tfm_lesson.course.sandbox_limits`; None: no cap on the whole submission).
    With ``quiz`` (and a quiz cell in the chapter), each submission's quiz hand-in is one more line (:func:`_quiz`).
    Without ``solutions``, no chapter solution ever runs in a kernel (a bug then reaches the later exercises).
    CourseError for an instructor's mistake (a chapter without solutions, a missing path, an output that would
    overwrite something or cannot be written, a kernel that cannot start under ``memory_mb``, no sandbox to be had),
    before any submission runs."""
    import nbformat

    if timeout <= 0 or memory_mb < 0 or jobs < 1:
        raise CourseError("--timeout must be > 0 seconds, --memory >= 0 MB (0 = no limit), --jobs >= 1")
    files = submissions(paths)
    check_outputs(csv_path, feedback, chapter_path, files, resume)
    try:
        chapter = nbformat.read(chapter_path, as_version=4)
    except Exception as exc:
        raise CourseError(f"chapter {chapter_path}: cannot read it ({exc})") from None
    exs = exercises(chapter)
    for ex in exs:
        check_call(ex)  # a check whose keywords are not literals is refused before anything runs
    seed = secrets.randbelow(2 ** 31) if seed is None else seed
    checking = Checking.of(chapter, exs, seed, solutions)  # a checker found nowhere is refused here too
    cid = chapter_quiz(chapter) if quiz else None
    book = GradeBook(csv_path, [*exs, *([quiz_item(cid)] if cid else [])], [str(p) for p in files], resume)
    _add_quiz_lines(book, cid)
    done = book.done()
    done_paths = {Path(name).resolve() for name in done}
    todo = [p for p in files if str(p) not in done and p.resolve() not in done_paths]
    pages = page_names([str(p) for p in files])
    sandbox = choose_or_say(sandbox)
    _announce(limits, sandbox, seed, f"--resume: {len(files) - len(todo)} submission(s) already in {csv_path}, "
              f"{len(todo)} to grade" if resume else None)
    graded: list[Graded] = []
    kernel_dir = Path(tempfile.mkdtemp(prefix="tfm-grade-kernel-"))
    start = time.perf_counter()
    try:
        kernel_spec(kernel_dir, memory_mb, timeout)
        if todo:
            check_kernel(kernel_dir, timeout, memory_mb, sandbox, limits)

        def one(path: Path, whole: KernelGroup) -> None:
            try:
                g = grade_one(chapter, exs, path, kernel_dir, timeout, memory_mb, sandbox=sandbox, whole=whole,
                              checking=checking, limits=limits)
            except Exception as exc:  # the grader's own failure on this file: 0 with the reason, the class goes on
                g = _all_zero(str(path), exs, f"not graded: the grader failed on this file ({type(exc).__name__})")
            if whole.stopped.is_set():
                return  # stopped midway: not a grade
            if cid:
                g.results.append(quiz_of(path, cid))
            g.sandboxed = bool(sandbox)
            book.add(g)
            if feedback is not None:
                write_page(g, feedback, pages[g.submission], chapter_path.stem)
            graded.append(g)
            score = round(sum(r.points for r in g.results), 2)
            print(f"{path}: {score} / {sum(r.exercise.points for r in g.results)} ({g.seconds:.1f} s)"
                  + ("" if sandbox else ", without a sandbox"), flush=True)

        try:
            _grade_all(todo, one, jobs)
        except KeyboardInterrupt:
            print(f"interrupted: the {len(graded)} submission(s) graded are in {csv_path}; run the same command with "
                  "--resume to grade the rest", file=sys.stderr, flush=True)
            raise
    finally:
        shutil.rmtree(kernel_dir, ignore_errors=True)
    if not csv_path.exists():  # nothing to grade (all resumed): the table is still there to read
        book.write()
    print(f"{len(graded)} submission(s) graded in {time.perf_counter() - start:.1f} s: {csv_path}"
          + (f", feedback pages in {feedback}" if feedback else ""), flush=True)
    order = {str(p): k for k, p in enumerate(files)}
    return sorted(graded, key=lambda g: order.get(g.submission, len(order)))
