"""Attention (tfm_lesson/attention.py): scaled dot-product attention and multi-head attention against torch, the
fast path against the explicit one, bad input, and masking (a query that sees no key gets zero, never NaN, in every
dtype). Its checkers' tests are in tests/test_checks_attention.py; the cache path in tests/test_cache.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import tfm_lesson as T

from conftest import PROPERTY_SETTINGS, property_sizes


# against torch ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_matches_torch(device, parity, masked):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, n, 16, device=device, requires_grad=True) for n in (5, 7, 7))
    mask = torch.rand(3, 1, 5, 7, device=device) > 0.3 if masked else None
    if mask is not None:
        mask[..., 0] = True  # no fully masked rows: torch's kernels disagree among themselves there
    ours, weights = T.scaled_dot_product_attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    parity("scaled_dot_product_attention", ours, theirs)
    g_ours = torch.autograd.grad(ours.square().sum(), (q, k, v))
    g_theirs = torch.autograd.grad(theirs.square().sum(), (q, k, v))
    for a, b in zip(g_ours, g_theirs):
        parity("scaled_dot_product_attention (grad)", a, b)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 4, 5, device=device), atol=1e-6)


@PROPERTY_SETTINGS
@given(lead=st.lists(st.integers(1, 3), min_size=0, max_size=2), d_k=st.integers(1, 8), d_v=st.integers(1, 8),
       q_len=property_sizes, k_len=property_sizes, seed=st.integers(0, 2**16))
def test_attention_equals_torch_sdpa(lead, d_k, d_v, q_len, k_len, seed):
    torch.manual_seed(seed)
    q, k, v = torch.randn(*lead, q_len, d_k), torch.randn(*lead, k_len, d_k), torch.randn(*lead, k_len, d_v)
    mask = torch.rand(q_len, k_len) > 0.3
    mask[:, 0] = True
    ours, weights = T.scaled_dot_product_attention(q, k, v, mask)
    assert weights.shape == (*lead, q_len, k_len)
    assert torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5)


def _torch_mha_mask(mask: torch.Tensor, batch: int, heads: int, q_len: int, k_len: int) -> torch.Tensor:
    """tfm_lesson mask -> nn.MultiheadAttention attn_mask (True = blocked), shaped (batch * heads, q, k)."""
    return T.torch_mask(mask.expand(batch, heads, q_len, k_len).reshape(batch * heads, q_len, k_len))


@pytest.mark.parametrize("self_attention", [True, False])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_multi_head_attention_matches_torch(device, parity, self_attention, need_weights, bias):
    torch.manual_seed(1)
    d_model, heads, batch, q_len = 32, 4, 3, 6
    k_len = q_len if self_attention else 9
    theirs = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True).to(device)
    ours = T.from_torch(theirs)
    x = torch.randn(batch, q_len, d_model, device=device, requires_grad=True)
    mem = x if self_attention else torch.randn(batch, k_len, d_model, device=device, requires_grad=True)
    mask = torch.rand(batch, 1, q_len, k_len, device=device) > 0.4
    mask[..., 0] = True
    out, w = ours(x, mem, mem, mask, need_weights=need_weights)
    ref, ref_w = theirs(x, mem, mem, attn_mask=_torch_mha_mask(mask, batch, heads, q_len, k_len),
                        need_weights=need_weights, average_attn_weights=False)
    parity("MultiHeadAttention", out, ref)
    if need_weights:
        assert w.shape == (batch, heads, q_len, k_len)
        parity("MultiHeadAttention (weights)", w, ref_w)
    else:
        assert w is None
    g_ours = torch.autograd.grad(out.square().sum(), x, retain_graph=True)[0]
    g_theirs = torch.autograd.grad(ref.square().sum(), x, retain_graph=True)[0]
    parity("MultiHeadAttention (grad)", g_ours, g_theirs)
    out.square().sum().backward()
    ref.square().sum().backward()
    d = d_model
    for i, lin in enumerate((ours.w_q, ours.w_k, ours.w_v)):
        parity("MultiHeadAttention (grad)", lin.weight.grad, theirs.in_proj_weight.grad[i * d:(i + 1) * d])
    parity("MultiHeadAttention (grad)", ours.w_o.weight.grad, theirs.out_proj.weight.grad)


# the fast path (torch's fused kernel) equals the explicit path (the weights) ------------------------------------------
def test_fast_path_equals_explicit_path_on_every_device(device, parity):
    """One fixed case on each device (CUDA too); the property test below tries many shapes on the CPU."""
    torch.manual_seed(2)
    mha = T.MultiHeadAttention(48, 6).to(device)
    x = torch.randn(4, 10, 48, device=device)
    mask = T.combine_masks(T.padding_mask(torch.tensor([[1] * 10, [1] * 7 + [0] * 3, [1] * 2 + [0] * 8, [1] * 10],
                                                       device=device), 0), T.causal_mask(10, device))
    fast, none = mha(x, x, x, mask)
    explicit, weights = mha(x, x, x, mask, need_weights=True)
    assert none is None and weights.shape == (4, 6, 10, 10)
    parity("MultiHeadAttention fast vs explicit", fast, explicit)


def _mask(seed: int, batch: int, q_len: int, k_len: int, fully_masked: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, 1, q_len, k_len, generator=g) > 0.4
    mask[..., 0] = True
    if fully_masked:
        mask[0, :, -1] = False  # the last query of the first sequence sees nothing
    return mask


@PROPERTY_SETTINGS
@given(batch=property_sizes, heads=st.integers(1, 4), d_k=st.integers(1, 8), q_len=property_sizes, k_len=property_sizes,
       seed=st.integers(0, 2**16), fully_masked=st.booleans())
def test_fast_path_equals_explicit_path_for_any_shape(batch, heads, d_k, q_len, k_len, seed, fully_masked):
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


def test_a_one_dimensional_mask_works_on_both_paths():
    """A (k_len,) key mask passed the mask check, then raised IndexError inside the fast path."""
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([True, True, True, False, False])
    fast, _ = mha(x, x, x, mask)
    explicit, _ = mha(x, x, x, mask, need_weights=True)
    full, _ = mha(x, x, x, mask[None, None, None, :].expand(2, 4, 5, 5))
    assert torch.allclose(fast, explicit, atol=1e-6) and torch.allclose(fast, full, atol=1e-6)


# bad input -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(d_model=0, heads=1), r"d_model must be a positive int"),
    (dict(d_model=8, heads=2, dropout=1.5), r"dropout must be a float in \[0, 1\)"),
    (dict(d_model=8.0, heads=2), r"d_model must be a positive int"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        T.MultiHeadAttention(**kwargs)


def test_mask_of_the_wrong_shape_names_the_dimension():
    mha = T.MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"mask has shape \(2, 1, 1, 6\).*k_len dimension is 6, expected 5 or 1"):
        mha(x, x, x, torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"batch dimension is 3, expected 2 or 1"):
        mha(x, x, x, torch.ones(3, 1, 1, 5, dtype=torch.bool))


def test_mask_of_the_wrong_dtype_is_refused():
    x = torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match=r"mask must be boolean with True = may attend"):
        T.MultiHeadAttention(16, 4)(x, x, x, torch.zeros(2, 1, 1, 5))  # an additive float mask
    with pytest.raises(TypeError, match=r"mask must be boolean"):
        T.scaled_dot_product_attention(x, x, x, torch.ones(2, 5, 5, dtype=torch.long))


# fully masked rows, low precision, NaN and inf -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_gives_zeros_never_nan(device, dtype, need_weights):
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).to(device=device, dtype=dtype).eval()
    x = torch.randn(2, 5, 16, device=device, dtype=dtype)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool, device=device)
    mask[0, :, 2, :] = False  # query 2 of sequence 0 sees no key at all
    out, weights = mha(x, x, x, mask, need_weights=need_weights)
    assert not torch.isnan(out).any() and not torch.isinf(out).any()
    bias = mha.w_o.bias  # a query that attends to nothing gets zero context, so only W^O's bias is left
    assert torch.allclose(out[0, 2], bias, atol=1e-6)
    if need_weights:
        assert torch.equal(weights[0, :, 2], torch.zeros_like(weights[0, :, 2]))
        assert torch.allclose(weights[1].float().sum(-1), torch.ones(4, 5, device=device), atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masking_works_in_half_precision(device, dtype):
    """-1e9 overflows float16; tfm_lesson masks with -inf and removes fully masked rows, so masked keys get
    exactly zero weight in every dtype."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 4, 8, device=device) for _ in range(3))
    mask = torch.tensor([True, True, False, False], device=device)
    out, weights = T.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert torch.equal(weights[..., 2:].float(), torch.zeros(2, 3, 4, 2, device=device))
    ref, _ = T.scaled_dot_product_attention(q, k, v, mask)
    assert torch.allclose(out.float(), ref, atol=5e-2)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("masked", [False, True])
def test_nan_and_inf_propagate_through_the_fast_path_as_through_the_explicit_one(device, bad, masked):
    """The fused kernel returned finite numbers for a NaN or -inf query, where the explicit path and
    nn.MultiheadAttention give NaN; with a padding mask, a NaN key it hides gave NaN everywhere. On a GPU,
    other fused kernels run: the same holds there."""
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).to(device).eval()
    x = torch.randn(2, 5, 16, device=device)
    mask = T.padding_mask(torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], device=device), 0) if masked else None
    for where in ("query", "key", "value"):
        q, k, v = x.clone(), x.clone(), x.clone()
        {"query": q, "key": k, "value": v}[where][0, 4 if masked else 1, 3] = bad
        fast, _ = mha(q, k, v, mask)
        explicit, _ = mha(q, k, v, mask, need_weights=True)
        assert torch.equal(torch.isnan(fast), torch.isnan(explicit)), (where, torch.isnan(fast).any(-1))
        assert torch.equal(torch.isinf(fast), torch.isinf(explicit)), where
        finite = torch.isfinite(explicit)
        assert torch.allclose(fast[finite], explicit[finite], atol=1e-5), where
    if not masked:  # and as torch.nn does
        ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).to(device).eval()
        q = x.clone()
        q[0, 1, 3] = bad
        assert torch.isnan(ref(q, x, x)[0][0, 1]).all() and torch.isnan(mha(q, x, x)[0][0, 1]).all()


@pytest.mark.parametrize("where", ["a hidden key's value", "a visible key's value"])
def test_a_fully_masked_query_gives_zero_on_both_paths_even_beside_a_nan_value(device, where):
    """A query with no visible key has weights 0 everywhere; 0 times a NaN value was NaN on the explicit path
    and 0 on the fast one. Both now give 0 for that query; for the other queries the NaN value reaches their
    output on both paths alike (0 times NaN is NaN in a matrix product, as in torch.nn)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, device=device) for _ in range(3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]], device=device)
    v[..., 0 if where == "a visible key's value" else 2, 1] = float("nan")
    explicit, _ = T.scaled_dot_product_attention(q, k, v, mask)
    fast = T.attention.fast_attention(q, k, v, mask)
    assert torch.equal(explicit[..., 1, :], torch.zeros_like(explicit[..., 1, :]))  # query 1 sees nothing
    assert torch.equal(torch.isnan(fast), torch.isnan(explicit))
    assert torch.allclose(fast.nan_to_num(), explicit.nan_to_num(), atol=1e-6)
    assert torch.isnan(explicit[..., [0, 2], 1]).all()
