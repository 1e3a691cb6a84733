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
        return scores.masked_fill(~mask, float("-inf"))

    def normalise(self, scores):
        return scores.softmax(dim=-1)

    def forward(self, query, key, value, mask=None):
        q, k, v = (self.split(t) for t in self.project(query, key, value))  # (batch, heads, len, d_k)
        scores = q @ k.transpose(-2, -1) / self.scale()  # (batch, heads, q_len, k_len)
        if mask is not None:
            scores = self.apply_mask(scores, mask)
        weights = self.normalise(scores)
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


class SoftmaxWrongAxis(LearnerMHA):
    def normalise(self, scores):
        return scores.softmax(dim=-2)


class InvertedMask(LearnerMHA):
    def apply_mask(self, scores, mask):
        return scores.masked_fill(mask, -1e9)


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
    (SoftmaxWrongAxis, "softmax over the wrong axis"),
    (InvertedMask, "inverted mask polarity"),
    (NoOutputProjection, "output projection W\\^O looks missing"),
    (NoWO, "needs an attribute `w_o`"),
])
def test_mha_mistakes(cls, hint):
    with pytest.raises(Mistake, match=hint):
        check_multi_head_attention(cls)


def test_checker_leaves_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_multi_head_attention(LearnerMHA)
    assert torch.equal(torch.rand(3), expected)


def test_multi_head_attention_runs_once_more_on_the_chapters_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine the checker runs the learner's module there too; the meta device stands in for it here."""
    from tfm_lesson.checks import _harness

    monkeypatch.setattr(_harness, "_chapter_device", lambda: torch.device("meta"))

    class CpuMask(tfm_lesson.MultiHeadAttention):  # rebuilds the mask on the CPU: fine there, a crash on a GPU
        def forward(self, query, key, value, mask=None):
            if mask is not None:
                mask = torch.ones(mask.shape, dtype=torch.bool) & mask.cpu()
            return super().forward(query, key, value, mask)

    check_multi_head_attention(tfm_lesson.MultiHeadAttention)
    with pytest.raises(Mistake):
        check_multi_head_attention(CpuMask)
