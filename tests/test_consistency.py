"""The repository agrees with itself: notebook pairs in sync, set-up cell, requirements, chapter structure."""
from __future__ import annotations

import re

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

import jupytext
import nbformat
import pytest

from tfm_lesson import course
from tfm_lesson.course import SETUP_CELL, chapters, is_setup_cell

from conftest import ROOT

NOTEBOOKS = chapters(ROOT / "notebooks")
CONTENT = [nb for nb in NOTEBOOKS if int(nb.name[:2]) <= 9]  # chapters 00-09: exercises with checkers


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def test_there_are_chapters():
    assert len(NOTEBOOKS) >= 10, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_paired_and_in_sync(path):
    script = course.paired_script(path)
    assert script.exists(), f"{path.name} has no py:percent pair {script}"
    nb = nbformat.read(path, as_version=4)
    assert "py:percent" in nb.metadata.get("jupytext", {}).get("formats", ""), f"{path.name} is not paired"
    from_script = jupytext.read(script)
    assert _cells(from_script) == _cells(nb), (
        f"{path.name} and {script.name} differ: run `.venv/bin/jupytext --sync {script}`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_is_the_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert is_setup_cell(first.source), f"{path.name}: the first code cell is not the set-up cell:\n{SETUP_CELL}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_outputs_are_clean_and_small(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{path.name} has unexecuted cells: run `make notebooks`"
    errors = [c.source[:60] for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name} was saved with errors in: {errors}"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), f"{path.name} shows no figure"
    assert path.stat().st_size < 2_000_000, f"{path.name} is {path.stat().st_size / 1e6:.1f} MB"
    text = path.read_text()
    assert "/work/" not in text and "/root/" not in text, f"{path.name} holds a machine-specific path"


@pytest.mark.parametrize("path", CONTENT, ids=lambda p: p.stem)
def test_content_chapter_has_checked_exercises(path):
    nb = nbformat.read(path, as_version=4)
    cells = nb.cells
    solutions = [i for i, c in enumerate(cells) if "solution" in c.metadata.get("tags", ())]
    assert len(solutions) >= 3, f"{path.name} has {len(solutions)} exercises with solutions, expected >= 3"
    for i in solutions:
        assert cells[i].cell_type == "code"
        assert i + 1 < len(cells) and "check_" in cells[i + 1].source, (
            f"{path.name}: the cell after solution cell {i} does not call a checker")
        assert "passed" in "".join(o.get("text", "") for o in cells[i + 1].outputs), (
            f"{path.name}: the checker after solution cell {i} did not print its success line")


def _requirement_names(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if line:
            name = re.split(r"[<>=!~ \[]", line, maxsplit=1)[0].lower().replace("_", "-")
            out[name] = line.replace(" ", "")
    return out


def test_requirements_and_environment_agree():
    req = _requirement_names((ROOT / "requirements.txt").read_text().splitlines())
    env_lines = [ln.strip()[2:] for ln in (ROOT / "environment.yml").read_text().splitlines()
                 if ln.startswith("      - ")]
    env = _requirement_names(env_lines)
    assert req == env, f"requirements.txt and environment.yml differ: {set(req.items()) ^ set(env.items())}"
    deps = _requirement_names(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    missing = {n: s for n, s in deps.items() if req.get(n) != s}
    assert not missing, f"pyproject dependencies not in requirements.txt as written: {missing}"


def test_readme_lists_every_chapter_and_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        assert path.name in readme, f"README does not list {path.name}"
    assert "make course" in readme and "make test" in readme


def test_ci_tests_the_oldest_torch_and_python_the_project_claims():
    """pyproject's floors (requires-python, torch>=X.Y) are what .ci/run sets up for its oldest environment, so a
    claim nobody tests fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    python_floor = re.fullmatch(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1)
    torch_floor = next(re.search(r">=\s*(\d+\.\d+)", d).group(1) for d in project["dependencies"]
                       if re.match(r"torch\b", d))
    ci = (ROOT / ".ci" / "run").read_text()
    setups = re.findall(r'^\s*setup_python (\S+) "torch==(\d+\.\d+)\.\d+"', ci, flags=re.M)
    assert (python_floor, torch_floor) in setups, (
        f"pyproject claims Python >={python_floor} and torch>={torch_floor}; .ci/run sets up {setups}")
    tests = re.findall(r'^\s*package_tests (\S+) "torch==(\d+\.\d+)\.\d+"', ci, flags=re.M)
    assert (python_floor, torch_floor) in tests, f".ci/run tests {tests}"
