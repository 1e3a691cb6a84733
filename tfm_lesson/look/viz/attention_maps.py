"""Attention maps: one map, a grid of every head (and layer), and a map with the gold word alignment drawn on."""
from __future__ import annotations

import math

import numpy as np

from .axes import _fit_title, _heatmap_size, heatmap, new_figure, style_axes
from .inputs import as_array, squeeze_to, token_labels
from .style import FONT, HIGHLIGHT, MAX_WIDTH, PALETTE, WEIGHT_CMAP, Figure, _styled

__all__ = ["show_attention", "draw_head_grid", "show_heads", "show_alignment"]


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

    arr = squeeze_to(as_array(weights, "weights"), 2, "weights", "(target_len, source_len)",
                     "; pick one head's map, e.g. maps[layer, head]").astype(np.float64)
    rows, cols = arr.shape
    sure_links = _links_array(sure, "sure", rows, cols)
    possible_links = [link for link in _links_array(possible, "possible", rows, cols) if link not in set(sure_links)]
    x_labels = token_labels(x_tokens, cols, "x_tokens", "source positions (columns)")
    y_labels = token_labels(y_tokens, rows, "y_tokens", "target positions (rows)")
    if ax is None:
        fig = new_figure(*_heatmap_size(rows, cols))
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
    style_axes(ax, title, xlabel, ylabel)
    return fig
