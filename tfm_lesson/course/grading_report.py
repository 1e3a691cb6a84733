"""Scores and reports of a graded class: each exercise's result and its points (:class:`Result`), a graded
submission (:class:`Graded`), the CSV with one row per submission and exercise (:func:`write_csv`) and one
Markdown feedback page per submission (:func:`feedback_page`, :func:`write_feedback`); the grade book that keeps the CSV
complete on disk as each submission finishes and tells ``--resume`` what is done (:class:`GradeBook`)."""
from __future__ import annotations

import csv
import io
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._io import atomic_open, cannot_write_in, check_writable_file, inside_package
from .cells import CourseError
from .exercises import Exercise
from .grading_kernel import DROPPED_KEY, MAX_CELL_OUTPUT

CSV_HEADER = ["submission", "exercise", "passed", "points", "max_points", "message"]


def points_text(points: float) -> str:
    """Points as the CSV and the pages write them: ``3``, ``1.5``, ``0.67`` (two decimals at most)."""
    text = f"{points:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


@dataclass
class Result:
    """How one exercise of one submission went: the checker's message when it did not pass; ``credit``, the fraction
    of its points earned by a checker with named checks that passed some of them, and ``checks``, which."""

    exercise: Exercise
    passed: bool = False
    message: str = ""
    credit: float = 0.0
    checks: str = ""

    @property
    def points(self) -> float:
        """The exercise's points times the fraction earned, rounded to two decimals (an int when whole)."""
        got = round(self.exercise.points * (1.0 if self.passed else min(max(self.credit, 0.0), 1.0)), 2)
        return int(got) if got == int(got) else got


@dataclass
class Graded:
    """One submission, graded: a result per exercise, notes on what was ignored, the seconds it took."""

    submission: str
    results: list[Result]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sandboxed: bool = True  # False: graded with --no-sandbox, which every report says


def _rows(g: Graded) -> list[list]:
    return [[g.submission, r.exercise.title, r.passed, r.points, r.exercise.points, r.message] for r in g.results]


def _write_rows(rows: list[list], path: Path) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_HEADER)
    writer.writerows(rows)
    with atomic_open(path, "w") as f:  # a temporary file beside it, flushed to disk, renamed over it
        f.write(buffer.getvalue())


def write_csv(graded: list[Graded], path: Path) -> None:
    """The class's table: ``submission, exercise, passed, points, max_points, message``, written atomically."""
    _write_rows([row for g in graded for row in _rows(g)], path)


def read_grades(path: Path) -> list[list[str]]:
    """The rows of a grades CSV this module wrote; CourseError naming ``--csv`` when it is not one."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            table = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CourseError(f"--csv {path}: cannot read it as a grades table ({exc})") from None
    if not table or table[0] != CSV_HEADER or any(len(row) != len(CSV_HEADER) for row in table[1:]):
        raise CourseError(f"--csv {path} exists and is not a grades table written by `course grade` (its first line "
                          f"is not {','.join(CSV_HEADER)}): name another file; nothing was written")
    return table[1:]


class GradeBook:
    """The class's CSV, kept whole on disk: after each submission it is written again atomically (a temporary file
    in its folder, then a rename), so a crash or Ctrl-C keeps every grade already given. With ``resume``, the rows
    already in the file stay, and :meth:`done` says which submissions they grade."""

    def __init__(self, path: Path, exercises: list[Exercise], order: list[str], resume: bool = False):
        self.path, self.order = path, {name: k for k, name in enumerate(order)}
        self.rows: list[list] = read_grades(path) if resume and path.exists() else []
        titles = {ex.title for ex in exercises}
        self.exercise_titles = {ex.title for ex in exercises if isinstance(ex, Exercise)}  # the quiz line left out
        if any(row[1] not in titles for row in self.rows):
            raise CourseError(f"--resume: the grades in {path} are of other exercises than this chapter's: name "
                              "another --csv, or give the chapter they were graded against")
        self.titles = titles
        self._lock = threading.Lock()

    def done(self, exercise_titles: bool = False) -> set[str]:
        """The submissions that have a row for every exercise (with ``exercise_titles``, the quiz line left out)."""
        wanted = self.exercise_titles if exercise_titles else self.titles
        seen: dict[str, set[str]] = {}
        for row in self.rows:
            seen.setdefault(row[0], set()).add(row[1])
        return {name for name, titles in seen.items() if titles >= wanted}

    def add_rows(self, g: Graded) -> None:
        """Add the rows of ``g`` its submission does not have yet, keeping the others, and write the table again."""
        with self._lock:
            have = {row[1] for row in self.rows if row[0] == g.submission}
            self.rows += [row for row in _rows(g) if row[1] not in have]
            self.rows.sort(key=lambda row: self.order.get(row[0], -1))
            self.write()

    def add(self, g: Graded) -> None:
        """Add one graded submission (replacing any row of it) and write the whole table again."""
        with self._lock:
            self.rows = [row for row in self.rows if row[0] != g.submission] + _rows(g)
            self.rows.sort(key=lambda row: self.order.get(row[0], -1))  # earlier grades first, then the class's order
            self.write()

    def write(self) -> None:
        _write_rows(self.rows, self.path)


_MARKDOWN = re.compile(r"([\\`*_\[\]<>!|~&])")  # what can start emphasis, code, a link, HTML or an entity


def _plain(text: str) -> str:
    """``text`` as literal Markdown on one line: no control character, no line break, every mark escaped."""
    return _MARKDOWN.sub(r"\\\1", "".join(ch if ch.isprintable() else " " for ch in text))


def _fenced(text: str) -> list[str]:
    """``text`` in a code block whose fence is longer than any run of backticks in it, so nothing in it can close
    the block; control characters other than tab and line breaks are shown as ``?``."""
    text = "".join(ch if ch.isprintable() or ch in "\t\n" else "?" for ch in text.replace("\r\n", "\n"))
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return [fence + "text", text, fence]


def _code(text: str) -> str:
    """``text`` as inline code that nothing in it can end (the learner's first line of a cell, in a note)."""
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    ticks = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{ticks} {text} {ticks}"


def feedback_page(g: Graded, chapter_name: str) -> str:
    """One student's page, Markdown: the score, each exercise with the checker's message, what was ignored. What
    the submission or its code wrote (the file's name, messages, notes) is escaped or fenced: it cannot close a code
    block, start a heading or write a score line of its own."""
    total = points_text(sum(r.points for r in g.results))
    top = sum(r.exercise.points for r in g.results)
    lines = [f"# {chapter_name}: {_plain(Path(g.submission).name)}", "", f"**Score: {total} / {top}**", ""]
    if not g.sandboxed:
        lines += ["Graded without a sandbox (`--no-sandbox`): the code ran with the grader's own rights.", ""]
    for r in g.results:
        mark = "passed" if r.passed else "partly passed" if r.points else "not passed"
        lines += [f"## {r.exercise.title}: {points_text(r.points)} / {r.exercise.points} ({mark})", ""]
        if r.message:
            lines += [*_fenced(r.message), ""]
    if g.notes:
        lines += ["## Not graded", "", "Only the exercise cells are graded; these differences from the chapter "
                  "were ignored:", ""] + [f"- {_code(n)}" for n in g.notes] + [""]
    return "\n".join(lines)


def page_names(submissions: list[str]) -> dict[str, str]:
    """Each submission's feedback page, named after its path (never two with one name; the same names on every run
    over the same class, so that ``--resume`` writes the pages it did not write before)."""
    taken: set[str] = set()
    names = {}
    for submission in submissions:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(submission).with_suffix("").as_posix().strip("./"))[-120:]
        name, k = stem + ".md", 1
        while name in taken:
            k += 1
            name = f"{stem}-{k}.md"
        taken.add(name)
        names[submission] = name
    return names


def write_page(g: Graded, folder: Path, name: str, chapter_name: str) -> None:
    """``g``'s feedback page as ``folder/name``, written atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_open(folder / name, "w") as f:
        f.write(feedback_page(g, chapter_name))


def write_feedback(graded: list[Graded], folder: Path, chapter_name: str) -> None:
    """One page per submission in ``folder``, named after the submission's path (never two with one name)."""
    names = page_names([g.submission for g in graded])
    for g in graded:
        write_page(g, folder, names[g.submission], chapter_name)


# where the reports go: checked before anything runs --------------------------------------------------------------
def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _input_named(path: Path, chapter: Path, submissions: list[Path]) -> str | None:
    if _same(path, chapter):
        return "the chapter itself"
    hit = next((s for s in submissions if _same(path, s)), None)
    return f"a submission ({hit})" if hit is not None else None


def _check_csv(path: Path, chapter: Path, submissions: list[Path], resume: bool) -> None:
    what = _input_named(path, chapter, submissions)
    if what:
        raise CourseError(f"--csv {path} is {what}: the grades would overwrite it; name another file (e.g. grades.csv)")
    if path.is_dir():
        raise CourseError(f"--csv {path} is a folder; give a file name (e.g. {path / 'grades.csv'})")
    if path.exists():
        read_grades(path)  # refuses a file that is not a grades table: nothing of anyone's is written over
        if not os.access(path, os.W_OK):
            raise CourseError(f"--csv {path} is read-only: make it writable or name another file")
        if not resume:
            raise CourseError(f"--csv {path} already holds grades: pass --resume to grade only the submissions not "
                              "in it, or name another file (remove it to grade the whole class again)")
    try:
        check_writable_file(path, overwrite=True)
    except ValueError as exc:
        raise CourseError(f"--csv {exc}") from None


def _check_feedback(folder: Path, csv_path: Path, chapter: Path, submissions: list[Path]) -> None:
    what = _input_named(folder, chapter, submissions)
    if what:
        raise CourseError(f"--feedback {folder} is {what}, not a folder: give a folder for the pages (e.g. feedback/)")
    if _same(folder, csv_path):
        raise CourseError(f"--feedback {folder} is the --csv file too: give a folder for the pages (e.g. feedback/)")
    if folder.exists() and not folder.is_dir():
        raise CourseError(f"--feedback {folder} is a file; give a folder for the pages (e.g. feedback/)")
    if inside_package(folder):
        raise CourseError(f"--feedback {folder} is inside the tfm_lesson package, whose files are shipped: write "
                          "elsewhere")
    why = cannot_write_in(folder)
    if why:
        raise CourseError(f"--feedback {folder}: cannot write there ({why})")


def check_outputs(csv_path: Path, feedback: Path | None, chapter: Path, submissions: list[Path],
                  resume: bool = False) -> None:
    """Refuse, before anything runs, an output that would overwrite the chapter, a submission or a file that is not
    a grades table (an existing grades table only with ``resume``), a folder where a file goes or a file where a
    folder goes, or a place that cannot be written: CourseError naming the flag (``--csv``, ``--feedback``)."""
    _check_csv(csv_path, chapter, submissions, resume)
    if feedback is not None:
        _check_feedback(feedback, csv_path, chapter, submissions)


def dropped_note(kind: str, exercise: Exercise | None, cell: Any) -> str | None:
    """The feedback's note on a cell whose output was over the grader's limit (dropped; the score does not care)."""
    dropped = cell.get("metadata", {}).get(DROPPED_KEY)
    if not dropped or exercise is None or kind == "reference":
        return None
    what = "your exercise cell" if kind == "answer" else "your code, while its check ran,"
    return (f"{exercise.title}: {what} printed {dropped / 2**20:.1f} MB past the {MAX_CELL_OUTPUT // 2**20} MB "
            "of output the grader keeps of a cell; that part was dropped (its end kept), and the score does not "
            "depend on it")
