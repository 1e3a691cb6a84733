"""The course's look: colours, sizes and the seaborn theme, applied only while a figure draws or renders, and
:class:`Figure`, a matplotlib figure that shows itself as PNG without ``pyplot``."""
from __future__ import annotations

import functools
import io
from contextlib import contextmanager
from typing import Callable, Iterator

import matplotlib
from cycler import cycler
from matplotlib.figure import Figure as _MplFigure

__all__ = ["WEIGHT_CMAP", "DIVERGING_CMAP", "PALETTE", "HIGHLIGHT", "LINESTYLES", "DPI", "MAX_WIDTH", "FONT",
           "course_style", "set_theme", "Figure", "figure_png"]

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
