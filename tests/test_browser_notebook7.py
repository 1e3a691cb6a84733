"""Notebook 7 (`jupyter notebook`) and JupyterLab, driven by headless Chromium: a chapter runs, its solutions are
folded, and one explorer's control moves its picture.

Chapter 01 is copied into a private folder, its solution cells folded (``course.fold_solutions``, as every
chapter is), and opened in Notebook 7: each solution shows as a folded placeholder; Run All runs every cell
without an error; the temperature explorer's ``scale`` slider, moved one step, changes the picture. In
JupyterLab the same copy opens with the same cells folded.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from browser import ROOT, browser_missing, chromium_page, jupyter_lab, jupyter_server, screenshot
from tfm_lesson import course

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")]

CHAPTER = ROOT / "notebooks" / "01_attention.ipynb"
PANEL = ".jp-NotebookPanel"
# every code cell numbered (a folded cell's prompt is hidden: its outputs' prompt counts), none queued or running
PROMPTS_DONE = f"""() => {{ const cells = [...document.querySelectorAll('{PANEL} .jp-CodeCell')];
    const shown = cells.filter(c => !c.querySelector('.jp-InputPlaceholder'));
    const numbered = shown.every(c => /\\[\\d+\\]/.test(c.querySelector('.jp-InputPrompt').textContent));
    const busy = cells.some(c => /\\[\\*\\]/.test(c.querySelector('.jp-InputPrompt').textContent));
    return shown.length > 0 && numbered && !busy; }}"""
ERRORS = f"""() => [...document.querySelectorAll('{PANEL} .jp-OutputArea-output')].filter(e =>
    e.matches('[data-mime-type="application/vnd.jupyter.error"]')
    || /Traceback \\(most recent call last\\)|Error displaying widget|Failed to display Jupyter Widget/
        .test(e.textContent)).map(e => e.textContent.slice(0, 500))"""


# JupyterLab 4 and Notebook 7 put only the cells in view into the page; the tests count every cell.
NO_WINDOWING = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}


@contextmanager
def notebook7(root_dir: Path, timeout: float = 120.0):
    """`jupyter notebook` (Notebook 7) serving ``root_dir`` on 127.0.0.1 with private settings; stopped on exit."""
    pytest.importorskip("notebook", reason="Notebook 7 is not installed (pip install notebook)")
    with jupyter_server("notebook", root_dir, timeout, settings=NO_WINDOWING, env={"TFM_DEVICE": "cpu"}) as server:
        yield server


@pytest.fixture(scope="module")
def folded_chapter(tmp_path_factory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("nb7")
    nb = nbformat.read(CHAPTER, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    course.fold_solutions(nb)
    nbformat.write(nb, root / CHAPTER.name)
    return root, sum(course._is_solution(c) for c in nb.cells)


def _wait_for_cells(page, timeout_s: float = 120) -> None:
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=timeout_s * 1000)
    page.wait_for_timeout(1500)
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    if dialog.count() and dialog.first.is_visible():
        dialog.first.locator("button.jp-mod-accept").click()


def test_notebook7_runs_a_chapter_with_folded_solutions_and_a_live_control(folded_chapter):
    root, solutions = folded_chapter
    assert solutions >= 3
    with notebook7(root) as server, chromium_page() as page:
        page.goto(f"{server.url}notebooks/{CHAPTER.name}?token={server.token}")
        _wait_for_cells(page)
        folded = page.locator(f"{PANEL} .jp-Cell .jp-InputPlaceholder")
        assert folded.count() == solutions, f"{folded.count()} folded inputs, {solutions} solution cells"
        page.wait_for_function("() => !!document.querySelector('.jp-Notebook-ExecutionIndicator, "
                               ".jp-NotebookKernelStatus, #jp-kernel-status, .jp-KernelStatus')", timeout=60_000)
        page.wait_for_timeout(3000)  # the kernel starts
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        try:
            page.wait_for_function(PROMPTS_DONE, timeout=400_000)
        finally:
            screenshot(page, "notebook7-after-run-all")
        errors = page.evaluate(ERRORS)
        assert not errors, errors
        explorer = page.locator(".tfm-temperature-explorer")
        explorer.wait_for(timeout=60_000)
        image = explorer.locator("img.tfm-explorer-figure")
        page.wait_for_function("el => !!el.getAttribute('src')", arg=image.element_handle(), timeout=60_000)
        explorer.scroll_into_view_if_needed()
        before_src = image.get_attribute("src")
        before = screenshot(page, "notebook7-temperature-before", image).read_bytes()
        handle = explorer.locator(".tfm-control-scale .noUi-handle")
        value = handle.get_attribute("aria-valuenow")
        handle.scroll_into_view_if_needed()
        handle.click()  # a learner's click gives the handle the focus
        handle.press("ArrowRight")
        page.wait_for_timeout(1000)
        if handle.get_attribute("aria-valuenow") == value:  # drag it instead
            box = handle.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] / 2 + 40, box["y"] + box["height"] / 2, steps=5)
            page.mouse.up()
        assert handle.get_attribute("aria-valuenow") != value, "the slider did not move"
        page.wait_for_function("([el, old]) => el.getAttribute('src') !== old", arg=[image.element_handle(), before_src],
                               timeout=60_000)
        page.wait_for_timeout(1500)
        after = screenshot(page, "notebook7-temperature-after", image).read_bytes()
        assert handle.get_attribute("aria-valuenow") != value and after != before
        assert not page.evaluate(ERRORS)
        screenshot(page, "notebook7-page")


def test_jupyterlab_opens_the_solutions_folded(folded_chapter):
    root, solutions = folded_chapter
    overrides = root / "lab-settings"
    overrides.mkdir(exist_ok=True)
    (overrides / "overrides.json").write_text(json.dumps(NO_WINDOWING))
    with jupyter_lab(root, extra_args=(f"--LabApp.app_settings_dir={overrides}",)) as lab, chromium_page() as page:
        page.goto(lab.lab_url(CHAPTER.name) + "&reset")
        _wait_for_cells(page)
        folded = page.locator(f"{PANEL}:not(.lm-mod-hidden) .jp-Cell .jp-InputPlaceholder")
        assert folded.count() == solutions, f"{folded.count()} folded inputs, {solutions} solution cells"
        screenshot(page, "jupyterlab-folded-solutions")
