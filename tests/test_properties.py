"""Property tests over shapes (hypothesis): the components agree with torch for any batch, lengths and mask.
Attention's property tests are in tests/test_attention.py."""
from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import tfm_lesson as T

from conftest import PROPERTY_SETTINGS as SETTINGS  # noqa: E402  (shared with tests/test_attention.py)
from conftest import property_sizes as sizes  # noqa: E402


@SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), d_model=st.integers(1, 16),
       scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16), explicit=st.booleans())
def test_layer_norm_equals_torch(shape, d_model, scale, seed, explicit):
    torch.manual_seed(seed)
    x = torch.randn(*shape, d_model) * scale
    ours = T.LayerNorm(d_model, explicit=explicit)
    theirs = nn.LayerNorm(d_model)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours.load_state_dict(theirs.state_dict())
    assert torch.allclose(ours(x), theirs(x), atol=1e-4, rtol=1e-4)


@SETTINGS
@given(max_len=st.integers(1, 64), d_model=st.integers(1, 33))
def test_sinusoidal_table_shape_and_range(max_len, d_model):
    table = T.sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model)
    assert table.abs().max() <= 1.0 + 1e-6
    assert torch.equal(table[0, 0::2], torch.zeros_like(table[0, 0::2]))  # sin(0) = 0 in every even column


@SETTINGS
@given(size=st.integers(1, 20), batch=sizes, pad_from=st.integers(1, 20))
def test_masks_shapes_and_meaning(size, batch, pad_from):
    causal = T.causal_mask(size)
    assert causal.shape == (size, size) and causal.dtype == torch.bool
    assert torch.equal(causal, torch.ones(size, size, dtype=torch.bool).tril())
    tokens = torch.ones(batch, size, dtype=torch.long)
    tokens[:, min(pad_from, size):] = 0
    pad = T.padding_mask(tokens, 0)
    assert pad.shape == (batch, 1, 1, size)
    combined = T.combine_masks(pad, causal)
    assert combined.shape == (batch, 1, size, size)
    assert torch.equal(combined, pad & causal)
