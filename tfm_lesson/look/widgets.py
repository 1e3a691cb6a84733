"""Explorers: drag a slider, type a sentence, and watch attention change (ipywidgets 7.7 and 8).

Each function returns an :class:`Explorer`, an ``ipywidgets.VBox`` of controls above a picture. Every
picture is a :mod:`tfm_lesson.look.viz` figure rendered to PNG into an ``ipywidgets.Image``: no matplotlib
widget backend, no JavaScript beyond ipywidgets' own, no CDN.

Where no widget frontend runs (nbval, the book, GitHub, a notebook opened without its kernel) the
explorer shows a static PNG of its state when it was displayed (its default state): its mimebundle holds
``image/png`` and ``text/plain`` next to the widget view. A frontend that knows widgets picks the live
view; JupyterLab 4 / Notebook 7 with ipywidgets 8 fall back to the PNG when the widget model is gone.

The book shows the PNG too (``book/_config.yml``; ``tools/book.py`` builds it). JupyterLab 4 with
jupyterlab_widgets 3 does *not* fall back by itself: a stored widget view whose model is gone shows an empty
output, never the PNG, so chapters are stored without their widget views
(:func:`tfm_lesson.course.strip_widget_views`, run by ``python -m tfm_lesson.course execute``).
"""
from __future__ import annotations

import base64
import math
import textwrap
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import ipywidgets as widgets
import numpy as np
import torch
from torch import Tensor, nn

from . import viz
from ._widget_display import WIDGET_VIEW, widget_bundle
from ..attention import MultiHeadAttention, scaled_dot_product_attention
from ..masks import causal_mask, combine_masks
from ..positional import sinusoidal_table
from .recording import record_attention

__all__ = [
    "Explorer", "temperature_explorer", "mask_explorer", "head_explorer", "positional_explorer",
    "attention_explorer", "translate_widget", "sampling_widget", "WIDGET_VIEW",
    "budget_explorer", "head_scores_explorer",
]

HIGHLIGHT = viz.HIGHLIGHT  # Okabe-Ito orange: frames the selected row / head / dimension
TEXT_LIMIT = 300  # characters of typed text an explorer reads; the rest is cut, with a note
BUILD_WAIT = 5.0  # seconds building an explorer waits for its first picture (then it draws in the background)
SHOW_WAIT = 30.0  # seconds showing or reading a picture still being drawn waits for it
SENTENCE = ["the", "cat", "sat", "on", "the", "mat"]


class Explorer(widgets.VBox):
    """Controls above a figure; every change of a control re-renders the figure.

    ``controls``: name -> widget (each observed on ``value``); ``render()`` returns a
    :class:`matplotlib.figure.Figure` for the current values. ``png`` is the picture now shown;
    ``figure`` the Figure it came from; ``error`` the message of a failed render (shown in red), else "".
    """

    def __init__(self, name: str, controls: dict[str, widgets.Widget], render: Callable[[], "viz.Figure"],
                 note: str = "") -> None:
        super().__init__()
        self.name = name
        self.controls = controls
        self._render = render
        self._held = 0
        self._figure = None
        self._error = ""
        self._render_lock = threading.Lock()  # one render at a time; the latest values win
        self._state_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._dirty = False
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.status = widgets.HTML("")
        bar = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        children = [bar, self.image, self.status]
        if note:
            children.insert(0, widgets.HTML(f"<small>{note}</small>"))
        self.children = children
        self.add_class("tfm-explorer")
        self.add_class(f"tfm-{name.replace('_', '-')}")
        self.image.add_class("tfm-explorer-figure")
        for label, control in controls.items():  # stable CSS hooks, e.g. .tfm-control-head (browser tests use them)
            control.add_class("tfm-control-" + "".join(c if c.isalnum() else "-" for c in label))
            control.observe(self._changed, names="value")
        self._refresh_in_background()  # a slow render never blocks building the explorer
        if not self.wait(BUILD_WAIT):
            self.status.value = "<i>drawing… (the first picture takes a while; it appears here when ready)</i>"

    @contextmanager
    def hold(self, refresh: bool = True) -> Iterator[None]:
        """Change several controls at once and render once, at the end (or not at all: ``refresh=False``)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if refresh and not self._held:
            self.refresh()

    def _changed(self, change: dict) -> None:
        if self._held:
            return
        if getattr(change.get("owner"), "_property_lock", None):  # moved in the browser: keep the kernel free
            self._refresh_in_background()
        else:  # set from code: the picture is current when the line returns
            self.refresh()

    def _refresh_in_background(self) -> None:
        """Render in a worker thread; changes arriving meanwhile are merged into one more render."""
        with self._state_lock:
            if self._worker is not None and self._worker.is_alive():
                self._dirty = True
                return
            self._dirty = False
            self._worker = threading.Thread(target=self._work, name=f"{self.name}-render", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            self.refresh()
            with self._state_lock:
                if not self._dirty:
                    return
                self._dirty = False

    def wait(self, timeout: float | None = SHOW_WAIT) -> bool:
        """Wait (at most ``timeout`` seconds) for a picture being drawn in the background; True when done."""
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def refresh(self) -> None:
        """Render the figure for the current control values (errors are shown, not raised)."""
        with self._render_lock:
            self._refresh()

    def _refresh(self) -> None:
        try:
            with viz.course_style():  # the course's look for the whole picture, not only viz's panels
                fig = self._render()
            self.image.value = viz.figure_png(fig)
            self._figure, self._error = fig, ""
            self.status.value = ""
        except Exception as exc:  # a half-typed sentence must not kill the widget
            self._error = f"{type(exc).__name__}: {exc}"
            self.status.value = f"<span style='color:#D55E00'>{_escape(self._error)}</span>"

    @property
    def png(self) -> bytes:
        self.wait()
        return bytes(self.image.value)

    @property
    def figure(self):
        """The Figure now shown (after a render still running in the background, if any)."""
        self.wait()
        return self._figure

    @property
    def error(self) -> str:
        self.wait()
        return self._error

    _ipython_display_ = None  # ipywidgets 7: display through _repr_mimebundle_ below (with the picture), as on 8

    def _repr_mimebundle_(self, **kwargs) -> dict:
        self.wait()  # the static picture, when it comes in time
        data = widget_bundle(self, **kwargs)
        data["text/plain"] = f"<{self.name}: interactive in a notebook with a live kernel; static picture elsewhere>"
        if self.image.value:
            data["image/png"] = base64.b64encode(self.png).decode("ascii")
        return data


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str) -> str:
    """Typed text for matplotlib, drawn as text: ``$`` would start math ("$5 and $6" -> "5and6")."""
    return str(text).replace("$", r"\$")


def _cut(text: str, limit: int = TEXT_LIMIT) -> tuple[str, str]:
    """``text`` cut to ``limit`` characters, and a note saying so ("" when nothing was cut)."""
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"only the first {limit:,} of {len(text):,} characters are used"


def _slider(description: str, value: int, low: int, high: int) -> widgets.IntSlider:
    return widgets.IntSlider(value=value, min=low, max=high, step=1, description=description,
                             continuous_update=False, style={"description_width": "initial"})


def _matrix(x: object, name: str, expected: str) -> Tensor:
    """A ``(len, d)`` float tensor from a tensor/array, leading size-1 dimensions dropped."""
    t = x.detach() if isinstance(x, Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float32))
    while t.dim() > 2 and t.size(0) == 1:
        t = t[0]
    if t.dim() != 2 or t.numel() == 0:
        raise ValueError(f"{name} must be shaped {expected}, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {t.dtype}")
    return t.to("cpu", torch.float32)


# ---------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------
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
# chapter 04: sinusoidal positional encoding
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


# ---------------------------------------------------------------------------------------------------------
# chapters 07, 08, 12: every map of a Transformer
def _token_names(vocab, ids: Sequence[int]) -> list[str]:
    itos = getattr(vocab, "itos", None)
    if itos is not None:
        return [str(itos[i]) for i in ids]
    return [vocab.decode([i], strip_special=False) for i in ids]


def _greedy(model: nn.Module, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> list[int]:
    """The model's own greedy output (ids after BOS, EOS excluded): the target when none is typed."""
    from ..decoding import greedy_decode

    ids = greedy_decode(model, src, max_len, bos_id, eos_id)[0, 1:].tolist()
    return ids[: ids.index(eos_id)] if eos_id in ids else ids


KIND_LABELS = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (masked)",
               "cross": "cross-attention (decoder → encoder)"}


def attention_explorer(model: nn.Module, src_vocab, tgt_vocab=None, source: str = "",
                       target: str = "") -> Explorer:
    """Every attention map of a :class:`tfm_lesson.Transformer` on a sentence you type.

    Type a source (and optionally a target; press Enter), pick the kind (encoder self-attention,
    decoder self-attention, cross-attention), the layer and the head: the chosen map is drawn large, the
    layer's heads as a grid. Vocabularies are duck-typed like ``tfm_lesson.data.Vocab``: ``encode(text,
    bos=..., eos=...)``, ``itos`` (or ``decode``), ``bos_id``, ``eos_id``; unknown words become ``<unk>``.
    Without a target the model's own greedy output is used (as teacher-forced decoder input after ``<s>``).
    """
    for attr in ("encode", "decode", "make_src_mask", "generator"):
        if not hasattr(model, attr):
            raise TypeError(f"model must be a tfm_lesson.Transformer (encode/decode/generator), got "
                            f"{type(model).__name__} without {attr!r}")
    tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
    for name, vocab in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab)):
        for attr in ("encode", "bos_id", "eos_id"):
            if not hasattr(vocab, attr):
                raise TypeError(f"{name} must be a vocabulary like tfm_lesson.data.Vocab; it has no {attr!r}")
    if not source:
        itos = getattr(src_vocab, "itos", [])
        specials = {getattr(src_vocab, a, None) for a in ("pad_id", "bos_id", "eos_id", "unk_id")}
        source = " ".join(str(t) for i, t in enumerate(itos) if i not in specials and str(t).strip()
                          and not str(t).startswith("<"))
        source = " ".join(source.split()[:5]) or "hello"
    device = next(model.parameters()).device
    heads = model.encoder.layers[0].self_attn.heads
    source_box = widgets.Text(value=source, description="source", continuous_update=False,
                              layout=widgets.Layout(width="380px"))
    target_box = widgets.Text(value=target, description="target", continuous_update=False,
                              placeholder="(empty: the model's greedy output)", layout=widgets.Layout(width="380px"))
    kind = widgets.Dropdown(options=[(KIND_LABELS[k], k) for k in ("encoder", "decoder", "cross")], value="encoder",
                            description="kind", layout=widgets.Layout(width="330px"))
    layer = widgets.Dropdown(options=list(range(len(model.encoder.layers))), value=0, description="layer",
                             layout=widgets.Layout(width="150px"))
    head = _slider("head", 0, 0, heads - 1)
    state: dict = {}

    def run() -> None:
        """Encode the typed text, run the model once while recording every map."""
        key = (source_box.value, target_box.value)
        if state.get("key") == key:
            return
        source, cut_source = _cut(source_box.value)
        target, cut_target = _cut(target_box.value)
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
        state.update(key=key, record=record, src=[_plain(t) for t in _token_names(src_vocab, src_ids)],
                     tgt=[_plain(t) for t in _token_names(tgt_vocab, tgt[0].tolist())],
                     note=cut_source or cut_target)

    def on_kind(change: dict) -> None:
        """Runs before the explorer's own observer: fit the layer choices, which then renders once."""
        stack = model.encoder if change["new"] == "encoder" else model.decoder
        before = layer.value if layer.value is not None else 0
        with explorer.hold(refresh=False):
            layer.options = list(range(len(stack.layers)))
            layer.value = min(before, len(stack.layers) - 1)

    kind.observe(on_kind, names="value")

    def render():
        run()
        record, k, l, h = state["record"], kind.value, layer.value, head.value
        maps = record.get(kind=k, layer=l)[0].cpu().double().numpy()  # (heads, q_len, k_len)
        x_tok = state["src"] if k in ("encoder", "cross") else state["tgt"]
        y_tok = state["src"] if k == "encoder" else state["tgt"]
        fig = viz.Figure(figsize=(10, 4.0), dpi=viz.DPI, layout="constrained")
        left, right = fig.subfigures(1, 2, width_ratios=[1.15, 1])
        ax = left.subplots()
        viz.show_attention(maps[h], x_tok, y_tok, title=f"{KIND_LABELS[k]}, layer {l}, head {h}", ax=ax,
                           xlabel="key (source)" if k != "decoder" else "key (target so far)",
                           ylabel="query (target)" if k != "encoder" else "query (source)", fast=True)
        viz.draw_head_grid(right, maps, h, f"layer {l}: all {maps.shape[0]} heads")
        typed = "typed" if target_box.value.strip() else "greedy"
        fig.suptitle(textwrap.shorten(f"source: {' '.join(state['src'])}   |   target ({typed}): "
                                      f"{' '.join(state['tgt'])}", 140), fontsize=viz.FONT)
        if state["note"]:
            fig.supxlabel(f"({state['note']})", fontsize=viz.FONT - 1, color="grey")
        return fig

    explorer = Explorer("attention_explorer", {"source": source_box, "target": target_box, "kind": kind,
                                               "layer": layer, "head": head}, render,
                        note="Type a sentence and press Enter; unknown words become &lt;unk&gt;.")
    return explorer


# ---------------------------------------------------------------------------------------------------------
# chapter 11: translate as you type
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


# ---------------------------------------------------------------------------------------------------------
# chapter 14: sampling from a language model
def _sampling_probs(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The distribution the next token is drawn from (temperature, then top-k, then top-p), ``(vocab,)``."""
    from ..sampling import next_token_probs

    return next_token_probs(logits[None], temperature, top_k, top_p)[0]


def sampling_widget(model: nn.Module, tokenizer, prompt: str = "The", max_new_tokens: int = 40, seed: int = 0,
                    shown: int = 12) -> Explorer:
    """Type a prompt, move temperature, top-k and top-p: the model's next-token distribution (bars: grey as the
    model gives it, colour after temperature and filtering) and a sample of ``max_new_tokens`` tokens.

    ``model`` is a :class:`tfm_lesson.GPT`, ``tokenizer`` a :class:`tfm_lesson.data.tokenizer.BPETokenizer`.
    top-k 0 and top-p 1.0 mean "off"; temperature 0 is greedy. The sample uses ``seed``, so a change of the
    text comes from the controls, not from chance.
    """
    from ..sampling import complete

    if not isinstance(model, nn.Module) or not hasattr(model, "generate"):
        raise TypeError(f"model must be a tfm_lesson.GPT, got {type(model).__name__}")
    if not hasattr(tokenizer, "encode") or not hasattr(tokenizer, "decode"):
        raise TypeError(f"tokenizer must have encode and decode (a BPETokenizer), got {type(tokenizer).__name__}")
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    box = widgets.Text(value=prompt, description="prompt", placeholder="type the start of a sentence",
                       continuous_update=False, layout=widgets.Layout(width="360px"))
    temperature = widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.1, description="temperature",
                                      continuous_update=False, readout_format=".1f",
                                      style={"description_width": "initial"})
    top_k = _slider("top-k (0 = off)", 0, 0, 50)
    top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p (1 = off)",
                                continuous_update=False, readout_format=".2f", style={"description_width": "initial"})
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
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(torch.tensor([ids], device=device))[0, -1].float().cpu()  # (vocab,)
        finally:
            model.train(was_training)
        raw = logits.softmax(-1)
        used = _sampling_probs(logits, t, k, p)
        order = raw.argsort(descending=True)[:shown].tolist()
        labels = [repr(tokenizer.decode([i]))[1:-1].replace("\\n", "↵") or "∅" for i in order]
        sample = complete(model, tokenizer, text, max_new_tokens, temperature=t, top_k=k, top_p=p, seed=seed)
        sample_box.value = (f"<pre style='white-space: pre-wrap'>{_escape(text)}<b>"
                            f"{_escape(sample).replace(chr(10), ' ↵ ')}</b></pre>")
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
        settings = f"temperature {t:g}" + (" (greedy)" if t == 0 else "") + f", top-k {k or 'off'}, top-p {p or 'off'}"

        def printable(s: str) -> str:
            return "".join(c if c.isprintable() else "\ufffd" for c in s.replace("\n", " ↵ "))

        ax2.text(0.0, 1.0, "prompt", fontsize=viz.FONT, color="grey", va="top", transform=ax2.transAxes)
        ax2.text(0.14, 1.0, printable(text) or "(empty: a fresh line)", fontsize=viz.FONT + 1, va="top",
                 family="monospace", transform=ax2.transAxes)
        ax2.text(0.0, 0.78, "the model\nwrites", fontsize=viz.FONT, color="grey", va="top", transform=ax2.transAxes)
        ax2.text(0.14, 0.78, textwrap.fill(printable(sample), 82, drop_whitespace=False), fontsize=viz.FONT + 1,
                 va="top", family="monospace", color=viz.PALETTE[0], transform=ax2.transAxes)
        ax2.text(0.0, 0.02, f"{max_new_tokens} tokens sampled with {settings}, seed {seed}; ↵ = line break",
                 fontsize=viz.FONT - 1, color="grey", va="bottom", transform=ax2.transAxes)
        return fig

    explorer = Explorer("sampling_widget", {"prompt": box, "temperature": temperature, "top-k": top_k,
                                            "top-p": top_p}, render)
    explorer.children = (*explorer.children, sample_box)
    explorer.sample_box = sample_box
    return explorer


# ---------------------------------------------------------------------------------------------------------
# chapter 06: the parameter budget of one layer
def _layer_budget(kind: str, d_model: int, heads: int, d_ff: int) -> dict[str, int]:
    """Parameters of one encoder or decoder layer by part, counted on a real layer (biases included)."""
    from ..decoder import DecoderLayer
    from ..encoder import EncoderLayer

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
        viz._style_axes(ax2, f"{key}, every head", "head", "layer")
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
