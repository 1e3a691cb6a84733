"""Chapter 14: sampling from a language model. Type a prompt, move temperature, top-k and top-p: the next-token
distribution before and after them, and a sample.

The explorer's layout (:func:`_controls`) stands apart from what its callback does: the model's last logits
(:func:`_last_logits`) and the picture of the distribution and the sample (:func:`_draw`).
"""
from __future__ import annotations

import textwrap

import ipywidgets as widgets
import numpy as np
import torch
from torch import Tensor, nn

from .. import viz
from .explorer import Explorer, _escape, _slider

__all__ = ["sampling_widget"]


def _sampling_probs(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The distribution the next token is drawn from (temperature, then top-k, then top-p), ``(vocab,)``."""
    from ...sampling import next_token_probs

    return next_token_probs(logits[None], temperature, top_k, top_p)[0]


def _controls(prompt: str) -> dict[str, widgets.Widget]:
    """The layout: the prompt box and the temperature, top-k and top-p sliders (0 and 1.0 mean "off")."""
    box = widgets.Text(value=prompt, description="prompt", placeholder="type the start of a sentence",
                       continuous_update=False, layout=widgets.Layout(width="360px"))
    temperature = widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.1, description="temperature",
                                      continuous_update=False, readout_format=".1f",
                                      style={"description_width": "initial"})
    top_k = _slider("top-k (0 = off)", 0, 0, 50)
    top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p (1 = off)",
                                continuous_update=False, readout_format=".2f", style={"description_width": "initial"})
    return {"prompt": box, "temperature": temperature, "top-k": top_k, "top-p": top_p}


def _last_logits(model: nn.Module, ids: list[int]) -> Tensor:
    """The model's logits for the token after ``ids``, ``(vocab,)`` on the CPU (evaluation mode, no gradients)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(torch.tensor([ids], device=device))[0, -1].float().cpu()  # (vocab,)
    finally:
        model.train(was_training)


def _printable(s: str) -> str:
    return "".join(c if c.isprintable() else "\ufffd" for c in s.replace("\n", " ↵ "))


def _draw(raw: Tensor, used: Tensor, order: list[int], labels: list[str], text: str, sample: str,
          note: str) -> viz.Figure:
    """Bars of the tokens in ``order`` (grey: the model's ``raw`` p; colour: the ``used`` p), the sample below."""
    fig = viz.Figure(figsize=(9.0, 4.6), dpi=viz.DPI, layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.5, 1.0])
    ax = top.add_subplot()
    xs = np.arange(len(order))
    ax.bar(xs - 0.2, raw[order].numpy(), width=0.4, color="#BBBBBB", label="the model's p")
    ax.bar(xs + 0.2, used[order].numpy(), width=0.4, color=viz.PALETTE[0], label="after temperature, top-k, top-p")
    ax.set_xticks(xs, labels, fontsize=viz.FONT, rotation=30)
    ax.set_ylim(0, min(1.02, 1.15 * max(float(raw[order].max()), float(used[order].max()))))
    kept = int((used > 0).sum())
    ax.set_title(f"next token after {textwrap.shorten(repr(text), 40)}: {kept} of {used.numel()} tokens can be "
                 f"drawn", fontsize=viz.FONT + 1)
    ax.legend(fontsize=viz.FONT - 1, loc="upper right", frameon=False)
    ax.tick_params(labelsize=viz.FONT - 1)
    ax.spines[["top", "right"]].set_visible(False)
    ax2 = bottom.add_subplot()
    ax2.axis("off")
    ax2.text(0.0, 1.0, "prompt", fontsize=viz.FONT, color="grey", va="top", transform=ax2.transAxes)
    ax2.text(0.14, 1.0, _printable(text) or "(empty: a fresh line)", fontsize=viz.FONT + 1, va="top",
             family="monospace", transform=ax2.transAxes)
    ax2.text(0.0, 0.78, "the model\nwrites", fontsize=viz.FONT, color="grey", va="top", transform=ax2.transAxes)
    ax2.text(0.14, 0.78, textwrap.fill(_printable(sample), 82, drop_whitespace=False), fontsize=viz.FONT + 1,
             va="top", family="monospace", color=viz.PALETTE[0], transform=ax2.transAxes)
    ax2.text(0.0, 0.02, note, fontsize=viz.FONT - 1, color="grey", va="bottom", transform=ax2.transAxes)
    return fig


def sampling_widget(model: nn.Module, tokenizer, prompt: str = "The", max_new_tokens: int = 40, seed: int = 0,
                    shown: int = 12) -> Explorer:
    """Type a prompt, move temperature, top-k and top-p: the model's next-token distribution (bars: grey as the
    model gives it, colour after temperature and filtering) and a sample of ``max_new_tokens`` tokens.

    ``model`` is a :class:`tfm_lesson.GPT`, ``tokenizer`` a :class:`tfm_lesson.data.tokenizer.BPETokenizer`.
    top-k 0 and top-p 1.0 mean "off"; temperature 0 is greedy. The sample uses ``seed``, so a change of the
    text comes from the controls, not from chance.
    """
    from ...sampling import complete

    if not isinstance(model, nn.Module) or not hasattr(model, "generate"):
        raise TypeError(f"model must be a tfm_lesson.GPT, got {type(model).__name__}")
    if not hasattr(tokenizer, "encode") or not hasattr(tokenizer, "decode"):
        raise TypeError(f"tokenizer must have encode and decode (a BPETokenizer), got {type(tokenizer).__name__}")
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    controls = _controls(prompt)
    box, temperature, top_k, top_p = controls.values()
    sample_box = widgets.HTML("")  # the sample as text too (to copy, and for screen readers)
    sample_box.add_class("tfm-sample-text")

    def render():
        text = box.value
        t, k, p = float(temperature.value), int(top_k.value) or None, float(top_p.value)
        p = None if p >= 1.0 else p
        ids = tokenizer.encode(text or "\n")
        max_len = model.config.max_len
        if len(ids) + max_new_tokens > max_len:
            raise ValueError(f"the prompt is {len(ids)} tokens; with {max_new_tokens} new ones that passes the "
                             f"model's context of max_len={max_len}: shorten the prompt")
        logits = _last_logits(model, ids)  # (vocab,)
        raw = logits.softmax(-1)
        used = _sampling_probs(logits, t, k, p)
        order = raw.argsort(descending=True)[:shown].tolist()
        labels = [repr(tokenizer.decode([i]))[1:-1].replace("\\n", "↵") or "∅" for i in order]
        sample = complete(model, tokenizer, text, max_new_tokens, temperature=t, top_k=k, top_p=p, seed=seed)
        sample_box.value = (f"<pre style='white-space: pre-wrap'>{_escape(text)}<b>"
                            f"{_escape(sample).replace(chr(10), ' ↵ ')}</b></pre>")
        settings = f"temperature {t:g}" + (" (greedy)" if t == 0 else "") + f", top-k {k or 'off'}, top-p {p or 'off'}"
        return _draw(raw, used, order, labels, text, sample,
                     f"{max_new_tokens} tokens sampled with {settings}, seed {seed}; ↵ = line break")

    explorer = Explorer("sampling_widget", controls, render)
    explorer.children = (*explorer.children, sample_box)
    explorer.sample_box = sample_box
    return explorer
