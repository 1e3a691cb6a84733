"""Build a Colab-like environment: Colab's Python and package versions (tools/colab_versions.txt), no tfm_lesson.

    python3.13 tools/colab_env.py ENV_DIR --torch-from OTHER_VENV/bin/python

1. a fresh virtual environment on the Python that runs this script (Colab's is 3.13);
2. torch, shared from another environment of the same Python (``--torch-from``): torch and what it requires are
   symlinked into ``ENV_DIR/shared-torch`` and put on the path by a ``.pth`` file, so pip sees them as installed
   and a second torch (4.7 GB for PyPI's CUDA build) is neither downloaded nor unpacked. That torch is CI's
   (2.13.0), not Colab's 2.11.0: the version is printed;
3. the versions of tools/colab_versions.txt (all but ``python`` and ``torch``), with what they require at
   whatever versions pip picks, so the kernel Colab runs is there (ipykernel, ipywidgets 7, notebook 6).

Prints the set-up time and the size on disk (``du``, the shared torch not counted). tests/test_colab.py then runs
each chapter's set-up cell and the chapter in it (TFM_COLAB_PYTHON=ENV_DIR/bin/python).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = HERE / "colab_versions.txt"

# Run by --torch-from's Python: torch and everything it requires, the extras it asks for included (markers of that
# Python honoured), as the top-level names of their files (packages, modules, .dist-info folders) in site-packages.
# Without the extras, pip in the new environment would see torch's `cuda-toolkit[...]` unmet and download the NVIDIA
# libraries again (959 MB) when the set-up cell installs tfm_lesson.
_LIST_TORCH = r"""
import re, sys
from importlib import metadata
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:  # an environment with torch alone: pip's own copy
    from pip._vendor.packaging.requirements import Requirement
seen, tops = set(), set()
def walk(name, extras=()):
    key = (re.sub(r"[-_.]+", "-", name).lower(), tuple(sorted(extras)))
    if key in seen:
        return
    seen.add(key)
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return
    site = Path(dist.locate_file(""))
    for f in dist.files or []:
        top = Path(str(f)).parts[0]
        if top not in ("..", "bin", "__pycache__") and not top.endswith(".pth") and (site / top).exists():
            tops.add(str(site / top))
    for line in dist.requires or []:  # with the extras asked for: torch asks for cuda-toolkit[cublas,...]
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            walk(req.name, req.extras)
walk("torch")
print("\n".join(sorted(tops)))
"""


def pins(path: Path = VERSIONS) -> dict[str, str]:
    """``name -> version`` of ``path`` (comments and blank lines skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[name.strip()] = version.strip()
    return out


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def new_dependencies(requires: dict[str, list[str]], root: str, before: set[str]) -> set[str]:
    """What installing ``root`` may add to an environment that held ``before``: ``root`` and, following only
    packages that were not there, what they require (markers of this Python and the extras asked for honoured).
    A requirement that was there is not followed: an environment like Colab's has what its packages require, so a
    package the install adds below one of them (torch's NVIDIA libraries) is one the environment lacked.
    ``requires``: each distribution's ``Requires-Dist`` lines after the install, by name (any spelling)."""
    from packaging.requirements import Requirement

    requires = {_key(k): v for k, v in requires.items()}
    before = {_key(n) for n in before}
    found: set[str] = set()
    todo = [(_key(root), ())]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in found or name in before:
            continue
        found.add((name, extras))
        for line in requires.get(name, []):
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                todo.append((_key(req.name), tuple(sorted(req.extras))))
    return {name for name, _ in found}


def share_torch(env: Path, torch_python: str) -> str:
    """Symlink the torch of ``torch_python`` (and its requirements) into ``env``; return its version."""
    listed = subprocess.run([torch_python, "-c", _LIST_TORCH], capture_output=True, text=True, check=True).stdout
    shared = env / "shared-torch"
    shared.mkdir()
    for top in map(Path, listed.split()):
        if not (shared / top.name).exists():
            (shared / top.name).symlink_to(top)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(env / "bin" / "python"), "-c", where], capture_output=True, text=True,
                          check=True).stdout.strip()
    (Path(site) / "_shared_torch.pth").write_text(f"{shared}\n")  # "_": before distutils-precedence.pth
    # setuptools comes with torch on Python 3.12+ (as it comes with Colab's Python): its `distutils` stand-in, which
    # notebook 6 imports, is switched on by a .pth file, and .pth files work only in site-packages itself
    hack = (shared / "setuptools").resolve().parent / "distutils-precedence.pth"
    if hack.exists():
        shutil.copy(hack, Path(site) / hack.name)
    return subprocess.run([str(env / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", type=Path)
    parser.add_argument("--torch-from", required=True, help="the python of an environment that has torch")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    wanted = pins()
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if here != wanted["python"]:
        print(f"note: Colab runs Python {wanted['python']}; this is {here}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(args.env)], check=True)
    torch_version = share_torch(args.env, args.torch_from)
    print(f"torch {torch_version} shared from {args.torch_from} (Colab: {wanted['torch']})", flush=True)
    reqs = [f"{name}=={version}" for name, version in wanted.items() if name not in ("python", "torch")]
    subprocess.run([str(args.env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--progress-bar", "off", *reqs], check=True)
    size = subprocess.run(["du", "-sh", str(args.env)], capture_output=True, text=True).stdout.split()[0]
    print(f"Colab-like environment {args.env}: {', '.join(reqs)}; set-up {time.perf_counter() - start:.0f} s, "
          f"{size} on disk (the shared torch not counted)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
