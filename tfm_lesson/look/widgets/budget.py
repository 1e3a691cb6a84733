"""Chapter 06: the parameter budget of one encoder or decoder layer, counted on a real layer."""
from __future__ import annotations

import ipywidgets as widgets
from torch import nn

from .. import viz
from .explorer import Explorer

__all__ = ["budget_explorer"]


def _layer_budget(kind: str, d_model: int, heads: int, d_ff: int) -> dict[str, int]:
    """Parameters of one encoder or decoder layer by part, counted on a real layer (biases included)."""
    from ...decoder import DecoderLayer
    from ...encoder import EncoderLayer

    def count(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    if kind == "encoder":
        layer = EncoderLayer(d_model, heads, d_ff, dropout=0.0)
        return {"self-attention": count(layer.self_attn), "feed-forward": count(layer.feed_forward),
                "layer norms": count(layer.norm1) + count(layer.norm2)}
    if kind == "decoder":
        layer = DecoderLayer(d_model, heads, d_ff, dropout=0.0)
        return {"self-attention": count(layer.self_attn), "cross-attention": count(layer.cross_attn),
                "feed-forward": count(layer.feed_forward),
                "layer norms": count(layer.norm1) + count(layer.norm2) + count(layer.norm3)}
    raise ValueError(f"kind must be 'encoder' or 'decoder', got {kind!r}")


def budget_explorer(d_model: int = 512, ratio: int = 4, heads: int = 8, kind: str = "encoder") -> Explorer:
    """The parameter budget of one encoder or decoder layer: self-attention, cross-attention (decoder),
    feed-forward network and layer norms, for the chosen ``d_model``, ``d_ff = ratio * d_model`` and heads.

    The heads menu changes nothing (heads split ``d_model``, they add no parameters); the ratio decides the
    feed-forward network's share. Defaults: the base model's encoder layer.
    """
    if kind not in ("encoder", "decoder"):
        raise ValueError(f"kind must be 'encoder' or 'decoder', got {kind!r}")
    d_slider = widgets.IntSlider(value=d_model, min=64, max=1024, step=64, description="d_model",
                                 continuous_update=False)
    ratio_slider = widgets.IntSlider(value=ratio, min=1, max=8, description="d_ff / d_model", continuous_update=False,
                                     style={"description_width": "initial"})
    heads_menu = widgets.Dropdown(options=[1, 2, 4, 8, 16], value=heads, description="heads")
    kind_menu = widgets.Dropdown(options=["encoder", "decoder"], value=kind, description="layer")

    def render():
        d, h, k = d_slider.value, heads_menu.value, kind_menu.value
        shares = _layer_budget(k, d, h, ratio_slider.value * d)
        ffn_share = shares["feed-forward"] / sum(shares.values())
        return viz.plot_bars(shares, title=f"{k} layer, d_model={d}, d_ff={ratio_slider.value * d}, heads={h}: "
                                           f"FFN holds {ffn_share:.0%}", ylabel="parameters")

    return Explorer("budget_explorer", {"d_model": d_slider, "ratio": ratio_slider, "heads": heads_menu,
                                        "layer": kind_menu}, render)
