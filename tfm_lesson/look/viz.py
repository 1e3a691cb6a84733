"""Static pictures of attention: heatmaps, head grids, masks, positional encodings, curves, bands and bars.

Every function returns a :class:`matplotlib.figure.Figure` built without ``pyplot``, so a notebook shows the
returned figure exactly once (the value of the cell), and nothing lingers in pyplot's figure manager.
Inputs may be torch tensors (on any device, with or without grad) or NumPy arrays / nested lists.

Heatmaps, bands over seeds, intervals and distributions are drawn with seaborn (``heatmap``, ``lineplot``,
``pointplot``, ``histplot``); the explorers' redraws use :func:`heatmap` with ``fast=True`` (one image
instead of a mesh of cells, measured faster, see there).

One look everywhere (:func:`course_style`): ``viridis`` for weights (0 = dark), ``cividis`` for other
positive values, a blue-red diverging map centred on zero for signed values, the Okabe-Ito palette for
curves; all colour-blind safe, no red/green pairs. Figures are at most 10 inches wide at 100 dpi with
10-point text, readable at notebook width and in the book. The style is applied only while a ``viz``
function draws or renders its figure: a learner's own plots keep their settings (unless they call
:func:`set_theme`).
"""
from __future__ import annotations

import functools
import io
import math
import re
import textwrap
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence

import matplotlib
import numpy as np
from cycler import cycler
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure as _MplFigure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

__all__ = [
    "Figure", "show_attention", "show_heads", "show_mask", "show_matrix", "plot_lines", "plot_history",
    "plot_bars", "show_positional_encoding", "figure_png", "course_style", "set_theme", "new_figure",
    "style_axes", "set_ticks", "token_labels", "as_array", "squeeze_to", "heatmap", "heatmap_data",
    "frame_cells", "draw_head_grid", "plot_band", "plot_points", "plot_distributions", "plot_scatter",
    "show_alignment",
]

WEIGHT_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"  # blue below zero, red above: safe for red-green colour blindness
# Okabe & Ito (2008): distinguishable with every common colour-vision deficiency.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
HIGHLIGHT = "#E69F00"  # Okabe-Ito orange: frames a selected row / head / dimension
LINESTYLES = ["-", "--", "-.", ":"]
DPI = 100
MAX_WIDTH = 10.0
FONT = 10


def _sns():
    """seaborn, imported on first use (it brings pandas: about a second that ``import tfm_lesson`` need not pay)."""
    import seaborn

    return seaborn


def _theme_rc() -> dict:
    sns = _sns()
    rc = {**sns.axes_style("ticks"), **sns.plotting_context("notebook")}
    rc.update({
        "font.size": FONT, "axes.titlesize": FONT + 1, "axes.labelsize": FONT, "xtick.labelsize": FONT - 1,
        "ytick.labelsize": FONT - 1, "legend.fontsize": FONT - 1, "figure.titlesize": FONT + 1,
        "axes.prop_cycle": cycler(color=PALETTE), "image.cmap": WEIGHT_CMAP, "figure.dpi": DPI,
        "savefig.dpi": DPI, "axes.spines.top": False, "axes.spines.right": False, "lines.linewidth": 1.6,
        "text.color": "black", "axes.labelcolor": "black", "xtick.color": "black", "ytick.color": "black",
    })
    return rc


@contextmanager
def course_style() -> Iterator[None]:
    """The course's look (seaborn's ``ticks`` style, the Okabe-Ito palette, viridis, 10-point text) inside
    the ``with`` block only: matplotlib's settings are restored on exit, so plots of your own keep theirs.
    Every ``viz`` function draws and renders inside it."""
    with matplotlib.rc_context(_theme_rc()):
        yield


def set_theme() -> None:
    """Make the course's look the default for *all* your matplotlib and seaborn plots in this session
    (this does change the global settings, on purpose; ``matplotlib.rcdefaults()`` undoes it)."""
    matplotlib.rcParams.update(_theme_rc())


def _styled(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with course_style():
            return fn(*args, **kwargs)

    return wrapper


class Figure(_MplFigure):
    """A plain matplotlib Figure that also knows how to show itself as PNG in any notebook frontend,
    even when ``pyplot`` (and so the inline backend's formatter) was never imported."""

    def _repr_png_(self) -> bytes:
        return figure_png(self)


def figure_png(fig: _MplFigure, dpi: int | None = None) -> bytes:
    """The PNG bytes of ``fig`` (tight bounding box), rendered in the course's style."""
    buf = io.BytesIO()
    with course_style():
        fig.savefig(buf, format="png", dpi=dpi or fig.dpi, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------------
# input handling
def as_array(x: object, name: str) -> np.ndarray:
    """Tensor (any device, any grad) / array / nested list -> NumPy array (float64, or bool); a clear error
    naming ``name`` otherwise."""
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


def squeeze_to(arr: np.ndarray, ndim: int, name: str, expected: str, hint: str = "") -> np.ndarray:
    """Drop leading size-1 dimensions until ``arr`` has ``ndim`` dimensions; a clear error if it cannot."""
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be shaped {expected}, got shape {tuple(arr.shape)}{hint}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)}); expected {expected}")
    return arr


def token_labels(tokens: object, n: int, name: str, what: str) -> list[str] | None:
    """``tokens`` (a list, a space-separated str or a tensor of ids) as ``n`` axis labels, or ``None``."""
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
def new_figure(width: float, height: float) -> Figure:
    """An empty :class:`Figure` of about ``width`` x ``height`` inches (clamped to 3-10 x 2.2-8)."""
    width = float(min(MAX_WIDTH, max(3.0, width)))
    height = float(min(8.0, max(2.2, height)))
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def style_axes(ax, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None) -> None:
    """Title and axis labels in the course's sizes."""
    if title:
        ax.set_title(title, fontsize=FONT + 1)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=FONT)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)


def set_ticks(ax, labels: list[str] | None, n: int, axis: str, max_ticks: int = 40) -> None:
    """Labels for the ``n`` cells of a :func:`heatmap` axis (every one when they fit, else a thinned
    subset), integers when ``labels`` is None; long labels on ``x`` are slanted."""
    step = max(1, math.ceil(n / max_ticks))
    idx = list(range(0, n, step))
    where = [i + 0.5 for i in idx]  # cell i spans [i, i + 1]
    text = [labels[i] for i in idx] if labels is not None else [str(i) for i in idx]
    if axis == "x":
        ax.set_xticks(where)
        long = labels is not None and (max((len(t) for t in text), default=0) > 8 or len(idx) > 12
                                       or sum(len(t) + 2 for t in text) > 36)
        ax.set_xticklabels(text, rotation=60 if long else 0, ha="right" if long else "center",
                           rotation_mode="anchor" if long else "default")
    else:
        ax.set_yticks(where)
        ax.set_yticklabels(text, rotation=0)


# the former private names (kept for code written against them)
_as_array, _squeeze_to, _labels, _figure, _style_axes, _set_ticks = as_array, squeeze_to, token_labels, new_figure, \
    style_axes, set_ticks


def _fit_title(title: str, fig) -> str:
    """A long title wrapped to the width of a small figure it would otherwise overhang (into the colourbar)."""
    width = fig.get_size_inches()[0]
    return "\n".join(textwrap.wrap(title, max(28, int(8.5 * width)))) if len(title) > 8.5 * width else title


def _heatmap_size(rows: int, cols: int) -> tuple[float, float]:
    cell = 0.45 if max(rows, cols) <= 12 else max(0.12, 5.5 / max(rows, cols))
    return 1.9 + cols * cell, 1.4 + rows * cell


def heatmap(ax, values: np.ndarray, cmap=WEIGHT_CMAP, vmin: float | None = None, vmax: float | None = None,
            x_labels: list[str] | None = None, y_labels: list[str] | None = None, annotate: bool = False,
            colorbar: bool = True, cbar_label: str | None = None, square: bool = False, fast: bool = False,
            max_ticks: int = 40, lines: bool = False):
    """Draw a 2-D array into ``ax``: cell ``(r, c)`` covers ``[c, c + 1] x [r, r + 1]``, row 0 at the top.

    ``seaborn.heatmap`` draws it (``annotate`` writes each value, white on dark cells; ``lines`` draws white
    cell borders). ``fast=True`` draws the same cells as one image (``imshow``), which is what the explorers
    use, because a slider should answer as fast as it can: rendering an explorer-sized figure to PNG
    (interleaved, median of 5, 2-core machine at load 2), a 6 x 6 map with values took 0.93 s with seaborn
    against 0.88 s as an image, a 10 x 10 map 0.49 s against 0.41 s, a 64 x 64 table 0.72 s against 0.50 s.
    (Whole explorer redraws at load 8-9 differed by under 5%, within that noise.) Returns the colour mapping
    (for a colourbar of one's own).
    """
    arr = np.asarray(values, dtype=np.float64)
    rows, cols = arr.shape
    if fast:
        mappable = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, extent=(0, cols, rows, 0),
                             aspect="equal" if square else "auto", interpolation="nearest")
        if annotate:
            for i in range(rows):
                for j in range(cols):
                    v = arr[i, j]
                    if np.isfinite(v):
                        dark = mappable.norm(v) < 0.55
                        ax.text(j + 0.5, i + 0.5, f"{v:.2f}", ha="center", va="center", fontsize=FONT - 2,
                                color="white" if dark else "black")
        if colorbar:
            cbar = ax.figure.colorbar(mappable, ax=ax, shrink=0.85, pad=0.02)
    else:
        _sns().heatmap(arr, cmap=cmap, vmin=vmin, vmax=vmax, ax=ax, annot=annotate, fmt=".2f",
                       annot_kws={"fontsize": FONT - 2}, cbar=colorbar, square=square,
                       cbar_kws={"shrink": 0.85, "pad": 0.02}, xticklabels=False, yticklabels=False,
                       linewidths=0.8 if lines else 0, linecolor="white")
        mappable = ax.collections[0]
        cbar = mappable.colorbar
    if colorbar:
        cbar.ax.tick_params(labelsize=FONT - 1)
        if cbar_label:
            cbar.set_label(cbar_label, fontsize=FONT)
    for spine in ax.spines.values():
        spine.set_visible(False)
    set_ticks(ax, x_labels, cols, "x", max_ticks)
    set_ticks(ax, y_labels, rows, "y", max_ticks)
    return mappable


def heatmap_data(ax) -> np.ndarray | None:
    """The array a :func:`heatmap` drew into ``ax`` (either way it was drawn), or ``None`` if none."""
    if ax.get_label() == "<colorbar>":
        return None
    if ax.images:
        return np.asarray(ax.images[0].get_array())
    for artist in ax.collections:
        if isinstance(artist, matplotlib.collections.QuadMesh):
            return np.ma.filled(np.ma.asarray(artist.get_array()).astype(float), np.nan)
    return None


def frame_cells(ax, col: float, row: float, cols: float = 1, rows: float = 1, color: str = HIGHLIGHT,
                lw: float = 2.5) -> None:
    """A frame around ``rows`` x ``cols`` cells of a :func:`heatmap`, from cell ``(row, col)``."""
    ax.add_patch(Rectangle((col, row), cols, rows, fill=False, edgecolor=color, linewidth=lw, clip_on=False))


# --------------------------------------------------------------------------------------------------------
# attention
@_styled
def show_attention(weights, x_tokens=None, y_tokens=None, title: str | None = None, xlabel: str = "key",
                   ylabel: str = "query", ax=None, vmin: float | None = 0, vmax: float | None = None,
                   fast: bool = False) -> Figure:
    """One attention map ``(q_len, k_len)`` as a heatmap: rows are queries, columns are keys.

    Leading size-1 dimensions are dropped, so ``weights[0:1, 2]`` works; for several heads use
    :func:`show_heads`. ``x_tokens`` label the keys, ``y_tokens`` the queries. With ``ax`` the map is
    drawn into that axes and its figure is returned. Small maps (up to 10 x 10) show their values.
    ``fast`` draws the cells as one image (see :func:`heatmap`).
    """
    arr = squeeze_to(as_array(weights, "weights"), 2, "weights", "(q_len, k_len)",
                     "; pick one map, e.g. weights[0, head], or use show_heads for a grid")
    if arr.dtype == bool:
        arr = arr.astype(np.float64)
    q_len, k_len = arr.shape
    x_labels = token_labels(x_tokens, k_len, "x_tokens", "keys (columns)")
    y_labels = token_labels(y_tokens, q_len, "y_tokens", "queries (rows)")
    own = ax is None
    if own:
        fig = new_figure(*_heatmap_size(q_len, k_len))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    top = vmax if vmax is not None else (float(np.nanmax(arr)) if np.isfinite(arr).any() else 1.0)
    low = vmin if vmin is not None else float(np.nanmin(arr))
    if top <= low:
        top = low + 1.0
    square = max(q_len, k_len) <= 40 and max(q_len, k_len) <= 2.5 * min(q_len, k_len)
    heatmap(ax, arr, WEIGHT_CMAP, low, top, x_labels, y_labels, annotate=q_len <= 10 and k_len <= 10,
            cbar_label="weight", square=square, fast=fast)
    title = title or "Attention weights"
    style_axes(ax, _fit_title(title, fig) if own else title, xlabel, ylabel)
    return fig


@_styled
def draw_head_grid(fig_or_subfig, weights, selected: int | None = None, title: str | None = None,
                   cols: int = 4) -> None:
    """Small maps of every head ``(heads, q_len, k_len)`` on one colour scale, drawn into a figure or
    subfigure (up to ``cols`` per row); head ``selected`` framed. Fast (image) cells: explorers redraw it."""
    arr = squeeze_to(as_array(weights, "weights"), 3, "weights", "(heads, q_len, k_len)")
    heads = arr.shape[0]
    cols = min(cols, heads)
    rows = math.ceil(heads / cols)
    axes = fig_or_subfig.subplots(rows, cols, squeeze=False).ravel()
    top = float(np.nanmax(arr)) if np.isfinite(arr).any() and np.nanmax(arr) > 0 else 1.0
    for h, ax in enumerate(axes):
        if h >= heads:
            ax.set_visible(False)
            continue
        heatmap(ax, arr[h], WEIGHT_CMAP, 0, top, colorbar=False, fast=True)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"head {h}", fontsize=FONT - 1, color=HIGHLIGHT if h == selected else "black",
                     fontweight="bold" if h == selected else "normal")
        if h == selected:
            for spine in ax.spines.values():
                spine.set_visible(True)
                spine.set_edgecolor(HIGHLIGHT)
                spine.set_linewidth(3)
    if title:
        fig_or_subfig.suptitle(title, fontsize=FONT)


@_styled
def show_heads(weights, x_tokens=None, y_tokens=None, title: str | None = None, row_label: str = "layer",
               col_label: str = "head") -> Figure:
    """A grid of attention maps: ``(heads, q_len, k_len)`` gives one row, ``(layers, heads, q_len, k_len)``
    one row per layer. A list of per-layer ``(heads, q, k)`` maps (or of ``(1, heads, q, k)`` records) is
    stacked. All panels share one colour scale, so heads can be compared."""
    if isinstance(weights, (list, tuple)) and weights and not isinstance(weights[0], (int, float)):
        parts = [as_array(w, f"weights[{i}]") for i, w in enumerate(weights)]
        parts = [squeeze_to(p, 3, f"weights[{i}]", "(heads, q_len, k_len)") for i, p in enumerate(parts)]
        if len({p.shape for p in parts}) != 1:
            raise ValueError(f"weights: the per-layer maps differ in shape: {[p.shape for p in parts]}")
        arr = np.stack(parts)
    else:
        arr = as_array(weights, "weights")
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
    x_labels = token_labels(x_tokens, k_len, "x_tokens", "keys (columns)")
    y_labels = token_labels(y_tokens, q_len, "y_tokens", "queries (rows)")
    panel = min(2.3, (MAX_WIDTH - 1.2) / cols, 6.5 / rows)
    fig = new_figure(1.2 + panel * cols, 0.9 + panel * rows * max(0.5, q_len / max(k_len, 1)))
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False))
    top = float(np.nanmax(arr)) if np.isfinite(arr).any() else 1.0
    top = top if top > 0 else 1.0
    many = max(q_len, k_len) > 12 or cols > 6
    mappable = None
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            mappable = heatmap(ax, arr[r, c], WEIGHT_CMAP, 0, top, x_labels, y_labels, colorbar=False)
            if r == 0:
                ax.set_title(f"{col_label} {c}", fontsize=FONT)
            if c == 0:
                ax.set_ylabel(f"{row_label} {r}" if rows > 1 else "query", fontsize=FONT)
            if c != 0 or many:
                ax.set_yticks([])
            if r != rows - 1 or many:
                ax.set_xticks([])
            ax.tick_params(labelsize=FONT - 2)
    if rows > 1 or many:
        fig.supxlabel("key", fontsize=FONT)
    else:
        for ax in axes[-1]:
            ax.set_xlabel("key", fontsize=FONT - 1)
    default = f"Attention weights by {row_label} and {col_label}" if rows > 1 else f"Attention weights by {col_label}"
    fig.suptitle(title or default, fontsize=FONT + 1)
    cbar = fig.colorbar(mappable, ax=axes, shrink=0.8, pad=0.02)
    cbar.set_label("weight", fontsize=FONT)
    cbar.ax.tick_params(labelsize=FONT - 1)
    return fig


@_styled
def show_mask(mask, x_tokens=None, y_tokens=None, title: str | None = None, ax=None, fast: bool = False) -> Figure:
    """A boolean mask (True = may attend) as a two-colour picture: light = may attend, dark = blocked.

    Accepts ``(q_len, k_len)``, leading size-1 dimensions (``(1, 1, q, k)``), or a padding mask
    ``(1, 1, 1, k_len)`` / ``(k_len,)``, drawn as one row that holds for every query. With ``ax`` the
    picture is drawn into that axes and its figure is returned. ``fast``: see :func:`heatmap`.
    """
    arr = as_array(mask, "mask")
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
    x_labels = token_labels(x_tokens, k_len, "x_tokens", "keys (columns)")
    y_labels = token_labels(y_tokens, q_len, "y_tokens", "queries (rows)") if q_len > 1 or y_tokens is not None \
        else None
    own = ax is None
    if own:
        w, h = _heatmap_size(q_len, k_len)
        fig = new_figure(w + 0.8, h)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    cmap = matplotlib.colormaps["cividis"]
    blocked, visible = cmap(0.12), cmap(0.92)
    small = max(q_len, k_len) <= 30
    heatmap(ax, arr.astype(float), ListedColormap([blocked, visible]), 0, 1, x_labels, y_labels, colorbar=False,
            square=max(q_len, k_len) <= 40, fast=fast, lines=small and not fast)
    if small and fast:  # cell borders
        ax.set_xticks(np.arange(0, k_len + 1), minor=True)
        ax.set_yticks(np.arange(0, q_len + 1), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="minor", length=0)
    if q_len == 1 and y_labels is None:
        ax.set_yticks([0.5])
        ax.set_yticklabels(["every query"])
    title = title or f"Mask: {int(arr.sum())} of {arr.size} pairs may attend"
    style_axes(ax, _fit_title(title, fig) if own else title, "key", "query")
    ax.legend(handles=[Patch(facecolor=visible, edgecolor="grey", label="True: may attend"),
                       Patch(facecolor=blocked, edgecolor="grey", label="False: blocked")],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=FONT - 1, frameon=False)
    return fig


# --------------------------------------------------------------------------------------------------------
# matrices and encodings
@_styled
def show_matrix(matrix, title: str | None = None, xlabel: str | None = None, ylabel: str | None = None,
                x_ticks=None, y_ticks=None, cmap: str = "cividis", center: float | None = None) -> Figure:
    """Any 2-D array as a heatmap with a colourbar (a weight matrix, a table of encodings, scores).

    ``center=c`` switches to a diverging map (red above ``c``, blue below) with limits symmetric about ``c``;
    ``x_ticks``/``y_ticks`` are labels for the columns/rows.
    """
    arr = squeeze_to(as_array(matrix, "matrix"), 2, "matrix", "(rows, columns)")
    arr = arr.astype(np.float64)
    rows, cols = arr.shape
    x_labels = token_labels(x_ticks, cols, "x_ticks", "columns")
    y_labels = token_labels(y_ticks, rows, "y_ticks", "rows")
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
    fig = new_figure(w + 0.8, h)
    ax = fig.add_subplot()
    heatmap(ax, arr, cmap, vmin, vmax, x_labels, y_labels, annotate=rows <= 8 and cols <= 8,
            max_ticks=16 if x_labels is None and y_labels is None else 40)
    if x_labels is None:
        set_ticks(ax, None, cols, "x", 16)
    if y_labels is None:
        set_ticks(ax, None, rows, "y", 16)
    style_axes(ax, _fit_title(title or f"Matrix {rows} x {cols}", fig), xlabel or "column", ylabel or "row")
    return fig


@_styled
def show_positional_encoding(table, title: str | None = None) -> Figure:
    """A ``(positions, d_model)`` table of positional encodings: positions down, dimensions across,
    a diverging map centred on 0 (sinusoids live in [-1, 1])."""
    arr = squeeze_to(as_array(table, "table"), 2, "table", "(positions, d_model)",
                     "; for a batch of encodings pick one, e.g. table[0]")
    positions, d_model = arr.shape
    fig = show_matrix(arr, title=title or f"Positional encoding ({positions} positions x d_model={d_model})",
                      xlabel="dimension i", ylabel="position pos", center=0.0)
    fig.axes[1].set_ylabel("PE(pos, i)", fontsize=FONT)
    return fig


# --------------------------------------------------------------------------------------------------------
# bands over seeds, intervals, distributions (seaborn's statistics plots)
def _float_list(values: object, name: str) -> list[float]:
    arr = as_array(values, name).astype(np.float64).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty; expected a 1-D sequence of numbers")
    return arr.tolist()


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


# --------------------------------------------------------------------------------------------------------
# curves and bars
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


# --------------------------------------------------------------------------------------------------------
# chapter 18: memory against length, and a roofline (seaborn on matplotlib)
def _positive_series(values: object, name: str, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values.detach().cpu() if hasattr(values, "detach") else values, dtype=float).reshape(-1)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive finite numbers, got {arr.tolist()}")
    if n is not None and arr.size != n:
        raise ValueError(f"{name} has {arr.size} values, expected one per length ({n})")
    return arr


def plot_scaling(lengths: Sequence[float], series: Mapping[str, Sequence[float]], title: str | None = None,
                 xlabel: str = "sequence length", ylabel: str = "peak memory (MiB)",
                 slopes: Sequence[int] = (1, 2)) -> Figure:
    """Measured quantities against length on log-log axes (e.g. peak memory of explicit, tiled and SDPA attention),
    with dotted guides of slope 1 (grows like the length) and 2 (like its square) through the first point of the
    first series, so the eye can read off how each one grows."""
    import seaborn as sns

    x = _positive_series(lengths, "lengths")
    if not isinstance(series, Mapping) or not series:
        raise ValueError("series must be a non-empty mapping of name -> one value per length")
    rows = [(float(xi), float(yi), str(label)) for label, ys in series.items()
            for xi, yi in zip(x, _positive_series(ys, f"series[{label!r}]", len(x)))]
    fig = Figure(figsize=(6.4, 3.8), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    palette = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9"]
    sns.lineplot(x=[r[0] for r in rows], y=[r[1] for r in rows], hue=[r[2] for r in rows], style=[r[2] for r in rows],
                 markers=True, dashes=False, palette=palette[:len(series)], ax=ax)
    y0 = rows[0][1]
    for slope in slopes:
        ax.plot(x, y0 * (x / x[0]) ** slope, ":", color="grey", linewidth=1)
        ax.annotate("∝ length" + {1: "", 2: "²", 3: "³"}.get(slope, f"^{slope}"), (x[-1], y0 * (x[-1] / x[0]) ** slope),
                    fontsize=8, color="grey", ha="right", va="bottom")
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title or f"{ylabel} against {xlabel}")
    ax.set_xticks(x, [f"{v:g}" for v in x], minor=False)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8, title=None)
    ax.grid(True, which="major", alpha=0.3)
    return fig


def plot_roofline(peak_gflops: float, bandwidth_gbs: float, points: Mapping[str, tuple[float, float]],
                  title: str | None = None) -> Figure:
    """The roofline model (Williams, Waterman & Patterson, 2009): attainable GFLOP/s = min(peak, bandwidth x
    intensity) on log-log axes, with measured operations as points ``name -> (FLOPs per byte, GFLOP/s)``. The knee
    sits at intensity = peak / bandwidth: to its left an operation waits for memory, to its right for arithmetic."""
    import seaborn as sns

    peak = float(_positive_series([peak_gflops], "peak_gflops")[0])
    bw = float(_positive_series([bandwidth_gbs], "bandwidth_gbs")[0])
    if not isinstance(points, Mapping) or not points:
        raise ValueError("points must be a non-empty mapping of name -> (FLOPs per byte, GFLOP/s)")
    xs, ys = [], []
    for name, pair in points.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"points[{name!r}] must be (FLOPs per byte, GFLOP/s), got {pair!r}")
        xi, yi = _positive_series(pair, f"points[{name!r}]")
        xs.append(xi)
        ys.append(yi)
    knee = peak / bw
    lo, hi = min(min(xs), knee) / 3, max(max(xs), knee) * 3
    grid = np.geomspace(lo, hi, 200)
    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(grid, np.minimum(peak, bw * grid), color="black", linewidth=1.5, label="roof: min(peak, bandwidth x I)")
    ax.axvline(knee, color="grey", linestyle=":", linewidth=1)
    ax.annotate(f"knee {knee:.3g} FLOP/byte", (knee, peak), fontsize=8, color="grey", xytext=(4, -14),
                textcoords="offset points")
    sns.scatterplot(x=xs, y=ys, hue=list(points), palette="viridis", s=45, ax=ax, zorder=3, edgecolor="black")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity I (FLOPs per byte moved)",
           ylabel="GFLOP/s", title=title or "Roofline")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return fig


__all__ += ["plot_scaling", "plot_roofline"]
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
