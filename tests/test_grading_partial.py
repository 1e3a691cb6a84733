"""Partial credit in the reports (no kernel runs here): the points of an exercise whose checker passed some of its
named checks, in the CSV, the feedback page, and the gradebook and LMS files read from such a CSV."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from conftest import call_main
from tfm_lesson.course import main
from tfm_lesson.course.exercises import Exercise
from tfm_lesson.course.grading_report import Graded, Result, feedback_page, write_csv


def _ex(number: int, points: int) -> Exercise:
    return Exercise(number, f"Exercise {number}: x{number}", points, None, 2 * number, 2 * number + 1,
                    f"check_x{number}", f"x{number}")


def _graded() -> Graded:
    return Graded("subs/bob.ipynb", [
        Result(_ex(1, 3), False, "2 of 3 checks passed: shape, values; failed: masked positions — it differs",
               credit=0.75, checks="2 of 3 checks passed: shape, values; failed: masked positions"),
        Result(_ex(2, 2), True, ""),
        Result(_ex(3, 3), False, "1 of 3 checks passed", credit=1 / 3),
        Result(_ex(4, 1), False, "not written", credit=0.0),
    ])


def test_points_are_the_exercises_points_times_the_credit_rounded():
    assert [r.points for r in _graded().results] == [2.25, 2, 1, 0]
    assert Result(_ex(1, 2), False, "", credit=2 / 3).points == 1.33
    assert Result(_ex(1, 2), False, "", credit=7.0).points == 2  # never more than the exercise's points


def test_the_csv_and_the_page_carry_fractional_points(tmp_path):
    write_csv([_graded()], tmp_path / "grades.csv")
    rows = list(csv.reader(io.StringIO((tmp_path / "grades.csv").read_text())))
    assert [(r[2], r[3], r[4]) for r in rows[1:]] == [("False", "2.25", "3"), ("True", "2", "2"),
                                                      ("False", "1", "3"), ("False", "0", "1")]
    page = feedback_page(_graded(), "03_multi_head_attention")
    assert "**Score: 5.25 / 9**" in page
    assert "## Exercise 1: x1: 2.25 / 3 (partly passed)" in page and "## Exercise 4: x4: 0 / 1 (not passed)" in page
    assert "2 of 3 checks passed: shape, values; failed: masked positions — it differs" in page


def _write(path: Path, rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def test_the_gradebook_and_the_lms_files_take_fractional_points(tmp_path, capsys):
    write_csv([_graded()], tmp_path / "ch03.csv")
    roster = _write(tmp_path / "roster.csv", [["id", "name", "email", "section", "sis_user_id"],
                                              ["bob", "Bob Chen", "bob@uni.example", "A", "1002"]])
    out = tmp_path / "gradebook.csv"
    code, _, err = call_main(main, ["gradebook", "--roster", str(roster), "--grades", f"ch03={tmp_path / 'ch03.csv'}",
                                    "--out", str(out), "--canvas", str(tmp_path / "canvas.csv"), "--gradescope",
                                    str(tmp_path / "gs.csv"), "--moodle", str(tmp_path / "moodle.csv")], capsys)
    assert code == 0, err
    book = list(csv.DictReader(io.StringIO(out.read_text())))
    assert book[0]["ch03"] == "5.25" and book[0]["total"] == "5.25"
    canvas = list(csv.reader(io.StringIO((tmp_path / "canvas.csv").read_text())))
    assert canvas[-1][-1] == "5.25"
    gradescope = list(csv.DictReader(io.StringIO((tmp_path / "gs.csv").read_text())))
    assert gradescope[0]["ch03"] == "5.25" and gradescope[0]["ch03 - Max Points"] == "9"
    moodle = list(csv.reader(io.StringIO((tmp_path / "moodle.csv").read_text())))
    assert moodle[-1][-1] == "5.25"
