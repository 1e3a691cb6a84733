"""Figure and axes helpers: an empty figure of the course's size, titles and labels, tick labels, and the one
heatmap every map and table is drawn with."""
from __future__ import annotations

import math
import textwrap

import matplotlib
import numpy as np
from matplotlib.patches import Rectangle

from .style import DPI, FONT, HIGHLIGHT, MAX_WIDTH, WEIGHT_CMAP, Figure, _sns

__all__ = ["new_figure", "style_axes", "set_ticks", "heatmap", "heatmap_data", "frame_cells"]


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
