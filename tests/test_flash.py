"""tfm_lesson.flash: the online softmax and tiled attention equal softmax and SDPA (float32, 1e-6), forward and
backward (float64 gradcheck and the explicit path's gradients), with padding and causal masks, queries that see
no key, and block sizes that do not divide the length; bad input gets clear errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfm_lesson.attention import fast_attention, scaled_dot_product_attention
from tfm_lesson.flash import FlashAttention, attention_lse, flash_attention, online_softmax
from tfm_lesson.masks import causal_mask

TOL = dict(atol=1e-6, rtol=1e-6)


def _qkv(batch=2, heads=3, q_len=13, k_len=13, d_k=8, d_v=8, dtype=torch.float32, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, d_k, generator=gen, dtype=dtype)
    k = torch.randn(batch, heads, k_len, d_k, generator=gen, dtype=dtype)
    v = torch.randn(batch, heads, k_len, d_v, generator=gen, dtype=dtype)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def _padding(batch, k_len, seed=1):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, 1, 1, k_len, generator=gen) > 0.3
    mask[..., 0] = True  # every query sees at least one key (SDPA's answer for none varies with the version)
    return mask


@pytest.mark.parametrize("block", [1, 4, 5, 7, 16, 64, 100])
def test_online_softmax_equals_softmax(block):
    x = torch.randn(3, 4, 37, generator=torch.Generator().manual_seed(block)) * 5
    torch.testing.assert_close(online_softmax(x, block), x.softmax(dim=-1), **TOL)


def test_online_softmax_rescales_when_the_maximum_grows():
    # increasing scores: every block brings a larger maximum, so a missing rescale shows at once
    x = torch.arange(20.0).reshape(1, 20) * 3
    torch.testing.assert_close(online_softmax(x, 3), x.softmax(dim=-1), **TOL)


def test_online_softmax_of_a_row_of_minus_inf_is_zero():
    x = torch.randn(3, 10)
    x[1] = float("-inf")
    out = online_softmax(x, 4)
    assert torch.equal(out[1], torch.zeros(10))
    torch.testing.assert_close(out[[0, 2]], x[[0, 2]].softmax(-1), **TOL)


@pytest.mark.parametrize("length,block", [(13, 1), (13, 4), (13, 5), (13, 13), (13, 64), (64, 16), (50, 7)])
@pytest.mark.parametrize("kind", ["none", "padding", "causal", "causal_flag", "both"])
def test_forward_equals_sdpa(length, block, kind):
    q, k, v = _qkv(q_len=length, k_len=length)
    mask, causal, sdpa_kw = None, False, {}
    if kind == "padding":
        mask = _padding(2, length)
        sdpa_kw = dict(attn_mask=mask)
    elif kind == "causal":
        mask = causal_mask(length)
        sdpa_kw = dict(attn_mask=mask)
    elif kind == "causal_flag":
        causal, sdpa_kw = True, dict(is_causal=True)
    elif kind == "both":
        mask, causal = _padding(2, length), True
        sdpa_kw = dict(attn_mask=mask & causal_mask(length))
    want = F.scaled_dot_product_attention(q, k, v, **sdpa_kw)
    torch.testing.assert_close(flash_attention(q, k, v, mask, block_size=block, causal=causal), want, **TOL)


@pytest.mark.parametrize("q_len,k_len,block", [(5, 17, 4), (17, 5, 4), (1, 30, 7), (30, 1, 7)])
def test_forward_with_different_lengths_and_d_v(q_len, k_len, block):
    q, k, v = _qkv(q_len=q_len, k_len=k_len, d_v=5)
    torch.testing.assert_close(flash_attention(q, k, v, block_size=block), F.scaled_dot_product_attention(q, k, v),
                               **TOL)
    torch.testing.assert_close(flash_attention(q, k, v, block_size=block, causal=True),
                               fast_attention(q, k, v, _bottom_right(q_len, k_len)), **TOL)


def _bottom_right(q_len: int, k_len: int) -> torch.Tensor:
    """The causal mask of q_len queries that are the last q_len positions of a k_len-long sequence, (q_len, k_len),
    written out plainly: query i (position i + k_len - q_len) sees key j when j <= i + k_len - q_len."""
    i = torch.arange(q_len).unsqueeze(-1) + (k_len - q_len)
    return torch.arange(k_len) <= i


def test_bottom_right_mask_is_flash_attention_s_example():
    # the FlashAttention 2.1+ docstring's two examples (1 = keep): q 2 x k 5, and q 5 x k 2
    assert _bottom_right(2, 5).int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert _bottom_right(5, 2).int().tolist() == [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]


@pytest.mark.parametrize("block", [1, 3, 4, 64])
def test_causal_decode_step_sees_every_cached_key(block):
    # one new query against 10 cached keys: the causal rule must let it see all of them (bottom-right), not key 0
    q, k, v = _qkv(q_len=1, k_len=10)
    got = flash_attention(q, k, v, block_size=block, causal=True)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v), **TOL)  # no mask: the whole past
    assert not torch.allclose(got, v[:, :, :1], atol=1e-3)  # a top-left mask would return value 0 alone
    # prefill then decode: the last 3 queries of a causal run over 12 positions, computed on their own
    q, k, v = _qkv(q_len=12, k_len=12)
    full = flash_attention(q, k, v, block_size=block, causal=True)
    torch.testing.assert_close(flash_attention(q[:, :, -3:], k, v, block_size=block, causal=True), full[:, :, -3:],
                               **TOL)


@pytest.mark.parametrize("q_len,k_len", [(3, 8), (8, 3)])
def test_causal_gradients_with_different_lengths(q_len, k_len):
    q, k, v = _qkv(batch=1, heads=2, q_len=q_len, k_len=k_len, d_k=4, d_v=4, dtype=torch.float64, grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, block_size=2, causal=True), (q, k, v))
    want = torch.autograd.grad(fast_attention(q, k, v, _bottom_right(q_len, k_len)).sum(), (q, k, v))
    got = torch.autograd.grad(flash_attention(q, k, v, block_size=2, causal=True).sum(), (q, k, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("block", [1, 3, 4, 16])
def test_a_query_that_sees_no_key_gets_zero(block):
    q, k, v = _qkv(q_len=10, k_len=10)
    mask = causal_mask(10).expand(2, 3, 10, 10).clone()
    mask[0, 1, 3] = False  # one query of one head sees nothing
    mask[1, :, 7:] = False  # the last queries of the second sequence see nothing
    got = flash_attention(q, k, v, mask, block_size=block)
    assert not torch.isnan(got).any()
    assert torch.equal(got[0, 1, 3], torch.zeros(8)) and torch.equal(got[1, :, 7:], torch.zeros(3, 3, 8))
    torch.testing.assert_close(got, fast_attention(q, k, v, mask), **TOL)
    torch.testing.assert_close(got, scaled_dot_product_attention(q, k, v, mask)[0], **TOL)
    assert torch.isinf(attention_lse(q, k, mask, block_size=block)[0, 1, 3])


def test_no_keys_at_all_gives_zeros():
    q, k, v = _qkv(q_len=4, k_len=4)
    got = flash_attention(q, k, v, torch.zeros(4, dtype=torch.bool), block_size=2)
    assert torch.equal(got, torch.zeros_like(got))


def test_lse_is_the_log_sum_exp_of_the_scaled_scores():
    q, k, _ = _qkv(q_len=11, k_len=9)
    mask = _padding(2, 9)
    scores = (q @ k.transpose(-2, -1) / 8 ** 0.5).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(attention_lse(q, k, mask, block_size=4), scores.logsumexp(dim=-1), **TOL)


@pytest.mark.parametrize("block", [2, 3, 8])
@pytest.mark.parametrize("kind", ["none", "padding", "causal_flag", "no_key"])
def test_gradcheck_float64(block, kind):
    q, k, v = _qkv(batch=1, heads=2, q_len=7, k_len=7, d_k=4, d_v=3, dtype=torch.float64, grad=True)
    mask, causal = None, False
    if kind == "padding":
        mask = _padding(1, 7)
    elif kind == "causal_flag":
        causal = True
    elif kind == "no_key":
        mask = causal_mask(7).clone()
        mask[2] = False
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, mask, block, causal), (q, k, v))


@pytest.mark.parametrize("block", [1, 4, 5, 32])
def test_gradients_equal_the_explicit_path(block):
    q, k, v = _qkv(q_len=12, k_len=12, dtype=torch.float64, grad=True)
    mask = (causal_mask(12) & _padding(2, 12)).clone()
    mask[1, 0, 5] = False  # a query that sees no key
    grad_out = torch.randn(2, 3, 12, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    want = torch.autograd.grad(scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v), grad_out)
    got = torch.autograd.grad(flash_attention(q, k, v, mask, block), (q, k, v), grad_out)
    for g, w, name in zip(got, want, "qkv"):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10, msg=f"gradient of {name}")


def test_backward_saves_only_inputs_output_and_lse():
    q, k, v = _qkv(q_len=20, k_len=20, grad=True)
    out = FlashAttention.apply(q, k, v, None, False, 4)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 5
    shapes = sorted(tuple(t.shape) for t in saved)
    assert (2, 3, 20) in shapes  # the log-sum-exp: one number per query
    assert all(t.numel() <= 2 * 3 * 20 * 8 for t in saved)  # nothing (q_len, k_len)-sized


def test_float32_gradients_close_to_sdpa():
    q, k, v = _qkv(q_len=30, k_len=30, grad=True)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(), (q, k, v))
    got = torch.autograd.grad(flash_attention(q, k, v, block_size=7, causal=True).sum(), (q, k, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("call,match", [
    (lambda q, k, v: flash_attention(q[0], k, v), r"query must be shaped \(batch, heads, q_len, d_k\)"),
    (lambda q, k, v: flash_attention(q, k[..., :3], v), "query and key must share d_k"),
    (lambda q, k, v: flash_attention(q, k, v[:, :, :2]), "key and value must have the same length"),
    (lambda q, k, v: flash_attention(q, k[:1], v[:1]), r"share \(batch, heads\)"),
    (lambda q, k, v: flash_attention(q, k, v, block_size=0), "block_size must be a positive int"),
    (lambda q, k, v: flash_attention(q, k, v, block_size=2.5), "block_size must be a positive int"),
    (lambda q, k, v: flash_attention(q, k, v, torch.ones(13, 13)), "mask must be boolean"),
    (lambda q, k, v: flash_attention(q, k, v, torch.ones(12, 13, dtype=torch.bool)), "q_len dimension is 12"),
    (lambda q, k, v: flash_attention(q, k, v, causal=1), "causal must be True or False"),
    (lambda q, k, v: flash_attention(q.long(), k, v), "query must be a floating-point tensor"),
    (lambda q, k, v: flash_attention(q, k.double(), v), "share one dtype"),
    (lambda q, k, v: flash_attention(q.tolist(), k, v), "query must be a torch.Tensor"),
    (lambda q, k, v: online_softmax(q, 0), "block_size must be a positive int"),
    (lambda q, k, v: online_softmax(q.long(), 4), "x must be a floating-point tensor"),
])
def test_bad_input_is_named(call, match):
    q, k, v = _qkv()
    with pytest.raises((ValueError, TypeError), match=match):
        call(q, k, v)


# peak memory, measured (tfm_lesson.look.memory) ---------------------------------------------------------------------------
def test_peak_tensor_bytes_counts_what_lives_at_once():
    from tfm_lesson.look.memory import peak_tensor_bytes

    def two_then_one():
        a = torch.ones(1000)  # 4,000 bytes
        b = torch.ones(500)  # 2,000 bytes: 6,000 live at once
        del a, b
        c = torch.ones(250)  # 1,000 bytes, after the others are freed
        return c

    assert peak_tensor_bytes(two_then_one) == 6000
    x = torch.ones(1000)
    assert peak_tensor_bytes(lambda: x[:10].view(2, 5)) == 0  # views of an input allocate nothing
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_tensor_bytes(3)


def test_tiled_attention_never_holds_the_square_matrix():
    from tfm_lesson.look.memory import peak_tensor_bytes

    length, d_k, block = 512, 16, 32
    q, k, v = _qkv(batch=1, heads=1, q_len=length, k_len=length, d_k=d_k, d_v=d_k)
    with torch.no_grad():
        explicit = peak_tensor_bytes(scaled_dot_product_attention, q, k, v)
        tiled = peak_tensor_bytes(flash_attention, q, k, v, block_size=block)
    square = length * length * 4
    assert explicit >= 2 * square  # scores and weights, (q_len, k_len) each
    assert tiled < square / 10  # the output and a few (block, block) tiles


# the chapter's two figures (tfm_lesson.look.viz) -------------------------------------------------------------------------
def test_scaling_and_roofline_figures():
    from matplotlib.figure import Figure

    from tfm_lesson import viz

    fig = viz.plot_scaling([256, 512, 1024], {"explicit": [1.0, 4.0, 16.0], "tiled": torch.tensor([0.1, 0.2, 0.4])})
    assert isinstance(fig, Figure) and fig.axes[0].get_title() and fig.axes[0].get_xscale() == "log"
    assert fig._repr_png_()[:4] == b"\x89PNG"
    roof = viz.plot_roofline(100.0, 10.0, {"decode": (0.5, 4.0), "prefill": (100.0, 80.0)})
    assert isinstance(roof, Figure) and "intensity" in roof.axes[0].get_xlabel()
    with pytest.raises(ValueError, match="one per length"):
        viz.plot_scaling([1, 2], {"a": [1.0]})
    with pytest.raises(ValueError, match="lengths must be positive"):
        viz.plot_scaling([0, 2], {"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"points\['x'\] must be \(FLOPs per byte, GFLOP/s\)"):
        viz.plot_roofline(1.0, 1.0, {"x": 3.0})
    with pytest.raises(ValueError, match="bandwidth_gbs must be positive"):
        viz.plot_roofline(1.0, -1.0, {"x": (1.0, 1.0)})


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_resident_peak_rise_sees_a_large_temporary():
    from tfm_lesson.look.memory import resident_peak_rise

    def big_temporary():
        x = torch.ones(32 * 2**20)  # 128 MiB, touched, then freed
        return x.sum().item()

    assert resident_peak_rise(big_temporary) > 100 * 2**20
    assert resident_peak_rise(lambda: 1) < 16 * 2**20
    with pytest.raises(TypeError, match="fn must be callable"):
        resident_peak_rise(None)


def test_a_second_derivative_is_refused_not_wrong():
    q, k, v = _qkv(batch=1, heads=1, q_len=4, k_len=4, dtype=torch.float64, grad=True)
    (grad_q,) = torch.autograd.grad(flash_attention(q, k, v, block_size=2).sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        grad_q.sum().backward()
