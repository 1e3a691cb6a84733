"""The instructor kit: student copies, the table of contents, and the Jupyter Book built from a clean checkout."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import nbformat
import pytest
import yaml

from tfm_lesson import course

from conftest import ROOT

NOTEBOOKS = course.chapters(ROOT / "notebooks")
WITH_SOLUTIONS = [p for p in NOTEBOOKS if any(course._is_solution(c) for c in nbformat.read(p, as_version=4).cells)]


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [ch["file"] for part in toc["parts"] for ch in part["chapters"]]


def test_toc_lists_every_chapter_in_order():
    listed = [f.split("/", 1)[1] for f in _toc_files() if f.startswith("notebooks/")]
    assert listed == [p.stem for p in NOTEBOOKS]


def test_book_links_come_from_the_course_setting():
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    assert config["repository"]["url"] == f"https://github.com/{course.REPOSITORY}"
    assert config["repository"]["branch"] == course.BRANCH
    notes = (ROOT / "book" / "instructors.md").read_text() + (ROOT / "README.md").read_text()
    for url in re.findall(r"https://colab\.research\.google\.com/\S+?\.ipynb", notes):
        assert url == course.colab_url(url), f"stale Colab link {url}"


@pytest.mark.parametrize("path", WITH_SOLUTIONS, ids=lambda p: p.stem)
def test_student_copy_has_no_solution_and_restores_exactly(path):
    original = nbformat.read(path, as_version=4)
    student = course.student_copy(original)
    solutions = [c.source for c in original.cells if course._is_solution(c)]
    student_code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    for source in solutions:
        body = [ln for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
        survivors = [ln for ln in body if len(ln.strip()) > 25 and ln in student_code.splitlines()
                     and ln not in "\n".join(c.source for c in original.cells if not course._is_solution(c))]
        assert not survivors, f"solution code survived in the student copy: {survivors[:3]}"
    stubs = [c for c in student.cells if course._is_solution(c)]
    assert stubs and all(c.source == course.STUDENT_STUB and not c.outputs for c in stubs)
    assert course.restore(student, original) == original
    assert course.student_copy(original) == student  # deterministic


def test_student_copy_command_and_run_alone(tmp_path):
    """The instructor workflow for one chapter: write its student copy, run it alone top to bottom."""
    chapter = next(p for p in WITH_SOLUTIONS if p.name.startswith("01_"))
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "student", str(chapter), "--out", str(tmp_path)],
                   check=True, cwd=ROOT)
    copy = tmp_path / chapter.name
    nb = nbformat.read(copy, as_version=4)
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    checks = [c for c in nb.cells if "raises-exception" in c.metadata.get("tags", ())]
    assert checks, "no checker cell follows a solution stub"
    for cell in checks:  # each unsolved exercise's checker ran and told the learner what is wrong
        assert any(o.output_type == "error" and o.ename in ("Mistake", "AssertionError") for o in cell.outputs), cell.source
    other_errors = [c.source[:60] for c in nb.cells if c.cell_type == "code" and c not in checks
                    and any(o.output_type == "error" for o in c.outputs)]
    assert not other_errors
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "restore", str(copy), "--from", str(ROOT / "notebooks")],
                   check=True, cwd=ROOT)
    restored = nbformat.read(copy, as_version=4)
    assert [c.source for c in restored.cells] == [c.source for c in nbformat.read(chapter, as_version=4).cells]


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the book once, from a copy of book/ and notebooks/ (as in a clean checkout)."""
    root = tmp_path_factory.mktemp("clean")
    shutil.copytree(ROOT / "book", root / "book", ignore=shutil.ignore_patterns("_build", "notebooks", "_extra"))
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "book.py"), "build", "--book", str(root / "book"),
                           "--notebooks", str(root / "notebooks")], cwd=root, capture_output=True, text=True,
                          timeout=900)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"the book build failed:\n{log[-6000:]}"
    return root / "book" / "_build" / "html"


@pytest.mark.slow
def test_book_has_every_chapter_with_a_figure(built_book):
    assert (built_book / "intro.html").exists() and (built_book / "instructors.html").exists()
    for path in NOTEBOOKS:
        page = built_book / "notebooks" / f"{path.stem}.html"
        assert page.exists(), f"no page for {path.name}"
        html = page.read_text()
        assert re.search(r'<img[^>]+src="[^"]+\.png"', html), f"{page.name} shows no figure"
        assert "Traceback" not in html, f"{page.name} shows a traceback"
    assert (built_book / "mathjax" / "MathJax.js").exists()
    solution_page = (built_book / "notebooks" / f"{WITH_SOLUTIONS[0].stem}.html").read_text()
    assert "tag_hide-input" in solution_page  # solutions collapsed behind a toggle


@pytest.fixture(scope="module")
def book_server(built_book):
    """The built book served over HTTP on 127.0.0.1, as a reader's browser would get it."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(built_book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("page_name", ["01_attention", "09_the_transformer"])
def test_book_page_renders_math_and_figures(book_server, page_name):
    from browser import chromium_page, require_browser, screenshot

    require_browser()
    with chromium_page(width=1300, height=1000) as page:
        failed: list[str] = []
        page.on("requestfailed", lambda request: failed.append(request.url))
        page.goto(f"{book_server}/notebooks/{page_name}.html")
        # MathJax typesets asynchronously: wait until its queue is empty and every formula has output
        page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 "
                               "&& document.querySelectorAll('.math.notranslate').length > 0 "
                               "&& document.querySelectorAll('.MathJax_CHTML, .MathJax').length > 0", timeout=60_000)
        state = page.evaluate("""() => ({
            formulas: document.querySelectorAll('.math.notranslate').length,
            typeset: document.querySelectorAll('.MathJax_CHTML, .MathJax').length,
            mathErrors: document.querySelectorAll('.MathJax_Error, merror').length,
            rawTex: [...document.querySelectorAll('.math.notranslate')].filter(e => e.textContent.includes('\\\\(')).length,
            figures: [...document.querySelectorAll('img')].filter(i => i.src.includes('_images/'))
                                                          .map(i => [i.complete, i.naturalWidth]),
        })""")
        screenshot(page, f"book_{page_name}")
        figure = page.locator("img[src*='_images/']").first
        figure.scroll_into_view_if_needed()
        screenshot(page, f"book_{page_name}_figure")
    # MathJax 2 probes for its TeX web fonts before falling back to the STIX-Web fonts that ship with it
    failed = [url for url in failed if url != "about:blank" and "/mathjax/fonts/HTML-CSS/TeX/" not in url]
    assert not failed, f"requests failed: {failed[:5]}"
    assert state["typeset"] >= state["formulas"] > 0 and state["mathErrors"] == 0 and state["rawTex"] == 0, state
    assert state["figures"] and all(done and width > 100 for done, width in state["figures"]), state["figures"]
