"""Course tooling: the set-up cell every chapter starts with, running chapters, student copies, the book.

    python -m tfm_lesson.course execute notebooks/*.ipynb          # refresh stored outputs in place
    python -m tfm_lesson.course student notebooks/03_*.ipynb       # student copies (no solutions) in student/
    python -m tfm_lesson.course restore student/03_*.ipynb         # put the solutions back (from notebooks/)
    python -m tfm_lesson.course book                               # build the Jupyter Book in book/_build/html
    python -m tfm_lesson.course colab-links                        # one "Open in Colab" link per chapter
"""
from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The one setting every Colab link, the book's launch buttons and the set-up cell are built from.
REPOSITORY = "tfm-lesson/tfm_lesson"
BRANCH = "main"

SETUP_CELL = f"""\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           "tfm-lesson @ git+https://github.com/{REPOSITORY}@{BRANCH}"])"""

SOLUTION_TAG = "solution"
# What a student copy puts where a solution was.
STUDENT_STUB = ("# Your turn: complete the exercise in the cell above (keep the name it defines),\n"
                "# then run the check below. Its message tells you what to fix.")
# Tags a student copy adds to the checker cell after a solution, so "Run all" goes on past a failing check.
_ADDED_TAGS_KEY = "tfm_lesson_student_added_tags"


def colab_url(notebook: str | Path) -> str:
    """The "Open in Colab" address of a chapter, e.g. ``notebooks/01_attention.ipynb``."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/notebooks/{Path(notebook).name}"


def chapters(directory: str | Path = "notebooks") -> list[Path]:
    """The chapter notebooks ``NN_name.ipynb`` of ``directory``, in order."""
    return sorted(Path(directory).glob("[0-9][0-9]_*.ipynb"))


def execute(paths: list[Path], timeout: int = 600) -> None:
    """Run each notebook top to bottom in a fresh kernel (its own folder as working directory), saving outputs.

    Live widget views are dropped from the stored outputs, which keep each explorer's static picture.
    """
    import nbformat
    from nbclient import NotebookClient

    from .widgets import strip_widget_views

    for path in paths:
        start = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        strip_widget_views(nb)  # stored chapters show the explorers' static pictures; running a cell brings them back
        nbformat.write(nb, path)
        print(f"{path}: {time.perf_counter() - start:.1f} s", flush=True)


# student copies ------------------------------------------------------------------------------------------------------
def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _is_solution(cell: Any) -> bool:
    return cell.get("cell_type") == "code" and SOLUTION_TAG in _tags(cell)


def _clear_outputs(cell: Any) -> None:
    cell["outputs"] = []
    cell["execution_count"] = None


def student_copy(nb: Any) -> Any:
    """A copy of notebook ``nb`` with every ``solution`` cell replaced by a short "your turn" stub.

    The checkers stay. The cell after a solution (its check) loses its stored output and is tagged
    ``raises-exception`` so that running the whole notebook goes on past a check that fails (it will,
    until the learner solves the exercise); the added tag is recorded so :func:`restore` can undo it.
    """
    out = copy.deepcopy(nb)
    cells = out["cells"]
    for i, cell in enumerate(cells):
        if not _is_solution(cell):
            continue
        cell["source"] = STUDENT_STUB
        _clear_outputs(cell)
        if i + 1 < len(cells) and cells[i + 1].get("cell_type") == "code" and not _is_solution(cells[i + 1]):
            check = cells[i + 1]
            _clear_outputs(check)
            meta = check.setdefault("metadata", {})
            if "raises-exception" not in meta.get("tags", []):
                meta.setdefault("tags", []).append("raises-exception")
                meta[_ADDED_TAGS_KEY] = ["raises-exception"]
    return out


def restore(student: Any, original: Any) -> Any:
    """Put the solutions of ``original`` back into a student copy: the result equals ``original``."""
    out = copy.deepcopy(student)
    if len(out["cells"]) != len(original["cells"]):
        raise ValueError(f"the student copy has {len(out['cells'])} cells but the original has "
                         f"{len(original['cells'])}: they are not copies of the same chapter")
    for i, (cell, orig) in enumerate(zip(out["cells"], original["cells"])):
        meta = cell.get("metadata", {})
        added = meta.pop(_ADDED_TAGS_KEY, None)
        if added:
            meta["tags"] = [t for t in meta.get("tags", []) if t not in added]
            if not meta["tags"]:
                del meta["tags"]
        if _is_solution(cell) or added:
            if _is_solution(cell) != _is_solution(orig):
                raise ValueError(f"cell {i}: a solution cell in one notebook is not one in the other")
            for key in ("source", "outputs", "execution_count"):
                if key in orig:
                    cell[key] = copy.deepcopy(orig[key])
    return out


def write_student_copies(paths: list[Path], out_dir: Path) -> list[Path]:
    """Write a student copy of each chapter into ``out_dir`` (same file names); return their paths."""
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        target = out_dir / Path(path).name
        nbformat.write(nbformat.from_dict(student_copy(nb)), target)
        written.append(target)
        print(f"{target}: {sum(map(_is_solution, nb.cells))} solution cells replaced", flush=True)
    return written


def restore_files(paths: list[Path], originals: Path) -> None:
    """Put the solutions back into student copies, in place, from the chapters in ``originals``."""
    import nbformat

    for path in paths:
        original = nbformat.read(originals / Path(path).name, as_version=4)
        nb = restore(nbformat.read(path, as_version=4), original)
        nbformat.write(nbformat.from_dict(nb), path)
        print(f"{path}: solutions restored from {originals / Path(path).name}", flush=True)


# the book ------------------------------------------------------------------------------------------------------------
def book_page(nb: Any) -> Any:
    """A chapter as the book shows it: solution cells collapsed behind a toggle (``hide-input``), the set-up
    cell left out (a reader of the book has nothing to install), and nbval's markers removed."""
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        if cell.get("cell_type") != "code":
            continue
        added = (["hide-input"] if _is_solution(cell) else []) + (
            ["remove-cell"] if cell["source"].strip() == SETUP_CELL.strip() else [])
        if added:
            meta = cell.setdefault("metadata", {})
            meta["tags"] = [*meta.get("tags", []), *added]
        lines = cell["source"].splitlines()
        if lines and lines[0].strip() == "# NBVAL_CHECK_OUTPUT":
            cell["source"] = "\n".join(lines[1:])
    return out


def prepare_book(book_dir: Path = Path("book"), notebooks_dir: Path = Path("notebooks")) -> list[Path]:
    """Copy the chapters into ``book/notebooks`` (solutions collapsed) and MathJax into ``book/_extra``.

    MathJax comes from the ``jupyter_server_mathjax`` package, so the book's math renders with no network.
    """
    import nbformat

    pages = book_dir / "notebooks"
    shutil.rmtree(pages, ignore_errors=True)
    pages.mkdir(parents=True)
    written = []
    for path in chapters(notebooks_dir):
        nb = nbformat.read(path, as_version=4)
        nbformat.write(nbformat.from_dict(book_page(nb)), pages / path.name)
        written.append(pages / path.name)
    import jupyter_server_mathjax

    mathjax = Path(jupyter_server_mathjax.__file__).parent / "static"
    target = book_dir / "_extra" / "mathjax"
    if not (target / "MathJax.js").exists():
        shutil.copytree(mathjax, target, dirs_exist_ok=True)
    return written


def build_book(book_dir: Path = Path("book"), notebooks_dir: Path = Path("notebooks")) -> int:
    """Prepare and build the book; warnings that matter (missing files, bad references) fail the build."""
    prepare_book(book_dir, notebooks_dir)
    jupyter_book = str(Path(sys.executable).with_name("jupyter-book"))
    cmd = [jupyter_book, "build", str(book_dir), "--all", "-W", "-n", "--keep-going"]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="execute notebooks in place")
    ex.add_argument("notebooks", nargs="+", type=Path)
    ex.add_argument("--timeout", type=int, default=600)
    st = sub.add_parser("student", help="write student copies (solutions replaced by stubs)")
    st.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: every chapter in notebooks/)")
    st.add_argument("--out", type=Path, default=Path("student"))
    rs = sub.add_parser("restore", help="put the solutions back into student copies, in place")
    rs.add_argument("notebooks", nargs="+", type=Path)
    rs.add_argument("--from", dest="originals", type=Path, default=Path("notebooks"))
    bk = sub.add_parser("book", help="build the Jupyter Book into book/_build/html")
    bk.add_argument("--book", type=Path, default=Path("book"))
    links = sub.add_parser("colab-links", help="print an Open-in-Colab link per chapter")
    links.add_argument("--dir", type=Path, default=Path("notebooks"))
    args = parser.parse_args(argv)
    if args.command == "execute":
        execute(args.notebooks, args.timeout)
    elif args.command == "student":
        write_student_copies(args.notebooks or chapters(), args.out)
    elif args.command == "restore":
        restore_files(args.notebooks, args.originals)
    elif args.command == "book":
        return build_book(args.book)
    else:
        for nb in chapters(args.dir):
            print(f"{nb.stem}: {colab_url(nb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
