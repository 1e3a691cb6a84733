"""A front end that speaks ipywidgets 7, as Colab's does: classic Notebook 6.5.7 with widgetsnbextension 3.6.10
and ipywidgets 7.7.1 (the Colab-like environment of TFM_COLAB_PYTHON, made by .ci/run), in headless Chromium.

Chapter 01 runs top to bottom there; its temperature explorer's slider, moved, changes the picture; its quiz,
answered, answers back. A small notebook builds chapter 14's sampling widget on a tiny model trained for a few
steps; a change of temperature changes the picture. Screenshots go to ``artifacts/screenshots/notebook6-*.png``.
JupyterLab 4 and Notebook 7 (ipywidgets 8) have their own tests.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from browser import ROOT, _stop, browser_missing, chromium_page, free_port, screenshot, write_notebook

COLAB_PYTHON = os.environ.get("TFM_COLAB_PYTHON", "")
pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or ""),
              pytest.mark.skipif(not COLAB_PYTHON, reason="TFM_COLAB_PYTHON is not set: .ci/run builds the "
                                 "Colab-like environment (tools/colab_env.py) and sets it")]

CHAPTER = ROOT / "notebooks" / "01_attention.ipynb"
ERRORS = """() => [...document.querySelectorAll('.output_area')].filter(e => e.querySelector('.output_error')
    || /Traceback \\(most recent call last\\)|Error displaying widget|Failed to display Jupyter Widget|Error rendering/
        .test(e.textContent)).map(e => e.textContent.slice(0, 500))"""
OUTPUTS = "() => [...document.querySelectorAll('.output_area')].map(e => e.innerHTML.slice(0, 800))"
ALL_DONE = """() => { const prompts = [...document.querySelectorAll('.code_cell .input_prompt')];
    return prompts.length > 0 && Jupyter.notebook.kernel && Jupyter.notebook.kernel_busy === false
        && (prompts.every(p => /\\[\\d+\\]/.test(p.textContent)) || !!document.querySelector('.output_error')); }"""
SAMPLING = """\
import torch
from tfm_lesson import widgets
from tfm_lesson.data.corpus import load_corpus
from tfm_lesson.gpt import GPT
from tfm_lesson.train.lm import prepare_lm_data, train_lm
data = prepare_lm_data(load_corpus(max_chars=60_000), vocab_size=300)
torch.manual_seed(0)
model = GPT(vocab_size=data.vocab_size, max_len=64, d_model=32, heads=4, d_ff=64, num_layers=1)
history = train_lm(model, data, steps=30, batch_size=16, device="cpu")
"""


@contextmanager
def classic_notebook(root_dir: Path, timeout: float = 120.0):
    """Classic Notebook 6 of the Colab-like environment serving ``root_dir``; its kernel imports this checkout."""
    port, token = free_port(), secrets.token_hex(16)
    private = Path(tempfile.mkdtemp(prefix="tfm-nb6-"))
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(private / "runtime"), "JUPYTER_CONFIG_DIR": str(private / "config"),
           "IPYTHONDIR": str(private / "ipython"), "PYTHONPATH": str(ROOT), "TFM_DEVICE": "cpu",
           "PYTHONUNBUFFERED": "1"}
    env.pop("JUPYTER_PATH", None)
    cmd = [COLAB_PYTHON, "-m", "notebook", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
           f"--NotebookApp.token={token}", f"--NotebookApp.notebook_dir={root_dir}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = private / "notebook.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, cwd=root_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"notebook exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}api/status?token={token}", timeout=5).read()
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"notebook did not answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
        yield url, token, log
    finally:
        _stop(process)
        shutil.rmtree(private, ignore_errors=True)


def _run_all(page, url: str, token: str, name: str, timeout_s: float = 400) -> None:
    page.goto(f"{url}notebooks/{name}?token={token}")
    page.wait_for_function("() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel "
                           "&& Jupyter.notebook.kernel.is_connected()", timeout=120_000)
    # widgetsnbextension loads after the page and then asks the kernel for its widgets: views of widgets made in
    # the first seconds stay hidden (seen here: at once, hidden; 15 s after the page loaded, shown). A learner
    # reads before running; the test waits as they would.
    page.wait_for_function("() => !!Jupyter.notebook.kernel.comm_manager.targets['jupyter.widget']", timeout=60_000)
    page.wait_for_timeout(15_000)
    page.evaluate("() => Jupyter.notebook.execute_all_cells()")
    page.wait_for_timeout(2000)
    page.wait_for_function(ALL_DONE, timeout=timeout_s * 1000)


def _move_slider(page, slider) -> None:
    """One step right, as a learner's keyboard does (jQuery UI's handle in ipywidgets 7); a drag if keys fail."""
    handle = slider.locator(".ui-slider-handle").first
    readout = slider.locator(".widget-readout").first
    value = readout.text_content()
    handle.scroll_into_view_if_needed()
    handle.click()
    handle.press("ArrowRight")
    page.wait_for_timeout(1000)
    if readout.text_content() == value:
        box = handle.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 40, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
    assert readout.text_content() != value, "the slider did not move"


def _wait_new_picture(page, image, old_src: str) -> None:
    page.wait_for_function("([el, old]) => el.getAttribute('src') !== old", arg=[image.element_handle(), old_src],
                           timeout=90_000)
    page.wait_for_timeout(1500)


def test_classic_notebook_runs_a_chapter_with_live_widgets_on_ipywidgets_7(tmp_path):
    versions = subprocess.run([COLAB_PYTHON, "-c", "import ipywidgets, notebook, widgetsnbextension as w; "
                               "print(ipywidgets.__version__, notebook.__version__, w.__version__)"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert versions[0].startswith("7.") and versions[1].startswith("6."), versions
    deps = subprocess.run([COLAB_PYTHON, "-c", "import num2words, sacrebleu, pyrealb, tqdm"], capture_output=True,
                          text=True)
    assert deps.returncode == 0, ("the Colab-like environment lacks the package's dependencies: run "
                                  f"tests/test_colab.py first (its set-up cells install them): {deps.stderr[-300:]}")
    nb = nbformat.read(CHAPTER, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, tmp_path / CHAPTER.name)
    write_notebook(tmp_path / "sampling.ipynb", [SAMPLING, 'widgets.sampling_widget(model, data.tokenizer, '
                                                           '"The small", max_new_tokens=30)'])
    with classic_notebook(tmp_path) as (url, token, log), chromium_page() as page:
        try:
            _run_all(page, url, token, CHAPTER.name)
        finally:
            screenshot(page, "notebook6-chapter01-after-run-all")
        errors = page.evaluate(ERRORS)
        assert not errors, (errors, page.console_errors)

        # the temperature explorer: move "scale", see a new picture
        explorer = page.locator(".tfm-temperature-explorer").first
        explorer.wait_for(timeout=60_000)
        image = explorer.locator("img.tfm-explorer-figure")
        page.wait_for_function("el => !!el.getAttribute('src')", arg=image.element_handle(), timeout=60_000)
        explorer.scroll_into_view_if_needed()
        before_src = image.get_attribute("src")
        before = screenshot(page, "notebook6-temperature-before", explorer).read_bytes()
        _move_slider(page, explorer.locator(".tfm-control-scale"))
        _wait_new_picture(page, image, before_src)
        after = screenshot(page, "notebook6-temperature-after", explorer).read_bytes()
        assert after != before

        # the quiz: choose an answer, press Check, read the feedback
        quiz = page.locator(".tfm-quiz").first
        quiz.scroll_into_view_if_needed()
        left = quiz.bounding_box()["x"]
        for radio in quiz.locator(".tfm-quiz-choice input[type=radio]").all():  # long options wrap, buttons stay
            radio.scroll_into_view_if_needed()
            assert radio.is_visible() and radio.bounding_box()["x"] >= left, "a radio button is pushed out of view"
        question = quiz.locator(".tfm-quiz-question").first
        feedback = question.locator(".tfm-quiz-feedback")
        assert feedback.text_content().strip() == ""
        question.locator(".tfm-quiz-choice input[type=radio]").first.check()
        question.locator("button.tfm-quiz-check").click()
        try:
            page.wait_for_function("el => el.textContent.trim().length > 0", arg=feedback.element_handle(),
                                   timeout=30_000)
        finally:
            screenshot(page, "notebook6-quiz-answered", quiz)
        assert feedback.locator(".tfm-quiz-right, .tfm-quiz-wrong").count() == 1
        assert not page.evaluate(ERRORS)
        page.evaluate("() => { Jupyter.notebook.set_dirty(false); Jupyter.notebook.kernel.kill(); }")

        # chapter 14's sampling widget, on a tiny model: change the temperature (a second tab)
        page = page.context.new_page()
        page.console_errors = []
        try:
            _run_all(page, url, token, "sampling.ipynb", timeout_s=300)
        finally:
            screenshot(page, "notebook6-sampling-after-run-all")
        assert not page.evaluate(ERRORS), page.evaluate(ERRORS)
        widget = page.locator(".tfm-sampling-widget").first
        try:
            widget.wait_for(timeout=60_000)
        except Exception:
            raise AssertionError(f"no sampling widget on the page; JavaScript errors: {page.console_errors}; "
                                 f"outputs: {page.evaluate(OUTPUTS)}") from None
        image = widget.locator("img.tfm-explorer-figure")
        page.wait_for_function("el => !!el.getAttribute('src')", arg=image.element_handle(), timeout=60_000)
        before_src = image.get_attribute("src")
        before = screenshot(page, "notebook6-sampling-before", widget).read_bytes()
        _move_slider(page, widget.locator(".tfm-control-temperature"))
        _wait_new_picture(page, image, before_src)
        after = screenshot(page, "notebook6-sampling-after", widget).read_bytes()
        assert after != before and not page.evaluate(ERRORS)
