"""With the keyboard alone in JupyterLab: Tab to a quiz, pick an answer with the arrow keys, check it with
Enter; Tab to an explorer's slider and move it with the arrow keys; the feedback and the picture change.
No mouse event is sent after the notebook has run (running it uses the menu, as in the other browser
tests). Screenshots go to artifacts/screenshots/."""
from __future__ import annotations

import pytest

from browser import browser_missing, cell_errors, chromium_page, jupyter_lab, open_notebook, run_all_cells, screenshot, \
    write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")]

from test_browser_quiz import QUIZ  # the same one-question quiz  # noqa: E402
EXPLORER = "from tfm_lesson import widgets\nwidgets.temperature_explorer()\n"

FOCUS = """() => {
    const el = document.activeElement;
    if (!el) return '';
    if (el.closest('.tfm-quiz-choice')) return 'choice';
    if (el.closest('.tfm-quiz-check')) return 'check';
    if (el.classList.contains('noUi-handle')) return 'slider';
    return el.tagName + '.' + (el.className || '');
}"""


RADIO_INDEX = """() => [...document.querySelectorAll('.tfm-quiz-choice input[type=radio]')].indexOf(document.activeElement)"""


def _tab_to(page, target: str, limit: int = 120) -> list[str]:
    """Press Tab until the focus is on ``target`` (see FOCUS); the focus path, for the error message."""
    path = []
    for _ in range(limit):
        where = page.evaluate(FOCUS)
        if where == target:
            return path
        path.append(where)
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached the {target}; focus went through {path[-15:]}")


def test_quiz_and_slider_with_the_keyboard_alone(tmp_path):
    write_notebook(tmp_path / "keys.ipynb", [QUIZ, EXPLORER])
    with jupyter_lab(tmp_path) as lab, chromium_page() as page:
        open_notebook(page, lab, "keys.ipynb")
        run_all_cells(page)
        assert cell_errors(page) == []
        quiz = page.locator(".tfm-quiz").first
        quiz.wait_for(timeout=60_000)
        handle = page.locator(".noUi-handle").first
        handle.wait_for(timeout=120_000)
        page.keyboard.press("Escape")  # command mode: Tab now walks the page, not the cell's editor

        _tab_to(page, "choice")
        # Tab walks the options (JupyterLab keeps the arrow keys for moving between cells); Space picks one
        for _ in range(4):
            if page.evaluate(RADIO_INDEX) == 1:
                break
            page.keyboard.press("Tab")
        assert page.evaluate(RADIO_INDEX) == 1, "Tab did not reach option B of the quiz"
        page.keyboard.press("Space")
        assert page.locator(".tfm-quiz-choice input[type=radio]").nth(1).is_checked()
        _tab_to(page, "check")
        page.keyboard.press("Enter")
        right = quiz.locator(".tfm-quiz-feedback .tfm-quiz-right")
        right.wait_for(timeout=30_000)
        assert "variance d_k" in right.text_content()
        screenshot(page, "keyboard_quiz_answered", quiz)

        explorer = page.locator(".jp-OutputArea-output", has=page.locator(".noUi-handle")).first
        readout = explorer.locator(".widget-readout").first
        image = explorer.locator("img").first
        before_value, before_src = readout.text_content(), image.get_attribute("src")
        _tab_to(page, "slider")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("([el, old]) => el.textContent !== old", arg=[readout.element_handle(), before_value],
                               timeout=30_000)
        page.wait_for_function("([el, old]) => el.getAttribute('src') !== old", arg=[image.element_handle(), before_src],
                               timeout=60_000)
        assert readout.text_content() != before_value
        screenshot(page, "keyboard_slider_moved", explorer)
