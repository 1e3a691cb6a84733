"""A fresh virtual environment that sees this environment's packages (torch, ipykernel, numpy, ...) through
symlinks, all but tfm_lesson: what a learner's runtime is before the set-up cell, or a clean place to install a
wheel into, without downloading torch again. Used by tests/test_setup_cell.py and tests/test_release.py."""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path


def fresh_venv(base: Path) -> tuple[Path, str]:
    """Make ``base/venv`` seeing this environment's packages but tfm_lesson; return its python and
    its site-packages folder (where an install into it goes)."""
    python_base = getattr(sys, "_base_executable", sys.executable)
    # no pip or setuptools of its own: this environment's (an older bundled setuptools would hide the one torch needs)
    subprocess.run([python_base, "-m", "venv", "--without-pip", str(base / "venv")], check=True, timeout=300)
    python = base / "venv" / "bin" / "python"
    shared = base / "shared"
    shared.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():  # everything but tfm_lesson (an editable install here) and .pth files
        if "tfm_lesson" in entry.name or "tfm-lesson" in entry.name or entry.suffix == ".pth":
            continue
        (shared / entry.name).symlink_to(entry)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "_shared.pth").write_text(f"{shared}\n")
    return python, site


def kernel_spec(base: Path, python: Path, name: str) -> Path:
    """A Jupyter kernel ``name`` running ``python``; returns the folder to put on JUPYTER_PATH."""
    kernels = base / "share" / "jupyter" / "kernels" / name
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"{name} (fresh, without tfm_lesson)", "language": "python"}))
    return base / "share" / "jupyter"
