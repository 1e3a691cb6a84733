"""One home per fact: the training recipes are written once, in tfm_lesson/train/recipes.py, and read by the command
line, the reference runs, the benchmarks and every chapter."""
from __future__ import annotations

import re

import pytest

import sys

from conftest import ROOT
from tfm_lesson import reference, train

sys.path.insert(0, str(ROOT / "tools"))
import bench  # noqa: E402  (tools/bench.py)
from tfm_lesson.train.recipes import RECIPES, recipe

PAIR = re.compile(r"""["']?\b([a-z_]+)["']?\s*[=:]\s*([0-9][0-9.e+-]*)\b""")
READERS = sorted(p for p in (ROOT / "tfm_lesson").rglob("*.py") if p.name != "recipes.py") + sorted(
    (ROOT / "notebooks" / "py").glob("[0-9][0-9]_*.py")) + [ROOT / "tools" / "bench.py", ROOT / "book" / "try_this.py"]


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def _recipe_parts():
    for name, r in RECIPES.items():
        for part in ("model", "train"):
            yield f"{name}.{part}", {k: float(v) for k, v in r[part].items()}


def test_no_recipe_literal_outside_the_table():
    """A line that sets a recipe's whole model (every setting) or three of its training settings to the recipe's
    values is a copy of that recipe (a model size alone, d_model=64 heads=4, is common and allowed)."""
    found = []
    for path in READERS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            pairs = {k: _number(v) for k, v in PAIR.findall(line)}
            for where, part in _recipe_parts():
                same = [k for k, v in part.items() if pairs.get(k) is not None and pairs[k] == v]
                if len(same) >= (len(part) if where.endswith("model") else 3):
                    found.append(f"{path.relative_to(ROOT)}:{number} copies {where} ({', '.join(same)})")
                    break
    assert not found, "read tfm_lesson.train.recipes.RECIPES instead:\n" + "\n".join(found)


def test_the_test_above_can_fail():
    line = "model = make_model(v, v, d_model=64, heads=4, num_layers=2, d_ff=128, dropout=0.0)"
    pairs = {k: _number(v) for k, v in PAIR.findall(line)}
    assert sum(pairs.get(k) == float(v) for k, v in RECIPES["reverse"]["model"].items()) == 5


@pytest.mark.parametrize("task", ["reverse", "numbers", "sentences"])
def test_every_reader_reads_the_table(task):
    r = RECIPES[task]
    assert {k: train.RECIPES[task][k] for k in (*r["model"], *r["train"])} == {**r["model"], **r["train"]}
    assert reference.RECIPES[task]["model"] == r["model"]
    assert {k: v for k, v in reference.RECIPES[task]["train"].items() if k != "eval_every"} == r["train"]
    assert bench.TARGETS[task]["model"] == r["model"]
    assert {**bench.TARGETS[task]["train"], "steps": r["train"]["steps"]} == r["train"]


def test_numbers_has_one_step_count_the_chapter_s_and_the_reference_s():
    assert RECIPES["numbers"]["train"]["steps"] == reference.load_reference("numbers")["recipe"]["train"]["steps"]
    assert train.RECIPES["numbers"]["steps"] == RECIPES["numbers"]["train"]["steps"]


def test_recipe_is_a_copy():
    mine = recipe("reverse")
    mine["model"]["d_model"] = 1
    assert RECIPES["reverse"]["model"]["d_model"] != 1
    with pytest.raises(ValueError, match="no recipe for 'nope'"):
        recipe("nope")
