"""Every picture a chapter stores has a text for readers who cannot see it.

The text lives in the cell's metadata as ``mystnb: {image: {alt: ...}}``: MyST-NB (the Jupyter Book 1.x
notebook reader) puts it into the ``alt`` attribute of the image it renders, and in the paired script it
sits in the cell's header (``# %% mystnb={"image": {"alt": "..."}}``), next to the code that draws it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
# words that say "there is a picture" without saying what is in it
GENERIC = {"figure", "plot", "image", "picture", "output", "chart", "graph", "heatmap", "explorer picture",
           "the figure", "a plot", "see above", "todo", "alt text"}


def _image_cells(path: Path) -> list[tuple[int, dict]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "code"
            and any(kind in out.get("data", {}) for out in c.get("outputs", []) for kind in IMAGE_TYPES)]


def alt_text(cell: dict) -> str | None:
    """The text MyST-NB renders as the ``alt`` of the cell's images, or ``None``."""
    alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
    return alt if isinstance(alt, str) else None


def test_chapters_store_pictures() -> None:
    assert CHAPTERS and sum(len(_image_cells(p)) for p in CHAPTERS) >= 40  # the test below checks something


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_stored_picture_has_a_description(path: Path) -> None:
    problems = []
    for index, cell in _image_cells(path):
        alt = alt_text(cell)
        where = f"{path.name} cell {index} ({''.join(cell['source']).strip().splitlines()[-1][:60]!r})"
        if alt is None or not alt.strip():
            problems.append(f"{where}: no mystnb.image.alt")
            continue
        words = alt.split()
        if alt.strip().lower().rstrip(".") in GENERIC or len(words) < 8:
            problems.append(f"{where}: {alt!r} does not say what the picture shows (one full sentence, 8+ words)")
        elif not alt.rstrip().endswith("."):
            problems.append(f"{where}: {alt!r} is not a sentence (end it with a full stop)")
        elif len(alt) > 400:
            problems.append(f"{where}: {len(alt)} characters; keep it to one sentence (at most 400)")
    assert not problems, "\n".join(problems)


def test_descriptions_differ_within_a_chapter() -> None:
    """A copied description is almost always wrong for one of the two pictures."""
    for path in CHAPTERS:
        texts = [alt_text(cell) for _, cell in _image_cells(path)]
        texts = [t for t in texts if t]
        assert len(texts) == len(set(texts)), f"{path.name}: two pictures share one description"


def test_the_check_catches_a_missing_description(tmp_path: Path) -> None:
    nb = {"cells": [{"cell_type": "code", "source": ["fig"], "metadata": {},
                     "outputs": [{"output_type": "display_data", "data": {"image/png": "iVBOR"}}]}]}
    path = tmp_path / "99_x.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match="no mystnb.image.alt"):
        test_every_stored_picture_has_a_description(path)
    nb["cells"][0]["metadata"] = {"mystnb": {"image": {"alt": "A figure."}}}
    path.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match="does not say what"):
        test_every_stored_picture_has_a_description(path)
