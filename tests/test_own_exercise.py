"""An instructor's own exercise, as book/instructors.md walks through it ("An exercise with a checker of your own"):
the page's chapter script and its commands, run literally; then a class graded with them: the right answer passes,
the named mistakes are named, an answer that learnt the notebook's outputs by heart fails on the grader's own
inputs, the forbidden shortcut is refused, and a chapter whose checker is found nowhere is refused before anything
runs (tfm_lesson/checks/custom.py, tfm_lesson/course/verdicts.py)."""
from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.checks import Mistake, make_checker

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "instructors.md"


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("**An exercise with a checker of your own**")
    return text[start:text.index("A quiz question is a", start)]


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", _section(), flags=re.S)


def test_make_checker_in_a_notebook_names_the_mistakes(capsys):
    namespace: dict = {}
    exec(_blocks("python")[0].split("# %% [markdown]\n# ### Exercise")[0], namespace)
    check = namespace["check_scaled_scores"]
    check(lambda q, k: q @ k.transpose(-2, -1) / q.size(-1) ** 0.5)
    assert "✔ check_scaled_scores passed: 2 cases drawn from seed 0" in capsys.readouterr().out
    with pytest.raises(Mistake, match="not scaled"):
        check(lambda q, k: q @ k.transpose(-2, -1))
    with pytest.raises(Mistake, match="instead of its square root"):
        check(lambda q, k: q @ k.transpose(-2, -1) / q.size(-1))
    with pytest.raises(Mistake, match="differs from the reference"):
        check(lambda q, k: q @ k.transpose(-2, -1) / 3)
    with pytest.raises(Mistake, match=r"returned a tensor of shape \(2, 8, 8\)"):
        check(lambda q, k: q.transpose(-2, -1) @ k)
    with pytest.raises(ValueError, match="name must be a Python name"):
        make_checker("not a name", inputs=lambda g: [], reference=lambda: None)


MEMORISED = '''\
import torch
_g = torch.Generator().manual_seed(0)  # the notebook's inputs, drawn again: their answers learnt by heart
_seen = {}
for _n in (3, 5):
    _q, _k = torch.randn(2, _n, 8, generator=_g), torch.randn(2, _n, 8, generator=_g)
    _seen[_n] = (_q @ _k.transpose(-2, -1) / 8 ** 0.5).tolist()


def scaled_scores(q, k):
    return torch.tensor(_seen[q.size(1)])
'''


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    words = shlex.split(command.split("#")[0])
    tool = {"python": [sys.executable], "jupytext": [sys.executable, "-m", "jupytext"]}[words[0]]
    return subprocess.run([*tool, *words[1:]], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_pages_walk_through_grades_a_class(tmp_path):
    (tmp_path / "scores.py").write_text(_blocks("python")[0])
    commands = [c for c in _blocks("bash")[0].splitlines() if c.strip()]
    assert [c.split()[0] for c in commands] == ["jupytext", "python", "python", "python"]
    for command in commands[:3]:
        out = _run(command, tmp_path)
        assert out.returncode == 0, (command, out.stdout[-2000:], out.stderr[-2000:])
    handout = nbformat.read(tmp_path / "student" / "scores.ipynb", as_version=4)
    stub = next(i for i, c in enumerate(handout.cells) if "your turn" in c.source)
    subs = tmp_path / "submissions"
    subs.mkdir()
    answers = {"right": "import math\n\ndef scaled_scores(q, k):\n    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
               "unscaled": "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)",
               "by_d_k": "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1) / q.size(-1)",
               "memorised": MEMORISED,
               "shortcut": "import torch.nn.functional as F\n\ndef scaled_scores(q, k):\n"
                           "    F.scaled_dot_product_attention\n    return q @ k.transpose(-2, -1) / q.size(-1) ** 0.5"}
    for name, source in answers.items():
        nb = nbformat.from_dict(handout)
        nb.cells[stub].source = source
        nbformat.write(nb, subs / f"{name}.ipynb")
    out = _run(commands[3], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"draw their inputs from seed \d+", out.stdout)
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {Path(r["submission"]).stem: r for r in csv.DictReader(f)}
    assert rows["right"]["passed"] == "True" and rows["right"]["points"] == "2"
    assert "not scaled" in rows["unscaled"]["message"]
    assert "instead of its square root" in rows["by_d_k"]["message"]
    assert rows["memorised"]["passed"] == "False"  # right on seed 0, wrong on the grader's inputs
    assert "WRITE IT YOURSELF" in rows["shortcut"]["message"]
    assert sum(r["passed"] == "True" for r in rows.values()) == 1
    # the same answers in the learner's notebook (seed 0): the memorised one passes there, which is the point
    namespace: dict = {}
    exec(MEMORISED, namespace)
    check = {}
    exec(_blocks("python")[0].split("# %% [markdown]\n# ### Exercise")[0], check)
    check["check_scaled_scores"](namespace["scaled_scores"])


@pytest.mark.slow
def test_a_checker_found_nowhere_is_refused_before_anything_runs(tmp_path):
    script = _blocks("python")[0].replace("check_scaled_scores(scaled_scores)", "check_scaled_scorez(scaled_scores)")
    (tmp_path / "scores.py").write_text(script)
    assert _run("jupytext --to notebook scores.py", tmp_path).returncode == 0
    (tmp_path / "subs").mkdir()
    nbformat.write(nbformat.read(tmp_path / "scores.ipynb", as_version=4), tmp_path / "subs" / "a.ipynb")
    out = _run("python -m tfm_lesson.course grade scores.ipynb subs --csv grades.csv", tmp_path)
    assert out.returncode == 2
    assert "Exercise 1: scaled scores" in out.stderr and "check_scaled_scorez" in out.stderr
    assert not (tmp_path / "grades.csv").exists()


@pytest.mark.slow
def test_the_pages_chapter_exports_to_nbgrader_and_otter_with_its_own_checker(tmp_path):
    """The page's chapter, exported to both tools: each test rebuilds the chapter's own checker (a name the package
    does not have) and grades the same answers as `course grade` does: the right one full points, a named mistake
    0 with its message."""
    import json
    import os

    from test_export import _env, _tool, otter_assigned, otter_results

    (tmp_path / "scores.py").write_text(_blocks("python")[0])
    for command in [c for c in _blocks("bash")[0].splitlines() if c.strip()][:2]:  # jupytext, execute
        out = _run(command, tmp_path)
        assert out.returncode == 0, (command, out.stdout[-2000:], out.stderr[-2000:])
    source = tmp_path / "src" / "ch.ipynb"
    source.parent.mkdir()
    source.write_bytes((tmp_path / "scores.ipynb").read_bytes())
    answers = {"right": "import math\n\ndef scaled_scores(q, k):\n    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
               "unscaled": "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)"}

    def filled(nb, is_answer, name):
        nb = nbformat.from_dict(json.loads(json.dumps(nb)))
        next(c for c in nb.cells if is_answer(c)).source = answers[name]
        return nb

    # Otter: `otter assign`, then `otter run` of each answer
    dist, autograder = otter_assigned(source, tmp_path / "otter", 60)
    student = nbformat.read(dist / "student" / "ch.ipynb", as_version=4)
    otter = {}
    for name in answers:
        path = tmp_path / f"otter-{name}.ipynb"
        nbformat.write(filled(student, lambda c: c.cell_type == "code" and "def scaled_scores" in c.source, name),
                       path)
        otter[name] = otter_results(autograder, path, tmp_path / f"otter-out-{name}")["ex1"]
    assert otter["right"]["score"] == 2 and not otter["unscaled"].get("score")
    assert "not scaled" in otter["unscaled"]["output"]
    # nbgrader: generate_assignment, then autograde the same answers
    course = tmp_path / "course"
    subprocess.run([sys.executable, "-m", "tfm_lesson.course", "export", str(source), "--format", "nbgrader",
                    "--out", str(course), "--assignment", "ch03", "--timeout", "60"], check=True, cwd=ROOT,
                   env=_env())
    nbgrader = _tool("nbgrader")
    run = subprocess.run([str(nbgrader), "generate_assignment", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    release = nbformat.read(course / "release" / "ch03" / "ch.ipynb", as_version=4)
    for name in answers:
        (course / "submitted" / name / "ch03").mkdir(parents=True)
        nbformat.write(filled(release, lambda c: c.metadata.get("nbgrader", {}).get("solution"), name),
                       course / "submitted" / name / "ch03" / "ch.ipynb")
    run = subprocess.run([str(nbgrader), "autograde", "ch03", "--create"], cwd=course, env=_env(),
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grades = {name: next(g.score for g in gb.find_submission_notebook("ch", "ch03", name).grades
                             if g.name == "ex1-check") for name in answers}
    assert grades == {"right": 2, "unscaled": 0}
    graded = nbformat.read(course / "autograded" / "unscaled" / "ch03" / "ch.ipynb", as_version=4)
    assert "not scaled" in json.dumps([c.outputs for c in graded.cells if c.cell_type == "code"])
    assert os.path.exists(course / "gradebook.db")
