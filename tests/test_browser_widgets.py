"""Every tfm_lesson explorer in a real JupyterLab page, driven by headless Chromium.

The test writes a small notebook that calls each widget of the contract, starts JupyterLab on 127.0.0.1,
runs all cells from the Run menu, then moves every control of every explorer (a slider: ArrowRight on its
handle; a text box: typing; a drop-down, a toggle, a checkbox: choosing) and checks that the picture
changed: a new image ``src`` and different pixels. No cell may show an error. Before/after screenshots
go to ``artifacts/screenshots/``.
"""
from __future__ import annotations

import re
import shutil
import time

import pytest

from browser import (ROOT, browser_missing, cell_errors, chromium_page, jupyter_lab, open_notebook, run_all_cells,
                           screenshot, write_notebook)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")]

SETUP = """\
import torch
import tfm_lesson
from tfm_lesson import widgets
from tfm_lesson.data import Vocab
vocab = Vocab.build(["the cat sat on the mat", "a dog ran in the park", "le chat est assis sur le tapis"])
torch.manual_seed(0)
model = tfm_lesson.Transformer(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=32, heads=4, d_ff=64,
                               num_encoder_layers=2, num_decoder_layers=2, dropout=0.0)
def reverse_words(text):
    return " ".join(reversed(text.split()))
"""

CELLS = {
    "temperature_explorer": "widgets.temperature_explorer()",
    "mask_explorer": "widgets.mask_explorer()",
    "head_explorer": "widgets.head_explorer()",
    "positional_explorer": "widgets.positional_explorer()",
    "attention_explorer": 'widgets.attention_explorer(model, vocab, source="the cat sat on the mat")',
    "translate_widget": 'widgets.translate_widget(reverse_words, "the cat sat")',
}

# (control label, action, argument) for each explorer: every control it has
ACTIONS = {
    "temperature_explorer": [("scale", "slider", 1), ("query", "slider", 1)],
    "mask_explorer": [("length 0", "slider", 1), ("length 1", "slider", 1), ("causal", "check", None),
                      ("inspect", "select", "sentence 1")],
    "head_explorer": [("head", "slider", 1), ("show", "toggle", "scores")],
    "positional_explorer": [("dimension", "slider", 1), ("offset", "slider", 1)],
    "attention_explorer": [("source", "text", "the zebra sat on the mat"), ("target", "text", "le chat"),
                           ("kind", "select", "cross-attention (decoder → encoder)"), ("layer", "select", "1"),
                           ("head", "slider", 1)],
    "translate_widget": [("source", "type", " on the mat")],
}


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory):
    """JupyterLab + Chromium with the widgets notebook open and all its cells run."""
    root = tmp_path_factory.mktemp("browser_widgets")
    write_notebook(root / "widgets.ipynb", [SETUP, *CELLS.values()])
    with jupyter_lab(root) as lab, chromium_page() as page:
        open_notebook(page, lab, "widgets.ipynb")
        run_all_cells(page)
        for name in CELLS:  # each explorer's live view, with its picture
            page.wait_for_selector(f".tfm-{name.replace('_', '-')} img.tfm-explorer-figure[src]", timeout=60_000)
        screenshot(page, "notebook_after_run_all")
        yield page, lab


CONTROL_STATE = """el => {
    const readout = el.querySelector('.widget-readout');
    if (readout) return readout.textContent.trim();
    const select = el.querySelector('select');
    if (select) return select.options[select.selectedIndex].textContent;
    const box = el.querySelector('input[type=checkbox]');
    if (box) return String(box.checked);
    const pressed = el.querySelector('button.mod-active');
    if (pressed) return pressed.textContent.trim();
    const input = el.querySelector('input');
    return input ? input.value : el.textContent;
}"""


def _settle(page, image, old_src: str, quiet_s: float = 1.5, timeout_s: float = 60) -> None:
    """Wait until the picture has changed and then stayed the same for ``quiet_s`` (all renders done)."""
    page.wait_for_function("([el, old]) => el.getAttribute('src') !== old", arg=[image.element_handle(), old_src],
                           timeout=timeout_s * 1000)
    deadline, last, since = time.monotonic() + timeout_s, image.get_attribute("src"), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the picture kept changing"
        page.wait_for_timeout(200)
        now = image.get_attribute("src")
        if now != last:
            last, since = now, time.monotonic()


CONTROL_KIND = """el => el.querySelector('.noUi-handle') ? 'slider'
    : el.querySelector('select') ? 'select'
    : el.querySelector('input[type=checkbox]') ? 'check'
    : el.querySelector('button') ? 'toggle'
    : el.querySelector('input') ? 'text' : 'unknown'"""


def _generic_action(control) -> tuple[str, object]:
    """How a learner would move a control found on a page: its kind and a new value."""
    kind = control.evaluate(CONTROL_KIND)
    if kind == "select":
        current = control.evaluate(CONTROL_STATE)
        other = [o for o in control.locator("option").all_text_contents() if o != current]
        return kind, other[0]
    if kind == "toggle":
        other = control.locator("button:not(.mod-active)").first.text_content().strip()
        return kind, other
    if kind == "text":
        return kind, control.locator("input").input_value() + " the"
    return kind, 1


def _act(page, control, action: str, arg) -> None:
    if action == "slider":  # one step right; at the right end, one step left
        handle = control.locator(".noUi-handle")
        at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
        handle.focus()
        for _ in range(arg):
            handle.press("ArrowLeft" if at_end else "ArrowRight")
    elif action == "check":
        control.locator("input[type=checkbox]").click()
    elif action == "select":
        control.locator("select").select_option(label=arg)
    elif action == "toggle":
        control.locator("button", has_text=arg).click()
    elif action == "text":  # continuous_update=False: Enter sends the value
        box = control.locator("input")
        box.fill(arg)
        box.press("Enter")
    elif action == "type":  # translate as you type: key by key
        box = control.locator("input")
        box.click()
        box.press("End")
        box.press_sequentially(arg, delay=40)
    else:
        raise ValueError(action)


def _move_and_check(page, explorer, label: str, action: str, arg, slug: str) -> None:
    """Move one control of ``explorer`` (a locator) and check that it moved and the picture changed."""
    image = explorer.locator("img.tfm-explorer-figure")
    control = explorer.locator("." + "tfm-control-" + "".join(c if c.isalnum() else "-" for c in label))
    assert control.count() == 1, f"{slug}: control {label!r} not found"
    control.scroll_into_view_if_needed()
    src = image.get_attribute("src")
    state = control.evaluate(CONTROL_STATE)
    before = screenshot(page, f"{slug}-before", image).read_bytes()
    _act(page, control, action, arg)
    _settle(page, image, src)
    moved = control.evaluate(CONTROL_STATE)
    assert moved != state, f"{slug}: {label!r} did not move (still {state!r})"
    after = screenshot(page, f"{slug}-after", image).read_bytes()
    assert after != before, f"{slug}: moving {label!r} ({state!r} -> {moved!r}) changed the src, not the picture"
    status = explorer.locator("span[style*='D55E00']")
    assert status.count() == 0, f"{slug}: {label!r}: {status.first.text_content()}"


@pytest.mark.parametrize("name", list(CELLS))
def test_each_control_changes_the_figure(lab_page, name: str) -> None:
    page, _ = lab_page
    explorer = page.locator(f".tfm-{name.replace('_', '-')}")
    assert explorer.count() == 1, f"{name}: no live widget on the page"
    for label, action, arg in ACTIONS[name]:
        _move_and_check(page, explorer, label, action, arg, f"{name}-{label}")
    assert cell_errors(page) == []


def test_no_cell_shows_an_error(lab_page) -> None:
    page, _ = lab_page
    assert cell_errors(page) == []
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_text_contents()
    assert len(prompts) == 1 + len(CELLS) and all(re.search(r"\[\d+\]", p) for p in prompts), prompts
    assert page.locator(".tfm-explorer").count() == len(CELLS)


def test_saved_notebook_shows_the_static_pictures(lab_page) -> None:
    """A chapter saved with outputs (executed headless, widget views stripped) opens in JupyterLab with a
    picture for every explorer before anything runs, and no dead widget."""
    import nbformat
    from nbclient import NotebookClient

    from tfm_lesson.course import strip_widget_views

    page, lab = lab_page
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in [SETUP, *CELLS.values()]])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    assert strip_widget_views(nb) == len(CELLS)
    nbformat.write(nb, lab.root_dir / "saved.ipynb")
    open_notebook(page, lab, "saved.ipynb")
    images = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedImage img")
    images.nth(len(CELLS) - 1).wait_for()
    assert images.count() == len(CELLS)
    assert all(img.evaluate("el => el.naturalWidth") > 300 for img in images.all())
    assert cell_errors(page) == []
    screenshot(page, "saved_notebook_static_pictures")


CHAPTER = ROOT / "notebooks" / "01_attention.ipynb"


@pytest.mark.skipif(not CHAPTER.exists(), reason="chapter 01 is not written yet")
def test_real_chapter_runs_and_its_explorer_moves(lab_page) -> None:
    """Chapter 01 as learners get it (a copy, so JupyterLab's autosave never touches the repository):
    Run All Cells, no error, then every control of its explorer changes the picture."""
    page, lab = lab_page  # one Playwright per thread: reuse the module's server and browser
    shutil.copy(CHAPTER, lab.root_dir / CHAPTER.name)
    open_notebook(page, lab, CHAPTER.name)
    run_all_cells(page)
    assert cell_errors(page) == []
    explorers = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tfm-explorer")
    assert explorers.count() >= 1, "chapter 01 shows no live explorer"
    for e in range(explorers.count()):
        explorer = explorers.nth(e)
        classes = explorer.locator("[class*='tfm-control-']").evaluate_all(
            "els => els.map(el => [...el.classList].find(c => c.startsWith('tfm-control-')))")
        assert classes, "an explorer without controls"
        for css in classes:
            label = css[len("tfm-control-"):]
            control = explorer.locator("." + css)
            action, arg = _generic_action(control)
            _move_and_check(page, explorer, label, action, arg, f"chapter01-{e}-{label}")
    assert cell_errors(page) == []
    screenshot(page, "chapter01_after_moves")


def test_error_check_sees_a_failing_cell(lab_page) -> None:
    """The "no cell shows an error" checks above can fail: a traceback (rendered like stderr in JupyterLab 4)
    is found, a mere warning on stderr is not."""
    page, lab = lab_page
    write_notebook(lab.root_dir / "failing.ipynb",
                   ["import warnings; warnings.warn('only a warning')", "1 / 0", "print('not reached')"])
    open_notebook(page, lab, "failing.ipynb")
    run_all_cells(page, timeout=120)
    errors = cell_errors(page)
    assert len(errors) == 1 and "ZeroDivisionError" in errors[0], errors
