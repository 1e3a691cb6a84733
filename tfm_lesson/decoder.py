"""The decoder (paper, section 3.1): masked self-attention, cross-attention over the encoder's output
(the *memory*), then feed-forward; each sub-layer with residual, dropout and layer norm.
"""
from __future__ import annotations

from torch import Tensor, nn

from ._validate import check_features, check_positive_int, site_probability
from .attention import MultiHeadAttention
from .cache import CrossAttentionCache, DecoderCache, KVCache
from .feedforward import PositionwiseFeedForward
from .norm import LayerNorm

__all__ = ["DecoderLayer", "Decoder"]


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention (queries from the decoder, keys and values from the memory),
    feed-forward. ``norm_first=False`` is the paper's post-norm. Matches ``nn.TransformerDecoderLayer``.

    Dropout sites as in :class:`~tfm_lesson.encoder.EncoderLayer`: ``dropout`` on each sub-layer's output (the
    paper's), ``attention_dropout`` on both attentions' weights, ``activation_dropout`` on the feed-forward hidden
    units (each ``dropout`` when None)."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", eps: float = 1e-5, bias: bool = True,
                 attention_dropout: float | None = None, activation_dropout: float | None = None) -> None:
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        attention_dropout = site_probability(attention_dropout, "attention_dropout", dropout)
        activation_dropout = site_probability(activation_dropout, "activation_dropout", dropout)
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout, bias)
        self.cross_attn = MultiHeadAttention(d_model, heads, attention_dropout, bias)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, activation_dropout, activation, bias)
        self.norm1 = LayerNorm(d_model, eps, bias)
        self.norm2 = LayerNorm(d_model, eps, bias)
        self.norm3 = LayerNorm(d_model, eps, bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _self_attend(self, x: Tensor, mask: Tensor | None, cache: KVCache | None = None) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask, cache=cache)[0])

    def _cross_attend(self, x: Tensor, memory: Tensor, mask: Tensor | None,
                      cache: CrossAttentionCache | None = None) -> Tensor:
        return self.dropout2(self.cross_attn(x, memory, memory, mask, cache=cache)[0])  # query: decoder; key, value: memory

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.dropout3(self.feed_forward(x))

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, cache: DecoderCache | None = None) -> Tensor:
        """x ``(batch, tgt_len, d_model)``, memory ``(batch, src_len, d_model)``;
        tgt_mask broadcastable to ``(batch, heads, tgt_len, tgt_len)`` (usually causal and padding),
        memory_mask to ``(batch, heads, tgt_len, src_len)`` (usually the source padding).

        ``cache`` (chapter 15): x holds only the new positions; self-attention also sees the cached ones
        (tgt_mask then covers ``(tgt_len, cached + tgt_len)``), cross-attention reuses the memory's keys and values.
        """
        check_features(x, "x", self.d_model)
        check_features(memory, "memory", self.d_model)
        self_cache, cross_cache = (None, None) if cache is None else cache
        if self.norm_first:
            x = x + self._self_attend(self.norm1(x), tgt_mask, self_cache)
            x = x + self._cross_attend(self.norm2(x), memory, memory_mask, cross_cache)
            return x + self._feed_forward(self.norm3(x))
        x = self.norm1(x + self._self_attend(x, tgt_mask, self_cache))
        x = self.norm2(x + self._cross_attend(x, memory, memory_mask, cross_cache))
        return self.norm3(x + self._feed_forward(x))


class Decoder(nn.Module):
    """``num_layers`` decoder layers, optionally followed by a final LayerNorm (``final_norm`` as in
    :class:`tfm_lesson.Encoder`); the dropout settings go to every layer."""

    def __init__(self, d_model: int, heads: int, d_ff: int, num_layers: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", eps: float = 1e-5, bias: bool = True,
                 final_norm: bool | None = None, attention_dropout: float | None = None,
                 activation_dropout: float | None = None) -> None:
        super().__init__()
        check_positive_int(num_layers, "num_layers")
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, heads, d_ff, dropout, norm_first, activation, eps, bias, attention_dropout,
                         activation_dropout) for _ in range(num_layers))
        self.norm = LayerNorm(d_model, eps, bias) if (norm_first if final_norm is None else final_norm) else None

    def new_cache(self, max_len: int | None = None) -> list[DecoderCache]:
        """One empty :class:`DecoderCache` per layer (``max_len`` target positions reserved, optional)."""
        return [DecoderCache(KVCache(max_len), CrossAttentionCache()) for _ in self.layers]

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, cache: list[DecoderCache] | None = None) -> Tensor:
        """x ``(batch, tgt_len, d_model)`` -> ``(batch, tgt_len, d_model)``; ``cache``: from :meth:`new_cache`."""
        if cache is not None and len(cache) != len(self.layers):
            raise ValueError(f"cache must hold one DecoderCache per layer ({len(self.layers)}), got {len(cache)}")
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, None if cache is None else cache[i])
        return x if self.norm is None else self.norm(x)
