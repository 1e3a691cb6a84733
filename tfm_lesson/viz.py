"""Static pictures of attention: heatmaps, head grids, masks, positional encodings, curves and bars.

Every function returns a :class:`matplotlib.figure.Figure` built without ``pyplot``, so a notebook shows the
returned figure exactly once (the value of the cell), and nothing lingers in pyplot's figure manager.
Inputs may be torch tensors (on any device, with or without grad) or NumPy arrays / nested lists.

One style everywhere: ``viridis`` for weights (0 = dark), ``cividis`` for other positive values,
a red-blue diverging map centred on zero for signed values, the Okabe-Ito palette for curves; all
colour-blind safe. Figures are at most 10 inches wide and 100 dpi, readable at notebook width.
"""
from __future__ import annotations

import io
import math
import re
from typing import Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure as _MplFigure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

__all__ = [
    "Figure", "show_attention", "show_heads", "show_mask", "show_matrix", "plot_lines", "plot_history",
    "plot_bars", "show_positional_encoding", "figure_png",
    "show_alignment",
]

WEIGHT_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"
# Okabe & Ito (2008): distinguishable with every common colour-vision deficiency.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
LINESTYLES = ["-", "--", "-.", ":"]
DPI = 100
MAX_WIDTH = 10.0
FONT = 9


class Figure(_MplFigure):
    """A plain matplotlib Figure that also knows how to show itself as PNG in any notebook frontend,
    even when ``pyplot`` (and so the inline backend's formatter) was never imported."""

    def _repr_png_(self) -> bytes:
        return figure_png(self)


def figure_png(fig: _MplFigure, dpi: int | None = None) -> bytes:
    """The PNG bytes of ``fig`` (tight bounding box)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------------
# input handling
def _as_array(x: object, name: str) -> np.ndarray:
    """Tensor (any device, any grad) / array / nested list -> NumPy array; a clear error otherwise."""
    try:
        import torch

        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu")
            if x.dtype == torch.bool:
                return x.numpy()
            if x.is_complex():
                raise TypeError(f"{name} must be real-valued, got dtype {x.dtype}")
            return x.to(torch.float64).numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a tensor or an array of numbers, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise TypeError(f"{name} must be a tensor or an array of numbers (ragged lists are not): {exc}") from exc
    if arr.dtype == bool:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def _squeeze_to(arr: np.ndarray, ndim: int, name: str, expected: str, hint: str = "") -> np.ndarray:
    """Drop leading size-1 dimensions until ``arr`` has ``ndim`` dimensions."""
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be shaped {expected}, got shape {tuple(arr.shape)}{hint}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)}); expected {expected}")
    return arr


def _labels(tokens: object, n: int, name: str, what: str) -> list[str] | None:
    if tokens is None:
        return None
    if isinstance(tokens, str):
        tokens = tokens.split()
    try:
        import torch

        if isinstance(tokens, torch.Tensor):
            tokens = tokens.detach().cpu().flatten().tolist()
    except ImportError:  # pragma: no cover
        pass
    labels = [str(t) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the data has {n} {what}")
    return labels


def _check_mapping(values: object, name: str) -> Mapping:
    if not isinstance(values, Mapping) or not values:
        raise TypeError(f"{name} must be a non-empty dict of name -> values, got {type(values).__name__}"
                        + (" (empty)" if isinstance(values, Mapping) else ""))
    return values


# --------------------------------------------------------------------------------------------------------
# figure and axes helpers
def _figure(width: float, height: float) -> Figure:
    width = float(min(MAX_WIDTH, max(3.0, width)))
    height = float(min(8.0, max(2.2, height)))
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _style_axes(ax, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None) -> None:
    if title:
        ax.set_title(title, fontsize=FONT + 1)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=FONT)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)


def _set_ticks(ax, labels: list[str] | None, n: int, axis: str, max_ticks: int = 40) -> None:
    """Token labels on an axis (every one when they fit, else a thinned subset); integers when no labels."""
    step = max(1, math.ceil(n / max_ticks))
    idx = list(range(0, n, step))
    text = [labels[i] for i in idx] if labels is not None else [str(i) for i in idx]
    if axis == "x":
        ax.set_xticks(idx)
        long = labels is not None and (max((len(t) for t in text), default=0) > 8 or len(idx) > 12
                                       or sum(len(t) + 2 for t in text) > 36)
        ax.set_xticklabels(text, rotation=60 if long else 0, ha="right" if long else "center",
                           rotation_mode="anchor" if long else "default")
    else:
        ax.set_yticks(idx)
        ax.set_yticklabels(text)


def _annotate(ax, arr: np.ndarray, norm) -> None:
    """Write each value in its cell (small maps only), white on dark cells."""
    rows, cols = arr.shape
    for i in range(rows):
        for j in range(cols):
            v = arr[i, j]
            if not np.isfinite(v):
                continue
            dark = norm(v) < 0.55 if np.isfinite(norm(v)) else True
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=FONT - 2,
                    color="white" if dark else "black")


def _heatmap_size(rows: int, cols: int) -> tuple[float, float]:
    cell = 0.42 if max(rows, cols) <= 12 else max(0.12, 5.5 / max(rows, cols))
    return 1.8 + cols * cell, 1.3 + rows * cell


# --------------------------------------------------------------------------------------------------------
# attention
def show_attention(weights, x_tokens=None, y_tokens=None, title: str | None = None, xlabel: str = "key",
                   ylabel: str = "query", ax=None, vmin: float | None = 0, vmax: float | None = None) -> Figure:
    """One attention map ``(q_len, k_len)`` as a heatmap: rows are queries, columns are keys.

    Leading size-1 dimensions are dropped, so ``weights[0:1, 2]`` works; for several heads use
    :func:`show_heads`. ``x_tokens`` label the keys, ``y_tokens`` the queries. With ``ax`` the map is
    drawn into that axes and its figure is returned. Small maps (up to 10 x 10) show their values.
    """
    arr = _squeeze_to(_as_array(weights, "weights"), 2, "weights", "(q_len, k_len)",
                      "; pick one map, e.g. weights[0, head], or use show_heads for a grid")
    if arr.dtype == bool:
        arr = arr.astype(np.float64)
    q_len, k_len = arr.shape
    x_labels = _labels(x_tokens, k_len, "x_tokens", "keys (columns)")
    y_labels = _labels(y_tokens, q_len, "y_tokens", "queries (rows)")
    if ax is None:
        fig = _figure(*_heatmap_size(q_len, k_len))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    top = vmax if vmax is not None else (float(np.nanmax(arr)) if np.isfinite(arr).any() else 1.0)
    low = vmin if vmin is not None else float(np.nanmin(arr))
    if top <= low:
        top = low + 1.0
    square = max(q_len, k_len) <= 40 and max(q_len, k_len) <= 2.5 * min(q_len, k_len)
    im = ax.imshow(arr, cmap=WEIGHT_CMAP, vmin=low, vmax=top, aspect="equal" if square else "auto",
                   interpolation="nearest")
    _set_ticks(ax, x_labels, k_len, "x")
    _set_ticks(ax, y_labels, q_len, "y")
    _style_axes(ax, title or "Attention weights", xlabel, ylabel)
    if q_len <= 10 and k_len <= 10:
        _annotate(ax, arr, im.norm)
    cbar = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cbar.set_label("weight", fontsize=FONT)
    cbar.ax.tick_params(labelsize=FONT - 1)
    return fig


def show_heads(weights, x_tokens=None, y_tokens=None, title: str | None = None, row_label: str = "layer",
               col_label: str = "head") -> Figure:
    """A grid of attention maps: ``(heads, q_len, k_len)`` gives one row, ``(layers, heads, q_len, k_len)``
    one row per layer. A list of per-layer ``(heads, q, k)`` maps (or of ``(1, heads, q, k)`` records) is
    stacked. All panels share one colour scale, so heads can be compared."""
    if isinstance(weights, (list, tuple)) and weights and not isinstance(weights[0], (int, float)):
        parts = [_as_array(w, f"weights[{i}]") for i, w in enumerate(weights)]
        parts = [_squeeze_to(p, 3, f"weights[{i}]", "(heads, q_len, k_len)") for i, p in enumerate(parts)]
        if len({p.shape for p in parts}) != 1:
            raise ValueError(f"weights: the per-layer maps differ in shape: {[p.shape for p in parts]}")
        arr = np.stack(parts)
    else:
        arr = _as_array(weights, "weights")
        while arr.ndim > 4 and arr.shape[0] == 1:
            arr = arr[0]
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4:
            raise ValueError(f"weights must be shaped (heads, q_len, k_len) or (layers, heads, q_len, k_len), got "
                             f"shape {tuple(arr.shape)}; for a batch pick one sequence, e.g. weights[0]")
    if arr.size == 0:
        raise ValueError(f"weights is empty (shape {tuple(arr.shape)})")
    arr = arr.astype(np.float64)
    rows, cols, q_len, k_len = arr.shape
    x_labels = _labels(x_tokens, k_len, "x_tokens", "keys (columns)")
    y_labels = _labels(y_tokens, q_len, "y_tokens", "queries (rows)")
    panel = min(2.3, (MAX_WIDTH - 1.2) / cols, 6.5 / rows)
    fig = _figure(1.2 + panel * cols, 0.9 + panel * rows * max(0.5, q_len / max(k_len, 1)))
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False))
    top = float(np.nanmax(arr)) if np.isfinite(arr).any() else 1.0
    top = top if top > 0 else 1.0
    many = max(q_len, k_len) > 12 or cols > 6
    im = None
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            im = ax.imshow(arr[r, c], cmap=WEIGHT_CMAP, vmin=0, vmax=top, aspect="auto", interpolation="nearest")
            if r == 0:
                ax.set_title(f"{col_label} {c}", fontsize=FONT)
            if c == 0:
                ax.set_ylabel(f"{row_label} {r}" if rows > 1 else "query", fontsize=FONT)
                if many:
                    ax.set_yticks([])
                else:
                    _set_ticks(ax, y_labels, q_len, "y")
            else:
                ax.set_yticks([])
            if r == rows - 1 and not many:
                _set_ticks(ax, x_labels, k_len, "x")
            else:
                ax.set_xticks([])
            ax.tick_params(labelsize=FONT - 2)
    if rows > 1 or many:
        fig.supxlabel("key", fontsize=FONT)
    else:
        for ax in axes[-1]:
            ax.set_xlabel("key", fontsize=FONT - 1)
    default = f"Attention weights by {row_label} and {col_label}" if rows > 1 else f"Attention weights by {col_label}"
    fig.suptitle(title or default, fontsize=FONT + 1)
    cbar = fig.colorbar(im, ax=axes, shrink=0.8, pad=0.02)
    cbar.set_label("weight", fontsize=FONT)
    cbar.ax.tick_params(labelsize=FONT - 1)
    return fig


def show_mask(mask, x_tokens=None, y_tokens=None, title: str | None = None, ax=None) -> Figure:
    """A boolean mask (True = may attend) as a two-colour picture: light = may attend, dark = blocked.

    Accepts ``(q_len, k_len)``, leading size-1 dimensions (``(1, 1, q, k)``), or a padding mask
    ``(1, 1, 1, k_len)`` / ``(k_len,)``, drawn as one row that holds for every query. With ``ax`` the
    picture is drawn into that axes and its figure is returned.
    """
    arr = _as_array(mask, "mask")
    if arr.dtype != bool:
        raise TypeError(f"mask must be boolean with True = may attend, got dtype {arr.dtype}; "
                        "build it with padding_mask/causal_mask or convert with `mask.bool()`")
    while arr.ndim > 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"mask must be shaped (q_len, k_len) (leading size-1 dimensions allowed), got shape "
                         f"{tuple(arr.shape)}; pick one sequence, e.g. mask[0, 0]")
    q_len, k_len = arr.shape
    x_labels = _labels(x_tokens, k_len, "x_tokens", "keys (columns)")
    y_labels = _labels(y_tokens, q_len, "y_tokens", "queries (rows)") if q_len > 1 or y_tokens is not None else None
    if ax is None:
        w, h = _heatmap_size(q_len, k_len)
        fig = _figure(w + 0.8, h)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    cmap = matplotlib.colormaps["cividis"]
    blocked, visible = cmap(0.12), cmap(0.92)
    ax.imshow(arr.astype(float), cmap=ListedColormap([blocked, visible]), vmin=0, vmax=1, interpolation="nearest",
              aspect="auto" if max(q_len, k_len) > 40 else "equal")
    if max(q_len, k_len) <= 30:  # cell borders
        ax.set_xticks(np.arange(-0.5, k_len), minor=True)
        ax.set_yticks(np.arange(-0.5, q_len), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="minor", length=0)
    _set_ticks(ax, x_labels, k_len, "x")
    if q_len == 1 and y_labels is None:
        ax.set_yticks([0])
        ax.set_yticklabels(["every query"])
    else:
        _set_ticks(ax, y_labels, q_len, "y")
    _style_axes(ax, title or f"Mask: {int(arr.sum())} of {arr.size} pairs may attend", "key", "query")
    ax.legend(handles=[Patch(facecolor=visible, edgecolor="grey", label="True: may attend"),
                       Patch(facecolor=blocked, edgecolor="grey", label="False: blocked")],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=FONT - 1, frameon=False)
    return fig


# --------------------------------------------------------------------------------------------------------
# matrices and encodings
def show_matrix(matrix, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
                x_ticks=None, y_ticks=None, cmap: str = "cividis", center: float | None = None) -> Figure:
    """Any 2-D array as a heatmap with a colourbar (a weight matrix, a table of encodings, scores).

    ``center=c`` switches to a diverging map (red above ``c``, blue below) with limits symmetric about ``c``;
    ``x_ticks``/``y_ticks`` are labels for the columns/rows.
    """
    arr = _squeeze_to(_as_array(matrix, "matrix"), 2, "matrix", "(rows, columns)")
    arr = arr.astype(np.float64)
    rows, cols = arr.shape
    x_labels = _labels(x_ticks, cols, "x_ticks", "columns")
    y_labels = _labels(y_ticks, rows, "y_ticks", "rows")
    finite = arr[np.isfinite(arr)]
    if center is not None:
        if not isinstance(center, (int, float)) or isinstance(center, bool) or not math.isfinite(center):
            raise ValueError(f"center must be a finite number or None, got {center!r}")
        lim = float(np.abs(finite - center).max()) if finite.size else 1.0
        lim = lim if lim > 0 else 1.0
        vmin, vmax = center - lim, center + lim
        cmap = DIVERGING_CMAP if cmap == "cividis" else cmap
    else:
        vmin = float(finite.min()) if finite.size else 0.0
        vmax = float(finite.max()) if finite.size else 1.0
    if cmap not in matplotlib.colormaps:
        raise ValueError(f"cmap must be a matplotlib colormap name, got {cmap!r}")
    w, h = _heatmap_size(rows, cols)
    if max(rows, cols) > 12:  # big tables: notebook width, at most 4.5 inches tall
        if cols >= rows:
            w, h = 8.2, min(4.5, max(2.4, 1.2 + 6.5 * rows / cols))
        else:
            w, h = min(8.2, max(3.5, 2.2 + 4.5 * cols / rows)), 4.5
    fig = _figure(w + 0.8, h)
    ax = fig.add_subplot()
    im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    _set_ticks(ax, x_labels, cols, "x", max_ticks=16 if x_labels is None else 40)
    _set_ticks(ax, y_labels, rows, "y", max_ticks=16 if y_labels is None else 40)
    _style_axes(ax, title or f"Matrix {rows} x {cols}", xlabel or "column", ylabel or "row")
    if rows <= 8 and cols <= 8:
        _annotate(ax, arr, im.norm)
    cbar = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cbar.ax.tick_params(labelsize=FONT - 1)
    return fig


def show_positional_encoding(table, title: str | None = None) -> Figure:
    """A ``(positions, d_model)`` table of positional encodings: positions down, dimensions across,
    a diverging map centred on 0 (sinusoids live in [-1, 1])."""
    arr = _squeeze_to(_as_array(table, "table"), 2, "table", "(positions, d_model)",
                      "; for a batch of encodings pick one, e.g. table[0]")
    positions, d_model = arr.shape
    fig = show_matrix(arr, title=title or f"Positional encoding ({positions} positions x d_model={d_model})",
                      xlabel="dimension i", ylabel="position pos", center=0.0)
    fig.axes[1].set_ylabel("PE(pos, i)", fontsize=FONT)
    return fig


# --------------------------------------------------------------------------------------------------------
# curves and bars
def _series_array(values: object, name: str) -> np.ndarray:
    arr = _as_array(values, name)
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


def plot_lines(series: Mapping[str, Sequence[float]], title: str | None = None, xlabel: str | None = None,
               ylabel: str | None = None, logy: bool = False, x=None) -> Figure:
    """Several named curves on one axes: ``{"train": losses, "valid": val_losses}``; ``x`` is shared
    (default ``0, 1, 2, ...`` per curve). Colours and line styles both differ, so curves stay apart in grey."""
    series = _check_mapping(series, "series")
    fig = _figure(6.4, 3.4)
    ax = fig.add_subplot()
    _draw_lines(ax, series, x, logy)
    _style_axes(ax, title or ", ".join(map(str, series)), xlabel or "step", ylabel or "value")
    return fig


_SPLIT_PREFIX = re.compile(r"^(train|training|val|valid|validation|dev|test|eval)[_/ ]", re.IGNORECASE)


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
    fig = _figure(3.4 * cols if n > 1 else 6.4, 2.8 * rows + 0.4)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    start = 0
    for ax, (quantity, curves) in zip(axes, groups.items()):
        _draw_lines(ax, curves, None, logy and "loss" in quantity.lower(), start)
        _style_axes(ax, quantity if n > 1 else None, xlabel, quantity)
        start += len(curves)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title or "Training curves", fontsize=FONT + 1)
    return fig


def plot_bars(values: Mapping[str, float], title: str | None = None, ylabel: str | None = None) -> Figure:
    """Named quantities as bars with their values written on top (e.g. a parameter budget)."""
    values = _check_mapping(values, "values")
    names = [str(k) for k in values]
    nums = []
    for k, v in values.items():
        arr = _as_array(v, f"values[{k!r}]")
        if arr.size != 1:
            raise ValueError(f"values[{k!r}] must be one number, got shape {tuple(arr.shape)}")
        nums.append(float(arr.reshape(())))
    integral = all(float(v).is_integer() for v in nums)
    fig = _figure(1.6 + 0.75 * len(names), 3.4)
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
    _style_axes(ax, title or "Values", None, ylabel or "value")
    return fig


# --------------------------------------------------------------------------------------------------------
# chapter 17: an attention map with the gold word alignment drawn over it
def _links_array(links, name: str, rows: int, cols: int) -> list[tuple[int, int]]:
    if links is None:
        return []
    out = []
    for link in links:
        pair = isinstance(link, (tuple, list)) and len(link) == 2
        if not (pair and all(isinstance(i, (int, np.integer)) for i in link)):
            raise ValueError(f"{name} must hold (target, source) index pairs, got {link!r}")
        t, s = int(link[0]), int(link[1])
        if not (0 <= t < rows and 0 <= s < cols):
            raise ValueError(f"{name} link {link!r} is outside the map of {rows} rows (target) x {cols} columns "
                             "(source)")
        out.append((t, s))
    return sorted(set(out))


def show_alignment(weights, sure=None, possible=None, x_tokens=None, y_tokens=None, title: str | None = None,
                   xlabel: str = "source (key)", ylabel: str = "target (query)", ax=None) -> Figure:
    """An attention map ``(target_len, source_len)`` drawn with seaborn, the gold alignment on top: a **sure**
    link ``(target, source)`` framed by a solid square, a **possible** one (not sure) by a dashed square.

    Rows are target words (queries), columns source words (keys); extra columns (``</s>``) may exceed the words
    the links index. With ``ax`` the map is drawn into that axes and its figure is returned.
    """
    import seaborn as sns
    from matplotlib.patches import Rectangle

    arr = _squeeze_to(_as_array(weights, "weights"), 2, "weights", "(target_len, source_len)",
                      "; pick one head's map, e.g. maps[layer, head]").astype(np.float64)
    rows, cols = arr.shape
    sure_links = _links_array(sure, "sure", rows, cols)
    possible_links = [link for link in _links_array(possible, "possible", rows, cols) if link not in set(sure_links)]
    x_labels = _labels(x_tokens, cols, "x_tokens", "source positions (columns)")
    y_labels = _labels(y_tokens, rows, "y_tokens", "target positions (rows)")
    if ax is None:
        fig = _figure(*_heatmap_size(rows, cols))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    sns.heatmap(arr, ax=ax, cmap=WEIGHT_CMAP, vmin=0.0, vmax=max(1e-9, float(np.nanmax(arr))), square=False,
                cbar_kws={"label": "weight", "shrink": 0.85, "pad": 0.02}, xticklabels=False, yticklabels=False)
    for t, s in sure_links:
        ax.add_patch(Rectangle((s + 0.06, t + 0.06), 0.88, 0.88, fill=False, edgecolor=PALETTE[1], linewidth=2.2))
    for t, s in possible_links:
        ax.add_patch(Rectangle((s + 0.1, t + 0.1), 0.8, 0.8, fill=False, edgecolor=PALETTE[1], linewidth=1.2,
                               linestyle="--"))
    ticks_x = np.arange(cols) + 0.5
    ticks_y = np.arange(rows) + 0.5
    ax.set_xticks(ticks_x)
    ax.set_yticks(ticks_y)
    long = x_labels is not None and max((len(t) for t in x_labels), default=0) > 4
    ax.set_xticklabels(x_labels if x_labels is not None else [str(i) for i in range(cols)],
                       rotation=60 if long else 0, ha="right" if long else "center",
                       rotation_mode="anchor" if long else "default")
    ax.set_yticklabels(y_labels if y_labels is not None else [str(i) for i in range(rows)], rotation=0)
    title = title or "Attention and the gold alignment"
    if sure_links or possible_links:  # the key in the title: a legend would cover the rotated token labels
        title += "\n(gold links: solid frame = sure" + (", dashed = possible)" if possible_links else ")")
    _style_axes(ax, title, xlabel, ylabel)
    return fig
