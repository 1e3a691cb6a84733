"""The export side of the graders without the tools' slow runs (tests/test_export.py runs nbgrader and Otter
themselves): export never writes over its chapter or an edited export without --force; the Otter student version
keeps each exercise's stub; Otter's failure text points where the checker's message is; the Otter assignment names
the course's requirements; the nbgrader config finds `alembic` beside nbgrader."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course.cli import class_main
from tfm_lesson.course.export import NBGRADER_CONFIG, course_requirements, otter_notebook
from tfm_lesson.course.export_record import RECORD

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"
NAME = CHAPTER.name


def _export(chapter: Path, fmt: str, out: Path, *extra: str) -> int:
    return class_main(["export", str(chapter), "--format", fmt, "--out", str(out), "--assignment", "ch03", *extra])


@pytest.fixture
def chapter(tmp_path) -> Path:
    """A copy of chapter 03 in a folder of its own (with a file beside it, as notebooks/ has)."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(CHAPTER, folder / NAME)
    (folder / "04_other.ipynb").write_text(CHAPTER.read_text())
    return folder / NAME


@pytest.mark.parametrize("how", ["folder", "dot", "symlink"])
def test_otter_export_refuses_the_chapters_own_folder(chapter, tmp_path, capsys, monkeypatch, how):
    """`--out notebooks` (the chapter's folder, by name, as `.` from inside it, or through a symlink) would replace
    the chapter: exit 2, the path and --force named, and --force does not change it."""
    before = chapter.read_bytes()
    out = chapter.parent
    if how == "dot":
        monkeypatch.chdir(chapter.parent)
        out, chapter = Path("."), Path(NAME)
    elif how == "symlink":
        (tmp_path / "link").symlink_to(chapter.parent, target_is_directory=True)
        out = tmp_path / "link"
    for extra in ([], ["--force"]):
        assert _export(chapter, "otter", out, *extra) == 2
        err = capsys.readouterr().err
        assert NAME in err and "--force" in err and "chapter" in err, err
    assert (tmp_path / "notebooks" / NAME).read_bytes() == before
    assert not (tmp_path / "notebooks" / RECORD).exists()


def test_export_refuses_another_chapter_in_its_way(chapter, tmp_path, capsys):
    """A notebook with solutions (another copy of the chapter) where the export would go is never replaced."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(CHAPTER, other / NAME)
    before = (other / NAME).read_bytes()
    assert _export(chapter, "otter", other, "--force") == 2
    err = capsys.readouterr().err
    assert str(other / NAME) in err and "holds solutions" in err and "--force" in err
    assert (other / NAME).read_bytes() == before


def test_otter_export_refuses_an_edited_master_notebook(chapter, tmp_path, capsys):
    out = tmp_path / "otter"
    assert _export(chapter, "otter", out) == 0
    assert _export(chapter, "otter", out) == 0  # an export left as it was is simply written again
    master = out / NAME
    nb = nbformat.read(master, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("The instructor's own note for this term."))
    nbformat.write(nb, master)
    edited = master.read_bytes()
    capsys.readouterr()
    assert _export(chapter, "otter", out) == 2
    err = capsys.readouterr().err
    assert str(master) in err and "edited" in err and "--force" in err, err
    assert master.read_bytes() == edited
    assert _export(chapter, "otter", out, "--force") == 0
    assert "instructor's own note" not in master.read_text()
    assert _export(chapter, "otter", out) == 0  # the record follows what --force wrote


def test_nbgrader_export_refuses_an_edited_source_notebook_and_unknown_files(chapter, tmp_path, capsys):
    course = tmp_path / "course"
    assert _export(chapter, "nbgrader", course) == 0
    source = course / "source" / "ch03" / NAME
    text = source.read_text()
    source.write_text(text.replace("Exercise 1", "Exercise 1 (worth a bonus this term)", 1))
    capsys.readouterr()
    assert _export(chapter, "nbgrader", course) == 2
    err = capsys.readouterr().err
    assert str(source) in err and "--force" in err
    assert "bonus this term" in source.read_text()
    # a file export never wrote, in the way: refused, named, until --force
    fresh = tmp_path / "fresh"
    (fresh / "source" / "ch03").mkdir(parents=True)
    (fresh / "source" / "ch03" / NAME).write_text("{}")
    assert _export(chapter, "nbgrader", fresh) == 2
    err = capsys.readouterr().err
    assert "was not written by export" in err and "--force" in err
    assert _export(chapter, "nbgrader", fresh, "--force") == 0


def test_nbgrader_reexport_takes_a_new_timeout_and_keeps_an_edited_config(chapter, tmp_path, capsys):
    """Issue 34: a re-export with a new --timeout used to leave the old nbgrader_config.py in place, silently."""
    course = tmp_path / "course"
    assert _export(chapter, "nbgrader", course, "--timeout", "30") == 0
    config = course / "nbgrader_config.py"
    assert "c.Execute.timeout = 30" in config.read_text()
    assert _export(chapter, "nbgrader", course, "--timeout", "90") == 0
    assert "c.Execute.timeout = 90" in config.read_text()
    config.write_text(config.read_text() + "c.Execute.timeout = 45  # mine\n")
    capsys.readouterr()
    assert _export(chapter, "nbgrader", course, "--timeout", "60") == 2
    err = capsys.readouterr().err
    assert str(config) in err and "--force" in err
    assert "# mine" in config.read_text()


def test_otter_student_version_keeps_the_stub_signatures():
    """What `otter assign` puts in the student notebook where a solution was: the exercise's own stub (signature and
    body stub), run through Otter's own solution removal."""
    solutions = pytest.importorskip("otter.assign.solutions")
    chapter = nbformat.read(CHAPTER, as_version=4)
    nb = otter_notebook(chapter, "ch03")
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "# BEGIN SOLUTION" in c.source]
    assert len(cells) == 3
    student = ["\n".join(solutions.replace_solutions(c.split("\n"), "python")) for c in cells]
    assert student[0].strip() == ("def split_heads(x, heads):\n"
                                  "    ...  # your turn: (batch, len, d_model) -> (batch, heads, len, d_k)")
    assert student[1].startswith("def merge_heads(x):\n    ...")
    assert "class MyMultiHeadAttention" in student[2] and "view(" not in "".join(student)
    namespace: dict = {}
    exec(cells[0], namespace)  # the solution version still defines the solution (the prompt is only a string)
    import torch

    assert namespace["split_heads"](torch.zeros(2, 5, 8), 2).shape == (2, 2, 5, 4)


def test_otter_failure_message_points_below():
    """Otter prints a test's failure_message before its result (where the checker's message is)."""
    tests = [c.source for c in otter_notebook(nbformat.read(CHAPTER, as_version=4), "ch03").cells
             if "failure_message:" in c.source and "def test_ex" in c.source]  # the exercises' (the quiz's: its own)
    assert len(tests) == 10  # a test case per named check of the three checkers (3, 3 and 4)
    assert all("in the result below" in t and "above" not in t for t in tests)


def test_otter_config_names_torch_and_the_course_as_pinned():
    tomllib = pytest.importorskip("tomllib")
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(p.split("#")[0].strip() for p in pins if p.startswith("torch"))
    from tfm_lesson.course.location import install_sources

    assert course_requirements() == [torch, install_sources()[0]]
    config = otter_notebook(nbformat.read(CHAPTER, as_version=4), "ch03").cells[0].source
    assert f'requirements:\n    - "{torch}"\n    - "{install_sources()[0]}"\n' in config


def test_nbgrader_config_puts_alembic_on_path(tmp_path, monkeypatch):
    """nbgrader runs `alembic` by name: the config puts this Python's own bin first when PATH has none."""
    namespace = {"get_config": lambda: __import__("traitlets.config", fromlist=["Config"]).Config(),
                 "__file__": str(tmp_path / "nbgrader_config.py")}
    monkeypatch.setenv("PATH", str(tmp_path))  # no alembic there
    exec(NBGRADER_CONFIG.format(timeout=30), namespace)
    assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
