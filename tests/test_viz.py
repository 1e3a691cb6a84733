"""tfm_lesson.viz: every function returns a labelled Figure, takes tensors on any device or arrays, and
rejects bad input with an error that names the argument."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from tfm_lesson import causal_mask, padding_mask, sinusoidal_table, viz

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def _titles(fig: Figure) -> list[str]:
    out = [ax.get_title() for ax in fig.axes if ax.get_title()]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    return out


def _axis_labels(fig: Figure) -> list[str]:
    labels = [ax.get_xlabel() for ax in fig.axes] + [ax.get_ylabel() for ax in fig.axes]
    for attr in ("_supxlabel", "_supylabel"):
        if getattr(fig, attr, None) is not None:
            labels.append(getattr(fig, attr).get_text())
    return [text for text in labels if text]


def _is_png(fig: Figure) -> bool:
    png = fig._repr_png_()
    return png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def _weights(*shape: int, device: str = "cpu") -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(*shape, device=device).softmax(-1)


def _all_figures(device: str) -> dict[str, Figure]:
    w = _weights(6, 6, device=device).requires_grad_()
    return {
        "show_attention": viz.show_attention(w, TOKENS, TOKENS),
        "show_heads": viz.show_heads(_weights(4, 6, 6, device=device), TOKENS, TOKENS),
        "show_heads_layers": viz.show_heads(_weights(2, 4, 6, 5, device=device), TOKENS[:5], TOKENS),
        "show_mask": viz.show_mask(causal_mask(6, device=device), TOKENS, TOKENS),
        "show_matrix": viz.show_matrix(torch.randn(5, 7, device=device), center=0),
        "plot_lines": viz.plot_lines({"train": torch.tensor([3.0, 2.0, 1.5], device=device), "valid": [3.1, 2.5, 2.2]}),
        "plot_history": viz.plot_history({"train_loss": [3, 2, 1], "val_loss": [3, 2.5, 2], "lr": [1e-4, 2e-4, 1e-4]}),
        "plot_bars": viz.plot_bars({"encoder": 18_900_000, "decoder": torch.tensor(25_200_000, device=device)}),
        "show_positional_encoding": viz.show_positional_encoding(sinusoidal_table(20, 16).to(device)),
    }


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_every_function_returns_a_labelled_figure(device: str) -> None:
    for name, fig in _all_figures(device).items():
        assert isinstance(fig, Figure), name
        assert _titles(fig), f"{name}: no title"
        assert _axis_labels(fig), f"{name}: no axis labels"
        assert _is_png(fig), f"{name}: does not render to PNG"
        w, h = fig.get_size_inches()
        assert w <= 10 and h <= 8, f"{name}: figure {w:.1f} x {h:.1f} in is larger than notebook width"


def test_figures_are_not_owned_by_pyplot() -> None:
    """Built without pyplot: returned once, never shown a second time by the inline backend."""
    before = "matplotlib.pyplot" in sys.modules
    _all_figures("cpu")
    if not before:
        assert "matplotlib.pyplot" not in sys.modules
    else:
        import matplotlib.pyplot as plt

        assert plt.get_fignums() == []


def test_attention_tokens_on_axes_and_values_written() -> None:
    fig = viz.show_attention(_weights(3, 4), x_tokens=["a", "b", "c", "d"], y_tokens=["x", "y", "z"], title="T")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    assert ax.get_title() == "T" and ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert len(ax.texts) == 12  # every value written in its cell
    assert fig.axes[1].get_ylabel() == "weight"  # the colourbar


def test_attention_draws_into_given_axes_and_drops_leading_ones() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    out = viz.show_attention(_weights(1, 1, 3, 3), ax=ax)
    assert out is fig
    assert ax.images[0].get_array().shape == (3, 3)


def test_heads_grid_shape() -> None:
    fig = viz.show_heads(_weights(3, 2, 5, 5))  # 3 layers x 2 heads
    panels = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    assert len(panels) == 6
    assert [ax.get_title() for ax in panels[:2]] == ["head 0", "head 1"]
    assert [ax.get_ylabel() for ax in panels[::2]] == ["layer 0", "layer 1", "layer 2"]
    stacked = viz.show_heads([_weights(1, 2, 5, 5), _weights(1, 2, 5, 5)])  # a list of per-layer records
    assert len([ax for ax in stacked.axes if ax.images and ax.get_label() != "<colorbar>"]) == 4


def test_mask_shows_true_and_false() -> None:
    fig = viz.show_mask(causal_mask(4))
    shown = fig.axes[0].images[0].get_array()
    assert np.array_equal(np.asarray(shown), np.tril(np.ones((4, 4))))
    assert "10 of 16" in fig.axes[0].get_title()
    tokens = torch.tensor([[5, 6, 7, 0, 0]])
    row = viz.show_mask(padding_mask(tokens, 0))  # (1, 1, 1, 5): one row for every query
    assert np.asarray(row.axes[0].images[0].get_array()).tolist() == [[1, 1, 1, 0, 0]]


def test_matrix_center_gives_symmetric_diverging_scale() -> None:
    fig = viz.show_matrix(np.array([[-1.0, 3.0], [0.5, 2.0]]), center=0)
    im = fig.axes[0].images[0]
    assert im.get_clim() == (-3.0, 3.0)
    assert im.get_cmap().name == viz.DIVERGING_CMAP
    assert viz.show_matrix([[1, 2], [3, 4]]).axes[0].images[0].get_cmap().name == "cividis"


def test_lines_and_bars_content() -> None:
    fig = viz.plot_lines({"a": [1, 2, 3], "b": [3, 2, 1]}, x=[10, 20, 30], logy=True, title="curves")
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["a", "b"]
    assert ax.get_yscale() == "log" and list(ax.lines[0].get_xdata()) == [10, 20, 30]
    assert ax.lines[0].get_color() != ax.lines[1].get_color()
    hist = viz.plot_history({"train_loss": [2, 1], "val_loss": [2, 1.5], "val_bleu": [3, 9]})
    visible = [a for a in hist.axes if a.get_visible()]
    assert [a.get_title() for a in visible] == ["loss", "bleu"]
    bars = viz.plot_bars({"encoder": 1200, "decoder": 3400}, ylabel="parameters")
    assert [t.get_text() for t in bars.axes[0].texts] == ["1,200", "3,400"]
    assert bars.axes[0].get_ylabel() == "parameters"


@pytest.mark.parametrize("call, error, words", [
    (lambda: viz.show_attention(torch.rand(2, 3, 4, 4)), ValueError, ["weights", "(q_len, k_len)", "show_heads"]),
    (lambda: viz.show_attention(torch.rand(3, 4), x_tokens=["a", "b"]), ValueError, ["x_tokens", "2 labels", "4 keys"]),
    (lambda: viz.show_attention("weights"), TypeError, ["weights"]),
    (lambda: viz.show_heads(torch.rand(4, 4)), ValueError, ["weights", "(heads, q_len, k_len)"]),
    (lambda: viz.show_mask(torch.ones(3, 3)), TypeError, ["mask", "boolean"]),
    (lambda: viz.show_mask(torch.ones(2, 3, 3, dtype=torch.bool)), ValueError, ["mask", "(q_len, k_len)"]),
    (lambda: viz.show_matrix(torch.rand(2, 3, 4)), ValueError, ["matrix", "(rows, columns)"]),
    (lambda: viz.show_matrix(torch.rand(3, 3), center="zero"), ValueError, ["center"]),
    (lambda: viz.show_matrix(torch.rand(3, 3), cmap="nope"), ValueError, ["cmap"]),
    (lambda: viz.plot_lines([1, 2, 3]), TypeError, ["series", "dict"]),
    (lambda: viz.plot_lines({"a": [1, 2]}, x=[1, 2, 3]), ValueError, ["x has 3", "'a'"]),
    (lambda: viz.plot_lines({"a": [1, -2]}, logy=True), ValueError, ["logy", "'a'"]),
    (lambda: viz.plot_bars({"a": [1, 2]}), ValueError, ["values['a']", "one number"]),
    (lambda: viz.plot_bars({}), TypeError, ["values"]),
    (lambda: viz.show_positional_encoding(torch.rand(7)), ValueError, ["table", "(positions, d_model)"]),
])
def test_bad_input_names_the_argument(call, error, words) -> None:
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
