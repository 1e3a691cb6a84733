"""Choose how `make setup` installs PyTorch, print the command (and run it with --run).

PyPI's Linux wheel of torch is the CUDA build: with its NVIDIA libraries about 4.7 GB installed (measured for
torch 2.13.0). A laptop without an NVIDIA GPU needs only the CPU build, from PyTorch's own wheel index. So:

1. ``TFM_TORCH_INDEX`` decides when set: ``cpu`` (PyTorch's CPU index), ``pypi`` (the default index, whatever
   it holds), or the URL of another index (e.g. ``https://download.pytorch.org/whl/cu126``);
2. a local CPU wheel that satisfies the request (pip's ``find-links``, e.g. a machine image's wheel cache) is
   used as it is: plain ``pip install``;
3. off Linux (macOS, Windows) PyPI's wheel is already the CPU (or Apple GPU) build: plain ``pip install``;
4. on Linux, an NVIDIA GPU (``nvidia-smi -L`` lists one, or ``/proc/driver/nvidia/gpus`` is not empty) keeps
   PyPI's CUDA build; without one, the CPU index.

    python tools/torch_install.py "torch==2.13.0"          # print the command for this machine
    python tools/torch_install.py "torch==2.13.0" --run    # print it, then run it (if the chosen index fails
                                                           # and no TFM_TORCH_INDEX was set: the default index)
    python tools/torch_install.py "torch==2.13.0" --gpu no # as if there were no NVIDIA GPU
"""
from __future__ import annotations

import argparse
import configparser
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIP = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--progress-bar", "off"]


def has_nvidia_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU with a working driver."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
            return out.returncode == 0 and "GPU" in out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    return False


def find_links() -> list[Path]:
    """pip's ``find-links`` folders: PIP_FIND_LINKS and the pip configuration files."""
    values = os.environ.get("PIP_FIND_LINKS", "").split()
    for conf in ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", Path.home() / ".config/pip/pip.conf",
                 Path.home() / ".pip/pip.conf", os.environ.get("PIP_CONFIG_FILE", "")):
        parser = configparser.ConfigParser()
        try:
            parser.read(conf)
        except (configparser.Error, OSError):
            continue
        for section in ("global", "install"):
            values += parser.get(section, "find-links", fallback="").split()
    return [Path(v.removeprefix("file://")) for v in values if not v.startswith(("http://", "https://"))]


def local_cpu_wheel(spec: str, folders: list[Path], python_tag: str) -> Path | None:
    """A ``+cpu`` torch wheel for ``python_tag`` (e.g. ``cp311``) in ``folders`` that satisfies ``spec``
    (``torch==X`` or bare ``torch``)."""
    match = re.fullmatch(r"\s*torch\s*(?:==\s*([\w.]+))?\s*", spec)
    if not match:
        return None
    version = match.group(1)
    for folder in folders:
        for wheel in sorted(folder.glob("torch-*+cpu-*.whl")) if folder.is_dir() else []:
            parts = wheel.name.split("-")
            if parts[2] == python_tag and (version is None or parts[1] == f"{version}+cpu"):
                return wheel
    return None


def choose(spec: str, gpu: bool, override: str | None, local_wheel: Path | None, system: str) -> tuple[list[str], str]:
    """The pip arguments after ``pip install`` for ``spec``, and why."""
    if override:
        if override == "cpu":
            return [spec, "--index-url", CPU_INDEX], "TFM_TORCH_INDEX=cpu: PyTorch's CPU wheel index"
        if override == "pypi":
            return [spec], "TFM_TORCH_INDEX=pypi: the default index"
        if re.match(r"https?://", override):
            return [spec, "--index-url", override], f"TFM_TORCH_INDEX={override}"
        raise SystemExit(f"TFM_TORCH_INDEX must be cpu, pypi or an index URL, got {override!r}")
    if local_wheel is not None:
        return [spec], f"a local CPU wheel satisfies {spec}: {local_wheel.name}"
    if system != "Linux":
        return [spec], f"on {system} PyPI's torch wheel is the CPU build already"
    if gpu:
        return [spec], "an NVIDIA GPU is present: PyPI's CUDA build"
    return [spec, "--index-url", CPU_INDEX], "no NVIDIA GPU: the CPU build from PyTorch's index (about 1 GB less)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", nargs="?", default="torch==2.13.0", help="the requirement, e.g. torch==2.13.0")
    parser.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto", help="NVIDIA GPU present?")
    parser.add_argument("--run", action="store_true", help="run the command after printing it")
    args = parser.parse_args(argv)
    gpu = has_nvidia_gpu() if args.gpu == "auto" else args.gpu == "yes"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pip_args, why = choose(args.spec, gpu, os.environ.get("TFM_TORCH_INDEX") or None,
                           local_cpu_wheel(args.spec, find_links(), tag), platform.system())
    command = PIP + pip_args
    print(f"# {why}")
    print(shlex.join(command), flush=True)
    if not args.run:
        return 0
    code = subprocess.call(command)
    if code and "--index-url" in pip_args and not os.environ.get("TFM_TORCH_INDEX"):
        # e.g. a network that reaches PyPI but not download.pytorch.org: the CUDA build still works on a CPU
        fallback = PIP + [args.spec]
        print(f"# PyTorch's wheel index failed (exit {code}): falling back to the default index, whose Linux "
              "wheel is the CUDA build (about 4.7 GB installed)", flush=True)
        print(shlex.join(fallback), flush=True)
        code = subprocess.call(fallback)
    return code


if __name__ == "__main__":
    sys.exit(main())
