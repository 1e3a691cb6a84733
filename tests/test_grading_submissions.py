"""Submissions as learners save them (tfm_lesson/course/submission.py): each exercise's answer is found by the ids,
tags and names its cells carry, never by position, so a notebook from Colab or an older Jupyter, a deleted or an
extra "your turn" stub and moved cells are graded on the answers they hold. No kernel runs here: these check what
the grader would run; tests/test_grading.py grades such notebooks end to end."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course import copy_chapter_answers, student_copy
from tfm_lesson.course.cells import STUDENT_STUB
from tfm_lesson.course.grading import exercises
from tfm_lesson.course.submission import answers, cell_id, read_submission

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"
COLAB = ROOT / "tests" / "fixtures" / "colab_03_multi_head_attention.ipynb"


@pytest.fixture(scope="module")
def chapter():
    return nbformat.read(CHAPTER, as_version=4)


@pytest.fixture(scope="module")
def right(chapter):
    return copy_chapter_answers(chapter)


def _typed(chapter, right) -> dict[int, list[str]]:
    """What the learner typed into each exercise's "your turn" cell."""
    return {ex.number: [right["cells"][ex.answer_index]["source"]] for ex in exercises(chapter)}


def _saved(nb, minor: int, ids: str):
    """``nb`` as another tool saves it: nbformat 4.``minor``; ``ids`` "none" (older Jupyter), "colab" (fresh ids in
    ``metadata.id``) or "fresh" (new top-level ids, as a notebook whose cells were re-created)."""
    out = copy.deepcopy(nb)
    out["nbformat_minor"] = minor
    for k, cell in enumerate(out["cells"]):
        cell.pop("id", None)
        if ids == "colab":
            cell.setdefault("metadata", {})["id"] = f"colab{k:07d}"
        elif ids == "fresh":
            cell["id"] = f"fresh-{k}"
    return nbformat.from_dict(out)


def _find(nb, text: str) -> int:
    return next(j for j, c in enumerate(nb["cells"]) if c["source"].startswith(text))


def _delete_stub(nb, number: int):
    """The learner deleted exercise ``number``'s stub cell (the comment-only cell tagged solution)."""
    stubs = [j for j, c in enumerate(nb["cells"]) if "solution" in c.get("metadata", {}).get("tags", [])]
    del nb["cells"][stubs[number - 1]]
    return nb


def _paste_stub(nb, after: str, tagged: bool):
    """The learner pasted one more comment-only stub after the cell starting with ``after``."""
    meta = {"tags": ["solution"]} if tagged else {}
    nb["cells"].insert(_find(nb, after) + 1, nbformat.v4.new_code_cell(STUDENT_STUB, metadata=meta))
    return nb


@pytest.mark.parametrize("minor, ids", [(0, "none"), (4, "none"), (0, "colab"), (4, "colab"), (5, "fresh")])
@pytest.mark.parametrize("change", ["as handed out", "stub deleted", "stub pasted", "untagged stub pasted",
                                    "one deleted, one pasted", "cells moved"])
def test_answers_are_found_however_the_notebook_was_saved(chapter, right, minor, ids, change):
    """Without the chapter's cell ids (nbformat 4.0-4.4, Colab's own ids, re-created cells) the answers are still
    each exercise's own, after the learner deleted a stub, pasted one, or moved cells (exercise 2's "your turn" cell
    below its check; exercise 3's whole block before exercise 1)."""
    nb = _saved(right, minor, ids)
    exs = exercises(chapter)
    if change == "stub deleted":
        _delete_stub(nb, 1)
    elif change in ("stub pasted", "untagged stub pasted"):
        _paste_stub(nb, "def merge_heads", tagged=change == "stub pasted")
    elif change == "one deleted, one pasted":  # as many stubs as exercises: counting them cannot tell
        _paste_stub(_delete_stub(nb, 1), "def merge_heads", tagged=True)
    elif change == "cells moved":
        cells = nb["cells"]
        cells.insert(_find(nb, "# NBVAL_CHECK_OUTPUT\ncheck_merge_heads"), cells.pop(_find(nb, "def merge_heads")))
        start = _find(nb, "### Exercise 3")
        block = [cells.pop(start) for _ in range(4)]  # title, your turn, stub, check
        first = _find(nb, "### Exercise 1")
        cells[first:first] = block
    found, notes = answers(nb, chapter, exs)
    assert found == _typed(chapter, right)
    assert not [n for n in notes if "missing" in n]


def test_the_colab_fixture_is_a_colab_save_and_its_answers_are_found(chapter, right):
    """The fixture is what Colab writes (minor 0, ids only in metadata.id, Colab's metadata), and it holds the
    answers typed in, exercise 3's wrong on purpose, and no stub cell for exercise 1 (the learner deleted it)."""
    raw = json.loads(COLAB.read_text())
    assert (raw["nbformat"], raw["nbformat_minor"]) == (4, 0)
    assert {"colab", "accelerator"} <= set(raw["metadata"])
    assert not any("id" in c for c in raw["cells"]) and all(c["metadata"].get("id") for c in raw["cells"])
    nb = read_submission(COLAB)
    assert not any(cell_id(c) == cell_id(o) for c in nb.cells for o in chapter.cells)  # no chapter id to go by
    assert len([c for c in nb.cells if "solution" in c.metadata.get("tags", [])]) == 2
    found, notes = answers(nb, chapter, exercises(chapter))
    typed = _typed(chapter, right)
    assert found[1] == typed[1] and found[2] == typed[2]
    assert found[3] == [typed[3][0].replace("math.sqrt(self.d_k)", "math.sqrt(self.heads * self.d_k)")]
    assert notes == []


def test_the_colab_fixture_is_what_the_script_writes(tmp_path):
    """tests/make_colab_fixture.py writes it (from the student copy, not by hand): run again, it writes the same
    cells (outputs aside, which follow the chapter's)."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from make_colab_fixture import colab_notebook
    finally:
        sys.path.remove(str(ROOT / "tests"))
    made = colab_notebook(nbformat.read(CHAPTER, as_version=4))
    stored = json.loads(COLAB.read_text())
    assert [(c["cell_type"], c["metadata"].get("tags"), "".join(c["source"])) for c in made["cells"]] == \
        [(c["cell_type"], c["metadata"].get("tags"), "".join(c["source"])) for c in stored["cells"]]


def test_an_answer_written_into_the_stub_counts_after_the_your_turn_cell(chapter, right):
    """A learner who typed the answer into the stub (tagged solution) and left the "your turn" skeleton: both run,
    in the notebook's order, so the answer is what the check sees, as in the learner's own run."""
    blank = _saved(student_copy(chapter), 4, "none")
    exs = exercises(chapter)
    answer = right["cells"][exs[0].answer_index]["source"]
    blank["cells"][_find(blank, STUDENT_STUB[:20])]["source"] = answer
    found, _ = answers(blank, chapter, exs)
    assert found[1] == [chapter["cells"][exs[0].answer_index]["source"], answer]


def test_a_scratch_cell_elsewhere_is_not_the_answer(chapter, right):
    """The learner tried a variant of split_heads in a cell far from the exercise: the exercise's own cell is graded;
    the other is noted as added and ignored."""
    nb = _saved(right, 4, "none")
    nb["cells"].insert(3, nbformat.v4.new_code_cell("def split_heads(x, heads):\n    return x  # trying things"))
    found, notes = answers(nb, chapter, exercises(chapter))
    assert found == _typed(chapter, right)
    assert any("added; ignored" in n and "def split_heads" in n for n in notes)


def test_a_moved_answer_is_found_by_its_name(chapter, right):
    """The learner moved exercise 1's answer to the top of the notebook: its name finds it."""
    nb = _saved(right, 4, "none")
    cell = nb["cells"].pop(_find(nb, "def split_heads"))
    nb["cells"].insert(2, cell)
    found, _ = answers(nb, chapter, exercises(chapter))
    assert found == _typed(chapter, right)


def test_deleted_exercise_cells_are_missing_and_an_emptied_cell_is_not(chapter, right):
    nb = _saved(right, 4, "none")
    exs = exercises(chapter)
    start = _find(nb, "def masked_softmax")  # exercise 3's answer as typed starts with its helper
    del nb["cells"][start:start + 3]  # exercise 3's your turn, stub and check
    nb["cells"][_find(nb, "def merge_heads")]["source"] = ""  # exercise 2's answer cleared
    found, notes = answers(nb, chapter, exs)
    assert found[3] is None and any("Exercise 3" in n and "missing" in n for n in notes)
    assert found[2] == []  # its check still runs, and says what is undefined
    assert found[1] == _typed(chapter, right)[1]
