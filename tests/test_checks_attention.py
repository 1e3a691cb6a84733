"""Chapter 01 checkers: the reference passes; each classic attention mistake fails with its own hint."""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

import tfm_lesson
from tfm_lesson.checks import (Mistake, check_attention, check_attention_scores, check_attention_weights,
                               check_retrieval)
from conftest import passes as _passes, raises_mistake as _raises  # noqa: E402


def _scores(q, k, scale=None):
    return q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale)


# --- scores ---------------------------------------------------------------------------------------------------
def test_scores_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_attention_scores(lambda q, k: _scores(q, k))
    assert "✔ check_attention_scores passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda q, k: _scores(q, k, 1.0), "your scores are not scaled"),
    (lambda q, k: _scores(q, k, q.size(-1)), "divided by d_k = 16, not by sqrt(d_k)"),
    (lambda q, k: _scores(q, k, 1 / math.sqrt(q.size(-1))), "MULTIPLIED by sqrt(d_k)"),
    (lambda q, k: _scores(q, k, math.sqrt(q.size(-2))), "d_k is the LAST dimension"),
    (lambda q, k: _scores(k, q), "you computed K Q^T"),
    (lambda q, k: q @ k.T / 4, "leading dimensions"),
    (lambda q, k: _scores(q, k).float(), "keep the input dtype"),
])
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_scores_mistakes(fn, hint: str) -> None:
    _raises(check_attention_scores, fn, hint)


# --- weights --------------------------------------------------------------------------------------------------
def test_weights_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_attention_weights(lambda q, k: _scores(q, k).softmax(dim=-1))
    assert "✔ check_attention_weights passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda q, k: _scores(q, k).softmax(dim=-2), "softmax over the wrong axis"),
    (lambda q, k: _scores(q, k).exp(), "rows do not sum to one"),
    (lambda q, k: torch.sigmoid(_scores(q, k)), "rows do not sum to one"),
    (lambda q, k: _scores(q, k, 1.0).softmax(dim=-1), "your scores are not scaled"),
    (lambda q, k: _scores(q, k, q.size(-1)).softmax(dim=-1), "not by sqrt(d_k)"),
])
def test_weights_mistakes(fn, hint: str) -> None:
    _raises(check_attention_weights, fn, hint)


# --- full attention -------------------------------------------------------------------------------------------
def _attention(q, k, v, mask=None, scale=None, dim=-1, fill=float("-inf"), polarity=True, zero_empty=True,
               after=False, return_weights=True):
    """A configurable attention: the defaults are right, each keyword injects one classic mistake."""
    scores = _scores(q, k, scale)
    has_key = None
    if mask is not None and not after:
        keep = mask if polarity else ~mask
        if zero_empty:
            has_key = keep.any(dim=-1, keepdim=True)
            keep = keep | ~has_key
        scores = scores.masked_fill(~keep, fill)
    weights = scores.softmax(dim=dim)
    if mask is not None and after:
        weights = weights * mask
    if has_key is not None:
        weights = weights.masked_fill(~has_key, 0.0)
    out = weights @ v
    return (out, weights) if return_weights else out


def _loop_attention(q, k, v, mask=None):
    """The slow version: one query at a time (2-D and batched via flattening leading dims)."""
    lead = q.shape[:-2]
    if mask is not None:
        mask = mask.expand(*lead, q.size(-2), k.size(-2)).reshape(-1, q.size(-2), k.size(-2))
    qf, kf, vf = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))
    out = torch.zeros(qf.size(0), qf.size(1), vf.size(-1), dtype=q.dtype)
    for b in range(qf.size(0)):
        for i in range(qf.size(1)):
            s = kf[b] @ qf[b, i] / math.sqrt(q.size(-1))  # (k_len,)
            if mask is not None:
                if not mask[b, i].any():
                    continue  # nothing visible: zeros
                s = s.masked_fill(~mask[b, i], float("-inf"))
            out[b, i] = s.softmax(-1) @ vf[b]
    return out.reshape(*lead, q.size(-2), v.size(-1))


@pytest.mark.parametrize("fn", [
    tfm_lesson.scaled_dot_product_attention,
    lambda q, k, v, mask=None: _attention(q, k, v, mask),
    lambda q, k, v, mask=None: _attention(q, k, v, mask, return_weights=False),
    _loop_attention,
], ids=["package", "reference-with-weights", "output-only", "loop"])
def test_attention_reference_passes(fn, capsys: pytest.CaptureFixture) -> None:
    check_attention(fn)
    assert "✔ check_attention passed" in capsys.readouterr().out


def _torch_sdpa_with_zero_rows(q, k, v, mask=None):
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v)
    has_key = mask.any(-1, keepdim=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key).masked_fill(~has_key, 0.0)


def test_attention_torch_sdpa_with_zeroed_rows_passes() -> None:
    check_attention(_torch_sdpa_with_zero_rows)


def _wrong_weights(q, k, v, mask=None):
    out, w = _attention(q, k, v, mask)
    return out, w.flip(-2)  # rows still sum to one, but belong to other queries


@pytest.mark.parametrize("kwargs, hint", [
    ({"dim": -2}, "softmax over the wrong axis"),
    ({"scale": 1.0}, "your scores are not scaled"),
    ({"scale": 16.0}, "your scores look divided by d_k = 16, not by sqrt(d_k)"),
    ({"scale": math.sqrt(6)}, "sqrt(d_v)"),
    ({"polarity": False}, "INVERTED mask"),
    ({"after": True}, "the mask was applied AFTER the softmax"),
    ({"zero_empty": False}, "came out NaN"),
    ({"zero_empty": False, "fill": -1e9}, "got the plain mean of the values"),
])
def test_attention_mistakes(kwargs, hint: str) -> None:
    _raises(check_attention, lambda q, k, v, mask=None: _attention(q, k, v, mask, **kwargs), hint)


def test_attention_minus_1e9_overflows_float16() -> None:
    def fn(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            has_key = mask.any(-1, keepdim=True)
            scores = scores.masked_fill(~mask, -1e9)
            return (scores.softmax(-1) @ v).masked_fill(~has_key, 0.0)
        return scores.softmax(-1) @ v

    _raises(check_attention, fn, "-1e9 does not fit in float16")


@pytest.mark.parametrize("fn, hint", [
    (lambda q, k, v, mask=None: (_scores(q, k) if mask is None else _scores(q, k).masked_fill(~mask, -math.inf))
     .softmax(-1) @ v, "came out NaN"),
    (lambda q, k, v, mask=None: _attention(q, k, v, None), "your output ignores the mask"),
    (lambda q, k, v, mask=None: _scores(q, k).exp() @ v, "your weights do not sum to one"),
    (lambda q, k, v, mask=None: (_scores(q, k) * (1 if mask is None else mask)).softmax(-1) @ v,
     "multiplied by the mask"),
    (lambda q, k, v, mask=None: _attention(q.float(), k.float(), v.float(), mask), "keep the input dtype"),
    (lambda q, k, v, mask=None: _attention(q, k, v, mask)[0][..., :-1], "output has shape"),
    (_wrong_weights, "weights you return are not the ones used"),
    (lambda q, k, v, mask=None: (q @ k.T / 4).softmax(-1) @ v, "leading dimensions"),
])
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_attention_more_mistakes(fn, hint: str) -> None:
    _raises(check_attention, fn, hint)


def test_attention_does_not_touch_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    check_attention(tfm_lesson.scaled_dot_product_attention)
    assert torch.equal(torch.rand(3), before)


# --- chapter 01's plain masking: corner_cases=False ----------------------------------------------------------------
def _plain_masked(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = scores.softmax(-1)
    return weights @ v, weights


def test_plain_masking_passes_without_corner_cases(capsys: pytest.CaptureFixture) -> None:
    check_attention(_plain_masked, corner_cases=False)
    assert "✔ check_attention passed" in capsys.readouterr().out
    _raises(check_attention, _plain_masked, "came out NaN")  # the full check still asks for zeros


def test_plain_masking_mistakes_still_named() -> None:
    def after(q, k, v, mask=None):
        w = _scores(q, k).softmax(-1)
        return (w if mask is None else w * mask) @ v
    with pytest.raises(Mistake, match="AFTER the softmax"):
        check_attention(after, corner_cases=False)


# --- check_retrieval: attention as a lookup you design -------------------------------------------------------------
def _lookup(targets, k_len, d_k, scale=None, backwards=False, identity=False):
    scale = 10 * math.sqrt(d_k) if scale is None else scale
    keys = torch.eye(k_len, d_k)
    rows = list(range(len(targets))) if identity else list(targets)
    queries = scale * keys[[r % k_len for r in rows]]
    return (scale * keys, keys[list(targets)]) if backwards else (queries, keys)


def test_retrieval_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_retrieval(_lookup)
    assert "✔ check_retrieval passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda t, k, d: None, "did you forget a `return`"),
    (lambda t, k, d: _lookup(t, k, d)[0], "must return a pair of tensors"),
    (lambda t, k, d: (_lookup(t, k, d)[0].T, _lookup(t, k, d)[1]), "Q has shape"),
    (lambda t, k, d: (_lookup(t, k, d)[0], torch.eye(k + 1, d)), "K has shape"),
    (lambda t, k, d: (_lookup(t, k, d)[0] * math.inf, _lookup(t, k, d)[1]), "inf or NaN"),
    (lambda t, k, d: _lookup(t, k, d, identity=True), "as when Q = K"),
    (lambda t, k, d: _lookup(t, k, d, backwards=True), "the lookup runs backwards"),
    (lambda t, k, d: _lookup(t, k, d, scale=3.0), "not by enough"),
    (lambda t, k, d: _lookup(t, k, d, scale=12.0), "without the division by sqrt(d_k)"),
    (lambda t, k, d: (-_lookup(t, k, d)[0], _lookup(t, k, d)[1]), "attends most to key"),
])
def test_retrieval_mistakes(fn, hint: str) -> None:
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_retrieval(fn)
