"""Layer normalisation (Ba et al., 2016), as used after (or before) every sub-layer.

    LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta

``mean`` and ``var`` are taken over the last (feature) dimension; ``var`` is the *biased* variance
(divide by d_model, not d_model - 1), and ``eps`` sits *inside* the square root. Both details matter for
matching ``torch.nn.LayerNorm``; chapter 05 shows what each mistake costs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_dtype, check_positive_int

__all__ = ["LayerNorm", "layer_norm"]


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """The explicit computation, for reading and for the tests. ``x (..., d_model)``.

    float16 and bfloat16 inputs are normalised in float32 (as the fused kernel does) and returned in their
    own dtype: in float16 the squared deviations of values near 60,000 overflow to inf and everything to 0.
    """
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1), biased: divide by d_model
    x_hat = (x - mean) / torch.sqrt(var + eps)  # eps inside the sqrt
    if weight is not None:
        x_hat = x_hat * weight
    if bias is not None:
        x_hat = x_hat + bias
    return x_hat.to(dtype)


class LayerNorm(nn.Module):
    """Layer norm over the last dimension with a learned gain ``weight`` (gamma) and shift ``bias`` (beta).

    ``explicit=True`` runs :func:`layer_norm` step by step; the default runs the fused ``F.layer_norm``
    kernel. Both give the same numbers (tests prove it); parameter names match ``nn.LayerNorm``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True, explicit: bool = False) -> None:
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        if not eps > 0:
            raise ValueError(f"eps must be positive, got {eps!r}")
        self.eps, self.explicit = float(eps), explicit
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() < 1 or x.size(-1) != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be shaped (..., d_model={self.d_model}), got {got}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        check_dtype(x, "x", self.weight, "LayerNorm")
        if self.explicit:
            return layer_norm(x, self.weight, self.bias, self.eps)
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, eps={self.eps}" + (", explicit=True" if self.explicit else "")
