"""Chapter 11: translate as you type, with the cross-attention map when the translator returns one."""
from __future__ import annotations

import textwrap
from typing import Callable

import ipywidgets as widgets

from .. import viz
from .explorer import Explorer, _cut, _plain

__all__ = ["translate_widget"]


def _split_result(result: object) -> tuple[str, object, tuple]:
    """(translation, attention or None, (source labels, target labels), each a list or None)."""
    if isinstance(result, str):
        return result, None, (None, None)
    if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], str):
        return result[0], result[1], (None, None)
    if isinstance(result, dict) and "translation" in result:
        return (str(result["translation"]), result.get("attention"),
                (result.get("source_tokens"), result.get("target_tokens")))
    raise TypeError("translate_fn must return a str, a (translation, attention) pair or a dict with "
                    "'translation' (and optionally 'attention', 'source_tokens', 'target_tokens'), got "
                    f"{type(result).__name__}")


def _fit_labels(text: str, n: int, end: str) -> list[str] | None:
    words = text.split()
    if len(words) == n:
        return words
    if len(words) + 1 == n:
        return words + [end]
    return None


def translate_widget(translate_fn: Callable[[str], object], text: str = "") -> Explorer:
    """Translate as you type: each change of the text calls ``translate_fn(text)`` and shows the result.

    ``translate_fn`` returns the translation (a str), or ``(translation, attention)`` with a cross-attention
    map ``(tgt_len, src_len)`` (e.g. averaged over heads), which is then drawn with word labels, or a dict
    with those keys; the dict may add ``source_tokens`` and ``target_tokens``, the labels of the map's columns
    and rows (otherwise the words of the two texts label it when their counts fit). Errors of ``translate_fn``
    are shown under the picture instead of raised.
    """
    if not callable(translate_fn):
        raise TypeError(f"translate_fn must be callable (text -> translation), got {type(translate_fn).__name__}")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    box = widgets.Text(value=text, description="source", placeholder="type a sentence", continuous_update=True,
                       layout=widgets.Layout(width="460px"))

    def render():
        source, note = _cut(box.value.strip())
        translation, attention, given = _split_result(translate_fn(source)) if source else ("", None, (None, None))
        height = 1.5 if attention is None else 4.2
        fig = viz.Figure(figsize=(8.5, height), dpi=viz.DPI, layout="constrained")
        if attention is None:
            ax = fig.add_subplot()
            ax.axis("off")
            shown = _plain(textwrap.fill(translation, 80)) if source else "(type a sentence above)"
            ax.text(0.0, 0.95, "source", fontsize=viz.FONT, color="grey", va="top", transform=ax.transAxes)
            ax.text(0.12, 0.95, _plain(textwrap.fill(source, 80)) or "—", fontsize=viz.FONT + 2, va="top",
                    transform=ax.transAxes)
            if note:
                ax.text(0.12, 0.0, f"({note})", fontsize=viz.FONT - 1, color="grey", transform=ax.transAxes)
            ax.text(0.0, 0.45, "translation", fontsize=viz.FONT, color="grey", va="top", transform=ax.transAxes)
            ax.text(0.12, 0.45, shown, fontsize=viz.FONT + 2, va="top", color=viz.PALETTE[0],
                    fontweight="bold", transform=ax.transAxes)
            fig.suptitle("Translate as you type", fontsize=viz.FONT + 1)
            return fig
        weights = viz.squeeze_to(viz.as_array(attention, "attention"), 2, "attention", "(tgt_len, src_len)")
        ax = fig.add_subplot()
        x_labels, y_labels = _fit_labels(source, weights.shape[1], "</s>"), _fit_labels(translation, weights.shape[0], "</s>")
        if given[0] is not None and len(given[0]) == weights.shape[1]:
            x_labels = [str(t) for t in given[0]]
        if given[1] is not None and len(given[1]) == weights.shape[0]:
            y_labels = [str(t) for t in given[1]]
        viz.show_attention(weights, x_labels and [_plain(w) for w in x_labels],
                           y_labels and [_plain(w) for w in y_labels], ax=ax, vmax=1,
                           xlabel="source" + (f" ({note})" if note else ""), ylabel="translation",
                           title=_plain(textwrap.shorten(f"{source}  →  {translation}", 110)), fast=True)
        return fig

    return Explorer("translate_widget", {"source": box}, render)
