"""Chapter 02 checkers: the reference passes; each classic mask mistake fails with its own hint."""
from __future__ import annotations

import re

import pytest
import torch

import tfm_lesson
from tfm_lesson.checks import (Mistake, check_causal_mask, check_decoder_mask, check_masked_softmax,
                               check_padding_mask)
from conftest import passes as _passes, raises_mistake as _raises  # noqa: E402


# --- padding --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    tfm_lesson.padding_mask,
    lambda tokens, pad_id: (tokens != pad_id).unsqueeze(1).unsqueeze(2),
    lambda tokens, pad_id: (tokens != pad_id)[:, None, None, :].contiguous(),
])
def test_padding_reference_passes(fn, capsys: pytest.CaptureFixture) -> None:
    check_padding_mask(fn)
    assert "✔ check_padding_mask passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda t, p: (t == p)[:, None, None, :], "your padding mask is inverted"),
    (lambda t, p: (t != p)[:, None, :, None], "it masks QUERIES (rows), not keys"),
    (lambda t, p: (t != p)[:, :, None], "it masks QUERIES (rows), not keys"),
    (lambda t, p: t != p, "Broadcasting aligns shapes from the RIGHT"),
    (lambda t, p: (t != p)[None, :, None, :], "does not broadcast to (batch, heads, q_len, k_len)"),
    (lambda t, p: (t != 0)[:, None, None, :], "your mask ignores pad_id"),
    (lambda t, p: (t != p)[:, None, None, :].float(), "return booleans"),
    (lambda t, p: torch.zeros(t.shape).masked_fill(t == p, float("-inf"))[:, None, None, :], "additive mask"),
    (lambda t, p: (t != p).tolist(), "expected a boolean torch.Tensor"),
    (lambda t, p: (t > p)[:, None, None, :], "your mask is tokens > pad_id"),
])
def test_padding_mistakes(fn, hint: str) -> None:
    _raises(check_padding_mask, fn, hint)


# --- causal ---------------------------------------------------------------------------------------------------
def _ones(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool)


@pytest.mark.parametrize("fn", [
    tfm_lesson.causal_mask,
    lambda n: torch.arange(n)[None, :] <= torch.arange(n)[:, None],
    lambda n: _ones(n).tril()[None, None],
])
def test_causal_reference_passes(fn, capsys: pytest.CaptureFixture) -> None:
    check_causal_mask(fn)
    assert "✔ check_causal_mask passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda n: _ones(n).triu(1), "your causal mask is inverted"),
    (lambda n: _ones(n).tril(-1), "excludes the diagonal"),
    (lambda n: _ones(n).tril(1), "shifted by one: query i can see key i + 1"),
    (lambda n: _ones(n).triu(), "the UPPER triangle"),
    (lambda n: _ones(n), "nothing is hidden"),
    (lambda n: _ones(n).tril().float(), "return booleans"),
    (lambda n: torch.zeros(n, n).masked_fill(~_ones(n).tril(), float("-inf")), "additive mask"),
    (lambda n: _ones(n).tril()[None].expand(2, n, n), "expected (size, size)"),
    (lambda n: _ones(n + 1).tril(), "expected (size, size)"),
    (lambda n: _ones(n).tril(-2), "your causal mask is tril(-2)"),
    (lambda n: _ones(n).tril(2), "your causal mask is tril(2): query i sees keys up to i + 2, into the future"),
    (lambda n: _ones(n).tril() ^ torch.eye(n, dtype=torch.bool).roll(1, 0), "differs from the lower triangle"),
])
def test_causal_mistakes(fn, hint: str) -> None:
    _raises(check_causal_mask, fn, hint)


# --- masked softmax -------------------------------------------------------------------------------------------
def _masked_softmax(scores, mask, fill=float("-inf"), polarity=True, zero_empty=True, dim=-1, after=False):
    keep = mask if polarity else ~mask
    if after:
        return scores.softmax(dim) * keep
    has_key = keep.any(dim=-1, keepdim=True)
    if zero_empty:
        keep = keep | ~has_key
    weights = scores.masked_fill(~keep, fill).softmax(dim)
    return weights.masked_fill(~has_key, 0.0) if zero_empty else weights


def test_masked_softmax_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_masked_softmax(_masked_softmax)
    assert "✔ check_masked_softmax passed" in capsys.readouterr().out


def test_masked_softmax_nan_to_num_passes() -> None:
    """Another correct way: let the empty rows be NaN, then turn NaN into 0."""
    check_masked_softmax(lambda s, m: torch.nan_to_num(s.masked_fill(~m, float("-inf")).softmax(-1), nan=0.0))


@pytest.mark.parametrize("kwargs, hint", [
    ({"polarity": False}, "match the INVERTED mask"),
    ({"after": True}, "you masked AFTER the softmax"),
    ({"dim": -2}, "the softmax runs over the wrong axis"),
    ({"zero_empty": False}, "got NaN weights"),
    ({"fill": -1e9}, "-1e9 does not fit"),
    ({"zero_empty": False, "fill": -1e4}, "got uniform weights"),
])
def test_masked_softmax_mistakes(kwargs, hint: str) -> None:
    _raises(check_masked_softmax, lambda s, m: _masked_softmax(s, m, **kwargs), hint)


def test_masked_softmax_ignored_mask_and_dtype() -> None:
    _raises(check_masked_softmax, lambda s, m: s.softmax(-1), "your weights ignore the mask")
    _raises(check_masked_softmax, lambda s, m: _masked_softmax(s.float(), m), "keep the input dtype")


# --- decoder mask ---------------------------------------------------------------------------------------------
def _decoder(tokens, pad_id, combine=lambda a, b: a & b, diagonal=0):
    pad = (tokens != pad_id)[:, None, None, :]  # (batch, 1, 1, t)
    causal = torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool, device=tokens.device).tril(diagonal)
    return combine(pad, causal)  # (batch, 1, 1, t) with (t, t)


def test_decoder_mask_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_decoder_mask(_decoder)
    check_decoder_mask(lambda t, p: tfm_lesson.combine_masks(tfm_lesson.padding_mask(t, p),
                                                             tfm_lesson.causal_mask(t.size(1), device=t.device)))
    assert "✔ check_decoder_mask passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda t, p: _decoder(t, p, lambda a, b: a | b), "your mask is padding OR causal"),
    (lambda t, p: _decoder(t, p, lambda a, b: b), "only the causal mask"),
    (lambda t, p: _decoder(t, p, lambda a, b: a), "only the padding mask"),
    (lambda t, p: ~_decoder(t, p), "your mask is inverted"),
    (lambda t, p: _decoder(t, p, diagonal=1), "shifted by one"),
    (lambda t, p: _decoder(t, p, diagonal=-1), "excludes the diagonal"),
    (lambda t, p: t != p, "does not broadcast to (batch, heads, t, t)"),
])
def test_decoder_mask_mistakes(fn, hint: str) -> None:
    _raises(check_decoder_mask, fn, hint)


def test_masked_softmax_stub_asks_for_weights_not_a_boolean_mask() -> None:
    with pytest.raises(Mistake, match=re.escape("expected a tensor of weights; did you forget a `return`")):
        check_masked_softmax(lambda scores, mask: None)


def test_decoder_mask_built_on_the_cpu_is_named() -> None:
    def cpu_triangle(tokens, pad_id):  # forgets device=: fine on a CPU, a crash next to a GPU model
        causal = torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool).tril()
        return (tokens != pad_id)[:, None, None, :] & causal
    with pytest.raises(Mistake, match=re.escape("build new tensors on `tokens.device`")):
        check_decoder_mask(cpu_triangle)


def test_messages_name_the_learners_function() -> None:
    """A Mistake names the function the learner wrote (chapter 02's `my_decoder_mask`, not the tensor
    `decoder_mask` of the chapter); a lambda gets the role's name."""
    def my_decoder_mask(tokens, pad_id):
        ...  # the exercise stub

    with pytest.raises(Mistake, match=re.escape("my_decoder_mask returned NoneType")):
        check_decoder_mask(my_decoder_mask)
    with pytest.raises(Mistake, match=re.escape("decoder_mask returned NoneType")):
        check_decoder_mask(lambda tokens, pad_id: None)

    def my_padding_mask(tokens, pad_id):
        raise ValueError("not yet")

    with pytest.raises(Mistake, match=re.escape("my_padding_mask(tokens, pad_id) raised ValueError")):
        check_padding_mask(my_padding_mask)
