"""Training curves and bands: named curves on one axes, one panel per quantity of a history, and the band of
several runs (seeds) with a run of one's own on top."""
from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from .axes import new_figure, style_axes
from .inputs import _check_mapping, _float_list, as_array
from .style import FONT, LINESTYLES, PALETTE, Figure, _sns, _styled

__all__ = ["plot_lines", "plot_history", "plot_band"]


def _series_array(values: object, name: str) -> np.ndarray:
    arr = as_array(values, name)
    while arr.ndim > 1 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of numbers, got shape {tuple(arr.shape)}")
    return arr.astype(np.float64)


def _draw_lines(ax, series: Mapping, x, logy: bool, start: int = 0) -> None:
    x_arr = None if x is None else _series_array(x, "x")
    for i, (name, values) in enumerate(series.items()):
        y = _series_array(values, f"series[{name!r}]")
        if x_arr is not None and len(x_arr) != len(y):
            raise ValueError(f"x has {len(x_arr)} values but series[{name!r}] has {len(y)}")
        xs = x_arr if x_arr is not None else np.arange(len(y))
        if logy and np.nanmin(y) <= 0:
            raise ValueError(f"logy=True needs positive values; series[{name!r}] has minimum {np.nanmin(y):.3g}")
        k = start + i
        ax.plot(xs, y, label=str(name), color=PALETTE[k % len(PALETTE)],
                linestyle=LINESTYLES[(k // len(PALETTE) + k) % len(LINESTYLES)] if len(series) > 1 else "-",
                marker="o" if len(y) <= 25 else None, markersize=3.5, linewidth=1.6)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.001, 1, 100: no "0.0"
        low, high = ax.get_ylim()
        # within one decade the minor ticks are the only labels; over several they would overlap
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}") if high / low <= 10 else NullFormatter())
    if x_arr is None:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3, linewidth=0.6)
    if len(series) > 1:
        ax.legend(fontsize=FONT - 1, frameon=False)


@_styled
def plot_lines(series: Mapping[str, Sequence[float]], title: str | None = None, xlabel: str | None = None,
               ylabel: str | None = None, logy: bool = False, x=None) -> Figure:
    """Several named curves on one axes: ``{"train": losses, "valid": val_losses}``; ``x`` is shared
    (default ``0, 1, 2, ...`` per curve). Colours and line styles both differ, so curves stay apart in grey."""
    series = _check_mapping(series, "series")
    fig = new_figure(6.4, 3.4)
    ax = fig.add_subplot()
    _draw_lines(ax, series, x, logy)
    style_axes(ax, title or ", ".join(map(str, series)), xlabel or "step", ylabel or "value")
    return fig


_SPLIT_PREFIX = re.compile(r"^(train|training|val|valid|validation|dev|test|eval)[_/ ]", re.IGNORECASE)


@_styled
def plot_history(history: Mapping[str, Sequence[float]], title: str | None = None, xlabel: str = "epoch",
                 logy: bool = False) -> Figure:
    """Training curves, one panel per quantity: ``{"train_loss": .., "val_loss": .., "val_bleu": .., "lr": ..}``
    gives panels *loss* (train and val), *bleu* and *lr*. With one quantity this is :func:`plot_lines`."""
    history = _check_mapping(history, "history")
    groups: dict[str, dict[str, Sequence[float]]] = {}
    for name, values in history.items():
        quantity = _SPLIT_PREFIX.sub("", str(name)) or str(name)
        groups.setdefault(quantity, {})[str(name)] = values
    n = len(groups)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = new_figure(3.4 * cols if n > 1 else 6.4, 2.8 * rows + 0.4)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    start = 0
    for ax, (quantity, curves) in zip(axes, groups.items()):
        _draw_lines(ax, curves, None, logy and "loss" in quantity.lower(), start)
        style_axes(ax, quantity if n > 1 else None, xlabel, quantity)
        start += len(curves)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title or "Training curves", fontsize=FONT + 1)
    return fig


@_styled
def plot_band(runs: Mapping[object, Sequence[float]], x: Sequence[float] | None = None,
              yours: Sequence[float] | None = None, lower: Sequence[float] | None = None,
              upper: Sequence[float] | None = None, baseline: float | None = None, title: str | None = None,
              xlabel: str | None = None, ylabel: str | None = None, runs_label: str | None = None,
              yours_label: str = "your run", bounds_label: str = "band (widened)", baseline_label: str = "baseline",
              ax=None) -> Figure:
    """Several runs of one curve (``{seed: values}``, same length) as their mean and the band from the lowest
    to the highest run at each ``x`` (``seaborn.lineplot``); optionally ``lower``/``upper`` (a widened band,
    shaded lightly), ``yours`` (one more curve, NaN where it has no value) and a dashed ``baseline``."""
    runs = _check_mapping(runs, "runs")
    curves = {str(k): _float_list(v, f"runs[{k!r}]") for k, v in runs.items()}
    n = len(next(iter(curves.values())))
    if any(len(c) != n for c in curves.values()):
        raise ValueError(f"runs must all have the same length, got {[len(c) for c in curves.values()]}")
    xs = _float_list(x, "x") if x is not None else list(range(n))
    if len(xs) != n:
        raise ValueError(f"x has {len(xs)} values but each run has {n}")
    if ax is None:
        fig = new_figure(7.2, 3.8)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    if lower is not None and upper is not None:
        lo, hi = _float_list(lower, "lower"), _float_list(upper, "upper")
        if len(lo) != n or len(hi) != n:
            raise ValueError(f"lower and upper must have {n} values like the runs, got {len(lo)} and {len(hi)}")
        ax.fill_between(xs, lo, hi, color=PALETTE[0], alpha=0.12, linewidth=0, label=bounds_label)
    data = {"x": [v for _ in curves for v in xs], "y": [v for c in curves.values() for v in c],
            "run": [k for k in curves for _ in xs]}
    _sns().lineplot(data=data, x="x", y="y", estimator="mean", errorbar=("pi", 100), ax=ax, color=PALETTE[0],
                    label=runs_label or f"{len(curves)} runs (mean, and lowest to highest)",
                    err_kws={"alpha": 0.3, "linewidth": 0})
    if yours is not None:
        mine = _float_list(yours, "yours")
        if len(mine) != n:
            raise ValueError(f"yours has {len(mine)} values but each run has {n}")
        ax.plot(xs, mine, color=PALETTE[3], linewidth=2.2, linestyle="--", label=yours_label)
    if baseline is not None:
        ax.axhline(baseline, color="#555555", linestyle=":", linewidth=1.2, label=baseline_label)
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.legend(fontsize=FONT - 1, frameon=False)
    style_axes(ax, title, xlabel or "step", ylabel or "value")
    return fig
