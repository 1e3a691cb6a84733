"""Attention (tfm_lesson/attention.py): tests that belong to the module itself. Its parity with torch is in
tests/test_parity.py, its properties over many shapes in tests/test_properties.py, its checkers' tests in
tests/test_checks_attention.py."""
from __future__ import annotations

import torch

import tfm_lesson as T


def test_fast_path_equals_explicit_path_on_every_device(device, parity):
    """One fixed case on each device (CUDA too); tests/test_properties.py tries many shapes on the CPU."""
    torch.manual_seed(2)
    mha = T.MultiHeadAttention(48, 6).to(device)
    x = torch.randn(4, 10, 48, device=device)
    mask = T.combine_masks(T.padding_mask(torch.tensor([[1] * 10, [1] * 7 + [0] * 3, [1] * 2 + [0] * 8, [1] * 10],
                                                       device=device), 0), T.causal_mask(10, device))
    fast, none = mha(x, x, x, mask)
    explicit, weights = mha(x, x, x, mask, need_weights=True)
    assert none is None and weights.shape == (4, 6, 10, 10)
    parity("MultiHeadAttention fast vs explicit", fast, explicit)
