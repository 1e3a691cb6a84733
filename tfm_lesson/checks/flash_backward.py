"""Checker for chapter 18's backward exercise: FlashAttention's backward pass by recomputation.

- ``check_flash_backward(fn)``: ``fn(q, k, v, out, lse, grad_out, block_size, causal, mask) -> (grad_q, grad_k,
  grad_v)``, from the saved output ``out`` and log-sum-exp ``lse`` (``-inf`` for a query that sees no key), tile by
  tile, compared in float64 with autograd through the explicit attention. Named: a missing D = rowsum(dO * O) or
  D = rowsum(dO), a forgotten 1/sqrt(d_k) (in both dQ and dK, or in one), a recompute without the mask or the causal
  rule, a causal rule without the offset of fewer queries than keys (lined up at the top-left), tiles whose shapes do not fit (dV = P dO for P^T dO), NaN for queries that see nothing, a stored (q_len,
  k_len) probability matrix (peak memory measured with :func:`tfm_lesson.look.memory.peak_tensor_bytes`); the
  package's own backward (or autograd) is refused. While grading, the memory rule is also enforced from outside
  the kernel (:mod:`._probes`).
"""
from __future__ import annotations

import math
import re
from typing import Callable

import torch
from torch import Tensor

from ..look.memory import peak_tensor_bytes
from ._flash_slips import TILED_SLIPS, causal_rule, forbid_side_doors, same_numbers
from ._harness import Mistake, call, close, expect, learner_side, passed
from ._mistake import learner_lines
from ._rules import forbid_names, forbid_objects

__all__ = ["check_flash_backward"]

WHY = ("The exercise asks you to write the backward pass from the saved output and log-sum-exp, tile by tile; "
       "autograd or the package's FlashAttention would do the work.")
NO_D = ("dV is right but dQ and dK are not: the softmax's backward subtracts D = rowsum(dO * O), one number per "
        "query computed from the saved output, before multiplying by P: dS = P * (dP - D[..., None])")
NO_SCALE = ("dQ and dK are sqrt(d_k) times too large: the scores are S = Q K^T / sqrt(d_k), so the chain rule brings "
            "the same factor back, dQ += dS K / sqrt(d_k) and dK += dS^T Q / sqrt(d_k)")
NO_SCALE_DK = ("dQ is right but dK is sqrt(d_k) times too large: dK += dS^T Q / sqrt(d_k) needs the same 1/sqrt(d_k) "
               "as dQ (S = Q K^T / sqrt(d_k) is scaled for both)")
NO_SCALE_DQ = ("dK is right but dQ is sqrt(d_k) times too large: dQ += dS K / sqrt(d_k) needs the same 1/sqrt(d_k) "
               "as dK (S = Q K^T / sqrt(d_k) is scaled for both)")
D_NO_O = ("dV is right but dQ and dK are not: you took D = rowsum(dO), the row sums of grad_out alone; D is "
          "rowsum(dO * O), the elementwise product with the saved output summed over d, (grad_out * out).sum(-1)")
NO_MASK = ("your recomputed P ignores `mask`: P = exp(S - lse) must be 0 where the forward pass hid a key, so fill S "
           "with -inf at ~mask[..., q0:q1, k0:k1] in every tile before the exp, as the forward pass did")
NO_CAUSAL = ("your recomputed P ignores the causal rule: with causal=True, fill S with -inf where the key comes after "
             "the query (positions in the whole sequence) in every tile before the exp, as the forward pass did")
TOP_LEFT = TILED_SLIPS["top_left"].replace("your causal mask", "your recomputed P's causal rule")
NAN = ("your gradients contain NaN for a query that sees no key: its lse is -inf, and exp(S - lse) = "
       "exp(-inf - (-inf)) is NaN. Replace a -inf lse by 0 in the exponent (torch.where(lse == -inf, 0, lse)) and "
       "give such a query P = 0: it received nothing, so it sends no gradient (the forward pass's rule, backwards)")


def _allowed(q_len: int, k_len: int, causal: bool, mask: Tensor | None) -> Tensor:
    allowed = causal_rule(q_len, k_len) if causal else torch.ones(q_len, k_len, dtype=torch.bool)
    return allowed & mask if mask is not None else allowed


def _attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The explicit attention (0 for a query that sees no key), differentiable without NaN; and its lse."""
    allowed = _allowed(q.size(2), k.size(2), causal, mask)
    has_key = allowed.any(dim=-1, keepdim=True)  # (..., q_len, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, q_len, k_len)
    filled = scores.masked_fill(~allowed, float("-inf")).masked_fill(~has_key, 0.0)
    weights = filled.softmax(dim=-1).masked_fill(~has_key, 0.0)
    lse = torch.where(has_key.squeeze(-1), filled.logsumexp(dim=-1), float("-inf"))
    return weights @ v, lse.detach()


def _by_hand(q, k, v, out, lse, grad_out, causal, mask, bug: str) -> tuple[Tensor, Tensor, Tensor]:
    """The backward pass written out explicitly, with one slip (``bug``): "no_D", "D_no_O", "no_scale",
    "no_scale_dk", "no_scale_dq", "no_mask", "no_causal" or "top_left" (the causal rule without its offset)."""
    scale = 1.0 / math.sqrt(q.size(-1))
    scale_q = 1.0 if bug in ("no_scale", "no_scale_dq") else scale
    scale_k = 1.0 if bug in ("no_scale", "no_scale_dk") else scale
    allowed = _allowed(q.size(2), k.size(2), causal and bug != "no_causal", None if bug == "no_mask" else mask)
    if causal and bug == "top_left":  # query i sees keys 0 .. i, as if the queries were the sequence's first ones
        allowed = allowed & torch.ones(q.size(2), k.size(2), dtype=torch.bool).tril()
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~allowed, float("-inf"))
    seen = ~(torch.isinf(lse) & (lse < 0))
    p = torch.where(seen.unsqueeze(-1), torch.exp(s - torch.where(seen, lse, 0.0).unsqueeze(-1)), 0.0)
    d = {"no_D": torch.zeros_like(lse), "D_no_O": grad_out.sum(dim=-1)}.get(bug, (grad_out * out).sum(dim=-1))
    ds = p * (grad_out @ v.transpose(-2, -1) - d.unsqueeze(-1))
    return ds @ k * scale_q, ds.transpose(-2, -1) @ q * scale_k, p.transpose(-2, -1) @ grad_out


def _cases(gen: torch.Generator) -> list:
    def qkv(q_len, k_len, d=8):
        return tuple(torch.randn(2, 2, n, d, generator=gen, dtype=torch.float64) for n in (q_len, k_len, k_len))

    hidden = torch.ones(2, 2, 9, 11, dtype=torch.bool)
    hidden[0, 1, 2] = False  # this query sees no key
    hidden[1, ..., :5] = False  # left padding: the first key tile (block 4) is all masked
    pad = torch.ones(2, 1, 1, 13, dtype=torch.bool)
    pad[1, ..., 10:] = False
    return [(qkv(10, 10), 4, False, None), (qkv(13, 13), 5, True, None), (qkv(9, 11), 4, False, hidden),
            (qkv(13, 13), 4, True, pad.expand(2, 2, 13, 13)),
            (qkv(5, 12), 4, True, None)]  # fewer queries than keys: the queries are the sequence's last positions


def _grads(result: object, what: str) -> tuple[Tensor, Tensor, Tensor]:
    expect(result is not None, "your code returned None: not written yet, or did you forget a `return`?")
    expect(isinstance(result, (tuple, list)) and len(result) == 3 and all(isinstance(t, Tensor) for t in result),
           f"{what} must return three tensors (grad_q, grad_k, grad_v), got {type(result).__name__}")
    return tuple(t.detach() for t in result)


def check_flash_backward(fn: Callable) -> None:
    """``fn(q, k, v, out, lse, grad_out, block_size, causal, mask)`` -> ``(grad_q, grad_k, grad_v)`` equal to
    autograd's through the explicit attention (float64), with causal masks, masks that hide a query's every key or a
    whole first tile, and lengths that the block does not divide; and no (q_len, k_len) matrix held at once."""
    forbid_objects(fn, {"FlashAttention": _package("FlashAttention"), "_backward": _package("_backward"),
                        "flash_attention": _package("flash_attention")}, "backward pass", WHY)
    forbid_names(fn, ("autograd", "backward", "flash_attention", "FlashAttention", "vjp", "functorch", "func"),
                 "backward pass", WHY)
    forbid_side_doors(fn, "backward pass")
    gen = torch.Generator().manual_seed(181)
    cases = _cases(gen)
    for (q, k, v), block, causal, mask in cases:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, lse = _attention(*leaves, causal, mask)
        grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64)
        want = torch.autograd.grad(out, leaves, grad_out)
        out = out.detach()
        what = (f"your backward(q {tuple(q.shape)}, k {tuple(k.shape)}, v, out, lse, grad_out, block_size={block}, "
                f"causal={causal}, mask={'None' if mask is None else 'a boolean mask'})")
        got = _grads(call(fn, q, k, v, out, lse, grad_out, block, causal, mask, what=what, explain=_shape_hint), what)
        _compare(what, got, want, lambda bug: _by_hand(q, k, v, out, lse, grad_out, causal, mask, bug))
    _check_memory(fn)
    passed("check_flash_backward", f"{len(cases)} cases (causal, causal with fewer queries than keys, a query that "
                                   "sees no key, a masked first tile, blocks that do not divide the length) equal "
                                   "autograd's gradients in float64, "
                                   "with no (q_len, k_len) matrix held")


def _package(name: str) -> object:
    from .. import flash

    return getattr(flash, name)


_TILE_SHAPES = {
    "grad_v": "dV's tile is (block_k, d), one row per key: dV += P^T dO, P transposed (P is (block_q, block_k), one "
              "row per query), P.transpose(-2, -1) @ grad_out[..., q0:q1, :]; grad_v itself is shaped like v",
    "grad_k": "dK's tile is (block_k, d), one row per key: dK += dS^T Q / sqrt(d_k), dS transposed, "
              "dS.transpose(-2, -1) @ q[..., q0:q1, :]; grad_k itself is shaped like k",
    "grad_q": "dQ's tile is (block_q, d), one row per query: dQ += dS K / sqrt(d_k), dS @ k[..., k0:k1, :]; grad_q "
              "itself is shaped like q",
}


def _failing_line(exc: BaseException) -> str:
    """The learner's line where ``exc`` was raised ('' when none is the learner's)."""
    lines = learner_lines(exc)
    return lines[-1] if lines else ""


def _shape_hint(exc: Exception) -> str | None:
    """A product or sum of tiles whose shapes do not fit: name the gradient of the failing line, else all three."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or not any(w in text for w in ("size", "shape", "must match")):
        return None
    target = re.match(r"\s*([A-Za-z_]\w*)", _failing_line(exc))
    name = target.group(1).lower() if target else ""
    which = next((g for g, ends in (("grad_v", "v"), ("grad_k", "k"), ("grad_q", "q")) if name.endswith(ends)), None)
    if which:
        return f"the shapes of a tile product do not fit (in `{name}`): {_TILE_SHAPES[which]}"
    return ("the shapes of a tile product do not fit: " + "; ".join(_TILE_SHAPES.values()) +
            ". With tiles of equal size a wrong product can run, so check each one's shape")


def _compare(what: str, got: tuple, want: tuple, slip: Callable[[str], tuple]) -> None:
    names = ("grad_q", "grad_k", "grad_v")
    for name, g, w in zip(names, got, want):
        expect(g.shape == w.shape, f"{what}: {name} has shape {tuple(g.shape)}, expected {tuple(w.shape)}: "
                                   f"{_TILE_SHAPES[name]}")
    if any(torch.isnan(g).any() for g in got):
        raise Mistake(NAN)
    if all(close(g, w, atol=1e-8, rtol=1e-6) for g, w in zip(got, want)):
        return
    for bug, hint in (("no_D", NO_D), ("D_no_O", D_NO_O), ("no_scale", NO_SCALE), ("no_scale_dk", NO_SCALE_DK),
                      ("no_scale_dq", NO_SCALE_DQ), ("no_mask", NO_MASK), ("no_causal", NO_CAUSAL),
                      ("top_left", TOP_LEFT)):
        if all(same_numbers(g, s, atol=1e-8, rtol=1e-6) for g, s in zip(got, slip(bug))):
            raise Mistake(hint)
    wrong = [(n, (g - w).abs().max().item()) for n, g, w in zip(names, got, want) if not close(g, w, 1e-8, 1e-6)]
    raise Mistake(f"{what}: {', '.join(f'{n} differs from autograd by up to {e:.3g}' for n, e in wrong)}. "
                  "Recompute each tile P = exp(S - lse) (S with the causal rule and the mask), then dV += P^T dO, "
                  "dP = dO V^T, dS = P * (dP - D), dQ += dS K / sqrt(d_k), dK += dS^T Q / sqrt(d_k)")


def _check_memory(fn: Callable) -> None:
    """Measured with the package's tracer: the answer's tensors may never hold a (q_len, k_len) matrix."""
    length, block = 256, 32
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 1, length, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    out, lse = _attention(q, k, v, False, None)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    square = length * length * q.element_size()
    with torch.no_grad():
        peak = call(learner_side(peak_tensor_bytes), fn, q, k, v, out, lse, grad_out, block, False, None,
                    what=f"your backward(q (1, 1, {length}, 16), ..., block_size={block})")
    expect(peak < square, f"STORED P: at length {length} with block_size={block} your backward's tensors held "
                          f"{peak / 1024:.0f} KiB at their peak, as much as a full (q_len, k_len) matrix "
                          f"({square / 1024:.0f} KiB) or more: it builds the whole probability (or score) matrix. "
                          "Recompute one (block, block) tile of P = exp(S - lse) at a time and add its share to "
                          "dQ, dK and dV")


# the reference piece, for a chapter whose later cells need working pieces -----------------------------------------
def _ref_flash_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor, block_size: int,
                        causal: bool = False, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    from ..flash import _as_4d, _backward

    return _backward(grad_out, q, k, v, out, lse, _as_4d(mask), causal, block_size)


PIECES = {"flash_backward": (check_flash_backward, _ref_flash_backward)}
