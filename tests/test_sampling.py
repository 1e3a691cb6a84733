"""Sampling: top-k and top-p filtering (ties, p = 1, k = 1), temperature, clear errors."""
from __future__ import annotations

import math

import pytest
import torch

from tfm_lesson.sampling import filter_top_k, filter_top_p, sample_next

NEG = float("-inf")


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    assert filter_top_k(logits, 2).tolist() == [[NEG, 4.0, 3.0, NEG]]
    assert torch.equal(filter_top_k(logits, 4), logits) and torch.equal(filter_top_k(logits, 10), logits)


def test_top_k_keeps_every_logit_tied_with_the_kth():
    logits = torch.tensor([[1.0, 3.0, 2.0, 3.0, 2.0]])
    assert filter_top_k(logits, 1).tolist() == [[NEG, 3.0, NEG, 3.0, NEG]]  # two tied maxima both kept
    assert filter_top_k(logits, 3).tolist() == [[NEG, 3.0, 2.0, 3.0, 2.0]]  # 4 kept: the 3rd ties with the 4th


def test_top_k_one_is_greedy_when_the_maximum_is_unique():
    torch.manual_seed(0)
    logits = torch.randn(8, 50)
    for seed in range(3):
        ids = sample_next(logits, top_k=1, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(ids, logits.argmax(-1))


def test_top_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    kept = lambda p: torch.isfinite(filter_top_p(logits, p))[0].tolist()  # noqa: E731
    assert kept(0.5) == [True, False, False, False]  # the top token alone reaches 0.5
    assert kept(0.51) == [True, True, False, False]
    assert kept(0.8) == [True, True, False, False]
    assert kept(0.81) == [True, True, True, False]
    assert kept(0.01) == [True, False, False, False]  # the most probable token is always kept
    assert torch.equal(filter_top_p(logits, 1.0), logits)  # p = 1 keeps everything


def test_top_p_keeps_ties_together():
    logits = torch.tensor([[0.4, 0.2, 0.2, 0.2]]).log()
    assert torch.isfinite(filter_top_p(logits, 0.5)).tolist() == [[True, True, True, True]]
    assert torch.isfinite(filter_top_p(logits, 0.4)).tolist() == [[True, False, False, False]]


def test_top_p_one_keeps_tiny_probabilities():
    logits = torch.tensor([[0.0, -30.0, -60.0]])
    assert torch.isfinite(filter_top_p(logits, 1.0)).all()


def test_temperature_zero_is_argmax_and_ignores_filters():
    logits = torch.tensor([[0.1, 2.0, 1.0], [3.0, -1.0, 2.9]])
    assert sample_next(logits, temperature=0).tolist() == [1, 0]
    assert sample_next(logits, temperature=0, top_k=2, top_p=0.3).tolist() == [1, 0]


def test_sampling_follows_the_distribution_and_the_generator():
    logits = torch.tensor([[math.log(0.7), math.log(0.2), math.log(0.1)]]).repeat(20000, 1)
    ids = sample_next(logits, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(ids, minlength=3).float() / len(ids)
    torch.testing.assert_close(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.015, rtol=0)
    low = sample_next(logits, temperature=0.25, generator=torch.Generator().manual_seed(0))
    assert (low == 0).float().mean() > 0.95  # a low temperature sharpens towards the argmax
    again = sample_next(logits[:50], generator=torch.Generator().manual_seed(1))
    assert torch.equal(again, sample_next(logits[:50], generator=torch.Generator().manual_seed(1)))
    only_top2 = sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(only_top2.tolist()) == {0, 1}


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-1.0), r"temperature must be a finite number >= 0"),
    (dict(temperature=float("nan")), r"temperature must be a finite number >= 0"),
    (dict(top_k=0), r"top_k must be an int >= 1"),
    (dict(top_k=2.0), r"top_k must be an int >= 1"),
    (dict(top_p=0.0), r"top_p must be a number in \(0, 1\]"),
    (dict(top_p=1.01), r"top_p must be a number in \(0, 1\]"),
])
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sample_next(torch.zeros(2, 5), **kwargs)


def test_logits_errors():
    with pytest.raises(ValueError, match=r"logits must be shaped \(batch, vocab\)"):
        sample_next(torch.zeros(5))
    with pytest.raises(TypeError, match=r"logits must be a floating-point tensor"):
        sample_next(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(TypeError, match=r"logits must be a torch.Tensor"):
        filter_top_k([[1.0, 2.0]], 1)
