"""Grade a class: run each student's exercise cells inside the instructor's chapter and score them with the checkers.

    python -m tfm_lesson.course grade notebooks/03_multi_head_attention.ipynb submissions/ --csv grades.csv \\
        --feedback feedback/ [--timeout 60] [--memory 4096] [--jobs 2]

For each submission (a student copy the student worked in):

* only its exercise cells are taken: the "your turn" cell before each solution and the stub that replaced the
  solution (matched by cell id, else by the order of the solution-tagged cells). They run, in order, among the
  chapter's own definitions (its imports, functions and classes; no training, no plots), in a fresh kernel with a
  memory limit and a time limit per cell. Anything else the student added or changed is ignored and listed.
* each check runs the checker imported afresh (``tfm_lesson.checks`` is removed from ``sys.modules`` and imported
  again right before it), so an answer that rebinds a checker's name, or patches the checker module, changes
  nothing; the chapter's own check cell is not run.
* an endless loop or a memory hog costs that exercise its points (the kernel is restarted and the other
  exercises go on); an empty, broken, huge or non-notebook file scores 0 with the reason.

Points: each exercise is worth its **Importance** (1 to 3, the label above it in the chapter); an exercise without
the label is worth 1. The CSV has one row per submission and exercise: ``submission, exercise, passed, points,
max_points, message`` (the checker's message verbatim); ``--feedback`` writes one Markdown page per submission.
"""
from __future__ import annotations

import ast
import csv
import io
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._io import atomic_open
from .cells import STUDENT_STUB, CourseError, is_setup_cell
from .cells import is_solution as _is_solution
from .cells import is_stub as _is_stub

MAX_BYTES = 50 * 1024 * 1024  # a bigger submission is refused unread
DEFAULT_TIMEOUT = 60  # seconds per cell (an exercise cell, a check)
DEFAULT_MEMORY_MB = 4096  # address space of the kernel (torch alone maps about 1 GB)
_IMPORTANCE = re.compile(r"\*\*Importance\*\*\s*(\d+)\s*/\s*\d+")
_TITLE = re.compile(r"^#+\s*(Exercise\s+\d+[^\n]*)", re.MULTILINE)


# the chapter's exercises --------------------------------------------------------------------------------------------
@dataclass
class Exercise:
    """One exercise of a chapter: where its cells are and how it is checked."""

    number: int
    title: str  # "Exercise 1: split the heads"
    points: int  # its Importance label
    answer_index: int | None  # the "your turn" cell before the solution (None when there is none)
    solution_index: int
    check_index: int
    checker: str  # "check_split_heads"
    arguments: str  # "split_heads" or "my_attention, corner_cases=False"


def _check_call(source: str, where: str) -> tuple[str, str]:
    """``check_x(args)`` of a check cell, as (checker name, argument source)."""
    try:
        body = ast.parse(source).body
    except SyntaxError as exc:
        raise CourseError(f"{where}: the check cell does not parse ({exc})") from None
    calls = [s.value for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
             and isinstance(s.value.func, ast.Name) and s.value.func.id.startswith("check_")]
    if len(calls) != 1:
        raise CourseError(f"{where}: expected one `check_...(answer)` call in the cell after the solution")
    call = calls[0]
    parts = [ast.unparse(a) for a in call.args] + [ast.unparse(k) for k in call.keywords]
    return call.func.id, ", ".join(parts)


def exercises(chapter: Any) -> list[Exercise]:
    """The exercises of an instructor's chapter (with solutions), in order."""
    cells = chapter["cells"]
    if any(_is_stub(c) for c in cells):
        raise CourseError("the chapter has no solution cells (its exercises hold the student stubs): pass the "
                          "instructor's chapter, not a student copy")
    found: list[Exercise] = []
    for i, cell in enumerate(cells):
        if not _is_solution(cell):
            continue
        n = len(found) + 1
        check = i + 1
        if check >= len(cells) or cells[check].get("cell_type") != "code" or _is_solution(cells[check]):
            raise CourseError(f"exercise {n} (cell {i + 1}): no check cell right after the solution")
        checker, arguments = _check_call(cells[check]["source"], f"cell {check + 1}")
        before = cells[i - 1] if i else None
        answer = i - 1 if before is not None and before.get("cell_type") == "code" and not _is_solution(before) else None
        text = next((c["source"] for c in reversed(cells[:i]) if c.get("cell_type") == "markdown"
                     and _TITLE.search(c["source"])), "")
        title = _TITLE.search(text).group(1).strip() if text else f"Exercise {n}"
        importance = _IMPORTANCE.search(text)
        found.append(Exercise(n, title, int(importance.group(1)) if importance else 1, answer, i, check,
                              checker, arguments))
    if not found:
        raise CourseError("the chapter has no solution cells: pass the instructor's chapter, not a student copy")
    return found


def _definitions(source: str) -> str:
    """The imports, functions, classes and call-free assignments of a chapter cell (what later cells may name);
    its training runs, plots and prints are left out."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics, say: nothing to take
        return ""
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            keep.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and not any(
                isinstance(n, ast.Call) for n in ast.walk(node.value)):
            keep.append(node)
    return "\n\n".join(ast.unparse(n) for n in keep)


# what a submission holds --------------------------------------------------------------------------------------------
def _first_line(source: str) -> str:
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()), "")
    return (line[:57] + "...") if len(line) > 60 else line


def _answers(student: Any, chapter: Any, exs: list[Exercise]) -> tuple[dict[int, list[str] | None], list[str]]:
    """Each exercise's answer sources (the "your turn" cell, then the stub cell if the student wrote in it; None when
    both are gone), and notes on what else differs from the chapter (ignored by the grader)."""
    theirs = list(student.get("cells", []))
    ours = chapter["cells"]
    by_id = {c.get("id"): j for j, c in enumerate(theirs) if c.get("id")}
    stubs = [j for j, c in enumerate(theirs) if _is_solution(c)]
    by_order = len(stubs) == len(exs)
    used: set[int] = set()
    answers: dict[int, list[str] | None] = {}
    notes: list[str] = []
    for k, ex in enumerate(exs):
        sol_id = ours[ex.solution_index].get("id")
        stub = by_id.get(sol_id) if sol_id else None
        if stub is None and by_order:
            stub = stubs[k]
        turn = None
        if ex.answer_index is not None:
            turn_id = ours[ex.answer_index].get("id")
            turn = by_id.get(turn_id) if turn_id else None
            if turn is None and stub is not None and stub > 0 and theirs[stub - 1].get("cell_type") == "code" \
                    and not _is_solution(theirs[stub - 1]):
                turn = stub - 1
        sources = []
        for j in (turn, stub):
            if j is None:
                continue
            used.add(j)
            source = theirs[j].get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            if source.strip() and source.strip() != STUDENT_STUB.strip():
                sources.append(source)
        answers[ex.number] = sources if (turn is not None or stub is not None) else None
        if answers[ex.number] is None:
            notes.append(f"{ex.title}: its cells are missing from the submission (deleted?), so nothing was graded")
    # everything else: compared with the chapter's student copy, cell by cell (ids where both have them)
    chapter_text = {c.get("source", "").strip() for c in ours} | {STUDENT_STUB.strip()}
    chapter_ids = {c.get("id"): c for c in ours if c.get("id")}
    for j, cell in enumerate(theirs):
        if j in used:
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        mine = chapter_ids.get(cell.get("id")) if cell.get("id") else None
        if mine is not None:
            expected = STUDENT_STUB if _is_solution(mine) else mine.get("source", "")
            if source.strip() != expected.strip():
                notes.append(f"cell {j + 1} ({cell.get('cell_type')}, {_first_line(source)!r}): changed; ignored, "
                             "the chapter's own cell was used")
        elif source.strip() not in chapter_text:
            notes.append(f"cell {j + 1} ({cell.get('cell_type')}, {_first_line(source)!r}): added; ignored (answers "
                         "go into the exercise cells)")
    if chapter_ids and by_id:
        gone = [i for i, c in enumerate(ours) if c.get("id") and c["id"] not in by_id and not _is_solution(c)]
        if gone:
            notes.append(f"{len(gone)} of the chapter's cells are not in the submission (deleted or re-created); "
                         "the chapter's own were used")
    return answers, notes


# running one submission ---------------------------------------------------------------------------------------------
@dataclass
class Result:
    exercise: Exercise
    passed: bool = False
    message: str = ""

    @property
    def points(self) -> int:
        return self.exercise.points if self.passed else 0


@dataclass
class Graded:
    submission: str
    results: list[Result]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _check_source(ex: Exercise, marker: str) -> str:
    return f"""\
import sys as _tfm_sys, importlib as _tfm_importlib, json as _tfm_json
for _tfm_name in [m for m in list(_tfm_sys.modules) if m == "tfm_lesson.checks" or m.startswith("tfm_lesson.checks.")]:
    del _tfm_sys.modules[_tfm_name]
_tfm_checks = _tfm_importlib.import_module("tfm_lesson.checks")
_tfm_result = {{"passed": False, "message": ""}}
try:
    _tfm_checks.{ex.checker}({ex.arguments})
    _tfm_result["passed"] = True
except _tfm_checks.Mistake as _tfm_error:
    _tfm_result["message"] = str(_tfm_error)
except NameError as _tfm_error:
    _tfm_result["message"] = f"{{_tfm_error}}: the exercise cell must define it (keep the name the exercise asks for)"
except BaseException as _tfm_error:
    _tfm_result["message"] = f"the check stopped with {{type(_tfm_error).__name__}}: {{_tfm_error}}"
_tfm_sys.__stdout__.flush()
print({marker!r} + _tfm_json.dumps(_tfm_result), flush=True)
"""


def _text(cell: Any) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
    return "".join(out)


def _error(cell: Any) -> str | None:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            return f"{o.get('ename')}: {o.get('evalue')}"
    return None


class _Kernel:
    """A kernel for one submission, restartable; runs cells one at a time under the time limit."""

    def __init__(self, kernel_dir: Path, workdir: Path, timeout: int):
        self.kernel_dir, self.workdir, self.timeout = kernel_dir, workdir, timeout
        self.client: Any = None
        self.context: Any = None

    def start(self) -> None:
        import nbformat
        from jupyter_client import AsyncKernelManager
        from jupyter_client.kernelspec import KernelSpecManager
        from nbclient import NotebookClient

        km = AsyncKernelManager(kernel_name="tfm-grade", kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[str(self.kernel_dir)], ensure_native_kernel=False))
        self.client = NotebookClient(nbformat.v4.new_notebook(), km=km, timeout=self.timeout, allow_errors=True,
                                     interrupt_on_timeout=False, shutdown_kernel="immediate", startup_timeout=120,
                                     resources={"metadata": {"path": str(self.workdir)}})
        self.context = self.client.setup_kernel(stderr=subprocess.DEVNULL)  # the kernel's own warnings
        self.context.__enter__()

    def stop(self) -> None:
        if self.context is not None:
            try:
                self.context.__exit__(None, None, None)
            except Exception:  # a kernel that is already gone
                pass
            try:
                if self.client.km is not None and self.client.km.has_kernel:
                    from jupyter_core.utils import run_sync

                    run_sync(self.client.km.shutdown_kernel)(now=True)
            except Exception:
                pass
        self.client = self.context = None

    def run(self, source: str) -> Any:
        """Run one cell; returns it with its outputs. Raises CellTimeoutError or DeadKernelError."""
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        self.client.nb.cells.append(cell)
        self.client.execute_cell(cell, len(self.client.nb.cells) - 1)
        return cell


def _kernel_spec(directory: Path, memory_mb: int, timeout: int) -> None:
    import json

    spec = directory / "tfm-grade"
    spec.mkdir(parents=True, exist_ok=True)
    env = {"TFM_CHECK_TIME_LIMIT": str(max(1, timeout - 5)), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "MPLBACKEND": "Agg", "TFM_DEVICE": os.environ.get("TFM_DEVICE", "cpu"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          *filter(None, [os.environ.get("PYTHONPATH", "")])])}
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "tfm_lesson.course._grade_kernel", "--memory-mb", str(memory_mb),
                 "-f", "{connection_file}"],
        "display_name": "tfm_lesson grader", "language": "python", "env": env}))


def _all_zero(name: str, exs: list[Exercise], reason: str, notes: list[str] | None = None) -> Graded:
    return Graded(name, [Result(ex, False, reason) for ex in exs], notes or [])


def read_submission(path: Path) -> Any:
    """The submission as a notebook; CourseError with the reason when it is not one (or too big)."""
    import nbformat

    size = path.stat().st_size
    if size > MAX_BYTES:
        raise CourseError(f"the file is {size / 2**20:.0f} MB, over the grader's {MAX_BYTES // 2**20} MB limit")
    if size == 0:
        raise CourseError("the file is empty (0 bytes)")
    try:
        nb = nbformat.read(path, as_version=4)
        cells = nb["cells"]
        if not isinstance(cells, list) or not all(isinstance(c, dict) and "cell_type" in c for c in cells):
            raise ValueError("its cells are not notebook cells")
    except Exception as exc:  # not JSON, not a notebook, a notebook from another planet
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CourseError(f"not a notebook Jupyter can read ({first})") from None
    return nb


def grade_one(chapter: Any, exs: list[Exercise], path: Path, kernel_dir: Path, timeout: int,
              memory_mb: int, name: str | None = None) -> Graded:
    """Grade one submission; never raises for anything the submission does."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    name = name or str(path)
    start = time.perf_counter()
    try:
        student = read_submission(path)
    except (CourseError, OSError) as exc:
        return _all_zero(name, exs, f"not graded: {exc}")
    answers, notes = _answers(student, chapter, exs)
    marker = f"TFM-GRADE-{secrets.token_hex(8)}:"
    cells = chapter["cells"]
    # the plan: chapter definitions and answers in chapter order, a check after each exercise
    plan: list[tuple[str, Any, str]] = []  # (kind, exercise or None, source)
    skip = {i for ex in exs for i in (ex.answer_index, ex.solution_index, ex.check_index) if i is not None}
    by_solution = {ex.solution_index: ex for ex in exs}
    for i, cell in enumerate(cells[:exs[-1].check_index + 1]):
        if i in by_solution:
            ex = by_solution[i]
            for source in answers[ex.number] or []:
                plan.append(("answer", ex, source))
            plan.append(("check", ex, _check_source(ex, marker)))
        elif i not in skip and cell.get("cell_type") == "code" and not is_setup_cell(cell.get("source", "")):
            source = _definitions(cell.get("source", ""))
            if source:
                plan.append(("chapter", None, source))
    results = {ex.number: Result(ex) for ex in exs}
    answer_errors: dict[int, list[str]] = {}
    broken: dict[int, str] = {}  # exercises whose answer hung or killed the kernel: not replayed
    for ex in exs:
        if answers[ex.number] is None:
            broken[ex.number] = "the exercise's cells are missing from the submission (deleted?)"
    done = 0
    with tempfile.TemporaryDirectory(prefix="tfm-grade-") as work:
        kernel = _Kernel(kernel_dir, Path(work), timeout)
        try:
            kernel.start()
        except Exception as exc:
            return _all_zero(name, exs, f"not graded: the kernel did not start ({type(exc).__name__}: {exc})",
                             notes)
        try:
            while done < len(plan):
                kind, ex, source = plan[done]
                done += 1
                if ex is not None and ex.number in broken:
                    continue
                try:
                    cell = kernel.run(source)
                except (CellTimeoutError, DeadKernelError, RuntimeError) as exc:
                    timed_out = isinstance(exc, CellTimeoutError)
                    what = "the check of your answer" if kind == "check" else (
                        "your exercise cell" if kind == "answer" else "a cell of the chapter")
                    reason = (f"{what} ran past the {timeout} s limit (an endless loop?); the kernel was restarted"
                              if timed_out else f"the kernel died while running {what} (over the {memory_mb} MB "
                                                "memory limit, or the code ended the process); it was restarted")
                    if ex is None:  # the chapter itself failed: nothing after it can be trusted
                        for e in exs:
                            if not results[e.number].message:
                                results[e.number].message = f"not graded: {reason}"
                        break
                    broken[ex.number] = reason
                    kernel.stop()
                    kernel.start()
                    for k, (kind2, ex2, source2) in enumerate(plan[:done]):  # replay what stands before it
                        if kind2 != "check" and (ex2 is None or ex2.number not in broken):
                            kernel.run(source2)
                    continue
                if kind == "answer":
                    error = _error(cell)
                    if error:
                        answer_errors.setdefault(ex.number, []).append(error)
                elif kind == "check":
                    lines = [ln for ln in _text(cell).splitlines() if ln.startswith(marker)]
                    if lines:
                        import json

                        verdict = json.loads(lines[-1][len(marker):])
                        results[ex.number].passed = bool(verdict.get("passed"))
                        results[ex.number].message = str(verdict.get("message", ""))
                    else:
                        results[ex.number].message = ("the check gave no verdict (" + (_error(cell) or "no output")
                                                      + ")")
        except Exception as exc:  # the replay failed too, or something nobody foresaw: the rest scores 0
            for e in exs:
                if not results[e.number].passed and not results[e.number].message:
                    results[e.number].message = f"not graded: {type(exc).__name__}: {exc}"
        finally:
            kernel.stop()
    for number, reason in broken.items():
        results[number].passed, results[number].message = False, reason
    for number, errors in answer_errors.items():
        if not results[number].passed:
            results[number].message += f" (your exercise cell raised {errors[0]})"
    for r in results.values():
        if r.passed:
            r.message = ""
    return Graded(name, list(results.values()), notes, time.perf_counter() - start)


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


def write_csv(graded: list[Graded], path: Path) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["submission", "exercise", "passed", "points", "max_points", "message"])
    for g in graded:
        for r in g.results:
            writer.writerow([g.submission, r.exercise.title, r.passed, r.points, r.exercise.points, r.message])
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as f:
        f.write(buffer.getvalue())


def feedback_page(g: Graded, chapter_name: str) -> str:
    """One student's page, Markdown: the score, each exercise with the checker's message, what was ignored."""
    total = sum(r.points for r in g.results)
    top = sum(r.exercise.points for r in g.results)
    lines = [f"# {chapter_name}: {Path(g.submission).name}", "", f"**Score: {total} / {top}**", ""]
    for r in g.results:
        mark = "passed" if r.passed else "not passed"
        lines += [f"## {r.exercise.title}: {r.points} / {r.exercise.points} ({mark})", ""]
        if r.message:
            lines += ["```text", r.message, "```", ""]
    if g.notes:
        lines += ["## Not graded", "", "Only the exercise cells are graded; these differences from the chapter "
                  "were ignored:", ""] + [f"- {n}" for n in g.notes] + [""]
    return "\n".join(lines)


def _page_name(g: Graded, taken: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(g.submission).with_suffix("").as_posix().strip("./"))[-120:]
    name, k = stem + ".md", 1
    while name in taken:
        k += 1
        name = f"{stem}-{k}.md"
    taken.add(name)
    return name


def grade(chapter_path: Path, paths: list[Path], csv_path: Path, feedback: Path | None = None,
          timeout: int = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB, jobs: int = 1) -> list[Graded]:
    """Grade every submission against ``chapter_path``; write the CSV (and the feedback pages). CourseError for an
    instructor's mistake (a chapter without solutions, a missing path), before anything runs."""
    import nbformat

    if timeout <= 0 or memory_mb < 0 or jobs < 1:
        raise CourseError("--timeout must be > 0 seconds, --memory >= 0 MB (0 = no limit), --jobs >= 1")
    try:
        chapter = nbformat.read(chapter_path, as_version=4)
    except Exception as exc:
        raise CourseError(f"chapter {chapter_path}: cannot read it ({exc})") from None
    exs = exercises(chapter)
    files = submissions(paths)
    kernel_dir = Path(tempfile.mkdtemp(prefix="tfm-grade-kernel-"))
    try:
        _kernel_spec(kernel_dir, memory_mb, timeout)
        start = time.perf_counter()

        def one(path: Path) -> Graded:
            g = grade_one(chapter, exs, path, kernel_dir, timeout, memory_mb)
            score = sum(r.points for r in g.results)
            print(f"{path}: {score} / {sum(e.points for e in exs)} ({g.seconds:.1f} s)", flush=True)
            return g

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            graded = list(pool.map(one, files))
    finally:
        shutil.rmtree(kernel_dir, ignore_errors=True)
    write_csv(graded, csv_path)
    if feedback is not None:
        feedback.mkdir(parents=True, exist_ok=True)
        taken: set[str] = set()
        for g in graded:
            with atomic_open(feedback / _page_name(g, taken), "w") as f:
                f.write(feedback_page(g, chapter_path.stem))
    print(f"{len(graded)} submission(s) graded in {time.perf_counter() - start:.1f} s: {csv_path}"
          + (f", feedback pages in {feedback}" if feedback else ""), flush=True)
    return graded
