"""The set-up cell where tfm_lesson is missing, in a real Jupyter kernel: when nothing installs it stops with one
message (what failed, the two ways out) and "Run all" stops there; a later cell that imports tfm_lesson says one
line, not a ModuleNotFoundError traceback; with a wheel put beside the notebook it installs that wheel.

The kernel runs in a fresh virtual environment that sees this environment's packages (torch, ipykernel, ...)
through symlinks, all but tfm_lesson, so only the set-up cell can bring tfm_lesson in.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from tfm_lesson import course

from conftest import ROOT
from fresh_env import fresh_venv, kernel_spec

pytestmark = pytest.mark.slow
UNREACHABLE = "tfm-lesson @ http://127.0.0.1:9/tfm_lesson-0.1.0-py3-none-any.whl"  # port 9 (discard): refused


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A fresh venv whose kernel sees this environment's packages except tfm_lesson; its kernel spec; a folder."""
    base = tmp_path_factory.mktemp("setup-cell")
    python, site = fresh_venv(base)
    jupyter = kernel_spec(base, python, "fresh")
    work = base / "work"
    work.mkdir()
    return {"python": python, "jupyter": jupyter, "work": work, "site": site, "base": base}


def _run(env: dict, cells: list[str], allow_errors: bool, **extra: str) -> nbformat.NotebookNode:
    """Run ``cells`` in the fresh kernel (not seeing this checkout), as "Run all" does; return the notebook."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    saved = dict(os.environ)
    os.environ.pop("PYTHONPATH", None)
    os.environ.pop("TFM_LESSON_SOURCE", None)
    os.environ.update({"JUPYTER_PATH": str(env["jupyter"]), "PIP_RETRIES": "0", "PIP_TIMEOUT": "10",
                       "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra})
    try:
        NotebookClient(nb, timeout=600, kernel_name="fresh", allow_errors=allow_errors,
                       resources={"metadata": {"path": str(env["work"])}}).execute()
    except CellExecutionError:
        pass  # "Run all" stopped at a cell that failed: what the test looks at
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def _errors(cell) -> list[dict]:
    return [o for o in cell.outputs if o.output_type == "error"]


def test_tfm_lesson_is_missing_there(kernel_env):
    probe = subprocess.run([str(kernel_env["python"]), "-c", "import importlib.util as u, torch, ipykernel; "
                            "print(u.find_spec('tfm_lesson'))"], capture_output=True, text=True, timeout=300,
                           cwd=kernel_env["work"], env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert probe.returncode == 0 and probe.stdout.strip() == "None", (probe.stdout, probe.stderr)


def test_an_unreachable_source_stops_run_all_with_one_message(kernel_env):
    nb = _run(kernel_env, [course.SETUP_CELL, "import tfm_lesson as T\nprint('RAN')"], allow_errors=False,
              TFM_LESSON_SOURCE=UNREACHABLE)
    setup, after = nb.cells
    [error] = _errors(setup)
    assert error.ename == "SetupFailed", error
    message = "\n".join(error.traceback)
    assert "Traceback" not in message and "CalledProcessError" not in message, message
    for words in ("pip could not install tfm_lesson", UNREACHABLE, "Two ways out", "TFM_LESSON_SOURCE",
                  course.release_page(), "put it beside this notebook", "run this cell again"):
        assert words in message, (words, message)
    assert after.execution_count is None and not after.outputs, "Run all went on past the failed set-up cell"


def test_later_cells_say_one_line_not_a_traceback(kernel_env):
    nb = _run(kernel_env, [course.SETUP_CELL, "import tfm_lesson as T", "from tfm_lesson.checks import check_x",
                           "import a_module_nobody_has"], allow_errors=True, TFM_LESSON_SOURCE=UNREACHABLE)
    assert _errors(nb.cells[0])[0].ename == "SetupFailed"
    for cell in nb.cells[1:3]:
        [error] = _errors(cell)
        assert error.traceback == ["tfm_lesson is not installed: the set-up cell (the first code cell) says why."], \
            error.traceback
    [other] = _errors(nb.cells[3])  # any other missing module keeps its usual traceback
    assert other.ename == "ModuleNotFoundError" and len(other.traceback) > 1


def test_the_default_sources_are_tried_in_order(kernel_env):
    """No override, no wheel: the release from PyPI, then the tag on GitHub (here both made unreachable)."""
    cell = course.SETUP_CELL
    for source in course.install_sources():
        assert f'"{source}"' in cell
    unreachable = cell.replace(json.dumps(course.install_sources()), json.dumps(
        ["tfm-lesson==0.1.0", "tfm-lesson @ git+https://127.0.0.1:9/nobody/tfm_lesson@v0.1.0"]))
    assert unreachable != cell
    nb = _run(kernel_env, [unreachable], allow_errors=True, PIP_INDEX_URL="http://127.0.0.1:9/simple")
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.output_type == "stream")
    assert printed.splitlines() == ["installing tfm_lesson from tfm-lesson==0.1.0",
                                    "installing tfm_lesson from tfm-lesson @ git+https://127.0.0.1:9/nobody/"
                                    "tfm_lesson@v0.1.0"], printed
    assert _errors(nb.cells[0])[0].ename == "SetupFailed"


def test_a_wheel_beside_the_notebook_installs(kernel_env):
    source = kernel_env["base"] / "checkout"  # a copy: building must not write into this tree
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "tfm_lesson", source / "tfm_lesson", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(kernel_env["work"]), str(source)], check=True, timeout=600, capture_output=True)
    [wheel] = kernel_env["work"].glob("tfm_lesson-*.whl")
    nb = _run(kernel_env, [course.SETUP_CELL, "import tfm_lesson\nprint('FROM', tfm_lesson.__file__)"],
              allow_errors=False)
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.outputs if o.output_type == "stream")
    assert f"installing tfm_lesson from {wheel.name}" in printed, printed
    assert f"FROM {kernel_env['site']}" in printed, printed
    assert not any(_errors(c) for c in nb.cells)
