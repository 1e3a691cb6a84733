"""Guards on what learners read: no markdown heading hidden in a code cell, none of our own process words in the
chapters or the book, and every cell whose output is deterministic (a checker's verdict, a parity boolean) compared
by nbval, so that a stale stored output fails the suite. One test per chapter, so a failure names its chapter."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BOOK_PAGES = sorted(p for p in (ROOT / "book").rglob("*.md") if "_build" not in p.parts)

# a comment line that is really a markdown heading: "# ## Masks from pad ids", "# # Title"
HEADING_IN_CODE = re.compile(r"^\s*#\s*#{1,6}\s+\S")

# words of how this course was made, which mean nothing to a learner (kept short and specific: each pattern had
# no false positive in the chapters and the book when it was added; a legitimate use can be reworded)
PROCESS_WORDS = [
    r"\bthe target is met\b",
    r"\btarget met\b",
    r"\bload average",
    r"\bother jobs\b",
    r"\bjobs shared the machine\b",
    r"\bthe seeds(?:'|’)",  # "the seeds' designs": our name for the reference implementations (random seeds are fine)
    r"\bseeds(?:'|’) designs\b",
    r"\bthe helpers?\b",
    r"\bhelper (?:session|agent)s?\b",
    r"\bthe issue\b",
    r"\bissue #?\d+\b",
    r"\bCI (?:run|job)s?\b",
    r"\bthe lead\b",
]
PROCESS = re.compile("|".join(PROCESS_WORDS), re.IGNORECASE)

CHECKER_CALL = re.compile(r"(?<![\w.])check_\w+\(")
PARITY = re.compile(r"\b(?:allclose|equal)\(")


def _code_cells(nb) -> list[tuple[int, nbformat.NotebookNode]]:
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _id(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("path", CHAPTERS, ids=_id)
def test_no_markdown_heading_in_a_code_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    found = [f"cell {i}: {line.strip()}" for i, cell in _code_cells(nb) for line in cell.source.splitlines()
             if HEADING_IN_CODE.match(line)]
    assert not found, (f"{path.name}: markdown headings inside code cells (a missing `# %% [markdown]` marker?):\n  "
                       + "\n  ".join(found))


def _process_hits(text: str) -> list[str]:
    return [text[max(0, m.start() - 40):m.end() + 30].replace("\n", " ") for m in PROCESS.finditer(text)]


@pytest.mark.parametrize("path", CHAPTERS, ids=_id)
def test_no_process_words_in_a_chapter(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    found = [f"cell {i}: ...{hit}..." for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
             for hit in _process_hits(cell.source)]
    assert not found, (f"{path.name}: words of our process in learner-facing text; say what the learner sees, on "
                       "what hardware, in how long:\n  " + "\n  ".join(found))


@pytest.mark.parametrize("path", BOOK_PAGES, ids=lambda p: str(p.relative_to(ROOT / "book")))
def test_no_process_words_in_a_book_page(path: Path) -> None:
    found = _process_hits(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name}: words of our process in the book:\n  " + "\n  ".join(found)


def _needs_comparison(cell: nbformat.NotebookNode) -> str | None:
    """Why this cell's output is deterministic and must be compared: it calls a checker or prints a parity
    boolean. None otherwise."""
    if "solution" in cell.metadata.get("tags", ()):
        return None
    code = [line for line in cell.source.splitlines() if not line.lstrip().startswith("#")]
    if any(CHECKER_CALL.search(line) for line in code) and not any(line.startswith("def check_") for line in code):
        return "calls a checker"
    if "print(" in cell.source and any(PARITY.search(line) for line in code):
        return "prints a parity boolean"
    return None


@pytest.mark.parametrize("path", CHAPTERS, ids=_id)
def test_deterministic_cells_are_compared(path: Path) -> None:
    """A cell that calls a checker or prints a parity boolean starts with `# NBVAL_CHECK_OUTPUT` (or, where its
    output legitimately differs between runs or devices, says so with `# NBVAL_IGNORE_OUTPUT`)."""
    nb = nbformat.read(path, as_version=4)
    unmarked = []
    for i, cell in _code_cells(nb):
        why = _needs_comparison(cell)
        if why and "NBVAL_CHECK_OUTPUT" not in cell.source and "NBVAL_IGNORE_OUTPUT" not in cell.source:
            unmarked.append(f"cell {i} ({why}): {cell.source.strip().splitlines()[0][:70]}")
    assert not unmarked, (f"{path.name}: cells whose output is deterministic but not compared by nbval; start "
                          "them with `# NBVAL_CHECK_OUTPUT`:\n  " + "\n  ".join(unmarked))


def test_the_guards_catch_what_they_guard() -> None:
    """The patterns themselves: each catches its case and leaves ordinary prose alone."""
    assert HEADING_IN_CODE.match("# ## Masks from pad ids") and HEADING_IN_CODE.match("# # Title")
    assert not HEADING_IN_CODE.match("# NBVAL_CHECK_OUTPUT") and not HEADING_IN_CODE.match("x = 1  # #3 is odd")
    assert _process_hits("about seven other jobs shared the machine (load average about 5)")
    assert _process_hits("the seeds' designs, done right") and _process_hits("a CI run measured it")
    assert not _process_hits("each variant trains with three seeds, and the seeds are shared")
    assert not _process_hits("the leading (batch, seq_len) axes ride along")
    marked = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\ncheck_gelu(my_gelu)")
    assert _needs_comparison(nbformat.v4.new_code_cell("check_gelu(my_gelu)")) == "calls a checker"
    assert _needs_comparison(nbformat.v4.new_code_cell("print(torch.allclose(a, b))")) == "prints a parity boolean"
    assert _needs_comparison(nbformat.v4.new_code_cell("from tfm_lesson.checks import check_gelu")) is None
    assert "NBVAL_CHECK_OUTPUT" in marked.source
