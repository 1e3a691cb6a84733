"""Set-up where learners are: the PyTorch build `make setup` picks, and `make course` without the news pop-up."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import torch_install  # noqa: E402

SPEC = "torch==2.13.0"
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.mark.parametrize("gpu, override, wheel, system, index", [
    (True, None, None, "Linux", None),                       # an NVIDIA GPU: PyPI's CUDA build
    (False, None, None, "Linux", torch_install.CPU_INDEX),   # no GPU: PyTorch's CPU index
    (False, None, Path(WHEEL), "Linux", None),               # a local CPU wheel fits: use it
    (False, None, None, "Darwin", None),                     # macOS: PyPI's wheel has no CUDA anyway
    (True, "cpu", None, "Linux", torch_install.CPU_INDEX),   # overrides win over detection
    (False, "pypi", None, "Linux", None),
    (False, "https://download.pytorch.org/whl/cu126", None, "Linux", "https://download.pytorch.org/whl/cu126"),
    (False, "cpu", Path(WHEEL), "Linux", torch_install.CPU_INDEX),
])
def test_the_choice_of_torch_build(gpu, override, wheel, system, index):
    args, why = torch_install.choose(SPEC, gpu, override, wheel, system)
    assert args[0] == SPEC and why
    assert (args[1:] == ["--index-url", index]) if index else args == [SPEC]


def test_a_bad_override_is_refused():
    with pytest.raises(SystemExit, match="TFM_TORCH_INDEX must be cpu, pypi or an index URL"):
        torch_install.choose(SPEC, False, "cuda", None, "Linux")


def test_a_local_cpu_wheel_must_fit_version_and_python(tmp_path):
    (tmp_path / WHEEL).touch()
    assert torch_install.local_cpu_wheel(SPEC, [tmp_path], "cp311") == tmp_path / WHEEL
    assert torch_install.local_cpu_wheel("torch", [tmp_path], "cp311") == tmp_path / WHEEL
    assert torch_install.local_cpu_wheel(SPEC, [tmp_path], "cp312") is None
    assert torch_install.local_cpu_wheel("torch==2.12.0", [tmp_path], "cp311") is None
    assert torch_install.local_cpu_wheel("torch>=2.2", [tmp_path], "cp311") is None


def _printed(args: list[str], **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("TFM_TORCH_INDEX", "PIP_FIND_LINKS")}
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "torch_install.py"), *args], capture_output=True,
                          text=True, env={**clean, **env}, timeout=60, check=True)
    return done.stdout


@pytest.mark.parametrize("gpu, env, expected", [
    ("yes", {}, None),
    ("no", {}, torch_install.CPU_INDEX),
    ("yes", {"TFM_TORCH_INDEX": "cpu"}, torch_install.CPU_INDEX),
    ("no", {"TFM_TORCH_INDEX": "pypi"}, None),
])
def test_the_command_it_prints(gpu, env, expected):
    """The command line itself, for a version no local wheel holds (so detection decides)."""
    out = _printed(["torch==2.0.1", "--gpu", gpu], **env)
    why, command = out.strip().splitlines()
    assert why.startswith("# ")
    words = shlex.split(command)
    assert words[:4] == [sys.executable, "-m", "pip", "install"] and "torch==2.0.1" in words
    if expected:
        assert words[words.index("--index-url") + 1] == expected
    else:
        assert "--index-url" not in words


def test_a_local_wheel_in_find_links_is_used(tmp_path):
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    (tmp_path / f"torch-2.0.1+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl").touch()
    out = _printed(["torch==2.0.1", "--gpu", "no"], PIP_FIND_LINKS=str(tmp_path))
    assert "a local CPU wheel satisfies" in out and "--index-url" not in out


def test_make_setup_installs_torch_through_the_chooser():
    dry = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = dry.stdout.splitlines()
    install = [ln for ln in lines if "torch_install.py" in ln]
    assert install and "--run" in install[0] and '"torch==' in install[0], dry.stdout
    assert lines.index(install[0]) < next(i for i, ln in enumerate(lines) if "-r requirements.txt" in ln)


# make course: no news pop-up ----------------------------------------------------------------------------------------
def _course_flags() -> list[str]:
    dry = subprocess.run(["make", "-n", "course"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    line = next(ln for ln in dry.stdout.splitlines() if "jupyter lab" in ln)
    words = shlex.split(line.split("$(")[0])
    return [w for w in words if w.startswith("--")]


def test_make_course_turns_the_news_off():
    flags = _course_flags()
    assert "--LabApp.news_url=None" in flags
    settings_dir = Path(next(f for f in flags if f.startswith("--LabApp.app_settings_dir=")).split("=", 1)[1])
    overrides = json.loads((settings_dir / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


@pytest.mark.slow
def test_jupyterlab_started_as_make_course_does_asks_no_news_question(tmp_path):
    """JupyterLab 4 asks "Would you like to get notified about official Jupyter news?" while the setting
    fetchNews is "none" (its default). Started with `make course`'s flags, it serves "false" as the default
    and reports news as disabled."""
    from browser import jupyter_lab

    with jupyter_lab(tmp_path, extra_args=tuple(_course_flags())) as lab:
        req = urllib.request.Request(f"{lab.url}lab/api/settings/@jupyterlab/apputils-extension:notification",
                                     headers={"Authorization": f"token {lab.token}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            setting = json.loads(resp.read())
        assert setting["schema"]["properties"]["fetchNews"]["default"] == "false"
        with urllib.request.urlopen(lab.lab_url(), timeout=30) as resp:
            page = resp.read().decode()
        assert '"news": {"disabled": true}' in page


def test_an_unreachable_cpu_index_falls_back_to_pypi(monkeypatch, capsys):
    calls = []
    monkeypatch.delenv("TFM_TORCH_INDEX", raising=False)
    monkeypatch.setattr(torch_install, "local_cpu_wheel", lambda *a: None)
    monkeypatch.setattr(torch_install.platform, "system", lambda: "Linux")
    monkeypatch.setattr(torch_install.subprocess, "call", lambda cmd: calls.append(cmd) or (1 if len(calls) == 1 else 0))
    assert torch_install.main(["torch==2.0.1", "--gpu", "no", "--run"]) == 0
    assert "--index-url" in calls[0] and "--index-url" not in calls[1] and calls[1][-1] == "torch==2.0.1"
    assert "falling back to the default index" in capsys.readouterr().out
    calls.clear()
    monkeypatch.setenv("TFM_TORCH_INDEX", "cpu")  # asked for explicitly: no fallback
    assert torch_install.main(["torch==2.0.1", "--run"]) == 1 and len(calls) == 1
