"""Chapter 18: measured quantities against length on log-log axes, and a roofline (seaborn on matplotlib)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from .style import Figure

__all__ = ["plot_scaling", "plot_roofline"]


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
