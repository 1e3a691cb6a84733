"""Checker for chapter 08's target mask (split from :mod:`.layers`):

- ``check_target_mask(fn)``: ``fn(tgt (batch, t), pad_id)`` -> the decoder self-attention's mask, padding AND
  causal, broadcastable to ``(batch, heads, t, t)``, built on ``tgt``'s device.
"""
from __future__ import annotations

import random
from typing import Callable

import torch
from torch import Tensor

from .. import masks as M
from ._harness import Mistake, check_device_placement, expect, passed
from .layers import _run

__all__ = ["check_target_mask"]


# the decoder's self-attention mask -----------------------------------------------------------------------------------
def check_target_mask(fn: Callable) -> None:
    """Check ``fn(tgt, pad_id)`` -> the decoder's self-attention mask: boolean, True = may attend, broadcastable to
    ``(batch, 1, tgt_len, tgt_len)``; a query sees earlier-or-same positions that are not padding."""
    rng = random.Random(11)
    for trial in range(4):
        batch, length, pad_id = rng.randint(1, 3), rng.randint(3, 7), rng.choice([0, 0, 1, 5])
        tgt = torch.randint(0, 9, (batch, length))
        tgt[tgt == pad_id] = pad_id + 1 if pad_id + 1 < 9 else pad_id - 1
        for b in range(1, batch):
            tgt[b, rng.randint(1, length - 1):] = pad_id
        got = _run(fn, tgt, pad_id, what="your target-mask function")
        expect(got is not None, "your target_mask is not written yet: it returns None. Return the boolean mask")
        expect(isinstance(got, Tensor), f"return a torch.Tensor, got {type(got).__name__}")
        expect(got.dtype == torch.bool, f"the mask must be boolean (True = may attend), got dtype {got.dtype}. An "
               "additive 0/-inf float mask is another convention; here build it from comparisons and `&`")
        shape = (batch, 1, length, length)
        try:
            got = got.expand(shape)
        except RuntimeError:
            raise Mistake(f"your mask has shape {tuple(got.shape)}, which does not broadcast to (batch, 1, tgt_len, "
                          f"tgt_len) = {shape}. padding_mask gives (batch, 1, 1, tgt_len), causal_mask (tgt_len, "
                          "tgt_len): `&` broadcasts them together") from None
        pad = M.padding_mask(tgt, pad_id)  # (batch, 1, 1, t)
        causal = M.causal_mask(length)
        expected = (pad & causal).expand(shape)
        if torch.equal(got, expected):
            continue
        ones = torch.ones(length, length, dtype=torch.bool)
        suspects = {
            "the polarity is inverted: True must mean *may attend* (nn.MultiheadAttention's True = blocked is the "
            "opposite convention)": ~expected,
            "padding is not masked: combine the causal mask with padding_mask(tgt, pad_id)": causal.expand(shape),
            "the mask is not causal, so the future leaks: AND the padding mask with the lower-triangular causal_mask":
                pad.expand(shape),
            "the causal mask is shifted by one: a position must see itself (the diagonal), tril() not tril(-1)":
                (pad & ones.tril(-1)).expand(shape),
            "the causal mask is shifted by one: it lets each position see the next one, tril() not tril(1)":
                (pad & ones.tril(1)).expand(shape),
            "the causal mask is upside down: triu() lets a position see the future; use tril()":
                (pad & ones.triu()).expand(shape),
            "the padding hides the wrong axis: padded *keys* (last dimension) are hidden, so padding_mask is shaped "
            "(batch, 1, 1, tgt_len)": (pad.transpose(-1, -2) & causal).expand(shape),
        }
        for hint, buggy in suspects.items():
            if torch.equal(got, buggy):
                raise Mistake(hint)
        raise Mistake(f"your mask differs from padding_mask(tgt, pad_id) & causal_mask(tgt_len) for tgt={tgt.tolist()}"
                      f", pad_id={pad_id}")
    check_device_placement(fn, tgt, pad_id, what="your target-mask function", argument="tgt")
    passed("check_target_mask", "causal and padding combined, True = may attend, (batch, 1, tgt_len, tgt_len)")
