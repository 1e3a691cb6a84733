"""Handing a quiz in (tfm_lesson/course/quiz.py `hand_in`) and the grader's reading of it
(tfm_lesson/course/quiz_hand_in.py): the letters are checked when the cell runs, read from the cell's text when
graded (never run), with tags lost, from an nbformat 4.0 notebook, and never from a computed string."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tfm_lesson import quiz
from tfm_lesson.course import restore, student_copy
from tfm_lesson.course.quiz import LETTERS, load_quiz
from tfm_lesson.course.quiz_hand_in import HAND_IN_TAG, grade_quiz, is_hand_in_cell, read_hand_in

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"


def _right(cid: str = "03") -> str:
    return "".join(LETTERS[q.answer] for q in load_quiz(cid))


def _wrong_at(letters: str, n: int, cid: str = "03") -> str:
    """``letters`` with question ``n``'s (0-based) letter changed to another of its options."""
    other = LETTERS[(load_quiz(cid)[n].answer + 1) % len(load_quiz(cid)[n].options)]
    return letters[:n] + other + letters[n + 1:]


def _copy_with(letters_source: str, drop_tags: bool = False):
    """Chapter 03's student copy with the hand-in call's letters written as ``letters_source`` (Python text)."""
    nb = student_copy(nbformat.read(CHAPTER, as_version=4))
    cell = next(c for c in nb.cells if is_hand_in_cell(c))
    cell.source = cell.source.replace('hand_in("03", "")', f'hand_in("03", {letters_source})')
    if drop_tags:
        cell.metadata.pop("tags")
    return nb


def test_hand_in_prints_what_it_recorded_and_what_is_missing(capsys):
    got = quiz.hand_in("03", "b?a")
    out = capsys.readouterr().out
    assert got == "B?A?" and quiz.HANDED_IN["03"] == "B?A?"
    assert "1 B, 2 ?, 3 A, 4 ?" in out and "2 of 4 still unanswered (questions 2, 4)" in out
    assert "right" not in out.replace("write", "")  # it records; the quiz says which are right
    quiz.hand_in(3, _right())
    assert "all 4 answered" in capsys.readouterr().out


@pytest.mark.parametrize("letters, words", [
    ("BZ", ["letters[1] = 'Z'", "question 2", "A, B, C"]),
    ("ABCAB", ["5 characters for 4 questions"]),
    ("A1", ["letters[1] = '1'"]),
    (["A"], ["must be a string"]),
])
def test_hand_in_refuses_bad_letters_and_records_nothing(letters, words):
    quiz.hand_in("03", "AAAA")
    with pytest.raises(ValueError) as info:
        quiz.hand_in("03", letters)
    assert all(w in str(info.value) for w in words), str(info.value)
    assert "03" not in quiz.HANDED_IN  # a failed hand-in leaves nothing, as the grader reading the cell sees it


def test_the_student_copy_has_an_empty_hand_in_cell_after_the_quiz_without_output():
    chapter = nbformat.read(CHAPTER, as_version=4)
    nb = student_copy(chapter)
    i = next(i for i, c in enumerate(nb.cells) if is_hand_in_cell(c))
    assert "quiz.show(\"03\")" in nb.cells[i - 1].source and nb.cells[i - 1].outputs == []
    assert nb.cells[i].metadata["tags"] == [HAND_IN_TAG] and nb.cells[i].outputs == []
    assert 'my_quiz = T.quiz.hand_in("03", "")' in nb.cells[i].source
    nbformat.validate(nb)  # nbformat 4.5: the new cell has an id of its own
    assert len({c.id for c in nb.cells}) == len(nb.cells)
    # the hand-out's stored outputs name no right answer: no quiz page, no "(right)" feedback
    stored = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "tfm-quiz-static" not in stored and "(right)" not in stored
    assert restore(nb, chapter) == chapter  # untouched, it goes; the chapter comes back whole


def test_restore_keeps_a_hand_in_the_learner_wrote():
    chapter = nbformat.read(CHAPTER, as_version=4)
    nb = _copy_with('"BA"')
    back = restore(nb, chapter)
    kept = [c for c in back.cells if is_hand_in_cell(c)]
    assert len(kept) == 1 and '"BA"' in kept[0].source
    assert len(back.cells) == len(chapter.cells) + 1


def test_the_grader_reads_the_letters_as_text():
    letters = _wrong_at(_right(), 1)
    nb = _copy_with(json.dumps(letters))
    assert read_hand_in(nb, "03") == (letters, "")
    r = grade_quiz(nb, "03")
    assert (r.points, r.exercise.points, r.exercise.title, r.passed) == (3, 4, "Quiz 03", False)
    assert r.message == "3 of 4 right (questions right: 1, 3, 4; wrong: 2)"
    assert grade_quiz(_copy_with(json.dumps(_right())), "03").passed


def test_tags_lost_and_an_nbformat_4_0_notebook_are_read_by_the_call(tmp_path):
    nb = _copy_with(json.dumps(_right()[:2]), drop_tags=True)
    assert read_hand_in(nb, "03") == (_right()[:2], "")
    # as an older Jupyter or Colab saves it: nbformat 4.0, no cell ids, sources as lists of lines
    old = json.loads(nbformat.writes(nb))
    old["nbformat_minor"] = 0
    for cell in old["cells"]:
        cell.pop("id", None)
        cell["source"] = "".join(cell["source"]).splitlines(keepends=True)
    (tmp_path / "old.ipynb").write_text(json.dumps(old))
    back = nbformat.read(tmp_path / "old.ipynb", as_version=4)
    assert grade_quiz(back, "03").points == 2
    assert grade_quiz(old, "03").points == 2  # the JSON itself, lists of lines and all


@pytest.mark.parametrize("source, why", [
    ('"".join(["C", "B"])', "written in quotes"),
    ('ANSWERS', "written in quotes"),
    ('f"{x}"', "written in quotes"),
])
def test_computed_letters_are_not_handed_in(source, why):
    r = grade_quiz(_copy_with(source), "03")
    assert r.points == 0 and "not handed in" in r.message and why in r.message


def test_the_call_is_read_as_the_kernel_would_run_it():
    assert grade_quiz(_copy_with(f'letters={json.dumps(_right())}'), "03").points == 4  # a keyword
    nb = _copy_with(json.dumps(_right()))
    cell = next(c for c in nb.cells if is_hand_in_cell(c))
    cell.source = cell.source.replace('hand_in("03", ', "hand_in(3, ")  # the chapter as a number, as hand_in takes
    assert grade_quiz(nb, "03").points == 4
    cell.source = cell.source.replace("hand_in(3, ", 'hand_in("3", ')  # hand_in refuses "3": so does the grader
    assert "no hand_in(\"03\"" in grade_quiz(nb, "03").message
    r = grade_quiz(_copy_with(f'{json.dumps(_right())}, "x"'), "03")  # a TypeError in the kernel
    assert r.points == 0 and "nothing else" in r.message
    with pytest.raises(TypeError):
        quiz.hand_in("03", _right(), "x")
    with pytest.raises(ValueError, match="two digits"):
        quiz.hand_in("3", _right())


def test_extra_or_bad_letters_score_zero_with_the_reason():
    r = grade_quiz(_copy_with(json.dumps(_right() + "A")), "03")
    assert r.points == 0 and "5 characters for 4 questions" in r.message
    r = grade_quiz(_copy_with('"CZ"'), "03")
    assert r.points == 0 and "letters[1] = 'Z'" in r.message


def test_no_hand_in_and_the_last_call_counts():
    nb = student_copy(nbformat.read(CHAPTER, as_version=4))
    nb.cells = [c for c in nb.cells if not is_hand_in_cell(c)]
    r = grade_quiz(nb, "03")
    assert r.points == 0 and r.message.startswith("quiz not handed in: the notebook has no hand_in(\"03\"")
    nb = _copy_with('"AAAA"')
    nb.cells.append(nbformat.v4.new_code_cell(f'x = quiz.hand_in("03", {json.dumps(_right())})'))
    nb.cells.append(nbformat.v4.new_code_cell('def later():\n    quiz.hand_in("03", "AAAA")  # never runs'))
    assert grade_quiz(nb, "03").points == 4  # the kernel would hold the last one run: the grader reads that one
    nb.cells.append(nbformat.v4.new_code_cell('quiz.hand_in("03", letters)'))
    assert grade_quiz(nb, "03").points == 0  # the last call's letters are computed: nothing counts


def test_an_unreadable_submission_scores_zero_with_the_reason():
    r = grade_quiz(None, "03", "not graded: the file is empty (0 bytes)")
    assert r.points == 0 and r.exercise.points == 4 and "the file is empty" in r.message


def test_the_quiz_line_reaches_the_csv_the_feedback_page_and_the_gradebook(tmp_path, capsys):
    """Two learners' quiz lines, read from their notebooks, beside an exercise's result: the CSV has the line, the
    page shows it, and the gradebook's totals count it (no kernel run: the grader's own writers)."""
    import csv

    from conftest import call_main
    from tfm_lesson.course import main
    from tfm_lesson.course.exercises import Exercise
    from tfm_lesson.course.grading_report import Graded, Result, feedback_page, write_csv

    one = Exercise(number=1, title="Exercise 1: split the heads", points=3, answer_index=None, solution_index=3,
                   check_index=4, checker="check_split_heads", arguments="split_heads")
    alice = Graded("subs/alice.ipynb", [Result(one, True), grade_quiz(_copy_with(json.dumps(_right())), "03")])
    bob = Graded("subs/bob.ipynb", [Result(one, False, "no transpose"),
                                    grade_quiz(_copy_with(json.dumps(_wrong_at(_right(), 0)[:3])), "03")])
    write_csv([alice, bob], tmp_path / "ch03.csv")
    with open(tmp_path / "ch03.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["exercise"] == "Quiz 03"]
    assert [(r["submission"], r["passed"], r["points"], r["max_points"]) for r in rows] == [
        ("subs/alice.ipynb", "True", "4", "4"), ("subs/bob.ipynb", "False", "2", "4")]
    assert rows[1]["message"] == "2 of 4 right (questions right: 2, 3; wrong: 1; unanswered: 4)"
    page = feedback_page(bob, "03_multi_head_attention")
    assert "**Score: 2 / 7**" in page and "## Quiz 03: 2 / 4 (partly passed)" in page and "wrong: 1" in page
    (tmp_path / "roster.csv").write_text("id,email\nalice,a@x\nbob,b@x\n")
    code, _, err = call_main(main, ["gradebook", "--roster", str(tmp_path / "roster.csv"), "--grades",
                                    f"ch03={tmp_path / 'ch03.csv'}", "--out", str(tmp_path / "b.csv")], capsys)
    assert code == 0 and not err, err
    with open(tmp_path / "b.csv", newline="") as f:
        book = {r["id"]: r for r in csv.DictReader(f)}
    assert [(book[s]["ch03"], book[s]["possible"]) for s in ("alice", "bob")] == [("7", "7"), ("2", "7")]


def test_grade_help_names_no_quiz(capsys):
    from conftest import call_main
    from tfm_lesson.course import main

    code, out, _ = call_main(main, ["grade", "--help"], capsys)
    assert code == 0 and "--no-quiz" in out and "Quiz NN" in out
