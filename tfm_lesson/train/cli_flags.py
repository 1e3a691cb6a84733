"""The flags of ``python -m tfm_lesson.train`` (both trainers' command line) and what they start from: the
recipes flattened into one row per task, the default output folder, how often a run saves and evaluates.

The help's description is :mod:`tfm_lesson.train.cli`'s text (:func:`make_parser` takes it); the epilog is the
recipes' table (:func:`recipe_table`).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .recipes import RECIPES as _RECIPES

TASKS = ("copy", "reverse", "sort", "numbers", "sentences")

# The settings each task starts from: tfm_lesson.train.recipes, flattened (the model's and the run's settings side by
# side). "steps" applies when neither --steps nor --minutes is given.
RECIPES: dict[str, dict] = {name: {**r["model"], **r["train"], "beam": r["beam"]} for name, r in _RECIPES.items()}
LM_FALLBACKS = dict(seed=0, clip=1.0, warmup=None)
RECIPE_KEYS = ("d_model", "heads", "num_layers", "d_ff", "dropout", "batch_size", "warmup", "peak_lr", "beam")
DEFAULT_OUT = Path("runs/model")
SAVE_EVERY = 250  # --save-every, when not given
EVAL_LIMIT = 200  # --eval-limit, when not given


def recipe_table() -> str:
    """The ``--help`` epilog: each task's recipe, one row each, and the language model's in a line."""
    rows = ["recipes (--task X starts from these; flags override them):",
            "  task       d_model heads num-layers d_ff dropout batch warmup peak-lr steps beam"]
    for name, r in RECIPES.items():
        if name == "lm":
            continue
        label = "--tsv" if name == "tsv" else name
        rows.append(f"  {label:<10} {r['d_model']:>7} {r['heads']:>5} {r['num_layers']:>10} {r['d_ff']:>4} "
                    f"{r['dropout']:>7} {r['batch_size']:>5} {r['warmup']:>6} {r['peak_lr']:>7g} {r['steps']:>5} "
                    f"{r['beam']:>4}")
    rows.append("  (steps: when neither --steps nor --minutes is given; --minutes alone trains until the time is up;")
    rows.append("   copy and sort use reverse's settings, measured on reverse)")
    lm = RECIPES["lm"]
    rows.append(f"  --task lm / --text: vocab-size {lm['vocab_size']}, max-len {lm['max_len']}, "
                f"d_model {lm['d_model']}, "
                f"heads {lm['heads']}, num-layers {lm['num_layers']}, d_ff {lm['d_ff']}, batch {lm['batch_size']}, "
                f"peak-lr {lm['peak_lr']:g}, steps {lm['steps']}")
    return "\n".join(rows)


def make_parser(description: str) -> argparse.ArgumentParser:
    """Every flag of both kinds of run. A setting left out is None, so that a run can tell the command line from
    its recipe and from the run it resumes; ``description`` opens the help."""
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.train", description=description, epilog=recipe_table(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--task", choices=(*TASKS, "lm"),
                     help="a built-in task; lm: a GPT language model on the course's English sentences (tfm_lesson.train.lm)")
    src.add_argument("--tsv", type=Path, help="a source<TAB>target file (Tatoeba/Anki format, UTF-8)")
    src.add_argument("--text", type=Path, help="a UTF-8 text file: train a GPT language model on it (tfm_lesson.train.lm)")
    p.add_argument("--vocab-size", type=int, default=None, help="--task lm / --text: BPE vocabulary, >= 256 (default 512)")
    p.add_argument("--resume", type=Path, default=None, metavar="CHECKPOINT",
                   help="continue the run saved in CHECKPOINT (its task, data and settings; --steps is the total)")
    p.add_argument("--tokenizer", choices=("words", "chars"), default=None, help="for --tsv (default: words)")
    p.add_argument("--lower", action="store_true", default=None, help="lower-case the --tsv text")
    p.add_argument("--max-pairs", type=int, default=None, help="read at most this many --tsv pairs")
    p.add_argument("--max-len", type=int, default=None,
                   help="the most positions the model sees. Translation: default 512, longer pairs are dropped "
                   "when the data is read; --task lm / --text: also the training window (default 64)")
    p.add_argument("--d-model", type=int, default=None, help="(default: the recipe)")
    p.add_argument("--heads", type=int, default=None, help="(default: the recipe)")
    p.add_argument("--num-layers", type=int, default=None,
                   help="layers of each stack (encoder and decoder; a GPT's blocks) (default: the recipe)")
    p.add_argument("--d-ff", type=int, default=None, help="(default: the recipe)")
    p.add_argument("--dropout", type=float, default=None, help="(default: the recipe)")
    p.add_argument("--batch-size", type=int, default=None, help="per process under torchrun (default: the recipe)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps in all (default: the recipe's, "
                   "unless --minutes)")
    p.add_argument("--minutes", type=float, default=None, help="wall-clock limit for training")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: the recipe)")
    p.add_argument("--peak-lr", type=float, default=None, help="the rate at the end of warm-up (default: the recipe)")
    p.add_argument("--smoothing", type=float, default=None, help="label smoothing (default 0.1)")
    p.add_argument("--clip", type=float, default=None, help="gradient-norm clipping (default 1.0; 0: none)")
    p.add_argument("--no-amp", dest="amp", action="store_false", default=None,
                   help="on a GPU, train in float32 (no bf16/fp16 autocast)")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate on the valid split every N steps")
    p.add_argument("--eval-limit", type=int, default=None, help="valid pairs decoded at each evaluation (default 200)")
    p.add_argument("--save-every", type=int, default=None, help="save the run every N steps (default 250)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1 for small models on "
                   "the CPU, else torch's choice)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: cuda when present)")
    p.add_argument("--out", type=Path, default=None, help=f"folder for model.pt (default: {DEFAULT_OUT}; with "
                   "--resume, the checkpoint's folder)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already saved in --out")
    p.add_argument("--seed", type=int, default=None, help="(default 0)")
    p.add_argument("--beam", type=int, default=None, help="beam size for the test metrics, 1 = greedy "
                   "(default: the recipe)")
    p.add_argument("--test-limit", type=int, default=None, help="score only the first N test pairs (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p
