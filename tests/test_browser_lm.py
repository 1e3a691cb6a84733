"""Chapter 14's sampling widget in a real JupyterLab page, driven by headless Chromium: type a prompt, move
temperature, top-k and top-p, and check that the picture and the sampled text change, with no error.
Screenshots go to ``artifacts/screenshots/``."""
from __future__ import annotations

import pytest

from browser import browser_missing, cell_errors, chromium_page, jupyter_lab, open_notebook, run_all_cells, screenshot, \
    write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")]

SETUP = """\
import torch
from tfm_lesson import widgets
from tfm_lesson.data.corpus import load_corpus
from tfm_lesson.gpt import GPT
from tfm_lesson.train.lm import prepare_lm_data, train_lm
data = prepare_lm_data(load_corpus(max_chars=60_000), vocab_size=300)
torch.manual_seed(0)
model = GPT(vocab_size=data.vocab_size, max_len=64, d_model=32, heads=4, d_ff=64, num_layers=1)
history = train_lm(model, data, steps=60, batch_size=16, device="cpu")
"""
CELL = 'widgets.sampling_widget(model, data.tokenizer, "The small", max_new_tokens=30)'

ACTIONS = [("prompt", "text", "My friend"), ("temperature", "slider", 1), ("top-k", "slider", 3),
           ("top-p", "slider", 4)]


def _css(label: str) -> str:
    return ".tfm-control-" + "".join(c if c.isalnum() else "-" for c in label)


def _wait_changed(page, image, old_src: str, sample, old_text: str, timeout_s: float = 90) -> None:
    page.wait_for_function("([el, old]) => el.getAttribute('src') !== old", arg=[image.element_handle(), old_src],
                           timeout=timeout_s * 1000)
    page.wait_for_timeout(1500)  # the last of several renders (one per arrow key) settles


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser_lm")
    write_notebook(root / "lm.ipynb", [SETUP, CELL])
    with jupyter_lab(root) as lab, chromium_page() as page:
        open_notebook(page, lab, "lm.ipynb")
        run_all_cells(page)
        page.wait_for_selector(".tfm-sampling-widget img.tfm-explorer-figure[src]", timeout=120_000)
        screenshot(page, "lm_sampling_widget_after_run_all")
        yield page


def test_sampling_widget_controls_change_picture_and_text(lab_page):
    page = lab_page
    explorer = page.locator(".tfm-sampling-widget")
    assert explorer.count() == 1, "no live sampling widget on the page"
    image = explorer.locator("img.tfm-explorer-figure")
    sample = explorer.locator(".tfm-sample-text")
    assert sample.inner_text().startswith("The small")
    texts = [sample.inner_text()]
    for label, action, arg in ACTIONS:
        control = explorer.locator(_css(label))
        assert control.count() == 1, f"control {label!r} not found"
        control.scroll_into_view_if_needed()
        src, before = image.get_attribute("src"), screenshot(page, f"lm-{label}-before", explorer).read_bytes()
        if action == "text":
            box = control.locator("input")
            box.fill(arg)
            box.press("Enter")
        else:
            handle = control.locator(".noUi-handle")
            at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
            handle.focus()
            for _ in range(arg):
                handle.press("ArrowLeft" if at_end else "ArrowRight")
        _wait_changed(page, image, src, sample, texts[-1])
        after = screenshot(page, f"lm-{label}-after", explorer).read_bytes()
        assert after != before, f"moving {label!r} did not change the picture"
        status = explorer.locator("span[style*='D55E00']")
        assert status.count() == 0, f"{label!r}: {status.first.text_content()}"
        texts.append(sample.inner_text())
    assert texts[1].startswith("My friend") and texts[1] != texts[0], texts[:2]
    assert len(set(texts)) >= 3, f"the sampled text hardly changed: {texts}"
    assert cell_errors(page) == []
