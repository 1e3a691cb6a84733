"""Bars, intervals and distributions (seaborn's statistics plots): named values as bars, groups as dots with a
mean and an interval, step histograms, and groups of points."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from matplotlib.ticker import FuncFormatter

from .axes import new_figure, style_axes
from .inputs import _check_mapping, _float_list, as_array
from .style import FONT, PALETTE, Figure, _sns, _styled

__all__ = ["plot_bars", "plot_points", "plot_distributions", "plot_scatter"]


@_styled
def plot_bars(values: Mapping[str, float], title: str | None = None, ylabel: str | None = None) -> Figure:
    """Named quantities as bars with their values written on top (e.g. a parameter budget)."""
    values = _check_mapping(values, "values")
    names = [str(k) for k in values]
    nums = []
    for k, v in values.items():
        arr = as_array(v, f"values[{k!r}]")
        if arr.size != 1:
            raise ValueError(f"values[{k!r}] must be one number, got shape {tuple(arr.shape)}")
        nums.append(float(arr.reshape(())))
    integral = all(float(v).is_integer() for v in nums)
    fig = new_figure(1.6 + 0.75 * len(names), 3.4)
    ax = fig.add_subplot()
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(names))]
    bars = ax.bar(range(len(names)), nums, color=colors, edgecolor="black", linewidth=0.5)
    labels = [f"{int(v):,}" if integral else f"{v:.3g}" for v in nums]
    ax.bar_label(bars, labels=labels, fontsize=FONT - 1, padding=2)
    ax.set_xticks(range(len(names)))
    long = max(len(n) for n in names) > 8 or len(names) > 6
    ax.set_xticklabels(names, rotation=35 if long else 0, ha="right" if long else "center")
    ax.margins(y=0.15)
    ax.grid(True, axis="y", alpha=0.3, linewidth=0.6)
    ax.set_axisbelow(True)
    if integral and max(abs(v) for v in nums) >= 10_000:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    style_axes(ax, title or "Values", None, ylabel or "value")
    return fig


@_styled
def plot_points(groups: Mapping[str, Sequence[float]], interval: str | Callable = "sd",
                show_values: bool = True, colors: Mapping[str, str] | None = None, zero_line: float | None = None,
                title: str | None = None, xlabel: str | None = None, ax=None) -> Figure:
    """One row per group: its values as dots (``show_values``) and their mean with an interval
    (``seaborn.pointplot``), groups top to bottom in the dict's order. ``interval`` is ``"sd"`` (mean ± 1
    standard deviation) or a function ``values -> (low, high)``, so an interval of your own is drawn as is.
    ``colors`` maps a group to its colour; ``zero_line`` draws a dashed vertical line at that value."""
    groups = _check_mapping(groups, "groups")
    values = {str(k): _float_list(v, f"groups[{k!r}]") for k, v in groups.items()}
    if not (interval == "sd" or callable(interval)):
        raise ValueError(f"interval must be 'sd' or a function values -> (low, high), got {interval!r}")
    if ax is None:
        fig = new_figure(6.4, 0.45 * len(values) + 1.4)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    names = list(values)
    data = {"group": [k for k in names for _ in values[k]], "value": [v for k in names for v in values[k]]}
    palette = {k: (colors or {}).get(k, PALETTE[0]) for k in names}
    sns = _sns()
    sns.pointplot(data=data, x="value", y="group", hue="group", order=names, hue_order=names, ax=ax,
                  palette=palette, errorbar=interval, estimator="mean", linestyle="none", markers="s",
                  markersize=5, capsize=0.25, err_kws={"linewidth": 1.5}, legend=False)
    if show_values:  # drawn last: the values stay visible on top of the mean
        sns.stripplot(data=data, x="value", y="group", hue="group", order=names, hue_order=names, ax=ax,
                      palette={k: PALETTE[5] for k in names}, jitter=False, size=4, alpha=0.9, legend=False,
                      edgecolor="black", linewidth=0.4)
    if zero_line is not None:
        ax.axvline(zero_line, color="black", linestyle="--", linewidth=1)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_ylabel("")
    style_axes(ax, title, xlabel or "value", None)
    return fig


@_styled
def plot_distributions(samples: Mapping[str, Sequence[float]], title: str | None = None, xlabel: str | None = None,
                       bins: int | str = 40, kde: bool = False, ax=None) -> Figure:
    """The distribution of each named sample as a step histogram on one axes (``seaborn.histplot``, density
    so that samples of different sizes compare), with a smoothed curve when ``kde``."""
    samples = _check_mapping(samples, "samples")
    values = {str(k): _float_list(v, f"samples[{k!r}]") for k, v in samples.items()}
    if ax is None:
        fig = new_figure(6.4, 3.4)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    data = {"value": [v for k in values for v in values[k]], "sample": [k for k in values for _ in values[k]]}
    _sns().histplot(data=data, x="value", hue="sample", hue_order=list(values), bins=bins, stat="density",
                    common_norm=False, element="step", kde=kde, ax=ax, palette=PALETTE[:len(values)],
                    line_kws={"linewidth": 1.6})
    legend = ax.get_legend()
    if legend is not None:
        legend.set_title(None)
        legend.set_frame_on(False)
        for text in legend.get_texts():
            text.set_fontsize(FONT - 1)
    ax.grid(True, alpha=0.3, linewidth=0.6)
    style_axes(ax, title, xlabel or "value", "density")
    return fig


@_styled
def plot_scatter(points: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str | None = None,
                 xlabel: str | None = None, ylabel: str | None = None, ax=None) -> Figure:
    """Named groups of ``(x, y)`` points on one axes (``seaborn.scatterplot``), each group with its own colour
    and marker, so groups stay apart without colour too."""
    points = _check_mapping(points, "points")
    xs, ys, names = [], [], []
    for k, pair in points.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"points[{k!r}] must be an (x, y) pair of sequences, got {type(pair).__name__}")
        x, y = _float_list(pair[0], f"points[{k!r}][0]"), _float_list(pair[1], f"points[{k!r}][1]")
        if len(x) != len(y):
            raise ValueError(f"points[{k!r}] has {len(x)} x values but {len(y)} y values")
        xs += x
        ys += y
        names += [str(k)] * len(x)
    if ax is None:
        fig = new_figure(6.4, 3.8)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    order = list(dict.fromkeys(names))
    _sns().scatterplot(x=xs, y=ys, hue=names, style=names, hue_order=order, style_order=order, ax=ax, s=40,
                       palette=[PALETTE[i % len(PALETTE)] for i in range(len(order))])
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.legend(fontsize=FONT - 1, ncol=2 if len(order) > 3 else 1, frameon=False)
    style_axes(ax, title, xlabel or "x", ylabel or "y")
    return fig
