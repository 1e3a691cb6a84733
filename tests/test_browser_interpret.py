"""Chapter 17's head explorer in a real JupyterLab page, driven by headless Chromium: pick a model, a layer and
a head, and the picture (map, gold links, scores) changes. Screenshots go to ``artifacts/screenshots/``."""
from __future__ import annotations

import pytest

from browser import (browser_missing, cell_errors, chromium_page, jupyter_lab, open_notebook, run_all_cells, screenshot,
                     write_notebook)
from test_browser_widgets import _move_and_check

pytestmark = [pytest.mark.browser, pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")]

SETUP = """\
import torch
from tfm_lesson import widgets
g = torch.Generator().manual_seed(0)
cross = torch.rand(2, 4, 5, 6, generator=g).softmax(-1)
toy = torch.rand(2, 4, 9, 9, generator=g).tril().softmax(-1)
views = {
    "translation": dict(maps=cross, scores={"AER": torch.rand(2, 4, generator=g)},
                        x_tokens=["the", "red", "car", "left", ".", "</s>"],
                        y_tokens=["la", "voiture", "rouge", "est", "partie"],
                        sure={(0, 0), (1, 2), (2, 1)}, possible={(0, 0), (1, 2), (2, 1), (3, 3), (4, 3)}),
    "copying": dict(maps=toy, scores={"prefix matching": torch.rand(2, 4, generator=g),
                                      "previous token": torch.rand(2, 4, generator=g)}),
}
"""
CELL = "widgets.head_scores_explorer(views)"


def test_head_scores_explorer_moves_in_the_browser(tmp_path):
    write_notebook(tmp_path / "heads.ipynb", [SETUP, CELL])
    with jupyter_lab(tmp_path) as lab, chromium_page() as page:
        open_notebook(page, lab, "heads.ipynb")
        run_all_cells(page)
        page.wait_for_selector(".tfm-head-scores-explorer img.tfm-explorer-figure[src]", timeout=60_000)
        explorer = page.locator(".tfm-head-scores-explorer")
        assert explorer.count() == 1
        screenshot(page, "head_scores_explorer-start", explorer)
        for label, action, arg in (("layer", "slider", 1), ("head", "slider", 2), ("model", "select", "copying"),
                                   ("head", "slider", 1)):
            _move_and_check(page, explorer, label, action, arg, f"head_scores_explorer-{label}")
        screenshot(page, "head_scores_explorer-end", explorer)
        assert cell_errors(page) == []
