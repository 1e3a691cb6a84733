"""A chapter as an assignment of the graders instructors already run: nbgrader and Otter-Grader.

    python -m tfm_lesson.course export notebooks/03_multi_head_attention.ipynb --format nbgrader --out course/
    python -m tfm_lesson.course export notebooks/03_multi_head_attention.ipynb --format otter --out otter/

Both keep the chapter's cells and turn each exercise into the grader's own pieces: the solution becomes the answer
region the tool strips from the student version, and the exercise's checker becomes an autograded test worth the
exercise's **Importance** (1 to 3) in points. The test imports ``tfm_lesson.checks`` afresh (a name rebound in an
answer cell changes nothing) and raises the checker's message, which names the mistake, into the tool's feedback.

* nbgrader: ``COURSE/source/NAME/<chapter>.ipynb`` (``### BEGIN SOLUTION`` / ``### END SOLUTION``, cell metadata
  ``nbgrader`` with ``grade_id``, ``points``, ``solution``, ``locked``; every other cell locked) and a minimal
  ``COURSE/nbgrader_config.py``. Then ``nbgrader generate_assignment NAME``, ``nbgrader autograde NAME``.
* Otter-Grader: ``OUT/<chapter>.ipynb`` in Otter's v1 format (an assignment config cell, ``# BEGIN QUESTION`` with
  its name and points, ``# BEGIN SOLUTION``, ``# BEGIN TESTS`` with exception-based tests carrying a
  ``failure_message``). Then ``otter assign``, and ``otter run`` (no Docker) or ``otter grade`` (Docker).

``--timeout S`` (default 600) is the time a cell of a submission may run when the tool grades it: nbgrader's
``c.Execute.timeout``; for Otter, whose local runner has no limit, the config names :class:`OtterCellTimeLimit`.
"""
from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from typing import Any

from .._io import atomic_open
from .cells import CourseError, write_notebook
from .exercises import Exercise, exercises
from .solution_form import unfold

__all__ = ["OtterCellTimeLimit", "export", "nbgrader_notebook", "otter_notebook"]

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema
CELL_TIME_LIMIT = 600  # seconds per cell, by default, in both tools (a chapter's training cell takes minutes on a CPU)


def _fresh_check(ex: Exercise, indent: str = "") -> str:
    """The lines of a test that imports the checkers afresh and runs the exercise's checker."""
    return "\n".join(indent + line for line in [
        "import sys",
        "for _name in [m for m in list(sys.modules) if m == 'tfm_lesson.checks' or m.startswith('tfm_lesson.checks.')]:",
        "    del sys.modules[_name]  # the checkers as installed, whatever an answer cell rebound",
        "import tfm_lesson.checks",
        f"tfm_lesson.checks.{ex.checker}({ex.arguments})",
    ])


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
            test["source"] = f"# {ex.title}: {ex.points} point(s). The checker's message names the mistake.\n" + \
                _fresh_check(ex)
            cells.append(test)
        else:
            cells.append(_meta(_clean(cell), grade=False, grade_id=f"cell-{i + 1}", locked=True, solution=False))
    out["cells"] = cells
    return out


def _yaml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML string


_ARM = """\
import signal as _tfm_signal


def _tfm_over_time(signum, frame):
    raise TimeoutError("this cell ran past the grader's {seconds} s limit (an endless loop?): it was stopped, and "
                       "grading went on with the next cell")


def _tfm_arm(*_):
    _tfm_signal.signal(_tfm_signal.SIGALRM, _tfm_over_time)
    _tfm_signal.setitimer(_tfm_signal.ITIMER_REAL, {seconds})


def _tfm_disarm(*_):
    _tfm_signal.setitimer(_tfm_signal.ITIMER_REAL, 0)


get_ipython().events.register("pre_run_cell", _tfm_arm)
get_ipython().events.register("post_run_cell", _tfm_disarm)
"""
_DISARM = """\
get_ipython().events.unregister("pre_run_cell", _tfm_arm)
get_ipython().events.unregister("post_run_cell", _tfm_disarm)
_tfm_disarm()
"""


class OtterCellTimeLimit:
    """An Otter-Grader plugin (the exported assignment config names it): every cell of a submission runs under a time
    limit, so an endless loop costs its question and grading goes on. Otter's local runner (``otter run``) has no
    time limit of its own and would wait forever; ``otter grade --timeout`` kills the whole container (every question
    0). Before execution, a first cell arms a SIGALRM timer before each cell (IPython's ``pre_run_cell`` event) and a
    last cell, before Otter's own cell that runs the tests, takes it off. Configured with ``{"seconds": N}``."""

    def __init__(self, submission_path: str, submission_metadata: dict, plugin_config: dict | None):
        self.seconds = int((plugin_config or {}).get("seconds", CELL_TIME_LIMIT))
        if self.seconds <= 0:
            raise ValueError(f"OtterCellTimeLimit: seconds must be > 0, got {self.seconds}")

    def before_execution(self, submission: Any) -> Any:
        if isinstance(submission, str):  # a .py submission runs as one cell: nothing to limit cell by cell
            return submission
        out = copy.deepcopy(submission)
        out["cells"] = [_code(_ARM.format(seconds=self.seconds)), *out["cells"], _code(_DISARM)]
        return out


def otter_notebook(chapter: Any, name: str, timeout: int = CELL_TIME_LIMIT) -> Any:
    """The chapter in Otter-Grader's v1 notebook format; each cell of a submission runs under ``timeout`` seconds
    (:class:`OtterCellTimeLimit`)."""
    exs = exercises(chapter)
    cells_in = chapter["cells"]
    starts: dict[int, Exercise] = {}
    for ex in exs:  # a question starts at its "### Exercise" text when that comes right before its cells
        first = ex.answer_index if ex.answer_index is not None else ex.solution_index
        starts[first - 1 if first and cells_in[first - 1].get("cell_type") == "markdown" else first] = ex
    skip = {ex.answer_index for ex in exs if ex.answer_index is not None}
    config = "\n".join(["# ASSIGNMENT CONFIG", f"name: {_yaml(name)}", "init_cell: true", "check_all_cell: false",
                        "export_cell: false", "run_tests: false", "tests:", "    ok_format: false",
                        "    files: true", "plugins:", f"    - {OtterCellTimeLimit.__module__}.OtterCellTimeLimit:",
                        f"        seconds: {int(timeout)}"])
    cells = [_raw(config)]
    by_solution = {ex.solution_index: ex for ex in exs}
    by_check = {ex.check_index: ex for ex in exs}
    for i, cell in enumerate(cells_in):
        if i in starts:
            ex = starts[i]
            cells.append(_raw(f"# BEGIN QUESTION\nname: ex{ex.number}\npoints: {ex.points}"))
        if i in skip:
            continue
        if i in by_solution:
            solution = f"# BEGIN SOLUTION\n{_clean(cell)['source'].rstrip()}\n# END SOLUTION"
            cells += [_raw("# BEGIN SOLUTION"), _code(solution), _raw("# END SOLUTION")]
        elif i in by_check:
            ex = by_check[i]
            params = sorted({n.id for n in ast.walk(ast.parse(f"f({ex.arguments})")) if isinstance(n, ast.Name)} - {"f"})
            message = (f"{ex.title}: the checker's message above names the mistake (the same message as the "
                       "check in the chapter).")
            test = "\n".join([
                '""" # BEGIN TEST CONFIG', f"failure_message: {_yaml(message)}", '""" # END TEST CONFIG',
                f"def test_ex{ex.number}({', '.join(params)}):", _fresh_check(ex, "    "), "",
                f"test_ex{ex.number}({', '.join(params)})"])
            cells += [_raw("# BEGIN TESTS"), _code(test), _raw("# END TESTS"), _raw("# END QUESTION")]
        else:
            cells.append(_clean(cell))
    out = copy.deepcopy(chapter)
    out["cells"] = cells
    return out


NBGRADER_CONFIG = """\
# nbgrader's settings for this course folder (written by `python -m tfm_lesson.course export`).
c = get_config()  # noqa: F821 (nbgrader defines it)
c.CourseDirectory.course_id = "tfm_lesson"
c.CourseDirectory.root = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
c.Execute.timeout = {timeout}  # seconds per cell; nbgrader interrupts a cell past it and goes on
# A grade cell the student deleted is not put back: its grade waits for the instructor ("needs manual grade", 0
# until then). nbgrader 0.9.6's add_missing_cells = True stops with a KeyError on a submission whose answer cell is
# gone too, and that submission is not graded at all.
c.OverwriteCells.add_missing_cells = False
# What the student version has where a solution was (the locked cell above it shows the names to define).
c.ClearSolutions.code_stub = {{"python": "# Your turn: write the exercise here (the cell above shows its names).\\n"
                                        "raise NotImplementedError()"}}
"""


def export(chapter_path: Path, fmt: str, out: Path, assignment: str | None = None,
           timeout: int = CELL_TIME_LIMIT) -> Path:
    """Write the chapter as an nbgrader course folder or an Otter-Grader notebook, each cell of a submission limited
    to ``timeout`` seconds when graded; returns the notebook written."""
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
    if fmt == "nbgrader":
        target = Path(out) / "source" / name / Path(chapter_path).name
        nb = nbgrader_notebook(chapter)
        target.parent.mkdir(parents=True, exist_ok=True)
        config = Path(out) / "nbgrader_config.py"
        if not config.exists():
            with atomic_open(config, "w") as f:
                f.write(NBGRADER_CONFIG.format(timeout=int(timeout)))
    elif fmt == "otter":
        target = Path(out) / Path(chapter_path).name
        nb = otter_notebook(chapter, name, timeout)
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        raise CourseError(f"--format must be nbgrader or otter, got {fmt!r}")
    write_notebook(nb, target)
    print(f"{target}: {len(exercises(chapter))} exercise(s), {sum(e.points for e in exercises(chapter))} points "
          f"({fmt})", flush=True)
    return target
