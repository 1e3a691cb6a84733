"""Rotary position embeddings, RoPE (Su et al., 2021): positions as rotations of queries and keys.

The paper *adds* a position vector to each token embedding (chapter 04). RoPE instead *rotates* each
query and key: split a head's ``d_k`` features into ``d_k / 2`` pairs and turn pair ``i`` of the vector at
position ``m`` by the angle ``m * theta_i``, with ``theta_i = base ** (-2i / d_k)`` (``base`` = 10,000 in
the paper and Llama 2; configs call it ``rope_theta``). A rotation keeps lengths, and the dot product of
two vectors turned by ``m * theta`` and ``n * theta`` only sees the difference ``(m - n) * theta``. So the
score ``q_m . k_n`` depends on the tokens and on their *relative* position ``m - n``, never on ``m`` alone.

Which features form a pair is a convention, and the two in use are not interchangeable:

- **halves** (``interleaved=False``, the default): pair ``i`` is ``(x[i], x[i + d_k/2])``; this is
  ``rotate_half`` in ``transformers``' Llama, GPT-NeoX and most checkpoints on the Hub;
- **interleaved** (``interleaved=True``): pair ``i`` is ``(x[2i], x[2i+1])``, as in the RoFormer paper and
  Meta's original Llama code (complex numbers). A model trained with one convention gives different numbers
  under the other, unless its W^Q and W^K rows are permuted to match (:func:`interleaved_to_halves`),
  which is what the Llama conversion script for ``transformers`` does.

With a KV cache, the new tokens sit at positions ``len(cache), len(cache) + 1, ...``: rotate them with
``offset=len(cache)``, or every cached step would think it is at position 0.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validate import check_positive_int

__all__ = ["rotary_frequencies", "rotary_cos_sin", "rotate_half", "rotate_pairs", "apply_rotary",
           "RotaryEmbedding", "interleaved_to_halves"]


def _check_d_k(d_k: object) -> int:
    check_positive_int(d_k, "d_k")
    if d_k % 2:
        raise ValueError(f"rotary embeddings rotate pairs of features: d_k must be even, got d_k={d_k}")
    return d_k


def _check_base(base: object) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"base (rope_theta) must be a number > 1, got {base!r}")
    return float(base)


def rotary_frequencies(d_k: int, base: float = 10000.0) -> Tensor:
    """``theta_i = base ** (-2i / d_k)`` for ``i = 0 .. d_k/2 - 1``: ``(d_k // 2,)`` float32, fast to slow."""
    d_k, base = _check_d_k(d_k), _check_base(base)
    return 1.0 / (base ** (torch.arange(0, d_k, 2, dtype=torch.float) / d_k))


def rotary_cos_sin(positions: Tensor, d_k: int, base: float = 10000.0,
                   interleaved: bool = False) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles ``position * theta_i``, laid out like the features they multiply.

    ``positions (..., seq_len)`` (integers) -> ``cos, sin (..., seq_len, d_k)`` in float32: each angle appears
    twice, at ``i`` and ``i + d_k/2`` (halves) or at ``2i`` and ``2i + 1`` (interleaved).
    """
    theta = rotary_frequencies(d_k, base).to(positions.device)  # (d_k/2,)
    angles = positions.float()[..., None] * theta  # (..., seq_len, d_k/2)
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)  # (a0, a0, a1, a1, ...)
    else:
        angles = torch.cat((angles, angles), dim=-1)  # (a0, a1, ..., a0, a1, ...)
    return angles.cos(), angles.sin()  # each (..., seq_len, d_k)


def rotate_half(x: Tensor) -> Tensor:
    """Halves convention: ``(x1, x2) -> (-x2, x1)`` where x1, x2 are the first and second half of the features."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_pairs(x: Tensor) -> Tensor:
    """Interleaved convention: ``(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)``."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """Rotate every pair of ``x (..., seq_len, d_k)`` by its angle: ``x * cos + rotate(x) * sin``.

    Pair ``(a, b)`` becomes ``(a cos - b sin, b cos + a sin)``, a rotation in its plane. ``cos``/``sin`` from
    :func:`rotary_cos_sin` with the same ``interleaved``, broadcastable to ``x``. Computed in ``x``'s dtype.
    """
    rotate = rotate_pairs if interleaved else rotate_half
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate(x) * sin


class RotaryEmbedding(nn.Module):
    """Rotates queries or keys ``(..., seq_len, d_k)`` by their positions ``offset, offset + 1, ...``.

    ``d_k``: features per head (even); ``base``: ``rope_theta``; ``interleaved``: the pair convention (see
    the module docstring). No parameters: the frequencies are a fixed buffer, not saved in the state dict.
    """

    def __init__(self, d_k: int, base: float = 10000.0, interleaved: bool = False) -> None:
        super().__init__()
        if not isinstance(interleaved, bool):
            hint = " (a string is not a boolean: 'no' would count as true)" if isinstance(interleaved, str) else ""
            raise TypeError(f"interleaved must be True or False, got {interleaved!r}{hint}")
        self.d_k, self.base, self.interleaved = _check_d_k(d_k), _check_base(base), interleaved
        self.register_buffer("theta", rotary_frequencies(d_k, base), persistent=False)  # (d_k/2,)

    def cos_sin(self, seq_len: int, offset: int = 0, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
        """cos, sin ``(seq_len, d_k)`` for positions ``offset .. offset + seq_len - 1``."""
        positions = torch.arange(offset, offset + seq_len, device=device or self.theta.device)
        return rotary_cos_sin(positions, self.d_k, self.base, self.interleaved)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x ``(..., seq_len, d_k)``, e.g. ``(batch, heads, seq_len, d_k)`` -> same shape, rotated."""
        if not isinstance(x, Tensor) or x.dim() < 2 or x.size(-1) != self.d_k:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be shaped (..., seq_len, d_k={self.d_k}), got {got}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor of queries or keys, got dtype {x.dtype}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int (the position of the first token), got {offset!r}")
        cos, sin = self.cos_sin(x.size(-2), offset, x.device)  # (seq_len, d_k)
        return apply_rotary(x, cos, sin, self.interleaved)

    def extra_repr(self) -> str:
        return f"d_k={self.d_k}, base={self.base:g}, interleaved={self.interleaved}"


def interleaved_to_halves(d_k: int) -> Tensor:
    """The feature order that turns the interleaved convention into the halves one: ``(0, 2, 4, ..., 1, 3, 5, ...)``.

    ``rope_halves(x[..., perm]) == rope_interleaved(x)[..., perm]``. Applied to the rows of each head of W^Q
    and W^K, it converts a model trained with interleaved pairs into one that runs with ``rotate_half``
    (queries and keys are permuted the same way, so every score ``q . k`` is unchanged).
    """
    _check_d_k(d_k)
    return torch.cat((torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)))
