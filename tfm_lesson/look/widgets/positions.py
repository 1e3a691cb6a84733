"""Chapter 04: the sinusoidal positional encoding, one dimension's wave and the dot product at an offset."""
from __future__ import annotations

import math

import numpy as np

from .. import viz
from ...positional import sinusoidal_table
from .explorer import Explorer, _slider

__all__ = ["positional_explorer"]


def positional_explorer(d_model: int = 64, max_len: int = 64) -> Explorer:
    """The sinusoidal table ``PE(pos, i)``: pick a dimension ``i`` (its wave, highlighted in the table) and an
    offset ``k``; the wave shifted by ``k`` and the dot product ``PE(pos)·PE(pos+k)``, the same at every
    position: it depends on the offset only, which is why attention can read relative positions."""
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be an even int >= 2, got {d_model!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 4 <= max_len <= 2048:
        raise ValueError(f"max_len must be an int in [4, 2048], got {max_len!r}")
    table = sinusoidal_table(2 * max_len, d_model).double().numpy()  # room for pos + offset
    dim = _slider("dimension i", min(4, d_model - 1), 0, d_model - 1)
    offset = _slider("offset k", min(4, max_len // 2), 0, max_len // 2)

    def render():
        i, k = dim.value, offset.value
        pos = np.arange(max_len)
        fig = viz.Figure(figsize=(10, 3.6), dpi=viz.DPI, layout="constrained")
        heat, wave, dots = fig.subplots(1, 3, width_ratios=[1.1, 1, 1])
        viz.heatmap(heat, table[:max_len], viz.DIVERGING_CMAP, -1, 1, fast=True, max_ticks=8)  # 64 x 64: image
        viz.frame_cells(heat, i, 0, 1, max_len, lw=2)
        viz.style_axes(heat, f"PE table ({max_len} x {d_model})", "dimension i", "position pos")
        wavelength = 2 * math.pi * 10000 ** (2 * (i // 2) / d_model)
        wave.plot(pos, table[pos, i], color=viz.PALETTE[0], label=f"PE(pos, {i})")
        wave.plot(pos, table[pos + k, i], color=viz.PALETTE[3], linestyle="--", label=f"PE(pos + {k}, {i})")
        wave.set_ylim(-1.15, 1.4)
        wave.legend(fontsize=viz.FONT - 1, frameon=False, loc="upper right", ncol=2)
        wave.grid(True, alpha=0.3)
        viz.style_axes(wave, f"{'sin' if i % 2 == 0 else 'cos'}, wavelength {wavelength:,.1f} positions",
                        "position pos", "value")
        dot = (table[pos] * table[pos + k]).sum(-1)  # (max_len,)
        dots.plot(pos, dot, color=viz.PALETTE[2], linewidth=2)
        dots.set_ylim(-0.05 * d_model, 0.55 * d_model + 0.5)
        dots.grid(True, alpha=0.3)
        viz.style_axes(dots, f"PE(pos)·PE(pos+{k}) = {dot.mean():.2f} at every pos", "position pos", "dot product")
        return fig

    return Explorer("positional_explorer", {"dimension": dim, "offset": offset}, render)
