"""A chapter runs as on Colab: a fresh environment that has torch (Colab brings its own) and no tfm_lesson.

The test builds a new virtual environment, makes the project's installed torch (and only torch with what torch
itself requires) importable in it through a ``.pth`` file (a second torch download would cost gigabytes), installs
a Jupyter kernel there (Colab's runtime is one), and runs a chapter in that kernel with ``TFM_LESSON_SOURCE``
pointing at a copy of this checkout: the chapter's set-up cell must install tfm_lesson and its dependencies, and
every later cell must run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

from tfm_lesson import course

from conftest import ROOT

CHAPTER = ROOT / "notebooks" / "00_welcome.ipynb"
COLAB_VERSIONS = ROOT / "tools" / "colab_versions.txt"



@contextmanager
def _environ(env: dict[str, str], drop: tuple[str, ...] = ()):
    """Set ``env`` and remove ``drop`` from os.environ (the kernel inherits it) for the block, then restore."""
    old = {k: os.environ.get(k) for k in (*env, *drop)}
    os.environ.update(env)
    for k in drop:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

def colab_versions() -> dict[str, str]:
    """``{"ipywidgets": "7.7.1", "python": "3.13", ...}`` from tools/colab_versions.txt (names normalised)."""
    pins = {}
    for line in COLAB_VERSIONS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def _project() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_no_floor_of_the_package_excludes_what_colab_ships():
    """The set-up cell installs the package with its dependencies: a floor above Colab's version upgrades a package
    that Colab's kernel has already imported (ipywidgets), and the learner is asked to restart before starting."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    pins = colab_versions()
    assert {"python", "torch", "numpy", "matplotlib", "ipywidgets"} <= set(pins), sorted(pins)
    project = _project()
    assert SpecifierSet(project["requires-python"]).contains(pins["python"] + ".0"), project["requires-python"]
    checked = []
    for line in project["dependencies"]:
        req = Requirement(line)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in pins:
            assert req.specifier.contains(pins[name], prereleases=True), (
                f"pyproject.toml asks for {line!r}; Colab ships {name}=={pins[name]} (tools/colab_versions.txt)")
            checked.append(name)
    assert "ipywidgets" in checked and "torch" in checked, checked


def test_the_setup_cell_never_upgrades():
    cell = course.SETUP_CELL
    assert "--upgrade" not in cell and " -U" not in cell and "--force-reinstall" not in cell
    assert '"install"' in cell and "TFM_LESSON_SOURCE" in cell


def _requires(name: str, seen: set[str], extras: tuple[str, ...] = (), visited: set | None = None) -> None:
    """``name`` and everything it requires (markers of this Python and the extras asked for honoured), into
    ``seen``: torch asks for ``cuda-toolkit[cublas, ...]``, whose extras bring the NVIDIA libraries."""
    visited = set() if visited is None else visited
    key = re.sub(r"[-_.]+", "-", name).lower()
    if (key, extras) in visited:
        return
    visited.add((key, extras))
    seen.add(key)
    from packaging.requirements import Requirement

    for line in metadata.requires(name) or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            try:
                _requires(req.name, seen, tuple(sorted(req.extras)), visited)
            except metadata.PackageNotFoundError:
                pass


def _torch_only(target: Path) -> list[str]:
    """Symlink torch and what it requires (modules and their ``dist-info``) from this environment into ``target``."""
    names: set[str] = set()
    _requires("torch", names)
    target.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        site = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            if top.endswith(".pth") or top in ("..", "bin", "__pycache__") or not (site / top).exists():
                continue
            if not (target / top).exists():
                (target / top).symlink_to(site / top)
    return sorted(names)


def _pip_reaches_an_index(python: Path) -> str | None:
    done = subprocess.run([str(python), "-m", "pip", "download", "--no-deps", "-q", "-d", str(python.parent / "dl"),
                           "tqdm"], capture_output=True, text=True, timeout=300)
    return None if done.returncode == 0 else done.stderr[-500:]


@pytest.mark.slow
def test_a_chapter_runs_in_a_fresh_torch_only_environment(tmp_path):
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    brought = _torch_only(tmp_path / "torch_only")
    (site / "colab_torch.pth").write_text(str(tmp_path / "torch_only") + "\n")
    probe = subprocess.run([str(python), "-c", "import importlib.util as u, torch; "
                            "print(torch.__version__, u.find_spec('tfm_lesson') is None, "
                            "u.find_spec('numpy') is None)"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)  # not this checkout's folder
    assert probe.returncode == 0 and probe.stdout.split()[1:] == ["True", "True"], (probe.stdout, probe.stderr, brought)
    why = _pip_reaches_an_index(python)
    if why:
        pytest.skip(f"pip reaches no package index from here: {why}")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "ipykernel"], check=True, timeout=900)

    # a checkout, as the set-up cell would fetch it (a copy: building must not write into this tree)
    source = tmp_path / "checkout"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "tfm_lesson", source / "tfm_lesson", ignore=shutil.ignore_patterns("__pycache__"))

    kernels = tmp_path / "share" / "jupyter" / "kernels" / "colab"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fresh torch-only Python", "language": "python"}))

    nb = nbformat.read(CHAPTER, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert course.is_setup_cell(first.source), "the chapter does not start with the set-up cell"
    first.source = course.SETUP_CELL  # the current wording (it honours TFM_LESSON_SOURCE)
    nb.cells.append(nbformat.v4.new_code_cell("import tfm_lesson, sys\nprint('FROM', tfm_lesson.__file__)\n"
                                              "print('PYTHON', sys.executable)"))
    workdir = tmp_path / "notebooks"
    workdir.mkdir()
    from nbclient import NotebookClient

    env = {"JUPYTER_PATH": str(tmp_path / "share" / "jupyter"), "TFM_LESSON_SOURCE": str(source),
           "TFM_DEVICE": "cpu"}
    with _environ(env):
        NotebookClient(nb, timeout=900, kernel_name="colab", resources={"metadata": {"path": str(workdir)}}).execute()
    errors = [(c.source[:60], o.get("evalue")) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert f"PYTHON {python}" in last, last
    assert f"FROM {site}" in last, f"tfm_lesson was not installed into the fresh environment: {last}"
    assert not (ROOT / "build").exists() or (ROOT / "build").stat().st_mtime < tmp_path.stat().st_mtime


# ---- the Colab-like environment: Colab's versions (tools/colab_versions.txt), built by tools/colab_env.py -------------
COLAB_PYTHON = os.environ.get("TFM_COLAB_PYTHON", "")
ALL_CHAPTERS = course.chapters(ROOT / "notebooks")


def _freeze(python: str) -> dict[str, str]:
    """``{normalised name: version}`` of what ``python``'s environment holds (pip's view)."""
    done = subprocess.run([python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                          capture_output=True, text=True, check=True, timeout=300)
    return {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(done.stdout)}


_NEW_DEPENDENCIES = """
import json, sys
from importlib import metadata
sys.path.insert(0, sys.argv[1])
from colab_env import new_dependencies
requires = {d.metadata["Name"]: d.requires or [] for d in metadata.distributions()}
print(json.dumps(sorted(new_dependencies(requires, "tfm-lesson", set(json.loads(sys.argv[2]))))))
"""


def _course_new_dependencies(python: str, before: set[str]) -> set[str]:
    """What installing tfm_lesson may add to ``python``'s environment that held ``before`` (markers evaluated
    there): tools/colab_env.py's ``new_dependencies``."""
    done = subprocess.run([python, "-c", _NEW_DEPENDENCIES, str(ROOT / "tools"), json.dumps(sorted(before))],
                          capture_output=True, text=True, check=True, timeout=300)
    return set(json.loads(done.stdout))


def test_what_the_set_up_cell_may_add_is_the_courses_new_dependencies():
    """The rule the Colab-like test holds the set-up cell to, on a made-up environment: torch there, but without
    the NVIDIA libraries its cuda-toolkit extra asks for (a torch borrowed without its extras)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from colab_env import new_dependencies

    requires = {"tfm-lesson": ["torch>=2.5", "numpy>=1.24", "sacrebleu>=2.3", "num2words>=0.5.12"],
                "torch": ['cuda-toolkit[cublas]==13.0; platform_system == "Linux"', "numpy"],
                "cuda-toolkit": ['nvidia-cublas==13.0; extra == "cublas"'], "nvidia-cublas": [],
                "sacrebleu": ["portalocker", "numpy", "colorama; extra == 'ja'"], "portalocker": [],
                "num2words": ["docopt>=0.6.2"], "docopt": [], "numpy": []}
    before = {"torch", "numpy"}
    assert new_dependencies(requires, "tfm-lesson", before) == {"tfm-lesson", "sacrebleu", "portalocker",
                                                               "num2words", "docopt"}
    added = {"tfm-lesson", "sacrebleu", "portalocker", "num2words", "docopt", "cuda-toolkit", "nvidia-cublas"}
    assert added - new_dependencies(requires, "tfm-lesson", before) == {"cuda-toolkit", "nvidia-cublas"}
    # a package the course needs that is new is followed through its own extras
    assert "nvidia-cublas" in new_dependencies(requires, "tfm-lesson", {"numpy"})


@pytest.fixture(scope="module")
def colab_env(tmp_path_factory):
    """The Colab-like environment of TFM_COLAB_PYTHON (made by .ci/run), a kernel in it, and a wheel of this
    checkout for the set-up cells to install (what `pip install tfm-lesson @ git+…` builds on Colab)."""
    if not COLAB_PYTHON:
        pytest.skip("TFM_COLAB_PYTHON is not set: .ci/run builds the Colab-like environment (tools/colab_env.py) "
                    "and sets it")
    base = tmp_path_factory.mktemp("colab")
    held = _freeze(COLAB_PYTHON)
    pins = colab_versions()
    wrong = {n: (v, held.get(n)) for n, v in pins.items() if n not in ("python", "torch") and held.get(n) != v}
    assert not wrong, f"the Colab-like environment does not hold Colab's versions: {wrong}"
    source = base / "checkout"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "tfm_lesson", source / "tfm_lesson", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([COLAB_PYTHON, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base / "dist"), str(source)],
                   check=True, timeout=600, capture_output=True)
    wheel = next((base / "dist").glob("tfm_lesson-*.whl"))
    kernels = base / "share" / "jupyter" / "kernels" / "colab"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [COLAB_PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like Python", "language": "python"}))
    workdir = base / "notebooks"  # chapters run beside copies of one another, as in notebooks/
    shutil.copytree(ROOT / "notebooks", workdir, ignore=shutil.ignore_patterns("*.ipynb", "py", ".ipynb_checkpoints"))
    return {"wheel": wheel, "jupyter": base / "share" / "jupyter", "workdir": workdir}


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL_CHAPTERS, ids=lambda p: p.stem[:2])
def test_a_chapter_in_the_colab_like_environment(colab_env, path):
    """The set-up cell on Colab's versions: it installs tfm_lesson and changes no package that was there (so Colab
    asks for no restart), ipywidgets stays the 7.7.1 the kernel imported at start, and the chapter runs to the end."""
    from nbclient import NotebookClient

    subprocess.run([COLAB_PYTHON, "-m", "pip", "uninstall", "-q", "-y", "tfm-lesson"], capture_output=True,
                   timeout=300)  # each chapter opens on a fresh runtime
    before = _freeze(COLAB_PYTHON)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    left = subprocess.run([COLAB_PYTHON, "-c", "import importlib.util as u; print(u.find_spec('tfm_lesson'))"],
                          capture_output=True, text=True, timeout=120, env=clean, cwd=colab_env["workdir"]).stdout
    assert "tfm-lesson" not in before and left.strip() == "None", f"tfm_lesson is still importable there: {left}"
    nb = nbformat.read(path, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    assert nb.cells[first].source == course.SETUP_CELL, f"{path.name}: not the current set-up cell"
    # Colab's kernel imports ipywidgets as it starts, before the learner's first cell. The two probes write what
    # they see to files as well: a stream message can arrive after nbclient stopped listening for a cell's output
    # on a busy machine, and a lost print must not read as a wrong version.
    workdir = Path(colab_env["workdir"])
    for probe in ("AT_START.txt", "AT_END.txt"):
        (workdir / probe).unlink(missing_ok=True)
    nb.cells.insert(first, nbformat.v4.new_code_cell(
        "import ipywidgets, pathlib\nseen = f'AT START {ipywidgets.__version__}'\n"
        "pathlib.Path('AT_START.txt').write_text(seen)\nprint(seen)"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "import importlib.metadata as m, ipywidgets, pathlib, tfm_lesson\n"
        "seen = f'AT END {ipywidgets.__version__} {m.version(\"ipywidgets\")} {tfm_lesson.__file__}'\n"
        "pathlib.Path('AT_END.txt').write_text(seen)\nprint(seen)"))
    env = {"JUPYTER_PATH": str(colab_env["jupyter"]), "TFM_LESSON_SOURCE": str(colab_env["wheel"]),
           "TFM_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    # the kernel must not see this checkout (PYTHONPATH dropped): only what the set-up cell installs
    with _environ(env, drop=("PYTHONPATH",)):
        NotebookClient(nb, timeout=900, kernel_name="colab", allow_errors=True, iopub_timeout=60,
                       resources={"metadata": {"path": str(workdir)}}).execute()
    after = _freeze(COLAB_PYTHON)
    changed = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert not changed, f"{path.name}: the set-up cell changed packages Colab has: {changed}"
    assert "tfm-lesson" in after
    unexpected = set(after) - set(before) - _course_new_dependencies(COLAB_PYTHON, set(before))
    assert not unexpected, (f"{path.name}: the set-up cell added packages that are not the course's own new "
                            "dependencies (the environment lacks what a package it has requires): "
                            f"{sorted(unexpected)}")
    errors = [(c.source[:60], o.get("ename"), o.get("evalue")) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error" and "raises-exception" not in c.metadata.get("tags", [])]
    assert not errors, f"{path.name}: {errors}"
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "restart" not in text.lower(), f"{path.name}: something asks for a restart"
    pinned = colab_versions()["ipywidgets"]
    at_start = (workdir / "AT_START.txt").read_text() if (workdir / "AT_START.txt").exists() else "(never ran)"
    at_end = (workdir / "AT_END.txt").read_text() if (workdir / "AT_END.txt").exists() else "(never ran)"
    assert at_start == f"AT START {pinned}" and at_end.startswith(f"AT END {pinned} {pinned} "), (at_start, at_end)
    assert str(Path(COLAB_PYTHON).parent.parent) in at_end, f"tfm_lesson came from elsewhere: {at_end}"


def test_no_chapter_uses_autoreload():
    """Colab's IPython 7.34 imports the module `imp` for %autoreload, and Python 3.13 (Colab's) has no `imp`."""
    used = [path.name for path in ALL_CHAPTERS for c in nbformat.read(path, as_version=4).cells
            if c.cell_type == "code" and "autoreload" in c.source]
    assert not used, f"%autoreload fails on Colab (IPython 7.34 on Python 3.13): {used}"


@pytest.mark.slow
def test_the_setup_cell_fails_clearly_in_the_colab_like_environment(colab_env):
    """Colab's kernel side (IPython 7.34.0, ipykernel 6.17.1, Python 3.13): with an unreachable source the set-up
    cell stops "Run all" with its one message, and a later `import tfm_lesson` says one line, no traceback."""
    from nbclient import NotebookClient

    subprocess.run([COLAB_PYTHON, "-m", "pip", "uninstall", "-q", "-y", "tfm-lesson"], capture_output=True,
                   timeout=300)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (
        course.SETUP_CELL, "import tfm_lesson as T", "import IPython, traitlets\n"
        "print('KERNEL', IPython.__version__, traitlets.__version__)")])
    env = {"JUPYTER_PATH": str(colab_env["jupyter"]), "PIP_RETRIES": "0",
           "TFM_LESSON_SOURCE": "tfm-lesson @ http://127.0.0.1:9/tfm_lesson-0.1.0-py3-none-any.whl"}
    with _environ(env, drop=("PYTHONPATH",)):
        NotebookClient(nb, timeout=600, kernel_name="colab", allow_errors=True, iopub_timeout=60,
                       resources={"metadata": {"path": str(colab_env["workdir"])}}).execute()
    setup, later, versions = ([o for o in c.outputs if o.output_type == "error"] for c in nb.cells)
    assert [e.ename for e in setup] == ["SetupFailed"] and "Two ways out" in "\n".join(setup[0].traceback)
    assert "Traceback" not in "\n".join(setup[0].traceback)
    assert [e.traceback for e in later] == [["tfm_lesson is not installed: the set-up cell (the first code cell) "
                                             "says why."]]
    printed = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    pins = colab_versions()
    assert not versions and f"KERNEL {pins['ipython']} {pins['traitlets']}" in printed, printed
