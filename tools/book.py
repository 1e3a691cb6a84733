"""The course's checkout: the Jupyter Book, and the links that say where the course lives.
Repository tooling (it reads and writes the checkout's book/, notebooks/ and README.md), so it lives in tools/,
outside the learner's package; what a learner or an instructor runs on their own notebooks (execute, student,
restore, fold, setup-cell, grade, export) is ``python -m tfm_lesson.course``.

    python tools/book.py build           # the Jupyter Book in book/_build/html (offline, from the stored outputs)
    python tools/book.py badges          # set-up cells, chapter badges, README's badges and the book's launch
                                         # buttons follow REPOSITORY and REF (tfm_lesson/course/location.py)
    python tools/book.py colab-links     # one "Open in Colab" link per chapter

The book shows each explorer's static picture. No widget state is stored in the chapters, and myst-nb would
otherwise choose the widget view (an empty box, plus JavaScript from a CDN); ``nb_mime_priority_overrides`` in
``book/_config.yml`` drops the widget view from its candidates (``null``), so ``image/png`` is shown. The stored
chapters carry no widget view anyway (``tfm_lesson.course.strip_widget_views``, run by ``course execute``).
"""
from __future__ import annotations

import argparse
import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the checkout: its book/, notebooks/, README.md and package
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tfm_lesson._io import atomic_open  # noqa: E402
from tfm_lesson.course.cells import CourseError, is_setup_cell, is_solution, write_notebook  # noqa: E402
from tfm_lesson.course.solution_form import strip_title  # noqa: E402
from tfm_lesson.course import (_ANY_BADGE, COLAB_BADGE_SVG, REF, REPOSITORY, _sync_script, chapters,  # noqa: E402
                               check_location, colab_url, retarget)

__all__ = ["book_page", "prepare_book", "build_book", "update_chapter", "readme_with_badges",
           "book_config_with_location", "update_links", "main"]


# the book ------------------------------------------------------------------------------------------------------------
def book_page(nb: Any) -> Any:
    """A chapter as the book shows it: solution cells collapsed behind a toggle (``hide-input``), the set-up
    cell left out (a reader of the book has nothing to install), the Colab badge left out (the book has a launch
    button), and nbval's markers removed."""
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        if cell.get("cell_type") == "markdown" and _ANY_BADGE.search(cell["source"]):
            lines = [ln for ln in cell["source"].split("\n") if not _ANY_BADGE.fullmatch(ln.strip())]
            cell["source"] = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
        if cell.get("cell_type") != "code":
            continue
        if is_solution(cell):  # folded by the book's own toggle: not a Colab form, no #@title line
            cell["source"] = strip_title(cell["source"])
            cell.get("metadata", {}).pop("cellView", None)
        added = (["hide-input"] if is_solution(cell) else []) + (
            ["remove-cell"] if is_setup_cell(cell["source"]) else [])
        if added:
            meta = cell.setdefault("metadata", {})
            meta["tags"] = [*meta.get("tags", []), *added]
        lines = cell["source"].splitlines()
        if lines and lines[0].strip() == "# NBVAL_CHECK_OUTPUT":
            cell["source"] = "\n".join(lines[1:])
    return out


def prepare_book(book_dir: Path = ROOT / "book", notebooks_dir: Path = ROOT / "notebooks") -> list[Path]:
    """Copy the chapters into ``book/notebooks`` (as :func:`book_page` shows them) and MathJax into
    ``book/_extra``. MathJax comes from the ``jupyter_server_mathjax`` package, so the math renders offline."""
    import jupyter_server_mathjax
    import nbformat

    pages = book_dir / "notebooks"
    shutil.rmtree(pages, ignore_errors=True)
    pages.mkdir(parents=True)
    written = []
    for path in chapters(notebooks_dir):
        nb = nbformat.read(path, as_version=4)
        nbformat.write(nbformat.from_dict(book_page(nb)), pages / path.name)
        written.append(pages / path.name)
    mathjax = Path(jupyter_server_mathjax.__file__).parent / "static"
    target = book_dir / "_extra" / "mathjax"
    if not (target / "MathJax.js").exists():
        shutil.copytree(mathjax, target, dirs_exist_ok=True)
    return written


def build_book(book_dir: Path = ROOT / "book", notebooks_dir: Path = ROOT / "notebooks") -> int:
    """Prepare and build the book; warnings that matter (missing files, bad references) fail the build."""
    prepare_book(book_dir, notebooks_dir)
    jupyter_book = str(Path(sys.executable).with_name("jupyter-book"))
    cmd = [jupyter_book, "build", str(book_dir), "--all", "-W", "-n", "--keep-going"]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


# where the course lives ----------------------------------------------------------------------------------------------
def update_chapter(path: Path, repository: str = REPOSITORY, ref: str = REF) -> bool:
    """Bring chapter ``path``'s set-up cell and badge to ``repository`` at ``ref``, in the .ipynb and in its paired
    ``.py`` (same text, so the pair stays in sync; outputs stay); True when something changed. Idempotent."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    old = copy.deepcopy(nb)
    if not retarget(nb, path.name, repository, ref):
        return False
    _sync_script(path, old, nb)
    write_notebook(nb, path)
    return True


_README_ROW = re.compile(r"^\| (\d\d) \| `(\d\d_[^`]+\.ipynb)`"
                         r"(?: \[!\[Open In Colab\]\[colab-badge\]\]\[colab-\d\d\])? \|")
_LINKS_START = "<!-- Colab links: written by `python tools/book.py badges` from REPOSITORY and REF -->"
_LINKS_END = "<!-- end of Colab links -->"


def readme_with_badges(text: str, repository: str = REPOSITORY, ref: str = REF) -> str:
    """README's chapter tables with a Colab badge beside every notebook name (rows ``| NN | `NN_x.ipynb` |``); the
    links are Markdown references, defined in one block after the last table (rows stay short)."""
    lines, names, last = text.split("\n"), {}, None
    for k, line in enumerate(lines):
        m = _README_ROW.match(line)
        if m:
            names[m.group(1)] = m.group(2)
            badge = f"[![Open In Colab][colab-badge]][colab-{m.group(1)}]"
            lines[k] = _README_ROW.sub(f"| {m.group(1)} | `{m.group(2)}` {badge} |", line)
            last = k
    if last is None:
        return text
    block = [_LINKS_START, f"[colab-badge]: {COLAB_BADGE_SVG}",
             *(f"[colab-{n}]: {colab_url(name, repository, ref)}" for n, name in sorted(names.items())), _LINKS_END]
    if _LINKS_START in lines:
        start = lines.index(_LINKS_START)
        end = lines.index(_LINKS_END, start)
        lines[start:end + 1] = block
    else:
        lines[last + 1:last + 1] = ["", *block]
    return "\n".join(lines)


def book_config_with_location(text: str, repository: str = REPOSITORY, ref: str = REF) -> str:
    """``book/_config.yml`` with ``repository.url`` and ``repository.branch`` (the launch buttons') set."""
    out, inside = [], False
    for line in text.split("\n"):
        if not line.startswith(" ") and line.strip():
            inside = line.rstrip() == "repository:"
        elif inside and re.match(r"^  url: ", line):
            line = f"  url: https://github.com/{repository}"
        elif inside and re.match(r"^  branch: ", line):
            line = f"  branch: {ref}"
        out.append(line)
    return "\n".join(out)


def update_links(root: Path = ROOT, repository: str = REPOSITORY, ref: str = REF,
                 paths: list[Path] | None = None) -> list[str]:
    """Make everything that says where the course lives follow ``repository`` and ``ref``: each chapter's set-up
    cell and badge (and its .py), README's badges, the book's launch buttons. Returns what changed."""
    check_location(repository, ref)
    changed = []
    for path in paths if paths is not None else chapters(root / "notebooks"):
        if update_chapter(Path(path), repository, ref):
            changed.append(str(path))
    for name, rewrite in (("README.md", readme_with_badges), ("book/_config.yml", book_config_with_location)):
        file = root / name
        if file.exists():
            text = file.read_text()
            new = rewrite(text, repository, ref)
            if new != text:
                with atomic_open(file, "w") as f:
                    f.write(new)
                changed.append(str(file))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/book.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    bk = sub.add_parser("build", help="build the Jupyter Book into BOOK/_build/html")
    bk.add_argument("--book", type=Path, default=ROOT / "book", help="the book's folder (default: the checkout's)")
    bk.add_argument("--notebooks", type=Path, default=ROOT / "notebooks",
                    help="the chapters' folder (default: the checkout's)")
    bd = sub.add_parser("badges", help="make the set-up cells, Colab badges, README badges and the book's launch "
                                       "buttons follow REPOSITORY and REF (or --repository / --ref)")
    bd.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: every chapter in notebooks/)")
    bd.add_argument("--repository", default=REPOSITORY)
    bd.add_argument("--ref", default=REF)
    links = sub.add_parser("colab-links", help="print an Open-in-Colab link per chapter")
    links.add_argument("--dir", type=Path, default=ROOT / "notebooks")
    args = parser.parse_args(argv)
    if args.command == "build":
        for folder in (args.book, args.notebooks):
            if not folder.is_dir():
                parser.error(f"no folder {folder}")
        return build_book(args.book, args.notebooks)
    if args.command == "badges":
        for path in args.notebooks:
            if not (path.is_file() and path.suffix == ".ipynb"):
                parser.error(f"{path} is not a notebook (.ipynb)")
        try:
            changed = update_links(ROOT, args.repository, args.ref, args.notebooks or None)
        except CourseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{args.repository}@{args.ref}: " + (", ".join(changed) + " updated" if changed else "all current"))
        return 0
    for nb in chapters(args.dir):
        print(f"{nb.stem}: {colab_url(nb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
