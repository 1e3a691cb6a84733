"""Today's block, part by part: RMSNorm, rotary embeddings, SwiGLU and grouped-query attention, each proven
equal to its reference (torch.nn.RMSNorm, transformers' Llama code, F.scaled_dot_product_attention with
enable_gqa) to 1e-5 in float32, with clear errors for bad input."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfm_lesson.cache import KVCache
from tfm_lesson.modern import (GroupedQueryAttention, RMSNorm, RotaryEmbedding, SwiGLU, apply_rotary,
                               interleaved_to_halves, kv_cache_nbytes, repeat_kv, rms_norm, rotary_cos_sin,
                               rotary_frequencies, rotate_half, swiglu_hidden)

ATOL = 1e-5


def _has_enable_gqa() -> bool:
    try:
        F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 2), torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2),
                                       enable_gqa=True)
        return True
    except TypeError:
        return False


needs_rms_norm = pytest.mark.skipif(not hasattr(nn, "RMSNorm"), reason="torch.nn.RMSNorm needs torch >= 2.4")
needs_enable_gqa = pytest.mark.skipif(not _has_enable_gqa(), reason="enable_gqa needs torch >= 2.5")


def _max_diff(a, b):
    return (a - b).abs().max().item()


# RMSNorm ------------------------------------------------------------------------------------------------------------
@needs_rms_norm
@pytest.mark.parametrize("eps", [1e-5, 1e-6, None])
@pytest.mark.parametrize("shape", [(2, 5, 16), (7, 8), (2, 3, 4, 12)])
def test_rms_norm_matches_torch(eps, shape):
    torch.manual_seed(0)
    d = shape[-1]
    ours, theirs = RMSNorm(d, eps=eps), nn.RMSNorm(d, eps=eps)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 2.0)
    ours.load_state_dict(theirs.state_dict())  # same parameter name: weight
    for x in (torch.randn(shape) * 3 + 1, torch.randn(shape) * 1e-3):  # typical, and tiny where eps matters
        assert _max_diff(ours(x), theirs(x)) <= ATOL * max(1.0, x.abs().max().item())


@needs_rms_norm
def test_rms_norm_float64_and_explicit_function():
    x = torch.randn(3, 4, 10, dtype=torch.float64)
    norm = RMSNorm(10, eps=1e-6).double()
    ref = nn.RMSNorm(10, eps=1e-6).double()
    assert _max_diff(norm(x), ref(x)) < 1e-12
    assert _max_diff(rms_norm(x, None, 1e-6), x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6)) < 1e-12


def test_rms_norm_matches_llama_rms_norm():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    theirs = LlamaRMSNorm(24, eps=1e-6)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 2.0)
    ours = RMSNorm(24, eps=1e-6)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 9, 24) * 4
    assert _max_diff(ours(x), theirs(x)) <= ATOL


def test_rms_norm_rescales_but_does_not_recentre():
    x = torch.randn(4, 6, 32) * 5 + 3
    y = RMSNorm(32, eps=1e-12)(x).detach()
    assert torch.allclose(y.pow(2).mean(-1), torch.ones(4, 6), atol=1e-5)  # root mean square 1
    assert y.mean(-1).abs().min() > 0.1  # the mean is kept (layer norm would make it 0)
    assert torch.allclose(RMSNorm(32)(2.5 * x), RMSNorm(32)(x), atol=1e-5)  # scale-invariant like layer norm
    assert not torch.allclose(RMSNorm(32)(x + 1), RMSNorm(32)(x), atol=1e-3)  # but not shift-invariant


def test_rms_norm_errors():
    with pytest.raises(ValueError, match="d_model"):
        RMSNorm(0)
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(8, eps=-1.0)
    with pytest.raises(ValueError, match=r"d_model=8"):
        RMSNorm(8)(torch.randn(2, 3, 7))
    with pytest.raises(TypeError, match="floating-point"):
        RMSNorm(8)(torch.ones(2, 8, dtype=torch.long))


# rotary embeddings --------------------------------------------------------------------------------------------------
def _hf_rotary(q, k, base, offset):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    heads, d_k = q.size(1), q.size(-1)
    config = LlamaConfig(hidden_size=heads * d_k, num_attention_heads=heads, rope_theta=base)
    rotary = LlamaRotaryEmbedding(config)
    positions = torch.arange(offset, offset + q.size(2))[None].expand(q.size(0), -1)
    cos, sin = rotary(q, positions)
    return apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6, 100.0])
@pytest.mark.parametrize("offset", [0, 3, 117])
def test_rotary_matches_transformers(base, offset):
    pytest.importorskip("transformers")
    torch.manual_seed(1)
    q, k = torch.randn(2, 4, 9, 16), torch.randn(2, 4, 9, 16)
    rotary = RotaryEmbedding(16, base=base)
    q_ref, k_ref = _hf_rotary(q, k, base, offset)
    assert _max_diff(rotary(q, offset), q_ref) <= ATOL
    assert _max_diff(rotary(k, offset), k_ref) <= ATOL


def test_rotary_frequencies_and_rotate_half():
    theta = rotary_frequencies(8, base=10000.0)
    assert torch.allclose(theta, torch.tensor([1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75]))
    x = torch.arange(1.0, 7.0)
    assert rotate_half(x).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_depends_only_on_relative_position(interleaved):
    torch.manual_seed(2)
    rotary = RotaryEmbedding(32, interleaved=interleaved)
    q, k = torch.randn(32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)

    def score(m, n):
        qm = rotary(q.float()[None].expand(m + 1, -1).contiguous())[m]
        kn = rotary(k.float()[None].expand(n + 1, -1).contiguous())[n]
        return (qm * kn).sum().item()

    for delta in (0, 1, 5):
        scores = [score(m + delta, m) for m in (0, 3, 11, 40)]
        assert max(scores) - min(scores) < 1e-4, scores
    assert abs(score(5, 0) - score(0, 5)) > 1e-3  # m - n, not |m - n|: direction matters
    x = torch.randn(3, 10, 32)
    assert torch.allclose(rotary(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths


def test_interleaved_is_a_permutation_of_halves():
    torch.manual_seed(3)
    x = torch.randn(2, 3, 7, 12)
    perm = interleaved_to_halves(12)
    halves, inter = RotaryEmbedding(12), RotaryEmbedding(12, interleaved=True)
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]
    assert _max_diff(halves(x[..., perm], 4), inter(x, 4)[..., perm]) <= ATOL
    assert _max_diff(halves(x, 4), inter(x, 4)) > 0.1  # the two conventions are not interchangeable


def test_interleaved_matches_complex_multiplication():
    """Meta's original Llama code: view pairs (x[2i], x[2i+1]) as complex numbers, multiply by e^{i m theta}."""
    torch.manual_seed(4)
    x = torch.randn(2, 5, 8)
    angles = torch.arange(5.0)[:, None] * rotary_frequencies(8)  # (5, 4)
    z = torch.view_as_complex(x.reshape(2, 5, 4, 2)) * torch.polar(torch.ones_like(angles), angles)
    assert _max_diff(RotaryEmbedding(8, interleaved=True)(x), torch.view_as_real(z).flatten(-2)) <= ATOL


def test_rotary_with_offsets_equals_one_long_sequence():
    rotary = RotaryEmbedding(16, base=5000.0)
    x = torch.randn(1, 2, 12, 16)
    whole = rotary(x)
    parts = torch.cat([rotary(x[:, :, :5], 0), rotary(x[:, :, 5:6], 5), rotary(x[:, :, 6:], 6)], dim=2)
    assert _max_diff(whole, parts) <= ATOL
    cos, sin = rotary_cos_sin(torch.arange(12), 16, 5000.0)
    assert _max_diff(apply_rotary(x, cos, sin), whole) <= ATOL


def test_rotary_errors():
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="rope_theta"):
        RotaryEmbedding(8, base=1.0)
    with pytest.raises(ValueError, match="d_k=8"):
        RotaryEmbedding(8)(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="offset"):
        RotaryEmbedding(8)(torch.randn(2, 5, 8), offset=-1)
    with pytest.raises(TypeError, match="floating-point"):
        RotaryEmbedding(8)(torch.ones(2, 5, 8, dtype=torch.long))


# SwiGLU -------------------------------------------------------------------------------------------------------------
def test_swiglu_hidden_matches_the_ffn_parameter_count():
    assert swiglu_hidden(1536) == 1024 and swiglu_hidden(2048) == 1365
    assert swiglu_hidden(2048, multiple_of=256) == 1536
    for d_model, d_ff in ((64, 256), (512, 2048), (96, 384)):
        ffn = 2 * d_model * d_ff
        swiglu = sum(p.numel() for p in SwiGLU(d_model, swiglu_hidden(d_ff)).parameters())
        assert abs(swiglu - ffn) <= 3 * d_model  # within one hidden unit (3 weights per unit)
    with pytest.raises(ValueError, match="d_ff"):
        swiglu_hidden(0)


def test_swiglu_matches_llama_mlp():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(5)
    theirs = LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=86))
    ours = SwiGLU(32, 86)
    with torch.no_grad():
        for mine, hf in ((ours.w_gate, theirs.gate_proj), (ours.w_up, theirs.up_proj), (ours.w_down, theirs.down_proj)):
            mine.weight.copy_(hf.weight)
    x = torch.randn(3, 7, 32)
    assert _max_diff(ours(x), theirs(x)) <= ATOL


def test_swiglu_formula_and_bias_option():
    torch.manual_seed(6)
    ffn = SwiGLU(16, 40, bias=True)
    x = torch.randn(2, 3, 16)
    gate, up = x @ ffn.w_gate.weight.T + ffn.w_gate.bias, x @ ffn.w_up.weight.T + ffn.w_up.bias
    expected = (gate * torch.sigmoid(gate) * up) @ ffn.w_down.weight.T + ffn.w_down.bias
    assert _max_diff(ffn(x), expected) <= ATOL
    assert all(lin.bias is None for lin in (SwiGLU(16, 40).w_gate, SwiGLU(16, 40).w_up, SwiGLU(16, 40).w_down))
    with pytest.raises(ValueError, match="d_model=16"):
        SwiGLU(16, 40)(torch.randn(2, 3, 15))
    with pytest.raises(ValueError, match="hidden"):
        SwiGLU(16, 0)


# grouped-query attention --------------------------------------------------------------------------------------------
def _reference_gqa(attn: GroupedQueryAttention, x, mask=None, is_causal=False):
    """The same projections, then torch's own GQA: F.scaled_dot_product_attention(..., enable_gqa=True)."""
    b, n, _ = x.shape
    q = attn.w_q(x).view(b, n, attn.heads, attn.d_k).transpose(1, 2)
    k = attn.w_k(x).view(b, n, attn.kv_heads, attn.d_k).transpose(1, 2)
    v = attn.w_v(x).view(b, n, attn.kv_heads, attn.d_k).transpose(1, 2)
    if attn.rotary is not None:
        q, k = attn.rotary(q), attn.rotary(k)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
    return attn.w_o(out.transpose(1, 2).reshape(b, n, -1))


@needs_enable_gqa
def test_enable_gqa_is_repeat_interleave():
    """torch >= 2.5: enable_gqa=True lets 8 query heads share 2 key/value heads, in the repeat_interleave order."""
    q, k, v = torch.randn(1, 8, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    theirs = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert _max_diff(theirs, F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4))) <= ATOL
    assert _max_diff(theirs, F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1))) > 1e-3


@needs_enable_gqa
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1), (6, 3), (8, 2)])
@pytest.mark.parametrize("rope", [False, True])
def test_gqa_matches_sdpa_enable_gqa(heads, kv_heads, rope):
    torch.manual_seed(7)
    d_model = 8 * heads
    rotary = RotaryEmbedding(8, base=20000.0) if rope else None
    attn = GroupedQueryAttention(d_model, heads, kv_heads, bias=True, rotary=rotary).eval()
    x = torch.randn(2, 9, d_model)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    out, weights = attn(x, x, x, causal)
    assert weights is None
    assert _max_diff(out, _reference_gqa(attn, x, is_causal=True)) <= ATOL
    slow, weights = attn(x, x, x, causal, need_weights=True)  # the explicit path gives the same numbers
    assert _max_diff(slow, out) <= ATOL and weights.shape == (2, heads, 9, 9)
    assert torch.allclose(weights.sum(-1), torch.ones(2, heads, 9), atol=1e-6)


def test_repeat_kv_order_matches_transformers():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv

    k = torch.randn(2, 3, 5, 4)
    assert torch.equal(repeat_kv(k, 2), hf_repeat_kv(k, 2))
    assert not torch.equal(repeat_kv(k, 2), k.repeat(1, 2, 1, 1))  # tiling is the wrong order
    assert torch.equal(repeat_kv(k, 2)[:, 1], k[:, 0]) and torch.equal(repeat_kv(k, 2)[:, 2], k[:, 1])


@pytest.mark.parametrize("heads,kv_heads", [(4, 1), (4, 2), (4, 4)])
def test_gqa_with_cache_equals_full_forward_and_stores_kv_heads(heads, kv_heads):
    torch.manual_seed(8)
    attn = GroupedQueryAttention(64, heads, kv_heads, rotary=RotaryEmbedding(64 // heads, base=50000.0)).eval()
    x = torch.randn(2, 10, 64)
    causal = torch.ones(10, 10, dtype=torch.bool).tril()
    full, _ = attn(x, x, x, causal)
    cache = KVCache()
    prompt = x[:, :6]
    steps = [attn(prompt, prompt, prompt, causal[:6, :6], cache=cache)[0]]
    for t in range(6, 10):
        step = x[:, t:t + 1]
        steps.append(attn(step, step, step, cache=cache)[0])  # one query sees every cached key
    assert _max_diff(torch.cat(steps, dim=1), full) <= ATOL
    assert len(cache) == 10 and cache.key.shape == (2, kv_heads, 10, 64 // heads)
    # the memory saving, on the real tensors: heads / kv_heads
    mha_cache = KVCache()
    mha = GroupedQueryAttention(64, heads, heads, rotary=RotaryEmbedding(64 // heads)).eval()
    mha(x, x, x, causal, cache=mha_cache)
    assert mha_cache.nbytes == (heads // kv_heads) * cache.nbytes
    assert cache.nbytes == kv_cache_nbytes(batch=2, length=10, num_layers=1, kv_heads=kv_heads, d_k=64 // heads)


def test_gqa_without_offset_is_wrong_with_a_cache():
    """Rotating the new token as if it were at position 0 (no offset) changes the result: the offset matters."""
    torch.manual_seed(9)
    attn = GroupedQueryAttention(32, 4, 2, rotary=RotaryEmbedding(8)).eval()
    x = torch.randn(1, 5, 32)
    full, _ = attn(x, x, x, torch.ones(5, 5, dtype=torch.bool).tril())
    cache = KVCache()
    attn(x[:, :4], x[:, :4], x[:, :4], torch.ones(4, 4, dtype=torch.bool).tril(), cache=cache)
    right, _ = attn(x[:, 4:], x[:, 4:], x[:, 4:], cache=cache)
    assert _max_diff(right[:, 0], full[:, 4]) <= ATOL
    k_pos0 = attn.rotary(attn._split(attn.w_k(x[:, 4:]), 2), 0)
    assert _max_diff(k_pos0, cache.key[:, :, 4:]) > 1e-3  # the cached key was rotated at position 4, not 0


def test_gqa_no_bias_and_parameter_count():
    attn = GroupedQueryAttention(64, 8, 2)
    assert all(lin.bias is None for lin in (attn.w_q, attn.w_k, attn.w_v, attn.w_o))
    d_k = 8
    assert sum(p.numel() for p in attn.parameters()) == 2 * 64 * 64 + 2 * 64 * 2 * d_k
    assert sum(p.numel() for p in GroupedQueryAttention(64, 8, 8, bias=True).parameters()) == 4 * 64 * 64 + 4 * 64


def test_gqa_fully_masked_row_is_zero_not_nan():
    attn = GroupedQueryAttention(16, 4, 2).eval()
    x = torch.randn(1, 3, 16)
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out, _ = attn(x, x, x, mask)
    assert not torch.isnan(out).any()
    assert torch.allclose(out[0, 1], attn.w_o(torch.zeros(16)), atol=1e-6)


def test_gqa_errors():
    with pytest.raises(ValueError, match="kv_heads=3 must divide heads=4"):
        GroupedQueryAttention(32, 4, 3)
    with pytest.raises(ValueError, match="divisible by heads"):
        GroupedQueryAttention(30, 4, 2)
    with pytest.raises(ValueError, match="rotary"):
        GroupedQueryAttention(32, 4, 2, rotary=RotaryEmbedding(16))
    attn = GroupedQueryAttention(32, 4, 2)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="d_model=32"):
        attn(x[..., :31], x, x)
    with pytest.raises(ValueError, match="mask"):
        attn(x, x, x, torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="batch"):
        attn(x, x[:1], x[:1])
    with pytest.raises(ValueError, match="kv_heads"):
        kv_cache_nbytes(1, 10, 2, 0, 8)
    assert math.isclose(kv_cache_nbytes(1, 1024, 32, 8, 128, torch.float16) / 2 ** 20, 128.0)


# the ablation ---------------------------------------------------------------------------------------------------------
def test_variant_configs_are_cumulative_and_end_at_todays_block():
    from tfm_lesson.gpt import GPT
    from tfm_lesson.train.ablation import VARIANTS, variant_configs

    configs = variant_configs(vocab_size=100, d_model=32, heads=4, d_ff=128)
    assert [name for name, _ in configs] == [name for name, _ in VARIANTS]
    first, last = configs[0][1], configs[-1][1]
    assert (first["norm_first"], first["positional"], first["activation"], first["norm"], first["bias"]) == \
        (False, "learned", "relu", "layer", True) and first.get("kv_heads") is None
    assert (last["norm_first"], last["positional"], last["activation"], last["norm"], last["bias"], last["kv_heads"],
            last["d_ff"]) == (True, "rope", "swiglu", "rms", False, 2, swiglu_hidden(128))
    for (_, before), (_, after) in zip(configs, configs[1:]):  # one change at a time
        assert 1 <= sum(before.get(k) != after.get(k) for k in set(before) | set(after)) <= 2
    for _, config in configs:
        GPT(**config)


def test_summarise_pairs_seeds():
    from tfm_lesson.train.ablation import format_summary, summarise

    runs = [dict(variant=v, seed=s, valid_loss=loss, parameters=10, seconds=1.0)
            for v, losses in (("a", (3.0, 3.2, 3.4)), ("b", (2.9, 3.1, 3.3)), ("c", (3.0, 3.0, 3.3)))
            for s, loss in enumerate(losses)]
    rows = summarise({"runs": runs})
    assert math.isclose(rows[0]["mean"], 3.2) and math.isclose(rows[0]["std"], 0.2)
    assert math.isclose(rows[1]["diff"], -0.1) and rows[1]["diff_std"] < 1e-9 and not rows[1]["inside_noise"]
    assert math.isclose(rows[2]["diff"], 0.0, abs_tol=1e-12) and rows[2]["inside_noise"]
    assert math.isclose(rows[2]["ci95"], 4.303 * 0.1 / math.sqrt(3), rel_tol=1e-3)  # Student's t, 2 degrees of freedom
    assert "inside the noise?" in format_summary(rows)


def test_shipped_ablation_is_complete():
    from tfm_lesson.train.ablation import VARIANTS, load_ablation, plot_ablation, summarise

    results = load_ablation()
    rows = summarise(results)
    assert [r["variant"] for r in rows] == [name for name, _ in VARIANTS]
    assert all(r["seeds"] >= 3 for r in rows) and results["settings"]["steps"] >= 100
    assert all(math.isfinite(r["valid_loss"]) for r in results["runs"])
    plot_ablation(results)


def test_ablation_runs_end_to_end():
    from tfm_lesson.train.ablation import VARIANTS, run_ablation, summarise

    results = run_ablation(seeds=(0, 1), steps=2, batch_size=2, eval_tokens=200, variants=VARIANTS[:2], log=None,
                           max_len=8, d_model=16, heads=2, d_ff=32, num_layers=1)
    assert len(results["runs"]) == 4 and len(summarise(results)) == 2
    assert results["settings"]["unigram_loss"] > 0


def test_gqa_fast_path_agrees_with_the_explicit_path_on_nan_and_masks():
    """Both attentions share tfm_lesson.attention.fast_attention: a NaN query gives NaN, a fully masked row 0,
    a 1-D key mask broadcasts, exactly as the explicit path does."""
    from tfm_lesson.modern import GroupedQueryAttention

    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, heads=4, kv_heads=2).eval()
    finite = torch.randn(2, 5, 16)
    x = finite.clone()
    x[0, 1] = float("nan")
    cases = [(x, None), (x, torch.tensor([True, True, False, True, False])),
             (finite, torch.zeros(2, 1, 5, 5, dtype=torch.bool))]
    for x, mask in cases:
        fast, _ = gqa(x, x, x, mask)
        explicit, _ = gqa(x, x, x, mask, need_weights=True)
        assert torch.equal(torch.isnan(fast), torch.isnan(explicit)), mask
        assert torch.allclose(fast.nan_to_num(), explicit.nan_to_num(), atol=1e-5), mask


# --- issue 22: numbers right in every dtype; clear errors ---------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [300.0, 1e-4, 1e-6])
def test_rms_norm_matches_torch_in_half_precision(dtype, scale):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(64), torch.nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        ours.weight.copy_(torch.rand(64) + 0.5)
        theirs.weight.copy_(ours.weight)
    ours = ours.to(dtype)
    x = (torch.randn(3, 5, 64) * scale).to(dtype)
    # nn.RMSNorm run in float32 on the same half-precision input and weight, cast back: the right answer on any
    # torch (torch 2.5's own float16 RMSNorm overflows at 300 and returns 0; newer torch computes in float32 too)
    theirs.weight.data = theirs.weight.data.to(dtype).float()
    got, expected = ours(x), theirs(x.float()).to(dtype)
    assert got.dtype == dtype and torch.isfinite(got).all()
    torch.testing.assert_close(got, expected)
    if scale == 300.0:  # the outputs are of order 1, not 0 (300 ** 2 overflows float16)
        assert got.float().pow(2).mean() > 0.1


def test_gpt_with_rms_norm_in_float16_large_inputs_stays_finite():
    torch.manual_seed(0)
    norm = RMSNorm(8).half()
    x = torch.full((1, 2, 8), 300.0, dtype=torch.float16)
    torch.testing.assert_close(norm(x), torch.ones_like(x))


def test_modern_blocks_name_a_dtype_mismatch():
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="SwiGLU"):
        SwiGLU(16, 32)(x)
    with pytest.raises(TypeError, match="GroupedQueryAttention"):
        GroupedQueryAttention(16, 4, 2)(x, x, x)


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_rotary_interleaved_must_be_a_bool(flag):
    with pytest.raises(TypeError, match="interleaved must be True or False"):
        RotaryEmbedding(8, interleaved=flag)
