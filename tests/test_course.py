"""A learner's work is never overwritten: `student`, `restore` and `fold` refuse what would lose work, write atomically."""
from __future__ import annotations

import os
import shutil

import jupytext
import nbformat
import pytest

from tfm_lesson import course
from tfm_lesson.course.quiz_hand_in import is_hand_in_cell
from tfm_lesson.course.solution_form import SOLUTION_TITLE, fold_cell, is_form, strip_title

from conftest import ROOT

CHAPTER = next(p for p in course.chapters(ROOT / "notebooks") if p.name.startswith("01_"))


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    """A course folder with one chapter in notebooks/, as the working directory."""
    (tmp_path / "notebooks").mkdir()
    shutil.copy(CHAPTER, tmp_path / "notebooks" / CHAPTER.name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _chapter(tree):
    return tree / "notebooks" / CHAPTER.name


def _refused(capsys, argv, *words):
    assert course.main(argv) == 1, argv
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err
    return err


# student ------------------------------------------------------------------------------------------------------------
def test_student_refuses_the_chapters_own_folder(tree, capsys):
    before = _chapter(tree).read_bytes()
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "notebooks"], "overwrite the chapter")
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "./notebooks/../notebooks"], "overwrite")
    assert _chapter(tree).read_bytes() == before


def test_student_refuses_a_symlinked_folder_or_file(tree, capsys):
    before = _chapter(tree).read_bytes()
    (tree / "linked").symlink_to(tree / "notebooks", target_is_directory=True)
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "linked"], "overwrite")
    (tree / "out").mkdir()
    (tree / "out" / CHAPTER.name).symlink_to(_chapter(tree))
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "out"], "same file")
    assert _chapter(tree).read_bytes() == before


def test_student_refuses_a_folder_differing_only_in_case(tree, capsys):
    """On a case-insensitive disk (macOS, Windows) NOTEBOOKS/ is notebooks/: refused everywhere."""
    before = _chapter(tree).read_bytes()
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "NoteBooks"], "overwrite")
    assert _chapter(tree).read_bytes() == before and not (tree / "NoteBooks").exists()


def test_student_refuses_to_overwrite_any_notebook_with_solutions(tree, capsys):
    (tree / "other").mkdir()
    shutil.copy(CHAPTER, tree / "other" / CHAPTER.name)  # another copy of the chapter, solutions and all
    before = (tree / "other" / CHAPTER.name).read_bytes()
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "other"], "holds solutions")
    assert (tree / "other" / CHAPTER.name).read_bytes() == before


def test_student_keeps_a_learners_changed_copy_unless_forced(tree, capsys):
    assert course.main(["student", str(_chapter(tree)), "--out", "student"]) == 0
    copy = tree / "student" / CHAPTER.name
    assert course.main(["student", str(_chapter(tree)), "--out", "student"]) == 0  # unchanged: rewritten freely
    nb = nbformat.read(copy, as_version=4)
    stub = next(c for c in nb.cells if course._is_stub(c))
    stub.source = "def my_answer():\n    return 42\n"
    nbformat.write(nb, copy)
    before = copy.read_bytes()
    _refused(capsys, ["student", str(_chapter(tree)), "--out", "student"], "has changed", "--force")
    assert copy.read_bytes() == before
    assert course.main(["student", str(_chapter(tree)), "--out", "student", "--force"]) == 0
    assert "my_answer" not in copy.read_text()


# restore ------------------------------------------------------------------------------------------------------------
def _student(tree):
    assert course.main(["student", str(_chapter(tree)), "--out", "student"]) == 0
    return tree / "student" / CHAPTER.name


def test_restore_refuses_to_read_the_file_it_writes(tree, capsys):
    copy = _student(tree)
    before = copy.read_bytes()
    _refused(capsys, ["restore", str(copy), "--from", "student"], "from itself")
    _refused(capsys, ["restore", str(_chapter(tree)), "--from", "notebooks"], "from itself")
    assert copy.read_bytes() == before


def test_restore_refuses_a_source_without_solutions(tree, capsys):
    copy = _student(tree)
    (tree / "copy2").mkdir()
    shutil.copy(copy, tree / "copy2" / CHAPTER.name)
    before = copy.read_bytes()
    _refused(capsys, ["restore", str(tree / "copy2" / CHAPTER.name), "--from", "student"], "no solutions")
    assert copy.read_bytes() == before


def test_restore_keeps_what_the_learner_wrote_in_a_stub(tree, capsys):
    copy = _student(tree)
    nb = nbformat.read(copy, as_version=4)
    stubs = [i for i, c in enumerate(nb.cells) if course._is_stub(c)]
    nb.cells[stubs[0]].source = "# my own try\nanswer = 41 + 1\n"
    nbformat.write(nb, copy)
    assert course.main(["restore", str(copy)]) == 0
    assert "kept beside the solutions" in capsys.readouterr().out
    restored = nbformat.read(copy, as_version=4)
    original = nbformat.read(_chapter(tree), as_version=4)
    kept = [i for i, c in enumerate(restored.cells) if course.KEPT_TAG in c.metadata.get("tags", [])]
    assert len(kept) == 1
    k = kept[0]
    assert "answer = 41 + 1" in restored.cells[k].source and restored.cells[k].source.startswith(course.KEPT_HEADER)
    assert course._is_solution(restored.cells[k + 1]) and restored.cells[k + 1].source == original.cells[stubs[0]].source
    without = [c for c in restored.cells if course.KEPT_TAG not in c.metadata.get("tags", [])]
    assert [c.source for c in without] == [c.source for c in original.cells]
    nbformat.validate(restored)
    # restoring again changes nothing and keeps the kept cell once
    assert course.main(["restore", str(copy)]) == 0
    assert nbformat.read(copy, as_version=4) == restored


def test_restore_writes_nothing_on_a_structural_mismatch(tree, capsys):
    """The reported case: a cell inserted after a stub and the next heading deleted (same cell count)."""
    copy = _student(tree)
    nb = nbformat.read(copy, as_version=4)
    stub = next(i for i, c in enumerate(nb.cells) if course._is_stub(c))
    nb.cells.insert(stub + 1, nbformat.v4.new_code_cell("print('scratch')"))
    heading = next(i for i in range(stub + 2, len(nb.cells)) if nb.cells[i].cell_type == "markdown")
    del nb.cells[heading]
    nbformat.write(nb, copy)
    before = copy.read_bytes()
    err = _refused(capsys, ["restore", str(copy)], f"cell {stub + 2} differs", "Nothing was written")
    assert "scratch" in err  # the message shows what is in the student copy's cell
    assert copy.read_bytes() == before


@pytest.mark.parametrize("change", ["edit markdown", "drop last cell", "untag solution"])
def test_restore_names_the_cell_for_other_mismatches(tree, capsys, change):
    copy = _student(tree)
    nb = nbformat.read(copy, as_version=4)
    if change == "edit markdown":
        i = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and i > 3)
        nb.cells[i].source += "\nmy note"
    elif change == "drop last cell":  # counted as the chapter's cells: the quiz hand-in cell is the learner's
        i = len(nb.cells) - 1 - sum(map(is_hand_in_cell, nb.cells))
        nb.cells.pop()
    else:
        i = next(i for i, c in enumerate(nb.cells) if course._is_stub(c))
        nb.cells[i].metadata["tags"] = []
    nbformat.write(nb, copy)
    before = copy.read_bytes()
    _refused(capsys, ["restore", str(copy)], f"cell {i + 1} differs")
    assert copy.read_bytes() == before


def test_restore_checks_every_file_before_writing_any(tree, capsys):
    good = _student(tree)
    shutil.copy(CHAPTER.with_name(CHAPTER.name), tree / "notebooks" / "02_copy.ipynb")
    assert course.main(["student", "notebooks/02_copy.ipynb", "--out", "student"]) == 0
    bad = tree / "student" / "02_copy.ipynb"
    nb = nbformat.read(bad, as_version=4)
    nb.cells.pop(0)
    nbformat.write(nb, bad)
    before = good.read_bytes()
    _refused(capsys, ["restore", str(good), str(bad)], "02_copy.ipynb")
    assert good.read_bytes() == before


# atomic writes and folding ------------------------------------------------------------------------------------------
def test_a_failed_write_leaves_the_old_file(tree, monkeypatch):
    path = _chapter(tree)
    before = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    nb.cells = nb.cells[:2]

    def fail(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError):
        course.write_notebook(nb, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left behind


def test_fold_folds_solutions_only_and_is_idempotent(tree, capsys):
    path = _chapter(tree)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # as chapters were before folding, and before Colab forms
        cell.metadata.pop("jupyter", None)
        if course._is_solution(cell):
            cell.metadata.pop("cellView", None)
            cell.source = strip_title(cell.source)
    nbformat.write(nb, path)
    script = course.paired_script(path)
    script.parent.mkdir(exist_ok=True)
    script.write_text(jupytext.writes(nb, fmt="py:percent"))
    assert course.main(["fold", str(path)]) == 0
    folded = nbformat.read(path, as_version=4)
    solutions = [c for c in folded.cells if course._is_solution(c)]
    assert solutions and all(course.is_folded(c) and is_form(c) for c in solutions)
    assert not any(course.is_folded(c) or c.metadata.get("cellView") for c in folded.cells
                   if not course._is_solution(c))
    for a, b in zip(nb.cells, folded.cells):  # the code and outputs stay; a solution gains its title line only
        want = f"{SOLUTION_TITLE}\n{a.source}" if course._is_solution(a) else a.source
        assert (want, a.get("outputs")) == (b.source, b.get("outputs"))
    assert [c.source.strip() for c in jupytext.read(script).cells] == [c.source.strip() for c in folded.cells]
    first, first_script = path.read_bytes(), script.read_bytes()
    assert course.main(["fold", str(path)]) == 0
    assert path.read_bytes() == first and script.read_bytes() == first_script
    assert "0 solution cell(s) folded" in capsys.readouterr().out
    # a student's stub is folded in no front end; restore folds the solution again
    student = course.student_copy(folded)
    assert not any(course.is_folded(c) or "cellView" in c.metadata or "@title" in c.source for c in student.cells)
    assert course.restore(student, folded) == folded


def test_fold_replaces_a_title_of_another_wording():
    cell = nbformat.v4.new_code_cell("#@title Solution\nx = 1", metadata={"tags": ["solution"]})
    assert fold_cell(cell) and cell.source == f"{SOLUTION_TITLE}\nx = 1" and is_form(cell)
    assert not fold_cell(cell)
    plain = nbformat.v4.new_code_cell("x = 1")
    assert not fold_cell(plain) and plain.metadata == {} and plain.source == "x = 1"


def test_setup_cell_update_keeps_the_pair_in_sync(tree, capsys):
    """Chapters written with the earlier set-up cell get the current one, in the .ipynb and the .py alike."""
    import jupytext

    path, script = _chapter(tree), course.paired_script(_chapter(tree))
    legacy = course.LEGACY_SETUP_CELLS[0]
    text = course.paired_script(CHAPTER).read_text()
    script.parent.mkdir(exist_ok=True)
    script.write_text(text.replace(course.SETUP_CELL.strip(), legacy.strip()))  # the earlier wording, as before
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert course.is_setup_cell(first.source)
    first.source = legacy
    course.write_notebook(nb, path)
    assert legacy.strip() in script.read_text()
    assert course.main(["setup-cell", str(path)]) == 0 and "updated" in capsys.readouterr().out
    nb = nbformat.read(path, as_version=4)
    assert next(c for c in nb.cells if c.cell_type == "code").source == course.SETUP_CELL
    assert [c.source.strip() for c in jupytext.read(script).cells] == [c.source.strip() for c in nb.cells]
    assert course.main(["setup-cell", str(path)]) == 0 and "already current" in capsys.readouterr().out


def test_execute_folds_the_solutions_it_runs(tmp_path):
    """Every re-executed chapter comes out folded, the new solution cells included."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("### Exercise 1: add"),
                                         nbformat.v4.new_code_cell("def add(a, b):\n    ...", metadata={}),
                                         nbformat.v4.new_code_cell("def add(a, b):\n    return a + b",
                                                                   metadata={"tags": ["solution"]}),
                                         nbformat.v4.new_code_cell("print(add(1, 2))")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_demo.ipynb"
    nbformat.write(nb, path)
    course.execute([path], timeout=300)
    done = nbformat.read(path, as_version=4)
    assert course.is_folded(done.cells[2]) and is_form(done.cells[2]) and not course.is_folded(done.cells[1])
    assert done.cells[3].outputs[0]["text"] == "3\n"


@pytest.mark.parametrize("path", course.chapters(ROOT / "notebooks"), ids=lambda p: p.stem)
def test_every_solution_cell_of_every_chapter_is_folded(path):
    """JupyterLab and Notebook 7 show a folded solution as a bar, Colab as a form's title: a learner must choose to
    look, in either."""
    nb = nbformat.read(path, as_version=4)
    open_ = [i for i, c in enumerate(nb.cells) if course._is_solution(c) and not course.is_folded(c)]
    no_form = [i for i, c in enumerate(nb.cells) if course._is_solution(c) and not is_form(c)]
    assert not open_ and not no_form, (
        f"{path.name}: solution cells {open_} are not folded in JupyterLab, {no_form} not in Colab: "
        f"run `python -m tfm_lesson.course fold {path.relative_to(ROOT)}`")
    stray = [i for i, c in enumerate(nb.cells) if not course._is_solution(c) and c.metadata.get("cellView")]
    assert not stray, f"{path.name}: cells {stray} are Colab forms but no solution (their code is hidden in Colab)"


@pytest.mark.parametrize("command, now", [("book", "build"), ("badges", "badges"), ("colab-links", "colab-links")])
def test_a_command_that_needs_the_checkout_says_where_it_went(command, now, capsys):
    assert course.main([command]) == 2
    assert f"python tools/book.py {now}" in capsys.readouterr().err
