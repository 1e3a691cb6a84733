"""Where the course lives is one setting (``REPOSITORY`` and ``REF`` in tfm_lesson/course/location.py): the set-up cells,
the chapters' Colab badges, README's badges and the book's launch buttons all follow it."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import jupytext
import nbformat
import pytest
import yaml

from tfm_lesson import course

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import book  # noqa: E402  (tools/book.py: repository tooling, outside the package)

CHAPTERS = course.chapters(ROOT / "notebooks")


def _first_code(nb) -> str:
    return next(c.source for c in nb.cells if c.cell_type == "code")


def _title_cell(nb) -> str:
    return next(c.source for c in nb.cells if c.cell_type == "markdown" and re.search(r"^# \d\d · ", c.source, re.M))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_the_current_setup_cell_and_badge(path):
    nb = nbformat.read(path, as_version=4)
    fix = "run `python tools/book.py badges`"
    assert _first_code(nb) == course.SETUP_CELL, f"{path.name}: the set-up cell is not the current one: {fix}"
    title = _title_cell(nb).split("\n")
    assert title[1:4] == ["", course.colab_badge(path.name), ""] or title[1:3] == ["", course.colab_badge(path.name)], \
        f"{path.name}: no current Colab badge under the title: {fix}"
    assert course.colab_url(path.name).endswith(f"/blob/{course.REF}/notebooks/{path.name}")


def test_readme_and_the_book_follow_the_setting():
    readme = (ROOT / "README.md").read_text()
    assert book.readme_with_badges(readme) == readme, "README's badges are stale: run `python tools/book.py badges`"
    for path in CHAPTERS:
        assert f"[colab-{path.name[:2]}]: {course.colab_url(path.name)}" in readme, path.name
        assert re.search(rf"^\| {path.name[:2]} \| `{path.name}` \[!\[Open In Colab\]", readme, re.M), path.name
    config_text = (ROOT / "book" / "_config.yml").read_text()
    assert book.book_config_with_location(config_text) == config_text
    config = yaml.safe_load(config_text)
    assert config["repository"] == {"url": f"https://github.com/{course.REPOSITORY}", "branch": course.REF,
                                    "path_to_book": ""}
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_the_ref_is_the_release_tag_of_this_version():
    """A pinned ref: a class's copies install the same package all term (a branch would move under them)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert course.REF == f"v{version}", (course.REF, version)
    assert course.INSTALL_SOURCE == f"tfm-lesson @ git+https://github.com/{course.REPOSITORY}@{course.REF}"


def test_changing_the_setting_moves_all_four(tmp_path):
    """In a copy: new REPOSITORY and REF, `python tools/book.py badges`, and every set-up cell, badge, README link
    and the book's launch buttons say the new place; the chapters' .py pairs and outputs follow."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "tfm_lesson", copy / "tfm_lesson", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "book.py", copy / "tools" / "book.py")
    picked = CHAPTERS[:2] + CHAPTERS[-1:]
    (copy / "notebooks" / "py").mkdir(parents=True)
    for path in picked:
        shutil.copy(path, copy / "notebooks" / path.name)
        shutil.copy(course.paired_script(path), copy / "notebooks" / "py" / (path.stem + ".py"))
    (copy / "book").mkdir()
    shutil.copy(ROOT / "book" / "_config.yml", copy / "book" / "_config.yml")
    shutil.copy(ROOT / "README.md", copy / "README.md")
    settings = copy / "tfm_lesson" / "course" / "location.py"
    text = settings.read_text()
    assert text.count(f'REPOSITORY = "{course.REPOSITORY}"') == 1 and text.count(f'REF = "{course.REF}"') == 1
    settings.write_text(text.replace(f'REPOSITORY = "{course.REPOSITORY}"', 'REPOSITORY = "a-teacher/their-fork"')
                        .replace(f'REF = "{course.REF}"', 'REF = "spring-2027"'))
    done = subprocess.run([sys.executable, "tools/book.py", "badges"], cwd=copy, capture_output=True,
                          text=True, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr
    url = "https://colab.research.google.com/github/a-teacher/their-fork/blob/spring-2027/notebooks/"
    for path in picked:
        nb = nbformat.read(copy / "notebooks" / path.name, as_version=4)
        assert "git+https://github.com/a-teacher/their-fork@spring-2027" in _first_code(nb)
        assert course.is_setup_cell(_first_code(nb))
        assert f"]({url}{path.name})" in _title_cell(nb)
        assert course.REPOSITORY not in _first_code(nb) + _title_cell(nb)
        script = jupytext.read(copy / "notebooks" / "py" / (path.stem + ".py"))
        assert [c.source.strip() for c in script.cells] == [c.source.strip() for c in nb.cells]
        original = nbformat.read(path, as_version=4)
        assert [c.get("outputs") for c in nb.cells] == [c.get("outputs") for c in original.cells]  # outputs kept
    readme = (copy / "README.md").read_text()
    assert f"[colab-01]: {url}01_" in readme and f"blob/{course.REF}/" not in readme
    config = yaml.safe_load((copy / "book" / "_config.yml").read_text())
    assert config["repository"]["url"] == "https://github.com/a-teacher/their-fork"
    assert config["repository"]["branch"] == "spring-2027"
    again = subprocess.run([sys.executable, "tools/book.py", "badges"], cwd=copy, capture_output=True,
                           text=True, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert "all current" in again.stdout, again.stdout


def test_setup_cell_rewrites_a_cell_made_from_an_older_setting(tmp_path, capsys):
    folder = tmp_path / "notebooks"
    (folder / "py").mkdir(parents=True)
    path = folder / CHAPTERS[1].name
    shutil.copy(CHAPTERS[1], path)
    shutil.copy(course.paired_script(CHAPTERS[1]), course.paired_script(path))
    old = course.setup_cell("someone/old-home", "main")
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    script = course.paired_script(path)
    script.write_text(script.read_text().replace(first.source.strip(), old.strip()))
    first.source = old
    course.write_notebook(nb, path)
    assert course.main(["setup-cell", str(path)]) == 0 and "updated" in capsys.readouterr().out
    assert _first_code(nbformat.read(path, as_version=4)) == course.SETUP_CELL
    assert course.SETUP_CELL.strip() in script.read_text() and "old-home" not in script.read_text()
    assert course.main(["setup-cell", str(path)]) == 0 and "already current" in capsys.readouterr().out


def test_student_copies_for_a_fork(tmp_path, capsys):
    out = tmp_path / "student"
    assert course.main(["student", str(CHAPTERS[1]), "--out", str(out), "--repository", "prof-x/tfm_lesson",
                        "--ref", "class-2027"]) == 0
    nb = nbformat.read(out / CHAPTERS[1].name, as_version=4)
    assert _first_code(nb) == course.setup_cell("prof-x/tfm_lesson", "class-2027")
    assert course.colab_badge(CHAPTERS[1].name, "prof-x/tfm_lesson", "class-2027", folder="student") in _title_cell(nb)
    assert course.main(["student", str(CHAPTERS[1]), "--out", str(tmp_path / "bad"), "--repository",
                        "no-slash"]) == 1
    assert "--repository must be OWNER/NAME" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert course.main(["student", str(CHAPTERS[1]), "--out", str(tmp_path / "plain")]) == 0  # the course's own
    plain = nbformat.read(tmp_path / "plain" / CHAPTERS[1].name, as_version=4)
    assert _first_code(plain) == course.SETUP_CELL
    assert course.colab_badge(CHAPTERS[1].name, folder="plain") in _title_cell(plain)


def test_the_book_shows_its_launch_button_not_the_badge():
    page = book.book_page(nbformat.read(CHAPTERS[1], as_version=4))
    assert "colab-badge.svg" not in "".join(c.source for c in page.cells)
    assert re.search(r"^# 01 · ", _title_cell(page), re.M)


def test_a_setup_cell_from_any_home_is_recognised_and_others_are_not():
    assert course.is_setup_cell(course.setup_cell("x/y", "abc1234"))
    assert course.is_setup_cell(course.LEGACY_SETUP_CELLS[0])
    assert not course.is_setup_cell(course.SETUP_CELL.replace('"-q",', '"-q", "--upgrade",'))
    with pytest.raises(course.CourseError, match="--ref"):
        course.check_location("a/b", "bad ref")


def test_colab_links_prints_one_link_per_chapter(capsys):
    assert book.main(["colab-links"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{path.stem}: {course.colab_url(path)}" for path in CHAPTERS]
