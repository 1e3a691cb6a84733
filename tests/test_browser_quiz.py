"""A chapter's quiz in a real JupyterLab page: answer one question wrong (its feedback shows why), then right
(the confirmation shows). Screenshots go to artifacts/screenshots/."""
from __future__ import annotations

import pytest

from browser import browser_missing, cell_errors, chromium_page, jupyter_lab, open_notebook, run_all_cells, screenshot, \
    write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")]

QUIZ = """\
from tfm_lesson.course.quiz import Question, show
show([Question(prompt="Attention divides the scores by the square root of which size?",
               options=["d_model, the width of the whole model", "d_k, the size of one head's keys"],
               answer=1,
               feedback=["No: each head's dot products have d_k terms, not d_model.",
                         "Yes: a dot product of d_k unit-variance terms has variance d_k."])])
"""


def test_quiz_answers_back_in_jupyterlab(tmp_path):
    write_notebook(tmp_path / "quiz.ipynb", [QUIZ])
    with jupyter_lab(tmp_path) as lab, chromium_page() as page:
        open_notebook(page, lab, "quiz.ipynb")
        run_all_cells(page)
        assert cell_errors(page) == []
        quiz = page.locator(".tfm-quiz").first
        quiz.wait_for(timeout=60_000)
        choice, check = quiz.locator(".tfm-quiz-choice"), quiz.locator(".tfm-quiz-check")
        feedback = quiz.locator(".tfm-quiz-feedback")

        choice.get_by_text("A. d_model", exact=False).click()
        check.click()
        wrong = feedback.locator(".tfm-quiz-wrong")
        wrong.wait_for(timeout=30_000)
        assert "Not quite" in wrong.text_content() and "d_k terms, not d_model" in wrong.text_content()
        screenshot(page, "quiz_wrong_answer", quiz)

        choice.get_by_text("B. d_k", exact=False).click()
        check.click()
        right = feedback.locator(".tfm-quiz-right")
        right.wait_for(timeout=30_000)
        assert "Right." in right.text_content() and "variance d_k" in right.text_content()
        assert feedback.locator(".tfm-quiz-wrong").count() == 0
        screenshot(page, "quiz_right_answer", quiz)
