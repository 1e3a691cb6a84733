"""Chapter 00 checkers: the reference passes; each classic mistake fails with its own hint."""
from __future__ import annotations

import math
import re

import pytest
import torch

from tfm_lesson.checks import Mistake, check_pairwise_scores, check_row_softmax, check_weighted_sum


# --- pairwise scores ----------------------------------------------------------------------------------------
def test_pairwise_scores_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_pairwise_scores(lambda q, k: q @ k.transpose(-2, -1))
    assert "✔ check_pairwise_scores passed" in capsys.readouterr().out


def test_pairwise_scores_einsum_passes() -> None:
    check_pairwise_scores(lambda q, k: torch.einsum("...qd,...kd->...qk", q, k))


@pytest.mark.parametrize("fn, hint", [
    (lambda q, k: k @ q.transpose(-2, -1), "you computed K Q^T"),
    (lambda q, k: q @ k.T, "transpose ALL dimensions"),
    (lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), "that scaling comes in chapter 01"),
    (lambda q, k: (q @ k.transpose(-2, -1)).float(), "keep the input dtype"),
    (lambda q, k: None, "did you forget a `return`"),
    (lambda q, k: (q @ k.transpose(-2, -1)) + 1, "entry (i, j) must be the dot product"),
])
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_pairwise_scores_mistakes(fn, hint: str) -> None:
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_pairwise_scores(fn)


# --- row softmax ----------------------------------------------------------------------------------------------
def _stable(s: torch.Tensor) -> torch.Tensor:
    e = (s - s.max(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)


def test_row_softmax_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_row_softmax(_stable)
    check_row_softmax(lambda s: torch.softmax(s, dim=-1))
    assert "✔ check_row_softmax passed" in capsys.readouterr().out


def _wrong_axis(s: torch.Tensor) -> torch.Tensor:
    e = (s - s.max(dim=-2, keepdim=True).values).exp()
    return e / e.sum(dim=-2, keepdim=True)


def _naive(s: torch.Tensor) -> torch.Tensor:
    return s.exp() / s.exp().sum(dim=-1, keepdim=True)


def _global(s: torch.Tensor) -> torch.Tensor:
    e = (s - s.max()).exp()
    return e / e.sum()


@pytest.mark.parametrize("fn, hint", [
    (_wrong_axis, "softmax over the wrong axis"),
    (lambda s: torch.softmax(s, dim=0), "softmax over the wrong axis"),
    (_naive, "exp(1000) overflows"),
    (_global, "you divided by the sum over everything"),
    (lambda s: (s - s.max(dim=-1, keepdim=True).values).exp(), "your rows do not sum to one"),
    (lambda s: torch.softmax(s.float(), dim=-1), "keep the input dtype"),
])
def test_row_softmax_mistakes(fn, hint: str) -> None:
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_row_softmax(fn)


# --- weighted sum ---------------------------------------------------------------------------------------------
def test_weighted_sum_reference_passes(capsys: pytest.CaptureFixture) -> None:
    check_weighted_sum(lambda w, v: w @ v)
    check_weighted_sum(lambda w, v: (w[..., :, :, None] * v[..., None, :, :]).sum(-2))
    assert "✔ check_weighted_sum passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda w, v: w.transpose(-2, -1) @ v, "weights transposed"),
    (lambda w, v: v.mean(-2, keepdim=True).expand(*w.shape[:-1], v.size(-1)), "the weights were ignored"),
    (lambda w, v: w @ v * 2, "each query's row is a weighted average"),
    (lambda w, v: w.T @ v if w.dim() > 2 else w @ v, "leading dimensions"),
])
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_weighted_sum_mistakes(fn, hint: str) -> None:
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_weighted_sum(fn)
