"""Masks, matrices and positional encodings: a boolean mask in two colours, any 2-D array with a colourbar, and the
table of positional encodings."""
from __future__ import annotations

import math

import matplotlib
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from .axes import _fit_title, _heatmap_size, heatmap, new_figure, set_ticks, style_axes
from .inputs import as_array, squeeze_to, token_labels
from .style import DIVERGING_CMAP, FONT, Figure, _styled

__all__ = ["show_mask", "show_matrix", "show_positional_encoding"]


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
