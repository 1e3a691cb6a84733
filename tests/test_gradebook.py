"""The gradebook (`python -m tfm_lesson.course gradebook`): a class of four over two chapters, from grades CSVs in the
columns `course grade` writes (written here, the grader is not run), with late days, overrides that survive a
regrade, and the Canvas, Gradescope and Moodle files checked against the columns each importer documents."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from conftest import call_main
from tfm_lesson.course import main
from tfm_lesson.course.gradebook_files import (CANVAS_STUDENT_COLUMNS, GRADESCOPE_STUDENT_COLUMNS,
                                               MOODLE_STUDENT_COLUMNS)

CH03 = {"Exercise 1: split the heads": 2, "Exercise 2: merge the heads": 3}  # 5 points
CH14 = {"Exercise 1: merge a pair": 3, "Exercise 2: next-token probabilities": 1}  # 4 points


def _write(path: Path, rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def _grades(path: Path, exercises: dict[str, int], scores: dict[str, list[int]]) -> Path:
    """A grades CSV as `course grade --csv` writes it: one row per submission and exercise."""
    rows = [["submission", "exercise", "passed", "points", "max_points", "message"]]
    for sub, points in scores.items():
        for (title, top), got in zip(exercises.items(), points):
            rows.append([sub, title, got == top, got, top, "" if got == top else "the checker's message"])
    return _write(path, rows)


def _read(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def _by_id(path: Path) -> dict[str, dict[str, str]]:
    rows = _read(path)
    return {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}


@pytest.fixture
def term(tmp_path):
    """Alice, Bob, Carol and Dan; chapter 03 handed in as files named by id, chapter 14 in nbgrader's folders (one
    named with a prefix); Dan hands in nothing, and a file of someone not on the roster turns up."""
    roster = _write(tmp_path / "roster.csv", [
        ["id", "name", "email", "section", "sis_user_id"],
        ["alice", "Alice Martin", "alice@uni.example", "A", "1001"],
        ["bob", "Bob Chen", "bob@uni.example", "A", "1002"],
        ["carol", "Carol Diaz", "carol@uni.example", "B", "1003"],
        ["dan", "Dan Okafor", "dan@uni.example", "B", "1004"]])
    g03 = _grades(tmp_path / "ch03.csv", CH03, {"subs03/alice.ipynb": [2, 3], "subs03/bob.ipynb": [2, 0],
                                               "subs03/carol.ipynb": [0, 3], "subs03/eve.ipynb": [2, 3]})
    g14 = _grades(tmp_path / "ch14.csv", CH14, {"submitted/alice/ch14/14_language_model.ipynb": [3, 1],
                                               "subs14/bob_14_language_model.ipynb": [3, 0],
                                               "submitted/carol/ch14/14_language_model.ipynb": [0, 1]})
    return tmp_path, roster, g03, g14


def _gradebook(capsys, tmp, roster, g03, g14, *flags) -> tuple[int, str, str]:
    argv = ["gradebook", "--roster", str(roster), "--grades", f"ch03={g03}", "--grades", f"ch14={g14}",
            "--out", str(tmp / "gradebook.csv"), *flags]
    return call_main(main, argv, capsys)


def test_a_class_over_two_chapters(term, capsys):
    tmp, roster, g03, g14 = term
    code, out, err = _gradebook(capsys, tmp, roster, g03, g14)
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    assert list(book) == ["alice", "bob", "carol", "dan"]  # the roster's order, one row per student
    assert [(r["ch03"], r["ch14"], r["total"]) for r in book.values()] == [
        ("5", "4", "9"), ("2", "3", "5"), ("3", "1", "4"), ("0", "0", "0")]
    assert {r["possible"] for r in book.values()} == {"9"} and book["bob"]["percent"] == "55.56"
    assert "ch03: no submission" in book["dan"]["notes"] and "ch14: no submission" in book["dan"]["notes"]
    # reported, not dropped silently: the stranger's file and the student without submissions
    assert "subs03/eve.ipynb belongs to no student of the roster" in err
    assert "ch03: no submission from dan" in err and "ch14: no submission from dan" in err
    assert "4 students, 2 chapter(s), 9 points possible" in out


def test_late_days_free_days_and_the_limit(term, capsys):
    tmp, roster, g03, g14 = term
    times = _write(tmp / "times.csv", [
        ["chapter", "student", "submitted_at"],
        ["ch03", "alice", "2026-10-05T22:59:00Z"],  # exactly on time (23:59+01:00 is 22:59 UTC)
        ["ch14", "alice", "2026-11-04T10:00:00+00:00"],  # 1 day 10 h late: 2 days
        ["ch03", "bob", "2026-10-06T00:00:00+01:00"],  # one minute late: 1 day
        ["ch14", "bob", "2026-11-03T09:00:00+00:00"],  # 9 h late: 1 day
        ["ch03", "carol", "2026-10-09T12:00:00Z"],  # more than 3 days: scores 0
    ])
    # --grades in the other order: free days are still spent in the order of the due dates (ch03 first)
    code, _, err = call_main(main, [
        "gradebook", "--roster", str(roster), "--grades", f"ch14={g14}", "--grades", f"ch03={g03}",
        "--due", "ch03=2026-10-05T23:59+01:00", "--due", "ch14=2026-11-02T23:59+00:00", "--times", str(times),
        "--late-penalty", "10", "--free-late-days", "1", "--max-late-days", "3",
        "--out", str(tmp / "gradebook.csv")], capsys)
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    alice, bob, carol = book["alice"], book["bob"], book["carol"]
    assert (alice["ch03"], alice["ch03 late days"]) == ("5", "0")
    # 2 days late, 1 free: one day of 10 % of 4 points
    assert (alice["ch14"], alice["ch14 late days"]) == ("3.6", "2") and "2 days late (1 free), -0.4" in alice["notes"]
    # Bob's free day goes to chapter 03 (due first), so chapter 14's late day costs 10 % of 4 points
    assert (bob["ch03"], bob["ch03 late days"]) == ("2", "1") and "ch03: 1 day late (1 free), -0" in bob["notes"]
    assert (bob["ch14"], bob["ch14 late days"]) == ("2.6", "1") and "ch14: 1 day late (0 free), -0.4" in bob["notes"]
    assert (carol["ch03"], carol["ch03 late days"]) == ("0", "4") and "more than the 3 allowed" in carol["notes"]
    # Carol's chapter 14 has no time anywhere: counted on time, and said
    assert carol["ch14"] == "1" and "no submission time for submitted/carol/ch14/14_language_model.ipynb" in err


def test_times_from_the_grades_column_and_from_the_files(term, capsys):
    tmp, roster, g03, g14 = term
    rows = _read(g03)
    rows[0].append("submitted_at")
    for row in rows[1:]:
        row.append("2026-10-07T09:00:00Z" if "bob" in row[0] else "2026-10-01T09:00:00Z")
    _write(g03, rows)
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--due", "ch03=2026-10-05T23:59+00:00",
                              "--late-penalty", "10")
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    assert (book["bob"]["ch03"], book["bob"]["ch03 late days"]) == ("1", "2")  # 2 of 5 points, minus 2 x 10 % of 5
    assert (book["alice"]["ch03"], book["alice"]["ch03 late days"]) == ("5", "0")
    # the files' modification times, the files found relative to the grades CSV's folder
    for name in ("alice", "bob", "carol"):
        path = tmp / "subs03" / f"{name}.ipynb"
        path.parent.mkdir(exist_ok=True)
        path.write_text("{}")
    plain = _grades(tmp / "ch03b.csv", CH03, {"subs03/alice.ipynb": [2, 3], "subs03/bob.ipynb": [2, 0],
                                              "subs03/carol.ipynb": [0, 3]})
    code, _, err = _gradebook(capsys, tmp, roster, plain, g14, "--due", "ch03=2000-01-01T00:00+00:00",
                              "--times-from-files", "--force")
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    assert all(int(book[n]["ch03 late days"]) > 365 for n in ("alice", "bob", "carol")) and "ch03: no submission time" \
        not in err


def test_times_are_read_as_iso_8601():
    from datetime import datetime, timedelta, timezone

    from tfm_lesson.course.gradebook import parse_when

    assert parse_when("2026-10-05T22:00Z", "t") == datetime(2026, 10, 5, 22, tzinfo=timezone.utc)
    assert parse_when("2026-10-05T23:00+01:00", "t") == datetime(2026, 10, 5, 22, tzinfo=timezone.utc)
    end = parse_when("2026-10-05", "t", end_of_day=True)  # a date alone, as a due date: the end of that day, locally
    assert end.tzinfo is not None and (end.replace(tzinfo=None) - datetime(2026, 10, 6)) == timedelta(microseconds=-1)
    assert parse_when("2026-10-05T12:00", "t").tzinfo is not None  # no offset: this machine's zone


def test_an_override_survives_a_regrade(term, capsys):
    tmp, roster, g03, g14 = term
    overrides = _write(tmp / "overrides.csv", [
        ["student", "chapter", "exercise", "points", "reason"],
        ["bob", "ch03", "Exercise 2", "2", "merge right, a shape printed wrong"],
        ["dan", "ch14", "*", "3", "handed in on paper, graded by hand"]])
    before = overrides.read_bytes()
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--overrides", str(overrides))
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    assert (book["bob"]["ch03"], book["dan"]["ch14"]) == ("4", "3")
    assert "Exercise 2: merge the heads set to 2 by the instructor (merge right" in book["bob"]["notes"]
    # the regrade: a new grades CSV for chapter 03 (Alice loses a point, Bob's exercise 1 now fails)
    _grades(g03, CH03, {"subs03/alice.ipynb": [2, 2], "subs03/bob.ipynb": [0, 0], "subs03/carol.ipynb": [0, 3]})
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--overrides", str(overrides), "--force")
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    assert book["alice"]["ch03"] == "4"  # the regrade counts
    assert (book["bob"]["ch03"], book["dan"]["ch14"]) == ("2", "3")  # and the overrides stay: 0 + 2, and 3
    assert overrides.read_bytes() == before  # the instructor's file, never written


def test_overrides_that_fit_nothing_are_reported_and_bad_ones_refused(term, capsys):
    tmp, roster, g03, g14 = term
    rows = [["student", "chapter", "exercise", "points", "reason"],
            ["alice", "ch03", "Exercise 9", "1", "no such exercise"], ["zoe", "ch03", "*", "1", "not enrolled"],
            ["alice", "ch17", "*", "1", "a later chapter"]]
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--overrides", str(_write(tmp / "o.csv", rows)))
    assert code == 0 and err.count("not applied") == 3 and "has no exercise 'Exercise 9'" in err
    for bad, words in ((["bob", "ch03", "Exercise 1", "3", "too many"], "outside 0..2"),
                       (["bob", "ch03", "Exercise 1", "two", "typo"], "points must be a number"),
                       (["bob", "ch03", "Exercise 1", "1", ""], "reason are required")):
        code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--force", "--overrides",
                                  str(_write(tmp / "o.csv", rows[:1] + [bad])))
        assert code == 2 and words in err, err
    for twice in ([["bob", "ch03", "*", "1", "a"], ["bob", "ch03", "", "2", "b"]],
                  [["bob", "ch03", "Exercise 2", "1", "a"], ["bob", "ch03", "exercise 2: Merge the heads", "2", "b"]]):
        code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--force", "--overrides",
                                  str(_write(tmp / "o.csv", rows[:1] + twice)))
        assert code == 2 and "a second override of the same score" in err, err


def _numeric(cell: str) -> float:
    value = float(cell)  # raises on anything but a number
    assert cell.strip() == cell and "," not in cell
    return value


def test_the_canvas_file_follows_the_importer(term, capsys):
    tmp, roster, g03, g14 = term
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--canvas", str(tmp / "canvas.csv"))
    assert code == 0, err
    rows = _read(tmp / "canvas.csv")
    head, points, students = rows[0], rows[1], rows[2:]
    # Canvas's header test: "Student" then "ID", then SIS User ID and SIS Login ID; the student columns end at Section
    assert head[:5] == CANVAS_STUDENT_COLUMNS == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert head[5:] == ["ch03", "ch14"]
    assert not {"Current Score", "Final Score", "Current Points", "Final Points", "Total"} & set(head)
    assert points[0] == "Points Possible" and points[1:5] == [""] * 4 and [_numeric(c) for c in points[5:]] == [5, 4]
    assert len(students) == 4 and all(len(r) == len(head) for r in rows)
    for row in students:
        assert row[2] and row[0]  # each student found by SIS User ID (the roster's column), else by name
        scores = [_numeric(c) for c in row[5:]]
        assert all(0 <= s <= top for s, top in zip(scores, (5, 4)))
    assert [r[2] for r in students] == ["1001", "1002", "1003", "1004"] and students[0][4] == "A"


def test_the_gradescope_file_has_its_columns(term, capsys):
    tmp, roster, g03, g14 = term
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--gradescope", str(tmp / "gs.csv"))
    assert code == 0, err
    rows = _read(tmp / "gs.csv")
    head = rows[0]
    assert head == GRADESCOPE_STUDENT_COLUMNS + ["ch03", "ch03 - Max Points", "ch14", "ch14 - Max Points"]
    emails = [r[head.index("Email")] for r in rows[1:]]
    assert len(set(emails)) == 4 and all("@" in e for e in emails)  # Gradescope's key: one email per student
    for row in rows[1:]:
        tops = [_numeric(row[head.index(f"{label} - Max Points")]) for label in ("ch03", "ch14")]
        assert tops == [5, 4]
        assert 0 <= _numeric(row[head.index("ch03")]) <= 5 and 0 <= _numeric(row[head.index("ch14")]) <= 4
    # a student without an email cannot be matched there: refused before anything is written
    _write(roster, _read(roster)[:4] + [["dan", "Dan Okafor", "", "B", "1004"]])
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--gradescope", str(tmp / "gs2.csv"), "--force")
    assert code == 2 and "none for dan" in err and not (tmp / "gs2.csv").exists()


def test_the_moodle_file_has_numbers_and_a_user_column(term, capsys):
    tmp, roster, g03, g14 = term
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--moodle", str(tmp / "moodle.csv"))
    assert code == 0, err
    rows = _read(tmp / "moodle.csv")
    assert rows[0] == MOODLE_STUDENT_COLUMNS + ["ch03", "ch14"]
    assert [r[1] for r in rows[1:]] == ["alice@uni.example", "bob@uni.example", "carol@uni.example", "dan@uni.example"]
    assert [[_numeric(c) for c in r[3:]] for r in rows[1:]] == [[5, 4], [2, 3], [3, 1], [0, 0]]


def test_nothing_is_overwritten_without_force(term, capsys):
    tmp, roster, g03, g14 = term
    (tmp / "canvas.csv").write_text("the instructor's own file")
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--canvas", str(tmp / "canvas.csv"))
    assert code == 2 and "pass --force" in err
    assert (tmp / "canvas.csv").read_text() == "the instructor's own file"
    assert not (tmp / "gradebook.csv").exists()  # every output is checked before any is written
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--canvas", str(tmp / "canvas.csv"), "--force")
    assert code == 0 and _read(tmp / "canvas.csv")[0][0] == "Student"
    assert not list(tmp.glob(".*.tmp"))  # written through a temporary file renamed into place
    # an input is never an output, --force or not
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, "--moodle", str(g03), "--force")
    assert code == 2 and "one of the inputs" in err and _read(g03)[0][0] == "submission"


def test_a_roster_can_name_the_files(tmp_path, capsys):
    roster = _write(tmp_path / "roster.csv", [["id", "name", "email", "submission"],
                                              ["s1", "Jane Doe", "j@x", "doejane;jdoe"], ["s2", "Al", "a@x", "al"]])
    grades = _grades(tmp_path / "g.csv", CH03, {"in/doejane_123_456_03.ipynb": [2, 3], "in/al/03.ipynb": [2, 0],
                                               "in/al/doejane.ipynb": [0, 0]})
    code, _, err = call_main(main, ["gradebook", "--roster", str(roster), "--grades", str(grades),
                                    "--out", str(tmp_path / "b.csv")], capsys)
    assert code == 0, err
    book = _by_id(tmp_path / "b.csv")
    assert (book["s1"]["g"], book["s2"]["g"]) == ("5", "2")  # without LABEL=, the label is the file's name
    assert "in/al/doejane.ipynb matches s1, s2: not counted" in err


@pytest.mark.parametrize("change, words", [
    (lambda t: _write(t / "ch03.csv", [["submission", "exercise", "points"], ["a", "b", "1"]]), "no column max_points"),
    (lambda t: _write(t / "ch03.csv", [["submission", "exercise", "points", "max_points"], ["a", "b", "x", "1"]]),
     "points must be a number"),
    (lambda t: _write(t / "roster.csv", [["id", "name"], ["a", "A"], ["a", "B"]]), "duplicate id 'a'"),
])
def test_bad_inputs_are_named(term, capsys, change, words):
    tmp, roster, g03, g14 = term
    change(tmp)
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14)
    assert code == 2 and words in err, err


@pytest.mark.parametrize("flags, words", [
    (["--due", "ch99=2026-10-05"], "which no --grades names"), (["--due", "ch03=tomorrow"], "is not a time"),
    (["--due", "2026-10-05"], "takes LABEL=VALUE"), (["--late-penalty", "150"], "from 0 to 100"),
    (["--free-late-days", "-1"], ">= 0")])
def test_bad_flags_are_named(term, capsys, flags, words):
    tmp, roster, g03, g14 = term
    code, _, err = _gradebook(capsys, tmp, roster, g03, g14, *flags)
    assert code == 2 and words in err and not (tmp / "gradebook.csv").exists(), err


def test_the_course_command_lists_gradebook(capsys):
    code, out, _ = call_main(main, ["--help"], capsys)
    assert code == 0 and "gradebook" in out
    code, out, _ = call_main(main, ["gradebook", "--help"], capsys)
    assert code == 0 and "--canvas" in out and "--free-late-days" in out


def test_the_instructors_page_command_runs_as_written(term, capsys, monkeypatch):
    """The command of the book's "Keeping a gradebook", run word for word on a class laid out as it names the files."""
    import re
    import shlex

    from conftest import ROOT

    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    section = page.split("## Keeping a gradebook", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    words = shlex.split(command)
    assert words[:3] == [".venv/bin/python", "-m", "tfm_lesson.course"] and words[3] == "gradebook"
    tmp, roster, g03, g14 = term
    monkeypatch.chdir(tmp)
    (tmp / "grades").mkdir()
    g03.rename(tmp / "grades" / "ch03.csv")
    g14.rename(tmp / "grades" / "ch14.csv")
    _write(tmp / "times.csv", [["chapter", "student", "submitted_at"], ["ch03", "bob", "2026-10-07T12:00+02:00"]])
    _write(tmp / "overrides.csv", [["student", "chapter", "exercise", "points", "reason"],
                                   ["carol", "ch03", "Exercise 1", "1", "half right"]])
    code, out, err = call_main(main, words[3:], capsys)
    assert code == 0, err
    book = _by_id(tmp / "gradebook.csv")
    assert book["carol"]["ch03"] == "4" and book["bob"]["ch03 late days"] == "2"
    assert _read(tmp / "canvas.csv")[1][0] == "Points Possible" and _read(tmp / "gradescope.csv")[0][1] == "Email"
    assert _read(tmp / "moodle.csv")[0][:3] == MOODLE_STUDENT_COLUMNS


def test_folders_every_submission_shares_name_nobody(tmp_path, capsys):
    """Absolute paths: a student whose id is also a folder above the class's files owns none of them."""
    roster = _write(tmp_path / "roster.csv", [["id", "name", "email"], ["home", "H", "h@x"], ["alice", "A", "a@x"],
                                              ["bob", "B", "b@x"]])
    grades = _grades(tmp_path / "g.csv", CH03, {"/home/ta/subs/alice.ipynb": [2, 3], "/home/ta/subs/bob.ipynb": [2, 0],
                                               "/home/ta/subs/alice/late.ipynb": [0, 0]})
    code, _, err = call_main(main, ["gradebook", "--roster", str(roster), "--grades", f"ch03={grades}",
                                    "--out", str(tmp_path / "b.csv")], capsys)
    assert code == 0, err
    book = _by_id(tmp_path / "b.csv")
    assert (book["home"]["ch03"], book["alice"]["ch03"], book["bob"]["ch03"]) == ("0", "5", "2")
    assert "2 submissions from alice" in err and "no submission from home" in err
    # every file in one student's folder: that folder is still read
    grades = _grades(tmp_path / "g.csv", CH03, {"subs/alice/a.ipynb": [2, 0], "subs/alice/b.ipynb": [2, 3]})
    code, _, err = call_main(main, ["gradebook", "--roster", str(roster), "--grades", f"ch03={grades}",
                                    "--out", str(tmp_path / "b.csv"), "--force"], capsys)
    assert code == 0 and _by_id(tmp_path / "b.csv")["alice"]["ch03"] == "5", err


def test_it_reads_what_the_grader_writes(tmp_path, capsys):
    """The grades CSV from the grader's own writer (grading_report.write_csv), no kernel run."""
    from tfm_lesson.course.exercises import Exercise
    from tfm_lesson.course.grading_report import Graded, Result, write_csv

    def exercise(number: int, title: str, points: int) -> Exercise:
        return Exercise(number=number, title=title, points=points, answer_index=None, solution_index=3 * number,
                        check_index=3 * number + 1, checker="check_x", arguments="x")

    one, two = exercise(1, "Exercise 1: split the heads", 2), exercise(2, "Exercise 2: merge the heads", 3)
    write_csv([Graded("submissions/alice.ipynb", [Result(one, True), Result(two, False, "heads merged, in order?")]),
               Graded("submissions/bob.ipynb", [Result(one, True), Result(two, True)])], tmp_path / "ch03.csv")
    roster = _write(tmp_path / "roster.csv", [["id", "email"], ["alice", "a@x"], ["bob", "b@x"]])
    code, _, err = call_main(main, ["gradebook", "--roster", str(roster), "--grades", f"ch03={tmp_path / 'ch03.csv'}",
                                    "--out", str(tmp_path / "b.csv"), "--canvas", str(tmp_path / "c.csv")], capsys)
    assert code == 0 and not err, err
    assert [(r["ch03"], r["possible"]) for r in _by_id(tmp_path / "b.csv").values()] == [("2", "5"), ("5", "5")]
    assert _read(tmp_path / "c.csv")[1][5] == "5"
