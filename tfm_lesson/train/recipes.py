"""The course's training recipes: one table, the only place their numbers are written.

A recipe is the settings measured for one task: the model's size (``model``, the keyword arguments of
:func:`tfm_lesson.train.loop.make_model`), the training run (``train``: steps, batch size, warm-up steps, peak
learning rate, keyword arguments of :func:`tfm_lesson.train.loop.train`) and the beam for the test metrics.
Chapter 10 trains ``reverse`` and ``numbers`` with them (chapter 12 reuses ``numbers``), chapter 11 ``sentences``;
the command line (``python -m tfm_lesson.train --task X``) starts from them, the reference runs
(:mod:`tfm_lesson.train.reference`) and the benchmarks use them.

    recipe = RECIPES["reverse"]
    model = make_model(data.src_vocab, data.tgt_vocab, **recipe["model"])
    history = train(model, data, **recipe["train"])
"""
from __future__ import annotations

import copy

__all__ = ["RECIPES", "recipe", "LM_RECIPE", "SCALING"]

_TOY_MODEL = dict(d_model=64, heads=4, num_layers=2, d_ff=128, dropout=0.0)
_TOY_TRAIN = dict(steps=600, batch_size=128, warmup=100, peak_lr=3e-3)
_SENTENCES_MODEL = dict(d_model=128, heads=4, num_layers=2, d_ff=256, dropout=0.1)
_SENTENCES_TRAIN = dict(steps=500, batch_size=64, warmup=200, peak_lr=2e-3)

RECIPES: dict[str, dict] = {
    # chapter 10; copy and sort use reverse's settings, measured on reverse
    "copy": dict(chapter=10, model=_TOY_MODEL, train=_TOY_TRAIN, beam=1),
    "reverse": dict(chapter=10, model=_TOY_MODEL, train=_TOY_TRAIN, beam=1),
    "sort": dict(chapter=10, model=_TOY_MODEL, train=_TOY_TRAIN, beam=1),
    "numbers": dict(chapter=10, model=_TOY_MODEL, train=dict(_TOY_TRAIN, steps=400), beam=1),
    # chapter 11; your own --tsv file starts from the same settings, trained longer
    "sentences": dict(chapter=11, model=_SENTENCES_MODEL, train=_SENTENCES_TRAIN, beam=4),
    "tsv": dict(chapter=11, model=_SENTENCES_MODEL, train=dict(_SENTENCES_TRAIN, steps=1000), beam=4),
    # chapter 14's GPT language model (--task lm, --text FILE); its warm-up is 5% of the steps
    "lm": dict(chapter=14, model=dict(d_model=64, heads=4, num_layers=2, d_ff=256, dropout=0.0, vocab_size=512,
                                      max_len=64),
               train=dict(steps=1000, batch_size=32, peak_lr=3e-3), beam=None),
}


# chapter 19: the language-model recipe (AdamW with parameter groups, warm-up + cosine, clipping), the numbers of
# tfm_lesson.train.lm_recipe's defaults, and the scaling sweep of tfm_lesson.train.scaling (python -m tfm_lesson.train.scaling)
LM_RECIPE: dict = dict(peak_lr=6e-3, warmup=0.05, final_fraction=0.1, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8,
                       clip=1.0)
SCALING: dict = dict(
    chapter=19, vocab_size=512, max_len=64, batch_size=16, d_head=16, ff_mult=4, eval_tokens=32_768, seed=0,
    # (d_model, num_layers), smallest to largest; the non-embedding parameters span 240x
    shapes=[(16, 1), (16, 2), (32, 1), (32, 2), (48, 2), (64, 2), (64, 3), (96, 3), (128, 4)],
    # training FLOPs of each isoFLOP curve, and the first shape tried at each (five in a row, widened while the
    # best is at an edge)
    budgets=[6e10, 2e11, 6e11], first_shape=[0, 1, 2], shapes_per_budget=5,
    check_budget=2e12,  # the budget whose loss the fit predicts, then trains to check
)


def recipe(task: str) -> dict:
    """A copy of ``RECIPES[task]`` (change it freely), or a ``ValueError`` listing the tasks."""
    if task not in RECIPES:
        raise ValueError(f"no recipe for {task!r}; there are: {', '.join(RECIPES)}")
    return copy.deepcopy(RECIPES[task])
