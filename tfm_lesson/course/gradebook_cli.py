"""``python -m tfm_lesson.course gradebook``: a class's gradebook from the grades CSVs of ``course grade``.

    python -m tfm_lesson.course gradebook --roster roster.csv \\
        --grades ch03=grades/ch03.csv --grades ch14=grades/ch14.csv \\
        --due ch03=2026-10-05T23:59+02:00 --due ch14=2026-11-02T23:59+01:00 --times times.csv \\
        --late-penalty 10 --free-late-days 3 --overrides overrides.csv \\
        --out gradebook.csv --canvas canvas.csv --gradescope gradescope.csv --moodle moodle.csv

What each file holds: tfm_lesson/course/gradebook.py (inputs, late days, overrides) and gradebook_files.py (the
outputs, and the Canvas, Gradescope and Moodle column rules with their sources). Nothing is overwritten without
--force; a submission that belongs to no student, a student without a submission and an override that fits nothing
are printed as warnings. Exit 0 when written, 2 for a usage error.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cells import CourseError
from .gradebook import LatePolicy, build, parse_when, read_grades, read_overrides, read_roster, read_times
from .gradebook_files import canvas, gradescope, moodle, number, table, write_all


def _labelled(text: str, flag: str, need_label: bool = False) -> tuple[str, str]:
    """``LABEL=VALUE``; without ``=`` (where allowed) the label is the file's name without its suffix."""
    label, sep, value = text.partition("=")
    if not sep:
        if need_label:
            raise CourseError(f"{flag} takes LABEL=VALUE (e.g. ch03=2026-10-05T23:59+02:00), got {text!r}")
        return Path(text).stem, text
    if not label.strip() or not value.strip():
        raise CourseError(f"{flag} takes LABEL=VALUE, got {text!r}")
    return label.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.course gradebook", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--roster", type=Path, required=True, help="CSV: id, name, email, section[, submission, ...]")
    p.add_argument("--grades", action="append", required=True, metavar="LABEL=CSV",
                   help="a chapter's grades CSV from `course grade` (repeat per chapter; the label heads its column)")
    p.add_argument("--out", type=Path, required=True, help="the gradebook CSV: one row per student")
    p.add_argument("--canvas", type=Path, help="also write Canvas's gradebook import CSV")
    p.add_argument("--gradescope", type=Path, help="also write a CSV in Gradescope's columns")
    p.add_argument("--moodle", type=Path, help="also write Moodle's CSV grade import")
    p.add_argument("--due", action="append", default=[], metavar="LABEL=TIME",
                   help="a chapter's due time, ISO 8601 (2026-10-05T23:59+02:00; a date alone: the end of that day)")
    p.add_argument("--times", type=Path, help="CSV: chapter, student or submission, submitted_at")
    p.add_argument("--times-from-files", action="store_true",
                   help="a submission without a time: take its file's modification time")
    p.add_argument("--late-penalty", type=float, default=0.0, metavar="PERCENT",
                   help="percent of a chapter's points off per late day (default 0)")
    p.add_argument("--free-late-days", type=int, default=0, metavar="N",
                   help="late days each student may use without penalty over the term (default 0)")
    p.add_argument("--max-late-days", type=int, metavar="N", help="later than N days scores 0 (default: no limit)")
    p.add_argument("--overrides", type=Path, help="CSV: student, chapter, exercise, points, reason (read only)")
    p.add_argument("--force", action="store_true", help="replace output files that exist")
    return p


def _run(args: argparse.Namespace) -> int:
    policy = LatePolicy(args.late_penalty, args.free_late_days, args.max_late_days)
    grades = [_labelled(g, "--grades") for g in args.grades]
    due = {}
    for label, value in (_labelled(d, "--due", need_label=True) for d in args.due):
        if label in due:
            raise CourseError(f"--due names {label} twice")
        due[label] = parse_when(value, f"--due {label}", end_of_day=True)
    students = read_roster(args.roster)
    chapters = [read_grades(label, Path(path)) for label, path in grades]
    overrides = read_overrides(args.overrides) if args.overrides else []
    times = read_times(args.times) if args.times else {}
    book = build(chapters, students, due, policy, overrides, times, args.times_from_files)
    outputs = {"--out": (args.out, table(book))}
    for flag, write in (("canvas", canvas), ("gradescope", gradescope), ("moodle", moodle)):
        if getattr(args, flag) is not None:
            outputs[f"--{flag}"] = (getattr(args, flag), write(book))
    inputs = [args.roster] + [Path(p) for _, p in grades] + [f for f in (args.overrides, args.times) if f]
    write_all(outputs, inputs, force=args.force)
    for problem in book.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"{len(students)} students, {len(chapters)} chapter(s), {number(book.possible)} points possible; "
          f"{len(book.problems)} warning(s); written: {', '.join(str(p) for p, _ in outputs.values())}")
    return 0


def gradebook_main(argv: list[str]) -> int:
    """``gradebook`` of ``python -m tfm_lesson.course`` (``argv`` after the word ``gradebook``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        return _run(args)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
