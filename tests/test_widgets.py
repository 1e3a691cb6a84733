"""tfm_lesson.look.widgets without a frontend: each explorer builds, carries a static PNG in its mimebundle, and
every control, moved programmatically, changes the picture."""
from __future__ import annotations

import base64

import ipywidgets
import pytest
import torch

from tfm_lesson import MultiHeadAttention, Transformer, widgets
from tfm_lesson.course import strip_widget_views
from tfm_lesson.data import Vocab

PNG = b"\x89PNG\r\n\x1a\n"


def _vocab() -> Vocab:
    return Vocab.build(["the cat sat on the mat", "a dog ran in the park", "le chat est assis sur le tapis"])


class TinyVocab:
    """The duck-typed interface the explorer relies on, nothing more (no ``itos``: ``decode`` is used)."""

    bos_id, eos_id, pad_id, unk_id = 1, 2, 0, 3

    def __init__(self, words: list[str]) -> None:
        self.words = ["<pad>", "<s>", "</s>", "<unk>", *words]

    def __len__(self) -> int:
        return len(self.words)

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def encode(self, text: str, bos: bool = False, eos: bool = True) -> list[int]:
        ids = [self.words.index(w) if w in self.words else self.unk_id for w in self.tokenize(text)]
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def decode(self, ids, strip_special: bool = True) -> str:
        return " ".join(self.words[i] for i in ids)


def _model(vocab_size: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=16, heads=2, d_ff=32,
                       num_encoder_layers=2, num_decoder_layers=3, dropout=0.0)


def _attention_explorer() -> widgets.Explorer:
    vocab = _vocab()
    return widgets.attention_explorer(_model(len(vocab)), vocab, source="the cat sat", target="le chat")


def _translate(text: str) -> str:
    return " ".join(reversed(text.split()))


BUILDERS = {
    "temperature_explorer": widgets.temperature_explorer,
    "mask_explorer": widgets.mask_explorer,
    "head_explorer": widgets.head_explorer,
    "positional_explorer": widgets.positional_explorer,
    "attention_explorer": _attention_explorer,
    "translate_widget": lambda: widgets.translate_widget(_translate, "the cat sat"),
    "budget_explorer": widgets.budget_explorer,
}


def _other_value(control: ipywidgets.Widget):
    """A different valid value for a control, as a learner would choose it."""
    if isinstance(control, ipywidgets.Checkbox):
        return not control.value
    if isinstance(control, ipywidgets.Text):
        return control.value + " on the mat"
    if isinstance(control, (ipywidgets.Dropdown, ipywidgets.ToggleButtons)):
        values = [v for _, v in control._options_full] if hasattr(control, "_options_full") else None
        values = values or [o[1] if isinstance(o, tuple) else o for o in control.options]
        return next(v for v in values if v != control.value)
    if isinstance(control, ipywidgets.FloatLogSlider):
        return control.value * 2 ** (-2)
    if isinstance(control, (ipywidgets.IntSlider, ipywidgets.FloatSlider)):
        return control.value + control.step if control.value + control.step <= control.max else control.min
    raise AssertionError(f"no test value for {type(control).__name__}")


@pytest.mark.parametrize("name", list(BUILDERS))
def test_static_png_in_mimebundle(name: str) -> None:
    explorer = BUILDERS[name]()
    assert isinstance(explorer, ipywidgets.VBox)
    assert explorer.error == "", explorer.error
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live view, for a widget frontend
    png = base64.b64decode(bundle["image/png"])  # the static picture, for everything else
    assert png.startswith(PNG) and png == explorer.png and len(png) > 5000
    assert name in bundle["text/plain"]
    assert explorer.image in explorer.children and explorer.image.format == "png"


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_control_changes_the_picture(name: str) -> None:
    explorer = BUILDERS[name]()
    assert explorer.controls, "an explorer without controls"
    for label, control in explorer.controls.items():
        before = explorer.png
        control.value = _other_value(control)
        assert explorer.error == "", f"{name}: moving {label!r} failed: {explorer.error}"
        assert explorer.png != before, f"{name}: moving {label!r} left the picture unchanged"
        assert explorer._repr_mimebundle_()["image/png"] == base64.b64encode(explorer.png).decode()


def test_hold_renders_once() -> None:
    explorer = widgets.positional_explorer(d_model=16, max_len=16)
    calls = []
    render = explorer._render
    explorer._render = lambda: calls.append(1) or render()
    with explorer.hold():
        explorer.controls["dimension"].value = 3
        explorer.controls["offset"].value = 2
    assert len(calls) == 1


def test_temperature_changes_sharpness() -> None:
    explorer = widgets.temperature_explorer()
    weights = lambda: explorer.figure.axes[0].images[0].get_array()  # noqa: E731
    explorer.controls["scale"].value = 64.0
    flat = weights().max()
    explorer.controls["scale"].value = 0.125
    assert weights().max() > flat + 0.3  # a small scale sharpens the softmax
    q, k = torch.randn(3, 4), torch.randn(5, 4)
    e = widgets.temperature_explorer(q, k, tokens=list("abcde"))
    assert e.figure.axes[0].images[0].get_array().shape == (3, 5)


def test_mask_explorer_blocks_padding_and_future() -> None:
    explorer = widgets.mask_explorer(lengths=(5, 3), causal=True)
    weights = explorer.figure.axes[-2].images[0].get_array()  # the last panel before its colourbar
    assert weights.shape == (7, 7)
    assert abs(weights[:, 5:]).max() == 0  # padding keys
    assert abs(torch.tensor(weights.filled(0)).triu(1)).max() == 0  # future keys


def test_head_explorer_uses_the_given_module() -> None:
    torch.manual_seed(3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(4, 8)
    explorer = widgets.head_explorer(mha, x, tokens=["a", "b", "c", "d"])
    _, weights = mha.eval()(x[None], x[None], x[None], need_weights=True)
    shown = explorer.figure.axes[0].images[0].get_array()
    assert torch.allclose(torch.as_tensor(shown.data), weights[0, 0].double(), atol=1e-6)
    assert explorer.controls["head"].max == 1


def test_attention_explorer_kind_layer_and_unknown_words() -> None:
    explorer = _attention_explorer()
    ax = explorer.figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "cat", "sat", "</s>"]
    explorer.controls["kind"].value = "decoder"
    assert list(explorer.controls["layer"].options) == [0, 1, 2]  # the decoder has three layers
    explorer.controls["layer"].value = 2
    explorer.controls["kind"].value = "encoder"
    assert list(explorer.controls["layer"].options) == [0, 1] and explorer.controls["layer"].value == 1
    explorer.controls["source"].value = "the zebra sat"
    labels = [t.get_text() for t in explorer.figure.axes[0].get_xticklabels()]
    assert labels == ["the", "<unk>", "sat", "</s>"]
    explorer.controls["kind"].value = "cross"
    ax = explorer.figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["<s>", "le", "chat"]


def test_attention_explorer_duck_vocab_and_greedy_target() -> None:
    vocab = TinyVocab(["one", "two", "three"])
    explorer = widgets.attention_explorer(_model(len(vocab)), vocab, source="one two")
    assert explorer.error == ""
    explorer.controls["kind"].value = "cross"
    y = [t.get_text() for t in explorer.figure.axes[0].get_yticklabels()]
    assert y[0] == "<s>" and len(y) >= 1  # the model's own greedy output after <s>
    assert widgets.attention_explorer(_model(len(vocab)), vocab).controls["source"].value  # a default source


def test_translate_widget_shows_errors_instead_of_raising() -> None:
    def broken(text: str) -> str:
        raise KeyError("no such word")

    explorer = widgets.translate_widget(broken, "hello")
    assert "no such word" in explorer.error and "no such word" in explorer.status.value
    explorer = widgets.translate_widget(lambda t: 42, "hello")
    assert "translate_fn must return" in explorer.error
    attention = widgets.translate_widget(lambda t: ("b a", torch.rand(3, 3).softmax(-1)), "x y")
    ax = attention.figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "</s>"]
    assert widgets.translate_widget(_translate).error == ""  # empty text: a prompt, no call


def test_translate_widget_labels_the_map_with_the_tokens_it_is_given() -> None:
    """Tokens that split punctuation off (chapter 11) label the map; whitespace words would not fit it."""
    explorer = widgets.translate_widget(lambda t: dict(translation="Le chat.", attention=torch.rand(4, 4).softmax(-1),
                                                       source_tokens=["The", "cat", ".", "</s>"],
                                                       target_tokens=["<s>", "Le", "chat", "."]), "The cat.")
    ax = explorer.figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["The", "cat", ".", "</s>"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["<s>", "Le", "chat", "."]


@pytest.mark.parametrize("call, error, words", [
    (lambda: widgets.mask_explorer(lengths=(0, 3)), ValueError, ["lengths", "[1, 10]"]),
    (lambda: widgets.mask_explorer(lengths=5), ValueError, ["lengths"]),
    (lambda: widgets.head_explorer(mha="attention"), TypeError, ["mha", "MultiHeadAttention"]),
    (lambda: widgets.head_explorer(MultiHeadAttention(8, 2), torch.rand(3, 5)), ValueError, ["x", "d_model=8"]),
    (lambda: widgets.positional_explorer(d_model=7), ValueError, ["d_model", "even"]),
    (lambda: widgets.temperature_explorer(torch.rand(3, 4), torch.rand(3, 5)), ValueError, ["d_k"]),
    (lambda: widgets.translate_widget("not a function"), TypeError, ["translate_fn"]),
    (lambda: widgets.attention_explorer(torch.nn.Linear(2, 2), TinyVocab([])), TypeError, ["model"]),
    (lambda: widgets.attention_explorer(_model(7), object()), TypeError, ["src_vocab"]),
])
def test_bad_input_names_the_argument(call, error, words) -> None:
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"


def test_strip_widget_views_keeps_the_picture() -> None:
    explorer = widgets.positional_explorer(d_model=8, max_len=8)
    bundle = explorer._repr_mimebundle_()
    nb = {"cells": [
        {"cell_type": "code", "outputs": [{"output_type": "display_data", "data": dict(bundle), "metadata": {}}]},
        {"cell_type": "code", "outputs": [{"output_type": "display_data", "metadata": {},
                                           "data": {widgets.WIDGET_VIEW: {"model_id": "x"}, "text/plain": "w"}}]},
        {"cell_type": "markdown", "source": "text"},
    ], "metadata": {"widgets": {"state": {}}}}
    assert strip_widget_views(nb) == 1
    kept = nb["cells"][0]["outputs"][0]["data"]
    assert set(kept) == {"image/png", "text/plain"} and kept["image/png"] == bundle["image/png"]
    assert widgets.WIDGET_VIEW in nb["cells"][1]["outputs"][0]["data"]  # no picture to fall back on: kept
    assert "widgets" not in nb["metadata"]
    assert strip_widget_views(nb) == 0
