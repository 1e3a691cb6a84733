"""Quizzes ("check your understanding") and exercise labels: every chapter has both, and both are well formed."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tfm_lesson import quiz
from tfm_lesson.course import strip_widget_views
from tfm_lesson.course.quiz import Question, load_quiz, quiz_chapters
from tfm_lesson.look.widgets import WIDGET_VIEW

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LABEL = re.compile(r"^\*\*Difficulty\*\* ([123])/3 · \*\*Importance\*\* ([123])/3 · \*\*Time\*\* ~(\d+) min\s*$")
EXERCISE = re.compile(r"^#{2,4} Exercise \d+\b")


def _question(**changes) -> Question:
    fields = dict(prompt="2 + 2?", options=["3", "4"], answer=1, feedback=["one short", "yes"])
    return Question(**{**fields, **changes})


@pytest.mark.parametrize("chapter", [p.name[:2] for p in CHAPTERS])
def test_every_chapter_has_a_quiz_of_three_or_more(chapter):
    questions = load_quiz(chapter)
    assert len(questions) >= 3, f"chapter {chapter} has {len(questions)} quiz questions, at least 3 wanted"
    for q in questions:  # exactly one right answer, feedback for every option (Question checks on creation)
        assert 0 <= q.answer < len(q.options) and len(q.feedback) == len(q.options)
        assert len({f.strip() for f in q.feedback}) == len(q.feedback), f"copied feedback in: {q.prompt}"
    assert len({q.prompt for q in questions}) == len(questions), f"a question repeats in chapter {chapter}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_every_chapter_shows_its_quiz_before_the_summary(path):
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
            and re.search(rf"quiz\.show\(\s*[\"']{path.name[:2]}[\"']", c.source)]
    assert code, f"{path.name}: no cell calls quiz.show(\"{path.name[:2]}\")"
    headings = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                and re.search(r"^#+ Check your understanding", c.source, re.M)]
    assert headings and headings[-1] < code[0], f"{path.name}: the quiz needs a 'Check your understanding' heading"
    outputs = nb.cells[code[0]].get("outputs", [])
    assert any("text/html" in o.get("data", {}) for o in outputs), f"{path.name}: quiz cell has no stored static page"
    assert not any(WIDGET_VIEW in o.get("data", {}) for o in outputs), f"{path.name}: a dead widget view is stored"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_every_exercise_is_labelled(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.splitlines()
        for i, line in enumerate(lines):
            if EXERCISE.match(line):
                following = next((x for x in lines[i + 1:] if x.strip()), "")
                assert LABEL.match(following), (
                    f"{path.name}: '{line}' needs, on its next line, "
                    f"'**Difficulty** 2/3 · **Importance** 3/3 · **Time** ~10 min'; got {following!r}")
                minutes = int(LABEL.match(following).group(3))
                assert 1 <= minutes <= 120, f"{path.name}: '{line}': {minutes} minutes?"


def test_quiz_files_belong_to_chapters():
    chapters = {p.name[:2] for p in CHAPTERS}
    assert set(quiz_chapters()) <= chapters, f"quizzes without a chapter: {set(quiz_chapters()) - chapters}"


@pytest.mark.parametrize("changes, word", [
    (dict(answer=2), "answer"), (dict(answer=True), "answer"), (dict(options=["4"]), "options"),
    (dict(options=["4", "4"]), "differ"), (dict(feedback=["only one"]), "feedback"),
    (dict(feedback=["a", " "]), "feedback"), (dict(prompt=""), "prompt"), (dict(options="34"), "options"),
])
def test_malformed_questions_are_refused(changes, word):
    with pytest.raises(ValueError, match=word):
        _question(**changes)


def test_load_quiz_names_the_chapter_format():
    with pytest.raises(ValueError, match="two digits"):
        load_quiz("3a")
    with pytest.raises(ValueError, match="no quiz"):
        load_quiz("99")


def test_the_widget_answers_back():
    q = quiz.show([_question(), _question(prompt="3 + 3?", options=["6", "9"], answer=0, feedback=["yes", "no"])])
    assert q.answer(0, 0).startswith("Not quite. one short")
    assert "tfm-quiz-wrong" in q._feedback[0].value and "tfm-quiz-right" not in q._feedback[0].value
    assert q.answer(0, 1) == "Right. yes" and "tfm-quiz-right" in q._feedback[0].value
    q._choices[1].value = None
    q._check(1)
    assert q.replies[1] == "Choose an option first."
    with pytest.raises(ValueError, match="choice"):
        q.answer(1, 5)


def test_static_page_folds_answer_and_every_feedback():
    questions = [_question(prompt="Is `x < y` escaped?", feedback=["no <b>", "yes"])]
    page = quiz.to_html(questions)
    assert "<details>" in page and "<code>x &lt; y</code>" in page
    assert "no &lt;b&gt;" in page and "yes" in page and "(right)" in page and "(wrong)" in page


def test_stored_quiz_output_keeps_the_static_page_only():
    bundle = quiz.show([_question()])._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and "text/html" in bundle
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("display_data", data=bundle)])])
    assert strip_widget_views(nb) == 1
    assert set(nb.cells[0].outputs[0]["data"]) == {"text/plain", "text/html"}


def test_instructors_quiz_page_is_in_step_with_the_quizzes(monkeypatch):
    monkeypatch.chdir(ROOT)
    page = ROOT / "book" / "instructors_quizzes.md"
    expected = quiz.instructor_markdown(quiz.chapter_titles())
    assert page.read_text(encoding="utf-8") == expected, \
        "book/instructors_quizzes.md is stale: run `python -m tfm_lesson.course.quiz book/instructors_quizzes.md`"


def test_quiz_module_runs_as_a_command(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "page.md"
    assert quiz.main([str(out)]) == 0 and out.read_text(encoding="utf-8").startswith("# Quizzes")
    assert quiz.main([]) == 2


# the quizzes test the chapter, not the layout -------------------------------------------------------------------------
def _course_questions() -> list[Question]:
    return [q for chapter in quiz_chapters() for q in load_quiz(chapter)]


def test_no_answer_position_is_a_safe_guess():
    questions = _course_questions()
    for position in range(max(len(q.options) for q in questions)):
        share = sum(q.answer == position for q in questions) / len(questions)
        assert share <= 0.40, (f"option {quiz.LETTERS[position]} is right in {share:.0%} of the course's "
                               f"{len(questions)} questions: always answering it would pass")


def test_the_longest_option_is_rarely_the_right_one():
    questions = _course_questions()
    longest = [q for q in questions if len(q.options[q.answer]) >= max(len(o) for o in q.options)]
    share = len(longest) / len(questions)
    assert share <= 0.40, (f"the right option is the longest in {len(longest)} of {len(questions)} questions "
                           f"({share:.0%}): write distractors as long and specific as the right answer")


def test_the_shortest_option_is_rarely_the_right_one():
    # Distractors written longer than the right answer open the opposite shortcut: always pick the shortest.
    questions = _course_questions()
    shortest = [q for q in questions if len(q.options[q.answer]) <= min(len(o) for o in q.options)]
    share = len(shortest) / len(questions)
    assert share <= 0.40, (f"the right option is the shortest in {len(shortest)} of {len(questions)} questions "
                           f"({share:.0%}): always answering the shortest would pass")


@pytest.mark.parametrize("chapter", quiz_chapters())
def test_no_distractor_is_a_stub_beside_the_right_answer(chapter):
    # A one-clause distractor next to a reasoned right answer gives the answer away by form alone.
    for n, q in enumerate(load_quiz(chapter), 1):
        right = len(q.options[q.answer])
        for i, option in enumerate(q.options):
            assert i == q.answer or 2 * len(option) >= right, (
                f"chapter {chapter}, question {n}: option {quiz.LETTERS[i]} ({len(option)} characters) is under half "
                f"the right option's length ({right}): state the misconception as fully as the right answer: {option!r}")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_a_student_copy_stores_no_quiz_answers_and_restore_brings_the_page_back(path):
    from tfm_lesson.course import restore, student_copy

    nb = nbformat.read(path, as_version=4)
    copy = student_copy(nb)
    for cell in copy.cells:
        if quiz.is_quiz_cell(cell):
            assert cell.outputs == [], f"{path.name}: the student copy stores the quiz's answers"
    text = nbformat.writes(copy)
    for q in load_quiz(path.name[:2]):
        assert q.feedback[q.answer] not in text, f"{path.name}: a right answer's feedback is stored"
    restored = restore(copy, nb)
    quiz_cells = [i for i, c in enumerate(nb.cells) if quiz.is_quiz_cell(c)]
    assert quiz_cells and all(restored["cells"][i]["outputs"] == nb.cells[i].outputs for i in quiz_cells)
