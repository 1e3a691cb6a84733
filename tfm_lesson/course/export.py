"""A chapter as an assignment of the graders instructors already run: nbgrader and Otter-Grader.

    python -m tfm_lesson.course export notebooks/03_multi_head_attention.ipynb --format nbgrader --out course/
    python -m tfm_lesson.course export notebooks/03_multi_head_attention.ipynb --format otter --out otter/

Both keep the chapter's cells and turn each exercise into the grader's own pieces: the solution becomes the answer
region the tool strips from the student version, and the exercise's checker becomes an autograded test worth the
exercise's **Importance** (1 to 3) in points. The test imports ``tfm_lesson.checks`` afresh (a name rebound in an
answer cell changes nothing) and raises the checker's message, which names the mistake, into the tool's feedback.
After the quiz cell come the learner's hand-in cell and the tool's test of it, a point a right answer
(:mod:`~tfm_lesson.course.export_quiz`).

* nbgrader: ``COURSE/source/NAME/<chapter>.ipynb`` (``### BEGIN SOLUTION`` / ``### END SOLUTION``, cell metadata
  ``nbgrader`` with ``grade_id``, ``points``, ``solution``, ``locked``; every other cell locked) and a minimal
  ``COURSE/nbgrader_config.py``. Then ``nbgrader generate_assignment NAME``, ``nbgrader autograde NAME``.
* Otter-Grader: ``OUT/<chapter>.ipynb`` in Otter's v1 format (an assignment config cell naming the course's
  requirements, ``# BEGIN QUESTION`` with its name and points, ``# BEGIN SOLUTION`` with the exercise's stub as the
  student's prompt, ``# BEGIN TESTS`` with exception-based tests carrying a ``failure_message``). Then ``otter
  assign``, and ``otter run`` (no Docker) or ``otter grade`` (Docker).

``--timeout S`` (default 600) is the time a cell of a submission may run when the tool grades it, kept from outside
the kernel: nbgrader's ``c.Execute.timeout``; for Otter, whose local runner has no limit, the config names
:class:`OtterCellTimeLimit`, a watchdog in Otter's own process. Export never writes over the chapter, nor over an
earlier export that was edited unless ``--force`` (:mod:`~tfm_lesson.course.export_record`).
"""
from __future__ import annotations

import ast
import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .._io import atomic_open
from .cells import CourseError, write_notebook
from .exercises import Exercise, chapter_sources, exercises
from .export_quiz import nbgrader_quiz_test, otter_quiz_tests, quiz_points
from .export_record import check_targets, remember
from .kernel_watchdog import GRACE, KernelWatchdog
from .location import install_sources
from .otter_log_guard import guard as guard_otter_log_server
from .quiz import QUIZ_CALL, is_quiz_cell
from .quiz_hand_in import HAND_IN_TAG, hand_in_source
from .verdicts import chapter_checkers
from .solution_form import unfold

__all__ = ["OtterCellTimeLimit", "course_requirements", "export", "nbgrader_notebook", "otter_notebook"]

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema
CELL_TIME_LIMIT = 600  # seconds per cell, by default, in both tools (a chapter's training cell takes minutes on a CPU)


@dataclass(frozen=True)
class ChapterChecks:
    """The chapter's checkers (one it defines, ``check_x = make_checker(...)``, else the package's) and the
    chapter's definitions, which a test rebuilds its own checker from."""

    checkers: dict[str, Callable]
    definitions: str

    @classmethod
    def of(cls, chapter: Any, exs: list[Exercise]) -> "ChapterChecks":
        sources = chapter_sources(chapter, exs) if exs else []
        return cls(chapter_checkers(chapter, exs, sources), "\n\n".join(sources))

    def own(self, ex: Exercise) -> bool:
        from .. import checks

        return self.checkers[ex.checker] is not getattr(checks, ex.checker, None)


def _fresh_check(ex: Exercise, found: ChapterChecks, indent: str = "", run: tuple[str, int] | None = None) -> str:
    """The lines of a test that imports the checkers afresh and runs the exercise's checker (a chapter's own one
    rebuilt from the chapter's definitions, whatever an answer cell rebound); with ``run`` (a function of
    ``tfm_lesson.checks._parts``, its first argument), through that function, for partial credit."""
    own = found.own(ex)
    checker = ex.checker if own else f"tfm_lesson.checks.{ex.checker}"
    return "\n".join(indent + line for line in [
        "import sys",
        "for _name in [m for m in list(sys.modules) if m == 'tfm_lesson.checks' or m.startswith('tfm_lesson.checks.')]:",
        "    del sys.modules[_name]  # the checkers as installed, whatever an answer cell rebound",
        "import tfm_lesson.checks",
        *(found.definitions.splitlines() if own else []),
        f"{checker}({ex.arguments})" if run is None else
        f"tfm_lesson.checks._parts.{run[0]}({run[1]}, {checker}, {ex.arguments})",
    ])


def named_checks_of(ex: Exercise, found: ChapterChecks) -> dict[str, float] | None:
    """The named checks of the exercise's checker (``checker.checks``, :mod:`tfm_lesson.checks._parts`), or None:
    both exports then award the same fraction of its points as ``course grade``."""
    named = getattr(found.checkers[ex.checker], "checks", None)
    return dict(named) if isinstance(named, dict) and named else None


def _meta(cell: Any, **nbgrader: Any) -> Any:
    cell = copy.deepcopy(cell)
    cell.setdefault("metadata", {})["nbgrader"] = {"schema_version": SCHEMA_VERSION, "task": False, **nbgrader}
    cell["metadata"].pop("tags", None) if cell["cell_type"] != "code" else None
    return cell


def _code(source: str) -> Any:
    import nbformat

    return nbformat.v4.new_code_cell(source)


def _raw(source: str) -> Any:
    import nbformat

    return nbformat.v4.new_raw_cell(source)


def _clean(cell: Any) -> Any:
    cell = copy.deepcopy(cell)
    if cell.get("cell_type") == "code":
        cell["outputs"], cell["execution_count"] = [], None
        tags = [t for t in cell.get("metadata", {}).get("tags", []) if t != "solution"]
        if tags:
            cell["metadata"]["tags"] = tags
        else:
            cell.get("metadata", {}).pop("tags", None)
        cell.get("metadata", {}).pop("jupyter", None)
        unfold(cell)  # no Colab form either (cellView, #@title): the tools mark solutions their own way
    return cell


def nbgrader_notebook(chapter: Any) -> Any:
    """The chapter as an nbgrader source notebook."""
    exs = exercises(chapter)
    found = ChapterChecks.of(chapter, exs)
    by_cell = {i: (kind, ex) for ex in exs for kind, i in
               (("turn", ex.answer_index), ("solution", ex.solution_index), ("check", ex.check_index))}
    out = copy.deepcopy(chapter)
    cells = []
    for i, cell in enumerate(chapter["cells"]):
        kind, ex = by_cell.get(i, (None, None))
        if kind == "solution":
            answer = _meta(_clean(cell), grade=False, grade_id=f"ex{ex.number}-answer", locked=False, solution=True)
            source = f"### BEGIN SOLUTION\n{answer['source'].rstrip()}\n### END SOLUTION\n"
            answer["source"] = source
            cells.append(answer)
        elif kind == "check":
            test = _meta(_clean(cell), grade=True, grade_id=f"ex{ex.number}-check", locked=True, solution=False,
                         points=ex.points)
            # nbgrader takes the number an autograded test cell shows (its execute_result) as its partial credit,
            # between 0 and the cell's points (nbgrader's docs, user_guide/what_is_nbgrader.rst: "If a autograder
            # test cell outputs a single number [...] it will use that as the number of points"; the code:
            # nbgrader.utils.determine_grade and get_partial_grade, 0.9.6); a cell that shows nothing scores full
            # points, one that raises 0. partial_points shows the points a checker with named checks earned.
            run = ("partial_points", ex.points) if named_checks_of(ex, found) else None
            test["source"] = f"# {ex.title}: {ex.points} point(s). The checker's message names the mistake.\n" + \
                _fresh_check(ex, found, run=run)
            cells.append(test)
        else:
            cells.append(_meta(_clean(cell), grade=False, grade_id=f"cell-{i + 1}", locked=True, solution=False))
        if is_quiz_cell(cell):  # the learner's hand-in (no nbgrader metadata: kept as written) and its test
            cid = QUIZ_CALL.search(cell["source"]).group(1)
            cells += [_hand_in(cell, cid), _meta(_code(nbgrader_quiz_test(cid)), grade=True, grade_id=f"quiz{cid}",
                                                 locked=True, solution=False, points=quiz_points(cid))]
    out["cells"] = cells
    return out


def _hand_in(quiz_cell: Any, cid: str) -> Any:
    """The cell a learner hands the quiz in with, tagged as in a student copy (:mod:`.quiz_hand_in`)."""
    cell = _code(hand_in_source(quiz_cell["source"], cid))
    cell.metadata["tags"] = [HAND_IN_TAG]
    return cell


def _yaml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML string


class OtterCellTimeLimit:
    """An Otter-Grader plugin (the exported assignment config names it): every cell of a submission runs under a time
    limit kept from outside the kernel, so an endless loop costs its question and ``otter run`` always ends. Otter's
    local runner has no time limit of its own and would wait forever; ``otter grade --timeout`` kills the whole
    container (every question 0). Otter creates the plugin in its own grading process; ``before_execution`` starts a
    :class:`~tfm_lesson.course.kernel_watchdog.KernelWatchdog` there, which interrupts a cell at the limit and kills
    the kernel ``grace`` seconds later if the cell catches the interrupt; the notebook then runs again from the top
    with that cell replaced by one that raises ``TimeoutError`` (:mod:`~tfm_lesson.course.otter_rerun`), so the cell
    costs the questions that need it and the others are graded. Configured with ``{"seconds": N}`` (and optionally
    ``"grace"``). Created, it also guards Otter's log server in that process
    (:mod:`~tfm_lesson.course.otter_log_guard`: a stray local connection would keep the run from ending), so an
    assignment exported before the guard gets it too."""

    def __init__(self, submission_path: str, submission_metadata: dict, plugin_config: dict | None):
        config = plugin_config or {}
        self.seconds = int(config.get("seconds", CELL_TIME_LIMIT))
        self.grace = float(config.get("grace", GRACE))
        if self.seconds <= 0:
            raise ValueError(f"OtterCellTimeLimit: seconds must be > 0, got {self.seconds}")
        self.watchdog: KernelWatchdog | None = None
        guard_otter_log_server()  # Otter creates its plugins before grade_notebook starts the log server

    def before_execution(self, submission: Any) -> Any:
        """Start the watchdog (the kernel starts right after this event); the submission runs as it is."""
        from .otter_rerun import install

        watchdog = self.watchdog = KernelWatchdog(self.seconds, self.grace).start()
        counted = [0]

        def killed_by_limit() -> bool:
            new, counted[0] = watchdog.kills > counted[0], watchdog.kills
            return new

        install(killed_by_limit, self.seconds)
        return submission

    def after_grading(self, results: Any) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()

    def generate_report(self) -> str:
        from .otter_rerun import replaced

        events = (self.watchdog.events if self.watchdog is not None else []) + replaced()
        return "\n".join(f"time limit ({self.seconds} s a cell): {e}" for e in events)


def course_requirements() -> list[str]:
    """What an Otter autograder's environment installs besides Otter: torch as the course's package metadata pins it
    (pyproject.toml's dependencies) and the course itself as a chapter's set-up cell installs it (the release)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        pins = [r.split(";")[0].strip() for r in requires("tfm-lesson") or []]
    except PackageNotFoundError:
        pins = []
    torch = next((r for r in pins if re.match(r"torch\b(?![-_])", r)), "torch")
    return [torch, install_sources()[0]]


def _otter_config(name: str, timeout: int) -> str:
    """The assignment config cell: no check-all or export cells, test files, the time-limit plugin, and the
    course's requirements (Otter adds them to the autograder zip's requirements.txt and environment.yml)."""
    return "\n".join([
        "# ASSIGNMENT CONFIG", f"name: {_yaml(name)}", "init_cell: true", "check_all_cell: false", "export_cell: false",
        "run_tests: false", "requirements:", *[f"    - {_yaml(r)}" for r in course_requirements()],
        "tests:", "    ok_format: false", "    files: true",
        "plugins:", f"    - {OtterCellTimeLimit.__module__}.OtterCellTimeLimit:", f"        seconds: {int(timeout)}"])


def _otter_solution(solution: str, stub: str | None) -> str:
    """A solution cell in Otter's markers: the student version shows the exercise's stub (its signature and body
    stub, an Otter prompt) where the solution was; without a stub (or one Otter's quotes cannot hold), ``...``."""
    quote = next((q for q in ('"""', "'''") if stub and q not in stub), None)
    if quote is None:
        return f"# BEGIN SOLUTION\n{solution.rstrip()}\n# END SOLUTION"
    return (f"# BEGIN SOLUTION NO PROMPT\n{solution.rstrip()}\n# END SOLUTION\n"
            f"{quote} # BEGIN PROMPT\n{stub.rstrip()}\n{quote}; # END PROMPT")


def _otter_points(ex: Exercise, found: ChapterChecks) -> str:
    """The question's points: the exercise's, or one value per named check of its checker (each its share)."""
    named = named_checks_of(ex, found)
    if not named:
        return str(ex.points)
    total = sum(named.values())
    return json.dumps([round(ex.points * weight / total, 6) for weight in named.values()])


def _otter_tests(ex: Exercise, found: ChapterChecks) -> list[str]:
    """The question's test cells: one running the checker, or, for a checker with named checks, one per named check,
    passing when the checker got past it (Otter gives each test case its points: the question earns the same fraction
    as in ``course grade``)."""
    params = sorted({n.id for n in ast.walk(ast.parse(f"f({ex.arguments})")) if isinstance(n, ast.Name)} - {"f"})
    message = ("the checker's message, in the result below, names the mistake (the same message as the check in "
               "the chapter).")
    named = named_checks_of(ex, found)
    runs = [(f"test_ex{ex.number}", None)] if not named else [
        (f"test_ex{ex.number}_{k}", ("reached", k)) for k in range(1, len(named) + 1)]
    tests = []
    for (name, run), check in zip(runs, named or [None]):
        what = f"{ex.title}: {message}" if check is None else f"{ex.title}, check {check!r}: {message}"
        tests.append("\n".join([
            '""" # BEGIN TEST CONFIG', f"failure_message: {_yaml(what)}", '""" # END TEST CONFIG',
            f"def {name}({', '.join(params)}):", _fresh_check(ex, found, "    ", run), "", f"{name}({', '.join(params)})"]))
    return tests


def otter_notebook(chapter: Any, name: str, timeout: int = CELL_TIME_LIMIT) -> Any:
    """The chapter in Otter-Grader's v1 notebook format; each cell of a submission runs under ``timeout`` seconds
    (:class:`OtterCellTimeLimit`)."""
    exs = exercises(chapter)
    found = ChapterChecks.of(chapter, exs)
    cells_in = chapter["cells"]
    starts: dict[int, Exercise] = {}
    for ex in exs:  # a question starts at its "### Exercise" text when that comes right before its cells
        first = ex.answer_index if ex.answer_index is not None else ex.solution_index
        starts[first - 1 if first and cells_in[first - 1].get("cell_type") == "markdown" else first] = ex
    skip = {ex.answer_index for ex in exs if ex.answer_index is not None}
    cells = [_raw(_otter_config(name, timeout))]
    stubs = {ex.solution_index: cells_in[ex.answer_index]['source'] for ex in exs if ex.answer_index is not None}
    by_solution = {ex.solution_index: ex for ex in exs}
    by_check = {ex.check_index: ex for ex in exs}
    for i, cell in enumerate(cells_in):
        if i in starts:
            ex = starts[i]
            cells.append(_raw(f"# BEGIN QUESTION\nname: ex{ex.number}\npoints: {_otter_points(ex, found)}"))
        if i in skip:
            continue
        if i in by_solution:
            cells += [_raw("# BEGIN SOLUTION"), _code(_otter_solution(_clean(cell)["source"], stubs.get(i))),
                      _raw("# END SOLUTION")]
        elif i in by_check:
            cells += [_raw("# BEGIN TESTS"), *map(_code, _otter_tests(by_check[i], found)), _raw("# END TESTS"),
                      _raw("# END QUESTION")]
        else:
            cells.append(_clean(cell))
        if is_quiz_cell(cell):  # a question of its own: the hand-in, a test a question
            cid = QUIZ_CALL.search(cell["source"]).group(1)
            cells += [_raw(f"# BEGIN QUESTION\nname: quiz{cid}\npoints: {quiz_points(cid)}"), _hand_in(cell, cid),
                      _raw("# BEGIN TESTS"), *map(_code, otter_quiz_tests(cid)), _raw("# END TESTS"),
                      _raw("# END QUESTION")]
    out = copy.deepcopy(chapter)
    out["cells"] = cells
    # `otter assign` reads the language from the kernelspec, which a notebook made by `jupytext --to notebook` lacks
    out.setdefault("metadata", {}).setdefault("kernelspec", {"name": "python3", "display_name": "Python 3",
                                                             "language": "python"})
    return out


NBGRADER_CONFIG = """\
# nbgrader's settings for this course folder (written by `python -m tfm_lesson.course export`).
import os, shutil, sys  # noqa: E401
c = get_config()  # noqa: F821 (nbgrader defines it)
# nbgrader runs the command `alembic` when it first creates the gradebook: the one installed beside nbgrader, even
# when nbgrader is run as .venv/bin/nbgrader without activating the environment
if shutil.which("alembic") is None:
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
c.CourseDirectory.course_id = "tfm_lesson"
c.CourseDirectory.root = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
# Seconds per cell, kept by nbgrader's own process: it interrupts a cell past the limit and goes on; a cell that
# catches the interrupt is given up 4 s later, its kernel shut down and that submission reported as not graded.
c.Execute.timeout = {timeout}
# A grade cell the student deleted is not put back: its grade waits for the instructor ("needs manual grade", 0
# until then). nbgrader 0.9.6's add_missing_cells = True stops with a KeyError on a submission whose answer cell is
# gone too, and that submission is not graded at all.
c.OverwriteCells.add_missing_cells = False
# What the student version has where a solution was (the locked cell above it shows the names to define).
c.ClearSolutions.code_stub = {{"python": "# Your turn: write the exercise here (the cell above shows its names).\\n"
                                        "raise NotImplementedError()"}}
"""


def export(chapter_path: Path, fmt: str, out: Path, assignment: str | None = None,
           timeout: int = CELL_TIME_LIMIT, force: bool = False) -> Path:
    """Write the chapter as an nbgrader course folder or an Otter-Grader notebook, each cell of a submission limited
    to ``timeout`` seconds when graded; returns the notebook written. Nothing is written over the chapter, nor
    (unless ``force``) over a file of ``out`` that export did not write or that was edited since
    (:mod:`~tfm_lesson.course.export_record`)."""
    import nbformat

    try:
        chapter = nbformat.read(chapter_path, as_version=4)
    except Exception as exc:
        raise CourseError(f"chapter {chapter_path}: cannot read it ({exc})") from None
    name = assignment or Path(chapter_path).stem
    if not name.replace("_", "").replace("-", "").isalnum():
        raise CourseError(f"--assignment {name!r}: use letters, digits, '_' and '-' only")
    if timeout <= 0:
        raise CourseError(f"--timeout must be > 0 seconds, got {timeout}")
    files: dict[Path, str] = {}  # what to write, checked before anything is
    if fmt == "nbgrader":
        target = Path(out) / "source" / name / Path(chapter_path).name
        nb = nbgrader_notebook(chapter)
        files[Path(out) / "nbgrader_config.py"] = NBGRADER_CONFIG.format(timeout=int(timeout))
    elif fmt == "otter":
        target = Path(out) / Path(chapter_path).name
        nb = otter_notebook(chapter, name, timeout)
    else:
        raise CourseError(f"--format must be nbgrader or otter, got {fmt!r}")
    check_targets(Path(chapter_path), Path(out), [target, *files], force)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_notebook(nb, target)
    for path, text in files.items():
        with atomic_open(path, "w") as f:
            f.write(text)
    remember(Path(out), [target, *files])
    print(f"{target}: {len(exercises(chapter))} exercise(s), {sum(e.points for e in exercises(chapter))} points "
          f"({fmt})", flush=True)
    return target
