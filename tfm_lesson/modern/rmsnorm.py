"""RMSNorm (Zhang & Sennrich, 2019): layer norm without the mean, used by Llama and most models since.

    RMSNorm(x) = gamma * x / sqrt(mean(x^2) + eps)

Layer norm does two things: it *re-centres* each position (subtracts the mean) and *re-scales* it (divides
by the standard deviation). RMSNorm keeps only the re-scaling, dividing by the root mean square instead of
the standard deviation, and has no shift ``beta``. What keeps training stable is the scale: the next
sub-layer sees vectors of a fixed size whatever the residual stream has grown to. Removing the mean saves
one reduction per position and, in practice, costs no quality (Zhang & Sennrich; every Llama).

Same semantics as ``torch.nn.RMSNorm``: the mean of squares over the last dimension, ``eps`` *inside* the
square root, a learned gain ``weight`` initialised to ones; ``eps=None`` means ``torch.finfo(x.dtype).eps``;
statistics in float32 for float16 and bfloat16 inputs, the result in the input's dtype.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validate import check_positive_int

__all__ = ["RMSNorm", "rms_norm"]


def rms_norm(x: Tensor, weight: Tensor | None, eps: float | None = 1e-5) -> Tensor:
    """The explicit computation. ``x (..., d_model)`` -> same shape and dtype.

    The statistics are computed in float32 (or wider) whatever ``x``'s dtype, and the result is cast back,
    as ``nn.RMSNorm`` does: in float16, ``300 ** 2`` overflows to inf (the output would be 0) and
    ``1e-4 ** 2`` underflows to 0.
    """
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    x32 = x.to(torch.promote_types(x.dtype, torch.float32))
    mean_square = x32.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): no mean subtracted
    x_hat = x32 * torch.rsqrt(mean_square + eps)  # eps inside the root
    out = x_hat if weight is None else x_hat * weight.to(x32.dtype)
    return out.to(x.dtype)


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension with a learned gain ``weight`` (no bias).

    Parameter name and numbers as ``torch.nn.RMSNorm(d_model, eps)`` (tests prove it to 1e-6) and as
    ``transformers``' ``LlamaRMSNorm``. ``eps`` defaults to 1e-5; Llama configs say ``rms_norm_eps``.
    """

    def __init__(self, d_model: int, eps: float | None = 1e-5) -> None:
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0):
            raise ValueError(f"eps must be a positive float or None, got {eps!r}")
        self.eps = None if eps is None else float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() < 1 or x.size(-1) != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be shaped (..., d_model={self.d_model}), got {got}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, eps={self.eps}"
