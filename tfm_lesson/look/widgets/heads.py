"""One head at a time: chapter 03's head of a :class:`tfm_lesson.MultiHeadAttention` (weights or scores, next to
every head), and chapter 17's head of a trained model with its scores (next to the grid of every layer and head)."""
from __future__ import annotations

import math
from typing import Sequence

import ipywidgets as widgets
import numpy as np
import torch
from torch import Tensor

from .. import viz
from ...attention import MultiHeadAttention
from ...positional import sinusoidal_table
from .explorer import SENTENCE, Explorer, _matrix, _slider

__all__ = ["head_explorer", "head_scores_explorer"]


# chapter 03: one head at a time
def _default_input(d_model: int, tokens: Sequence[str]) -> Tensor:
    """Same word -> same vector, plus sinusoidal positions: ``(1, len, d_model)``."""
    generator = torch.Generator().manual_seed(1)
    vocab = {w: i for i, w in enumerate(dict.fromkeys(tokens))}
    table = torch.randn(len(vocab), d_model, generator=generator)
    x = table[[vocab[w] for w in tokens]] + sinusoidal_table(len(tokens), d_model)  # (len, d_model)
    return x[None]


def head_explorer(mha: MultiHeadAttention | None = None, x=None, tokens: Sequence[str] | None = None) -> Explorer:
    """Pick a head of a :class:`tfm_lesson.MultiHeadAttention` and see its self-attention map over ``x``,
    as weights or as the scores ``q·k / sqrt(d_k)`` before the softmax, next to the grid of all heads.

    mha: default a seeded ``MultiHeadAttention(d_model=32, heads=4)``; x ``(seq_len, d_model)`` or
    ``(1, seq_len, d_model)``: default one vector per word of ``tokens`` plus sinusoidal positions.
    """
    if mha is None:
        torch.manual_seed(0)
        mha = MultiHeadAttention(32, 4)
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be a tfm_lesson.MultiHeadAttention, got {type(mha).__name__}")
    if x is None:
        tokens = list(tokens) if tokens is not None else SENTENCE + ["because", "it", "was", "warm"]
        x = _default_input(mha.d_model, tokens)
    x = _matrix(x, "x", "(seq_len, d_model)")
    if x.size(1) != mha.d_model:
        raise ValueError(f"x has {x.size(1)} features, expected d_model={mha.d_model}")
    labels = viz.token_labels(tokens, x.size(0), "tokens", "positions of x") if tokens is not None else None
    device = next(mha.parameters()).device
    was_training = mha.training
    mha.eval()
    with torch.no_grad():
        xb = x[None].to(device)  # (1, seq_len, d_model)
        _, weights = mha(xb, xb, xb, need_weights=True)  # (1, heads, q, k)
        q = mha.w_q(xb).view(1, -1, mha.heads, mha.d_k).transpose(1, 2)  # (1, heads, q, d_k)
        k = mha.w_k(xb).view(1, -1, mha.heads, mha.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(mha.d_k)  # (1, heads, q, k)
    mha.train(was_training)
    weights, scores = weights[0].cpu().double().numpy(), scores[0].cpu().double().numpy()

    head = _slider("head", 0, 0, mha.heads - 1)
    view = widgets.ToggleButtons(options=["weights", "scores"], value="weights", description="show",
                                 style={"button_width": "80px"})

    def render():
        h = head.value
        fig = viz.Figure(figsize=(10, 3.9), dpi=viz.DPI, layout="constrained")
        left, right = fig.subfigures(1, 2, width_ratios=[1.1, 1])
        ax = left.subplots()
        if view.value == "weights":
            viz.show_attention(weights[h], labels, labels, title=f"head {h}: weights", ax=ax, fast=True)
        else:
            lim = float(np.abs(scores[h]).max()) or 1.0
            viz.heatmap(ax, scores[h], viz.DIVERGING_CMAP, -lim, lim, labels, labels, cbar_label="score", fast=True)
            viz.style_axes(ax, f"head {h}: scores q·k / sqrt(d_k) (before softmax)", "key", "query")
        viz.draw_head_grid(right, weights, h, f"all {mha.heads} heads (d_k = {mha.d_k} each)")
        return fig

    return Explorer("head_explorer", {"head": head, "show": view}, render)


# ---------------------------------------------------------------------------------------------------------
# chapter 17: pick a layer and a head; see its map, the gold alignment and its scores
def head_scores_explorer(views: dict[str, dict], layer: int = 0, head: int = 0) -> Explorer:
    """Pick a model (``views`` key), a layer and a head: its attention map (gold links drawn on, when given) and
    its scores, next to the grid of the first score over every layer and head (the chosen head framed).

    Each view is a dict: ``maps`` ``(layers, heads, q_len, k_len)``; ``scores`` ``{name: (layers, heads)}``
    (e.g. ``{"AER": ..., "prefix matching": ...}``); optional ``x_tokens``, ``y_tokens``, ``sure``, ``possible``
    (``(row, column)`` links drawn over the map) and ``lower_is_better`` (score names where low is good).
    """
    if not isinstance(views, dict) or not views:
        raise ValueError("views must be a non-empty dict {name: {'maps': ..., 'scores': {...}}}")
    prepared = {}
    for name, view in views.items():
        if not isinstance(view, dict) or "maps" not in view or "scores" not in view:
            raise ValueError(f"view {name!r} must be a dict with 'maps' and 'scores'")
        maps = view["maps"].detach().cpu().double() if isinstance(view["maps"], Tensor) else torch.as_tensor(
            np.asarray(view["maps"], dtype=np.float64))
        if maps.dim() != 4:
            raise ValueError(f"view {name!r}: maps must be (layers, heads, q_len, k_len), got {tuple(maps.shape)}")
        scores = {}
        for key, value in view["scores"].items():
            value = torch.as_tensor(value, dtype=torch.float64).cpu()
            if tuple(value.shape) != tuple(maps.shape[:2]):
                raise ValueError(f"view {name!r}: score {key!r} must be (layers, heads) = {tuple(maps.shape[:2])}, "
                                 f"got {tuple(value.shape)}")
            scores[key] = value
        if not scores:
            raise ValueError(f"view {name!r}: scores is empty")
        prepared[name] = dict(view, maps=maps, scores=scores)
    names = list(prepared)
    first = prepared[names[0]]
    model = widgets.Dropdown(options=names, value=names[0], description="model")
    layer_s = _slider("layer", min(max(0, layer), first["maps"].size(0) - 1), 0, first["maps"].size(0) - 1)
    head_s = _slider("head", min(max(0, head), first["maps"].size(1) - 1), 0, first["maps"].size(1) - 1)

    def render():
        view = prepared[model.value]
        maps, scores = view["maps"], view["scores"]
        l, h = min(layer_s.value, maps.size(0) - 1), min(head_s.value, maps.size(1) - 1)
        fig = viz.Figure(figsize=(10, 4.4), dpi=viz.DPI, layout="constrained")
        left, right = fig.subfigures(1, 2, width_ratios=[1.5, 1])
        ax = left.subplots()
        viz.show_alignment(maps[l, h].numpy(), view.get("sure"), view.get("possible"), view.get("x_tokens"),
                           view.get("y_tokens"), title=f"{model.value}: layer {l}, head {h}", ax=ax,
                           xlabel=view.get("xlabel", "key"), ylabel=view.get("ylabel", "query"))
        key = next(iter(scores))
        grid = scores[key].numpy()
        ax2 = right.subplots()
        im = ax2.imshow(grid, cmap="cividis", aspect="equal", interpolation="nearest")
        for (i, j), v in np.ndenumerate(grid):
            ax2.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=viz.FONT - 1,
                     color="white" if im.norm(v) < 0.55 else "black")
        viz.frame_cells(ax2, h - 0.5, l - 0.5)
        ax2.set_xticks(range(grid.shape[1]))
        ax2.set_yticks(range(grid.shape[0]))
        viz.style_axes(ax2, f"{key}, every head", "head", "layer")
        right.colorbar(im, ax=ax2, shrink=0.7).set_label(key, fontsize=viz.FONT)
        text = ", ".join(f"{k} {float(v[l, h]):.3f}" for k, v in scores.items())
        fig.suptitle(f"layer {l}, head {h}: {text}", fontsize=viz.FONT + 1)
        return fig

    def _model_changed(change):
        maps = prepared[change["new"]]["maps"]
        with explorer.hold():
            layer_s.max, head_s.max = maps.size(0) - 1, maps.size(1) - 1

    explorer = Explorer("head_scores_explorer", {"model": model, "layer": layer_s, "head": head_s}, render)
    model.observe(_model_changed, names="value")
    return explorer
