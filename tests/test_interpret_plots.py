"""Chapter 17's figure and explorer without a browser: viz.show_alignment and widgets.head_scores_explorer."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle

from tfm_lesson import viz, widgets


def test_show_alignment_draws_one_frame_per_link():
    w = torch.rand(3, 4).softmax(-1)
    sure, possible = {(0, 0), (1, 2)}, {(0, 0), (1, 2), (2, 1), (2, 2)}
    fig = viz.show_alignment(w, sure, possible, x_tokens=["a", "b", "c", "</s>"], y_tokens=["x", "y", "z"])
    assert isinstance(fig, viz.Figure)
    ax = fig.axes[0]
    frames = [p for p in ax.patches if isinstance(p, Rectangle)]
    solid = [p for p in frames if p.get_linestyle() in ("-", "solid")]
    dashed = [p for p in frames if p.get_linestyle() in ("--", "dashed")]
    assert len(solid) == 2 and len(dashed) == 2  # possible-but-not-sure links only
    corners = sorted((round(p.get_x()), round(p.get_y())) for p in solid)
    assert corners == [(0, 0), (2, 1)]  # (x = source, y = target)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "</s>"]
    assert viz.figure_png(fig)[:4] == b"\x89PNG"


def test_show_alignment_errors():
    w = np.ones((2, 3)) / 3
    with pytest.raises(ValueError, match="outside the map"):
        viz.show_alignment(w, {(2, 0)})
    with pytest.raises(ValueError, match="index pairs"):
        viz.show_alignment(w, {(0, 0, 1)})
    with pytest.raises(ValueError, match="target_len, source_len"):
        viz.show_alignment(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="x_tokens"):
        viz.show_alignment(w, x_tokens=["a"])


def _views():
    g = torch.Generator().manual_seed(0)
    return {"translation": dict(maps=torch.rand(2, 4, 3, 5, generator=g), scores={"AER": torch.rand(2, 4, generator=g)},
                                sure={(0, 1)}, possible={(0, 1), (2, 2)}),
            "copying": dict(maps=torch.rand(3, 2, 6, 6, generator=g),
                            scores={"prefix matching": torch.rand(3, 2, generator=g)})}


def test_head_scores_explorer_moves_and_has_a_static_picture():
    ex = widgets.head_scores_explorer(_views())
    first = ex.png
    assert first[:4] == b"\x89PNG" and ex.error == ""
    assert "layer 0, head 0: AER" in ex.figure._suptitle.get_text()
    ex.controls["head"].value = 3
    assert ex.png != first and "head 3" in ex.figure._suptitle.get_text()
    ex.controls["model"].value = "copying"  # 3 layers, 2 heads: the sliders follow, the head is clamped
    assert ex.controls["layer"].max == 2 and ex.controls["head"].max == 1 and ex.controls["head"].value == 1
    assert ex.error == "" and "prefix matching" in ex.figure._suptitle.get_text()
    ex.controls["layer"].value = 2
    assert "layer 2, head 1" in ex.figure._suptitle.get_text()
    bundle = ex._repr_mimebundle_()
    assert "image/png" in bundle and "text/plain" in bundle


def test_head_scores_explorer_errors():
    with pytest.raises(ValueError, match="non-empty dict"):
        widgets.head_scores_explorer({})
    bad = _views()
    bad["copying"]["scores"] = {"x": torch.zeros(2, 2)}
    with pytest.raises(ValueError, match="must be \\(layers, heads\\)"):
        widgets.head_scores_explorer(bad)
    with pytest.raises(ValueError, match="maps must be"):
        widgets.head_scores_explorer({"a": dict(maps=torch.zeros(2, 3), scores={"s": torch.zeros(2, 3)})})
