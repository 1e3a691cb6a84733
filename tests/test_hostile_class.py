"""A hostile class, written by someone who had not read the grader's code or its tests (the red team of issue 32,
given only the student copies, the README and the instructors' page): their answers to chapters 09 and 18, kept
in ``tests/hostile/chNN.json`` (attack -> exercise number -> the cells' sources). Each once earned points its work
did not: naive attention run in a thread, in NumPy or with PyTorch's modes off; the whole score matrix in a buffer
made beforehand; autograd under another name; a tie the generator's forward bypasses; a parameter count read off a
built model. Graded by ``course grade`` (sandboxed where bubblewrap runs), each must now score what its work earns;
the honest classmate keeps full marks."""
from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import nbformat
import pytest

from tfm_lesson.course import copy_chapter_answers, grading, student_copy
from tfm_lesson.course.grading import exercises
from tfm_lesson.course.sandbox import SandboxUnavailable, check_sandbox

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "hostile"
CHAPTERS = {"09": ROOT / "notebooks" / "09_the_transformer.ipynb",
            "18": ROOT / "notebooks" / "18_attention_that_fits.ipynb"}
# what the work really earns, where it is not 0: a blockwise softmax that is exactly softmax without any reduction
# spanning a row, but in two passes (the global max first) rather than online, which no rule checks; a tie made the
# other way round (embedding.weight = generator.weight), which shares one Parameter as well
EARNED = {("18", "04_not_online_but_split", 1): 3, ("09", "04_tied_the_other_way", 3): 2}
# not decided by any rule: a loop over blocks of queries that meets all keys at once (no key tiles) holds a few
# (block, k_len) strips, a quarter of the probe's budget or so; whether the allocator's leftovers push it over
# varies from run to run (the instructors' page says the budget is not set against such a strip)
EITHER = {("18", "04_not_online_but_split", 2): (0, 3)}

try:
    check_sandbox()
    SANDBOX: bool | str = True
except SandboxUnavailable:
    SANDBOX = "none"

pytestmark = pytest.mark.slow  # a class of nine and one of seven, with chapter 18's probes: a minute or two


def _class(cid: str, folder: Path) -> dict:
    chapter = nbformat.read(CHAPTERS[cid], as_version=4)
    exs = {ex.number: ex for ex in exercises(chapter)}
    blank = student_copy(chapter)
    nbformat.write(nbformat.from_dict(copy_chapter_answers(chapter)), folder / "00_honest.ipynb")
    attacks = json.loads((HOSTILE / f"ch{cid}.json").read_text())
    for name, answers in attacks.items():
        nb = copy.deepcopy(blank)
        for number, source in answers.items():
            nb["cells"][exs[int(number)].answer_index]["source"] = source
        nbformat.write(nbformat.from_dict(nb), folder / f"{name}.ipynb")
    return attacks


@pytest.mark.parametrize("cid", sorted(CHAPTERS))
def test_the_hostile_class_earns_only_what_its_work_earns(cid, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    attacks = _class(cid, subs)
    grading.grade(CHAPTERS[cid], [subs], tmp_path / "grades.csv", timeout=120, jobs=2, sandbox=SANDBOX, quiz=False)
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {(Path(r["submission"]).stem, int(r["exercise"].split()[1].rstrip(":"))): r for r in csv.DictReader(f)}
    honest = [r for (who, _), r in rows.items() if who == "00_honest"]
    assert honest and all(r["passed"] == "True" for r in honest), [r["message"] for r in honest]
    for name, answers in attacks.items():
        for number in answers:
            row = rows[(name, int(number))]
            key = (cid, name, int(number))
            allowed = EITHER.get(key, (EARNED.get(key, 0),))
            assert float(row["points"]) in allowed, (name, number, row["message"])
