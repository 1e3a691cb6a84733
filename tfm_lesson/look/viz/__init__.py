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

One module per kind of picture, each importing only the ones above it in this list:
``style`` (the look, :class:`Figure`), ``inputs`` (tensors and labels in), ``axes`` (figure and axes helpers,
:func:`heatmap`), ``attention_maps`` (maps, head grids, gold alignments), ``matrices`` (masks, matrices,
positional encodings), ``curves`` (training curves, bands over seeds), ``distributions`` (bars, intervals,
histograms, scatter), ``scaling`` (chapter 18: growth with length, the roofline).
"""
from __future__ import annotations

from .attention_maps import draw_head_grid, show_alignment, show_attention, show_heads
from .axes import frame_cells, heatmap, heatmap_data, new_figure, set_ticks, style_axes
from .curves import plot_band, plot_history, plot_lines
from .distributions import plot_bars, plot_distributions, plot_points, plot_scatter
from .inputs import as_array, squeeze_to, token_labels
from .matrices import show_mask, show_matrix, show_positional_encoding
from .scaling import plot_roofline, plot_scaling
from .style import (DIVERGING_CMAP, DPI, FONT, HIGHLIGHT, LINESTYLES, MAX_WIDTH, PALETTE, WEIGHT_CMAP, Figure,
                    course_style, figure_png, set_theme)

__all__ = [
    "Figure", "show_attention", "show_heads", "show_mask", "show_matrix", "plot_lines", "plot_history",
    "plot_bars", "show_positional_encoding", "figure_png", "course_style", "set_theme", "new_figure",
    "style_axes", "set_ticks", "token_labels", "as_array", "squeeze_to", "heatmap", "heatmap_data",
    "frame_cells", "draw_head_grid", "plot_band", "plot_points", "plot_distributions", "plot_scatter",
    "show_alignment", "plot_scaling", "plot_roofline",
    # the look, for figures of one's own and the explorers
    "WEIGHT_CMAP", "DIVERGING_CMAP", "PALETTE", "HIGHLIGHT", "LINESTYLES", "DPI", "MAX_WIDTH", "FONT",
]

# the former private names (kept for code written against them)
_as_array, _squeeze_to, _labels, _figure, _style_axes, _set_ticks = as_array, squeeze_to, token_labels, new_figure, \
    style_axes, set_ticks
