"""Checkers for chapter 05: layer norm, and the two ways to wrap a sub-layer with a residual and a norm
(as functions, ``check_post_norm`` / ``check_pre_norm``; as a module with dropout, ``check_sublayer_connection``;
and a stack of such blocks with its final norm, ``check_sublayer_stack``).

Each builds the classic wrong versions next to the reference and, when the learner's output matches one of
them, names it. Inputs are chosen so the mistakes are told apart: a small ``d_model`` makes the unbiased
variance visible (it is off by a factor d_model / (d_model - 1)); a tiny variance makes eps's place visible.
"""
from __future__ import annotations

import random
from typing import Callable

import torch
from torch import Tensor, nn

from ..norm import LayerNorm, layer_norm
from ._harness import Mistake, call, close, diagnose, expect, output_of, passed
from ._rules import forbid_names, forbid_ready_made

__all__ = ["check_layer_norm", "check_post_norm", "check_pre_norm", "check_sublayer_connection",
           "check_sublayer_stack"]

EPS = 1e-5


# the classic wrong layer norms, as functions of (x, weight, bias, eps) -------------------------------------------
def _normalise(x: Tensor, dim: int | tuple[int, ...], unbiased: bool = False, eps_inside: bool = True,
               eps: float = EPS) -> Tensor:
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    std = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
    return (x - mean) / std


def _suspects(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> dict[str, Tensor]:
    """hint -> what the buggy layer norm would return for ``x (batch, seq_len, d_model)``."""
    d = x.size(-1)
    affine = lambda t: t * weight + bias  # noqa: E731
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return {
        f"your output matches the UNBIASED variance (dividing by d_model - 1 = {d - 1} instead of d_model = {d}): "
        "layer norm uses the biased (population) variance, as nn.LayerNorm does. Use "
        "x.var(dim=-1, unbiased=False, keepdim=True), or ((x - mean) ** 2).mean(-1, keepdim=True).":
            affine(_normalise(x, -1, unbiased=True, eps=eps)),
        "your output matches eps OUTSIDE the square root, (x - mean) / (sqrt(var) + eps): eps belongs inside, "
        "(x - mean) / sqrt(var + eps). It only shows when the variance is small, but then it matters.":
            affine(_normalise(x, -1, eps_inside=False, eps=eps)),
        "your output matches the unbiased variance AND eps outside the square root, (x - mean) / (x.std(-1) + eps) "
        "(torch.std is unbiased by default): use the biased variance and put eps inside, "
        "(x - mean) / sqrt(var + eps).":
            affine(_normalise(x, -1, unbiased=True, eps_inside=False, eps=eps)),
        "your output matches (x - mean) / std + eps: eps was added to the normalised output, not to the variance "
        "under the square root. Write (x - mean) / sqrt(var + eps).":
            affine((x - mean) / var.sqrt() + eps),
        "your output matches (x - mean) / (x.std(-1) + ...) with eps added after the division and the unbiased "
        "std: use the biased variance and (x - mean) / sqrt(var + eps).":
            affine((x - mean) / x.std(-1, keepdim=True) + eps),
        "your output matches a layer norm WITHOUT eps: (x - mean) / sqrt(var) blows up when the variance is tiny "
        "(and divides by zero for a constant row). Add eps inside the square root: sqrt(var + eps).":
            affine((x - mean) / var.sqrt()),
        "your output matches normalising over the BATCH axis (dim 0): that is batch norm. Layer norm takes the "
        "mean and variance over the features of each position, the last axis: dim=-1.":
            affine(_normalise(x, 0, eps=eps)),
        "your output matches normalising over the SEQUENCE axis (dim 1): layer norm takes the mean and variance "
        "over the features of each position, the last axis: dim=-1.":
            affine(_normalise(x, 1, eps=eps)),
        "your output matches normalising over the whole (seq_len, d_model) slab of each sequence: layer norm "
        "normalises each position on its own, over the last axis only: dim=-1.":
            affine(_normalise(x, (-2, -1), eps=eps)),
        "your output is normalised but ignores the gain and shift: multiply by self.weight (gamma) and add "
        "self.bias (beta) after normalising, y = weight * x_hat + bias.":
            _normalise(x, -1, eps=eps),
        "your output ignores the shift: add self.bias (beta) after multiplying by self.weight (gamma).":
            _normalise(x, -1, eps=eps) * weight,
        "your output ignores the gain: multiply by self.weight (gamma) before adding self.bias (beta).":
            _normalise(x, -1, eps=eps) + bias,
        "your output matches (x_hat + weight) * bias: gain and shift are swapped; y = weight * x_hat + bias.":
            (_normalise(x, -1, eps=eps) + weight) * bias,
        "your output matches x_hat * bias + weight: gain and shift are swapped; y = weight * x_hat + bias.":
            _normalise(x, -1, eps=eps) * bias + weight,
        "your output does not subtract the mean: x_hat = (x - mean) / sqrt(var + eps).":
            affine(x / torch.sqrt(var + eps)),
        "your output divides by the variance, not by its square root: x_hat = (x - mean) / sqrt(var + eps).":
            affine((x - mean) / (var + eps)),
    }


def _parameter(module: nn.Module, name: str, d_model: int) -> nn.Parameter:
    p = getattr(module, name, None)
    role = "gain (gamma), initialised to ones" if name == "weight" else "shift (beta), initialised to zeros"
    expect(p is not None, f"your layer norm has no `{name}`: add self.{name} = nn.Parameter(torch."
                          f"{'ones' if name == 'weight' else 'zeros'}(d_model)), the learned {role} "
                          "(missing gain/shift).")
    expect(isinstance(p, nn.Parameter),
           f"`{name}` is a {type(p).__name__}, not an nn.Parameter: the optimiser would never update it. "
           f"Wrap it: self.{name} = nn.Parameter(...).")
    expect(tuple(p.shape) == (d_model,), f"`{name}` has shape {tuple(p.shape)}, expected (d_model,) = ({d_model},): "
                                         "one gain and one shift per feature.")
    return p


def _run(module: nn.Module, x: Tensor) -> Tensor:
    out = output_of(call(module, x, what="your layer norm's forward"))
    expect(out.shape == x.shape, f"your layer norm changed the shape {tuple(x.shape)} -> {tuple(out.shape)}; "
                                 "it must keep it: (..., d_model) -> (..., d_model).")
    expect(out.dtype == x.dtype, f"your layer norm turned a {x.dtype} input into {out.dtype}; keep the input's dtype.")
    return out


_WRITE_LAYER_NORM = ("The exercise asks for the formula written out: mean and biased variance over the last axis, "
                     "(x - mean) / sqrt(var + eps), then the gain and the shift; do not call F.layer_norm or "
                     "nn.LayerNorm.")


def _layer_norm_written_yourself(cls: type) -> None:
    """Chapter 05's rule: no ``F.layer_norm``, ``nn.LayerNorm`` or the package's ``LayerNorm`` (used, or derived)."""
    forbid_ready_made(cls, (nn.LayerNorm, LayerNorm), "layer norm", _WRITE_LAYER_NORM)  # partial(...) too
    forbid_names(cls, ("layer_norm", "LayerNorm"), "layer norm", _WRITE_LAYER_NORM)


def check_layer_norm(cls: type, trials: int = 4, seed: int = 0) -> None:
    """``cls(d_model, eps=1e-5)`` is an ``nn.Module`` with ``weight`` and ``bias`` parameters of shape
    ``(d_model,)`` that maps ``(..., d_model)`` to the same shape, normalising over the last axis; written out, not
    ``F.layer_norm``, ``nn.LayerNorm`` or ``tfm_lesson.LayerNorm``."""
    _layer_norm_written_yourself(cls)
    gen = random.Random(seed)
    torch.manual_seed(seed)
    name = getattr(cls, "__name__", type(cls).__name__)
    # 1. construction and initial values
    d_model = 6
    module = call(cls, d_model, eps=EPS, what=f"{name}(d_model={d_model}, eps=1e-5)")
    expect(isinstance(module, nn.Module), "your layer norm must be an nn.Module (subclass nn.Module and call "
                                          "super().__init__()), so its parameters are registered.")
    weight, bias = _parameter(module, "weight", d_model), _parameter(module, "bias", d_model)
    expect(torch.allclose(weight.detach().float(), torch.ones(d_model)) and
           torch.allclose(bias.detach().float(), torch.zeros(d_model)),
           "initialise the gain `weight` to ones and the shift `bias` to zeros, so a fresh layer norm is a pure "
           "normalisation (as nn.LayerNorm starts).")

    # the tiny-variance case comes first: there every variance/eps mistake gives different numbers
    cases = [("activations with a tiny variance (std 1e-3), where eps matters",
              lambda b, n, d: torch.randn(b, n, d) * 1e-3 + 0.5, torch.float64),
             ("a batch of typical activations", lambda b, n, d: torch.randn(b, n, d) * 3 + 1, torch.float32),
             ("float64 activations", lambda b, n, d: torch.randn(b, n, d) * 2 - 1, torch.float64)]
    cases += [("random activations", lambda b, n, d: torch.randn(b, n, d) * gen.uniform(0.5, 4), torch.float32)
              for _ in range(trials)]
    for what, make, dtype in cases:
        d_model = gen.choice([4, 5, 6, 8, 12])
        batch, seq_len = gen.randint(2, 4), gen.randint(3, 6)
        module = call(cls, d_model, eps=EPS, what=f"{name}({d_model}, eps=1e-5)").to(dtype)
        weight, bias = _parameter(module, "weight", d_model), _parameter(module, "bias", d_model)
        with torch.no_grad():  # a gain and a shift far from (1, 0), so forgetting either shows
            weight.copy_(torch.rand(d_model, dtype=dtype) * 2 + 0.5)
            bias.copy_(torch.randn(d_model, dtype=dtype))
        x = make(batch, seq_len, d_model).to(dtype)  # (batch, seq_len, d_model)
        got = _run(module, x)
        w, b = weight.detach(), bias.detach()
        expected = layer_norm(x, w, b, EPS)
        atol = 1e-5 if dtype == torch.float32 else 1e-9
        diagnose(got.detach(), expected, _suspects(x, w, b, EPS),
                 f"on {what} (shape {tuple(x.shape)}, {dtype}) your layer norm differs from "
                 "weight * (x - mean) / sqrt(var + eps) + bias over the last axis", atol=atol)

    # 2. any leading shape, not only (batch, seq_len, d_model)
    module = call(cls, 8, eps=EPS, what=f"{name}(8, eps=1e-5)")
    for shape in [(5, 8), (2, 3, 4, 8)]:
        x = torch.randn(shape)
        hint = (f"your layer norm works on (batch, seq_len, d_model) but not on shape {shape}: normalise over "
                "dim=-1 (not dim=2) so any leading shape works.")
        try:
            got = _run(module, x)
        except Mistake as exc:
            raise Mistake(f"{hint} ({exc})") from exc
        expect(close(got.detach(), layer_norm(x, module.weight.detach(), module.bias.detach(), EPS)), hint)

    # 3. gradients reach the gain and shift
    x = torch.randn(2, 3, 8)
    call(lambda: _run(module, x).pow(2).sum().backward(), what="backward through your layer norm")
    expect(module.weight.grad is not None and module.bias.grad is not None,
           "no gradient reached `weight`/`bias`: use them in forward (without .detach() or .data).")
    passed("check_layer_norm", f"matches tfm_lesson.LayerNorm on {len(cases) + 2} inputs (float32 and float64, "
                               "tiny variances, 2-D to 4-D); biased variance, eps inside the square root")


# residual + norm wrappers -----------------------------------------------------------------------------------------
class _Counted(nn.Module):
    """A sub-layer that counts its calls: a random linear map and a tanh, so it is neither identity nor linear."""

    def __init__(self, d_model: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.linear = nn.Linear(d_model, d_model).to(dtype)
        self.calls = 0

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        return torch.tanh(self.linear(x)) * 2


def _wrapper_suspects(x: Tensor, f: Callable[[Tensor], Tensor], n: Callable[[Tensor], Tensor]) -> dict[str, Tensor]:
    post, pre = n(x + f(x)), x + f(n(x))
    return {
        "post": post, "pre": pre,
        "your output matches norm(sublayer(x)): the residual connection is missing; add x back before "
        "(post-norm) or after (pre-norm) the sub-layer.": n(f(x)),
        "your output matches x + sublayer(x) with no layer norm at all.": x + f(x),
        "your output matches x + norm(sublayer(x)): the norm is applied to the sub-layer's output only. "
        "Post-norm is norm(x + sublayer(x)); pre-norm is x + sublayer(norm(x)).": x + n(f(x)),
        "your output matches norm(x) + sublayer(norm(x)): the residual must carry the raw x, not the normalised "
        "one; pre-norm is x + sublayer(norm(x)).": n(x) + f(n(x)),
        "your output matches norm(x + sublayer(norm(x))): you normalised twice (before and after); choose one "
        "placement.": n(x + f(n(x))),
        "your output matches sublayer(norm(x)): the residual connection is missing; pre-norm adds x back: "
        "x + sublayer(norm(x)).": f(n(x)),
    }


def _check_wrapper(fn: Callable, which: str, trials: int, seed: int) -> None:
    gen = random.Random(seed)
    torch.manual_seed(seed)
    formula = {"post": "norm(x + sublayer(x))", "pre": "x + sublayer(norm(x))"}[which]
    other = "pre" if which == "post" else "post"
    swapped = {"post": f"your output is PRE-norm, x + sublayer(norm(x)); this exercise is the paper's post-norm, "
                       f"{formula}: add the residual first, then normalise the sum (post-norm and pre-norm swapped).",
               "pre": f"your output is POST-norm, norm(x + sublayer(x)) (the paper's placement); pre-norm is "
                      f"{formula}: normalise the sub-layer's input and add the raw x back (post-norm and pre-norm "
                      "swapped)."}[which]
    for trial in range(trials):
        dtype = torch.float64 if trial % 2 else torch.float32
        d_model, batch, seq_len = gen.choice([4, 6, 8, 16]), gen.randint(1, 3), gen.randint(2, 7)
        sublayer = _Counted(d_model, dtype)
        norm = nn.LayerNorm(d_model).to(dtype)
        with torch.no_grad():
            norm.weight.copy_(torch.rand(d_model, dtype=dtype) + 0.5)
            norm.bias.copy_(torch.randn(d_model, dtype=dtype) * 0.5)
        x = (torch.randn(batch, seq_len, d_model) * 2 + 1).to(dtype)  # (batch, seq_len, d_model)
        got = output_of(call(fn, x, sublayer, norm, what=f"your {which}-norm function"))
        expect(sublayer.calls == 1, f"your function called the sub-layer {sublayer.calls} times; call it exactly "
                                    "once (with dropout, two calls would give two different results).")
        with torch.no_grad():
            suspects = _wrapper_suspects(x, sublayer, norm)
        expected = suspects.pop(which)
        suspects = {swapped: suspects.pop(other), **suspects}
        diagnose(got.detach(), expected, suspects,
                 f"your {which}-norm output differs from {formula} (shape {tuple(x.shape)}, {dtype})",
                 atol=1e-5 if dtype == torch.float32 else 1e-9)
    passed(f"check_{which}_norm", f"{formula} on {trials} random shapes in float32 and float64")


def check_post_norm(fn: Callable, trials: int = 4, seed: int = 0) -> None:
    """``fn(x, sublayer, norm)`` must return the paper's post-norm residual block ``norm(x + sublayer(x))``."""
    _check_wrapper(fn, "post", trials, seed)


def check_pre_norm(fn: Callable, trials: int = 4, seed: int = 0) -> None:
    """``fn(x, sublayer, norm)`` must return the pre-norm residual block ``x + sublayer(norm(x))``."""
    _check_wrapper(fn, "pre", trials, seed)


# a residual block as a module: SublayerConnection(d_model, norm_first, dropout) -----------------------------------
def _block(x: Tensor, f: Callable[[Tensor], Tensor], norm: Callable[[Tensor], Tensor], drop: Callable[[Tensor], Tensor],
           norm_first: bool) -> Tensor:
    """The reference: dropout on the sub-layer's output, before it is added to the residual (paper, section 5.4)."""
    return x + drop(f(norm(x))) if norm_first else norm(x + drop(f(x)))


def _connection_suspects(x: Tensor, f: Callable, norm: Callable, drop: Callable, norm_first: bool,
                         seeded: Callable[[Callable[[], Tensor]], Tensor]) -> dict[str, Tensor]:
    """hint -> the output of a classic wrong block, computed with the same dropout mask as the reference."""
    which, other = ("pre", "post") if norm_first else ("post", "pre")
    formula = "x + dropout(sublayer(norm(x)))" if norm_first else "norm(x + dropout(sublayer(x)))"
    return {
        f"norm in the wrong place: your output is {other.upper()}-norm, but norm_first={norm_first} asks for "
        f"{which}-norm, {formula}.": seeded(lambda: _block(x, f, norm, drop, not norm_first)),
        f"dropout after the residual: dropout belongs on the sub-layer's output BEFORE it is added to x (the paper, "
        f"section 5.4), {formula}; dropping out the sum also drops parts of x itself.":
            seeded(lambda: drop(x + f(norm(x))) if norm_first else norm(drop(x + f(x)))),
        f"dropout was applied to the residual x as well as to the sub-layer: only the sub-layer's output is dropped "
        f"out, {formula}.": seeded(lambda: (drop(x) + drop(f(norm(x)))) if norm_first else norm(drop(x) + drop(f(x)))),
        f"residual missing: your output has no x added back; {formula}.":
            seeded(lambda: drop(f(norm(x))) if norm_first else norm(drop(f(x)))),
        "the residual carries norm(x) instead of the raw x: pre-norm adds the sub-layer's output to the stream "
        "itself, x + dropout(sublayer(norm(x))).": seeded(lambda: norm(x) + drop(f(norm(x)))),
        f"dropout missing: in training mode the sub-layer's output must pass through self.dropout before it is "
        f"added to x, {formula}.": _block(x, f, norm, lambda t: t, norm_first),
        f"norm missing: {formula}.": seeded(lambda: x + drop(f(x))),
        "you normalised twice (before the sub-layer and after the sum): choose one placement, as norm_first says.":
            seeded(lambda: norm(x + drop(f(norm(x))))),
    }


def check_sublayer_connection(cls: type, seed: int = 0) -> None:
    """``cls(d_model, norm_first=False, dropout=0.1)`` is an ``nn.Module`` with a layer norm ``norm`` whose
    ``forward(x, sublayer)`` returns ``norm(x + dropout(sublayer(x)))`` (post-norm) or
    ``x + dropout(sublayer(norm(x)))`` (pre-norm)."""
    gen = random.Random(seed)
    name = getattr(cls, "__name__", type(cls).__name__)
    for trial, (norm_first, dtype) in enumerate([(False, torch.float32), (True, torch.float32),
                                                 (False, torch.float64), (True, torch.float64)]):
        torch.manual_seed(seed + trial)
        d_model, batch, seq_len = gen.choice([6, 8, 16]), gen.randint(2, 3), gen.randint(3, 6)
        p = 0.3
        module = call(cls, d_model, norm_first=norm_first, dropout=p,
                      what=f"{name}({d_model}, norm_first={norm_first}, dropout={p})")
        expect(isinstance(module, nn.Module), f"{name} must be an nn.Module (subclass nn.Module and call "
                                              "super().__init__()).")
        norm = getattr(module, "norm", None)
        expect(isinstance(norm, nn.Module) and isinstance(getattr(norm, "weight", None), nn.Parameter)
               and tuple(norm.weight.shape) == (d_model,),
               f"{name} needs an attribute `norm`, a layer norm over d_model = {d_model} features (nn.LayerNorm, "
               "tfm_lesson.LayerNorm or your MyLayerNorm), so that its weights can be set; found "
               f"{type(norm).__name__ if norm is not None else 'none'}")
        module = module.to(dtype)
        with torch.no_grad():
            norm.weight.copy_(torch.rand(d_model, dtype=dtype) + 0.5)
            if getattr(norm, "bias", None) is not None:
                norm.bias.copy_(torch.randn(d_model, dtype=dtype) * 0.5)
        sublayer = _Counted(d_model, dtype)
        x = (torch.randn(batch, seq_len, d_model) * 2 + 1).to(dtype)  # (batch, seq_len, d_model)
        drop = nn.Dropout(p)
        atol = 1e-5 if dtype == torch.float32 else 1e-9

        # training mode: dropout is on; the same seed gives the reference and the learner the same mask
        module.train()
        draw = 1000 + trial

        def seeded(compute: Callable[[], Tensor]) -> Tensor:
            torch.manual_seed(draw)
            with torch.no_grad():
                return compute()

        torch.manual_seed(draw)
        got = output_of(call(module, x, sublayer, what=f"your {name}.forward(x, sublayer)"))
        expect(sublayer.calls == 1, f"your forward called the sub-layer {sublayer.calls} times; call it exactly once "
                                    "(with dropout inside the sub-layer, two calls give two different results).")
        expected = seeded(lambda: _block(x, sublayer, norm, drop, norm_first))
        suspects = _connection_suspects(x, sublayer, norm, drop, norm_first, seeded)
        diagnose(got.detach(), expected, suspects,
                 f"in training mode (norm_first={norm_first}, dropout={p}, {dtype}) your output differs from "
                 f"{'x + dropout(sublayer(norm(x)))' if norm_first else 'norm(x + dropout(sublayer(x)))'}",
                 atol=atol)

        # evaluation mode: no dropout at all
        module.eval()
        got = output_of(call(module, x, sublayer, what=f"your {name}.forward(x, sublayer) in eval mode"))
        with torch.no_grad():
            expected = _block(x, sublayer, norm, lambda t: t, norm_first)
        expect(close(got.detach(), expected, atol=atol),
               "in eval mode (module.eval()) dropout must do nothing: use an nn.Dropout module (self.dropout), "
               "which switches off in eval mode, or F.dropout(..., training=self.training).")
    passed("check_sublayer_connection", "post-norm and pre-norm blocks, dropout on the sub-layer's output in training "
                                        "and none in eval mode, float32 and float64")


# a stack of residual blocks: the final norm belongs to pre-norm stacks only --------------------------------------
class _Connection(nn.Module):
    """The reference residual block (no dropout), used to build stacks for :func:`check_sublayer_stack`."""

    def __init__(self, d_model: int, norm_first: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model).to(dtype)
        with torch.no_grad():
            self.norm.weight.copy_(torch.rand(d_model, dtype=dtype) + 0.5)
            self.norm.bias.copy_(torch.randn(d_model, dtype=dtype) * 0.5)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return _block(x, sublayer, self.norm, lambda t: t, self.norm_first)


def check_sublayer_stack(fn: Callable, seed: int = 0) -> None:
    """``fn(x, sublayers, connections, final_norm)`` must apply ``connections[i](x, sublayers[i])`` in order and end
    with ``final_norm`` in a pre-norm stack (``connections[0].norm_first``) and only there."""
    gen = random.Random(seed)
    torch.manual_seed(seed)
    for trial, norm_first in enumerate([True, False, True, False]):
        dtype = torch.float64 if trial >= 2 else torch.float32
        d_model, n = gen.choice([6, 8]), gen.randint(2, 4)
        sublayers = [_Counted(d_model, dtype) for _ in range(n)]
        connections = [_Connection(d_model, norm_first, dtype) for _ in range(n)]
        final_norm = _Connection(d_model, norm_first, dtype).norm  # a layer norm with non-trivial gain and shift
        x = (torch.randn(2, 5, d_model) * 2 + 1).to(dtype)
        got = output_of(call(fn, x, sublayers, connections, final_norm,
                             what=f"your function on a {'pre' if norm_first else 'post'}-norm stack of {n} blocks"))
        calls = [s.calls for s in sublayers]
        expect(all(c == 1 for c in calls), f"each sub-layer must run exactly once, through its connection; the calls "
                                           f"per sub-layer were {calls}")
        with torch.no_grad():
            h = x
            for s, c in zip(sublayers, connections):
                h = c(h, s)
            expected = final_norm(h) if norm_first else h
            suspects = {
                ("final norm missing: a pre-norm stack never normalises its stream, so it must end with the final "
                 "layer norm, final_norm(x), after the last block." if norm_first else
                 "final norm extra: a post-norm stack's last block already ends with a layer norm; apply final_norm "
                 "only when the connections are pre-norm (connections[0].norm_first).")
                : final_norm(h) if not norm_first else h,
                "the blocks ran in the wrong order: apply connections[i] with sublayers[i], from the first to the last.":
                    _stack_reversed(x, sublayers, connections, final_norm if norm_first else None),
            }
        diagnose(got.detach(), expected, suspects,
                 f"your {'pre' if norm_first else 'post'}-norm stack's output differs from the blocks applied in "
                 f"order{', then final_norm' if norm_first else ''}", atol=1e-5 if dtype == torch.float32 else 1e-9)
        for s in sublayers:
            s.calls = 0
    passed("check_sublayer_stack", "blocks applied in order; the final norm in pre-norm stacks and only there")


def _stack_reversed(x: Tensor, sublayers: list, connections: list, final_norm: Callable | None) -> Tensor:
    h = x
    for s, c in zip(reversed(sublayers), reversed(connections)):
        h = c(h, s)
    return final_norm(h) if final_norm is not None else h
