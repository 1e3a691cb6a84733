"""Property tests over shapes (hypothesis): the components agree with torch for any batch, heads, lengths and mask."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import tfm_lesson as T

SETTINGS = settings(max_examples=30, deadline=None)
sizes = st.integers(min_value=1, max_value=6)


def _mask(seed: int, batch: int, q_len: int, k_len: int, fully_masked: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, 1, q_len, k_len, generator=g) > 0.4
    mask[..., 0] = True
    if fully_masked:
        mask[0, :, -1] = False  # the last query of the first sequence sees nothing
    return mask


@SETTINGS
@given(batch=sizes, heads=st.integers(1, 4), d_k=st.integers(1, 8), q_len=sizes, k_len=sizes,
       seed=st.integers(0, 2**16), fully_masked=st.booleans())
def test_fast_path_equals_explicit_path(batch, heads, d_k, q_len, k_len, seed, fully_masked):
    torch.manual_seed(seed)
    mha = T.MultiHeadAttention(heads * d_k, heads).eval()
    q, kv = torch.randn(batch, q_len, heads * d_k), torch.randn(batch, k_len, heads * d_k)
    mask = _mask(seed, batch, q_len, k_len, fully_masked)
    fast, _ = mha(q, kv, kv, mask)
    explicit, weights = mha(q, kv, kv, mask, need_weights=True)
    assert fast.shape == (batch, q_len, heads * d_k) and weights.shape == (batch, heads, q_len, k_len)
    assert torch.allclose(fast, explicit, atol=1e-5)
    assert not torch.isnan(fast).any()
    row_sums = weights.sum(-1)
    assert torch.allclose(row_sums, mask.any(-1).float().expand_as(row_sums), atol=1e-5)  # 1, or 0 if all masked


@SETTINGS
@given(lead=st.lists(st.integers(1, 3), min_size=0, max_size=2), d_k=st.integers(1, 8), d_v=st.integers(1, 8),
       q_len=sizes, k_len=sizes, seed=st.integers(0, 2**16))
def test_attention_equals_torch_sdpa(lead, d_k, d_v, q_len, k_len, seed):
    torch.manual_seed(seed)
    q, k, v = torch.randn(*lead, q_len, d_k), torch.randn(*lead, k_len, d_k), torch.randn(*lead, k_len, d_v)
    mask = torch.rand(q_len, k_len) > 0.3
    mask[:, 0] = True
    ours, weights = T.scaled_dot_product_attention(q, k, v, mask)
    assert weights.shape == (*lead, q_len, k_len)
    assert torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5)


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
