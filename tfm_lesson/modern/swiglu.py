"""The gated feed-forward network SwiGLU (Shazeer, 2020), used by Llama, Mistral, Qwen and others.

    FFN_SwiGLU(x) = (SiLU(x W) * (x V)) W_2            SiLU(z) = z * sigmoid(z)

The 2017 FFN passes ``x`` through one matrix and an activation. SwiGLU computes *two* projections of
``x``: a gate ``x W`` (through SiLU, also called Swish) and a value ``x V`` (linear), multiplies them
element by element, and projects back with ``W_2``. The gate decides, feature by feature, how much of the
value passes. ``transformers`` calls W, V, W_2 ``gate_proj``, ``up_proj``, ``down_proj``; here they are
``w_gate``, ``w_up``, ``w_down``.

Three matrices instead of two: to keep the parameter count of a ``d_model -> d_ff -> d_model`` FFN,
the hidden size shrinks to about ``2/3 * d_ff`` (:func:`swiglu_hidden`): ``3 * d_model * (2/3) d_ff =
2 * d_model * d_ff``.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import check_dtype, check_features, check_positive_int, check_probability

__all__ = ["SwiGLU", "swiglu_hidden"]


def swiglu_hidden(d_ff: int, multiple_of: int = 1) -> int:
    """The SwiGLU hidden size with the parameters of a ``d_ff`` FFN: ``round(2 * d_ff / 3)``, then rounded *up*
    to a multiple of ``multiple_of`` (Llama uses 256, which keeps matrix shapes friendly to the hardware).

    ``swiglu_hidden(2048) = 1365`` (3 x 1365 = 4095 rows against 2 x 2048 = 4096); ``swiglu_hidden(1536) = 1024``.
    """
    check_positive_int(d_ff, "d_ff")
    check_positive_int(multiple_of, "multiple_of")
    hidden = max(1, round(2 * d_ff / 3))
    return multiple_of * -(-hidden // multiple_of)


class SwiGLU(nn.Module):
    """``w_down(dropout(silu(w_gate(x)) * w_up(x)))``: ``d_model -> hidden (twice) -> d_model``.

    ``hidden``: the size of the gate and the value (use :func:`swiglu_hidden` to match a ``d_ff`` FFN).
    ``bias=False`` as in Llama. Numbers equal to ``transformers``' ``LlamaMLP`` with the same weights.
    """

    def __init__(self, d_model: int, hidden: int, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.hidden = check_positive_int(d_model, "d_model"), check_positive_int(hidden, "hidden")
        self.w_gate = nn.Linear(d_model, hidden, bias=bias)  # W: through SiLU, the gate
        self.w_up = nn.Linear(d_model, hidden, bias=bias)  # V: linear, the value
        self.w_down = nn.Linear(hidden, d_model, bias=bias)  # W_2
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(self, x: Tensor) -> Tensor:
        """x ``(batch, seq_len, d_model)`` -> ``(batch, seq_len, d_model)``."""
        check_features(x, "x", self.d_model)
        check_dtype(x, "x", self.w_gate.weight, "SwiGLU")
        gated = F.silu(self.w_gate(x)) * self.w_up(x)  # (batch, seq_len, hidden)
        return self.w_down(self.dropout(gated))  # (batch, seq_len, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, hidden={self.hidden}"
