"""Every chapter ends with its licence and how to cite it: one markdown cell, the same in every chapter but for the
chapter's number and title, made from the release (``REPOSITORY``, ``REF``, the version of pyproject.toml).

    python tools/chapter_footer.py                 # every chapter in notebooks/ (and its paired .py)
    python tools/chapter_footer.py notebooks/03_multi_head_attention.ipynb

Adds the cell at the end, or rewrites it when the release moved (idempotent). Student copies keep it: it is how a
copy handed to a class carries the attribution CC BY asks for. ``CITATION.cff`` at the root says the same for
reference managers (tests/test_release.py keeps the two and the version in step).
"""
from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tfm_lesson.course import REF, REPOSITORY, chapters, paired_script  # noqa: E402

HEADING = "## Licence and how to cite"
FOOTER_ID = "licence-and-citation"  # the cell's nbformat id
TITLE = 'tfm_lesson: the Transformer of "Attention Is All You Need", built step by step in PyTorch'
YEAR = 2026  # of the first release; CITATION.cff has the same
_CHAPTER_TITLE = re.compile(r"^# (\d\d) · (.+)$", re.M)


def version() -> str:
    """The version of pyproject.toml (the release the chapters' links and set-up cells point at is ``v`` + it)."""
    return re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def footer(nb: Any, repository: str = REPOSITORY, ref: str = REF) -> str:
    """The licence-and-citation cell of chapter ``nb`` (its number and title read from its ``# NN · Title``)."""
    found = next((m for c in nb["cells"] if c.get("cell_type") == "markdown"
                  for m in [_CHAPTER_TITLE.search(c.get("source", ""))] if m), None)
    if found is None:
        raise ValueError("the notebook has no '# NN · Title' heading: not a chapter")
    number, title = found.groups()
    home = f"https://github.com/{repository}"
    licence = ("The text and figures of this chapter are licensed under Creative Commons Attribution "
               "([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under "
               f"the MIT licence ([LICENSE]({home}/blob/{ref}/LICENSE)). You may copy, change and share them, in a "
               "course of your own too, as long as you name the source, for example:")
    cite = f"The tfm_lesson authors ({YEAR}). *{TITLE}*, chapter {number}: {title}. Version `{version()}`, {home}"
    wrap = {"width": 110, "break_long_words": False, "break_on_hyphens": False}
    return "\n".join([
        HEADING, "", textwrap.fill(licence.replace("CC BY", "CC\0BY"), **wrap).replace("\0", " "), "",
        textwrap.fill(cite, initial_indent="> ", subsequent_indent="> ", **wrap), "",
        "The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.",
    ])


def set_footer(nb: Any, repository: str = REPOSITORY, ref: str = REF) -> bool:
    """Put :func:`footer` as ``nb``'s last cell (replacing an earlier one); True when ``nb`` changed."""
    import nbformat

    text = footer(nb, repository, ref)
    cells = nb["cells"]
    if cells and cells[-1].get("cell_type") == "markdown" and cells[-1]["source"].startswith(HEADING):
        if cells[-1]["source"] == text:
            return False
        cells[-1]["source"] = text
        return True
    cell = nbformat.v4.new_markdown_cell(text)
    if "id" in cell and not any(c.get("id") == FOOTER_ID for c in cells):
        cell["id"] = FOOTER_ID  # the same in every run of the command
    cells.append(cell)
    return True


def update(path: Path) -> bool:
    """Set the footer of chapter ``path`` in the .ipynb and its paired .py (jupytext, outputs kept)."""
    import nbformat
    from jupytext.cli import jupytext

    from tfm_lesson.course.cells import write_notebook

    nb = nbformat.read(path, as_version=4)
    changed = set_footer(nb)
    if changed:
        write_notebook(nb, path)
    script = paired_script(path)
    in_script = script.exists() and "\n# " + footer(nb).split("\n")[-1] in script.read_text()
    if script.exists() and not in_script:  # the notebook is the newer file: --sync writes the .py from it
        jupytext(["--sync", "--quiet", str(path)])
        changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/chapter_footer.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: every chapter in notebooks/)")
    args = parser.parse_args(argv)
    for path in args.notebooks or chapters(ROOT / "notebooks"):
        print(f"{path}: {'footer written' if update(path) else 'footer current'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
