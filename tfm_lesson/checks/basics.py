"""Checkers for chapter 00: the three tensor moves attention is made of.

- ``pairwise_scores(query, key)``: every query dotted with every key, ``Q K^T`` -> ``(..., q_len, k_len)``;
- ``row_softmax(scores)``: a numerically stable softmax along the last axis (each query's row sums to one);
- ``weighted_sum(weights, values)``: each query's mix of the value rows, ``weights @ values`` -> ``(..., q_len, d_v)``.

Inputs are chosen so the classic mistakes are told apart: ``q_len != k_len`` exposes a swapped transpose,
leading ``(batch, heads)`` dimensions expose ``.T``, and large scores expose a softmax without the max trick.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ._harness import Mistake, call, close, diagnose, expect, output_of, passed

__all__ = ["check_pairwise_scores", "check_row_softmax", "check_weighted_sum"]

LEADS: tuple[tuple[int, ...], ...] = ((), (3,), (2, 4))  # none, (batch,), (batch, heads)
DTYPES = (torch.float32, torch.float64)

TRANSPOSE_HINT = ("`.T` / `.t()` transpose ALL dimensions of a batched tensor (or refuse it); swap only the last "
                  "two: key.transpose(-2, -1).")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, dtype: torch.dtype = torch.float32, g: torch.Generator) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _tensor(result: object, what: str) -> Tensor:
    if isinstance(result, (tuple, list)):
        raise Mistake(f"{what} returned a {type(result).__name__}; return one tensor")
    return output_of(result)


def _batched_call(fn: Callable, args: tuple, what: str, lead: tuple[int, ...]) -> Tensor:
    """Call ``fn``; when it fails only on batched inputs, say that ``.T`` is the usual cause."""
    try:
        return _tensor(call(fn, *args, what=what), what)
    except Mistake as exc:
        if lead and "raised" in str(exc):
            raise Mistake(f"{exc}. It failed on inputs with leading dimensions {lead}: {TRANSPOSE_HINT}") from exc
        raise


def check_pairwise_scores(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(query (..., q_len, d), key (..., k_len, d))`` must return ``query @ key^T``: ``(..., q_len, k_len)``."""
    q_len, k_len, d = 4, 6, 5
    for i, lead in enumerate(LEADS):
        for dtype in DTYPES:
            g = _gen(100 + i)
            query, key = _randn(*lead, q_len, d, dtype=dtype, g=g), _randn(*lead, k_len, d, dtype=dtype, g=g)
            got = _batched_call(fn, (query, key), "pairwise_scores(query, key)", lead)
            expected = query @ key.transpose(-2, -1)  # (..., q_len, k_len)
            if got.shape == (*lead, k_len, q_len) and close(got, expected.transpose(-2, -1)):
                raise Mistake(f"your scores are shaped (k_len, q_len) = {tuple(got.shape[-2:])}: you computed K Q^T. "
                              "Row i must be query i and column j key j: query @ key.transpose(-2, -1).")
            if lead and got.shape != expected.shape and got.shape == tuple(reversed(expected.shape)):
                raise Mistake(f"shape {tuple(got.shape)} has every axis reversed: {TRANSPOSE_HINT}")
            diagnose(got, expected, {
                f"your scores are divided by sqrt(d) = {math.sqrt(d):.3g}: that scaling comes in chapter 01; "
                "here return the raw dot products query @ key^T.": expected / math.sqrt(d),
                "your scores are the elementwise square of the right ones: use a matrix product (@), not **.":
                    expected ** 2,
            }, "your scores differ from query @ key.transpose(-2, -1): entry (i, j) must be the dot product of "
               "query row i with key row j", atol=1e-4)
            expect(got.dtype == dtype, f"for {dtype} inputs your scores are {got.dtype}: keep the input dtype")
    passed("check_pairwise_scores", "query @ key^T on 2-D and batched (batch, heads) inputs, float32 and float64")


def check_row_softmax(fn: Callable[[Tensor], Tensor]) -> None:
    """``fn(scores (..., q_len, k_len))`` must return the softmax along the last axis, stable for large scores."""
    q_len, k_len = 4, 6
    for i, lead in enumerate(LEADS):
        for dtype in DTYPES:
            scores = _randn(*lead, q_len, k_len, dtype=dtype, g=_gen(200 + i)) * 3
            got = _tensor(call(fn, scores.clone(), what="row_softmax(scores)"), "row_softmax(scores)")
            expected = torch.softmax(scores, dim=-1)
            if got.shape == expected.shape and not close(got, expected):
                rows, cols = got.sum(-1), got.sum(-2)
                if close(cols, torch.ones_like(cols)) and not close(rows, torch.ones_like(rows)):
                    raise Mistake("your columns sum to one, not your rows: softmax over the wrong axis. Each query "
                                  "(row) spreads its attention over the keys (columns): normalise along dim=-1.")
                if not torch.isnan(got).any() and not close(rows, torch.ones_like(rows), atol=1e-4):
                    total = got.sum(dim=tuple(range(-got.dim(), 0)) if got.dim() else ())
                    hint = ("your rows do not sum to one"
                            + (" (the whole tensor does: you divided by the sum over everything, not per row)"
                               if close(total, torch.ones_like(total)) else "")
                            + ": divide exp(x) by its sum along dim=-1, with keepdim=True so it broadcasts.")
                    raise Mistake(hint)
            diagnose(got, expected, {}, "your softmax differs from torch.softmax(scores, dim=-1)")
            expect(got.dtype == dtype, f"for {dtype} scores your softmax is {got.dtype}: keep the input dtype")
    # large scores: exp(1000) overflows; subtracting the row maximum first changes nothing mathematically
    big = torch.tensor([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1002.0]])
    got = _tensor(call(fn, big.clone(), what="row_softmax(scores)"), "row_softmax(scores)")
    if torch.isnan(got).any() or torch.isinf(got).any():
        raise Mistake("large scores (1000) give NaN/inf: exp(1000) overflows to inf and inf / inf = NaN. Subtract "
                      "each row's maximum first, exp(x - x.max(dim=-1, keepdim=True).values): the softmax is "
                      "unchanged because the factor exp(-max) cancels between numerator and denominator.")
    diagnose(got, torch.softmax(big, dim=-1), {}, "on large scores your softmax differs from torch.softmax")
    passed("check_row_softmax", "rows sum to one on 2-D and batched inputs, float32/float64, stable at scores of 1000")


def check_weighted_sum(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(weights (..., q_len, k_len), values (..., k_len, d_v))`` must return ``weights @ values``."""
    for i, lead in enumerate(LEADS):
        for dtype in DTYPES:
            for q_len, k_len, d_v in ((5, 5, 3), (4, 6, 3)):  # square first: it tells transposed weights apart
                g = _gen(300 + i)
                weights = torch.softmax(_randn(*lead, q_len, k_len, dtype=dtype, g=g) * 2, dim=-1)
                values = _randn(*lead, k_len, d_v, dtype=dtype, g=g)
                got = _batched_call(fn, (weights, values), "weighted_sum(weights, values)", lead)
                expected = weights @ values  # (..., q_len, d_v)
                uniform = values.mean(-2, keepdim=True).expand_as(expected)
                suspects = {
                    "your output is the plain mean of the values, the same for every query: the weights were "
                    "ignored. Multiply by them: weights @ values.": uniform,
                }
                if q_len == k_len:
                    suspects["your output uses the weights transposed (column i of the weights for query i): row i "
                             "of the output is sum_j weights[i, j] * values[j], i.e. weights @ values, no "
                             "transpose."] = weights.transpose(-2, -1) @ values
                diagnose(got, expected, suspects,
                         f"your output differs from weights @ values, which is shaped (..., q_len, d_v) = "
                         f"{tuple(expected.shape)}: each query's row is a weighted average of the value rows",
                         atol=1e-4)
                expect(got.dtype == dtype, f"for {dtype} inputs your output is {got.dtype}: keep the input dtype")
    passed("check_weighted_sum", "weights @ values on 2-D and batched inputs, float32 and float64")
