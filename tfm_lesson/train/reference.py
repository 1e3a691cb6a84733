"""Is my run normal? Reference runs of the course's training recipes, and a comparison that names likely causes.

The package ships, for each recipe the chapters train (``reverse`` and ``numbers`` in chapter 10,
``sentences`` in chapter 11), the training loss and a validation metric against the step for several seeds,
a few KB of JSON under ``tfm_lesson/data/reference/``. One command reruns them (into a new file; copy it over
the shipped one in a checkout to update the package):

    python -m tfm_lesson.train.reference --task reverse            # seeds 0 1 2: runs/reference/reverse.json

and one call compares a run of yours with the band those seeds span:

    history = train(model, data, steps=600, ...)              # or your own loop's {"step": [...], "loss": [...]}
    verdict = compare_to_reference(history, "reverse")         # draws the band and your curve
    print(verdict)                                             # inside the band, or the likely causes
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from importlib import resources
from pathlib import Path
from typing import NamedTuple, Sequence

from .recipes import RECIPES as _RECIPES

__all__ = ["RECIPES", "reference_run", "load_reference", "compare_to_reference", "Verdict", "main",
           "build_parser", "default_out"]

# The chapters' recipes (tfm_lesson.train.recipes) with what the reference records: the metric, the window of the loss
# means, the evaluations. Seed 0 is the chapter's run.
RECIPES: dict[str, dict] = {
    task: dict(chapter=_RECIPES[task]["chapter"], metric=metric, every=10, model=dict(_RECIPES[task]["model"]),
               train=dict(_RECIPES[task]["train"], eval_every=100))
    for task, metric in (("reverse", "exact_match"), ("numbers", "exact_match"), ("sentences", "bleu"))
}


def _path(task: str) -> Path:
    return Path(str(resources.files("tfm_lesson.data"))) / "reference" / f"{task}.json"


def _windows(steps: Sequence[int], losses: Sequence[float], every: int, last: int) -> list[float]:
    """Mean loss over the windows (0, every], (every, 2 every], ... up to ``last``; NaN where a window is empty
    and inf where a loss in it is not finite."""
    sums: dict[int, list[float]] = {}
    for s, l in zip(steps, losses):
        sums.setdefault((int(s) - 1) // every, []).append(float(l))
    out = []
    for w in range(last // every):
        vals = sums.get(w)
        if not vals:
            out.append(math.nan)
        elif not all(math.isfinite(v) for v in vals):
            out.append(math.inf)
        else:
            out.append(sum(vals) / len(vals))
    return out


def reference_run(task: str, seeds: Sequence[int] = (0, 1, 2), device: str | None = "cpu",
                  log=print) -> dict:
    """Train the chapter's recipe for ``task`` once per seed (model initialisation and batch order; the data
    split is the chapter's) and return the reference: window means of the loss, and the validation loss and
    metric at every evaluation."""
    import torch

    from ..data import load_task
    from ..device import seed_everything
    from .loop import make_model, train

    if task not in RECIPES:
        raise ValueError(f"task must be one of {sorted(RECIPES)}, got {task!r}")
    recipe = RECIPES[task]
    data = load_task(task, seed=0)
    runs = []
    for seed in seeds:
        seed_everything(seed)
        model = make_model(data.src_vocab, data.tgt_vocab, **recipe["model"])
        start = time.perf_counter()
        history = train(model, data, seed=seed, device=device, progress=False, amp=False, log=lambda _m: None,
                        **recipe["train"])
        seconds = time.perf_counter() - start
        runs.append(dict(seed=seed, seconds=round(seconds, 1),
                         loss=[round(x, 4) for x in _windows(history["step"], history["loss"], recipe["every"],
                                                             recipe["train"]["steps"])],
                         valid_loss=[round(x, 4) for x in history["valid_loss"]],
                         valid_metric=[round(x, 2) for x in history[f"valid_{recipe['metric']}"]],
                         valid_step=list(history["valid_step"])))
        log(f"{task} seed {seed}: {seconds:.0f} s, final loss {runs[-1]['loss'][-1]:.3f}, valid "
            f"{recipe['metric']} {runs[-1]['valid_metric'][-1]:.1f}")
    every = recipe["every"]
    return dict(task=task, chapter=recipe["chapter"], recipe=dict(model=recipe["model"], train=recipe["train"]),
                vocab_size=len(data.tgt_vocab), log_vocab=round(math.log(len(data.tgt_vocab)), 4),
                metric=recipe["metric"], every=every,
                step=list(range(every, recipe["train"]["steps"] + 1, every)), runs=runs,
                made_with=dict(torch=torch.__version__, device=str(device or "default")))


def load_reference(task: str) -> dict:
    """The shipped reference of ``task`` (see :data:`RECIPES`)."""
    path = _path(task)
    if task not in RECIPES or not path.exists():
        raise ValueError(f"no reference run for task {task!r}; there are: {sorted(RECIPES)}")
    return json.loads(path.read_text())


class Verdict(NamedTuple):
    """What :func:`compare_to_reference` found: ``normal`` (inside the band), the likely ``causes`` when not,
    and a ``message`` for people (``print(verdict)``)."""

    normal: bool
    causes: list[str]
    message: str
    figure: object = None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return self.message


CAUSES = {
    "nan": ("the loss became NaN or infinite at step {step}: the learning rate is too high (check peak_lr and "
            "warm-up, and that the schedule counts steps from 1), or float16 overflowed (train in float32 or "
            "bfloat16, or use a GradScaler); clipping the gradients helps against single bad steps"),
    "flat": ("the loss stays flat near log V = {logv:.2f}, the loss of a model that guesses uniformly: nothing "
             "is learned. Either the weights do not move: no gradient reaches them (optimizer.step() never "
             "called, gradients cleared between backward() and step(), parameters detached or frozen) or the "
             "learning rate is zero (a schedule multiplied by a base rate of 0, or evaluated at the wrong step). "
             "Or they move far too much: a rate too high from the first step (no warm-up, or a peak rate far too "
             "large) throws the model, in its first few steps, into a state where it predicts about the same "
             "distribution everywhere, and it never leaves it"),
    "leak": ("the loss falls far faster than in any reference run (window ending at step {step}: {got:.2f}, "
             "the band's lowest {lo:.2f}): the model probably sees the answer — a leak. Check that the labels are "
             "the decoder input shifted by one (tgt[:, 1:] vs tgt[:, :-1]) and that the decoder's self-attention "
             "has its causal mask"),
    "slow": ("the loss stays above the band ({share:.0%} of the windows): learning is slower than the recipe's. "
             "Compare your settings with the recipe {recipe}; a smaller rate, a longer warm-up, smaller batches, "
             "more dropout, over-tight gradient clipping or a missing sqrt(d_model) scale all do this"),
    "low": ("the loss ends below every reference run: fine if you changed the recipe (no label smoothing lowers "
            "the loss floor, more steps go further); if not, look for a leak"),
    "metric": ("the validation {metric} ({got:.1f}) is below every reference run's ({lo:.1f} at step {step}): "
               "check decoding (eval mode, the stop at </s>) and the data split"),
}


def compare_to_reference(history: dict, task: str, plot: bool = True, ax=None, margin: float = 0.15) -> Verdict:
    """Compare a training ``history`` (``{"step": [...], "loss": [...]}``, as :func:`tfm_lesson.train.loop.train`
    returns or your own loop builds, optionally ``valid_step`` and ``valid_<metric>``) with the reference runs
    of ``task``. The band spans the reference seeds' window means, widened by ``margin`` (relative) plus 0.05.
    Draws the band and your curve when ``plot``; returns a :class:`Verdict` naming the likely causes when the
    run leaves the band."""
    if not isinstance(history, dict) or "loss" not in history:
        raise TypeError("history must be a dict with a 'loss' list (and a 'step' list), as train() returns")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < math.inf:
        raise ValueError(f"margin must be a finite number >= 0 (a relative widening of the band), got {margin!r}")
    ref = load_reference(task)
    every, logv = ref["every"], ref["log_vocab"]
    losses = list(history["loss"])
    steps = list(history.get("step") or range(1, len(losses) + 1))
    if len(steps) != len(losses):
        raise ValueError(f"history's step ({len(steps)}) and loss ({len(losses)}) lists differ in length")
    ref_steps = ref["step"]
    mine = _windows(steps, losses, every, ref_steps[-1])
    per_seed = [run["loss"] for run in ref["runs"]]
    lo = [min(col) for col in zip(*per_seed)]
    hi = [max(col) for col in zip(*per_seed)]
    lo_b = [max(0.0, x * (1 - margin) - 0.05) for x in lo]
    hi_b = [x * (1 + margin) + 0.05 for x in hi]
    seen = [i for i, x in enumerate(mine) if not math.isnan(x)]
    causes: list[str] = []
    bad = [i for i in seen if math.isinf(mine[i])]
    if bad or any(not math.isfinite(float(x)) for x in losses):
        first = next((s for s, l in zip(steps, losses) if not math.isfinite(float(l))), ref_steps[bad[0]] if bad else 0)
        causes.append(CAUSES["nan"].format(step=first))
    elif seen:
        dropped = [i for i in seen if hi[i] < 0.7 * logv]  # windows where every reference run has clearly learned
        if dropped and all(mine[i] > 0.85 * logv for i in dropped):
            if all(mine[i] < 1.5 * logv for i in dropped):
                causes.append(CAUSES["flat"].format(logv=logv))
            else:  # far above a uniform guess: not "flat near log V"
                top = max(mine[i] for i in dropped)
                causes.append(f"the loss stays far above log V = {logv:.2f} (it reaches {top:.3g}), worse than a "
                              "model that guesses uniformly: the run diverges, or the loss is not the mean "
                              "cross-entropy per token (a sum instead of a mean, or probabilities passed as logits)")
        else:
            early = [i for i in seen if i < max(1, len(ref_steps) // 3)]
            leaks = [i for i in early if mine[i] < lo_b[i]]
            if leaks:
                i = leaks[0]
                causes.append(CAUSES["leak"].format(step=ref_steps[i], got=mine[i], lo=lo[i]))
            above = [i for i in seen if mine[i] > hi_b[i]]
            if not leaks and len(above) > 0.3 * len(seen):
                causes.append(CAUSES["slow"].format(share=len(above) / len(seen), recipe=ref["recipe"]["train"]))
            if not leaks and mine[seen[-1]] < lo_b[seen[-1]]:
                causes.append(CAUSES["low"])
    metric = ref["metric"]
    key = f"valid_{metric}"
    if history.get(key) and history.get("valid_step") and not causes:
        step, got = history["valid_step"][-1], history[key][-1]
        ref_at = [run["valid_metric"][run["valid_step"].index(step)] for run in ref["runs"] if step in run["valid_step"]]
        if ref_at and got < min(ref_at) - max(2.0, 0.1 * min(ref_at)):
            causes.append(CAUSES["metric"].format(metric=metric, got=got, lo=min(ref_at), step=step))
    n = len(ref["runs"])
    if not seen:
        message = f"no loss to compare: history has no step in 1..{ref_steps[-1]}"
    elif causes:
        message = f"your run leaves the band of {n} reference runs ({task}, chapter {ref['chapter']}):\n- " + \
                  "\n- ".join(causes)
    else:
        message = (f"normal: your loss stays inside the band of {n} reference runs ({task}, chapter {ref['chapter']}) "
                   f"over steps 1–{ref_steps[seen[-1]]}")
    figure = _draw(ref, mine, lo, hi, lo_b, hi_b, task, ax) if plot else None
    return Verdict(not causes and bool(seen), causes, message, figure)


def _draw(ref, mine, lo, hi, lo_b, hi_b, task, ax):
    from ..look.viz import plot_band  # a Figure without pyplot: shown where it is displayed, never a second time

    runs = {f"seed {run.get('seed', i)}": run["loss"] for i, run in enumerate(ref["runs"])}
    return plot_band(runs, x=ref["step"], yours=mine, lower=lo_b, upper=hi_b, baseline=ref["log_vocab"],
                     title=f"Is my run normal? {task}, chapter {ref['chapter']}'s recipe",
                     xlabel=f"step (mean loss over each {ref['every']} steps)", ylabel="training loss",
                     runs_label=f"{len(ref['runs'])} reference runs (mean, lowest to highest)",
                     bounds_label="band (reference runs, widened)", baseline_label="log V (uniform guess)", ax=ax)


def default_out(task: str) -> Path:
    """Where ``python -m tfm_lesson.train.reference --task TASK`` writes unless told: ``runs/reference/TASK.json``,
    beside the user's runs; the shipped file (``tfm_lesson/data/reference/TASK.json``) is never written over."""
    return Path("runs") / "reference" / f"{task}.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.train.reference",
                                     description="Regenerate the reference runs that compare_to_reference uses.")
    parser.add_argument("--task", required=True, choices=sorted(RECIPES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="at least three (default 0 1 2)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--out", type=Path, default=None, help="default: runs/reference/TASK.json (the package's "
                        "shipped files are never written over)")
    parser.add_argument("--overwrite", action="store_true", help="replace the file already at --out")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Check the flags and --out, train the recipe once per seed, refuse non-finite results, then write."""
    from .._io import atomic_open, check_writable_file
    from ..device import parse_device

    parser = build_parser()
    args = parser.parse_args(argv)
    if len(set(args.seeds)) < 3:
        parser.error("give at least three distinct seeds: a band needs several runs")
    if min(args.seeds) < 0:
        parser.error(f"--seeds must be >= 0, got {min(args.seeds)}")
    try:
        parse_device(args.device)
    except ValueError as err:
        parser.error(f"--device: {err}")
    try:
        out = check_writable_file(args.out or default_out(args.task), args.overwrite)
    except ValueError as err:
        parser.error(f"--out {err}")
    from .runstate import TrainingDiverged

    try:
        ref = reference_run(args.task, args.seeds, args.device)
    except TrainingDiverged as err:
        print(f"error: {err}: nothing written", file=sys.stderr)
        return 3
    if not all(math.isfinite(x) for run in ref["runs"] for x in (*run["loss"], *run["valid_loss"])):
        print("error: a reference run's loss is not finite: nothing written", file=sys.stderr)
        return 3
    with atomic_open(out, "w") as fh:
        fh.write(json.dumps(ref, separators=(",", ":")) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
