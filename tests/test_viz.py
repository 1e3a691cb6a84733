"""tfm_lesson.look.viz: every function returns a labelled Figure, takes tensors on any device or arrays, and
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
        "plot_band": viz.plot_band({0: [3, 2, 1.0], 1: torch.tensor([3.2, 2.1, 1.1], device=device)}, x=[10, 20, 30],
                                   yours=[3.1, 2.5, float("nan")], lower=[2.5, 1.5, 0.5], upper=[3.5, 2.5, 1.5],
                                   baseline=3.3, title="band"),
        "plot_points": viz.plot_points({"a": [1.0, 1.2, 1.1], "b": torch.tensor([0.5, 0.7], device=device)},
                                       title="points", zero_line=0.0),
        "plot_distributions": viz.plot_distributions({"before": torch.randn(200, device=device) * 3,
                                                      "after": [0.1, -0.2, 0.3]}, title="values", kde=True),
        "plot_scatter": viz.plot_scatter({"encoder": ([0.1, 0.5], [1, 2]), "decoder": ([0.3], [0.5])}, title="heads"),
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
    assert viz.heatmap_data(ax).shape == (3, 3)
    fast = Figure().add_subplot()
    viz.show_attention(_weights(1, 1, 3, 3), ax=fast, fast=True)  # the explorers' image path: same cells
    assert np.array_equal(viz.heatmap_data(fast), viz.heatmap_data(ax))
    assert fast.get_xlim() == ax.get_xlim() == (0.0, 3.0)


def test_heads_grid_shape() -> None:
    fig = viz.show_heads(_weights(3, 2, 5, 5))  # 3 layers x 2 heads
    panels = [ax for ax in fig.axes if viz.heatmap_data(ax) is not None]
    assert len(panels) == 6
    assert [ax.get_title() for ax in panels[:2]] == ["head 0", "head 1"]
    assert [ax.get_ylabel() for ax in panels[::2]] == ["layer 0", "layer 1", "layer 2"]
    stacked = viz.show_heads([_weights(1, 2, 5, 5), _weights(1, 2, 5, 5)])  # a list of per-layer records
    assert len([ax for ax in stacked.axes if viz.heatmap_data(ax) is not None]) == 4


def test_mask_shows_true_and_false() -> None:
    fig = viz.show_mask(causal_mask(4))
    shown = viz.heatmap_data(fig.axes[0])
    assert np.array_equal(np.asarray(shown), np.tril(np.ones((4, 4))))
    assert "10 of 16" in fig.axes[0].get_title()
    tokens = torch.tensor([[5, 6, 7, 0, 0]])
    row = viz.show_mask(padding_mask(tokens, 0))  # (1, 1, 1, 5): one row for every query
    assert viz.heatmap_data(row.axes[0]).tolist() == [[1, 1, 1, 0, 0]]


def test_matrix_center_gives_symmetric_diverging_scale() -> None:
    fig = viz.show_matrix(np.array([[-1.0, 3.0], [0.5, 2.0]]), center=0)
    im = fig.axes[0].collections[0]  # seaborn's heatmap: a mesh of cells
    assert im.get_clim() == (-3.0, 3.0)
    assert im.get_cmap().name == viz.DIVERGING_CMAP
    assert viz.show_matrix([[1, 2], [3, 4]]).axes[0].collections[0].get_cmap().name == "cividis"


def test_band_points_distributions_and_scatter_content() -> None:
    band = viz.plot_band({0: [3.0, 2.0, 1.0], 1: [4.0, 2.5, 1.5], 2: [3.5, 2.2, 0.5]}, x=[10, 20, 30], yours=[1, 1, 1])
    ax = band.axes[0]
    mean = next(line for line in ax.lines if line.get_label().startswith("3 runs"))
    assert np.allclose(mean.get_ydata(), [3.5, 2.233333, 1.0]) and list(mean.get_xdata()) == [10, 20, 30]
    edges = np.concatenate([p.vertices for p in ax.collections[0].get_paths()])  # the band: lowest to highest run
    assert np.isclose(edges[:, 1].max(), 4.0) and np.isclose(edges[:, 1].min(), 0.5)
    points = viz.plot_points({"a": [1.0, 3.0], "b": [2.0, 2.0, 2.0]}, interval=lambda v: (min(v) - 1, max(v) + 1))
    xs = [np.asarray(line.get_xdata(), float) for line in points.axes[0].lines]
    spans = [(np.nanmin(x), np.nanmax(x)) for x in xs if np.isfinite(x).sum() > 2]  # interval lines with their caps
    assert sorted(spans) == [(0.0, 4.0), (1.0, 3.0)]  # the intervals given are the ones drawn
    assert [t.get_text() for t in points.axes[0].get_yticklabels()] == ["a", "b"]
    dist = viz.plot_distributions({"x": [0.0, 0.1, 0.2, 5.0], "y": [1.0, 1.0, 2.0]}, bins=5)
    assert dist.axes[0].get_ylabel() == "density" and dist.axes[0].get_legend() is not None
    scatter = viz.plot_scatter({"a": ([1, 2], [3, 4]), "b": ([5], [6])})
    offsets = np.concatenate([c.get_offsets() for c in scatter.axes[0].collections])
    assert sorted(map(tuple, offsets.tolist())) == [(1, 3), (2, 4), (5, 6)]


def test_course_style_leaves_a_learners_settings_alone() -> None:
    import matplotlib

    before = dict(matplotlib.rcParams)
    viz.show_attention(_weights(3, 3))._repr_png_()
    with viz.course_style():
        assert matplotlib.rcParams["axes.prop_cycle"].by_key()["color"] == viz.PALETTE
    after = dict(matplotlib.rcParams)
    assert {k for k in before if str(before[k]) != str(after[k])} == set()


def test_no_red_green_pair_in_the_course_look() -> None:
    """The palette and maps are colour-blind safe: no pure red next to pure green, no red-green map."""
    import matplotlib

    for name in (viz.WEIGHT_CMAP, viz.DIVERGING_CMAP, "cividis"):
        assert not any(bad in name for bad in ("RdYlGn", "RdGy", "PiYG", "PRGn", "jet", "rainbow", "hsv"))
        assert name in matplotlib.colormaps
    assert not {"#FF0000", "#00FF00", "red", "green"} & {c.upper() for c in viz.PALETTE}


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
    (lambda: viz.plot_band({0: [1, 2], 1: [1, 2, 3]}), ValueError, ["runs", "same length"]),
    (lambda: viz.plot_band({0: [1, 2]}, x=[1, 2, 3]), ValueError, ["x has 3"]),
    (lambda: viz.plot_band({0: [1, 2]}, yours=[1]), ValueError, ["yours"]),
    (lambda: viz.plot_band([1, 2]), TypeError, ["runs", "dict"]),
    (lambda: viz.plot_points({"a": [1, 2]}, interval="ci"), ValueError, ["interval"]),
    (lambda: viz.plot_points({"a": []}), ValueError, ["groups['a']", "empty"]),
    (lambda: viz.plot_distributions({"a": "text"}), TypeError, ["samples['a']"]),
    (lambda: viz.plot_scatter({"a": [1, 2, 3]}), TypeError, ["points['a']", "(x, y)"]),
    (lambda: viz.plot_scatter({"a": ([1, 2], [3])}), ValueError, ["points['a']", "2 x values"]),
])
def test_bad_input_names_the_argument(call, error, words) -> None:
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
