"""Attention masks.

One convention everywhere in tfm_lesson, the same as
``torch.nn.functional.scaled_dot_product_attention``: a mask is a **boolean** tensor and
``True`` means *this query may attend to this key*. Every mask broadcasts to
``(batch, heads, q_len, k_len)``.

(``nn.MultiheadAttention`` uses the opposite polarity: there ``True`` means *blocked*.
``tfm_lesson.interop`` converts for you; chapter 13 shows what happens when you forget.)
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["padding_mask", "causal_mask", "combine_masks", "check_mask"]


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Mask out padding keys.

    tokens: ``(batch, seq_len)`` integer ids. Returns ``(batch, 1, 1, seq_len)``:
    ``True`` where the key is a real token, ready to broadcast over heads and queries.
    """
    if not isinstance(tokens, Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"padding_mask: tokens must be a (batch, seq_len) tensor of ids, got {shape}")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"padding_mask: tokens must hold integer ids, got dtype {tokens.dtype}")
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise TypeError(f"padding_mask: pad_id must be the int id of the padding token, got {pad_id!r}")
    return (tokens != pad_id)[:, None, None, :]  # (batch, 1, 1, k_len)


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular mask: query ``i`` may attend to keys ``0..i`` (itself included).

    Returns ``(size, size)`` booleans, which broadcast to ``(batch, heads, size, size)``.
    """
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"causal_mask: size must be a positive int, got {size!r}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()  # (q_len, k_len)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of any number of masks (``None`` entries are skipped).

    A key is visible only if every mask allows it: e.g. ``combine_masks(padding_mask(tgt, 0),
    causal_mask(tgt.size(1)))`` gives the decoder's self-attention mask ``(batch, 1, t, t)``.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for i, m in enumerate(present):
        if m.dtype != torch.bool:
            raise TypeError(f"combine_masks: mask {i} has dtype {m.dtype}; masks must be boolean (True = may attend)")
    out = present[0]
    for m in present[1:]:
        try:
            out = out & m
        except RuntimeError as exc:
            raise ValueError(
                f"combine_masks: shapes {tuple(out.shape)} and {tuple(m.shape)} do not broadcast together"
            ) from exc
    return out


def check_mask(mask: Tensor, shape: tuple[int | None, ...], name: str = "mask",
               dims: tuple[str, ...] = ("batch", "heads", "q_len", "k_len")) -> Tensor:
    """Check that ``mask`` is boolean and broadcasts to ``shape``; return it unchanged.

    Dimensions are aligned from the right, as in broadcasting, but a dimension of the wrong size is an error
    rather than a silent broadcast. ``None`` in ``shape`` accepts any size. Errors name ``name`` and the
    dimension (from ``dims``) that does not fit.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of booleans, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be boolean with True = may attend (got dtype {mask.dtype}). "
            "Build it with padding_mask/causal_mask, or convert with `mask.bool()`; "
            "an additive float mask (0 / -inf) is not accepted."
        )
    dims = dims[len(dims) - len(shape):]
    want = ", ".join(f"{d}={'any' if s is None else s}" for d, s in zip(dims, shape))
    if mask.dim() > len(shape):
        raise ValueError(f"{name} has shape {tuple(mask.shape)}: more dimensions than ({want})")
    for got, exp, label in zip(reversed(mask.shape), reversed(shape), reversed(dims)):
        if got != 1 and exp is not None and got != exp:
            raise ValueError(
                f"{name} has shape {tuple(mask.shape)}, which does not broadcast to ({want}): "
                f"its {label} dimension is {got}, expected {exp} or 1"
            )
    return mask
