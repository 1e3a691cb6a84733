"""Chapter 03 checkers: the reference passes; each classic mistake fails with its own hint."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tfm_lesson
from tfm_lesson.checks import Mistake, check_merge_heads, check_multi_head_attention, check_split_heads


# split / merge ---------------------------------------------------------------------------------------------------
def split_ok(x, heads):
    b, n, d = x.shape
    return x.view(b, n, heads, d // heads).transpose(1, 2)


def merge_ok(x):
    b, h, n, d_k = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d_k)


def test_split_and_merge_pass(capsys):
    check_split_heads(split_ok)
    check_merge_heads(merge_ok)
    out = capsys.readouterr().out
    assert "check_split_heads passed" in out and "check_merge_heads passed" in out


@pytest.mark.parametrize("fn, hint", [
    (lambda x, h: x.reshape(x.size(0), h, x.size(1), x.size(2) // h), "split without the transpose"),
    (lambda x, h: x.view(x.size(0), x.size(1), h, x.size(2) // h), "transpose(1, 2) that puts heads before"),
    (lambda x, h: x.view(x.size(0), x.size(1), x.size(2) // h, h).permute(0, 3, 1, 2), "contiguous block of d_k"),
    (lambda x, h: split_ok(x, h).float(), "keep the input's dtype"),
    (lambda x, h: None, "did you forget a `return`"),
])
def test_split_mistakes(fn, hint):
    with pytest.raises(Mistake, match=hint.replace("(", r"\(").replace(")", r"\)")):
        check_split_heads(fn)


def merge_view_after_transpose(x):
    b, h, n, d_k = x.shape
    return x.transpose(1, 2).view(b, n, h * d_k)


@pytest.mark.parametrize("fn, hint", [
    (lambda x: x.reshape(x.size(0), x.size(2), -1), "merged without the transpose"),
    (lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), x.size(2), -1), "interleaved"),
    (merge_view_after_transpose, r"not contiguous in memory; use \.reshape"),
])
def test_merge_mistakes(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_merge_heads(fn)


# the module: a plain learner's version, then one small bug each --------------------------------------------------
class LearnerMHA(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def split(self, x):
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.d_k).transpose(1, 2)

    def merge(self, x):
        b, _, n, _ = x.shape
        return x.transpose(1, 2).reshape(b, n, self.heads * self.d_k)

    def project(self, query, key, value):
        return self.w_q(query), self.w_k(key), self.w_v(value)

    def scale(self):
        return math.sqrt(self.d_k)

    def apply_mask(self, scores, mask):
        has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1): False for a query that sees no key
        return scores.masked_fill(~(mask | ~has_key), float("-inf"))  # such a row stays finite here...

    def normalise(self, scores):
        return scores.softmax(dim=-1)

    def zero_empty_rows(self, weights, mask):
        return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # ...and gets zero weights here

    def forward(self, query, key, value, mask=None):
        q, k, v = (self.split(t) for t in self.project(query, key, value))  # (batch, heads, len, d_k)
        scores = q @ k.transpose(-2, -1) / self.scale()  # (batch, heads, q_len, k_len)
        if mask is not None:
            scores = self.apply_mask(scores, mask)
        weights = self.normalise(scores)
        if mask is not None:
            weights = self.zero_empty_rows(weights, mask)
        return self.w_o(self.merge(weights @ v)), weights


class ScaleDModel(LearnerMHA):
    def scale(self):
        return math.sqrt(self.heads * self.d_k)


class MergeNoTranspose(LearnerMHA):
    def merge(self, x):
        b, _, n, _ = x.shape
        return x.reshape(b, n, self.heads * self.d_k)


class SplitNoTranspose(LearnerMHA):
    def split(self, x):
        b, n, _ = x.shape
        return x.reshape(b, self.heads, n, self.d_k)


class QueryThroughKeyLayer(LearnerMHA):
    def project(self, query, key, value):
        return self.w_k(query), self.w_k(key), self.w_v(value)


class KeyValueFromQuery(LearnerMHA):
    def project(self, query, key, value):
        return self.w_q(query), self.w_k(query), self.w_v(query)


class KeyFromQuery(LearnerMHA):  # only K made from the query: crashes once q_len != k_len
    def project(self, query, key, value):
        return self.w_q(query), self.w_k(query), self.w_v(value)


class ValueFromQuery(LearnerMHA):
    def project(self, query, key, value):
        return self.w_q(query), self.w_k(key), self.w_v(query)


class SoftmaxWrongAxis(LearnerMHA):
    def normalise(self, scores):
        return scores.softmax(dim=-2)


class InvertedMask(LearnerMHA):
    def apply_mask(self, scores, mask):
        return scores.masked_fill(mask, -1e9)


class NaNOnFullyMaskedRows(LearnerMHA):  # the textbook -inf fill: a query that sees no key gets 0/0 = NaN
    def apply_mask(self, scores, mask):
        return scores.masked_fill(~mask, float("-inf"))

    def zero_empty_rows(self, weights, mask):
        return weights


class UniformOnFullyMaskedRows(NaNOnFullyMaskedRows):  # -1e9: no NaN, but equal weights over the hidden keys
    def apply_mask(self, scores, mask):
        return scores.masked_fill(~mask, -1e9)


class ZeroOutputOnFullyMaskedRows(LearnerMHA):  # zeroes the module's output there, not the heads' weights
    def forward(self, query, key, value, mask=None):
        out, weights = super().forward(query, key, value, mask)
        if mask is not None:
            sees_a_key = mask.expand(weights.shape).any(dim=-1).all(dim=1)  # (batch, q_len)
            out = out.masked_fill(~sees_a_key[..., None], 0.0)
        return out, weights


class NoOutputProjection(LearnerMHA):
    def forward(self, query, key, value, mask=None):
        q, k, v = (self.split(t) for t in self.project(query, key, value))
        weights = (q @ k.transpose(-2, -1) / self.scale()).softmax(-1)
        return self.merge(weights @ v)


class Unscaled(LearnerMHA):
    def scale(self):
        return 1.0


class NoWO(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.w_q = self.w_k = self.w_v = nn.Linear(d_model, d_model)


def test_reference_and_plain_learner_pass(capsys):
    check_multi_head_attention(tfm_lesson.MultiHeadAttention)
    check_multi_head_attention(LearnerMHA)
    assert capsys.readouterr().out.count("check_multi_head_attention passed") == 2


@pytest.mark.parametrize("cls, hint", [
    (ScaleDModel, r"scaled by sqrt\(d_model\), not sqrt\(d_k\)"),
    (Unscaled, "unscaled"),
    (MergeNoTranspose, "merged without the transpose"),
    (SplitNoTranspose, "split without the transpose"),
    (QueryThroughKeyLayer, "query looks projected with w_k instead of w_q"),
    (KeyValueFromQuery, "keys and values look computed from the query"),
    (KeyFromQuery, r"q_len=4 positions and the key and value k_len=6\. K and V come from the other sequence"),
    (ValueFromQuery, r"K = w_k\(key\) and V = w_v\(value\)"),
    (SoftmaxWrongAxis, "softmax over the wrong axis"),
    (InvertedMask, "inverted mask polarity"),
    (NoOutputProjection, "output projection W\\^O looks missing"),
    (NoWO, "needs an attribute `w_o`"),
])
def test_mha_mistakes(cls, hint):
    with pytest.raises(Mistake, match=hint):
        check_multi_head_attention(cls)


def test_a_query_that_sees_no_key_must_not_give_nan(capsys):
    """The reference gives such a query zero weights (output w_o(0)); the -inf fill alone gives NaN, named as such."""
    check_multi_head_attention(tfm_lesson.MultiHeadAttention)
    assert "queries with no visible key" in capsys.readouterr().out
    with pytest.raises(Mistake) as caught:
        check_multi_head_attention(NaNOnFullyMaskedRows)
    message = str(caught.value)
    assert "mask=causal, left-padded" in message
    assert "your output is NaN for the queries that see no key at all" in message
    assert "softmax of a row of -inf is 0/0 = NaN" in message
    assert "safe masked_softmax of chapter 02 (exercise 3)" in message


@pytest.mark.parametrize("cls, hint", [
    (UniformOnFullyMaskedRows, "a large finite fill such as -1e9 turns a fully masked row into a uniform one"),
    (ZeroOutputOnFullyMaskedRows, "right for every query that sees a key, and wrong for the queries that see none"),
])
def test_fully_masked_rows_other_mistakes(cls, hint):
    with pytest.raises(Mistake, match=hint):
        check_multi_head_attention(cls)


def test_fully_masked_rows_of_the_reference_are_w_o_bias():
    """What the checker expects: a query with no visible key gets W^O's bias (its heads output 0), never NaN."""
    torch.manual_seed(0)
    mha = tfm_lesson.MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])[:, None, None, :]
    with torch.no_grad():
        for need_weights in (False, True):
            out, _ = mha(x, memory, memory, mask, need_weights=need_weights)
            assert not out.isnan().any()
            assert torch.allclose(out[1], mha.w_o.bias.expand(3, 8))


def test_checker_leaves_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_multi_head_attention(LearnerMHA)
    assert torch.equal(torch.rand(3), expected)


def test_multi_head_attention_runs_once_more_on_the_chapters_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine the checker runs the learner's module there too; the meta device stands in for it here. A
    hand-written module that builds part of its mask on the CPU passes on the CPU and fails only there."""
    from tfm_lesson.checks import _harness

    class CpuMask(LearnerMHA):  # fine on the CPU, a crash next to a model on the GPU
        def apply_mask(self, scores, mask):
            keep = torch.ones(scores.shape[-2:], dtype=torch.bool) & mask  # (q_len, k_len) built on the CPU
            return super().apply_mask(scores, keep)

    monkeypatch.setattr(_harness, "_chapter_device", lambda: torch.device("cpu"))
    check_multi_head_attention(CpuMask)  # no other device: the same numbers as the reference

    monkeypatch.setattr(_harness, "_chapter_device", lambda: torch.device("meta"))
    check_multi_head_attention(LearnerMHA)
    with pytest.raises(Mistake, match=r"your module on meta raised .*mixes tensors on two devices"):
        check_multi_head_attention(CpuMask)
