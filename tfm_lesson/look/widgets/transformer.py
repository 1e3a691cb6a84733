"""Chapters 07, 08 and 12: every attention map of a :class:`tfm_lesson.Transformer` on a sentence you type.

The explorer's layout (:func:`_controls`) stands apart from what its callbacks do: run the model once per typed
text, recording every map (:func:`_run`), and draw the chosen map next to its layer's heads (:func:`_draw`).
"""
from __future__ import annotations

import textwrap
from typing import Sequence

import ipywidgets as widgets
import torch
from torch import Tensor, nn

from .. import viz
from ..recording import record_attention
from .explorer import Explorer, _cut, _plain, _slider

__all__ = ["attention_explorer"]

KIND_LABELS = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (masked)",
               "cross": "cross-attention (decoder → encoder)"}


def _token_names(vocab, ids: Sequence[int]) -> list[str]:
    itos = getattr(vocab, "itos", None)
    if itos is not None:
        return [str(itos[i]) for i in ids]
    return [vocab.decode([i], strip_special=False) for i in ids]


def _greedy(model: nn.Module, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> list[int]:
    """The model's own greedy output (ids after BOS, EOS excluded): the target when none is typed."""
    from ...decoding import greedy_decode

    ids = greedy_decode(model, src, max_len, bos_id, eos_id)[0, 1:].tolist()
    return ids[: ids.index(eos_id)] if eos_id in ids else ids


def _check(model: nn.Module, src_vocab, tgt_vocab) -> None:
    """A clear error for a model that is not a Transformer or a vocabulary that is not like ``Vocab``."""
    for attr in ("encode", "decode", "make_src_mask", "generator"):
        if not hasattr(model, attr):
            raise TypeError(f"model must be a tfm_lesson.Transformer (encode/decode/generator), got "
                            f"{type(model).__name__} without {attr!r}")
    for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
        for attr in ("encode", "bos_id", "eos_id"):
            if not hasattr(vocab, attr):
                raise TypeError(f"{name} must be a vocabulary like tfm_lesson.data.Vocab; it has no {attr!r}")


def _default_source(src_vocab) -> str:
    """The first five ordinary words of the source vocabulary (specials and ``<...>`` left out), else "hello"."""
    itos = getattr(src_vocab, "itos", [])
    specials = {getattr(src_vocab, a, None) for a in ("pad_id", "bos_id", "eos_id", "unk_id")}
    source = " ".join(str(t) for i, t in enumerate(itos) if i not in specials and str(t).strip()
                      and not str(t).startswith("<"))
    return " ".join(source.split()[:5]) or "hello"


def _controls(source: str, target: str, layers: int, heads: int) -> dict[str, widgets.Widget]:
    """The layout: two text boxes, the kind of attention, the layer (of the encoder at first) and the head."""
    source_box = widgets.Text(value=source, description="source", continuous_update=False,
                              layout=widgets.Layout(width="380px"))
    target_box = widgets.Text(value=target, description="target", continuous_update=False,
                              placeholder="(empty: the model's greedy output)", layout=widgets.Layout(width="380px"))
    kind = widgets.Dropdown(options=[(KIND_LABELS[k], k) for k in ("encoder", "decoder", "cross")], value="encoder",
                            description="kind", layout=widgets.Layout(width="330px"))
    layer = widgets.Dropdown(options=list(range(layers)), value=0, description="layer",
                             layout=widgets.Layout(width="150px"))
    return {"source": source_box, "target": target_box, "kind": kind, "layer": layer,
            "head": _slider("head", 0, 0, heads - 1)}


def _run(model: nn.Module, src_vocab, tgt_vocab, source: str, target: str, device: torch.device) -> dict:
    """Encode the typed text, run the model once while recording every map: the record, the source and target
    tokens as labels, and a note when the text was cut."""
    source, cut_source = _cut(source)
    target, cut_target = _cut(target)
    src_ids = list(src_vocab.encode(source, bos=False, eos=True))
    src = torch.tensor([src_ids], dtype=torch.long, device=device)  # (1, src_len)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if target.strip():
                tgt_ids = list(tgt_vocab.encode(target, bos=False, eos=False))
            else:
                tgt_ids = _greedy(model, src, tgt_vocab.bos_id, tgt_vocab.eos_id, max_len=len(src_ids) + 10)
            tgt = torch.tensor([[tgt_vocab.bos_id, *tgt_ids]], dtype=torch.long, device=device)  # (1, tgt_len)
            with record_attention(model) as record:
                model(src, tgt)
    finally:
        model.train(was_training)
    return dict(record=record, src=[_plain(t) for t in _token_names(src_vocab, src_ids)],
                tgt=[_plain(t) for t in _token_names(tgt_vocab, tgt[0].tolist())], note=cut_source or cut_target)


def _draw(state: dict, kind: str, layer: int, head: int, typed: bool) -> viz.Figure:
    """The map of ``kind``, ``layer``, ``head`` drawn large, the layer's heads as a grid, the two sentences above."""
    maps = state["record"].get(kind=kind, layer=layer)[0].cpu().double().numpy()  # (heads, q_len, k_len)
    x_tok = state["src"] if kind in ("encoder", "cross") else state["tgt"]
    y_tok = state["src"] if kind == "encoder" else state["tgt"]
    fig = viz.Figure(figsize=(10, 4.0), dpi=viz.DPI, layout="constrained")
    left, right = fig.subfigures(1, 2, width_ratios=[1.15, 1])
    ax = left.subplots()
    viz.show_attention(maps[head], x_tok, y_tok, title=f"{KIND_LABELS[kind]}, layer {layer}, head {head}", ax=ax,
                       xlabel="key (source)" if kind != "decoder" else "key (target so far)",
                       ylabel="query (target)" if kind != "encoder" else "query (source)", fast=True)
    viz.draw_head_grid(right, maps, head, f"layer {layer}: all {maps.shape[0]} heads")
    fig.suptitle(textwrap.shorten(f"source: {' '.join(state['src'])}   |   target ({'typed' if typed else 'greedy'}): "
                                  f"{' '.join(state['tgt'])}", 140), fontsize=viz.FONT)
    if state["note"]:
        fig.supxlabel(f"({state['note']})", fontsize=viz.FONT - 1, color="grey")
    return fig


def attention_explorer(model: nn.Module, src_vocab, tgt_vocab=None, source: str = "",
                       target: str = "") -> Explorer:
    """Every attention map of a :class:`tfm_lesson.Transformer` on a sentence you type.

    Type a source (and optionally a target; press Enter), pick the kind (encoder self-attention,
    decoder self-attention, cross-attention), the layer and the head: the chosen map is drawn large, the
    layer's heads as a grid. Vocabularies are duck-typed like ``tfm_lesson.data.Vocab``: ``encode(text,
    bos=..., eos=...)``, ``itos`` (or ``decode``), ``bos_id``, ``eos_id``; unknown words become ``<unk>``.
    Without a target the model's own greedy output is used (as teacher-forced decoder input after ``<s>``).
    """
    tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
    _check(model, src_vocab, tgt_vocab)
    source = source or _default_source(src_vocab)
    device = next(model.parameters()).device
    controls = _controls(source, target, len(model.encoder.layers), model.encoder.layers[0].self_attn.heads)
    source_box, target_box, kind, layer, head = controls.values()
    state: dict = {}

    def on_kind(change: dict) -> None:
        """Runs before the explorer's own observer: fit the layer choices, which then renders once."""
        stack = model.encoder if change["new"] == "encoder" else model.decoder
        before = layer.value if layer.value is not None else 0
        with explorer.hold(refresh=False):
            layer.options = list(range(len(stack.layers)))
            layer.value = min(before, len(stack.layers) - 1)

    kind.observe(on_kind, names="value")

    def render():
        key = (source_box.value, target_box.value)
        if state.get("key") != key:  # the model runs once per typed text, not once per head
            state.update(_run(model, src_vocab, tgt_vocab, *key, device), key=key)
        return _draw(state, kind.value, layer.value, head.value, bool(target_box.value.strip()))

    explorer = Explorer("attention_explorer", controls, render,
                        note="Type a sentence and press Enter; unknown words become &lt;unk&gt;.")
    return explorer
