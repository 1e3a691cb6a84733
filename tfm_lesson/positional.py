"""Positional encodings (paper, section 3.5). Attention is blind to order; these add it back.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._validate import check_features, check_positive_int

__all__ = ["sinusoidal_table", "SinusoidalPositionalEncoding", "LearnedPositionalEncoding"]


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """The ``(max_len, d_model)`` table of the paper: even columns sin, odd columns cos."""
    check_positive_int(max_len, "max_len")
    check_positive_int(d_model, "d_model")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    rate = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(d/2),)
    angle = position * rate  # (max_len, ceil(d_model/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class _PositionalEncoding(nn.Module):
    """Shared checks and ``forward``; subclasses define ``encoding(length, offset)``, the
    ``(length, d_model)`` encodings of positions ``offset .. offset+length-1``."""

    d_model: int
    max_len: int

    def _check(self, x: Tensor, offset: int) -> int:
        check_features(x, "x", self.d_model)
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        length = x.size(1)
        if offset + length > self.max_len:
            raise ValueError(
                f"x has seq_len={length} (from offset {offset}) but the positional table holds max_len={self.max_len} "
                "positions; build the encoding with a larger max_len")
        return length

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x ``(batch, seq_len, d_model)`` -> x + PE[offset : offset+seq_len], broadcast over the batch."""
        length = self._check(x, offset)
        return x + self.encoding(length, offset).to(x.dtype)  # (batch, seq_len, d_model) + (seq_len, d_model)


class SinusoidalPositionalEncoding(_PositionalEncoding):
    """Fixed sinusoids; no parameters. The table is a buffer, so it follows ``.to(device)``."""

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)  # (max_len, d_model)

    def encoding(self, length: int, offset: int = 0) -> Tensor:
        return self.pe[offset: offset + length]

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEncoding(_PositionalEncoding):
    """One trained vector per position (the paper's alternative, table 3 row E; BERT and GPT use it)."""

    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        self.d_model, self.max_len = check_positive_int(d_model, "d_model"), check_positive_int(max_len, "max_len")
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def encoding(self, length: int, offset: int = 0) -> Tensor:
        return self.embedding.weight[offset: offset + length]

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"
