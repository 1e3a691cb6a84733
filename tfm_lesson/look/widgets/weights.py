"""Chapters 01 and 02: how the weights come out of ``softmax(Q Kᵀ / s)``, under a scale and under masks."""
from __future__ import annotations

import math
from typing import Sequence

import ipywidgets as widgets
import numpy as np
import torch

from .. import viz
from ...attention import scaled_dot_product_attention
from ...masks import causal_mask, combine_masks
from .explorer import SENTENCE, Explorer, _matrix, _slider

__all__ = ["temperature_explorer", "mask_explorer"]


# chapter 01: the scale in softmax(Q K^T / s)
def temperature_explorer(query=None, key=None, tokens: Sequence[str] | None = None) -> Explorer:
    """Slide the scale ``s`` of ``softmax(Q Kᵀ / s)`` and watch the weights sharpen (small ``s``) or flatten
    (large ``s``); ``s = sqrt(d_k)`` is the paper's choice. A second slider picks the query whose weights
    are drawn as bars, with their entropy.

    query ``(q_len, d_k)``, key ``(k_len, d_k)`` (default: the query, i.e. self-attention); without them,
    six random 16-dimensional queries and keys, one per word of "the cat sat on the mat". ``tokens`` label the keys
    (and the queries when there are as many).
    """
    if query is None:
        generator = torch.Generator().manual_seed(0)
        query = torch.randn(len(SENTENCE), 16, generator=generator)
        key = torch.randn(len(SENTENCE), 16, generator=generator) if key is None else key
        tokens = SENTENCE if tokens is None else tokens
    q = _matrix(query, "query", "(q_len, d_k)")
    k = q if key is None else _matrix(key, "key", "(k_len, d_k)")
    if k.size(1) != q.size(1):
        raise ValueError(f"query and key must share d_k: query has {q.size(1)} features, key has {k.size(1)}")
    d_k = q.size(1)
    x_labels = viz.token_labels(tokens, k.size(0), "tokens", "keys") if tokens is not None else None
    y_labels = x_labels if x_labels is not None and q.size(0) == k.size(0) else None
    raw = (q @ k.T).double()  # (q_len, k_len)

    scale = widgets.FloatLogSlider(value=math.sqrt(d_k), base=2, min=-3, max=6, step=0.25, description="scale s",
                                   readout_format=".2f", continuous_update=False)
    row = _slider("query", 0, 0, q.size(0) - 1)

    def render():
        s, i = scale.value, row.value
        weights = (raw / s).softmax(-1).numpy()  # (q_len, k_len)
        fig = viz.Figure(figsize=(9.6, 3.7), dpi=viz.DPI, layout="constrained")
        left, right = fig.subplots(1, 2, width_ratios=[1.25, 1])
        viz.show_attention(weights, x_labels, y_labels, title=f"softmax(QKᵀ / s) with s = {s:.2f}", ax=left, vmax=1,
                           fast=True)  # fast: an image redraws faster than seaborn's mesh (viz.heatmap)
        viz.frame_cells(left, 0, i, weights.shape[1], 1)
        p = weights[i]
        entropy = float(-(p * np.log(np.clip(p, 1e-12, None))).sum())
        names = x_labels or [str(j) for j in range(len(p))]
        right.bar(range(len(p)), p, color=viz.PALETTE[0], edgecolor="black", linewidth=0.5)
        right.set_xticks(range(len(p)))
        right.set_xticklabels(names, rotation=60 if len(p) > 8 else 0, fontsize=viz.FONT - 1)
        right.set_ylim(0, 1.05)
        right.grid(True, axis="y", alpha=0.3)
        who = f"'{y_labels[i]}'" if y_labels else str(i)
        viz.style_axes(right, f"query {who}: entropy {entropy:.2f} nats (uniform {math.log(len(p)):.2f})",
                        "key", "weight")
        fig.suptitle(f"d_k = {d_k}, so the paper's scale is sqrt(d_k) = {math.sqrt(d_k):.2f}; "
                     f"smaller s sharpens, larger s flattens", fontsize=viz.FONT)
        return fig

    return Explorer("temperature_explorer", {"scale": scale, "query": row}, render)


# ---------------------------------------------------------------------------------------------------------
# chapter 02: padding and causal masks
PADDED_WORDS = ["we", "read", "the", "paper", "about", "attention", "and", "masks", "on", "a", "slow", "train"]


def mask_explorer(lengths: Sequence[int] = (6, 4), causal: bool = False) -> Explorer:
    """A batch of sentences padded to one length. Slide each sentence's real length, toggle the causal mask,
    pick the sentence to inspect; see the batch's padding, that sentence's full mask ``(q_len, k_len)`` and
    the attention weights it produces (blocked keys get exactly 0)."""
    if isinstance(lengths, int) or not isinstance(lengths, Sequence) or not 1 <= len(lengths) <= 4:
        raise ValueError(f"lengths must be a sequence of 1 to 4 positive ints (one per sentence), got {lengths!r}")
    if any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10 for n in lengths):
        raise ValueError(f"lengths must hold ints in [1, 10], got {tuple(lengths)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    padded = max(max(lengths) + 2, 6)  # room to grow
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(padded, 8, generator=generator)
    k = torch.randn(padded, 8, generator=generator)
    v = torch.randn(padded, 8, generator=generator)

    sliders = {f"length {b}": _slider(f"length of sentence {b}", n, 1, padded) for b, n in enumerate(lengths)}
    causal_box = widgets.Checkbox(value=causal, description="causal mask", indent=False)
    pick = widgets.Dropdown(options=[(f"sentence {b}", b) for b in range(len(lengths))], value=0,
                            description="inspect", layout=widgets.Layout(width="220px"))

    def render():
        real = torch.tensor([s.value for s in sliders.values()])  # (batch,)
        keep = torch.arange(padded)[None, :] < real[:, None]  # (batch, k_len): True = real token
        b = pick.value
        words = PADDED_WORDS[:padded]
        tokens = [w if j < real[b] else "<pad>" for j, w in enumerate(words)]
        mask = keep[b][None, :].expand(padded, padded)  # (q_len, k_len): padding hides keys
        mask = combine_masks(mask, causal_mask(padded) if causal_box.value else None)
        _, weights = scaled_dot_product_attention(q, k, v, mask)  # (q_len, k_len)
        fig = viz.Figure(figsize=(10, 3.9), dpi=viz.DPI, layout="constrained")
        batch_ax, mask_ax, weight_ax = fig.subplots(1, 3, width_ratios=[1, 1, 1.25])
        viz.show_mask(keep, title="padding of the batch", ax=batch_ax, fast=True)
        batch_ax.get_legend().remove()
        batch_ax.set_ylabel("sentence", fontsize=viz.FONT)
        batch_ax.set_yticks([i + 0.5 for i in range(len(lengths))])
        batch_ax.set_yticklabels([str(i) for i in range(len(lengths))])
        batch_ax.set_xlabel("position", fontsize=viz.FONT)
        viz.frame_cells(batch_ax, 0, b, padded, 1)
        kind = "padding + causal" if causal_box.value else "padding only"
        viz.show_mask(mask, tokens, tokens, title=f"sentence {b}: {kind}", ax=mask_ax, fast=True)
        mask_ax.get_legend().remove()
        viz.show_attention(weights, tokens, tokens, title="weights: blocked keys get 0", ax=weight_ax, vmax=1,
                           fast=True)
        fig.suptitle(f"light = may attend, dark = blocked; {int(mask.sum())} of {mask.numel()} pairs visible",
                     fontsize=viz.FONT)
        return fig

    return Explorer("mask_explorer", {**sliders, "causal": causal_box, "inspect": pick}, render)
