"""depth_statistics: per-layer activation scale and gradient size; depth_explorer: static picture and controls."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson
from tfm_lesson.look.depth import depth_explorer, depth_statistics, encoder_stack


@pytest.fixture
def x():
    return torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))  # (batch, seq_len, d_model)


def test_shapes_and_post_norm_scale(x):
    stats = depth_statistics(encoder_stack(5, norm_first=False, d_model=16), x)
    assert set(stats) == {"activation_std", "gradient_norm", "input_gradient_norm"}
    assert all(len(v) == 5 for v in stats.values())
    # post-norm ends every layer with a fresh LayerNorm (gain 1, shift 0): each output has std 1
    assert all(abs(s - 1) < 0.02 for s in stats["activation_std"])
    assert stats["input_gradient_norm"][-1] == pytest.approx(1.0)
    assert all(g > 0 for g in stats["gradient_norm"])


def test_pre_norm_stream_grows(x):
    stats = depth_statistics(encoder_stack(8, norm_first=True, d_model=16), x)
    std = stats["activation_std"]
    assert std[-1] > std[0] * 1.2  # the residual stream accumulates every sub-layer's output
    # the identity path carries the top gradient down untouched, plus the branches' contributions
    assert min(stats["input_gradient_norm"]) >= 0.99


def test_gradient_norm_equals_backward(x):
    stack = encoder_stack(3, norm_first=True, d_model=16)
    stats = depth_statistics(stack, x, loss_fn=lambda out: out.pow(2).sum())
    assert all(p.grad is None for p in stack.parameters())  # measuring leaves .grad alone
    h = x
    for layer in stack.layers:
        h = layer(h)
    stack.norm(h).pow(2).sum().backward()
    for layer, measured in zip(stack.layers, stats["gradient_norm"]):
        expected = torch.sqrt(sum(p.grad.pow(2).sum() for p in layer.parameters())).item()
        assert measured == pytest.approx(expected, rel=1e-5)


def test_accepts_encoder_and_plain_list(x):
    enc = tfm_lesson.Encoder(16, 4, 32, num_layers=3, dropout=0.0, norm_first=True)
    a = depth_statistics(enc, x)
    b = depth_statistics(list(enc.layers), x)  # no final norm here
    assert a["activation_std"] == pytest.approx(b["activation_std"])
    assert a["gradient_norm"] != pytest.approx(b["gradient_norm"])  # the final norm changes the gradients


def test_bad_input(x):
    with pytest.raises(ValueError, match=r"x must be a floating tensor shaped \(batch, seq_len, d_model\)"):
        depth_statistics(encoder_stack(2, False, d_model=16), x[0])
    with pytest.raises(TypeError, match="`.layers`"):
        depth_statistics(torch.nn.Linear(16, 16), x)
    with pytest.raises(ValueError, match="at least one"):
        depth_statistics([], x)


def test_explorer_static_picture_and_controls():
    ex = depth_explorer(max_layers=6, d_model=16, heads=2, d_ff=32)
    assert ex.error == "" and ex.png.startswith(b"\x89PNG")
    bundle = ex._repr_mimebundle_()
    assert "image/png" in bundle
    before = ex.png
    ex.controls["placement"].value = "pre-norm"
    assert ex.error == "" and ex.png != before
    ex.controls["layers"].value = 4
    assert ex.error == "" and len(ex.figure.axes[0].lines[0].get_xdata()) == 4


def test_explorer_bad_arguments():
    with pytest.raises(ValueError, match="num_layers must be an int in"):
        depth_explorer(max_layers=6, num_layers=8)
    with pytest.raises(TypeError, match="now called num_layers="):
        depth_explorer(max_layers=6, layers=4)
    with pytest.raises(ValueError, match="max_layers must be an int >= 2"):
        depth_explorer(max_layers=1)
