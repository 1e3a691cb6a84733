"""Checkers for chapter 18 (attention that fits): the online softmax, tiled attention, and a matrix product's
arithmetic intensity.

- ``check_online_softmax(fn)``: ``fn(x, block_size) -> softmax(x, dim=-1)``, reading ``x`` one block of columns at a
  time; a row that is all ``-inf`` gives 0.
- ``check_tiled_attention(fn)``: ``fn(query, key, value, block_size, causal=False, mask=None) -> (batch, heads, q_len,
  d_v)``, tile by tile with a running maximum, a running sum and an output accumulator.
- ``check_arithmetic_intensity(fn)``: ``fn(m, k, n, bytes_per_number) -> FLOPs per byte`` of an ``(m, k) @ (k, n)``
  product that reads both inputs and writes the output once.

Each classic mistake is recomputed here and named when the learner's output matches it.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ._harness import Mistake, call, close, expect, output_of, passed

__all__ = ["check_online_softmax", "check_tiled_attention", "check_arithmetic_intensity"]

NO_RESCALE = ("the running sum is not rescaled when the maximum grows: a block with a larger maximum m_new makes the "
              "old sum (measured against the old m) too large; multiply it by exp(m - m_new) before adding the block's "
              "exp(x - m_new)")
NO_RESCALE_BOTH = ("the running sum and the output accumulator are not rescaled when the maximum grows: multiply both "
                   "l and acc by alpha = exp(m - m_new) before adding the new tile's p.sum(-1) and p @ v")
NO_RESCALE_ACC = ("the running sum is rescaled but the output accumulator is not: acc was summed against the old "
                  "maximum too, so it needs the same factor, acc = alpha * acc + p @ v with alpha = exp(m - m_new)")
NO_RESCALE_SUM = ("the output accumulator is rescaled but the running sum is not: l = alpha * l + p.sum(-1), with the "
                  "same alpha = exp(m - m_new) as acc")
PER_BLOCK = ("each block is normalised by its own sum: the softmax divides by the sum over the WHOLE row, known only "
             "after the last block; keep the unnormalised exp(x - m) sums and divide once, at the end")
PER_BLOCK_ATT = ("each tile's probabilities are normalised by that tile's own sum (softmax per tile): the weights "
                 "of a query sum to 1 over ALL its keys, so divide the accumulator by the running sum l of every "
                 "tile seen, once after the last key tile")
CAUSAL_LOCAL = ("the causal mask uses the row and column inside the tile: query q0 + r may see key k0 + c when "
                "k0 + c <= q0 + r, i.e. compare the positions in the whole sequence (torch.arange(q0, q1) against "
                "torch.arange(k0, k1)), not torch.ones(block_q, block_k).tril()")
NAN_ROW = ("a row that sees nothing (all -inf) gives NaN: exp(-inf - (-inf)) is NaN. Subtract 0 instead of a -inf "
           "maximum (torch.where(m == -inf, 0, m)), and give such a row 0: the course's rule for a query with no key")
NAN_QUERY = ("a query that may see no key gives NaN: its maximum stays -inf and exp(-inf - (-inf)) is NaN, and its sum "
             "l is 0. Subtract 0 where m is -inf, and set the output of a query with l == 0 to 0 (the course's rule)")


def _safe(m: Tensor) -> Tensor:
    return torch.where(torch.isinf(m) & (m < 0), 0.0, m)


def _softmax_ref(x: Tensor) -> Tensor:
    out = x.softmax(dim=-1)
    return torch.where(torch.isinf(x).all(dim=-1, keepdim=True) & (x < 0).all(dim=-1, keepdim=True), 0.0, out)


def _online(x: Tensor, block: int, bug: str | None) -> Tensor:
    """The online softmax, or one of its classic mistakes."""
    if bug == "per_block":
        parts = [torch.nan_to_num(x[..., s:s + block].softmax(dim=-1)) for s in range(0, x.size(-1), block)]
        return torch.cat(parts, dim=-1)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    d = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for s in range(0, x.size(-1), block):
        blk = x[..., s:s + block]
        m_new = torch.maximum(m, blk.amax(dim=-1))
        scale = torch.ones_like(d) if bug == "no_rescale" else torch.exp(m - _safe(m_new))
        d = d * scale + torch.exp(blk - _safe(m_new).unsqueeze(-1)).sum(dim=-1)
        m = m_new
    out = torch.exp(x - _safe(m).unsqueeze(-1)) / d.unsqueeze(-1)
    return torch.where((d > 0).unsqueeze(-1), out, 0.0)


def check_online_softmax(fn: Callable) -> None:
    """``fn(x, block_size)`` must equal ``x.softmax(-1)`` (0 for a row of -inf) for block sizes that do and do not
    divide the row, with the maximum growing from block to block."""
    gen = torch.Generator().manual_seed(18)
    rising = torch.arange(24.0).repeat(3, 1) * 2 + torch.randn(3, 24, generator=gen)  # the max grows each block
    masked = torch.randn(4, 19, generator=gen) * 3
    masked[0, 5:] = float("-inf")
    masked[1, ::2] = float("-inf")
    cases = [(rising, 4), (rising, 5), (torch.randn(2, 3, 17, generator=gen) * 4, 6), (masked, 4),
             (torch.randn(5, 8, generator=gen), 8), (torch.randn(2, 10, generator=gen), 1)]
    for x, block in cases:
        what = f"your function(x of shape {tuple(x.shape)}, block_size={block})"
        got = output_of(call(fn, x.clone(), block, what=what))
        want = _softmax_ref(x)
        if close(got, want):
            continue
        expect(got.shape == want.shape, f"{what} returned shape {tuple(got.shape)}, expected {tuple(want.shape)}: "
                                        "one probability per score")
        for bug, hint in (("no_rescale", NO_RESCALE), ("per_block", PER_BLOCK)):
            if close(got, _online(x, block, bug)):
                raise Mistake(hint)
        raise Mistake(f"{what} differs from softmax(x, dim=-1) (largest difference "
                      f"{(got.float() - want.float()).abs().nan_to_num(float('inf')).max().item():.3g})")
    empty = torch.randn(3, 10, generator=gen)
    empty[1] = float("-inf")
    got = output_of(call(fn, empty.clone(), 4, what="your function(x with a row of -inf, block_size=4)"))
    expect(not torch.isnan(got).any(), NAN_ROW)
    expect(close(got, _softmax_ref(empty)), "a row that is all -inf must give 0 (nothing to attend to), the other rows "
                                            "their softmax")
    passed("check_online_softmax", f"{len(cases) + 1} cases (block sizes that divide the row and that do not, a "
                                   "maximum that grows, -inf entries, a row of -inf) equal softmax")


def _tiled(q: Tensor, k: Tensor, v: Tensor, block: int, causal: bool, mask: Tensor | None,
           bug: str | None = None) -> Tensor:
    """Tiled attention, or one of its classic mistakes (``bug``)."""
    b, h, q_len, d_k = q.shape
    k_len = k.size(2)
    out = q.new_zeros(b, h, q_len, v.size(-1))
    for q0 in range(0, q_len, block):
        q1 = min(q0 + block, q_len)
        m = q.new_full((b, h, q1 - q0), float("-inf"))
        l = q.new_zeros(b, h, q1 - q0)
        acc = q.new_zeros(b, h, q1 - q0, v.size(-1))
        for k0 in range(0, k_len, block):
            k1 = min(k0 + block, k_len)
            s = q[:, :, q0:q1] @ k[:, :, k0:k1].transpose(-2, -1) / math.sqrt(d_k)
            allowed = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool)
            if causal and bug == "causal_local":
                allowed = allowed.tril()
            elif causal:
                allowed = torch.arange(k0, k1) <= torch.arange(q0, q1).unsqueeze(-1)
            if mask is not None:
                allowed = allowed & mask[..., q0:q1, k0:k1]
            s = s.masked_fill(~allowed, float("-inf"))
            if bug == "per_block":
                acc = acc + torch.nan_to_num(s.softmax(dim=-1)) @ v[:, :, k0:k1]
                continue
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - _safe(m_new).unsqueeze(-1))
            alpha = torch.exp(m - _safe(m_new))
            l = (l if bug in ("no_rescale", "no_rescale_sum") else alpha * l) + p.sum(dim=-1)
            acc = (acc if bug in ("no_rescale", "no_rescale_acc") else alpha.unsqueeze(-1) * acc) + p @ v[:, :, k0:k1]
            m = m_new
        if bug == "per_block":
            out[:, :, q0:q1] = acc
        else:
            out[:, :, q0:q1] = torch.where((l > 0).unsqueeze(-1), acc / torch.where(l > 0, l, 1.0).unsqueeze(-1), 0.0)
    return out


def _reference(q: Tensor, k: Tensor, v: Tensor, causal: bool, mask: Tensor | None) -> Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, q_len, k_len)
    allowed = torch.ones(q.size(2), k.size(2), dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed & mask
    has_key = allowed.any(dim=-1, keepdim=True)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return torch.where(has_key, torch.nan_to_num(weights), 0.0) @ v


def check_tiled_attention(fn: Callable) -> None:
    """``fn(query, key, value, block_size, causal=False, mask=None)`` must equal attention (the course's rule: a query
    with no visible key gets 0) without causal mask and with it, for block sizes that do and do not divide the
    length, and with a mask that hides every key from some queries."""
    gen = torch.Generator().manual_seed(18)

    def qkv(q_len, k_len, d_k=8, rising=False):
        q = torch.randn(2, 2, q_len, d_k, generator=gen)
        k = torch.randn(2, 2, k_len, d_k, generator=gen)
        if rising:  # later keys score higher: the running maximum grows at every tile
            k = k + 0.4 * torch.arange(k_len).view(1, 1, k_len, 1) * q.mean(dim=2, keepdim=True).sign()
        return q, k, torch.randn(2, 2, k_len, d_k, generator=gen)

    cases = [(qkv(12, 12, rising=True), 4, False, None), (qkv(13, 13), 5, False, None), (qkv(9, 14), 4, False, None),
             (qkv(12, 12), 4, True, None), (qkv(13, 13, rising=True), 5, True, None), (qkv(16, 16), 16, True, None)]
    for (q, k, v), block, causal, mask in cases:
        what = (f"your function(query {tuple(q.shape)}, key {tuple(k.shape)}, value, block_size={block}, "
                f"causal={causal})")
        got = output_of(call(fn, q.clone(), k.clone(), v.clone(), block, causal, what=what))
        want = _reference(q, k, v, causal, None)
        if close(got, want):
            continue
        expect(got.shape == want.shape, f"{what} returned shape {tuple(got.shape)}, expected (batch, heads, q_len, "
                                        f"d_v) = {tuple(want.shape)}")
        expect(not torch.isnan(got).any(), f"{what} returned NaN where every query sees at least one key: a -inf "
                                           "maximum or a 0 sum somewhere? " + NAN_QUERY)
        for bug, hint in (("no_rescale", NO_RESCALE_BOTH), ("no_rescale_acc", NO_RESCALE_ACC),
                          ("no_rescale_sum", NO_RESCALE_SUM), ("per_block", PER_BLOCK_ATT),
                          ("causal_local", CAUSAL_LOCAL)):
            if close(got, _tiled(q, k, v, block, causal, None, bug)):
                raise Mistake(hint)
        raise Mistake(f"{what} differs from softmax(Q K^T / sqrt(d_k)) V (largest difference "
                      f"{(got.float() - want.float()).abs().max().item():.3g})")
    q, k, v = qkv(10, 10)
    mask = torch.ones(2, 2, 10, 10, dtype=torch.bool)
    mask[0, 1, 3] = False  # this query sees no key
    mask[1, :, :, 6:] = False  # padding
    what = "your function(query (2, 2, 10, 8), key, value, block_size=4, causal=False, mask with a row of False)"
    got = output_of(call(fn, q.clone(), k.clone(), v.clone(), 4, False, mask.clone(), what=what))
    expect(not torch.isnan(got).any(), NAN_QUERY)
    want = _reference(q, k, v, False, mask)
    expect(close(got, want), f"{what} differs from attention with the mask (True = may attend; a query that sees no "
                             "key gets 0)")
    passed("check_tiled_attention", f"{len(cases) + 1} cases (tiles that divide the length and that do not, causal, "
                                    "a growing maximum, a query that sees no key) equal attention")


def check_arithmetic_intensity(fn: Callable) -> None:
    """``fn(m, k, n, bytes_per_number)``: FLOPs per byte of ``(m, k) @ (k, n)``, ``2 m k n`` FLOPs over
    ``(m k + k n + m n) x bytes_per_number`` bytes moved (each input read once, the output written once)."""
    cases = [(1, 4096, 4096, 2), (4096, 4096, 4096, 2), (512, 64, 512, 4), (1, 768, 768, 4), (128, 256, 32, 8)]
    for m, k, n, size in cases:
        flops, moved = 2 * m * k * n, (m * k + k * n + m * n) * size
        want = flops / moved
        what = f"your function(m={m}, k={k}, n={n}, bytes_per_number={size})"
        got = call(fn, m, k, n, size, what=what)
        expect(got is not None, "your code returned None: not written yet, or did you forget a `return`?")
        if isinstance(got, Tensor) and got.numel() == 1:
            got = got.item()
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"{what} returned {type(got).__name__}, expected a number (FLOPs per byte)")
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        suspects = [
            (flops / 2 / moved, "FLOPs counted as m*k*n: each of the m*k*n multiply-adds is two floating-point "
                                "operations, a multiplication and an addition, so 2*m*k*n"),
            (flops / ((m * k + k * n) * size), "the output is not counted: the (m, n) result is written to memory, "
                                               "m*n more numbers moved"),
            (flops / (moved * 8), "bits, not bytes: bytes_per_number is already in bytes (4 for float32)"),
            (flops / (m * k + k * n + m * n), "bytes_per_number is missing: the traffic is numbers moved x bytes "
                                              "per number"),
            (moved / flops, "upside down: intensity is FLOPs per byte, 2*m*k*n / bytes moved"),
        ]
        for value, hint in suspects:
            if math.isclose(got, value, rel_tol=1e-6):
                raise Mistake(hint)
        raise Mistake(f"{what} returned {got:.4g}, expected 2*m*k*n / ((m*k + k*n + m*n) * bytes) = {want:.4g}")
    passed("check_arithmetic_intensity", f"{len(cases)} products, a matrix-vector one among them, match "
                                         "2 m k n / ((m k + k n + m n) x bytes)")
