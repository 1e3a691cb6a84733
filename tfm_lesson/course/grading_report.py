"""Scores and reports of a graded class: each exercise's result and its points (:class:`Result`), a graded
submission (:class:`Graded`), the CSV with one row per submission and exercise (:func:`write_csv`) and one
Markdown feedback page per submission (:func:`feedback_page`, :func:`write_feedback`)."""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from .._io import atomic_open
from .exercises import Exercise


@dataclass
class Result:
    """How one exercise of one submission went: the checker's message when it did not pass."""

    exercise: Exercise
    passed: bool = False
    message: str = ""

    @property
    def points(self) -> int:
        return self.exercise.points if self.passed else 0


@dataclass
class Graded:
    """One submission, graded: a result per exercise, notes on what was ignored, the seconds it took."""

    submission: str
    results: list[Result]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    sandboxed: bool = True  # False: graded with --no-sandbox, which every report says


def write_csv(graded: list[Graded], path: Path) -> None:
    """The class's table: ``submission, exercise, passed, points, max_points, message``, written atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["submission", "exercise", "passed", "points", "max_points", "message"])
    for g in graded:
        for r in g.results:
            writer.writerow([g.submission, r.exercise.title, r.passed, r.points, r.exercise.points, r.message])
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as f:
        f.write(buffer.getvalue())


def feedback_page(g: Graded, chapter_name: str) -> str:
    """One student's page, Markdown: the score, each exercise with the checker's message, what was ignored."""
    total = sum(r.points for r in g.results)
    top = sum(r.exercise.points for r in g.results)
    lines = [f"# {chapter_name}: {Path(g.submission).name}", "", f"**Score: {total} / {top}**", ""]
    if not g.sandboxed:
        lines += ["Graded without a sandbox (`--no-sandbox`): the code ran with the grader's own rights.", ""]
    for r in g.results:
        mark = "passed" if r.passed else "not passed"
        lines += [f"## {r.exercise.title}: {r.points} / {r.exercise.points} ({mark})", ""]
        if r.message:
            lines += ["```text", r.message, "```", ""]
    if g.notes:
        lines += ["## Not graded", "", "Only the exercise cells are graded; these differences from the chapter "
                  "were ignored:", ""] + [f"- {n}" for n in g.notes] + [""]
    return "\n".join(lines)


def _page_name(g: Graded, taken: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(g.submission).with_suffix("").as_posix().strip("./"))[-120:]
    name, k = stem + ".md", 1
    while name in taken:
        k += 1
        name = f"{stem}-{k}.md"
    taken.add(name)
    return name


def write_feedback(graded: list[Graded], folder: Path, chapter_name: str) -> None:
    """One page per submission in ``folder``, named after the submission's path (never two with one name)."""
    folder.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    for g in graded:
        with atomic_open(folder / _page_name(g, taken), "w") as f:
            f.write(feedback_page(g, chapter_name))
