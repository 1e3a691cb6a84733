"""check_layer_norm, check_post_norm, check_pre_norm, check_sublayer_connection, check_sublayer_stack: the
reference passes; each classic mistake gets its hint."""
from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import tfm_lesson
from tfm_lesson.checks import (Mistake, check_layer_norm, check_post_norm, check_pre_norm, check_sublayer_connection,
                               check_sublayer_stack)


class Norm(nn.Module):
    """A configurable layer norm: the defaults are right; each flag is one classic mistake."""

    unbiased = False
    eps_inside = True
    dim: int | tuple = -1
    affine = True
    shift = True

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def normalise(self, x):
        mean = x.mean(self.dim, keepdim=True)
        var = x.var(self.dim, keepdim=True, unbiased=self.unbiased)
        std = torch.sqrt(var + self.eps) if self.eps_inside else var.sqrt() + self.eps
        return (x - mean) / std

    def forward(self, x):
        x_hat = self.normalise(x)
        if not self.affine:
            return x_hat
        return x_hat * self.weight + (self.bias if self.shift else 0)


def variant(**attrs):
    return type("Buggy", (Norm,), attrs)


class SeedStyle(Norm):
    """eps added after dividing by the (unbiased) std: (x - mean) / std + eps."""

    def normalise(self, x):
        return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True) + self.eps


class NoEps(Norm):
    def normalise(self, x):
        return (x - x.mean(-1, keepdim=True)) / x.var(-1, keepdim=True, unbiased=False).sqrt()


class HardCodedDim(Norm):
    def normalise(self, x):
        return (x - x.mean(2, keepdim=True)) / torch.sqrt(x.var(2, keepdim=True, unbiased=False) + self.eps)


class PlainTensors(Norm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        del self.weight, self.bias
        self.weight, self.bias = torch.ones(d_model), torch.zeros(d_model)


class NoParameters(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)


class RandomInit(Norm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.weight = nn.Parameter(torch.randn(d_model))


def test_reference_passes(capsys):
    check_layer_norm(Norm)
    assert capsys.readouterr().out.count("✔ check_layer_norm passed") == 1


class DerivedFromTorch(nn.LayerNorm):
    pass


class CallsFunctional(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


@pytest.mark.parametrize("cls, used", [
    (tfm_lesson.LayerNorm, "derives from) tfm_lesson.norm.LayerNorm"), (nn.LayerNorm, "torch.nn.modules"),
    (lambda d, eps=1e-5: tfm_lesson.LayerNorm(d, eps=eps, explicit=True), "uses `LayerNorm`"),
    (DerivedFromTorch, "derives from) torch.nn.modules"), (CallsFunctional, "uses `layer_norm`"),
])
def test_layer_norm_by_pytorch_or_the_package_is_refused(cls, used):
    """Chapter 05: "Do not call F.layer_norm or nn.LayerNorm" (nor the package's LayerNorm)."""
    with pytest.raises(Mistake, match="WRITE IT YOURSELF") as info:
        check_layer_norm(cls)
    assert used in str(info.value)


@pytest.mark.parametrize("cls, hint", [
    (variant(unbiased=True), "UNBIASED variance"),
    (variant(eps_inside=False), "eps OUTSIDE the square root"),
    (variant(unbiased=True, eps_inside=False), "unbiased variance AND eps outside"),
    (SeedStyle, "eps added after the division"),
    (NoEps, "WITHOUT eps"),
    (variant(dim=0), "BATCH axis"),
    (variant(dim=1), "SEQUENCE axis"),
    (variant(dim=(-2, -1)), "whole (seq_len, d_model) slab"),
    (variant(affine=False), "ignores the gain and shift"),
    (variant(shift=False), "ignores the shift"),
    (NoParameters, "missing gain/shift"),
    (PlainTensors, "not an nn.Parameter"),
    (RandomInit, "initialise the gain `weight` to ones"),
    (HardCodedDim, "normalise over dim=-1 (not dim=2)"),
])
def test_layer_norm_mistakes(cls, hint):
    with pytest.raises(Mistake, match=None) as info:
        check_layer_norm(cls)
    assert hint in str(info.value), str(info.value)


def test_layer_norm_mistake_is_an_assertion_error():
    with pytest.raises(AssertionError):
        check_layer_norm(variant(unbiased=True))


def test_layer_norm_hint_survives_other_seeds():
    for seed in range(3):
        with pytest.raises(Mistake, match="eps OUTSIDE"):
            check_layer_norm(variant(eps_inside=False), seed=seed)


# residual + norm wrappers -------------------------------------------------------------------------------------------
def post(x, sublayer, norm):
    return norm(x + sublayer(x))


def pre(x, sublayer, norm):
    return x + sublayer(norm(x))


def test_wrappers_pass(capsys):
    check_post_norm(post)
    check_pre_norm(pre)
    out = capsys.readouterr().out
    assert "✔ check_post_norm passed" in out and "✔ check_pre_norm passed" in out


def test_wrappers_agree_with_encoder_layer():
    """The reference formulas are the ones EncoderLayer uses (dropout off): norm_first False = post, True = pre."""
    torch.manual_seed(0)
    for norm_first, fn in ((False, post), (True, pre)):
        layer = tfm_lesson.EncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
        x = torch.randn(2, 5, 16)
        h = fn(x, lambda t: layer.self_attn(t, t, t)[0], layer.norm1)
        h = fn(h, layer.feed_forward, layer.norm2)
        assert torch.allclose(h, layer(x), atol=1e-6)


@pytest.mark.parametrize("checker, fn, hint", [
    (check_post_norm, pre, "post-norm and pre-norm swapped"),
    (check_pre_norm, post, "post-norm and pre-norm swapped"),
    (check_post_norm, lambda x, f, n: n(f(x)), "residual connection is missing"),
    (check_pre_norm, lambda x, f, n: f(n(x)), "residual connection is missing"),
    (check_post_norm, lambda x, f, n: x + n(f(x)), "norm is applied to the sub-layer's output only"),
    (check_pre_norm, lambda x, f, n: n(x) + f(n(x)), "residual must carry the raw x"),
    (check_pre_norm, lambda x, f, n: n(x + f(n(x))), "normalised twice"),
    (check_post_norm, lambda x, f, n: x + f(x), "no layer norm at all"),
    (check_post_norm, lambda x, f, n: n(x + f(x)) + 0 * f(x), "called the sub-layer 2 times"),
])
def test_wrapper_mistakes(checker, fn, hint):
    with pytest.raises(Mistake) as info:
        checker(fn)
    assert hint in str(info.value), str(info.value)


def test_layer_norm_accepts_a_partial(capsys):
    import functools

    check_layer_norm(functools.partial(Norm))
    assert "✔ check_layer_norm passed" in capsys.readouterr().out
    with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
        check_layer_norm(functools.partial(tfm_lesson.LayerNorm, explicit=True))


# --- SublayerConnection(d_model, norm_first, dropout) and stacks of blocks ------------------------------------------
class _Block(nn.Module):
    """A residual block with one classic slip chosen by ``slip``."""

    slip = "none"

    def __init__(self, d_model, norm_first=False, dropout=0.1):
        super().__init__()
        self.norm_first, self.norm, self.dropout = norm_first, nn.LayerNorm(d_model), nn.Dropout(dropout)

    def forward(self, x, sublayer):
        n, d, slip = self.norm, self.dropout, self.slip
        pre = self.norm_first != (slip == "swapped")
        if slip == "dropout after the residual":
            return d(x + sublayer(n(x))) if pre else n(d(x + sublayer(x)))
        if slip == "residual missing":
            return d(sublayer(n(x))) if pre else n(d(sublayer(x)))
        if slip == "dropout missing":
            return x + sublayer(n(x)) if pre else n(x + sublayer(x))
        if slip == "functional dropout":
            f = lambda t: nn.functional.dropout(t, d.p)  # noqa: E731  (always on, even in eval mode)
            return x + f(sublayer(n(x))) if pre else n(x + f(sublayer(x)))
        if slip == "dropout on x too":
            return d(x) + d(sublayer(n(x))) if pre else n(d(x) + d(sublayer(x)))
        if slip == "normalised residual":
            return n(x) + d(sublayer(n(x))) if pre else n(x + d(sublayer(x)))
        if slip == "norm twice":
            return n(x + d(sublayer(n(x))))
        if slip == "sub-layer twice":
            sublayer(x)
        return x + d(sublayer(n(x))) if pre else n(x + d(sublayer(x)))


def _with_slip(slip: str, norm_attr: str = "norm") -> type:
    cls = type(f"Block_{slip.replace(' ', '_')}", (_Block,), {"slip": slip})
    if norm_attr != "norm":
        init = cls.__init__

        def __init__(self, d_model, norm_first=False, dropout=0.1):
            init(self, d_model, norm_first, dropout)
            setattr(self, norm_attr, self.__dict__["_modules"].pop("norm"))
        cls.__init__ = __init__
    return cls


def test_sublayer_connection_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_sublayer_connection(_Block)
    assert "✔ check_sublayer_connection passed" in capsys.readouterr().out


@pytest.mark.parametrize("slip, hint", [
    ("swapped", "norm in the wrong place"),
    ("dropout after the residual", "dropout after the residual"),
    ("residual missing", "residual missing"),
    ("dropout missing", "dropout missing"),
    ("functional dropout", "in eval mode"),
    ("dropout on x too", "dropout was applied to the residual x"),
    ("normalised residual", "the residual carries norm(x)"),
    ("norm twice", "you normalised twice"),
    ("sub-layer twice", "called the sub-layer 2 times"),
])
def test_sublayer_connection_mistakes(slip: str, hint: str) -> None:
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_sublayer_connection(_with_slip(slip))


def test_sublayer_connection_without_a_norm_attribute() -> None:
    with pytest.raises(Mistake, match="needs an attribute `norm`"):
        check_sublayer_connection(_with_slip("none", norm_attr="layer_norm"))


def _blocks(x, sublayers, connections, final_norm):
    for sublayer, connection in zip(sublayers, connections):
        x = connection(x, sublayer)
    return final_norm(x) if connections[0].norm_first else x


def test_sublayer_stack_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_sublayer_stack(_blocks)
    assert "✔ check_sublayer_stack passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda x, s, c, f: _blocks(x, s, c, lambda t: t), "final norm missing"),
    (lambda x, s, c, f: f(_blocks(x, s, c, lambda t: t)), "final norm extra"),
    (lambda x, s, c, f: _blocks(x, s[::-1], c[::-1], f), "wrong order"),
    (lambda x, s, c, f: _blocks(x, s[:-1], c[:-1], f), "exactly once"),
    (lambda x, s, c, f: None, "return"),
])
def test_sublayer_stack_mistakes(fn, hint: str) -> None:
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_sublayer_stack(fn)
