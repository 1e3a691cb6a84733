"""The encoder (paper, section 3.1): a stack of identical layers, each self-attention then feed-forward,
each sub-layer wrapped in a residual connection and a layer norm.

    post-norm (the paper):  x = LayerNorm(x + Sublayer(x))
    pre-norm (later work):  x = x + Sublayer(LayerNorm(x))
"""
from __future__ import annotations

from torch import Tensor, nn

from ._validate import check_features, check_positive_int, site_probability
from .attention import MultiHeadAttention
from .feedforward import PositionwiseFeedForward
from .norm import LayerNorm

__all__ = ["EncoderLayer", "Encoder"]


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward sub-layers with residuals, dropout and layer norms.

    ``norm_first=False`` is the paper's post-norm; ``True`` is pre-norm. Structure and parameter order
    match ``nn.TransformerEncoderLayer`` (see ``tfm_lesson.interop``).

    Dropout sites: ``dropout`` on each sub-layer's output before the residual sum (the paper's residual dropout,
    section 5.4); ``attention_dropout`` on the attention weights and ``activation_dropout`` on the feed-forward
    hidden units (not in the paper; tensor2tensor's later ``attention_dropout`` and ``relu_dropout``, and what
    ``nn.TransformerEncoderLayer`` does). Each of the two is ``dropout`` when None; 0.0 switches it off.
    """

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", eps: float = 1e-5, bias: bool = True,
                 attention_dropout: float | None = None, activation_dropout: float | None = None) -> None:
        super().__init__()
        self.d_model, self.norm_first = d_model, norm_first
        attention_dropout = site_probability(attention_dropout, "attention_dropout", dropout)
        activation_dropout = site_probability(activation_dropout, "activation_dropout", dropout)
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout, bias)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, activation_dropout, activation, bias)
        self.norm1 = LayerNorm(d_model, eps, bias)
        self.norm2 = LayerNorm(d_model, eps, bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _attend(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask)[0])

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.dropout2(self.feed_forward(x))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x ``(batch, src_len, d_model)``; mask broadcastable to ``(batch, heads, src_len, src_len)``."""
        check_features(x, "x", self.d_model)
        if self.norm_first:
            x = x + self._attend(self.norm1(x), mask)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._attend(x, mask))
        return self.norm2(x + self._feed_forward(x))


class Encoder(nn.Module):
    """``num_layers`` encoder layers, optionally followed by a final LayerNorm.

    ``final_norm=None`` follows the placement: none for post-norm (the paper), one for pre-norm (where the
    last residual stream is otherwise left unnormalised). ``nn.TransformerEncoder`` inside ``nn.Transformer``
    always has one; pass ``final_norm=True`` to match it. The dropout settings go to every layer
    (see :class:`EncoderLayer`).
    """

    def __init__(self, d_model: int, heads: int, d_ff: int, num_layers: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", eps: float = 1e-5, bias: bool = True,
                 final_norm: bool | None = None, attention_dropout: float | None = None,
                 activation_dropout: float | None = None) -> None:
        super().__init__()
        check_positive_int(num_layers, "num_layers")
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, heads, d_ff, dropout, norm_first, activation, eps, bias, attention_dropout,
                         activation_dropout) for _ in range(num_layers))
        self.norm = LayerNorm(d_model, eps, bias) if (norm_first if final_norm is None else final_norm) else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x ``(batch, src_len, d_model)`` -> memory ``(batch, src_len, d_model)``."""
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)
