"""Checkers for chapter 01: scaled dot-product attention, ``softmax(Q K^T / sqrt(d_k)) V``.

- ``check_attention_scores(fn)``: ``fn(query, key)`` -> ``Q K^T / sqrt(d_k)``, ``(..., q_len, k_len)``;
- ``check_attention_weights(fn)``: ``fn(query, key)`` -> ``softmax(Q K^T / sqrt(d_k))`` along the keys;
- ``check_attention(fn, corner_cases=True)``: ``fn(query, key, value, mask=None)`` -> output ``(..., q_len, d_v)``
  or ``(output, weights)``, compared with :func:`tfm_lesson.scaled_dot_product_attention`; with
  ``corner_cases=False`` (chapter 01) only plain masks, without fully masked rows or half precision (chapter 02);
- ``check_retrieval(fn)``: ``fn(targets, k_len, d_k)`` -> ``(Q, K)`` such that query ``i`` puts at least 99% of its
  attention on key ``targets[i]``: attention used as a lookup table that you design by hand.

Sizes are chosen so the mistakes are told apart: ``d_k = 16`` (so sqrt(d_k) = 4, d_k = 16 and 1 differ),
``d_v = 6 != d_k`` (scaling by the value's width shows), ``q_len != k_len`` (a softmax over the queries keeps the
shape but not the numbers). Scaling by sqrt(d_model) only exists with several heads: the multi-head checker
(chapter 03) names that one.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..attention import scaled_dot_product_attention
from ._harness import Mistake, call, close, diagnose, expect, output_of, passed

__all__ = ["check_attention_scores", "check_attention_weights", "check_attention", "check_retrieval"]

D_K, D_V = 16, 6
TRANSPOSE_HINT = ("`.T` / `.t()` transpose ALL dimensions of a batched tensor; swap only the last two: "
                  "key.transpose(-2, -1)")
NAN_ROW_HINT = ("a query whose keys are ALL masked came out NaN: softmax over a row of -inf is 0 / 0. Expected zeros "
                "(that query sees nothing, so it gets nothing): find such rows with has_key = mask.any(dim=-1, "
                "keepdim=True), keep them finite before the softmax, and zero them after it, e.g. "
                "weights.masked_fill(~has_key, 0.0).")
UNIFORM_ROW_HINT = ("a query whose keys are ALL masked got the plain mean of the values (uniform weights): that is "
                    "what filling with a large negative number such as -1e9 does. Expected zeros: find such rows "
                    "with has_key = mask.any(dim=-1, keepdim=True) and zero their weights after the softmax.")
OVERFLOW_HINT = ("-1e9 does not fit in float16 (its largest magnitude is 65504), so masked_fill refuses it (or it "
                 "becomes -inf). Fill with float('-inf') (exact in every float dtype; then handle fully masked rows) "
                 "or with torch.finfo(scores.dtype).min.")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, dtype: torch.dtype, g: torch.Generator) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _scale_suspects(query: Tensor, key: Tensor, value: Tensor | None, apply: Callable[[float], Tensor]) -> dict:
    """hint -> what the result would be with a wrong scale ``s`` in ``Q K^T / s`` (``apply(s)`` computes it)."""
    d_k = query.size(-1)
    out = {
        f"your scores are not scaled: divide Q K^T by sqrt(d_k) = sqrt({d_k}) = {math.sqrt(d_k):.3g} before the "
        "softmax (chapter 01 measures why: the dot product of two d_k-dim unit-variance vectors has variance d_k).":
            apply(1.0),
        f"your scores look divided by d_k = {d_k}, not by sqrt(d_k) = {math.sqrt(d_k):.3g}: use math.sqrt(d_k) "
        "(or d_k ** 0.5).": apply(float(d_k)),
        f"your scores look MULTIPLIED by sqrt(d_k) = {math.sqrt(d_k):.3g} instead of divided by it.":
            apply(1.0 / math.sqrt(d_k)),
    }
    if value is not None and value.size(-1) != d_k:
        out[f"your scores look divided by sqrt(d_v) = sqrt({value.size(-1)}), the VALUE's width: d_k is the width "
            "of the queries and keys, query.size(-1)."] = apply(math.sqrt(value.size(-1)))
    for axis in range(query.dim() - 1):
        size = query.size(axis)
        if size not in (1, d_k):
            hint = (f"your scores look divided by sqrt({size}) = sqrt(query.size({axis})), not sqrt(d_k) = "
                    f"sqrt({d_k}): d_k is the LAST dimension, query.size(-1); dimension {axis} is "
                    f"{'the sequence length' if axis == query.dim() - 2 else 'a batch/heads dimension'}.")
            out.setdefault(hint, apply(math.sqrt(size)))
    if key.size(-2) not in (1, d_k, query.size(-2)):
        out[f"your scores look divided by sqrt(k_len) = sqrt({key.size(-2)}): d_k is query.size(-1)."] = \
            apply(math.sqrt(key.size(-2)))
    return out


def _cases() -> list[tuple[tuple[int, ...], int, int, torch.dtype]]:
    """(leading dims, q_len, k_len, dtype): 2-D, (batch,), (batch, heads); float32 and float64."""
    return [((), 5, 7, torch.float32), ((3,), 4, 6, torch.float64), ((2, 3), 5, 7, torch.float32),
            ((2, 2), 6, 4, torch.float64)]


def _call(fn: Callable, args: tuple, what: str, lead: tuple[int, ...], **kwargs) -> object:
    try:
        return call(fn, *args, what=what, **kwargs)
    except Mistake as exc:
        if lead and "raised" in str(exc) and "overflow" not in str(exc):
            raise Mistake(f"{exc}. It failed on inputs with leading dimensions {lead}: {TRANSPOSE_HINT}, and "
                          "let softmax, sums and masks use negative axes (dim=-1).") from exc
        raise


def _one_tensor(result: object, what: str) -> Tensor:
    if isinstance(result, (tuple, list)):
        raise Mistake(f"{what} returned a {type(result).__name__}; return one tensor")
    return output_of(result)


def check_attention_scores(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(query (..., q_len, d_k), key (..., k_len, d_k))`` must return ``Q K^T / sqrt(d_k)``."""
    for i, (lead, q_len, k_len, dtype) in enumerate(_cases()):
        g = _gen(400 + i)
        query, key = _randn(*lead, q_len, D_K, dtype=dtype, g=g), _randn(*lead, k_len, D_K, dtype=dtype, g=g)
        got = _one_tensor(_call(fn, (query, key), "attention_scores(query, key)", lead), "attention_scores")
        raw = query @ key.transpose(-2, -1)  # (..., q_len, k_len)
        expected = raw / math.sqrt(D_K)
        if got.shape == (*lead, k_len, q_len) and close(got, expected.transpose(-2, -1), atol=1e-4):
            raise Mistake(f"your scores are shaped (k_len, q_len) = {(k_len, q_len)}: you computed K Q^T. Row i must "
                          "be query i: query @ key.transpose(-2, -1).")
        diagnose(got, expected, _scale_suspects(query, key, None, lambda s: raw / s),
                 "your scores differ from query @ key.transpose(-2, -1) / sqrt(d_k)", atol=1e-4)
        expect(got.dtype == dtype, f"for {dtype} inputs your scores are {got.dtype}: keep the input dtype")
    passed("check_attention_scores", f"Q K^T / sqrt(d_k) with d_k={D_K} on 2-D and (batch, heads) inputs, "
                                     "float32 and float64")


def _weights_symptoms(got: Tensor, expected: Tensor) -> None:
    """Name a softmax over the wrong axis or rows that do not sum to one, by looking at the sums."""
    if got.shape != expected.shape or torch.isnan(got).any() or close(got, expected, atol=1e-4):
        return
    rows, cols = got.sum(-1), got.sum(-2)
    if close(cols, torch.ones_like(cols), atol=1e-4) and not close(rows, torch.ones_like(rows), atol=1e-4):
        raise Mistake("your weights' COLUMNS sum to one, not the rows: softmax over the wrong axis (the queries). "
                      "Each query distributes its attention over the keys: softmax(scores, dim=-1).")
    if not close(rows, torch.ones_like(rows), atol=1e-3):
        raise Mistake(f"your weights' rows do not sum to one (they sum to between {rows.min().item():.3g} and "
                      f"{rows.max().item():.3g}): each query's weights over the keys must be a softmax along dim=-1.")


def check_attention_weights(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(query, key)`` must return ``softmax(Q K^T / sqrt(d_k), dim=-1)``: ``(..., q_len, k_len)``, rows sum to 1."""
    for i, (lead, q_len, k_len, dtype) in enumerate(_cases()):
        g = _gen(500 + i)
        query, key = _randn(*lead, q_len, D_K, dtype=dtype, g=g), _randn(*lead, k_len, D_K, dtype=dtype, g=g)
        got = _one_tensor(_call(fn, (query, key), "attention_weights(query, key)", lead), "attention_weights")
        raw = query @ key.transpose(-2, -1)  # (..., q_len, k_len)
        expected = torch.softmax(raw / math.sqrt(D_K), dim=-1)
        _weights_symptoms(got, expected)
        suspects = _scale_suspects(query, key, None, lambda s: torch.softmax(raw / s, dim=-1))
        diagnose(got, expected, suspects, "your weights differ from softmax(Q K^T / sqrt(d_k), dim=-1)", atol=1e-4)
        expect(got.dtype == dtype, f"for {dtype} inputs your weights are {got.dtype}: keep the input dtype")
    passed("check_attention_weights", "rows sum to one and match softmax(Q K^T / sqrt(d_k)) on 2-D and batched "
                                      "inputs, float32 and float64")


# --- full attention ---------------------------------------------------------------------------------------------
def _naive(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, scale: float | None = None,
           dim: int = -1, how: str = "fill") -> Tensor:
    """Attention with one classic deviation: a wrong ``scale``, softmax over ``dim``, or the mask applied ``how``."""
    scale = math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) / scale  # (..., q_len, k_len)
    if how == "exp":  # no normalisation at all
        return scores.exp() @ value
    if mask is not None and how == "multiply-scores":
        scores = scores * mask
    if mask is not None and how == "fill":
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and how == "after":
        weights = weights * mask
    return weights @ value


def _mask_with_both(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    """A random boolean mask where every row has at least one True and one False key."""
    mask = torch.rand(*shape, generator=g) < 0.5
    k_len = shape[-1]
    first = torch.randint(0, k_len, shape[:-1], generator=g)
    second = (first + 1 + torch.randint(0, k_len - 1, shape[:-1], generator=g)) % k_len
    mask.scatter_(-1, first[..., None], True)
    mask.scatter_(-1, second[..., None], False)
    return mask


def _check_weights(result: object, expected_w: Tensor) -> None:
    if isinstance(result, (tuple, list)) and len(result) > 1 and isinstance(result[1], Tensor):
        weights = result[1]
        expect(weights.shape == expected_w.shape,
               f"your weights have shape {tuple(weights.shape)}, expected (..., q_len, k_len) = "
               f"{tuple(expected_w.shape)}")
        _weights_symptoms(weights, expected_w)
        diagnose(weights, expected_w, {}, "your output is right but the weights you return are not the ones used",
                 atol=1e-4)


def _attn(fn: Callable, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, lead: tuple[int, ...]) -> object:
    what = "your attention(query, key, value" + (", mask)" if mask is not None else ")")
    try:
        return _call(fn, (q, k, v), what, lead, **({"mask": mask} if mask is not None else {}))
    except Mistake as exc:
        if "overflow" in str(exc):
            raise Mistake(f"{exc}. {OVERFLOW_HINT}") from exc
        raise


def check_attention(fn: Callable[..., object], corner_cases: bool = True) -> None:
    """``fn(query, key, value, mask=None)`` -> output ``(..., q_len, d_v)`` or ``(output, weights)``.

    Compared with :func:`tfm_lesson.scaled_dot_product_attention` on 2-D and (batch, heads) inputs, without and
    with masks (True = may attend). With ``corner_cases=True`` (the default) also with fully masked query rows
    (expected: zeros) and in float16 and bfloat16; ``corner_cases=False`` leaves those two out (chapter 01 asks
    for plain masking; chapter 02 teaches the rest).
    """
    _check_unmasked(fn)
    q, k, v, g = _check_masked(fn)
    if not corner_cases:
        passed("check_attention", "matches tfm_lesson.scaled_dot_product_attention on 2-D and (batch, heads) inputs, "
                                  "float32 and float64, without a mask and with padding and random masks")
        return
    _check_fully_masked_rows(fn, q, k, v, g)
    _check_half_precision(fn)
    passed("check_attention", "matches tfm_lesson.scaled_dot_product_attention on 2-D and (batch, heads) inputs, "
                              "float32/64/16 and bfloat16, padding and random masks, fully masked rows give zeros")


def _check_unmasked(fn: Callable[..., object]) -> None:
    """No mask, several shapes and dtypes: the scale, the softmax's axis and its normalisation."""
    for i, (lead, q_len, k_len, dtype) in enumerate(_cases()):
        g = _gen(600 + i)
        q, k = _randn(*lead, q_len, D_K, dtype=dtype, g=g), _randn(*lead, k_len, D_K, dtype=dtype, g=g)
        v = _randn(*lead, k_len, D_V, dtype=dtype, g=g)
        result = _attn(fn, q, k, v, None, lead)
        got = output_of(result)
        expected, expected_w = scaled_dot_product_attention(q, k, v)
        suspects = {
            **_scale_suspects(q, k, v, lambda s: _naive(q, k, v, scale=s)),
            "softmax over the wrong axis: your weights are normalised over the QUERIES (dim=-2), so each key's "
            "column sums to one. Each query distributes its attention over the keys: softmax(scores, dim=-1).":
                _naive(q, k, v, dim=-2),
            "your weights do not sum to one: exp(scores) was used without dividing by its row sum; use "
            "softmax(scores, dim=-1).": _naive(q, k, v, how="exp"),
        }
        diagnose(got, expected, suspects, "your output differs from softmax(Q K^T / sqrt(d_k)) V", atol=1e-4)
        expect(got.dtype == dtype, f"for {dtype} inputs your output is {got.dtype}: keep the input dtype")
        _check_weights(result, expected_w)


def _check_masked(fn: Callable[..., object]) -> tuple[Tensor, Tensor, Tensor, torch.Generator]:
    """Masks where each query row keeps at least one key and loses at least one (no fully masked rows yet);
    returns the inputs and the generator for the next step."""
    g = _gen(700)
    lead, q_len, k_len = (2, 3), 5, 7
    q, k = _randn(*lead, q_len, D_K, dtype=torch.float32, g=g), _randn(*lead, k_len, D_K, dtype=torch.float32, g=g)
    v = _randn(*lead, k_len, D_V, dtype=torch.float32, g=g)
    lengths = torch.tensor([k_len - 1, 3])  # padding in both rows: the inverted mask still leaves every row a key
    padding = (torch.arange(k_len) < lengths[:, None])[:, None, None, :]  # (batch, 1, 1, k_len)
    for mask in (_mask_with_both((2, 1, q_len, k_len), g), padding, _mask_with_both((q_len, k_len), g)):
        result = _attn(fn, q, k, v, mask, lead)
        got = output_of(result)
        expected, expected_w = scaled_dot_product_attention(q, k, v, mask)
        diagnose(got, expected, _mask_suspects(q, k, v, mask),
                 f"with a mask of shape {tuple(mask.shape)} your output differs from the reference (True = may "
                 "attend, broadcast to (batch, heads, q_len, k_len))", atol=1e-4)
        _check_weights(result, expected_w)
    return q, k, v, g


def _mask_suspects(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> dict[str, Tensor]:
    return {
        "your output matches the INVERTED mask: in tfm_lesson (as in F.scaled_dot_product_attention) True "
        "means MAY attend; fill the scores where the mask is False: scores.masked_fill(~mask, -inf). "
        "(nn.MultiheadAttention uses the opposite, True = blocked.)": _naive(q, k, v, ~mask),
        "your output ignores the mask: masked keys still receive attention. Fill their scores with -inf "
        "before the softmax.": _naive(q, k, v),
        "the mask was applied AFTER the softmax (weights * mask): masked keys get zero weight but the rows no "
        "longer sum to one. Mask the scores before the softmax instead.": _naive(q, k, v, mask, how="after"),
        "your scores were multiplied by the mask: a masked score becomes 0, not -inf, so masked keys still "
        "get exp(0) = 1 of weight. Use scores.masked_fill(~mask, float('-inf')).":
            _naive(q, k, v, mask, how="multiply-scores"),
    }


def _check_fully_masked_rows(fn: Callable[..., object], q: Tensor, k: Tensor, v: Tensor, g: torch.Generator) -> None:
    """Fully masked query rows: expected zeros, not NaN and not the mean of the values."""
    lead, q_len, k_len = q.shape[:-2], q.size(-2), k.size(-2)
    mask = _mask_with_both((2, 1, q_len, k_len), g)
    mask[0, 0, 1] = False  # batch 0, query 1 sees no key
    mask[1, 0, 4] = False  # batch 1, query 4 sees no key
    result = _attn(fn, q, k, v, mask, tuple(lead))
    got = output_of(result)
    expected, expected_w = scaled_dot_product_attention(q, k, v, mask)
    empty = ~mask.any(-1).expand(*lead, q_len)  # (batch, heads, q_len): True for the fully masked rows
    expect(got.shape == expected.shape, f"with a fully masked row your output has shape {tuple(got.shape)}, "
                                        f"expected {tuple(expected.shape)}")
    if torch.isnan(got[empty]).any():
        raise Mistake(NAN_ROW_HINT)
    if torch.isnan(got).any():
        raise Mistake("your output has NaN in rows that still see some keys: " + NAN_ROW_HINT)
    if close(got[empty], v.mean(-2, keepdim=True).expand(*lead, q_len, D_V)[empty], atol=1e-4):
        raise Mistake(UNIFORM_ROW_HINT)
    expect(close(got[empty], torch.zeros_like(got[empty]), atol=1e-6),
           "a query whose keys are all masked must get an all-zero output (it attends to nothing); yours is not zero")
    diagnose(got, expected, {}, "with fully masked rows present, your other rows differ from the reference",
             atol=1e-4)
    _check_weights(result, expected_w)


def _check_half_precision(fn: Callable[..., object]) -> None:
    """float16 and bfloat16 (on CPU too): a mask filled with -1e9 overflows float16."""
    q_len, k_len = 5, 7
    for dtype, atol in ((torch.float16, 1e-2), (torch.bfloat16, 5e-2)):
        g = _gen(800)
        q, k = _randn(2, q_len, D_K, dtype=dtype, g=g), _randn(2, k_len, D_K, dtype=dtype, g=g)
        v = _randn(2, k_len, D_V, dtype=dtype, g=g)
        mask = _mask_with_both((2, q_len, k_len), g)
        got = output_of(_attn(fn, q, k, v, mask, (2,)))
        expected, _ = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
        expect(not torch.isnan(got).any() and not torch.isinf(got).any(),
               f"in {dtype} your output has NaN/inf. {OVERFLOW_HINT}")
        expect(got.dtype == dtype, f"for {dtype} inputs your output is {got.dtype}: keep the input dtype")
        diagnose(got.double(), expected, {}, f"in {dtype} your output differs from the reference", atol=atol)


# --- attention as a lookup table you design ---------------------------------------------------------------------
RETRIEVAL_CASES: tuple[tuple[tuple[int, ...], int, int], ...] = (
    ((2, 0, 3, 1), 4, 8),          # a permutation: query i must find key targets[i]
    ((1, 2, 3, 4, 5, 0), 6, 8),    # a shift by one
    ((4, 4, 0, 2, 1), 5, 16),      # two queries want the same key; key 3 is wanted by nobody
)
MIN_WEIGHT = 0.99


def check_retrieval(fn: Callable[[list[int], int, int], object]) -> None:
    """``fn(targets, k_len, d_k)`` must return ``(Q, K)``, ``Q`` of shape ``(len(targets), d_k)`` and ``K`` of shape
    ``(k_len, d_k)``, such that in ``softmax(Q K^T / sqrt(d_k))`` query ``i`` gives at least 99% of its weight to
    key ``targets[i]``: then ``attention(Q, K, V)[i]`` is (almost) ``V[targets[i]]`` for any values ``V``."""
    for targets, k_len, d_k in RETRIEVAL_CASES:
        what = f"your function({list(targets)}, k_len={k_len}, d_k={d_k})"
        result = call(fn, list(targets), k_len, d_k, what=what)
        if not (isinstance(result, (tuple, list)) and len(result) == 2
                and all(isinstance(t, Tensor) for t in result)):
            raise Mistake(f"{what} must return a pair of tensors (Q, K); it returned {type(result).__name__}"
                          + ("; did you forget a `return`?" if result is None else ""))
        Q, K = (t.detach().cpu().double() for t in result)
        n = len(targets)
        expect(Q.shape == (n, d_k), f"{what}: Q has shape {tuple(Q.shape)}, expected (len(targets), d_k) = {(n, d_k)}: "
                                    "one query row per entry of targets")
        expect(K.shape == (k_len, d_k), f"{what}: K has shape {tuple(K.shape)}, expected (k_len, d_k) = "
                                        f"{(k_len, d_k)}: one key row per value")
        expect(bool(torch.isfinite(Q).all() and torch.isfinite(K).all()),
               f"{what}: Q or K contains inf or NaN; a finite scale (say 20) is enough to make one key win")
        raw = Q @ K.T  # (q_len, k_len)
        weights = torch.softmax(raw / math.sqrt(d_k), dim=-1)  # what attention computes
        best = weights.argmax(-1)  # (q_len,)
        wanted = torch.tensor(targets)
        if not torch.equal(best, wanted):
            if torch.equal(best, torch.arange(n) % k_len) and not torch.equal(wanted, torch.arange(n) % k_len):
                raise Mistake(f"{what}: query i attends most to key i, as when Q = K. Query i must point at key "
                              "targets[i]: make row i of Q look like row targets[i] of K.")
            i = int((best != wanted).nonzero()[0])
            inverse = {t: q for q, t in enumerate(targets)}
            if len(inverse) == n == k_len and all(int(best[q]) == inverse.get(q, -1) for q in range(n)):
                raise Mistake(f"{what}: query i attends most to the key j with targets[j] == i: the lookup runs "
                              "backwards. Row i of Q must match row targets[i] of K, not the other way round.")
            raise Mistake(f"{what}: query {i} attends most to key {int(best[i])}, not to key targets[{i}] = "
                          f"{targets[i]}. Its score with key {targets[i]} must be the largest in its row.")
        got = weights[torch.arange(n), wanted]  # (q_len,): each query's weight on its target
        if bool((got < MIN_WEIGHT).any()):
            i = int(got.argmin())
            gap = math.log(MIN_WEIGHT / (1 - MIN_WEIGHT) * (k_len - 1))
            if bool((torch.softmax(raw, dim=-1)[torch.arange(n), wanted] >= MIN_WEIGHT).all()):
                raise Mistake(f"{what}: without the division by sqrt(d_k) your scores would do, but attention divides "
                              f"Q K^T by sqrt({d_k}) = {math.sqrt(d_k):.3g} first; query {i} keeps only "
                              f"{got[i].item():.2f} of its weight on key {targets[i]}. Make Q or K "
                              f"{math.sqrt(d_k):.3g} times larger.")
            raise Mistake(f"{what}: the right key wins, but not by enough: query {i} puts only {got[i].item():.2f} of "
                          f"its weight on key {targets[i]} (at least {MIN_WEIGHT} needed). After the division by "
                          f"sqrt(d_k) its score must beat every other by about ln(99 x (k_len - 1)) = {gap:.1f}: "
                          "multiply Q (or K) by a larger number.")
    passed("check_retrieval", f"every query puts at least {MIN_WEIGHT:.0%} of its weight on its target key, for "
                              "permutations and repeated targets")
