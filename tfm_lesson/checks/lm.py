"""Checkers for chapter 14: a language model.

- ``check_bpe_merge(fn)``: ``fn(ids, pair, new_id)`` -> a new list with every occurrence of ``pair`` replaced
  by ``new_id``, left to right, without overlaps (one BPE merge step);
- ``check_next_token_probs(fn)``: ``fn(logits (batch, vocab), temperature, top_k, top_p)`` -> the
  probabilities the next token is drawn from: temperature, then top-k, then top-p, renormalised; ``temperature
  == 0`` is greedy (all the probability on the argmax);
- ``check_next_token_windows(fn)``: ``fn(ids (n,), starts (batch,), max_len)`` -> ``(x, y)``, each
  ``(batch, max_len)``, with ``x[b] = ids[s : s + max_len]`` and ``y[b] = ids[s + 1 : s + max_len + 1]``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..sampling import filter_top_k, filter_top_p, next_token_probs
from ..data.tokenizer import merge_pair
from ._harness import Mistake, call, expect, passed
from ._parts import named_checks, part, parts

__all__ = ["check_bpe_merge", "check_next_token_probs", "check_next_token_windows"]


# ------------------------------------------------------------------------------------------ one BPE merge
def _merge_overlapping(ids, pair, new_id):  # after a match, steps one place instead of two
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
        elif not (i > 0 and (ids[i - 1], ids[i]) == tuple(pair) and out and out[-1] == new_id):
            out.append(ids[i])
        i += 1
    return out


def _merge_right_to_left(ids, pair, new_id):
    return merge_pair(list(ids)[::-1], tuple(pair)[::-1], new_id)[::-1]


def _merge_reversed(ids, pair, new_id):
    return merge_pair(ids, (pair[1], pair[0]), new_id)


def _merge_first_only(ids, pair, new_id):
    ids = list(ids)
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return ids[:i] + [new_id] + ids[i + 2:]
    return ids


def _merge_drop_last(ids, pair, new_id):  # loops to len - 1 and never appends the last token
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


MERGE_MISTAKES: dict[str, Callable] = {
    "overlapping occurrences were both merged: with pair (a, a), [a, a, a] must become [X, a], not [X, X] (the "
    "middle a cannot belong to two merges); after a match, skip BOTH tokens of the pair (i += 2)": _merge_overlapping,
    "you scanned from the right: in [a, a, a] the LEFT pair is merged first (expected [X, a], not [a, X])":
        _merge_right_to_left,
    "you merged the pair the wrong way round: pair (a, b) means a followed by b, not b followed by a":
        _merge_reversed,
    "only the first occurrence was merged: a merge step replaces EVERY occurrence of the pair": _merge_first_only,
    "the last token went missing: when the loop stops one before the end, append the final token too":
        _merge_drop_last,
}

MERGE_CASES = [
    ([5, 5, 5], (5, 5), 9), ([1, 2, 3, 1, 2], (1, 2), 9), ([5, 5, 5, 5], (5, 5), 9), ([2, 1, 2, 1], (1, 2), 7),
    ([3, 4], (3, 4), 8), ([3], (3, 4), 8), ([], (3, 4), 8), ([4, 3, 3, 4, 4], (3, 4), 6), ([1, 2, 1, 2, 1], (2, 1), 300),
]


# the named checks (checks._parts): the cases of each, in the order they run, and their weights
MERGE_GROUPS = {"repeated and separate pairs": [0, 1, 2, 3], "short lists": [4, 5, 6], "mixed pairs": [7, 8]}
MERGE_CHECKS = {"repeated and separate pairs": 2, "short lists": 1, "mixed pairs": 1}


def _merge_case(fn: Callable, ids: list, pair: tuple, new_id: int) -> None:
    got = call(fn, list(ids), pair, new_id, what=f"your merge({ids}, {pair}, {new_id})")
    if got is None:
        raise Mistake(f"your merge({ids}, {pair}, {new_id}) returned None; did you forget a `return`?")
    if isinstance(got, Tensor):
        got = got.tolist()
    if isinstance(got, tuple):
        got = list(got)
    expect(isinstance(got, list), f"your merge returned {type(got).__name__}; return a list of ints")
    want = merge_pair(ids, pair, new_id)
    if got == want:
        return
    for hint, buggy in MERGE_MISTAKES.items():
        if got == buggy(list(ids), pair, new_id):
            raise Mistake(f"merge({ids}, {pair}, {new_id}) gave {got}, expected {want}: {hint}")
    raise Mistake(f"merge({ids}, {pair}, {new_id}) gave {got}, expected {want}")


@named_checks(MERGE_CHECKS)
def check_bpe_merge(fn: Callable) -> None:
    """``fn(ids, pair, new_id)``: one BPE merge step on a list of token ids. Named checks, the cases in their order:
    repeated and separate pairs, short lists, mixed pairs."""
    with parts(check_bpe_merge):
        for name, cases in MERGE_GROUPS.items():
            part(name)
            for i in cases:
                _merge_case(fn, *MERGE_CASES[i])
    passed("check_bpe_merge", f"{len(MERGE_CASES)} cases, overlaps ([a, a, a] -> [X, a]) and empty lists included")


# --------------------------------------------------------------------------------- next-token probabilities
def _reference_probs(logits: Tensor, temperature: float, top_k, top_p) -> Tensor:
    return next_token_probs(logits, temperature, top_k, top_p)


def _topk_drops_ties(logits, temperature, top_k, top_p):
    z = logits.float() / temperature
    if top_k is not None:
        idx = z.topk(top_k, dim=-1).indices
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)
        z = z.masked_fill(~keep, float("-inf"))
    if top_p is not None:
        z = filter_top_p(z, top_p)
    return z.softmax(-1)


def _topp_strict(logits, temperature, top_k, top_p):  # keeps tokens while the running sum stays below p
    z = logits.float() / temperature
    if top_k is not None:
        z = filter_top_k(z, top_k)
    if top_p is not None and top_p < 1:
        probs = z.softmax(-1)
        sorted_probs, order = probs.sort(-1, descending=True)
        keep_sorted = sorted_probs.cumsum(-1) < top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, float("-inf"))
    return z.softmax(-1)


def _topp_before_temperature(logits, temperature, top_k, top_p):
    z = logits.float()
    if top_k is not None:
        z = filter_top_k(z, top_k)
    if top_p is not None:
        z = filter_top_p(z, top_p)
    return (z / temperature).softmax(-1)


def _temperature_multiplied(logits, temperature, top_k, top_p):
    return _reference_probs(logits * temperature * temperature, temperature, top_k, top_p)


def _not_renormalised(logits, temperature, top_k, top_p):
    probs = (logits.float() / temperature).softmax(-1)
    keep = torch.isfinite(_reference_probs(logits, temperature, top_k, top_p).log())
    return probs * keep


PROB_MISTAKES: dict[str, Callable] = {
    "top-k dropped tokens TIED with the k-th largest logit (topk picks one of them arbitrarily): keep every "
    "logit >= the k-th largest value": _topk_drops_ties,
    "top-p left out the token that carries the sum past p: keep tokens while the mass BEFORE them is < p "
    "(the smallest set whose probability reaches p)": _topp_strict,
    "top-k/top-p were applied before the temperature: divide the logits by the temperature first, then filter "
    "(the nucleus depends on the temperature)": _topp_before_temperature,
    "the logits were multiplied by the temperature: DIVIDE by it (a temperature below 1 sharpens)":
        _temperature_multiplied,
    "top_k was ignored: keep only the top_k largest logits (and any tied with the k-th) when top_k is not None":
        lambda logits, t, k, p: _reference_probs(logits, t, None, p),
    "top_p was ignored: keep only the most probable tokens up to mass top_p when top_p is not None":
        lambda logits, t, k, p: _reference_probs(logits, t, k, None),
    "the kept probabilities do not sum to 1: set the removed logits to -inf and take the softmax of what is "
    "left (renormalise), rather than zeroing probabilities": _not_renormalised,
}


def _prob_cases() -> list[tuple[str, Tensor, float, int | None, float | None]]:
    g = torch.Generator().manual_seed(14)
    rand = torch.randn(3, 12, generator=g) * 2
    tied = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.0, -1.0, 0.5]])  # the 2nd to 4th largest are tied
    steep = torch.tensor([[4.0, 2.0, 1.0, 0.0, -1.0, -3.0]])
    return [
        ("plain temperature", rand, 0.7, None, None),
        ("temperature 1.5", rand, 1.5, None, None),
        ("top-k = 3", rand, 1.0, 3, None),
        ("top-k = 1", rand, 1.3, 1, None),
        ("top-k = 2 with ties at the cut", tied, 1.0, 2, None),
        ("top-k larger than the vocabulary", rand, 1.0, 50, None),
        ("top-p = 0.5", steep, 1.0, None, 0.5),
        ("top-p = 0.9 at temperature 0.5", rand, 0.5, None, 0.9),
        ("top-p = 0.9 at temperature 2", steep, 2.0, None, 0.9),
        ("top-p = 1 (keeps everything)", rand, 1.0, None, 1.0),
        ("top-k = 5 and top-p = 0.8", rand, 0.8, 5, 0.8),
        ("temperature 0 (greedy)", rand, 0.0, None, None),
        ("temperature 0 with top-k and top-p", rand, 0.0, 4, 0.5),
    ]


PROB_CHECKS = {"temperature": 1, "top-k": 1, "top-p": 1, "top-k and top-p": 1, "temperature 0": 1}
PROB_PARTS = ["temperature"] * 2 + ["top-k"] * 4 + ["top-p"] * 4 + ["top-k and top-p"] + ["temperature 0"] * 2


def _prob_case(fn: Callable, name: str, logits: Tensor, temperature: float, top_k: int | None,
               top_p: float | None) -> None:
    got = call(fn, logits.clone(), temperature, top_k, top_p,
               what=f"your function ({name}: temperature={temperature}, top_k={top_k}, top_p={top_p})")
    if not isinstance(got, Tensor):
        raise Mistake(f"{name}: expected a tensor of probabilities, got {type(got).__name__}; did you forget "
                      "a `return`?")
    want = _reference_probs(logits, temperature, top_k, top_p)
    if got.shape != want.shape:
        raise Mistake(f"{name}: output has shape {tuple(got.shape)}, expected {tuple(want.shape)} = (batch, vocab)")
    got = got.detach().float()
    if torch.isnan(got).any():
        hint = (" With temperature 0, logits / temperature divides by zero: temperature 0 means greedy, "
                "all the probability on the argmax." if temperature == 0 else "")
        raise Mistake(f"{name}: your probabilities contain NaN.{hint}")
    if torch.allclose(got, want, atol=1e-5):
        return
    if temperature == 0:
        raise Mistake(f"{name}: temperature 0 is greedy: put probability 1 on the argmax of each row and 0 "
                      "elsewhere (the filters cannot change the argmax)")
    for hint, buggy in PROB_MISTAKES.items():
        if torch.allclose(got, buggy(logits, temperature, top_k, top_p), atol=1e-5):
            raise Mistake(f"{name}: {hint}")
    if not torch.allclose(got.sum(-1), torch.ones(got.size(0)), atol=1e-4):
        raise Mistake(f"{name}: each row must sum to 1, yours sum to {[round(v, 4) for v in got.sum(-1).tolist()]}")
    if top_p == 1.0:
        raise Mistake(f"{name}: top_p = 1 must keep every token (the whole distribution)")
    kept, want_kept = (got > 0).sum(-1).tolist(), (want > 0).sum(-1).tolist()
    raise Mistake(f"{name}: wrong probabilities (tokens kept per row: yours {kept}, expected {want_kept}; largest "
                  f"difference {(got - want).abs().max().item():.3g})")


@named_checks(PROB_CHECKS)
def check_next_token_probs(fn: Callable) -> None:
    """``fn(logits, temperature, top_k, top_p)`` -> probabilities ``(batch, vocab)`` to draw the next token from.
    Named checks: temperature, top-k, top-p, both, temperature 0."""
    with parts(check_next_token_probs):
        for i, case in enumerate(_prob_cases()):
            part(PROB_PARTS[i])
            _prob_case(fn, *case)
    passed("check_next_token_probs", f"{len(_prob_cases())} cases: temperature, top-k (ties, k = 1), top-p "
                                     "(p = 1), both together, and temperature 0")


# ------------------------------------------------------------------------------------- next-token windows
def _window_shapes(fn: Callable, ids: Tensor, starts: Tensor, max_len: int) -> tuple[Tensor, Tensor]:
    """The learner's ``(x, y)`` for one case, once it is a pair of tensors of shape ``(batch, max_len)``."""
    result = call(fn, ids.clone(), starts.clone(), max_len, what=f"your function (starts={starts.tolist()}, "
                                                                  f"max_len={max_len})")
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        hint = "; did you forget a `return`?" if result is None else ""
        raise Mistake(f"return a pair (x, y) of tensors, got {type(result).__name__}{hint}")
    x, y = result
    expect(isinstance(x, Tensor) and isinstance(y, Tensor), "x and y must be tensors")
    batch = starts.numel()
    if x.shape != (batch, max_len) or y.shape != (batch, max_len):
        if x.shape == (batch, max_len + 1) or y.shape == (batch, max_len + 1):
            raise Mistake(f"x and y must each hold `max_len` = {max_len} tokens: slice ids[s : s + max_len] for x "
                          f"and ids[s + 1 : s + max_len + 1] for y (a window of max_len + 1 tokens, split in two "
                          f"overlapping views); got shapes {tuple(x.shape)} and {tuple(y.shape)}")
        raise Mistake(f"x and y must be (batch, max_len) = ({batch}, {max_len}), got {tuple(x.shape)} and "
                      f"{tuple(y.shape)}")
    return x, y


def _window_values(x: Tensor, y: Tensor, ids: Tensor, starts: Tensor, max_len: int) -> None:
    want_x = torch.stack([ids[s: s + max_len] for s in starts.tolist()])  # (batch, max_len)
    want_y = torch.stack([ids[s + 1: s + max_len + 1] for s in starts.tolist()])
    if torch.equal(x, want_x) and torch.equal(y, want_y):
        return
    if torch.equal(x, want_x) and torch.equal(y, want_x):
        raise Mistake("y equals x: the targets are not shifted. The model would learn to copy its input; the "
                      "target at position t is the token AFTER x[t], i.e. ids[s + t + 1]")
    if torch.equal(x, want_y) and torch.equal(y, want_x):
        raise Mistake("x and y are swapped: the targets are shifted the wrong way, so position t would predict "
                      "the token BEFORE it. x = ids[s : s + max_len], y = ids[s + 1 : s + max_len + 1]")
    by_two = [ids[s + 2: s + max_len + 2] for s in starts.tolist()]
    if torch.equal(x, want_x) and all(len(t) == max_len for t in by_two) and torch.equal(y, torch.stack(by_two)):
        raise Mistake("y is shifted by two: the target of x[t] is the very next token, ids[s + t + 1]")
    if torch.equal(x, want_x + 1) or torch.equal(x, want_x - 1):
        raise Mistake("the windows start one token off: x[b] must begin at ids[starts[b]]")
    raise Mistake(f"for starts={starts.tolist()}, max_len={max_len}: x[0] = {x[0].tolist()}, y[0] = "
                  f"{y[0].tolist()}; expected x[0] = {want_x[0].tolist()}, y[0] = {want_y[0].tolist()}")


WINDOW_CASES = {"a batch of three windows": ([0, 7, 30], 8), "one window at the end of ids": ([51], 8),
                "windows of one token": ([3, 3], 1)}
WINDOW_CHECKS = {"a batch of three windows": 2, "one window at the end of ids": 1, "windows of one token": 1}


@named_checks(WINDOW_CHECKS)
def check_next_token_windows(fn: Callable) -> None:
    """``fn(ids, starts, max_len)`` -> ``(x, y)``: inputs and their next tokens. Named checks: one per case."""
    ids = torch.arange(100, 160)  # token ids that name their own position + 100
    with parts(check_next_token_windows):
        for name, (starts, max_len) in WINDOW_CASES.items():
            part(name)
            x, y = _window_shapes(fn, ids, torch.tensor(starts), max_len)
            _window_values(x, y, ids, torch.tensor(starts), max_len)
    passed("check_next_token_windows", "x = ids[s : s + max_len], y = the same window one token later")
