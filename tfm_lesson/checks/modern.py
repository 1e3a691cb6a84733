"""Checkers for chapter 16: RMSNorm, rotary embeddings, SwiGLU and grouped-query attention.

Each builds the classic wrong versions next to the reference and, when the learner's output matches one of
them, names it. Inputs are chosen so the mistakes are told apart: activations with a non-zero mean (so
subtracting it shows) and a tiny scale (so eps's place shows); a non-zero position offset (so forgetting it
shows); gate and value weights that differ (so swapping them shows); more than one key/value head (so their
order shows).

The chapter's two exercises on RMSNorm in half precision and Llama's hidden size live in :mod:`.modern_exercises`.
"""
from __future__ import annotations

import math
import random
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..modern.gqa import repeat_kv
from ..modern.rmsnorm import rms_norm
from ..modern.rotary import apply_rotary, rotary_cos_sin
from ._harness import Mistake, call, diagnose, expect, output_of, passed
from ._rules import forbid_keyword, forbid_loops, forbid_names

__all__ = ["check_rms_norm", "check_rotary", "check_swiglu", "check_grouped_query_attention"]

EPS = 1e-5


def _name(obj: object) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


# RMSNorm --------------------------------------------------------------------------------------------------------------
def _rms_suspects(x: Tensor, weight: Tensor, eps: float) -> dict[str, Tensor]:
    ms = x.pow(2).mean(-1, keepdim=True)
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    suspects = {
        "your output matches a layer norm: the MEAN IS SUBTRACTED. RMSNorm only rescales, x / sqrt(mean(x**2) + eps) "
        "* weight; it never centres x (that is the point: one reduction fewer, and the mean is kept).":
            centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight,
        "your output subtracts the mean and divides by the root mean square of x: RMSNorm does not subtract the "
        "mean at all; x_hat = x / sqrt(mean(x**2) + eps).":
            centred / torch.sqrt(ms + eps) * weight,
        "your output matches eps OUTSIDE the square root, x / (sqrt(mean(x**2)) + eps): eps belongs inside, "
        "x / sqrt(mean(x**2) + eps), as in torch.nn.RMSNorm (it shows when the activations are small).":
            x / (ms.sqrt() + eps) * weight,
        "your output matches an RMSNorm WITHOUT eps: x / sqrt(mean(x**2)) divides by zero on an all-zero row. "
        "Add eps inside the root: x / sqrt(mean(x**2) + eps).":
            x / ms.sqrt() * weight,
        "your output divides by the mean square, not its square root: x / sqrt(mean(x**2) + eps).":
            x / (ms + eps) * weight,
        "your output uses the SUM of squares instead of their mean: x / sqrt(mean(x**2) + eps), with .mean(-1).":
            x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight,
        "your output divides by the standard deviation (torch.std): RMSNorm divides by the root mean square, "
        "sqrt(mean(x**2) + eps), which keeps the mean in.":
            x / (x.std(-1, keepdim=True) + eps) * weight,
        "your output divides by sqrt(x.var() + eps): the variance subtracts the mean inside (it is the standard "
        "deviation again). RMSNorm divides by sqrt(mean(x**2) + eps), the root mean square, which keeps the mean in.":
            x / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight,
        "your output divides by sqrt(x.var(unbiased=False) + eps): the variance subtracts the mean inside (it is the "
        "standard deviation). RMSNorm divides by sqrt(mean(x**2) + eps), the root mean square, which keeps the "
        "mean in.":
            x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * weight,
        "your output divides by the standard deviation (x.std(unbiased=False)): RMSNorm divides by the root mean "
        "square, sqrt(mean(x**2) + eps), which keeps the mean in.":
            x / (x.std(-1, keepdim=True, unbiased=False) + eps) * weight,
        "your output ignores the gain: multiply the normalised x by self.weight.":
            x / torch.sqrt(ms + eps),
        "your output adds eps after normalising, x / sqrt(mean(x**2)) + eps: eps goes inside the square root.":
            (x / ms.sqrt() + eps) * weight,
        "your output normalises over the SEQUENCE axis (dim 1): RMSNorm, like layer norm, works on each position's "
        "features, the last axis: dim=-1.":
            x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps) * weight,
    }
    for fixed in (1e-5, 1e-6, 1e-8, 1e-12):  # an eps written into forward instead of the constructor's
        if not math.isclose(fixed, eps):
            suspects[f"your output uses eps = {fixed:g}, not the eps={eps:g} your RMSNorm was built with: a fixed "
                     "number in forward. Store the argument in __init__ (self.eps = eps) and use self.eps."] = \
                x / torch.sqrt(ms + fixed) * weight
    if x.dim() >= 2 and x.size(-2) == x.size(-1):  # mean without keepdim broadcasts silently when seq_len == d_model
        suspects[_NO_KEEPDIM] = x / torch.sqrt(x.pow(2).mean(-1)[..., None, :] + eps) * weight
    return suspects


_NO_KEEPDIM = ("your mean of squares lost its last axis (no keepdim=True), so the division broadcast it along the "
               "wrong axis: x.pow(2).mean(-1, keepdim=True) keeps shape (..., 1), one value per position.")


def _explain_rms_error(exc: Exception) -> str | None:
    """A broadcasting error in the learner's RMSNorm is almost always a reduction without keepdim=True."""
    if isinstance(exc, RuntimeError) and "must match the size of tensor" in str(exc):
        return ("Most likely your mean of squares lost its last axis: x.pow(2).mean(-1) has shape (batch, seq_len) "
                "and cannot divide x (batch, seq_len, d_model). Use x.pow(2).mean(-1, keepdim=True), shape "
                "(batch, seq_len, 1).")
    return None


def check_rms_norm(cls: type, trials: int = 4, seed: int = 0) -> None:
    """``cls(d_model, eps=1e-5)``: an ``nn.Module`` with a gain ``weight`` of shape ``(d_model,)`` (ones at
    first) and no bias, mapping ``(..., d_model)`` to ``weight * x / sqrt(mean(x**2) + eps)``."""
    gen = random.Random(seed)
    torch.manual_seed(seed)
    name = _name(cls)
    module = call(cls, 6, eps=EPS, what=f"{name}(6, eps=1e-5)")
    expect(isinstance(module, nn.Module), "your RMSNorm must be an nn.Module (subclass nn.Module and call "
                                          "super().__init__()), so its gain is registered as a parameter.")
    weight = getattr(module, "weight", None)
    expect(isinstance(weight, nn.Parameter) and tuple(weight.shape) == (6,),
           "your RMSNorm needs `self.weight = nn.Parameter(torch.ones(d_model))`, the learned gain, shaped (d_model,).")
    expect(torch.allclose(weight.detach().float(), torch.ones(6)), "initialise the gain `weight` to ones.")
    extra = [n for n, _ in module.named_parameters() if n != "weight"]
    expect(not extra, f"your RMSNorm has parameters {extra} besides `weight`: RMSNorm has a gain but no shift "
                      "(no bias), unlike layer norm.")
    cases = [("activations with a tiny scale (1e-3) and a non-zero mean, where eps and the mean both matter",
              lambda b, n, d: torch.randn(b, n, d) * 1e-3 + 2e-3, torch.float64),
             ("typical activations with a non-zero mean", lambda b, n, d: torch.randn(b, n, d) * 2 + 1, torch.float32)]
    cases += [("random activations", lambda b, n, d: torch.randn(b, n, d) * gen.uniform(0.5, 3) + gen.uniform(-1, 1),
               torch.float32) for _ in range(trials)]
    for what, make, dtype in cases:
        d_model, batch, seq_len = gen.choice([4, 6, 8, 12]), gen.randint(2, 3), gen.randint(3, 6)
        module = call(cls, d_model, eps=EPS, what=f"{name}({d_model}, eps=1e-5)").to(dtype)
        with torch.no_grad():
            module.weight.copy_(torch.rand(d_model, dtype=dtype) + 0.5)
        x = make(batch, seq_len, d_model).to(dtype)  # (batch, seq_len, d_model)
        got = output_of(call(module, x, what="your RMSNorm's forward", explain=_explain_rms_error))
        expect(got.shape == x.shape, f"your RMSNorm changed the shape {tuple(x.shape)} -> {tuple(got.shape)}.")
        w = module.weight.detach()
        diagnose(got.detach(), rms_norm(x, w, EPS), _rms_suspects(x, w, EPS),
                 f"on {what} (shape {tuple(x.shape)}, {dtype}) your output differs from weight * x / sqrt(mean(x**2) "
                 "+ eps) over the last axis", atol=1e-5 if dtype == torch.float32 else 1e-9)
    # the eps given to the constructor must be the one used: a larger one, on activations small enough to show it
    big_eps = 1e-2
    module = call(cls, 6, eps=big_eps, what=f"{name}(6, eps={big_eps:g})").double()
    x = torch.randn(2, 4, 6, dtype=torch.float64) * 1e-2 + 1e-2  # (batch, seq_len, d_model)
    got = output_of(call(module, x, what="your RMSNorm's forward", explain=_explain_rms_error))
    w = module.weight.detach()
    diagnose(got.detach(), rms_norm(x, w, big_eps), _rms_suspects(x, w, big_eps),
             f"built with eps={big_eps:g}, on activations of about 1e-2, your output differs from weight * x / "
             f"sqrt(mean(x**2) + eps) with that eps", atol=1e-9)
    x = torch.randn(2, 3, 4, 8)
    got = output_of(call(call(cls, 8, eps=EPS, what=f"{name}(8, eps=1e-5)"), x, what="your RMSNorm on a 4-D input",
                         explain=_explain_rms_error))
    diagnose(got.detach(), rms_norm(x, torch.ones(8), EPS), {}, "on a 4-D input your RMSNorm differs from "
             "x / sqrt(mean(x**2) + eps): normalise over dim=-1 so that any leading shape works")
    passed("check_rms_norm", f"matches RMSNorm (as torch.nn.RMSNorm computes it) on {len(cases) + 2} inputs "
                             "(tiny scales, non-zero means, float32 and float64, 3-D and 4-D, another eps): no mean "
                             "subtracted, eps inside the root")


# rotary embeddings -----------------------------------------------------------------------------------------------------
def _rope(x: Tensor, offset: int, base: float, interleaved: bool) -> Tensor:
    cos, sin = rotary_cos_sin(torch.arange(offset, offset + x.size(-2)), x.size(-1), base, interleaved)
    return apply_rotary(x, cos, sin, interleaved)


def _rope_suspects(x: Tensor, offset: int, base: float, interleaved: bool) -> dict[str, Tensor]:
    d_k = x.size(-1)
    right = "interleaved pairs (x[2i], x[2i+1])" if interleaved else "halves (x[i], x[i + d_k/2])"
    other = ("HALVES convention: pairs (x[i], x[i + d_k/2]), rotate_half, as in transformers' Llama"
             if interleaved else
             "INTERLEAVED convention: pairs (x[2i], x[2i+1]), as in the RoFormer paper and Meta's original Llama")
    suspects = {
        f"your output uses the {other}. This exercise pairs the features as {right}. Both rotate pairs by the "
        "same angles, but a model trained with one convention gives different numbers under the other.":
            _rope(x, offset, base, not interleaved),
        f"your output ignores the offset: the positions start at 0 instead of offset={offset}. With a KV cache the "
        f"new tokens sit at positions len(cache), len(cache) + 1, ...; rotate them with positions offset + t.":
            _rope(x, 0, base, interleaved),
        f"your output ignores the offset AND uses the {other}; the positions must start at offset={offset}.":
            _rope(x, 0, base, not interleaved),
        "your output mixes the two conventions: it rotates HALVES (rotate_half, pairs x[i] and x[i + d_k/2]) but lays "
        "the angles out INTERLEAVED (each angle twice in a row, repeat_interleave), so a pair's two features turn "
        "by different angles. With rotate_half, angle i sits at features i and i + d_k/2: "
        "torch.cat([angles, angles], dim=-1).":
            _rope_mixed(x, offset, base, pairs_interleaved=False),
        "your output mixes the two conventions: it rotates INTERLEAVED pairs (x[2i], x[2i+1]) but lays the angles "
        "out as HALVES (torch.cat([angles, angles])), so a pair's two features turn by different angles. With "
        "interleaved pairs, angle i sits at features 2i and 2i+1: angles.repeat_interleave(2, dim=-1).":
            _rope_mixed(x, offset, base, pairs_interleaved=True),
        "your output rotates the wrong way round: x * cos - rotate(x) * sin. A pair (a, b) turns to "
        "(a cos - b sin, b cos + a sin): x * cos + rotate(x) * sin with rotate_half(x) = (-x2, x1).":
            _rope_reverse(x, offset, base, interleaved),
    }
    if d_k > 2:
        suspects[f"your frequencies use base ** (-i / d_k) (or base ** (-i / (d_k/2))?): theta_i = base ** (-2i / d_k) "
                 f"for i = 0 .. d_k/2 - 1, i.e. base ** (-torch.arange(0, d_k, 2) / d_k)."] = \
            _rope_theta(x, offset, interleaved, 1.0 / (base ** (torch.arange(d_k // 2, dtype=torch.float) / d_k)))
        suspects["your frequencies use base ** (+2i / d_k): they must DEcrease, theta_i = base ** (-2i / d_k), "
                 "fast rotations for the first pairs and slow ones for the last."] = \
            _rope_theta(x, offset, interleaved, base ** (torch.arange(0, d_k, 2, dtype=torch.float) / d_k))
    if base != 10000.0:
        suspects[f"your output uses base 10,000 instead of base={base:g}: read rope_theta from the argument."] = \
            _rope(x, offset, 10000.0, interleaved)
    return suspects


def _rope_mixed(x: Tensor, offset: int, base: float, pairs_interleaved: bool) -> Tensor:
    """Pairs rotated in one convention with the cos/sin tables laid out for the other."""
    cos, sin = rotary_cos_sin(torch.arange(offset, offset + x.size(-2)), x.size(-1), base, not pairs_interleaved)
    return apply_rotary(x, cos, sin, pairs_interleaved)


def _rope_reverse(x: Tensor, offset: int, base: float, interleaved: bool) -> Tensor:
    cos, sin = rotary_cos_sin(torch.arange(offset, offset + x.size(-2)), x.size(-1), base, interleaved)
    return apply_rotary(x, cos, -sin, interleaved)


def _rope_theta(x: Tensor, offset: int, interleaved: bool, theta: Tensor) -> Tensor:
    angles = torch.arange(offset, offset + x.size(-2)).float()[:, None] * theta
    angles = angles.repeat_interleave(2, -1) if interleaved else torch.cat((angles, angles), -1)
    return apply_rotary(x, angles.cos(), angles.sin(), interleaved)


def check_rotary(fn: Callable, interleaved: bool = False, trials: int = 3, seed: int = 0) -> None:
    """``fn(x, offset, base)`` rotates ``x (batch, heads, seq_len, d_k)`` by positions ``offset, offset + 1, ...``
    with ``theta_i = base ** (-2i / d_k)``; pairs as halves (``interleaved=False``, transformers' ``rotate_half``)
    or interleaved."""
    gen = random.Random(seed)
    torch.manual_seed(seed)
    cases = [(5, 10000.0), (0, 10000.0), (13, 500000.0)] + \
            [(gen.randint(1, 40), gen.choice([10000.0, 1e6, 100.0])) for _ in range(trials)]
    for offset, base in cases:
        d_k, heads, seq_len = gen.choice([4, 8, 16]), gen.randint(1, 3), gen.randint(2, 6)
        x = torch.randn(2, heads, seq_len, d_k)  # (batch, heads, seq_len, d_k)
        got = output_of(call(fn, x.clone(), offset, base, what=f"your rotary function (offset={offset}, base={base:g})"))
        expect(got.shape == x.shape, f"your rotary function changed the shape {tuple(x.shape)} -> {tuple(got.shape)}: "
                                     "a rotation keeps the shape.")
        diagnose(got.detach().float(), _rope(x, offset, base, interleaved), _rope_suspects(x, offset, base, interleaved),
                 f"with offset={offset}, base={base:g}, shape {tuple(x.shape)} your output differs from the rotary "
                 f"embedding ({'interleaved' if interleaved else 'halves'} convention)", atol=1e-4)
    passed("check_rotary", f"matches the {'interleaved' if interleaved else 'halves (rotate_half)'} convention on "
                           f"{len(cases)} inputs: offsets 0 to 40, bases 100 to 1e6")


# SwiGLU -------------------------------------------------------------------------------------------------------------------
def _swiglu_suspects(x: Tensor, gate: Tensor, up: Tensor, down: nn.Linear) -> dict[str, Tensor]:
    return {
        "your output matches silu(w_up(x)) * w_gate(x): the GATE AND THE VALUE ARE SWAPPED. SiLU goes on the gate: "
        "w_down(silu(w_gate(x)) * w_up(x)) (transformers: down_proj(act(gate_proj(x)) * up_proj(x))).":
            down(F.silu(up) * gate),
        "your output has no SiLU: w_down(w_gate(x) * w_up(x)) is a bilinear layer; the gate goes through SiLU.":
            down(gate * up),
        "your output uses sigmoid(w_gate(x)) (that is GLU): SwiGLU uses SiLU, silu(z) = z * sigmoid(z).":
            down(torch.sigmoid(gate) * up),
        "your output uses ReLU on the gate (that is ReGLU): SwiGLU uses SiLU, F.silu.":
            down(F.relu(gate) * up),
        "your output uses GELU on the gate (that is GEGLU): SwiGLU uses SiLU, F.silu.":
            down(F.gelu(gate) * up),
        "your output ADDS the gate and the value: SwiGLU multiplies them, element by element.":
            down(F.silu(gate) + up),
        "your output applies SiLU after the product, silu(w_gate(x) * w_up(x)): only the gate goes through SiLU.":
            down(F.silu(gate * up)),
        "your output skips w_down: project back to d_model with w_down.":
            F.silu(gate) * up,
    }


def check_swiglu(cls: type, trials: int = 3, seed: int = 0) -> None:
    """``cls(d_model, hidden)``: an ``nn.Module`` with ``nn.Linear`` layers ``w_gate``, ``w_up`` (``d_model ->
    hidden``) and ``w_down`` (``hidden -> d_model``), no biases, computing ``w_down(silu(w_gate(x)) * w_up(x))``."""
    gen = random.Random(seed)
    torch.manual_seed(seed)
    name = _name(cls)
    for trial in range(trials):
        d_model, hidden = gen.choice([4, 8, 12]), gen.choice([6, 10, 16])
        module = call(cls, d_model, hidden, what=f"{name}({d_model}, {hidden})")
        expect(isinstance(module, nn.Module), "your SwiGLU must be an nn.Module.")
        for attr, shape in (("w_gate", (hidden, d_model)), ("w_up", (hidden, d_model)), ("w_down", (d_model, hidden))):
            lin = getattr(module, attr, None)
            expect(isinstance(lin, nn.Linear), f"your SwiGLU needs `self.{attr} = nn.Linear(...)` (names: w_gate, "
                                               "w_up, w_down).")
            expect(tuple(lin.weight.shape) == shape,
                   f"`{attr}` has weight shape {tuple(lin.weight.shape)}, expected {shape}: w_gate and w_up map "
                   "d_model -> hidden, w_down maps hidden -> d_model.")
            expect(lin.bias is None, f"`{attr}` has a bias: today's block has none (bias=False).")
        with torch.no_grad():  # different, far-from-zero weights so that every mistake shows
            for p in module.parameters():
                p.normal_(0, 1.0 / math.sqrt(p.shape[-1]))
        x = torch.randn(2, gen.randint(2, 5), d_model) * 2  # (batch, seq_len, d_model)
        got = output_of(call(module, x, what="your SwiGLU's forward"))
        with torch.no_grad():
            gate, up = module.w_gate(x), module.w_up(x)
            expected = module.w_down(F.silu(gate) * up)
            suspects = _swiglu_suspects(x, gate, up, module.w_down)
        diagnose(got.detach(), expected, suspects, f"on shape {tuple(x.shape)} your output differs from "
                                                   "w_down(silu(w_gate(x)) * w_up(x))")
    passed("check_swiglu", f"w_down(silu(w_gate(x)) * w_up(x)) on {trials} random sizes; gate and value in place")


# grouped-query attention ---------------------------------------------------------------------------------------------
def _gqa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, repeat: Callable, scale: float | None = None,
         dim: int = -1) -> Tensor:
    groups = q.size(1) // k.size(1)
    k, v = repeat(k, groups), repeat(v, groups)
    scores = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim) @ v


def _tile(x: Tensor, groups: int) -> Tensor:
    return x.repeat(1, groups, 1, 1)


def _same_with_nan(got: Tensor, buggy: Tensor, atol: float = 1e-5) -> bool:
    """Whether ``got`` and ``buggy`` have NaN in the same places and agree everywhere else."""
    nan = torch.isnan(got)
    return bool(torch.equal(nan, torch.isnan(buggy))
                and torch.allclose(got[~nan].float(), buggy[~nan].float(), atol=atol))


def _diagnose_nan(got: Tensor, suspects: dict[str, Tensor]) -> None:
    """For an output with NaN: name the suspect that has the same NaN and the same finite values, if one does."""
    from ._harness import Mistake

    got = got.detach().cpu()
    if torch.isnan(got).any():
        for hint, buggy in suspects.items():
            if buggy.shape == got.shape and _same_with_nan(got, buggy.detach().cpu()):
                raise Mistake("your output contains NaN: " + hint)


def _gqa_suspects(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> dict[str, Tensor]:
    heads, kv_heads, d_k = q.size(1), k.size(1), q.size(-1)
    return {
        f"your output repeats the key/value heads in the WRONG ORDER: k.repeat(1, group_size, 1, 1) tiles them (k0 k1 "
        f"k0 k1 ...), so query head 1 meets key head 1. With group_size = heads // kv_heads = {heads // kv_heads} "
        f"query heads per key/value head, query head h must meet key/value head h // group_size: use "
        f"k.repeat_interleave(group_size, dim=1) (k0 k0 k1 k1 ...), as transformers' repeat_kv and "
        f"F.scaled_dot_product_attention(..., enable_gqa=True) do. (heads={heads}, kv_heads={kv_heads})":
            _gqa(q, k, v, mask, _tile),
        "your output matches the wrong head order AND no causal mask: repeat_interleave the key/value heads, and "
        "apply the mask (True = may attend).":
            _gqa(q, k, v, None, _tile),
        "your output ignores the mask: fill the scores where the mask is False with -inf before the softmax.":
            _gqa(q, k, v, None, repeat_kv),
        "your output inverts the mask: True means MAY attend (as in F.scaled_dot_product_attention); block where it "
        "is False: scores.masked_fill(~mask, -inf). (The last query then sees no key at all, hence the NaN.)":
            _gqa(q, k, v, ~mask, repeat_kv),
        "your output inverts the mask (True means MAY attend: block with scores.masked_fill(~mask, -inf)) AND repeats "
        "the key/value heads in the wrong order (use repeat_interleave, k0 k0 k1 k1 ..., not repeat).":
            _gqa(q, k, v, ~mask, _tile),
        "your output is not scaled: divide the scores by sqrt(d_k) before the softmax.":
            _gqa(q, k, v, mask, repeat_kv, scale=1.0),
        f"your output scales the scores by 1/sqrt(d_model) = 1/sqrt(heads * d_k) = 1/sqrt({heads * d_k}); the scale "
        f"is 1/sqrt(d_k) = 1/sqrt({d_k}).":
            _gqa(q, k, v, mask, repeat_kv, scale=1 / math.sqrt(heads * d_k)),
        "your output takes the softmax over the queries (dim=-2): each query's weights over the keys must sum to 1, "
        "softmax(dim=-1).":
            _gqa(q, k, v, mask, repeat_kv, dim=-2),
    }


def _gqa_written_yourself(fn: Callable) -> None:
    """Exercise 4's rule: no loop over heads, no enable_gqa, no ready-made attention."""
    how = ("repeat each key/value head (repeat_interleave on the heads axis), then one batched "
           "scores-mask-softmax-sum over all heads at once")
    forbid_loops(fn, "my_gqa", "The exercise asks for no loop: " + how)
    forbid_keyword(fn, "enable_gqa", "my_gqa", "The exercise asks for the attention without it: " + how)
    forbid_names(fn, ("scaled_dot_product_attention", "GroupedQueryAttention", "repeat_kv"), "my_gqa",
                 "That is a ready-made part of the answer; the exercise asks you to write it: " + how)


def check_grouped_query_attention(fn: Callable, trials: int = 3, seed: int = 0) -> None:
    """``fn(q, k, v, mask)``: q ``(batch, heads, q_len, d_k)``, k and v ``(batch, kv_heads, k_len, d_k)``, mask
    boolean ``(q_len, k_len)`` (True = may attend) -> ``(batch, heads, q_len, d_k)``, equal to
    ``F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)``."""
    _gqa_written_yourself(fn)
    gen = random.Random(seed)
    torch.manual_seed(seed)
    shapes = [(4, 2), (6, 3), (8, 2), (4, 1)] + [(gen.choice([4, 8]), 2) for _ in range(trials)]
    for heads, kv_heads in shapes:
        batch, length, d_k = gen.randint(1, 2), gen.randint(3, 6), gen.choice([4, 8])
        q = torch.randn(batch, heads, length, d_k) * 2
        k, v = torch.randn(batch, kv_heads, length, d_k) * 2, torch.randn(batch, kv_heads, length, d_k)
        mask = torch.ones(length, length, dtype=torch.bool).tril()  # causal
        got = output_of(call(fn, q, k, v, mask, what=f"your grouped-query attention (heads={heads}, kv_heads={kv_heads})"))
        expected = _gqa(q, k, v, mask, repeat_kv)
        suspects = _gqa_suspects(q, k, v, mask) if kv_heads > 1 else \
            {h: s for h, s in _gqa_suspects(q, k, v, mask).items() if "ORDER" not in h and "order" not in h}
        _diagnose_nan(got, suspects)
        diagnose(got.detach(), expected, suspects,
                 f"with heads={heads}, kv_heads={kv_heads}, q {tuple(q.shape)}, k {tuple(k.shape)}: your output differs "
                 "from F.scaled_dot_product_attention(..., enable_gqa=True)")
    passed("check_grouped_query_attention", f"equal to F.scaled_dot_product_attention(..., enable_gqa=True) for "
                                            f"{len(shapes)} (heads, kv_heads) pairs, multi-query (kv_heads=1) included")
