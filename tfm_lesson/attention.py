"""Scaled dot-product attention and multi-head attention (paper, section 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Two paths that give the same numbers (tests prove it):
- the explicit path, :func:`scaled_dot_product_attention`, which you can read and which hands out the weights;
- the fast path, ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels), used by
  :class:`MultiHeadAttention` whenever the weights are not asked for.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_dtype, check_features, check_positive_int, check_probability
from .cache import CrossAttentionCache, KVCache, check_attention_cache
from .masks import check_mask

__all__ = ["scaled_dot_product_attention", "fast_attention", "MultiHeadAttention"]


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must be shaped (..., seq_len, d), got shape {tuple(t.shape)}")
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query and key must share d_k: query has {query.size(-1)} features, key has {key.size(-1)}")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key and value must have the same length: key has {key.size(-2)}, value has {value.size(-2)}")
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise ValueError(
            f"query, key and value must share their leading (batch, heads) dimensions: got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])}, {tuple(value.shape[:-2])}")


def _attention_weights(query: Tensor, key: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) with masked keys removed; a query with no visible key gets all zeros."""
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., q_len, k_len)
    if mask is None:
        return scores.softmax(dim=-1)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1): False for a fully masked query row
    # -inf is exact in every float dtype (unlike -1e9, which overflows float16). A fully masked row would be
    # softmax([-inf, ...]) = NaN, so such rows are left unmasked here and zeroed after the softmax.
    scores = scores.masked_fill(~(mask | ~has_key), float("-inf"))
    return scores.softmax(dim=-1).masked_fill(~has_key, 0.0)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: float | nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """The readable version of attention. Returns ``(output, weights)``.

    query ``(..., q_len, d_k)``, key ``(..., k_len, d_k)``, value ``(..., k_len, d_v)``;
    mask: boolean, True = may attend, broadcastable to ``(..., q_len, k_len)``;
    dropout: a probability (always applied, as in ``F.scaled_dot_product_attention``) or a dropout module.
    output ``(..., q_len, d_v)``, weights ``(..., q_len, k_len)``; rows of weights sum to 1, or to 0 for a
    query whose keys are all masked (its output is then 0, never NaN).
    """
    _check_qkv(query, key, value)
    if mask is not None:
        lead = {2: (), 3: ("batch",), 4: ("batch", "heads")}.get(query.dim(), tuple(f"dim{i}" for i in range(query.dim() - 2)))
        check_mask(mask, (*query.shape[:-2], query.size(-2), key.size(-2)), "mask", dims=(*lead, "q_len", "k_len"))
    weights = _attention_weights(query, key, mask)  # (..., q_len, k_len)
    if isinstance(dropout, nn.Module):
        weights = dropout(weights)
    elif dropout:
        weights = F.dropout(weights, p=check_probability(dropout, "dropout"), training=True)
    out = weights @ value  # (..., q_len, d_v)
    if mask is not None:  # a fully masked query's weights are all 0: its output is 0, even where a value is NaN
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out, weights  # (..., q_len, d_v), (..., q_len, k_len)


def fast_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                   dropout_p: float = 0.0) -> Tensor:
    """The fast path: ``F.scaled_dot_product_attention`` (fused kernels), giving what the explicit path gives.

    query ``(batch, heads, q_len, d_k)``, key/value ``(batch, heads, k_len, d_k)``, mask boolean (True = may
    attend) broadcastable to ``(batch, heads, q_len, k_len)``. As in :func:`scaled_dot_product_attention`: a
    query with no visible key gets 0 (never NaN), a NaN/inf key hidden from every query is ignored, and a NaN or
    inf query gives NaN (some fused kernels would return finite numbers). Returns ``(batch, heads, q_len, d_k)``.

    The guards cost a few small elementwise kernels and no device-to-host copy: on a GPU, where small shapes
    are bound by kernel launches, each one counts (BENCHMARKS.md).
    """
    has_key = attn_mask = None
    if mask is not None:
        if mask.dim() < 4:  # e.g. a (k_len,) key mask: the steps below need (batch|1, heads|1, q_len|1, k_len)
            mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        has_key = mask.any(dim=-1, keepdim=True)  # (batch, heads|1, q_len, 1): False for a fully masked query
        attn_mask = torch.where(has_key, mask, True)  # fully masked rows: attend anywhere, zeroed below (never NaN)
        # Keys no query may see are set to 0: they get no weight either way, and a NaN or inf there is ignored.
        seen = mask.any(dim=-2).unsqueeze(-1)  # (batch|1, heads|1, k_len, 1)
        key = torch.where(seen, key, 0.0)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p)
    # q - q is 0 where the query is finite and NaN where it holds a NaN or an inf (x + 0 == x exactly). Its
    # derivative is 0, so it is computed on a detached query: the backward pass does no work for it.
    q = query.detach()
    out = out + (q - q).sum(dim=-1, keepdim=True)  # (batch, heads, q_len, 1), broadcast over d_k
    if has_key is not None:
        out = torch.where(has_key, out, 0.0)
    return out  # (batch, heads, q_len, d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``Concat(head_1..head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The ``heads`` projections of size ``d_k = d_model / heads`` are stored side by side in one
    ``(d_model, d_model)`` matrix per role: ``w_q``, ``w_k``, ``w_v``, and the output projection ``w_o``.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(heads, "heads")
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be divisible by heads={heads} (d_k = d_model / heads)")
        self.d_model, self.heads, self.d_k = d_model, heads, d_model // heads
        self.dropout = check_probability(dropout, "dropout")
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self._recorder: tuple | None = None  # set by tfm_lesson.record_attention

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.d_k).transpose(1, 2)  # (batch, heads, len, d_k)

    def _merge_heads(self, x: Tensor) -> Tensor:
        batch, _, length, _ = x.shape
        # the transpose first: (batch, heads, len, d_k) -> (batch, len, heads, d_k) -> (batch, len, d_model)
        return x.transpose(1, 2).reshape(batch, length, self.d_model)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if query is key and key is value:  # self-attention: one fused matmul for Q, K and V
            w = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight])  # (3 d_model, d_model)
            b = None if self.w_q.bias is None else torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias])
            batch, length, _ = query.shape
            qkv = F.linear(query, w, b).view(batch, length, 3, self.heads, self.d_k)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, len, d_k)
            return q, k, v
        return self._split_heads(self.w_q(query)), self._split_heads(self.w_k(key)), self._split_heads(self.w_v(value))

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | CrossAttentionCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """query ``(batch, q_len, d_model)``, key/value ``(batch, k_len, d_model)``, mask broadcastable to
        ``(batch, heads, q_len, k_len)`` (True = may attend).

        Returns ``(output, weights)``: output ``(batch, q_len, d_model)``; weights ``(batch, heads, q_len,
        k_len)`` from the explicit path when ``need_weights`` is true, else ``None`` (fast path).

        ``cache`` (chapter 15): a :class:`KVCache` appends this call's keys and values to the earlier ones, so
        ``k_len`` counts cached and new positions; a filled :class:`CrossAttentionCache` reuses the memory's
        keys and values instead of projecting ``key`` and ``value`` again.
        """
        check_features(query, "query", self.d_model)
        check_features(key, "key", self.d_model)
        check_features(value, "value", self.d_model)
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_dtype(t, name, self.w_q.weight, "MultiHeadAttention")
        batch, q_len, k_len = query.size(0), query.size(1), key.size(1)
        if key.size(0) != batch or value.size(0) != batch:
            raise ValueError(f"query, key and value must share the batch size: got {batch}, {key.size(0)}, {value.size(0)}")
        if value.size(1) != k_len:
            raise ValueError(f"key and value must have the same length: key has {k_len}, value has {value.size(1)}")
        check_attention_cache(cache, query, key)  # the right kind of cache, for this batch and memory (cache.py)
        if isinstance(cache, CrossAttentionCache) and cache.filled:  # the memory's keys and values: computed once
            q, k, v = self._split_heads(self.w_q(query)), cache.key, cache.value
        else:
            q, k, v = self._project(query, key, value)  # each (batch, heads, len, d_k)
            if cache is not None:
                k, v = cache.update(k, v)  # earlier positions' keys and values + the new ones
        if mask is not None:
            check_mask(mask, (batch, self.heads, q_len, k.size(2)), "mask")
        p = self.dropout if self.training else 0.0

        weights = None
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout=p or None)
        else:
            out = fast_attention(q, k, v, mask, p)  # (batch, heads, q_len, d_k)
        if self._recorder is not None:
            record, name = self._recorder
            record.add(name, weights if weights is not None else _attention_weights(q, k, mask))
        return self.w_o(self._merge_heads(out)), weights  # (batch, q_len, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, d_k={self.d_k}, dropout={self.dropout}"
