"""Chapter 14 checkers: the reference passes; each classic mistake fails with its own hint."""
from __future__ import annotations

import re

import pytest
import torch

from tfm_lesson.checks import Mistake, check_bpe_merge, check_next_token_probs, check_next_token_windows
from tfm_lesson.sampling import filter_top_k, filter_top_p
from tfm_lesson.data.tokenizer import merge_pair
from conftest import passes as _passes, raises_mistake as _raises  # noqa: E402


# --- one BPE merge --------------------------------------------------------------------------------------------
def merge_while(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


@pytest.mark.parametrize("fn", [merge_pair, merge_while, lambda ids, pair, new: tuple(merge_pair(ids, pair, new))])
def test_merge_reference_passes(fn, capsys):
    check_bpe_merge(fn)
    assert "✔ check_bpe_merge passed" in capsys.readouterr().out


def merge_step_one(ids, pair, new_id):  # the classic: a for loop that cannot skip the pair's second token
    out = []
    for i in range(len(ids) - 1):
        out.append(new_id if (ids[i], ids[i + 1]) == tuple(pair) else ids[i])
    return out


def merge_overlap_skip(ids, pair, new_id):  # skips the second token only when it does not start a new match
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            if not (i + 2 < len(ids) and (ids[i + 1], ids[i + 2]) == tuple(pair)):
                i += 1
        else:
            out.append(ids[i])
        i += 1
    return out


def merge_from_right(ids, pair, new_id):
    out, i = [], len(ids) - 1
    while i >= 0:
        if i > 0 and (ids[i - 1], ids[i]) == tuple(pair):
            out.insert(0, new_id)
            i -= 2
        else:
            out.insert(0, ids[i])
            i -= 1
    return out


def merge_in_place(ids, pair, new_id):
    merged = merge_pair(ids, pair, new_id)
    ids[:] = merged
    return ids


@pytest.mark.parametrize("fn, hint", [
    (merge_overlap_skip, "overlapping occurrences were both merged"),
    (merge_from_right, "you scanned from the right"),
    (lambda ids, pair, new: merge_pair(ids, (pair[1], pair[0]), new), "merged the pair the wrong way round"),
    (lambda ids, pair, new: ids[:ids.index(pair[0])] + [new] + ids[ids.index(pair[0]) + 2:]
     if any((a, b) == tuple(pair) for a, b in zip(ids, ids[1:])) else list(ids), "only the first occurrence"),
    (lambda ids, pair, new: merge_pair(ids, pair, new)[:-1] if ids and ids[-1] != pair[1] else merge_pair(ids, pair, new),
     "the last token went missing"),
    (merge_in_place, "changed `ids` in place"),
    (lambda ids, pair, new: None, "did you forget a `return`"),
    (lambda ids, pair, new: 1 / 0, "raised ZeroDivisionError"),
])
def test_merge_mistakes(fn, hint):
    _raises(check_bpe_merge, fn, hint)


def test_for_loop_merge_is_caught():
    with pytest.raises(Mistake, match=r"\[5, 5, 5\].*gave \[9, 9\]"):
        check_bpe_merge(merge_step_one)


# --- next-token probabilities ---------------------------------------------------------------------------------
def probs_reference(logits, temperature, top_k, top_p):
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).float()
    z = logits / temperature
    if top_k is not None:
        z = filter_top_k(z, top_k)
    if top_p is not None:
        z = filter_top_p(z, top_p)
    return z.softmax(-1)


def probs_by_hand(logits, temperature, top_k, top_p):
    """Written the long way: sort once, cut by k and by p, keep ties."""
    if temperature == 0:
        out = torch.zeros_like(logits)
        return out.scatter(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = logits / temperature
    if top_k is not None and top_k < z.size(-1):
        kth = z.sort(-1, descending=True).values[:, top_k - 1: top_k]
        z = torch.where(z >= kth, z, torch.tensor(float("-inf")))
    if top_p is not None:
        p = z.softmax(-1)
        sp = p.sort(-1, descending=True).values
        need = (sp.cumsum(-1) - sp) < top_p
        bar = torch.where(need, sp, torch.tensor(2.0)).min(-1, keepdim=True).values
        z = torch.where(p >= bar, z, torch.tensor(float("-inf")))
    return z.softmax(-1)


@pytest.mark.parametrize("fn", [probs_reference, probs_by_hand])
def test_probs_reference_passes(fn, capsys):
    check_next_token_probs(fn)
    assert "✔ check_next_token_probs passed" in capsys.readouterr().out


def _with(**changes):
    def fn(logits, temperature, top_k, top_p):
        if temperature == 0 and "greedy" not in changes:
            return probs_reference(logits, 0, None, None)
        return changes["impl"](logits, temperature, top_k, top_p)
    return fn


def topk_by_index(logits, temperature, top_k, top_p):
    z = logits / temperature
    if top_k is not None:
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, z.topk(min(top_k, z.size(-1)), -1).indices, True)
        z = z.masked_fill(~keep, float("-inf"))
    if top_p is not None:
        z = filter_top_p(z, top_p)
    return z.softmax(-1)


def topp_strict(logits, temperature, top_k, top_p):
    z = logits / temperature
    if top_k is not None:
        z = filter_top_k(z, top_k)
    if top_p is not None:
        p = z.softmax(-1)
        sp, order = p.sort(-1, descending=True)
        keep_sorted = sp.cumsum(-1) <= top_p  # up to AND including p: the crossing token is lost
        keep_sorted[:, 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, float("-inf"))
    return z.softmax(-1)


def filter_then_temperature(logits, temperature, top_k, top_p):
    z = logits
    if top_k is not None:
        z = filter_top_k(z, top_k)
    if top_p is not None:
        z = filter_top_p(z, top_p)
    return (z / temperature).softmax(-1)


def zeroed_not_renormalised(logits, temperature, top_k, top_p):
    full = (logits / temperature).softmax(-1)
    return full * (probs_reference(logits, temperature, top_k, top_p) > 0)


@pytest.mark.parametrize("fn, hint", [
    (_with(impl=topk_by_index), "top-k dropped tokens TIED"),
    (_with(impl=topp_strict), "top-p left out the token that carries the sum past p"),
    (_with(impl=filter_then_temperature), "applied before the temperature"),
    (_with(impl=lambda l, t, k, p: probs_reference(l * t * t, t, k, p)), "multiplied by the temperature"),
    (_with(impl=zeroed_not_renormalised), "do not sum to 1"),
    (_with(impl=lambda l, t, k, p: probs_reference(l, t, k, None)), "top-p = 0.5: top_p was ignored"),
    (_with(impl=lambda l, t, k, p: probs_reference(l, t, None, p)), "top-k = 3: top_k was ignored"),
    (lambda l, t, k, p: probs_reference(l, t, k, p) if t else (l / t).softmax(-1),
     "temperature 0 (greedy): your probabilities contain NaN"),
    (lambda l, t, k, p: probs_reference(l, max(t, 1.0), k, p) if t == 0 else probs_reference(l, t, k, p),
     "temperature 0 is greedy"),
    (lambda l, t, k, p: None, "did you forget a `return`"),
    (lambda l, t, k, p: probs_reference(l, t, k, p)[0], "expected (3, 12) = (batch, vocab)"),
])
def test_probs_mistakes(fn, hint):
    _raises(check_next_token_probs, fn, hint)


def test_top_p_one_must_keep_everything():
    def drops_at_one(l, t, k, p):
        out = probs_reference(l, t, k, p)
        if p == 1.0:  # the least probable token is lost (e.g. a cumulative sum that rounds past 1)
            out = out.masked_fill(out == out.min(-1, keepdim=True).values, 0.0)
            out = out / out.sum(-1, keepdim=True)
        return out

    with pytest.raises(Mistake, match="top-p = 1"):
        check_next_token_probs(drops_at_one)


# --- next-token windows ---------------------------------------------------------------------------------------
def windows_reference(ids, starts, max_len):
    x = torch.stack([ids[s: s + max_len] for s in starts.tolist()])
    y = torch.stack([ids[s + 1: s + max_len + 1] for s in starts.tolist()])
    return x, y


def windows_gather(ids, starts, max_len):
    w = ids[starts[:, None] + torch.arange(max_len + 1)]  # (batch, max_len + 1)
    return w[:, :-1], w[:, 1:]


@pytest.mark.parametrize("fn", [windows_reference, windows_gather])
def test_windows_reference_passes(fn, capsys):
    check_next_token_windows(fn)
    assert "✔ check_next_token_windows passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda ids, s, c: (windows_reference(ids, s, c)[0], windows_reference(ids, s, c)[0]), "not shifted"),
    (lambda ids, s, c: windows_reference(ids, s, c)[::-1], "shifted the wrong way"),
    (lambda ids, s, c: (windows_reference(ids, s, c)[0], windows_reference(ids, s + 1, c)[1]), "shifted by two"),
    (lambda ids, s, c: windows_reference(ids, s + 1, c), "start one token off"),
    (lambda ids, s, c: (windows_reference(ids, s, c + 1)[0], windows_reference(ids, s, c + 1)[1]),
     "must each hold `max_len`"),
    (lambda ids, s, c: windows_reference(ids, s, c)[0], "return a pair (x, y)"),
])
def test_windows_mistakes(fn, hint):
    _raises(check_next_token_windows, fn, hint)
