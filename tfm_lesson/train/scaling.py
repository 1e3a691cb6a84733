"""A scaling law grown on a CPU (chapter 19): isoFLOP curves of small GPTs, power-law fits, a prediction, a check.

    python -m tfm_lesson.train.scaling --out runs/scaling.json        # the whole sweep; run it again to resume

For each training budget ``C`` (FLOPs, counted by :func:`tfm_lesson.train.cost.flops_per_token`), every model size of a
row of shapes is trained on ``C`` FLOPs to within one step (about 0.2%): a small model sees many tokens, a large one
few. Each budget's validation losses against ``ln N`` (``N``: all parameters) form an **isoFLOP curve** (Hoffmann
et al., 2022, approach 2); a parabola through it gives the best size ``N_opt(C)`` at its vertex and the loss there
``L(C)``. A straight line through ``(ln C, ln N_opt)`` is approach 2's power law ``N_opt = k_N C^a``; one through
``(ln C, ln L)``, ``L = k_L C^-alpha_C``, is this course's addition (close to Kaplan et al.'s law for the loss at
the compute-efficient size), the one that predicts a loss. A bootstrap over the points (each budget's points
drawn again with replacement, the whole fit repeated) gives their uncertainty. Then the fit **predicts** the loss
at a larger budget, the prediction is written down, and only then is that run trained: the check.

Every run is trained by steps, seeded, on one CPU thread (:func:`tfm_lesson.device.auto_threads`); each point is
written to ``--out`` atomically as soon as it is done, so an interrupted sweep continues where it stopped. The
settings are :data:`tfm_lesson.train.recipes.SCALING` and :data:`tfm_lesson.train.recipes.LM_RECIPE`; the results shipped
with the package are read by :func:`load_shipped`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .._io import atomic_open, check_writable_file
from .cost import flops_per_token, non_embedding_parameters, parameter_count
from ..data.corpus import load_corpus
from ..device import seed_everything
from ..gpt import GPT, GPTConfig
from .lm import LMData, perplexity, prepare_lm_data
from .lm_recipe import train_recipe
from .recipes import LM_RECIPE, SCALING

__all__ = ["shape_config", "run_point", "grid", "fit_parabola", "fit_power_law", "fit_sweep", "bootstrap", "predict",
           "sweep", "load_shipped", "plot_isoflops", "DEFAULT_OUT", "FORMAT", "main"]

FORMAT = "tfm_lesson-scaling/1"
DEFAULT_OUT = Path("runs") / "scaling.json"


def shape_config(d_model: int, num_layers: int, settings: dict = SCALING) -> GPTConfig:
    """The GPT of one grid point: heads of ``d_head`` dimensions, ``d_ff = ff_mult d_model``, chapter 14's
    layout (pre-norm, learned positions, GELU, biases, tied embeddings), no dropout."""
    return GPTConfig(vocab_size=settings["vocab_size"], max_len=settings["max_len"], d_model=d_model,
                     heads=max(1, d_model // settings["d_head"]), d_ff=settings["ff_mult"] * d_model,
                     num_layers=num_layers, dropout=0.0)


def run_point(data: LMData, budget: float, d_model: int, num_layers: int, settings: dict = SCALING) -> dict:
    """Train one shape on ``budget`` FLOPs (as many steps of ``batch_size x max_len`` tokens as that buys) and
    return its record: sizes, steps, tokens, seconds and the validation loss (nats per token)."""
    config = shape_config(d_model, num_layers, settings)
    tokens_per_step = settings["batch_size"] * settings["max_len"]
    per_step = flops_per_token(config, settings["max_len"]) * tokens_per_step
    steps = max(1, round(budget / per_step))
    seed_everything(settings["seed"])
    model = GPT(config)
    start = time.perf_counter()
    history = train_recipe(model, data, steps, settings["batch_size"], seed=settings["seed"], device="cpu")
    valid = math.log(perplexity(model, data.valid, max_tokens=settings["eval_tokens"], device="cpu"))
    return dict(budget=budget, d_model=d_model, num_layers=num_layers, params=parameter_count(config),
                non_embedding=non_embedding_parameters(config), steps=steps, tokens=steps * tokens_per_step,
                flops=steps * per_step, train_loss=float(np.mean(history["loss"][-max(1, steps // 10):])),
                valid_loss=valid, seconds=time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------------- fits
def fit_parabola(params: list[float], losses: list[float]) -> tuple[float, float] | None:
    """Vertex ``(N_opt, L_min)`` of the least-squares parabola through ``(ln N, loss)``, or ``None`` when it has no
    minimum between the smallest and the largest size given, or fewer than three distinct sizes are given."""
    x = np.log(np.asarray(params, dtype=float))
    if len(np.unique(x)) < 3:
        return None
    a, b, c = np.polyfit(x, np.asarray(losses, dtype=float), 2)
    vertex = -b / (2 * a) if a > 0 else math.inf
    if not x.min() <= vertex <= x.max():  # no minimum, or one outside the sizes tried: not read off this curve
        return None
    return float(math.exp(vertex)), float(c - b * b / (4 * a))


def fit_power_law(x: list[float], y: list[float]) -> tuple[float, float]:
    """``(k, a)`` of ``y = k x^a``, a least-squares straight line through ``(ln x, ln y)``."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"a power law needs at least two (x, y) points, got {len(x)} and {len(y)}")
    a, ln_k = np.polyfit(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)), 1)
    return float(math.exp(ln_k)), float(a)


def _by_budget(points: list[dict]) -> dict[float, list[dict]]:
    groups: dict[float, list[dict]] = {}
    for p in points:
        groups.setdefault(float(p["budget"]), []).append(p)
    return dict(sorted(groups.items()))


def fit_sweep(points: list[dict]) -> dict | None:
    """Each budget's vertex, then the two power laws: ``{"budgets", "n_opt", "l_opt", "n_law": (k_N, a),
    "l_law": (k_L, -alpha_C)}``, or ``None`` when a budget has no minimum or fewer than two budgets have one."""
    budgets, n_opt, l_opt = [], [], []
    for budget, group in _by_budget(points).items():
        vertex = fit_parabola([p["params"] for p in group], [p["valid_loss"] for p in group])
        if vertex is None:
            return None
        budgets.append(budget)
        n_opt.append(vertex[0])
        l_opt.append(vertex[1])
    if len(budgets) < 2:
        return None
    return dict(budgets=budgets, n_opt=n_opt, l_opt=l_opt, n_law=fit_power_law(budgets, n_opt),
                l_law=fit_power_law(budgets, l_opt))


def predict(fit: dict, budget: float) -> tuple[float, float]:
    """``(N_opt, L)`` that the power laws of :func:`fit_sweep` give at ``budget``."""
    (k, a), (big_a, b) = fit["n_law"], fit["l_law"]
    return k * budget ** a, big_a * budget ** b


def bootstrap(points: list[dict], budget: float, draws: int = 1000, seed: int = 0) -> dict:
    """Percentiles (5, 50, 95) of the exponents and of the prediction at ``budget`` over ``draws`` refits, each on
    every budget's points drawn again with replacement. Draws that cannot be fitted are skipped and counted by
    cause: ``"skipped_few_sizes"`` (a budget drew fewer than three distinct sizes, so no parabola) and
    ``"skipped_no_minimum"`` (a budget's parabola has no minimum inside its sizes); ``"skipped"`` is their sum."""
    rng = np.random.default_rng(seed)
    groups = list(_by_budget(points).values())
    samples: dict[str, list[float]] = {"a": [], "alpha": [], "n_pred": [], "l_pred": []}
    few_sizes = no_minimum = 0
    for _ in range(draws):
        drawn_groups = [[g[i] for i in rng.integers(0, len(g), len(g))] for g in groups]
        if any(len({p["params"] for p in g}) < 3 for g in drawn_groups):
            few_sizes += 1
            continue
        fit = fit_sweep([p for g in drawn_groups for p in g])
        if fit is None:
            no_minimum += 1
            continue
        n_pred, l_pred = predict(fit, budget)
        for key, value in (("a", fit["n_law"][1]), ("alpha", -fit["l_law"][1]), ("n_pred", n_pred),
                           ("l_pred", l_pred)):
            samples[key].append(value)
    if not samples["a"]:
        raise ValueError("no bootstrap draw had a minimum at every budget: widen the shapes of the sweep")
    out = {key: [float(v) for v in np.percentile(values, [5, 50, 95])] for key, values in samples.items()}
    return {**out, "draws": draws, "skipped": few_sizes + no_minimum, "skipped_few_sizes": few_sizes,
            "skipped_no_minimum": no_minimum}


# --------------------------------------------------------------------------------------------------- sweep
def _save(path: Path, result: dict) -> None:
    with atomic_open(path) as f:
        json.dump(result, f, indent=1)


def _settings(settings: dict) -> dict:
    return {"sweep": {k: (list(map(list, v)) if k == "shapes" else v) for k, v in settings.items()},
            "recipe": {k: list(v) if isinstance(v, tuple) else v for k, v in LM_RECIPE.items()}}


def _grid_row(result: dict, budget_index: int, data: LMData, settings: dict, log: Callable[[str], None]) -> None:
    """Train the shapes of one budget: ``shapes_per_budget`` in a row, then one more on a side while the best
    loss sits at that edge (the minimum must lie inside the curve)."""
    shapes = [tuple(s) for s in settings["shapes"]]
    budget = float(settings["budgets"][budget_index])
    first = settings["first_shape"][budget_index]
    chosen = list(range(first, min(len(shapes), first + settings["shapes_per_budget"])))
    while True:
        for i in chosen:
            _point(result, budget, shapes[i], data, settings, log)
        losses = {i: _find(result, budget, shapes[i])["valid_loss"] for i in chosen}
        best = min(losses, key=losses.get)
        if best == chosen[0] and chosen[0] > 0:
            chosen.insert(0, chosen[0] - 1)
        elif best == chosen[-1] and chosen[-1] + 1 < len(shapes):
            chosen.append(chosen[-1] + 1)
        else:
            return


def _find(result: dict, budget: float, shape: tuple[int, int], key: str = "points") -> dict | None:
    for p in result[key]:
        if float(p["budget"]) == budget and (p["d_model"], p["num_layers"]) == tuple(shape):
            return p
    return None


def _point(result: dict, budget: float, shape: tuple[int, int], data: LMData, settings: dict,
           log: Callable[[str], None], key: str = "points") -> dict:
    done = _find(result, budget, shape, key)
    if done is not None:
        return done
    point = run_point(data, budget, *shape, settings=settings)
    if not math.isfinite(point["valid_loss"]):
        raise FloatingPointError(f"the run d_model={shape[0]}, num_layers={shape[1]} at C={budget:.0e} ended with "
                                 f"a non-finite loss; nothing written for it")
    result[key].append(point)
    result["seconds"] += point["seconds"]
    _save(result["_path"], {k: v for k, v in result.items() if k != "_path"})
    log(f"C={budget:.1e} d_model={shape[0]:>3} layers={shape[1]} N={point['params']:>7,} steps={point['steps']:>5} "
        f"loss {point['valid_loss']:.3f} ({point['seconds']:.0f} s, {result['seconds'] / 60:.1f} min so far)")
    return point


def _nearest_shape(shapes: list[tuple[int, int]], params: float, settings: dict) -> tuple[int, int]:
    return min(shapes, key=lambda s: abs(math.log(parameter_count(shape_config(*s, settings)) / params)))


def grid(out: str | os.PathLike, settings: dict = SCALING, data: LMData | None = None,
         log: Callable[[str], None] = print) -> dict:
    """Run (or continue) the isoFLOP grid into ``out``, every point saved as it ends; returns the result, whose
    ``"_path"`` is ``out``. A file there with other settings is refused."""
    path = Path(out)
    stated = _settings(settings)
    result = {"format": FORMAT, **stated, "points": [], "check_points": [], "seconds": 0.0}
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("format") != FORMAT or {k: saved.get(k) for k in stated} != stated:
            raise ValueError(f"{path} holds a sweep with other settings: choose another --out or pass --overwrite")
        result = saved
        log(f"resuming {path}: {len(result['points'])} points done")
    result["_path"] = path
    result.setdefault("load_average", []).append(list(os.getloadavg()) if hasattr(os, "getloadavg") else None)
    data = data if data is not None else prepare_lm_data(load_corpus(), settings["vocab_size"])
    result["train_tokens"] = int(data.train.numel())
    for index in range(len(settings["budgets"])):
        _grid_row(result, index, data, settings, log)
    return result


def sweep(out: str | os.PathLike, settings: dict = SCALING, data: LMData | None = None,
          log: Callable[[str], None] = print, draws: int = 1000) -> dict:
    """Run (or continue) the whole sweep into ``out``: the isoFLOP grid, the fit and its bootstrap, the prediction
    at ``check_budget`` (written before the check run starts), the check run. Returns the result."""
    data = data if data is not None else prepare_lm_data(load_corpus(), settings["vocab_size"])
    result = grid(out, settings, data, log)
    return _predict_and_check(result, settings, data, log, draws, torch.get_num_threads())


def _predict_and_check(result: dict, settings: dict, data: LMData, log: Callable[[str], None], draws: int,
                       torch_threads: int) -> dict:
    path = result["_path"]
    fit = fit_sweep(result["points"])
    if fit is None:
        raise ValueError("a budget's isoFLOP curve has no minimum: widen the shapes of the sweep")
    check_budget = float(settings["check_budget"])
    if "prediction" not in result:  # written down before the check run starts
        n_pred, l_pred = predict(fit, check_budget)
        band = bootstrap(result["points"], check_budget, draws, settings["seed"])
        shape = _nearest_shape([tuple(s) for s in settings["shapes"]], n_pred, settings)
        result["fit"] = {k: v for k, v in fit.items()}
        result["prediction"] = dict(budget=check_budget, n_opt=n_pred, loss=l_pred, bootstrap=band,
                                    shape=list(shape), made_at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
        _save(path, {k: v for k, v in result.items() if k != "_path"})
        log(f"prediction at C={check_budget:.1e}: N_opt {n_pred:,.0f}, loss {l_pred:.3f} "
            f"(90% bootstrap {band['l_pred'][0]:.3f}-{band['l_pred'][2]:.3f}); checking with shape {shape}")
    check = _point(result, check_budget, tuple(result["prediction"]["shape"]), data, settings, log, "check_points")
    result["check"] = dict(check, inside=band_holds(result["prediction"], check["valid_loss"]))
    result["load_average"][-1] = [result["load_average"][-1], list(os.getloadavg()) if hasattr(os, "getloadavg")
                                  else None]
    result["threads"] = torch_threads  # the process's count; each run trains under auto_threads (one thread here)
    _save(path, {k: v for k, v in result.items() if k != "_path"})
    del result["_path"]
    return result


def band_holds(prediction: dict, loss: float) -> bool:
    """Whether ``loss`` lies inside the prediction's 90% bootstrap interval."""
    low, _, high = prediction["bootstrap"]["l_pred"]
    return bool(low <= loss <= high)


def load_shipped() -> dict:
    """The sweep shipped with the package (``tfm_lesson/data/reference/scaling.json``)."""
    text = resources.files("tfm_lesson.data").joinpath("reference", "scaling.json").read_text(encoding="utf-8")
    return json.loads(text)


def plot_isoflops(result: dict, title: str | None = None):
    """Two panels: left, the isoFLOP curves (validation loss against parameters, one colour per budget) with
    their parabolas and vertices, and the check run; right, the loss at each budget's vertex against the budget,
    the power law through them, the prediction with its 90% bootstrap interval, and the check run."""
    from ..look import viz

    points, pred, check = result["points"], result["prediction"], result["check"]
    fit = fit_sweep(points)
    fig = viz.new_figure(10, 3.9)
    left, right = fig.subplots(1, 2)
    with viz.course_style():
        for colour, (budget, group) in zip(viz.PALETTE, _by_budget(points).items()):
            group = sorted(group, key=lambda p: p["params"])
            n = np.array([p["params"] for p in group], dtype=float)
            loss = np.array([p["valid_loss"] for p in group])
            left.plot(n, loss, "o", color=colour, label=f"C = {budget:.0e} FLOPs")
            grid_n = np.exp(np.linspace(np.log(n.min()), np.log(n.max()), 60))
            left.plot(grid_n, np.polyval(np.polyfit(np.log(n), loss, 2), np.log(grid_n)), "-", color=colour, alpha=0.7)
        left.plot(fit["n_opt"], fit["l_opt"], "D", color="black", markersize=5, label="best size (vertex)")
        left.plot([check["params"]], [check["valid_loss"]], "*", color=viz.PALETTE[3], markersize=12,
                  label=f"check run, C = {check['budget']:.0e}")
        left.set_xscale("log")
        from matplotlib.ticker import FixedLocator, NullFormatter

        sizes = [p["params"] for p in points] + [check["params"]]
        ticks = [t for t in (1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6) if min(sizes) / 1.5 <= t <= max(sizes) * 1.5]
        left.xaxis.set_major_locator(FixedLocator(ticks))
        left.set_xticklabels([f"{t / 1e3:g}k" for t in ticks])
        left.xaxis.set_minor_formatter(NullFormatter())
        viz.style_axes(left, "isoFLOP curves", "parameters N (log)", "validation loss (nats/token)")
        left.legend(fontsize=8)
        budgets = np.array(fit["budgets"] + [pred["budget"]])
        c_grid = np.exp(np.linspace(np.log(budgets.min()), np.log(budgets.max()), 50))
        (big_a, b) = fit["l_law"]
        right.plot(fit["budgets"], fit["l_opt"], "D", color="black", label="loss at each budget's vertex")
        right.plot(c_grid, big_a * c_grid ** b, "--", color=viz.PALETTE[0], label=f"fit L = k_L C^{b:.3f}")
        low, _, high = pred["bootstrap"]["l_pred"]
        right.errorbar([pred["budget"]], [pred["loss"]], yerr=[[pred["loss"] - low], [high - pred["loss"]]],
                       fmt="o", color=viz.PALETTE[0], capsize=4, label="prediction, 90% bootstrap")
        right.plot([check["budget"]], [check["valid_loss"]], "*", color=viz.PALETTE[3], markersize=12,
                   label="check run")
        right.set_xscale("log")
        viz.style_axes(right, "loss against compute", "training FLOPs C (log)", "validation loss (nats/token)")
        right.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.train.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"the results (JSON); an unfinished sweep there is continued (default {DEFAULT_OUT})")
    parser.add_argument("--overwrite", action="store_true", help="start afresh even if --out holds a sweep")
    parser.add_argument("--draws", type=int, default=1000, help="bootstrap draws (default 1000)")
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    try:
        path = check_writable_file(args.out, overwrite=True)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    if args.overwrite and path.exists():
        path.unlink()
    if args.draws < 10:
        raise SystemExit(f"error: --draws must be at least 10, got {args.draws}")
    start = time.perf_counter()
    result = sweep(path, draws=args.draws, log=lambda line: print(line, flush=True))
    p, c = result["prediction"], result["check"]
    low, _, high = p["bootstrap"]["l_pred"]
    print(f"predicted loss at C={p['budget']:.1e}: {p['loss']:.3f} (90%: {low:.3f}-{high:.3f}); "
          f"check run: {c['valid_loss']:.3f} -> {'inside' if c['inside'] else 'OUTSIDE'} the interval; "
          f"{(time.perf_counter() - start) / 60:.1f} min this call", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
