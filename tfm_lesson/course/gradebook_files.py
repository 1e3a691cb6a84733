"""The files a :class:`~tfm_lesson.course.gradebook.Gradebook` is written to: the course's own table and the CSV files
that Canvas, Gradescope and Moodle import, each a list of rows (:func:`table`, :func:`canvas`, :func:`gradescope`,
:func:`moodle`), every path checked before any file is written (:func:`write_all`).

Scores are numbers with at most two decimals and a point (``6.3``); a student without a submission scores ``0``.

**Canvas** (Grades > Import). The rules are those of Canvas's importer, ``app/models/gradebook_importer.rb`` in
``instructure/canvas-lms``: the header starts ``Student, ID`` and may go on with ``SIS User ID, SIS Login ID``; the last
student column is ``Section``; every later column is an assignment, matched by the ``(id)`` at the end of its title,
else by its title, and an unknown title becomes a new assignment. A row whose first cell reads ``Points Possible``
gives the assignments' points; a student is found by ``ID`` (the Canvas user id), then ``SIS User ID``, then ``SIS
Login ID``, then the name; an empty cell or ``-`` is no score. Columns such as ``Current Score`` or ``Final Score`` are
read-only and ignored, so no total is written. (Ohio State's guide "Import CSV File for Carmen Grades",
teaching.resources.osu.edu, lists the same required columns and warns that an imported score replaces the one in
the gradebook.) From the roster: ``canvas_id`` fills ``ID``, ``sis_user_id`` (else the roster id) ``SIS User ID``,
``sis_login_id`` ``SIS Login ID``.

**Gradescope**. Gradescope's guide "Adding Students and Staff" (guides.gradescope.com/hc/en-us/articles/21926598776333)
defines its roster CSV: a header row, a full name in one column (or first and last names), a unique email for each
member (the key it matches students by), an optional SID and sections, each column mapped to a Gradescope field on
upload. The score columns follow Gradescope's own grade download (Assignments > Download Grades): one column per
assignment named as the assignment, and ``<assignment> - Max Points`` beside it (the layout that tools reading those
downloads, such as gradelib, expect). Gradescope's roster guide documents the identity columns, not an upload of
scores: an instructor should try one student's row first. A student without an email cannot be
matched there, so writing the file stops, naming them.

**Moodle** (Grades > Import > CSV file). Moodle's importer (``grade/import/csv/classes/load_data.php`` in
``moodle/moodle``) maps one column to a user field (id, ID number, email address or username) and each other column
to a grade item (or a new one) in its import form; an empty cell or ``-`` is no grade, and any other value must be a
number or the import stops. The file has ``ID number, Email address, Full name`` and a column per chapter: map
``Email address`` (or ``ID number``, when the roster's ids are Moodle's ID numbers) to the user.
"""
from __future__ import annotations

from pathlib import Path

from .._io import atomic_open, inside_package
from .cells import CourseError
from .gradebook import Gradebook

__all__ = ["table", "canvas", "gradescope", "moodle", "write_all", "number", "CANVAS_STUDENT_COLUMNS",
           "GRADESCOPE_STUDENT_COLUMNS", "MOODLE_STUDENT_COLUMNS"]

CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
GRADESCOPE_STUDENT_COLUMNS = ["Name", "Email", "SID", "Sections"]
MOODLE_STUDENT_COLUMNS = ["ID number", "Email address", "Full name"]


def number(x: float) -> str:
    """``x`` with at most two decimals, no trailing zeros: ``7``, ``6.3``, ``2.67``."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def table(book: Gradebook) -> list[list[str]]:
    """The course's gradebook: one row per student; per chapter its points and late days; the total; notes."""
    head = ["id", "name", "email", "section"]
    for c in book.chapters:
        head += [c.label, f"{c.label} late days"]
    rows = [head + ["total", "possible", "percent", "notes"]]
    for s in book.students:
        row, notes = [s.id, s.name, s.email, s.section], []
        for c in book.chapters:
            cell = book.cells[(s.id, c.label)]
            row += [number(cell.points), str(cell.late_days)]
            notes += [f"{c.label}: {n}" for n in cell.notes]
        total = book.total(s)
        percent = 100 * total / book.possible if book.possible else 0.0
        rows.append(row + [number(total), number(book.possible), number(percent), "; ".join(notes)])
    return rows


def _scores(book: Gradebook, student_id: str) -> list[str]:
    return [number(book.cells[(student_id, c.label)].points) for c in book.chapters]


def canvas(book: Gradebook) -> list[list[str]]:
    """Canvas's gradebook import: the student columns, a ``Points Possible`` row, a column per chapter."""
    labels = [c.label for c in book.chapters]
    blank = [""] * (len(CANVAS_STUDENT_COLUMNS) - 1)
    rows = [CANVAS_STUDENT_COLUMNS + labels, [CANVAS_POINTS_ROW] + blank + [number(c.possible) for c in book.chapters]]
    for s in book.students:
        rows.append([s.name or s.id, s.lms.get("canvas_id", ""), s.lms.get("sis_user_id", s.id),
                     s.lms.get("sis_login_id", ""), s.section] + _scores(book, s.id))
    return rows


def gradescope(book: Gradebook) -> list[list[str]]:
    """Gradescope's columns: name, email, SID, sections; per chapter its score and ``<chapter> - Max Points``."""
    nameless = [s.id for s in book.students if not s.email]
    if nameless:
        raise CourseError(f"--gradescope: Gradescope finds students by email, and the roster has none for "
                          f"{', '.join(nameless)}: add an email column")
    head = list(GRADESCOPE_STUDENT_COLUMNS)
    for c in book.chapters:
        head += [c.label, f"{c.label} - Max Points"]
    rows = [head]
    for s in book.students:
        row = [s.name or s.id, s.email, s.id, s.section]
        for c, score in zip(book.chapters, _scores(book, s.id)):
            row += [score, number(c.possible)]
        rows.append(row)
    return rows


def moodle(book: Gradebook) -> list[list[str]]:
    """Moodle's CSV grade import: ID number, email, full name, a numeric column per chapter."""
    rows = [MOODLE_STUDENT_COLUMNS + [c.label for c in book.chapters]]
    for s in book.students:
        rows.append([s.id, s.email, s.name] + _scores(book, s.id))
    return rows


def _csv_text(rows: list[list[str]]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def write_all(outputs: dict[str, tuple[Path, list[list[str]]]], inputs: list[Path], force: bool = False) -> None:
    """Write every ``flag -> (path, rows)``. Every path is checked before any file is written (not an input, not
    inside the package, not a folder, not named twice, not an existing file unless ``force``); each file is written
    whole to a temporary file beside it and renamed into place, so a failure never leaves half a file."""
    taken = {Path(p).resolve() for p in inputs}
    seen: dict[Path, str] = {}
    for flag, (path, _) in outputs.items():
        where = Path(path).resolve()
        if where in taken:
            raise CourseError(f"{flag} {path} is one of the inputs; the gradebook never writes its inputs")
        if where in seen:
            raise CourseError(f"{flag} and {seen[where]} both name {path}")
        if inside_package(where):
            raise CourseError(f"{flag} {path} is inside the tfm_lesson package: write elsewhere")
        if where.is_dir():
            raise CourseError(f"{flag} {path} is a folder; give a file name")
        if where.exists() and not force:
            raise CourseError(f"{flag} {path} already exists: pass --force to replace it")
        seen[where] = flag
    for path, rows in outputs.values():
        with atomic_open(path, "w") as f:
            f.write(_csv_text(rows))
