"""Attention that fits: the online softmax and tiled (FlashAttention) attention, forward and backward (chapter 18).

- :func:`online_softmax`: softmax over the last axis; its maximum and sum in one pass over blocks, a running
  maximum and a running sum (Milakov & Gimelshein, 2018); the maximum may grow at any block, and the sum is
  rescaled when it does.
- :func:`flash_attention`: ``softmax(Q K^T / sqrt(d_k)) V`` over blocks of queries and keys (Dao et al., 2022):
  no ``(q_len, k_len)`` matrix is ever formed, only one ``(block, block)`` tile of scores at a time, and per query
  a running maximum ``m``, a running sum ``l`` and an output accumulator. Its backward pass (:class:`FlashAttention`)
  keeps, besides Q, K and V, only the output and the log-sum-exp of each query's scores, and recomputes each
  tile of probabilities.

The numbers are those of :func:`tfm_lesson.attention.scaled_dot_product_attention` (tests prove it): masks are
boolean, True = may attend, and a query that may see no key gets the output 0, never NaN.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._validate import check_positive_int
from .masks import check_mask

__all__ = ["online_softmax", "flash_attention", "FlashAttention", "attention_lse"]


def online_softmax(x: Tensor, block_size: int = 64) -> Tensor:
    """Softmax over the last axis of ``x``, reading it one block of ``block_size`` columns at a time.

    One pass keeps, per row, the largest score seen so far ``m`` and the sum ``d`` of ``exp(score - m)`` so far.
    When a block brings a larger maximum ``m'``, the old sum was measured against the old maximum and is rescaled:
    ``d <- d * exp(m - m') + sum(exp(block - m'))``. A second pass writes ``exp(x - m) / d``. Rows that are all
    ``-inf`` give 0 (nothing to attend to), not NaN.
    """
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 1:
        got = f"dtype {x.dtype}, shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating-point tensor with at least one axis, got {got}")
    check_positive_int(block_size, "block_size")
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype, device=x.device)  # (...,): running maximum
    d = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # (...,): running sum of exp(x - m)
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]  # (..., block)
        m_new = torch.maximum(m, block.amax(dim=-1))
        safe = torch.where(torch.isinf(m_new) & (m_new < 0), 0.0, m_new)  # all -inf so far: subtract 0, not -inf
        d = d * torch.exp(m - safe) + torch.exp(block - safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    safe = torch.where(torch.isinf(m) & (m < 0), 0.0, m)
    out = torch.exp(x - safe.unsqueeze(-1)) / d.unsqueeze(-1)
    return torch.where((d > 0).unsqueeze(-1), out, 0.0)


def _check_inputs(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, block_size: object,
                  causal: object) -> None:
    for name, t, dims in (("query", query, "(batch, heads, q_len, d_k)"), ("key", key, "(batch, heads, k_len, d_k)"),
                          ("value", value, "(batch, heads, k_len, d_v)")):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor shaped {dims}, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be shaped {dims}, got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(f"query, key and value must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    if key.device != query.device or value.device != query.device:
        raise ValueError(f"query, key and value must be on one device, got {query.device}, {key.device}, "
                         f"{value.device}")
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query and key must share d_k: query has {query.size(-1)} features, key has {key.size(-1)}")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key and value must have the same length: key has {key.size(-2)}, value has {value.size(-2)}")
    if not query.shape[:2] == key.shape[:2] == value.shape[:2]:
        raise ValueError(f"query, key and value must share (batch, heads): got {tuple(query.shape[:2])}, "
                         f"{tuple(key.shape[:2])}, {tuple(value.shape[:2])}")
    check_positive_int(block_size, "block_size")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if mask is not None:
        check_mask(mask, (query.size(0), query.size(1), query.size(2), key.size(2)), "mask")


def _as_4d(mask: Tensor | None) -> Tensor | None:
    """A mask broadcastable to (batch, heads, q_len, k_len), given four axes: (k_len,) -> (1, 1, 1, k_len)."""
    return None if mask is None else mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def _visible(mask: Tensor | None, causal: bool, q0: int, q1: int, k0: int, k1: int, device: torch.device,
             offset: int = 0) -> Tensor | None:
    """Which keys k0..k1-1 the queries q0..q1-1 may see, ``(batch|1, heads|1, block_q|1, block_k)`` or None (all).

    The causal rule compares *positions in the whole sequence*: query i sees key j when j <= i + offset, with
    i = q0 + row and j = k0 + column, not the row and column inside the tile. ``offset = k_len - q_len`` aligns
    the last query with the last key (bottom-right): the queries are the *last* q_len positions of the sequence.
    """
    allowed = None
    if mask is not None:
        allowed = mask[..., q0:q1, :] if mask.size(-2) > 1 else mask
        allowed = allowed[..., k0:k1] if mask.size(-1) > 1 else allowed
    if causal:
        rows = torch.arange(q0, q1, device=device).unsqueeze(-1)  # (block_q, 1): positions of the queries
        cols = torch.arange(k0, k1, device=device)  # (block_k,): positions of the keys
        below = cols <= rows + offset  # (block_q, block_k)
        allowed = below if allowed is None else allowed & below
    return allowed


def _negative_inf(t: Tensor) -> Tensor:
    return torch.isinf(t) & (t < 0)


def _forward(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, causal: bool,
             block_size: int) -> tuple[Tensor, Tensor]:
    """The tiled forward pass: returns the output ``(batch, heads, q_len, d_v)`` and the log-sum-exp of each query's
    scaled scores ``(batch, heads, q_len)`` (``-inf`` for a query that sees no key)."""
    batch, heads, q_len, d_k = query.shape
    k_len, d_v = key.size(2), value.size(3)
    scale, offset = 1.0 / math.sqrt(d_k), k_len - q_len  # offset: the queries are the sequence's last q_len positions
    out = query.new_zeros(batch, heads, q_len, d_v)
    lse = query.new_full((batch, heads, q_len), float("-inf"))
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        q_blk = query[:, :, q0:q1]  # (batch, heads, block_q, d_k)
        m = query.new_full((batch, heads, q1 - q0), float("-inf"))  # running maximum of each query's scores
        l = query.new_zeros(batch, heads, q1 - q0)  # running sum of exp(score - m)
        acc = query.new_zeros(batch, heads, q1 - q0, d_v)  # running sum of exp(score - m) * value
        for k0 in range(0, k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            if causal and k0 > q1 - 1 + offset:  # every key of this tile comes after every query of the tile: skip it
                break
            s = q_blk @ key[:, :, k0:k1].transpose(-2, -1) * scale  # (batch, heads, block_q, block_k)
            allowed = _visible(mask, causal, q0, q1, k0, k1, query.device, offset)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))  # (batch, heads, block_q)
            safe = torch.where(_negative_inf(m_new), 0.0, m_new)  # a query with no key yet: exp(-inf - 0) = 0
            p = torch.exp(s - safe.unsqueeze(-1))  # (batch, heads, block_q, block_k)
            alpha = torch.exp(m - safe)  # rescales what was summed against the old maximum
            l = alpha * l + p.sum(dim=-1)
            acc = alpha.unsqueeze(-1) * acc + p @ value[:, :, k0:k1]  # (batch, heads, block_q, d_v)
            m = m_new
        seen = l > 0  # False for a query that may see no key: its output is 0
        out[:, :, q0:q1] = torch.where(seen.unsqueeze(-1), acc / torch.where(seen, l, 1.0).unsqueeze(-1), 0.0)
        lse[:, :, q0:q1] = torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), float("-inf"))
    return out, lse


def _backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, lse: Tensor,
              mask: Tensor | None, causal: bool, block_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of the tiled attention, tile by tile: each tile's probabilities are recomputed from the queries,
    the keys and the saved log-sum-exp, ``P = exp(S - lse)``, never stored."""
    q_len, k_len, d_k = query.size(2), key.size(2), query.size(3)
    scale, offset = 1.0 / math.sqrt(d_k), k_len - q_len
    grad_q, grad_k, grad_v = torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)
    delta = (grad_out * out).sum(dim=-1)  # (batch, heads, q_len): sum_j P_ij dP_ij = rowsum(dO * O)
    safe_lse = torch.where(_negative_inf(lse), 0.0, lse)
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        q_blk, do_blk = query[:, :, q0:q1], grad_out[:, :, q0:q1]  # (batch, heads, block_q, d_k | d_v)
        for k0 in range(0, k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            if causal and k0 > q1 - 1 + offset:
                break
            k_blk, v_blk = key[:, :, k0:k1], value[:, :, k0:k1]
            s = q_blk @ k_blk.transpose(-2, -1) * scale  # (batch, heads, block_q, block_k)
            allowed = _visible(mask, causal, q0, q1, k0, k1, query.device, offset)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            p = torch.exp(s - safe_lse[:, :, q0:q1].unsqueeze(-1))  # the tile of probabilities, recomputed
            p = torch.where(_negative_inf(lse[:, :, q0:q1]).unsqueeze(-1), 0.0, p)  # no key seen: no weight
            grad_v[:, :, k0:k1] += p.transpose(-2, -1) @ do_blk  # (batch, heads, block_k, d_v)
            dp = do_blk @ v_blk.transpose(-2, -1)  # (batch, heads, block_q, block_k)
            ds = p * (dp - delta[:, :, q0:q1].unsqueeze(-1))  # softmax's backward, row by row
            grad_q[:, :, q0:q1] += ds @ k_blk * scale
            grad_k[:, :, k0:k1] += ds.transpose(-2, -1) @ q_blk * scale
    return grad_q, grad_k, grad_v


class FlashAttention(torch.autograd.Function):
    """Tiled attention whose backward pass recomputes the probabilities: it saves the inputs, the output and one
    number per query (the log-sum-exp of its scores), never a ``(q_len, k_len)`` matrix.

    Use it through :func:`flash_attention`, which checks the arguments first.
    """

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, causal: bool,
                block_size: int) -> Tensor:
        out, lse = _forward(query, key, value, mask, causal, block_size)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.mask, ctx.causal, ctx.block_size = mask, causal, block_size
        return out

    @staticmethod
    @once_differentiable  # a gradient of the gradient would need lse's own derivative: refused with a clear error
    def backward(ctx, grad_out: Tensor):
        query, key, value, out, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v = _backward(grad_out, query, key, value, out, lse, ctx.mask, ctx.causal,
                                           ctx.block_size)
        return grad_q, grad_k, grad_v, None, None, None


def flash_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, block_size: int = 64,
                    causal: bool = False) -> Tensor:
    """Attention ``softmax(Q K^T / sqrt(d_k)) V`` computed tile by tile, with the memory of the tiles only.

    query ``(batch, heads, q_len, d_k)``, key ``(batch, heads, k_len, d_k)``, value ``(batch, heads, k_len, d_v)``;
    mask: boolean, True = may attend, broadcastable to ``(batch, heads, q_len, k_len)`` (a padding mask
    ``(batch, 1, 1, k_len)``, a causal mask ``(q_len, k_len)``, ...); ``causal=True`` applies the causal rule
    itself and skips the tiles that lie wholly above the diagonal: query i sees keys 0..i + k_len - q_len, the
    mask aligned bottom-right as in FlashAttention 2.1 and later, so that ``q_len`` new queries against
    ``k_len`` cached keys (one decode step: ``q_len = 1``) see the whole past; with ``q_len = k_len`` this is the
    square rule j <= i (SDPA's ``is_causal``, which aligns top-left, differs only when the lengths differ); a
    query left with no key (``q_len > k_len``) gets 0. ``block_size``: the number of queries and of keys per
    tile, any positive int (the last tile may be shorter).

    Returns ``(batch, heads, q_len, d_v)``; a query that may see no key gets 0. Differentiable: the backward pass
    recomputes each tile (:class:`FlashAttention`).
    """
    _check_inputs(query, key, value, mask, block_size, causal)
    return FlashAttention.apply(query, key, value, _as_4d(mask), causal, block_size)


def attention_lse(query: Tensor, key: Tensor, mask: Tensor | None = None, block_size: int = 64,
                  causal: bool = False) -> Tensor:
    """The log-sum-exp of each query's scaled scores, ``log sum_j exp(q_i k_j / sqrt(d_k))`` over the keys it may
    see, ``(batch, heads, q_len)``; ``-inf`` for a query that sees no key. What the backward pass keeps per query."""
    value = key.new_zeros(*key.shape[:3], 1)
    _check_inputs(query, key, value, mask, block_size, causal)
    with torch.no_grad():
        return _forward(query, key, value, _as_4d(mask), causal, block_size)[1]
