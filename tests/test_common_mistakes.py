"""Chapter 13: every classic mistake of the chapter is caught by its checker with the expected hint, and every
design the seeds got right passes parity with tfm_lesson."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import tfm_lesson
from tfm_lesson import (EncoderLayer, LayerNorm, MultiHeadAttention, PositionwiseFeedForward, Transformer,
                        causal_mask, padding_mask, scaled_dot_product_attention, sinusoidal_table)
from tfm_lesson.checks import (Mistake, check_attention, check_causal_mask, check_decoder_mask, check_encoder_layer,
                               check_feed_forward, check_generator, check_layer_norm,
                               check_learned_positional_encoding, check_multi_head_attention, check_padding_mask,
                               check_positional_encoding)


def hint_of(check, obj) -> str:
    with pytest.raises(AssertionError) as info:
        check(obj)
    return str(info.value)


# --- attention-level bugs ------------------------------------------------------------------------------------------
class _MHA(MultiHeadAttention):
    """Multi-head attention written out, with switches for the classic bugs."""
    scale_by_d_model = False
    query_layer = "w_q"
    merge_transpose = True

    def forward(self, query, key, value, mask=None):
        batch, q_len, _ = query.shape
        q = self._split_heads(getattr(self, self.query_layer)(query))  # (batch, heads, q_len, d_k)
        k, v = self._split_heads(self.w_k(key)), self._split_heads(self.w_v(value))  # (batch, heads, k_len, d_k)
        scale = math.sqrt(self.d_model if self.scale_by_d_model else self.d_k)
        scores = q @ k.transpose(-2, -1) / scale  # (batch, heads, q_len, k_len)
        weights = scores.softmax(-1)
        if mask is not None:
            has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1): False for a query that sees no key
            weights = scores.masked_fill(~(mask | ~has_key), float("-inf")).softmax(-1).masked_fill(~has_key, 0.0)
        out = weights @ v  # (batch, heads, q_len, d_k)
        if self.merge_transpose:
            out = out.transpose(1, 2)
        return self.w_o(out.reshape(batch, q_len, self.d_model))


class ScaledByDModel(_MHA):
    scale_by_d_model = True


class QueryWithKeyLayer(_MHA):
    query_layer = "w_k"


class MergeWithoutTranspose(_MHA):
    merge_transpose = False


def test_a_subclass_of_the_reference_is_refused_unless_told():
    # chapter 03 exercise 3's rule (the reference could do the work); chapter 13 derives on purpose and says so
    assert "WRITE IT YOURSELF" in hint_of(check_multi_head_attention, _MHA)


def test_correct_written_out_mha_passes():
    check_multi_head_attention(_MHA, written_yourself=False)


@pytest.mark.parametrize("cls, hint", [
    (ScaledByDModel, "sqrt(d_model), not sqrt(d_k)"),
    (QueryWithKeyLayer, "the query looks projected with w_k instead of w_q"),
    (MergeWithoutTranspose, "merged without the transpose"),
])
def test_mha_mistakes(cls, hint):
    assert hint in hint_of(lambda c: check_multi_head_attention(c, written_yourself=False), cls)


def attention_neg_inf(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ value


def attention_minus_1e9(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        has_key = mask.any(-1, keepdim=True)
        scores = scores.masked_fill(~mask, -1e9)
        return scores.softmax(-1).masked_fill(~has_key, 0.0) @ value
    return scores.softmax(-1) @ value


def attention_torch_polarity(query, key, value, mask=None):
    # nn.MultiheadAttention's convention (True = blocked) fed to SDPA (True = may attend)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=None if mask is None else ~mask)


def test_attention_mistakes():
    assert "came out NaN" in hint_of(check_attention, attention_neg_inf)
    hint = hint_of(check_attention, attention_minus_1e9)
    assert "-1e9 does not fit in float16" in hint
    assert "INVERTED mask" in hint_of(check_attention, attention_torch_polarity)


def test_neg_inf_gives_nan_and_1e9_overflows_float16():
    q = k = v = torch.randn(1, 3, 4)
    mask = torch.tensor([[True, True, True], [False, False, False], [True, False, True]])
    assert torch.isnan(attention_neg_inf(q, k, v, mask)[0, 1]).all()
    with pytest.raises(RuntimeError, match="overflow"):
        attention_minus_1e9(q.half(), k.half(), v.half(), mask)


# --- masks ---------------------------------------------------------------------------------------------------------
def padding_mask_on_queries(tokens, pad_id):
    return (tokens != pad_id)[:, None, :, None]  # (batch, 1, seq_len, 1): hides queries, not keys


def causal_off_by_one(size):
    return torch.ones(size, size, dtype=torch.bool).tril(1)


def test_mask_mistakes():
    assert "masks QUERIES (rows), not keys" in hint_of(check_padding_mask, padding_mask_on_queries)
    assert "shifted by one" in hint_of(check_causal_mask, causal_off_by_one)


# --- layer norm, feed-forward, positions ---------------------------------------------------------------------------
class EpsOutsideSqrt(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (var.sqrt() + self.eps) + self.bias


class NoActivation(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x))


class PositionsAlongBatch(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model))

    def forward(self, x):  # x: (batch, seq_len, d_model)
        return x + self.pe[: x.size(0)].unsqueeze(1).to(x.dtype)  # indexes positions with the BATCH size


def test_component_mistakes():
    assert "eps OUTSIDE the square root" in hint_of(check_layer_norm, EpsOutsideSqrt)
    assert "NO activation" in hint_of(check_feed_forward, NoActivation)
    assert "indexed along the batch axis" in hint_of(check_positional_encoding, PositionsAlongBatch)


# --- encoder layers ------------------------------------------------------------------------------------------------
class DeepcopyResidual(EncoderLayer):
    def forward(self, x, mask=None):
        residual = copy.deepcopy(x)
        x = self.norm1(residual + self.self_attn(x, x, x, mask)[0])
        residual = copy.deepcopy(x)
        return self.norm2(residual + self.feed_forward(x))


class IfMask(EncoderLayer):
    def forward(self, x, mask=None):
        if mask:
            x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        else:
            x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.feed_forward(x))


class MisspelledMaskNameError(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, maks)[0])  # noqa: F821 - the bug
        return self.norm2(x + self.feed_forward(x))


maks = None  # a stale global (a notebook cell run long ago) makes the misspelling silent


class MisspelledMaskSilent(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, maks)[0])
        return self.norm2(x + self.feed_forward(x))


class PostNormProsePreNormCode(EncoderLayer):
    """Post-norm, as in the paper: x = LayerNorm(x + Sublayer(x))."""

    def forward(self, x, mask=None):
        x = x + self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)[0]
        return x + self.feed_forward(self.norm2(x))


def test_encoder_layer_mistakes():
    check_encoder_layer(EncoderLayer)
    assert "residual" in hint_of(check_encoder_layer, DeepcopyResidual)
    assert "`if mask is not None:`" in hint_of(check_encoder_layer, IfMask)
    global maks
    saved = maks
    del globals()["maks"]
    try:
        assert "NameError" in hint_of(check_encoder_layer, MisspelledMaskNameError)
    finally:
        maks = saved
    assert "ignore its `mask` argument" in hint_of(check_encoder_layer, MisspelledMaskSilent)
    assert "layer norms are in the wrong place" in hint_of(check_encoder_layer, PostNormProsePreNormCode)


# --- the seeds' designs, done right --------------------------------------------------------------------------------
class SeedLearnedPositions(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):  # x: (batch, seq_len, d_model)
        return x + self.embedding.weight[: x.size(1)]


class FusedQKV(nn.Module):
    """One Linear(d_model, 3 d_model) for Q, K and V (self-attention only)."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        batch, length, d_model = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, self.d_k).permute(2, 0, 3, 1, 4)
        out, _ = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], mask)  # (batch, heads, len, d_k)
        return self.out(out.transpose(1, 2).reshape(batch, length, d_model))


def load_fused(fused: FusedQKV, mha: MultiHeadAttention) -> None:
    with torch.no_grad():
        fused.qkv.weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        fused.qkv.bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        fused.out.load_state_dict(mha.w_o.state_dict())


class SeparateProjections(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def split(self, x):  # (batch, len, d_model) -> (batch, heads, len, d_k)
        return x.view(x.size(0), x.size(1), self.heads, self.d_k).transpose(1, 2)

    def merge(self, x):  # (batch, heads, len, d_k) -> (batch, len, d_model)
        return x.transpose(1, 2).reshape(x.size(0), x.size(2), self.heads * self.d_k)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.w_q(query)), self.split(self.w_k(key)), self.split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(self.merge(out)), weights


class LogProbGenerator(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return self.proj(x).log_softmax(-1)


def seed_tgt_mask(tokens, pad_id):
    size = tokens.size(1)
    causal = torch.ones(size, size, dtype=torch.bool, device=tokens.device).tril()  # on the ids' device
    return (tokens != pad_id)[:, None, None, :] & causal


def test_learned_positions():
    check_learned_positional_encoding(SeedLearnedPositions)
    model = Transformer(src_vocab_size=11, tgt_vocab_size=11, d_model=8, heads=2, d_ff=16, num_encoder_layers=1,
                        num_decoder_layers=1, max_len=12, positional="learned")
    assert isinstance(model.positional, tfm_lesson.LearnedPositionalEncoding)


def test_fused_qkv_equals_multi_head_attention():
    torch.manual_seed(0)
    mha, fused = MultiHeadAttention(16, 4).eval(), FusedQKV(16, 4)
    load_fused(fused, mha)
    x = torch.randn(3, 5, 16)
    mask = padding_mask(torch.tensor([[4, 4, 4, 0, 0], [5, 5, 5, 5, 5], [6, 0, 0, 0, 0]]), 0)
    assert torch.allclose(fused(x, mask), mha(x, x, x, mask)[0], atol=1e-6)


def test_separate_projections_pass():
    check_multi_head_attention(SeparateProjections, written_yourself=False)


def test_masks_from_pad_ids():
    check_decoder_mask(seed_tgt_mask)
    check_padding_mask(padding_mask)
    model = Transformer(src_vocab_size=11, tgt_vocab_size=11, d_model=8, heads=2, d_ff=16, num_encoder_layers=1,
                        num_decoder_layers=1, dropout=0.0).eval()
    src = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    tgt = torch.tensor([[1, 4, 4, 0, 0], [1, 5, 5, 5, 2]])
    assert torch.equal(model.make_tgt_mask(tgt), seed_tgt_mask(tgt, 0))
    with torch.no_grad():
        implicit = model(src, tgt)
        explicit = model(src, tgt, padding_mask(src, 0), seed_tgt_mask(tgt, 0))
    assert torch.allclose(implicit, explicit)


def test_pre_norm_with_log_prob_generator():
    check_generator(LogProbGenerator)
    check_encoder_layer(EncoderLayer)  # covers norm_first=True
    model = Transformer(src_vocab_size=11, tgt_vocab_size=11, d_model=8, heads=2, d_ff=16, num_encoder_layers=1,
                        num_decoder_layers=1, dropout=0.0, norm_first=True).eval()
    assert model.encoder.norm is not None
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 4, 4, 2]])
    gen = LogProbGenerator(8, 11)
    with torch.no_grad():
        gen.proj.weight.copy_(model.generator.weight)  # tied to the target embedding
        gen.proj.bias.zero_()  # tfm_lesson's generator has no bias
        log_probs = gen(model.decode(tgt, model.encode(src)))  # (batch, tgt_len, vocab)
        logits = model(src, tgt)
    assert torch.allclose(log_probs, logits.log_softmax(-1), atol=1e-6)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(1, 4), atol=1e-5)


# --- the symptoms the chapter shows --------------------------------------------------------------------------------
def test_symptoms():
    torch.manual_seed(0)
    # 3: a bare reshape mixes positions: with self-only attention, position 0 then depends on position 1
    only_self = torch.eye(6, dtype=torch.bool)
    x = torch.randn(1, 6, 16)
    x2 = x.clone()
    x2[0, 1] += 1.0
    for cls, leaks in ((_MHA, False), (MergeWithoutTranspose, True)):
        module = cls(16, 4).eval()
        with torch.no_grad():
            changed = not torch.allclose(module(x, x, x, only_self)[0, 0], module(x2, x2, x2, only_self)[0, 0])
        assert changed is leaks
    # 6: tfm_lesson's mask handed to nn.MultiheadAttention attends only to the pads
    keep = padding_mask(torch.tensor([[7, 8, 9, 0, 0]]), 0)[:, 0, 0, :]  # (1, 5)
    mha = nn.MultiheadAttention(4, 1, batch_first=True).eval()
    seq = torch.randn(1, 5, 4)
    with torch.no_grad():
        flipped = mha(seq, seq, seq, key_padding_mask=keep)[1]
        right = mha(seq, seq, seq, key_padding_mask=tfm_lesson.torch_mask(keep))[1]
    assert torch.allclose(flipped[0, :, 3:].sum(-1), torch.ones(5))
    assert torch.allclose(right[0, :, 3:].sum(-1), torch.zeros(5))
    # 11: eps outside the square root is invisible at unit variance, large at tiny variance
    x = torch.randn(1, 4, 8)
    assert (EpsOutsideSqrt(8)(x) - nn.LayerNorm(8)(x)).abs().max() < 1e-4
    assert (EpsOutsideSqrt(8)(x * 1e-3) - nn.LayerNorm(8)(x * 1e-3)).abs().max() > 0.1
    # 12: no activation makes the feed-forward network affine
    a, b, zero = torch.randn(1, 3, 16), torch.randn(1, 3, 16), torch.zeros(1, 3, 16)
    for module, affine in ((NoActivation(16, 64), True), (PositionwiseFeedForward(16, 64), False)):
        f0 = module(zero)
        assert torch.allclose(module(a + b) - f0, module(a) + module(b) - 2 * f0, atol=1e-5) is affine
    # 13: with one sequence the batch-axis bug runs and gives every position the same encoding
    out = PositionsAlongBatch(8)(torch.zeros(1, 5, 8))
    assert bool((out == out[:, :1]).all())
    # 15: a post-norm layer's output is normalised per position; the pre-norm code's is not
    x = torch.randn(2, 5, 16) * 3
    with torch.no_grad():
        post = EncoderLayer(16, 2, 32, dropout=0.0).eval()(x).std(-1, unbiased=False)
        bug = PostNormProsePreNormCode(16, 2, 32, dropout=0.0).eval()(x).std(-1, unbiased=False)
    assert torch.allclose(post, torch.ones_like(post), atol=1e-3)
    assert not torch.allclose(bug, torch.ones_like(bug), atol=0.1)
