"""A student copy links to student copies: its badge opens the published copy at the release, its set-up cell
installs that release, and no link in it reaches a chapter with solutions (tfm_lesson/course/student_links.py)."""
from __future__ import annotations

import nbformat
import pytest

from tfm_lesson import course
from tfm_lesson.course.student_links import chapter_links

from conftest import ROOT

CHAPTERS = course.chapters(ROOT / "notebooks")


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """Every chapter's student copy, as `course student` writes them into student/ (the default)."""
    out = tmp_path_factory.mktemp("class") / "student"
    assert course.main(["student", *map(str, CHAPTERS), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_student_copy_links_to_the_published_student_copy(copies, path):
    chapter = nbformat.read(path, as_version=4)
    assert chapter_links(chapter) == [course.colab_url(path.name)], "the chapter's own badge is what the check sees"
    copy = nbformat.read(copies / path.name, as_version=4)
    assert chapter_links(copy) == [], f"{path.name}: the student copy links to a chapter with solutions"
    text = "\n".join(c.source for c in copy.cells)
    assert course.colab_badge(path.name, folder="student") in text
    assert course.colab_url(path.name, folder="student").endswith(f"/blob/{course.REF}/student/{path.name}")
    assert next(c.source for c in copy.cells if c.cell_type == "code") == course.SETUP_CELL


def test_a_copy_that_would_still_link_to_a_chapter_is_not_written(tmp_path, capsys):
    nb = nbformat.read(CHAPTERS[1], as_version=4)
    nb.cells.insert(3, nbformat.v4.new_markdown_cell(
        f"The answers: [chapter 01]({course.colab_url(CHAPTERS[1].name, 'prof-x/course', 'v2')})"))
    (tmp_path / "notebooks").mkdir()
    chapter = tmp_path / "notebooks" / CHAPTERS[1].name
    nbformat.write(nb, chapter)
    assert course.main(["student", str(chapter), "--out", str(tmp_path / "student")]) == 1
    err = capsys.readouterr().err
    assert "would link to chapters with solutions" in err and "prof-x/course/blob/v2/notebooks/" in err
    assert not (tmp_path / "student").exists()


def test_out_cannot_be_named_like_the_chapters_folder(tmp_path, capsys):
    assert course.main(["student", str(CHAPTERS[1]), "--out", str(tmp_path / "notebooks")]) == 1
    assert "other than 'notebooks'" in capsys.readouterr().err and not (tmp_path / "notebooks").exists()
