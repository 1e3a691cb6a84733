"""Course tooling: the set-up cell every chapter starts with, and executing chapters in place.

    python -m tfm_lesson.course execute notebooks/*.ipynb    # refresh stored outputs
    python -m tfm_lesson.course colab-links                  # one "Open in Colab" link per chapter
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# The one setting every Colab link and the set-up cell are built from.
REPOSITORY = "tfm-lesson/tfm_lesson"
BRANCH = "main"

SETUP_CELL = f"""\
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           "tfm-lesson @ git+https://github.com/{REPOSITORY}@{BRANCH}"])"""


def colab_url(notebook: str | Path) -> str:
    """The "Open in Colab" address of a chapter, e.g. ``notebooks/01_attention.ipynb``."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/notebooks/{Path(notebook).name}"


def execute(paths: list[Path], timeout: int = 600) -> None:
    """Run each notebook top to bottom in a fresh kernel (its own folder as working directory), saving outputs."""
    import nbformat
    from nbclient import NotebookClient

    for path in paths:
        start = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        nbformat.write(nb, path)
        print(f"{path}: {time.perf_counter() - start:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="execute notebooks in place")
    ex.add_argument("notebooks", nargs="+", type=Path)
    ex.add_argument("--timeout", type=int, default=600)
    links = sub.add_parser("colab-links", help="print an Open-in-Colab link per chapter")
    links.add_argument("--dir", type=Path, default=Path("notebooks"))
    args = parser.parse_args(argv)
    if args.command == "execute":
        execute(args.notebooks, args.timeout)
    else:
        for nb in sorted(args.dir.glob("[0-9][0-9]_*.ipynb")):
            print(f"{nb.stem}: {colab_url(nb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
