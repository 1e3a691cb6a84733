"""Write tests/fixtures/colab_03_multi_head_attention.ipynb: chapter 03 as a learner downloads it from Colab after
working in it (File > Download > .ipynb), made from the student copy the way Colab saves a notebook.

    PYTHONPATH=. python tests/make_colab_fixture.py

What Colab changes, and this script does: ``nbformat_minor`` 0; no top-level cell ``id`` (Colab keeps its own,
12 characters, in ``metadata.id``); a ``metadata.colab`` block, ``accelerator`` and Colab's kernelspec; cell
metadata cut down to what Colab keeps (``id``, ``tags``, ``cellView``; a run code cell gets ``colab`` and
``outputId``); each ``source`` a list of lines. What the learner did: typed answers into the "your turn" cells,
exercise 3's scaling the scores by sqrt(d_model), not sqrt(d_k) (a wrong answer: the grade must be 6 / 9), and
deleted exercise 1's comment-only stub cell (nothing to count the exercises' cells by). Figures in the
stored outputs are dropped to keep the file small; text outputs stay.
"""
from __future__ import annotations

import json
import random
import string
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"
OUT = ROOT / "tests" / "fixtures" / "colab_03_multi_head_attention.ipynb"

SCALED_BY = ("/ math.sqrt(self.d_k)", "/ math.sqrt(self.heads * self.d_k)")  # sqrt(d_model): the learner's slip

_KEPT = ("tags", "cellView")


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def colab_notebook(chapter, seed: int = 3) -> dict:
    """``chapter``'s student copy with the answers typed in, saved as Colab saves it."""
    from tfm_lesson.course import copy_chapter_answers
    from tfm_lesson.course.grading import exercises

    worked = copy_chapter_answers(chapter)
    third = worked["cells"][exercises(chapter)[2].answer_index]
    assert SCALED_BY[0] in third["source"], "exercise 3's solution changed: update SCALED_BY"
    third["source"] = third["source"].replace(*SCALED_BY)
    del worked["cells"][exercises(chapter)[0].solution_index]  # the stub: the student copy keeps the chapter's cells
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "-_"
    cells = []
    for cell in worked["cells"]:
        meta = {"id": "".join(rng.choice(alphabet) for _ in range(12))}
        meta.update({k: v for k, v in cell.get("metadata", {}).items() if k in _KEPT})
        out = {"cell_type": cell["cell_type"], "metadata": meta, "source": _lines(cell["source"])}
        if cell["cell_type"] == "code":
            outputs = []
            for o in cell.get("outputs", []):
                o = dict(o)
                if o.get("output_type") in ("display_data", "execute_result"):
                    o["data"] = {k: v for k, v in o.get("data", {}).items() if k == "text/plain"}
                    if not o["data"]:
                        continue
                    o["metadata"] = {}
                if "text" in o:
                    o["text"] = _lines(o["text"]) if isinstance(o["text"], str) else o["text"]
                if isinstance(o.get("data", {}).get("text/plain"), str):
                    o["data"]["text/plain"] = _lines(o["data"]["text/plain"])
                outputs.append(o)
            if outputs:
                meta["colab"] = {"base_uri": "https://localhost:8080/"}
                meta["outputId"] = "%08x-%04x-%04x-%04x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 16, 16, 48))
            out.update(execution_count=cell.get("execution_count"), outputs=outputs)
        elif cell.get("attachments"):
            out["attachments"] = cell["attachments"]
        cells.append(out)
    return {
        "nbformat": 4, "nbformat_minor": 0,
        "metadata": {"colab": {"provenance": [], "gpuType": "T4", "toc_visible": True},
                     "kernelspec": {"name": "python3", "display_name": "Python 3"},
                     "language_info": {"name": "python"}, "accelerator": "GPU"},
        "cells": cells,
    }


def main() -> int:
    nb = colab_notebook(nbformat.read(CHAPTER, as_version=4))
    nbformat.validate(nbformat.from_dict(nb))  # a notebook Jupyter opens (nbformat 4.0 allows metadata.id)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(nb, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(nb['cells'])} cells, {OUT.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
