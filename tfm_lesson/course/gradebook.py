"""A class's gradebook over the term: the grades CSVs that ``course grade`` writes (one per chapter), a roster, due
dates and late days, and the instructor's overrides, folded into one score per student and chapter (:func:`build`).

Inputs (CSV files with a header row; UTF-8, a spreadsheet's byte-order mark is fine; column names in any case):

* **grades**: ``submission, exercise, passed, points, max_points, message``, as ``course grade --csv`` writes them;
  an optional ``submitted_at`` column gives each submission's time. One file per chapter, named on the command line
  ``LABEL=FILE`` (the label heads the chapter's column in every output).
* **roster**: ``id`` (required, unique), ``name``, ``email``, ``section``, ``submission`` (how that student's files
  are named, several separated by ``;``; default: the id), and for Canvas ``canvas_id``, ``sis_user_id``,
  ``sis_login_id``. A submission belongs to a student when its file name (without ``.ipynb``) or one of its folders
  (below those every submission of the chapter shares) equals one of the student's names, or the file name starts
  with it followed by ``_``, ``-`` or ``.`` (``alice_03_attention.ipynb``, ``alice/03_attention.ipynb``).
* **times** (optional): ``chapter, submitted_at`` and either ``student`` (a roster id) or ``submission`` (as in the
  grades CSV). A submission's time is taken from this file, else from the grades CSV's ``submitted_at`` column,
  else (``--times-from-files``) from the modification time of the submission file the grades CSV names.
* **overrides** (optional, the instructor's, never written by the tool): ``student`` (a roster id), ``chapter``,
  ``exercise``, ``points``, ``reason``. ``exercise`` is the exercise's title as in the grades CSV or its
  ``Exercise N`` part, and the points replace what the grader gave it; an empty exercise (or ``*``) sets the
  chapter's final score, which no late day changes. Overrides live beside the grades, so a regrade (a new grades
  CSV) keeps them.

Late days: a submission after its chapter's due date is late by the started days since (1 minute late = 1 day).
The policy: ``free_days`` per student for the whole term, spent in the order of the due dates; each other late day
costs ``penalty_percent`` of the chapter's points; later than ``max_days`` scores 0. Times without a UTC offset are
read in this machine's time zone; a due date without a time means the end of that day.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .cells import CourseError
from .gradebook_read import (Chapter, Override, Student, owners, parse_when, read_grades, read_overrides,
                             read_roster, read_times, shared_folders)

__all__ = ["LatePolicy", "Cell", "Gradebook", "build", "Student", "Chapter", "Override", "read_roster",
           "read_grades", "read_times", "read_overrides", "parse_when"]

DAY = 86400.0  # seconds


@dataclass(frozen=True)
class LatePolicy:
    """``penalty_percent`` of a chapter's points off per late day past the ``free_days`` of the term; later than
    ``max_days`` (None: no limit) scores 0."""

    penalty_percent: float = 0.0
    free_days: int = 0
    max_days: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.penalty_percent <= 100:
            raise CourseError(f"--late-penalty must be a percentage from 0 to 100, got {self.penalty_percent:g}")
        if self.free_days < 0 or (self.max_days is not None and self.max_days < 0):
            raise CourseError("--free-late-days and --max-late-days must be >= 0")


@dataclass
class Cell:
    """One student's score in one chapter, and how it came about."""

    possible: float
    exercises: dict[str, float]  # title -> points after the overrides of exercises
    submission: str | None = None  # the submission counted (None: none)
    late_days: int = 0
    free_days: int = 0  # late days paid from the term's free ones
    deduction: float = 0.0
    final: float | None = None  # the instructor's score for the whole chapter
    notes: list[str] = field(default_factory=list)

    @property
    def points(self) -> float:
        if self.final is not None:
            return self.final
        return max(0.0, sum(self.exercises.values()) - self.deduction)


@dataclass
class Gradebook:
    """The class: a :class:`Cell` per (student id, chapter label), and what did not fit (``problems``)."""

    chapters: list[Chapter]
    students: list[Student]
    cells: dict[tuple[str, str], Cell]
    problems: list[str] = field(default_factory=list)

    @property
    def possible(self) -> float:
        return sum(c.possible for c in self.chapters)

    def total(self, student: Student) -> float:
        return sum(self.cells[(student.id, c.label)].points for c in self.chapters)


def _counted(chapter: Chapter, students: list[Student], problems: list[str]) -> dict[str, str]:
    """Student id -> the submission counted for ``chapter``; files of nobody, or of two students, are reported."""
    mine: dict[str, list[str]] = {}
    skip = shared_folders(list(chapter.points))
    for sub in chapter.points:
        found = owners(sub, students, skip)
        if len(found) == 1:
            mine.setdefault(found[0].id, []).append(sub)
        elif not found:
            problems.append(f"{chapter.label}: {sub} belongs to no student of the roster: not counted")
        else:
            problems.append(f"{chapter.label}: {sub} matches {', '.join(s.id for s in found)}: not counted (give the "
                            "roster a submission column)")
    counted = {}
    for sid, subs in mine.items():
        counted[sid] = max(subs, key=lambda s: sum(chapter.points[s].values()))
        if len(subs) > 1:
            problems.append(f"{chapter.label}: {len(subs)} submissions from {sid} ({', '.join(subs)}): the one with "
                            f"the most points counts, {counted[sid]}")
    missing = [s.id for s in students if s.id not in counted]
    if missing:
        problems.append(f"{chapter.label}: no submission from {', '.join(missing)} (scored 0)")
    return counted


def _exercise(chapter: Chapter, name: str) -> str | None:
    """The exercise an override names: its full title, or the ``Exercise N`` before the colon."""
    want = " ".join(name.split()).casefold()
    for title in chapter.exercises:
        if want in (" ".join(title.split()).casefold(), " ".join(title.split(":")[0].split()).casefold()):
            return title
    return None


def _apply_overrides(book: Gradebook, overrides: list[Override]) -> None:
    chapters = {c.label: c for c in book.chapters}
    ids = {s.id for s in book.students}
    done: dict[tuple[str, str, str | None], str] = {}
    for o in overrides:
        chapter = chapters.get(o.chapter)
        if o.student not in ids or chapter is None:
            whom = f"student {o.student}, not in the roster" if o.student not in ids else \
                f"chapter {o.chapter}, not in this gradebook (--grades: {', '.join(chapters)})"
            book.problems.append(f"{o.where}: the override is for {whom}: not applied")
            continue
        cell = book.cells[(o.student, o.chapter)]
        title = None if o.exercise is None else _exercise(chapter, o.exercise)
        if o.exercise is not None and title is None:
            book.problems.append(f"{o.where}: {o.chapter} has no exercise {o.exercise!r} (it has: "
                                 f"{'; '.join(chapter.exercises)}): not applied")
            continue
        if (o.student, o.chapter, title) in done:
            raise CourseError(f"{o.where}: a second override of the same score (first at "
                              f"{done[(o.student, o.chapter, title)]})")
        done[(o.student, o.chapter, title)] = o.where
        top = chapter.possible if title is None else chapter.exercises[title]
        if not 0 <= o.points <= top:
            raise CourseError(f"{o.where}: points {o.points:g} outside 0..{top:g} ({title or o.chapter})")
        if title is None:
            cell.final = o.points
        else:
            cell.exercises[title] = o.points
        cell.notes.append(f"{title or 'chapter'} set to {_fmt(o.points)} by the instructor ({o.reason})")


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _time_of(chapter: Chapter, submission: str, sid: str, times: dict, from_files: bool) -> datetime | None:
    """When ``submission`` was handed in: the times file, the grades CSV's column, or the file's modification time."""
    for key in ("student:" + sid, "submission:" + submission):
        if (chapter.label, key) in times:
            return times[(chapter.label, key)]
    if submission in chapter.times:
        return chapter.times[submission]
    if from_files:
        for base in (Path.cwd(), chapter.source.parent):
            path = base / submission
            if path.is_file():
                return datetime.fromtimestamp(path.stat().st_mtime).astimezone()
    return None


def _apply_lateness(book: Gradebook, due: dict[str, datetime], policy: LatePolicy, times: dict,
                    from_files: bool) -> None:
    """Late days, free days spent in the order of the due dates, and the deduction of each late chapter."""
    chapters = {c.label: c for c in book.chapters}
    order = sorted(due, key=lambda label: due[label])
    unknown: dict[str, list[str]] = {}
    for student in book.students:
        bank = policy.free_days
        for label in order:
            cell = book.cells[(student.id, label)]
            if cell.submission is None or cell.final is not None:  # nothing handed in, or the instructor's score
                continue
            when = _time_of(chapters[label], cell.submission, student.id, times, from_files)
            if when is None:
                unknown.setdefault(label, []).append(cell.submission)
                continue
            late = math.ceil((when - due[label]).total_seconds() / DAY) if when > due[label] else 0
            if not late:
                continue
            cell.late_days, earned = late, sum(cell.exercises.values())
            if policy.max_days is not None and late > policy.max_days:
                cell.deduction = earned
                cell.notes.append(f"{late} days late, more than the {policy.max_days} allowed: 0")
                continue
            cell.free_days = min(bank, late)
            bank -= cell.free_days
            cell.deduction = min(earned, cell.possible * policy.penalty_percent / 100 * (late - cell.free_days))
            cell.notes.append(f"{late} day{'s' * (late > 1)} late ({cell.free_days} free), -{_fmt(cell.deduction)}")
    for label, subs in unknown.items():
        book.problems.append(f"{label}: no submission time for {', '.join(subs)}: counted on time (give --times, a "
                             "submitted_at column or --times-from-files)")


def build(chapters: list[Chapter], students: list[Student], due: dict[str, datetime] | None = None,
          policy: LatePolicy = LatePolicy(), overrides: list[Override] = (), times: dict | None = None,
          times_from_files: bool = False) -> Gradebook:
    """The gradebook of ``students`` over ``chapters`` (see the module's docstring for the rules)."""
    labels = [c.label for c in chapters]
    if not chapters or len(set(labels)) != len(labels):
        raise CourseError(f"give each chapter's grades once, each with its own label (got: {', '.join(labels)})")
    due = dict(due or {})
    for label in due:
        if label not in labels:
            raise CourseError(f"--due names {label!r}, which no --grades names ({', '.join(labels)})")
    book = Gradebook(list(chapters), list(students), {})
    for chapter in chapters:
        counted = _counted(chapter, students, book.problems)
        for s in students:
            sub = counted.get(s.id)
            got = dict(chapter.points[sub]) if sub else {}
            book.cells[(s.id, chapter.label)] = Cell(chapter.possible, {t: got.get(t, 0.0) for t in chapter.exercises},
                                                     sub, notes=[] if sub else ["no submission"])
    _apply_overrides(book, list(overrides))
    _apply_lateness(book, due, policy, times or {}, times_from_files)
    return book
