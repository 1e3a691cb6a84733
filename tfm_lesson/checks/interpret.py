"""Checkers for chapter 17 (what the heads learned):

- ``check_alignment_error_rate(fn)``: ``fn(predicted, sure, possible=None)`` -> Och & Ney's AER, a float;
  the links are ``(target, source)`` pairs, an alignment is a **set** (a link repeated in any of the three lists is
  counted once, or refused);
- ``check_induction_score(fn)``: ``fn(attention (..., 1 + 2 seg_len, 1 + 2 seg_len), seg_len)`` -> ``(...)`` mean
  attention of the repeated half's queries to the key after the earlier copy of their token;
- ``check_patch_position(fn)``: ``fn(clean, corrupted, head, position)`` (``patch_head``'s order) -> a copy of
  ``corrupted`` ``(batch, len, heads, d_k)`` whose ``head`` at query ``position`` comes from ``clean``, nothing else
  changed; clean and corrupted swapped is named as a swap.
"""
from __future__ import annotations

import random
import re
from typing import Callable

import torch
from torch import Tensor

from ._harness import Mistake, call, close, expect, passed

__all__ = ["check_alignment_error_rate", "check_induction_score", "check_patch_position"]


# AER ------------------------------------------------------------------------------------------------------------------
def _aer(a, s, p, bug: str = "") -> float:
    if bug == "list":  # counts of a list: a repeated link counted each time it appears
        a_s = sum(1 for link in a if link in s)
        a_p = sum(1 for link in a if link in p)
        return 1 - (a_s + a_p) / (len(a) + len(s))
    a, s, p = set(a), set(s), set(p)
    if bug == "s_twice":
        return 1 - 2 * len(a & s) / (len(a) + len(s))
    if bug == "p_twice":
        return 1 - 2 * len(a & p) / (len(a) + len(s))
    if bug == "denominator_p":
        return 1 - (len(a & s) + len(a & p)) / (len(a) + len(p))
    if bug == "possible_only":  # P read as the possible-but-not-sure links only
        return 1 - (len(a & s) + len(a & (p - s))) / (len(a) + len(s))
    if bug == "f_measure":  # 1 - F of precision |A∩P|/|A| and recall |A∩S|/|S|
        precision, recall = len(a & p) / len(a), len(a & s) / len(s)
        return 1 - (2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    if bug == "accuracy":
        return (len(a & s) + len(a & p)) / (len(a) + len(s))
    return 1 - (len(a & s) + len(a & p)) / (len(a) + len(s))


_AER_BUGS = ("s_twice", "p_twice", "denominator_p", "accuracy", "possible_only", "f_measure")
_AER_HINTS = {
    "list": "a link named twice in `predicted` was counted twice: an alignment is a SET of links. Turn the "
            "inputs into sets first (set(predicted)), or refuse repeats; counting over the list rewards a model "
            "that repeats the links it is sure of",
    "s_twice": "you used |A ∩ S| twice: the numerator is |A ∩ S| + |A ∩ P| (a possible link counts for precision, "
               "only a sure one for recall)",
    "p_twice": "you used |A ∩ P| twice: the numerator is |A ∩ S| + |A ∩ P| (recall is measured on the sure links)",
    "denominator_p": "the denominator is |A| + |S| (the sure links), not |A| + |P|",
    "accuracy": "that is 1 - AER: AER is an error rate, 0 for a perfect alignment",
    "f_measure": "that is 1 - F, the harmonic mean of precision |A ∩ P| / |A| and recall |A ∩ S| / |S|: AER adds "
                 "the two counts instead, 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|), which equals 1 - F only when P = S",
    "possible_only": "you counted |A ∩ (P − S)|, the possible-but-not-sure links only: P includes S (every sure "
                     "link is also possible), so the numerator is |A ∩ S| + |A ∩ P|",
}
TOLERANCE = 1e-6  # float32 holds an AER to about 1e-7: a float32 tensor of the right value passes
NONE = "your code returned None: not written yet, or did you forget a `return`?"


def _as_float(got: object, what: str) -> float:
    expect(got is not None, NONE)
    expect(isinstance(got, (int, float)) and not isinstance(got, bool)
           or (isinstance(got, Tensor) and got.numel() == 1),
           f"{what} returned {type(got).__name__}, expected a float")
    return float(got)


def check_alignment_error_rate(fn: Callable) -> None:
    """``fn(predicted, sure, possible=None)``: AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), P = S when ``possible`` is
    None; inputs are sets of ``(target, source)`` pairs, or lists (a repeated link counted once, or an error)."""
    rng = random.Random(170)
    cells = [(t, s) for t in range(6) for s in range(6)]
    runs = []  # (what, a, s, p, got) for the 30 random alignments
    for trial in range(30):
        s = set(rng.sample(cells, rng.randint(1, 6)))
        p = s | set(rng.sample(cells, rng.randint(0, 6)))
        a = set(rng.sample(cells, rng.randint(1, 8)))
        what = f"aer({sorted(a)}, {sorted(s)}, {sorted(p)})"
        runs.append((what, a, s, p, _as_float(call(fn, set(a), set(s), set(p), what=what), what)))
    wrong = [run for run in runs if abs(run[4] - _aer(*run[1:4])) > TOLERANCE]
    if wrong:
        what, a, s, p, got = wrong[0]
        want = _aer(a, s, p)
        for bug in _AER_BUGS:  # the slip that gives the learner's result on EVERY alignment (one may match by chance)
            if all(abs(g - _aer(a_, s_, p_, bug)) <= TOLERANCE for _, a_, s_, p_, g in runs):
                raise Mistake(f"{what} = {got:.7f}, expected {want:.7f}: {_AER_HINTS[bug]}")
        raise Mistake(f"{what} = {got:.7f}, expected {want:.7f} = 1 - (|A∩S| + |A∩P|) / (|A| + |S|)")
    s = {(0, 0), (1, 1), (2, 2)}
    got = _as_float(call(fn, {(0, 0), (1, 2)}, set(s), None, what="aer(A, S, possible=None)"), "aer(A, S, None)")
    expect(abs(got - _aer({(0, 0), (1, 2)}, s, s)) <= TOLERANCE,
           f"aer(A, S, possible=None) = {got:.7f}: with no possible links P is S (every sure link is possible)")
    # a list that repeats a link
    a_list = [(0, 0), (0, 0), (0, 0), (1, 2)]
    got = _repeated(fn, (list(a_list), sorted(s), sorted(s)), f"aer({a_list}, S, S)")
    if got is not None:
        if abs(got - _aer(a_list, s, s, "list")) <= TOLERANCE:
            raise Mistake(f"aer({a_list}, S, S) = {got:.7f}: {_AER_HINTS['list']}")
        expect(abs(got - _aer(set(a_list), s, s)) <= TOLERANCE,
               f"aer({a_list}, S, S) = {got:.7f}, expected {_aer(set(a_list), s, s):.7f} on the set of the links: "
               "count each link once in every part of the formula, numerator and denominator alike")
    _check_repeated_references(fn)
    _check_empty(fn, s)
    passed("check_alignment_error_rate", "Och & Ney's formula on 30 random alignments, P = S by default, "
           "a repeated link counted once (or refused)")


def _repeated(fn: Callable, args: tuple, what: str) -> float | None:
    """``fn(*args)`` as a float, or None when it refuses the repeated link (a ValueError or TypeError)."""
    try:
        return _as_float(call(fn, *args, what=what), what)
    except Mistake as exc:
        if isinstance(exc.__cause__, (ValueError, TypeError)):
            return None  # refusing repeats is right too
        raise


_REPEATED = ("a link named twice in `{arg}` was counted twice: `{arg}` is a SET of links, so {count}. Turn each "
             "input into a set first (set({arg})), or refuse repeats")
_REPEATS = (  # (predicted, sure, possible) with one link repeated in `sure` or in `possible`; AER 0 on their sets
    ("sure", [(0, 0)], [(0, 0), (0, 0)], None, "|S| counts it once (here |S| = 1, not 2)"),
    ("sure", [(0, 0), (1, 1)], [(0, 0), (1, 1), (1, 1)], [(0, 0), (1, 1)], "|S| and |A ∩ S| count it once"),
    ("possible", [(0, 0), (1, 1)], [(0, 0)], [(0, 0), (1, 1), (1, 1)], "|A ∩ P| counts it once (here 2, not 3)"),
)


def _check_repeated_references(fn: Callable) -> None:
    """A link repeated in ``sure`` or ``possible`` counts once: an answer right on the same lists without the repeat
    and wrong with it counted the repeat."""
    for arg, a, s, p, count in _REPEATS:
        what = f"aer({a}, {s}, {p})"
        got = _repeated(fn, (list(a), list(s), None if p is None else list(p)), what)
        want = _aer(a, s, s if p is None else p)
        if got is None or abs(got - want) <= TOLERANCE:
            continue
        plain = [list(dict.fromkeys(links)) if links is not None else None for links in (a, s, p)]
        alone = _repeated(fn, tuple(plain), f"aer({plain[0]}, {plain[1]}, {plain[2]})")
        if alone is not None and abs(alone - want) <= TOLERANCE:
            raise Mistake(f"{what} = {got:.7f}, expected {want:.7f}: " + _REPEATED.format(arg=arg, count=count))
        raise Mistake(f"{what} = {got:.7f}, expected {want:.7f}: the links given as lists, not sets, change your "
                      "result; turn each input into a set first (set(predicted), set(sure), set(possible))")


UNDEFINED = ("with no predicted link and no sure link, |A| + |S| = 0 and AER is 0/0: undefined, there is nothing to "
             "score. Let the division raise (ZeroDivisionError), raise a ValueError (as "
             "tfm_lesson.look.interpret.alignment_error_rate does) or return nan: a number here (0 'perfect', 1 'all "
             "wrong') would be averaged into a corpus score as if the sentence had been scored")


def _check_empty(fn: Callable, s: set) -> None:
    """No prediction against sure links scores 1 (every sure link missed); nothing against nothing is undefined."""
    what = f"aer(set(), {sorted(s)}, None)"
    try:
        got = _as_float(call(fn, set(), set(s), None, what=what), what)
    except Mistake as exc:
        if isinstance(exc.__cause__, ZeroDivisionError):
            raise Mistake(f"{what} raised ZeroDivisionError: with no predicted link AER is still defined, "
                          f"1 - 0 / |S| = 1 (every sure link missed); only |A| + |S| = 0 is 0/0") from exc
        raise
    expect(abs(got - 1.0) <= TOLERANCE, f"{what} = {got:.7f}, expected 1.0000000: with no predicted link "
                                        "|A ∩ S| = |A ∩ P| = 0, so AER = 1 - 0 / |S| = 1, every sure link missed "
                                        "(an empty prediction is not a perfect one)")
    what = "aer(set(), set(), None)"
    try:
        got = call(fn, set(), set(), None, what=what)
    except Mistake as exc:
        if isinstance(exc.__cause__, (ZeroDivisionError, ValueError)):
            return  # undefined, said so
        raise
    got = _as_float(got, what)
    expect(got != got, f"{what} = {got!r}: {UNDEFINED}")  # nan is the only value that is not itself


# induction score ------------------------------------------------------------------------------------------------------
def _score(a: Tensor, seg_len: int, bug: str = "") -> Tensor:
    n = a.size(-1)
    if bug == "diagonal":  # every query with a key seg_len - 1 back, first half included
        return torch.diagonal(a, offset=-(seg_len - 1), dim1=-2, dim2=-1).mean(-1)
    if bug == "first_half":
        q = torch.arange(1, seg_len + 1)
        return a[..., q, q + seg_len - 1].mean(-1)
    if bug == "first_half_back":  # the first half's queries, looking back by the same offset (wrapped)
        q = torch.arange(1, seg_len + 1)
        return a[..., q, (q - seg_len + 1) % n].mean(-1)
    if bug == "copy_itself":  # attends to the earlier copy of the token, not the one after it
        q = torch.arange(seg_len + 1, 2 * seg_len + 1)
        return a[..., q, q - seg_len].mean(-1)
    if bug == "no_bos":
        q = torch.arange(seg_len, 2 * seg_len)
        return a[..., q, q - seg_len + 1].mean(-1)
    if bug == "short_range":  # range(n + 1, 2 n): the last query of the repeat left out
        q = torch.arange(seg_len + 1, 2 * seg_len)
        return a[..., q, q - seg_len + 1].mean(-1)
    if bug == "swapped":  # attention[..., key, query]: the two last axes read the wrong way round
        q = torch.arange(seg_len + 1, 2 * seg_len + 1)
        return a[..., q - seg_len + 1, q].mean(-1)
    if bug == "sum":
        q = torch.arange(seg_len + 1, 2 * seg_len + 1)
        return a[..., q, q - seg_len + 1].sum(-1)
    q = torch.arange(seg_len + 1, 2 * seg_len + 1)
    return a[..., q, q - seg_len + 1].mean(-1)


_SCORE_HINTS = {
    "first_half": "you measured the FIRST half (queries 1 .. seg_len): those tokens are random, with no planned "
                  "earlier copy (a repeat there is chance), so the score is not about them. Take the queries of the "
                  "repeated half, positions seg_len + 1 .. 2 seg_len",
    "first_half_back": "you measured the FIRST half (queries 1 .. seg_len): those tokens are random, with no "
                       "planned earlier copy. Take the queries of the repeated half, positions seg_len + 1 .. 2 "
                       "seg_len",
    "diagonal": "you averaged the whole offset diagonal, so queries of the FIRST half (no planned earlier copy) "
                "are in the mean: keep only the repeated half's queries, positions seg_len + 1 .. 2 seg_len",
    "copy_itself": "you scored attention to the earlier copy of the token itself (t - seg_len): that is a "
                   "duplicate-token head. An induction head attends to the token AFTER it, t - seg_len + 1",
    "no_bos": "off by one: position 0 holds <s>, so the segment is at 1 .. seg_len and its repeat at "
              "seg_len + 1 .. 2 seg_len",
    "sum": "you summed over the queries: the score is a MEAN, in [0, 1]",
    "short_range": "the last query of the repeat is missing: the repeated half is t = seg_len + 1 .. 2 seg_len "
                   "INCLUDED, torch.arange(seg_len + 1, 2 * seg_len + 1) (range stops one before its end)",
    "swapped": "you read attention[..., key, query]: the last two axes are (query, key), so row t is what query t "
               "attends to; on a causal map your entries lie above the diagonal, where every weight is 0",
}


def _index_hint(exc: Exception, shape: tuple[int, ...]) -> str | None:
    """An index out of bounds on a map of ``shape``: on a leading (batch, head) axis, or past the map's end."""
    if isinstance(exc, IndexError) and "too many indices" in str(exc):
        return (f"Your index names more axes than this map has: attention is {tuple(shape)} here, and the checker "
                "passes maps with any number of leading (batch, head) axes. Index the last two with `...` in "
                "front: attention[..., t, t - seg_len + 1]")
    if not (isinstance(exc, IndexError) and "out of bounds" in str(exc)):
        return None
    size = re.search(r"with size (\d+)", str(exc))
    if size and int(size.group(1)) != shape[-1] and len(shape) > 2:
        return (f"You indexed the map's leading axes: attention is {tuple(shape)}, (..., query, key) with batch and "
                f"head axes in front, and your index met an axis of size {size.group(1)}, not one of the map's "
                f"{shape[-1]} positions. Index the last two axes whatever comes before them: "
                "attention[..., t, t - seg_len + 1]")
    index = re.search(r"index (-?\d+)", str(exc))
    if index and int(index.group(1)) > shape[-1]:  # far past the end: a length typed in, not an off-by-one
        return (f"Index {index.group(1)} is far past this map's {shape[-1]} positions (seg_len = "
                f"{(shape[-1] - 1) // 2}): build every index from the `seg_len` argument, never from a length of "
                "your own (the checker tries several lengths)")
    return ("An index past the end: the map has 1 + 2 seg_len positions, 0 .. 2 seg_len, and the last query of "
            "the repeat is t = 2 seg_len, torch.arange(seg_len + 1, 2 * seg_len + 1) (the end excluded)")


def _plus(k: int) -> str:
    return f" {'+' if k > 0 else '-'} {abs(k)}" if k else ""


def _name_the_window(what: str, got: Tensor, a: Tensor, seg_len: int) -> None:
    """An off-by-one in the queries' range, the key's offset or the count divided by: name each part that is off."""
    n = a.size(-1)
    for first in range(seg_len - 1, seg_len + 3):
        for stop in range(2 * seg_len - 1, min(2 * seg_len + 2, n) + 1):
            for shift in range(-seg_len - 1, -seg_len + 4):
                q = torch.arange(first, stop)
                if len(q) < 2 or int(q[0]) + shift < 0:
                    continue
                picked = a[..., q, q + shift]
                for count in (len(q) - 1, len(q), len(q) + 1, seg_len):
                    if (first, stop, shift, count) == (seg_len + 1, 2 * seg_len + 1, 1 - seg_len, seg_len):
                        continue
                    if close(got, picked.sum(-1) / count):
                        raise Mistake(f"{what}: " + _describe(seg_len, first, stop, shift, count))


def _describe(seg_len: int, first: int, stop: int, shift: int, count: int) -> str:
    parts = []
    if (first, stop) != (seg_len + 1, 2 * seg_len + 1):
        last = _plus(stop - 1 - 2 * seg_len)
        parts.append(f"your queries run t = seg_len{_plus(first - seg_len)} .. 2 seg_len{last} "
                     f"(here {first} .. {stop - 1}); the repeated half is t = seg_len + 1 .. 2 seg_len, both ends "
                     "included: torch.arange(seg_len + 1, 2 * seg_len + 1), since position 0 holds <s> and range "
                     "stops one before its end")
    if shift != 1 - seg_len:
        parts.append(f"your key is t - seg_len{_plus(shift + seg_len)}, the induction key is t - seg_len + 1 (the "
                     "token AFTER the earlier copy of token t)")
    if count not in (stop - first, seg_len):  # dividing a short range by seg_len: the range is what to fix
        parts.append(f"you divided the sum of {stop - first} weights by {count}: the score is their mean")
    return "; ".join(parts)


def check_induction_score(fn: Callable) -> None:
    """``fn(attention, seg_len)``: attention ``(..., 1 + 2 seg_len, 1 + 2 seg_len)`` over ``<s>``, a segment, its
    repeat -> ``(...)``: mean over the repeated half's queries ``t`` of ``attention[..., t, t - seg_len + 1]``."""
    g = torch.Generator().manual_seed(171)
    for shape, seg_len, causal in (((2, 3), 4, False), ((4,), 6, False), ((1, 2), 1, False), ((2, 2), 5, True),
                                   ((3,), 3, True)):
        n = 1 + 2 * seg_len
        scores = torch.rand(*shape, n, n, generator=g) * 3
        if causal:  # what a decoder's head gives: query t sees keys 0 .. t
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        a = scores.softmax(-1)
        what = (f"induction_score({'causal ' if causal else ''}attention {tuple(a.shape)}, seg_len={seg_len})")
        got = call(fn, a, seg_len, what=what, explain=lambda exc: _index_hint(exc, tuple(a.shape)))
        expect(got is not None, NONE)
        expect(isinstance(got, Tensor), f"{what} returned {type(got).__name__}, expected a tensor of shape {shape}")
        want = _score(a, seg_len)
        expect(got.shape == want.shape, f"{what} returned shape {tuple(got.shape)}, expected {tuple(want.shape)}: "
               "one score per head (average over the query positions only)")
        if close(got, want):
            continue
        for bug, hint in _SCORE_HINTS.items():
            if seg_len > 1 and close(got, _score(a, seg_len, bug)):
                raise Mistake(f"{what}: {hint}")
        if seg_len > 2:
            _name_the_window(what, got, a, seg_len)
        raise Mistake(f"{what} differs from the mean over t in seg_len + 1 .. 2 seg_len of attention[..., t, "
                      f"t - seg_len + 1] (largest difference {(got - want).abs().max().item():.3g})")
    passed("check_induction_score", "the repeated half's queries, one key after the earlier copy, averaged")


# patching at a position -----------------------------------------------------------------------------------------------
def _patch_index_hint(exc: Exception) -> str | None:
    if isinstance(exc, IndexError):
        return ("Head outputs are (batch, len, heads, d_k): the position is axis 1 and the head axis 2, so the "
                "slice is [:, position, head]")
    return None


def check_patch_position(fn: Callable) -> None:
    """``fn(clean, corrupted, head, position)`` (the order of :func:`tfm_lesson.look.interpret.patch_head`: clean
    run first) with ``(batch, len, heads, d_k)`` head outputs: a NEW tensor equal to ``corrupted`` except ``[:, position, head]``,
    which comes from ``clean``; the inputs are left unchanged (the harness names an input changed in place)."""
    g = torch.Generator().manual_seed(172)
    for head, position in ((1, 5), (0, 2), (2, 7)):
        clean, corrupted = torch.randn(2, 8, 3, 4, generator=g), torch.randn(2, 8, 3, 4, generator=g)
        what = f"patch(clean, corrupted, head={head}, position={position})"
        got = call(fn, clean, corrupted, head, position, what=what, explain=_patch_index_hint)
        expect(got is not None, NONE)
        expect(isinstance(got, Tensor) and got.shape == corrupted.shape,
               f"{what} must return a tensor shaped like corrupted {tuple(corrupted.shape)}")
        want = corrupted.clone()
        want[:, position, head] = clean[:, position, head]
        if torch.equal(got, want):
            continue
        swapped = clean.clone()
        swapped[:, position, head] = corrupted[:, position, head]
        if torch.equal(got, swapped):
            raise Mistake(f"{what} returned the CLEAN run with one head from the corrupted one: clean and corrupted "
                          "are swapped. The arguments come in patch_head's order, patch(clean, corrupted, ...): "
                          "start from a copy of `corrupted` (the second argument) and copy the one head from `clean`")
        changed = (got != corrupted).any(-1)  # (batch, len, heads)
        positions = sorted({int(p) for p in changed.nonzero()[:, 1].tolist()})
        heads = sorted({int(h) for h in changed.nonzero()[:, 2].tolist()})
        if torch.equal(got, clean):
            raise Mistake(f"{what} returned the whole clean run: patch ONE head at ONE position")
        if len(positions) == 1 and positions[0] != position:
            raise Mistake(f"{what} patched position {positions[0]}, not {position}: patch the head where it "
                          f"writes its output, the QUERY position {position} whose prediction you measure, not the "
                          "key it attends to or the position of the token it predicts")
        if len(positions) > 1:
            raise Mistake(f"{what} changed positions {positions}: patch only the query position {position} (a slice "
                          "like [:, position, head], not [:, :, head] or [:, position:])")
        if heads != [head]:
            raise Mistake(f"{what} changed head(s) {heads}: patch only head {head} (index the heads axis, dim 2)")
        untouched = [b for b in range(got.size(0)) if torch.equal(got[b], corrupted[b])]
        if untouched:
            raise Mistake(f"{what} left batch element(s) {untouched} unpatched: patch every sequence of the batch "
                          f"(`:` on the first axis, [:, {position}, {head}])")
        raise Mistake(f"{what}: the patched values are not clean[:, {position}, {head}]")
    passed("check_patch_position", "one head at one query position copied from the clean run, inputs untouched")


# the reference pieces, for a chapter whose later cells need working pieces ----------------------------------------
def _ref_aer(predicted, sure, possible=None) -> float:
    a, s = set(predicted), set(sure)  # sets: a repeated link counts once
    p = s if possible is None else set(possible) | s
    if not a and not s:
        raise ValueError("AER is undefined when both predicted and sure are empty")
    return _aer(a, s, p)


def _ref_induction_score(attention: Tensor, seg_len: int) -> Tensor:
    return _score(attention, seg_len)


def _ref_patch(clean: Tensor, corrupted: Tensor, head: int, position: int) -> Tensor:
    out = corrupted.clone()  # (batch, len, heads, d_k)
    out[:, position, head] = clean[:, position, head]
    return out


PIECES = {"aer": (check_alignment_error_rate, _ref_aer),
          "induction_score": (check_induction_score, _ref_induction_score),
          "patch": (check_patch_position, _ref_patch)}
