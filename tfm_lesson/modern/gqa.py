"""Grouped-query attention, GQA (Ainslie et al., 2023): fewer key/value heads than query heads.

Multi-head attention gives each of its ``heads`` query heads its own key head and value head. During
generation the keys and values of every earlier token are kept in the KV cache, and that cache, not the
weights, is what fills the memory of a long conversation. GQA keeps ``heads`` query heads but only
``kv_heads`` key/value heads; each key/value head serves a *group* of ``heads / kv_heads`` consecutive
query heads. The cache shrinks by that factor. ``kv_heads = heads`` is multi-head attention;
``kv_heads = 1`` is multi-query attention (Shazeer, 2019).

Query head ``h`` reads key/value head ``h // (heads / kv_heads)``: the key/value heads are repeated with
``repeat_interleave`` (``k0 k0 k1 k1``), not tiled with ``repeat`` (``k0 k1 k0 k1``). This is the order of
``transformers``' ``repeat_kv`` and of ``F.scaled_dot_product_attention(..., enable_gqa=True)``.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validate import check_dtype, check_features, check_positive_int, check_probability, renamed_keywords
from ..attention import fast_attention, scaled_dot_product_attention
from ..cache import KVCache
from ..masks import check_mask
from .rotary import RotaryEmbedding

__all__ = ["GroupedQueryAttention", "repeat_kv", "kv_cache_nbytes"]


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """``(batch, kv_heads, len, d_k)`` -> ``(batch, kv_heads * groups, len, d_k)``, each head repeated ``groups``
    times in place (``k0 k0 k1 k1``): query head ``h`` meets key/value head ``h // groups``."""
    check_positive_int(groups, "groups")
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


@renamed_keywords(layers="num_layers")
def kv_cache_nbytes(batch: int, length: int, num_layers: int, kv_heads: int, d_k: int,
                    dtype: torch.dtype = torch.float32) -> int:
    """Bytes of a full KV cache: keys and values, ``2 x num_layers x batch x kv_heads x length x d_k`` numbers."""
    for name, v in (("batch", batch), ("length", length), ("num_layers", num_layers), ("kv_heads", kv_heads),
                    ("d_k", d_k)):
        check_positive_int(v, name)
    return 2 * num_layers * batch * kv_heads * length * d_k * torch.empty((), dtype=dtype).element_size()


class GroupedQueryAttention(nn.Module):
    """Self-attention with ``heads`` query heads and ``kv_heads`` key/value heads (``kv_heads`` divides ``heads``).

    ``w_q``: ``d_model -> heads * d_k``; ``w_k``, ``w_v``: ``d_model -> kv_heads * d_k``; ``w_o``: back to
    ``d_model``; ``d_k = d_model / heads``. ``rotary``: a :class:`RotaryEmbedding` applied to queries and keys
    after the projections (``None``: positions come from elsewhere, e.g. learned embeddings).
    ``forward`` takes the arguments of :class:`tfm_lesson.MultiHeadAttention` (``cache`` included), so the
    two are interchangeable inside a block.
    """

    def __init__(self, d_model: int, heads: int, kv_heads: int | None = None, dropout: float = 0.0,
                 bias: bool = False, rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(heads, "heads")
        kv_heads = heads if kv_heads is None else check_positive_int(kv_heads, "kv_heads")
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be divisible by heads={heads} (d_k = d_model / heads)")
        if heads % kv_heads:
            raise ValueError(f"kv_heads={kv_heads} must divide heads={heads}: each key/value head serves a group of "
                             "heads / kv_heads query heads")
        self.d_model, self.heads, self.kv_heads, self.d_k = d_model, heads, kv_heads, d_model // heads
        self.groups = heads // kv_heads
        if rotary is not None and (not isinstance(rotary, RotaryEmbedding) or rotary.d_k != self.d_k):
            raise ValueError(f"rotary must be a RotaryEmbedding over d_k={self.d_k} features, got {rotary!r}")
        self.dropout = check_probability(dropout, "dropout")
        self.w_q = nn.Linear(d_model, heads * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(heads * self.d_k, d_model, bias=bias)
        self.rotary = rotary

    def _split(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.d_k).transpose(1, 2)  # (batch, heads, len, d_k)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_weights: bool = False, cache=None) -> tuple[Tensor, Tensor | None]:
        """query ``(batch, q_len, d_model)``, key/value ``(batch, k_len, d_model)`` (the same tensor in
        self-attention); mask broadcastable to ``(batch, heads, q_len, k_len)``, True = may attend, where
        ``k_len`` counts the cached positions too. ``cache``: a :class:`tfm_lesson.cache.KVCache`; it stores
        ``kv_heads`` heads of rotated keys, and the new tokens are rotated from position ``len(cache)``.

        Returns ``(output (batch, q_len, d_model), weights (batch, heads, q_len, k_len) or None)``.
        """
        check_features(query, "query", self.d_model)
        check_features(key, "key", self.d_model)
        check_features(value, "value", self.d_model)
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_dtype(t, name, self.w_q.weight, "GroupedQueryAttention")
        batch, q_len = query.shape[:2]
        if key.size(0) != batch or value.size(0) != batch or key.size(1) != value.size(1):
            raise ValueError(f"query, key and value must share the batch size and key/value their length: got "
                             f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache (GroupedQueryAttention is self-attention), got "
                                f"{type(cache).__name__}")
            cache.check_use(query, key)
        offset = 0 if cache is None else len(cache)  # the position of the first new token
        q = self._split(self.w_q(query), self.heads)  # (batch, heads, q_len, d_k)
        k = self._split(self.w_k(key), self.kv_heads)  # (batch, kv_heads, new_len, d_k)
        v = self._split(self.w_v(value), self.kv_heads)  # (batch, kv_heads, new_len, d_k)
        if self.rotary is not None:
            q, k = self.rotary(q, offset), self.rotary(k, offset)
        if cache is not None:
            k, v = cache.update(k, v)  # (batch, kv_heads, offset + new_len, d_k): only kv_heads heads are stored
        k_len = k.size(2)
        if mask is not None:
            check_mask(mask, (batch, self.heads, q_len, k_len), "mask")
        k, v = repeat_kv(k, self.groups), repeat_kv(v, self.groups)  # (batch, heads, k_len, d_k)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout=p or None)
        else:
            out = fast_attention(q, k, v, mask, p)  # (batch, heads, q_len, d_k), as the explicit path gives
        out = out.transpose(1, 2).reshape(batch, q_len, self.heads * self.d_k)  # merge heads
        return self.w_o(out), weights  # (batch, q_len, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, heads={self.heads}, kv_heads={self.kv_heads}, d_k={self.d_k}"
