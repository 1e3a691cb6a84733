"""Reading a gradebook's inputs: the roster, the grades CSVs of ``course grade``, the times and the overrides
(their columns: :mod:`tfm_lesson.course.gradebook`), and which student a submission file belongs to."""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath

from .cells import CourseError

__all__ = ["Student", "Chapter", "Override", "read_roster", "read_grades", "read_times", "read_overrides",
           "parse_when", "owners", "shared_folders"]

GRADES_COLUMNS = ("submission", "exercise", "points", "max_points")


# reading the instructor's files -------------------------------------------------------------------------------------
def _read_table(path: Path, what: str, required: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of a CSV file as dicts keyed by lower-case column names; an error naming a missing column."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CourseError(f"{what} {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    missing = [c for c in required if c not in header]
    if missing:
        has = ", ".join(header) or "no header"
        raise CourseError(f"{what} {path}: no column {', '.join(missing)} (it has: {has}); "
                          f"expected {', '.join(required)}")
    rows = []
    for line, values in enumerate(reader, start=2):
        if any(v.strip() for v in values):
            row = {h: (values[i].strip() if i < len(values) else "") for i, h in enumerate(header)}
            row["_where"] = f"{path}, line {line}"
            rows.append(row)
    return rows


def _number(text: str, where: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise CourseError(f"{where}: {column} must be a number, got {text!r}")
    return value


def parse_when(text: str, where: str, end_of_day: bool = False) -> datetime:
    """An ISO 8601 time (``2026-10-05T23:59+02:00``; ``Z`` is UTC), aware; local time when it has no offset."""
    value = text.strip()
    try:
        when = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except ValueError:
        raise CourseError(f"{where}: {text!r} is not a time (ISO 8601, e.g. 2026-10-05T23:59+02:00)") from None
    if end_of_day and re.fullmatch(r"\d{4}-\d\d-\d\d", value):
        when += timedelta(days=1, microseconds=-1)
    return when if when.tzinfo else when.astimezone()


@dataclass
class Student:
    """One line of the roster."""

    id: str
    name: str = ""
    email: str = ""
    section: str = ""
    names: tuple[str, ...] = ()  # how the student's submission files are named (case-folded)
    lms: dict[str, str] = field(default_factory=dict)  # canvas_id, sis_user_id, sis_login_id


def read_roster(path: Path) -> list[Student]:
    """The roster's students, in its order; duplicate or empty ids are an error."""
    students, seen = [], set()
    for row in _read_table(path, "roster", ("id",)):
        sid = row["id"]
        if not sid or sid in seen:
            raise CourseError(f"{row['_where']}: {'empty' if not sid else 'duplicate'} id {sid!r} (each student once)")
        seen.add(sid)
        own = [n.strip().casefold() for n in row.get("submission", "").split(";") if n.strip()]
        students.append(Student(sid, row.get("name", ""), row.get("email", ""), row.get("section", ""),
                                tuple(own or [sid.casefold()]),
                                {k: row[k] for k in ("canvas_id", "sis_user_id", "sis_login_id") if row.get(k)}))
    if not students:
        raise CourseError(f"roster {path}: no students")
    return students


@dataclass
class Chapter:
    """One chapter's grades CSV: its exercises and maximum points, and each submission's points."""

    label: str
    source: Path
    exercises: dict[str, float] = field(default_factory=dict)  # title -> max points, in the CSV's order
    points: dict[str, dict[str, float]] = field(default_factory=dict)  # submission -> title -> points
    times: dict[str, datetime] = field(default_factory=dict)  # submission -> its submitted_at column

    @property
    def possible(self) -> float:
        return sum(self.exercises.values())


def read_grades(label: str, path: Path) -> Chapter:
    """A grades CSV written by ``course grade``."""
    chapter = Chapter(label, Path(path))
    for row in _read_table(path, "grades", GRADES_COLUMNS):
        where, title, sub = row["_where"], row["exercise"], row["submission"]
        if not title or not sub:
            raise CourseError(f"{where}: empty submission or exercise")
        top = _number(row["max_points"], where, "max_points")
        got = _number(row["points"], where, "points")
        if chapter.exercises.setdefault(title, top) != top:
            raise CourseError(f"{where}: {title!r} is worth {top:g} here and {chapter.exercises[title]:g} above")
        if not 0 <= got <= top:
            raise CourseError(f"{where}: points {got:g} outside 0..{top:g}")
        chapter.points.setdefault(sub, {})[title] = got
        if row.get("submitted_at"):
            chapter.times[sub] = parse_when(row["submitted_at"], where)
    if not chapter.exercises:
        raise CourseError(f"grades {path}: no rows")
    return chapter


def read_times(path: Path) -> dict[tuple[str, str], datetime]:
    """``(chapter, "student:" + id or "submission:" + name) -> time`` from a times CSV."""
    times = {}
    for row in _read_table(path, "times", ("chapter", "submitted_at")):
        who = ("student:" + row["student"]) if row.get("student") else ("submission:" + row.get("submission", ""))
        if who.endswith(":"):
            raise CourseError(f"{row['_where']}: give a student (roster id) or a submission")
        if (row["chapter"], who) in times:
            raise CourseError(f"{row['_where']}: a second time for {who.partition(':')[2]} in {row['chapter']}")
        times[(row["chapter"], who)] = parse_when(row["submitted_at"], row["_where"])
    return times


@dataclass
class Override:
    """The instructor's word on one exercise (or, with ``exercise`` None, on the chapter) of one student."""

    student: str
    chapter: str
    exercise: str | None
    points: float
    reason: str
    where: str


def read_overrides(path: Path) -> list[Override]:
    """The overrides file; a row without a reason, or a second row for the same exercise, is an error."""
    found: dict[tuple, Override] = {}
    for row in _read_table(path, "overrides", ("student", "chapter", "exercise", "points", "reason")):
        where = row["_where"]
        if not (row["student"] and row["chapter"] and row["reason"]):
            raise CourseError(f"{where}: student, chapter and reason are required (say why the score changes)")
        exercise = None if row["exercise"] in ("", "*") else row["exercise"]
        o = Override(row["student"], row["chapter"], exercise, _number(row["points"], where, "points"),
                     row["reason"], where)
        key = (o.student, o.chapter, (exercise or "*").casefold())
        if key in found:
            raise CourseError(f"{where}: a second override of the same score (first at {found[key].where})")
        found[key] = o
    return list(found.values())


# matching files to students -----------------------------------------------------------------------------------------
def _posix(submission: str) -> PurePosixPath:
    return PurePosixPath(submission.replace("\\", "/"))


def shared_folders(submissions: list[str]) -> int:
    """How many leading folders all of a chapter's submissions share (``/home/me/subs/``): no student's name is
    looked for there. When every file lies in the same folder, that folder itself is kept (it may be a student's);
    with one submission, all are kept."""
    parents = [_posix(s).parent.parts for s in submissions]
    if len(parents) < 2:
        return 0
    n = 0
    while all(len(p) > n and p[n] == parents[0][n] for p in parents):
        n += 1
    return n - 1 if n and all(len(p) == n for p in parents) else n


def owners(submission: str, students: list[Student], skip: int = 0) -> list[Student]:
    """The students a submission's path names (see the module's docstring), its first ``skip`` folders left out."""
    path = _posix(submission)
    stem = path.name[: -len(".ipynb")] if path.name.endswith(".ipynb") else path.name
    folders = {p.casefold() for p in path.parent.parts[skip:] if p not in (".", "..", "/")}
    stem = stem.casefold()
    return [s for s in students
            if any(n == stem or n in folders or (stem.startswith(n) and stem[len(n):][:1] in ("_", "-", "."))
                   for n in s.names)]
