"""The built book passes an accessibility audit: axe-core (the engine behind most browser accessibility
checkers, bundled by the ``axe-playwright-python`` package) finds no serious or critical violation on the
front page and three chapter pages, and every picture carries a text alternative. Screenshots of the audited
pages go to artifacts/screenshots/."""
from __future__ import annotations

import pytest

from test_book import book_server, built_book  # noqa: F401 (fixtures: the book is built once per session)

PAGES = ["intro", "notebooks/01_attention", "notebooks/05_layer_norm_and_residuals", "notebooks/12_looking_inside"]
BLOCKING = {"serious", "critical"}


def _axe():
    try:
        from axe_playwright_python.sync_playwright import Axe
    except ImportError:
        pytest.skip("axe-playwright-python is not installed (pip install -r requirements.txt)")
    return Axe()


def _summary(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        nodes = [", ".join(n["target"]) if isinstance(n["target"], list) else str(n["target"]) for n in v["nodes"]]
        lines.append(f"{v['impact']}: {v['id']} ({v['help']}) on {len(nodes)} element(s), e.g. {nodes[:3]}")
    return "\n".join(lines)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("page_name", PAGES)
def test_book_page_has_no_serious_accessibility_violation(book_server, page_name):  # noqa: F811
    from browser import chromium_page, require_browser, screenshot

    require_browser()
    axe = _axe()
    with chromium_page(width=1300, height=1000) as page:
        page.goto(f"{book_server}/{page_name}.html")
        page.wait_for_load_state("load")
        if page_name.startswith("notebooks/"):  # math typeset first: axe then sees what a reader gets
            page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0",
                                   timeout=60_000)
        result = axe.run(page).response
        images = page.evaluate("""() => [...document.querySelectorAll('img')]
            .map(i => ({src: i.getAttribute('src'), alt: i.getAttribute('alt')}))""")
        screenshot(page, f"axe_{page_name.replace('/', '_')}")
    blocking = [v for v in result["violations"] if v.get("impact") in BLOCKING]
    assert not blocking, f"{page_name}: axe-core {result['testEngine']['version']} reports\n{_summary(blocking)}"
    figures = [i for i in images if "_images/" in (i["src"] or "")]
    if page_name.startswith("notebooks/"):
        assert figures, f"{page_name}: no figure on the page"
    undescribed = [i["src"] for i in figures if not (i["alt"] or "").strip() or len(i["alt"].split()) < 8]
    assert not undescribed, f"{page_name}: figures without a description: {undescribed[:3]}"
