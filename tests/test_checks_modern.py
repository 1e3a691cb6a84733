"""check_rms_norm, check_rotary, check_swiglu, check_grouped_query_attention: the reference passes; each
classic mistake, injected, gets the hint that names it."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfm_lesson.checks import (Mistake, check_grouped_query_attention, check_rms_norm, check_rotary,
                               check_swiglu)
from tfm_lesson.modern import RMSNorm, RotaryEmbedding, SwiGLU, rotary_frequencies


# RMSNorm ------------------------------------------------------------------------------------------------------------
class Norm(nn.Module):
    """A configurable RMSNorm: the defaults are right; each override is one classic mistake."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def normalise(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.normalise(x) * self.weight


def _norm(normalise):
    return type("Buggy", (Norm,), {"normalise": lambda self, x: normalise(x, self.eps)})


def test_rms_norm_reference_passes(capsys):
    check_rms_norm(RMSNorm)
    check_rms_norm(Norm)
    assert "✔ check_rms_norm passed" in capsys.readouterr().out


@pytest.mark.parametrize("normalise,hint", [
    (lambda x, e: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + e),
     "MEAN IS SUBTRACTED"),
    (lambda x, e: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + e),
     "does not subtract the mean"),
    (lambda x, e: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + e), "eps OUTSIDE the square root"),
    (lambda x, e: x / x.pow(2).mean(-1, keepdim=True).sqrt(), "WITHOUT eps"),
    (lambda x, e: x / (x.pow(2).mean(-1, keepdim=True) + e), "not its square root"),
    (lambda x, e: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + e), "SUM of squares"),
    (lambda x, e: x / (x.std(-1, keepdim=True) + e), "standard deviation"),
])
def test_rms_norm_mistakes_are_named(normalise, hint):
    with pytest.raises(Mistake, match=hint):
        check_rms_norm(_norm(normalise))


def test_rms_norm_missing_gain_and_extra_bias():
    class NoGain(Norm):
        def forward(self, x):
            return self.normalise(x)

    class WithBias(Norm):
        def __init__(self, d_model, eps=1e-5):
            super().__init__(d_model, eps)
            self.bias = nn.Parameter(torch.zeros(d_model))

    with pytest.raises(Mistake, match="ignores the gain"):
        check_rms_norm(NoGain)
    with pytest.raises(Mistake, match="no shift"):
        check_rms_norm(WithBias)


# rotary embeddings --------------------------------------------------------------------------------------------------
def rope(x, offset=0, base=10000.0, interleaved=False):
    return RotaryEmbedding(x.size(-1), base, interleaved)(x, offset)


def learner_rope(x, offset, base):
    """What a learner writes: the halves convention, explicitly."""
    d_k, n = x.size(-1), x.size(-2)
    theta = base ** (-torch.arange(0, d_k, 2).float() / d_k)
    angles = torch.arange(offset, offset + n).float()[:, None] * theta
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    x1, x2 = x[..., : d_k // 2], x[..., d_k // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def test_rotary_reference_passes(capsys):
    check_rotary(learner_rope)
    check_rotary(lambda x, o, b: rope(x, o, b, interleaved=True), interleaved=True)
    assert capsys.readouterr().out.count("✔ check_rotary passed") == 2


@pytest.mark.parametrize("fn,hint", [
    (lambda x, o, b: rope(x, o, b, interleaved=True), "INTERLEAVED convention"),
    (lambda x, o, b: rope(x, 0, b), "ignores the offset"),
    (lambda x, o, b: rope(x, 0, b, interleaved=True), "ignores the offset AND uses the INTERLEAVED"),
    (lambda x, o, b: rope(x, o, 10000.0), "base 10,000 instead of base=500000"),
    (lambda x, o, b: 2 * x * torch.cat([torch.arange(o, o + x.size(-2)).float()[:, None]
                                         * rotary_frequencies(x.size(-1), b)] * 2, -1).cos() - learner_rope(x, o, b),
     "wrong way round"),
])
def test_rotary_mistakes_are_named(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_rotary(fn)


def test_rotary_halves_named_when_interleaved_was_asked():
    with pytest.raises(Mistake, match="HALVES convention"):
        check_rotary(learner_rope, interleaved=True)


def test_rotary_wrong_frequencies_are_named():
    def slow(x, o, b):
        d_k, n = x.size(-1), x.size(-2)
        theta = b ** (-torch.arange(d_k // 2).float() / d_k)  # i / d_k, not 2i / d_k
        angles = torch.arange(o, o + n).float()[:, None] * theta
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
        return x * cos + torch.cat([-x[..., d_k // 2:], x[..., : d_k // 2]], -1) * sin

    with pytest.raises(Mistake, match=r"base \*\* \(-i / d_k\)"):
        check_rotary(slow)


# the slips a learner's run of chapter 16 met, each named ----------------------------------------------------------
@pytest.mark.parametrize("normalise,hint", [
    (lambda x, e: x / torch.sqrt(x.var(-1, keepdim=True) + e), r"sqrt\(x\.var\(\) \+ eps\)"),
    (lambda x, e: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + e), r"x\.var\(unbiased=False\)"),
    (lambda x, e: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), "eps = 1e-06, not the eps=1e-05"),
    (lambda x, e: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5), "eps = 1e-05, not the eps=0.01"),
])
def test_rms_norm_std_and_fixed_eps_are_named(normalise, hint):
    with pytest.raises(Mistake, match=hint):
        check_rms_norm(_norm(normalise))


def test_rms_norm_missing_keepdim_is_named():
    with pytest.raises(Mistake, match="keepdim=True"):
        check_rms_norm(_norm(lambda x, e: x / torch.sqrt(x.pow(2).mean(-1) + e)))


def _rope_mixed_convention(pairs: str):
    """Rotary with the pairs of one convention and the angle layout of the other."""
    def rope(x, offset, base):
        d_k = x.size(-1)
        theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float) / d_k)
        angles = torch.arange(offset, offset + x.size(-2), dtype=torch.float)[:, None] * theta  # (seq_len, d_k/2)
        if pairs == "halves":  # rotate_half with angles repeated in place
            angles = angles.repeat_interleave(2, dim=-1)
            x1, x2 = x[..., : d_k // 2], x[..., d_k // 2:]
            return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()
        angles = torch.cat([angles, angles], dim=-1)  # interleaved pairs with the halves layout
        rotated = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)
        return x * angles.cos() + rotated * angles.sin()
    return rope


@pytest.mark.parametrize("pairs,hint", [("halves", "rotates HALVES"), ("interleaved", "rotates INTERLEAVED")])
def test_rotary_mixed_conventions_are_named(pairs, hint):
    with pytest.raises(Mistake, match=hint):
        check_rotary(_rope_mixed_convention(pairs))


def test_gqa_messages_say_group_size_and_tell_nan_slips_apart():
    with pytest.raises(Mistake, match="group_size = heads // kv_heads") as tiled:
        check_grouped_query_attention(lambda q, k, v, m: gqa(q, k, v, m, repeat="tile"))
    assert "group h // groups" not in str(tiled.value)
    with pytest.raises(Mistake) as inverted:
        check_grouped_query_attention(lambda q, k, v, m: gqa(q, k, v, m, invert=True))
    with pytest.raises(Mistake) as both:
        check_grouped_query_attention(lambda q, k, v, m: gqa(q, k, v, m, invert=True, repeat="tile"))
    assert "inverts the mask" in str(inverted.value) and "wrong order" in str(both.value)
    assert str(inverted.value) != str(both.value)


# SwiGLU -------------------------------------------------------------------------------------------------------------
class FFN(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.w_gate = nn.Linear(d_model, hidden, bias=False)
        self.w_up = nn.Linear(d_model, hidden, bias=False)
        self.w_down = nn.Linear(hidden, d_model, bias=False)

    def combine(self, gate, up):
        return F.silu(gate) * up

    def forward(self, x):
        return self.w_down(self.combine(self.w_gate(x), self.w_up(x)))


def _ffn(combine):
    return type("Buggy", (FFN,), {"combine": lambda self, g, u: combine(g, u)})


def test_swiglu_reference_passes(capsys):
    check_swiglu(SwiGLU)
    check_swiglu(FFN)
    assert capsys.readouterr().out.count("✔ check_swiglu passed") == 2


@pytest.mark.parametrize("combine,hint", [
    (lambda g, u: F.silu(u) * g, "GATE AND THE VALUE ARE SWAPPED"),
    (lambda g, u: g * u, "no SiLU"),
    (lambda g, u: torch.sigmoid(g) * u, "that is GLU"),
    (lambda g, u: F.relu(g) * u, "ReGLU"),
    (lambda g, u: F.gelu(g) * u, "GEGLU"),
    (lambda g, u: F.silu(g) + u, "ADDS"),
    (lambda g, u: F.silu(g * u), "after the product"),
])
def test_swiglu_mistakes_are_named(combine, hint):
    with pytest.raises(Mistake, match=hint):
        check_swiglu(_ffn(combine))


def test_swiglu_structure_mistakes():
    class Biased(FFN):
        def __init__(self, d_model, hidden):
            super().__init__(d_model, hidden)
            self.w_up = nn.Linear(d_model, hidden)

    class Named(nn.Module):
        def __init__(self, d_model, hidden):
            super().__init__()
            self.gate_proj = nn.Linear(d_model, hidden, bias=False)

    with pytest.raises(Mistake, match="`w_up` has a bias"):
        check_swiglu(Biased)
    with pytest.raises(Mistake, match="w_gate = nn.Linear"):
        check_swiglu(Named)


# grouped-query attention --------------------------------------------------------------------------------------------
def gqa(q, k, v, mask, repeat="interleave", scale=None, invert=False, use_mask=True):
    groups = q.size(1) // k.size(1)
    if repeat == "interleave":
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    else:
        k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)) if scale is None else scale)
    if use_mask:
        scores = scores.masked_fill(mask if invert else ~mask, float("-inf"))
    return scores.softmax(-1) @ v


def test_gqa_reference_passes(capsys):
    check_grouped_query_attention(gqa)
    assert capsys.readouterr().out.count("✔ check_grouped_query_attention passed") == 1
    with pytest.raises(Mistake, match="WRITE IT YOURSELF"):  # the exercise's rule: the attention written by hand
        check_grouped_query_attention(lambda q, k, v, m: F.scaled_dot_product_attention(
            q, k.repeat_interleave(q.size(1) // k.size(1), 1), v.repeat_interleave(q.size(1) // k.size(1), 1),
            attn_mask=m))


@pytest.mark.parametrize("fn,hint", [
    (lambda q, k, v, m: gqa(q, k, v, m, repeat="tile"), "WRONG ORDER"),
    (lambda q, k, v, m: gqa(q, k, v, m, use_mask=False), "ignores the mask"),
    (lambda q, k, v, m: gqa(q, k, v, m, scale=1.0), "not scaled"),
    (lambda q, k, v, m: gqa(q, k, v, m, scale=1 / math.sqrt(q.size(1) * q.size(-1))), "sqrt\\(d_model\\)"),
])
def test_gqa_mistakes_are_named(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_grouped_query_attention(fn)


def test_gqa_shape_mistake_is_reported():
    with pytest.raises(Mistake, match="shape"):
        check_grouped_query_attention(lambda q, k, v, m: gqa(q, k, v, m)[:, : k.size(1)])


# exercise 1: RMSNorm safe in half precision ----------------------------------------------------------------------------
from tfm_lesson.checks import check_llama_hidden, check_rms_norm_half  # noqa: E402


def half_safe(x, weight, eps):
    x32 = x.float()
    return weight * (x32 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def test_rms_norm_half_reference_passes(capsys):
    check_rms_norm_half(half_safe)
    check_rms_norm_half(lambda x, w, eps: (w.float() * x.float() * torch.rsqrt(
        x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype))  # the gain in float32 too: also right
    assert "✔ check_rms_norm_half passed" in capsys.readouterr().out


def test_rms_norm_half_stub_is_not_written_yet():
    def stub(x, weight, eps):
        ...
    with pytest.raises(Mistake, match="not written yet"):
        check_rms_norm_half(stub)


@pytest.mark.parametrize("fn,hint", [
    (lambda x, w, e: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + e) * w, "OVERFLOWED in float16"),
    (lambda x, w, e: x / torch.sqrt(x.pow(2).float().mean(-1, keepdim=True) + e).to(x.dtype) * w,
     "OVERFLOWED in float16"),
    (lambda x, w, e: x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + e) * w, "cast back"),
    (lambda x, w, e: w * (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + e)).half(),
     "not to a fixed"),
    (lambda x, w, e: w * (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype),
     "not the eps=0.01 passed"),
    (lambda x, w, e: w * ((x.float() - x.float().mean(-1, keepdim=True)) / torch.sqrt(
        x.float().var(-1, keepdim=True, unbiased=False) + e)).to(x.dtype), "MEAN IS SUBTRACTED"),
    (lambda x, w, e: w * (x.float() / (x.float().pow(2).mean(-1, keepdim=True).sqrt() + e)).to(x.dtype),
     "eps OUTSIDE"),
    (lambda x, w, e: (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + e)).to(x.dtype),
     "ignores the gain"),
    (lambda x, w, e: w * (x.float() / torch.sqrt(x.float().pow(2).mean(-1) + e)).to(x.dtype),
     "keepdim=True"),  # a raw broadcasting error without the hint
])
def test_rms_norm_half_mistakes_are_named(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_rms_norm_half(fn)


def test_rms_norm_half_refuses_a_ready_made_norm():
    def uses_library(x, weight, eps):
        return F.rms_norm(x.float(), (x.size(-1),), weight.float(), eps).to(x.dtype)
    with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
        check_rms_norm_half(uses_library)


# exercise 3: SwiGLU's hidden size, as Llama sizes it -------------------------------------------------------------------
def llama_hidden(d_model, multiple_of, ffn_dim_multiplier=None):
    hidden = int(2 * 4 * d_model / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


def test_llama_hidden_reference_passes(capsys):
    check_llama_hidden(llama_hidden)
    out = capsys.readouterr().out
    assert "✔ check_llama_hidden passed" in out and "Llama 2 7B 1.008" in out and "Llama 2 70B 1.312" in out
    assert "Llama 1 65B" in out and "Llama 3 70B 1.312" in out  # all six models, as exercise 3 promises


def test_llama_hidden_stub_is_not_written_yet():
    def stub(d_model, multiple_of, ffn_dim_multiplier=None):
        ...
    with pytest.raises(Mistake, match="not written yet"):
        check_llama_hidden(stub)


def _up(n, m):
    return m * math.ceil(n / m)


def _scale(h, mult):
    return int(mult * h) if mult is not None else h


@pytest.mark.parametrize("fn,hint", [
    (lambda d, m, mult=None: _up(_scale(4 * d, mult), m), "keep the FFN's 4 \\* d_model"),
    (lambda d, m, mult=None: _up(_scale(int(2 * d / 3), mult), m), "2/3 of d_model"),
    (lambda d, m, mult=None: _up(_scale(int(3 * 4 * d / 2), mult), m), "3/2 instead of 2/3"),
    (lambda d, m, mult=None: m * (_scale(int(8 * d / 3), mult) // m), "round DOWN"),
    (lambda d, m, mult=None: m * round(_scale(int(8 * d / 3), mult) / m), "NEAREST multiple"),
    (lambda d, m, mult=None: _scale(int(8 * d / 3), mult), "skip the rounding"),
    (lambda d, m, mult=None: _up(int(8 * d / 3), m), "ignore ffn_dim_multiplier"),
    (lambda d, m, mult=None: int((mult or 1.0) * _up(int(8 * d / 3), m)), "AFTER rounding up"),
    (lambda d, m, mult=None: float(llama_hidden(d, m, mult)), "return an int"),
])
def test_llama_hidden_mistakes_are_named(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_llama_hidden(fn)


def test_llama_hidden_unknown_mistake_gives_the_published_size():
    with pytest.raises(Mistake, match="published intermediate_size is 22,016"):
        check_llama_hidden(lambda d, m, mult=None: llama_hidden(d, m, mult) + 1)


def test_llama_hidden_refuses_the_package_answer():
    from tfm_lesson.modern import swiglu_hidden

    def uses_package(d_model, multiple_of, ffn_dim_multiplier=None):
        return swiglu_hidden(4 * d_model, multiple_of)
    with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
        check_llama_hidden(uses_package)
