"""The position-wise feed-forward network (paper, section 3.3).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

The same two-layer MLP is applied to every position independently: ``d_model -> d_ff -> d_model``.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_features, check_positive_int, check_probability

__all__ = ["PositionwiseFeedForward", "ACTIVATIONS"]

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu, "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's GELU: the tanh approximation
}


class PositionwiseFeedForward(nn.Module):
    """``w_2(dropout(activation(w_1(x))))``; ``activation`` is ``"relu"`` (the paper) or ``"gelu"``."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.d_ff = check_positive_int(d_model, "d_model"), check_positive_int(d_ff, "d_ff")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(self, x: Tensor) -> Tensor:
        """x ``(batch, seq_len, d_model)`` -> ``(batch, seq_len, d_model)``."""
        check_features(x, "x", self.d_model)
        hidden = ACTIVATIONS[self.activation](self.w_1(x))  # (batch, seq_len, d_ff)
        return self.w_2(self.dropout(hidden))  # (batch, seq_len, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"
