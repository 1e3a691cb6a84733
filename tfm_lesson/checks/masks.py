"""Checkers for chapter 02: masks (boolean, True = may attend, broadcastable to (batch, heads, q_len, k_len)).

- ``check_padding_mask(fn)``: ``fn(tokens (batch, seq_len), pad_id)`` -> ``(batch, 1, 1, seq_len)``;
- ``check_causal_mask(fn)``: ``fn(size)`` -> ``(size, size)``, query i sees keys 0..i;
- ``check_masked_softmax(fn)``: ``fn(scores, mask)`` -> attention weights with masked keys at 0, rows summing to
  one, and all-zero rows for queries that see no key (never NaN), in every float dtype;
- ``check_decoder_mask(fn)``: ``fn(tokens, pad_id)`` -> the decoder's self-attention mask ``(batch, 1, t, t)``,
  padding AND causal.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..masks import causal_mask, combine_masks, padding_mask
from ._harness import Mistake, call, check_device_placement, close, diagnose, expect, passed

__all__ = ["check_padding_mask", "check_causal_mask", "check_masked_softmax", "check_decoder_mask"]

HEADS = 2
POLARITY_HINT = ("True must mean MAY attend (the convention of F.scaled_dot_product_attention and tfm_lesson); "
                 "nn.MultiheadAttention uses the opposite, True = blocked.")


def _name(fn: Callable, default: str) -> str:
    """The learner's function as they named it (``my_decoder_mask``), else ``default`` (a lambda, a partial)."""
    name = getattr(fn, "__name__", "")
    return name if name.isidentifier() else default


def _tensor(result: object, what: str, kind: str = "a boolean torch.Tensor") -> Tensor:
    if not isinstance(result, Tensor):
        raise Mistake(f"{what} returned {type(result).__name__}, expected {kind}"
                      + ("; did you forget a `return`?" if result is None else ""))
    return result


def _boolean(mask: Tensor, what: str) -> None:
    if mask.dtype != torch.bool:
        extra = ""
        if mask.is_floating_point() and torch.isinf(mask).any():
            extra = (" It looks like an additive mask (0 / -inf); tfm_lesson's masks are boolean, and the -inf "
                     "is filled in later, where the scores are.")
        raise Mistake(f"{what} has dtype {mask.dtype}: return booleans (True = may attend), e.g. the result of a "
                      f"comparison such as tokens != pad_id.{extra} Note that F.scaled_dot_product_attention reads a "
                      "float mask as numbers ADDED to the scores, so a 0/1 float mask silently does the wrong thing.")


def _tokens(lengths: list[int], seq_len: int, pad_id: int, g: torch.Generator) -> Tensor:
    """(batch, seq_len) ids: real tokens (never pad_id, and including 0 when pad_id != 0), then padding."""
    real = torch.randint(0, 20, (len(lengths), seq_len), generator=g)
    real[real == pad_id] = pad_id + 1
    if pad_id != 0:
        real[:, 0] = 0  # a real token with id 0: a hard-coded pad id of 0 would hide it
    keep = torch.arange(seq_len) < torch.tensor(lengths)[:, None]
    return torch.where(keep, real, torch.full_like(real, pad_id))


def check_padding_mask(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(tokens (batch, seq_len), pad_id)`` -> boolean ``(batch, 1, 1, seq_len)``, True on real tokens."""
    g = torch.Generator().manual_seed(900)
    name = _name(fn, "padding_mask")
    for lengths, seq_len, pad_id in (([6, 4, 2], 6, 0), ([3, 5, 5, 1], 5, 1), ([7, 7], 7, 0)):
        tokens = _tokens(lengths, seq_len, pad_id, g)
        batch = tokens.size(0)
        what = f"your padding mask for tokens of shape {tuple(tokens.shape)}"
        mask = _tensor(call(fn, tokens.clone(), pad_id, what=f"{name}(tokens, pad_id)"), name)
        _boolean(mask, what)
        expected = padding_mask(tokens, pad_id)  # (batch, 1, 1, seq_len)
        keys = expected[:, 0, 0, :]  # (batch, k_len)
        if mask.shape == (batch, seq_len):
            raise Mistake(f"{what} is shaped (batch, seq_len) = {tuple(mask.shape)}. Broadcasting aligns shapes from "
                          "the RIGHT, so against (batch, heads, q_len, k_len) it would be read as (q_len, k_len). Add "
                          "the two missing axes: mask[:, None, None, :] -> (batch, 1, 1, k_len).")
        if mask.dim() in (3, 4) and mask.shape[-1] == 1 and mask.shape[-2] == seq_len and mask.size(0) == batch:
            flat = mask.reshape(batch, seq_len)
            if torch.equal(flat, keys) or torch.equal(flat, ~keys):
                raise Mistake(f"{what} is shaped {tuple(mask.shape)}: it masks QUERIES (rows), not keys (columns). "
                              "Padding must be hidden as a key, so the sequence axis goes last: (batch, 1, 1, k_len).")
        q_len = seq_len + 1  # a query length different from k_len: a key mask must not care about q_len
        try:
            seen = mask.expand(batch, HEADS, q_len, seq_len) if mask.dim() <= 4 else None
        except RuntimeError:
            seen = None
        if seen is None:
            raise Mistake(f"{what} has shape {tuple(mask.shape)}, which does not broadcast to (batch, heads, q_len, "
                          f"k_len) = {(batch, HEADS, q_len, seq_len)} for any number of heads and queries: return "
                          "(batch, 1, 1, k_len).")
        want = expected.expand(batch, HEADS, q_len, seq_len)
        if torch.equal(seen, ~want):
            raise Mistake(f"your padding mask is inverted: it is True on the padding. {POLARITY_HINT}")
        if pad_id != 0 and torch.equal(seen, (tokens != 0)[:, None, None, :].expand_as(want)):
            raise Mistake(f"your mask ignores pad_id (here pad_id={pad_id}) and hides the tokens with id 0: compare "
                          "with the pad_id argument, tokens != pad_id.")
        for sign, cut in ((">", tokens > pad_id), (">=", tokens >= pad_id), ("<", tokens < pad_id)):
            if not torch.equal(cut, tokens != pad_id) and torch.equal(seen, cut[:, None, None, :].expand_as(want)):
                raise Mistake(f"your mask is tokens {sign} pad_id: it treats ids on one side of pad_id (here "
                              f"pad_id={pad_id}) as padding, or padding as real. Ids are labels, not sizes: a token is "
                              "padding exactly when it equals pad_id, tokens != pad_id.")
        expect(torch.equal(seen, want), f"{what} differs from (tokens != pad_id)[:, None, None, :] at "
                                        f"{int((seen != want).sum())} places (after broadcasting)")
    check_device_placement(fn, _tokens([3, 2], 3, 0, torch.Generator().manual_seed(1)), 0,
                           what=f"your {name}(tokens, pad_id)", argument="tokens")
    passed("check_padding_mask", "(batch, 1, 1, k_len) booleans, True on real tokens, for several pad ids and lengths")


def check_causal_mask(fn: Callable[[int], Tensor]) -> None:
    """``fn(size)`` -> boolean ``(size, size)`` (leading 1s allowed): True where key j <= query i."""
    name = _name(fn, "causal_mask")
    for size in (5, 8, 1):
        mask = _tensor(call(fn, size, what=f"{name}({size})"), name)
        what = f"your causal mask for size={size}"
        _boolean(mask, what)
        expect(mask.dim() >= 2 and mask.shape[-2:] == (size, size) and all(s == 1 for s in mask.shape[:-2]),
               f"{what} has shape {tuple(mask.shape)}, expected (size, size) = {(size, size)} (q_len, k_len), which "
               "broadcasts to (batch, heads, q_len, k_len)")
        got = mask.reshape(size, size)
        ones = torch.ones(size, size, dtype=torch.bool)
        expected = causal_mask(size)  # (q_len, k_len), lower triangle with the diagonal
        suspects = {
            f"your causal mask is inverted: True on the future keys. {POLARITY_HINT} Query i may attend to keys "
            "0..i: torch.ones(size, size, dtype=torch.bool).tril().": ~expected,
            "your causal mask excludes the diagonal (tril(-1)): a position may attend to ITSELF; without it the "
            "first query sees nothing at all (a fully masked row). Use .tril() (diagonal=0).": ones.tril(-1),
            "your causal mask is shifted by one: query i can see key i + 1, one step into the future (tril(1)). "
            "In training the model would copy the next token instead of predicting it. Use .tril() (diagonal=0).":
                ones.tril(1),
            "your causal mask is the UPPER triangle (triu): each query sees itself and the future, not the past. "
            "Rows are queries, columns keys: keep j <= i, the lower triangle, .tril().": ones.triu(),
            "your mask lets every query see every key: nothing is hidden. Keep only keys j <= i: .tril().": ones,
        }
        if size > 1:
            for hint, bad in suspects.items():
                if torch.equal(got, bad):
                    raise Mistake(hint)
            shifted = next((k for k in range(-size + 1, size) if k and torch.equal(got, ones.tril(k))), None)
            if shifted is not None:
                sees = "into the future" if shifted > 0 else "not itself nor the keys just before it"
                raise Mistake(f"your causal mask is tril({shifted}): query i sees keys up to i "
                              f"{'+' if shifted > 0 else '-'} {abs(shifted)}, {sees}. Keep keys j <= i, the diagonal "
                              "included: .tril() (diagonal=0).")
        expect(torch.equal(got, expected), f"{what} differs from the lower triangle (key j visible to query i "
                                           f"iff j <= i) at {int((got != expected).sum())} places")
    passed("check_causal_mask", "lower-triangular booleans with the diagonal, sizes 1, 5 and 8")


def _masked_softmax_reference(scores: Tensor, mask: Tensor) -> Tensor:
    """softmax over visible keys; a row with no visible key is all zeros."""
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1)
    filled = scores.masked_fill(~(mask | ~has_key), float("-inf"))
    return torch.softmax(filled, dim=-1).masked_fill(~has_key, 0.0)


def check_masked_softmax(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(scores (..., q_len, k_len), mask)`` -> weights: masked keys 0, rows sum to 1, fully masked rows all 0."""
    g = torch.Generator().manual_seed(1000)
    name = _name(fn, "masked_softmax")
    batch, q_len, k_len = 2, 4, 6
    padded = (torch.arange(k_len) < torch.tensor([5, 3])[:, None])[:, None, None, :]  # (batch, 1, 1, k_len)
    # every row keeps at least one key and loses at least one, under the mask and under its inverse
    cases = [
        (torch.float32, padded, "a padding mask (batch, 1, 1, k_len)"),
        (torch.float64, torch.ones(q_len, k_len, dtype=torch.bool).tril(), "a causal mask (q_len, k_len)"),
        (torch.float32, padded & torch.ones(q_len, k_len, dtype=torch.bool).tril(), "padding AND causal"),
    ]
    for dtype, mask, label in cases:
        scores = (torch.randn(batch, HEADS, q_len, k_len, generator=g, dtype=torch.float64) * 2).to(dtype)
        got = _tensor(call(fn, scores.clone(), mask, what=f"{name}(scores, mask)"), name,
                      "a tensor of weights")
        expected = _masked_softmax_reference(scores, mask)
        plain = torch.softmax(scores, dim=-1)
        diagnose(got, expected, {
            f"your weights match the INVERTED mask: the masked keys got the attention. {POLARITY_HINT} "
            "Fill where the mask is False: scores.masked_fill(~mask, float('-inf')).":
                _masked_softmax_reference(scores, ~mask),
            "your weights ignore the mask: masked keys still get attention. Fill their scores with -inf before the "
            "softmax.": plain,
            "you masked AFTER the softmax (softmax(scores) * mask): masked keys are 0 but the rows no longer sum "
            "to one. Fill the scores with -inf before the softmax instead.": plain * mask,
            "the softmax runs over the wrong axis (dim=-2, the queries): use dim=-1, the keys.":
                torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-2),
        }, f"with {label} your weights differ from the reference", atol=1e-5)
        expect(got.dtype == dtype, f"for {dtype} scores your weights are {got.dtype}: keep the input dtype")

    # fully masked rows: expected zeros
    mask = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool).tril()
    mask[0, 0, 2] = False  # batch 0, query 2: no visible key
    mask[1, 0, 0] = False  # batch 1, query 0: no visible key
    empty = ~mask.any(-1).expand(batch, HEADS, q_len)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        scores = (torch.randn(batch, HEADS, q_len, k_len, generator=g, dtype=torch.float64) * 2).to(dtype)
        try:
            got = _tensor(call(fn, scores.clone(), mask, what=f"{name}(scores, mask)"), name,
                      "a tensor of weights")
        except Mistake as exc:
            if "overflow" in str(exc):
                raise Mistake(f"{exc}. In {dtype}: -1e9 does not fit (float16's largest magnitude is 65504). Fill "
                              "with float('-inf') (exact in every float dtype) or torch.finfo(scores.dtype).min."
                              ) from exc
            raise
        expect(got.shape == scores.shape, f"your weights have shape {tuple(got.shape)}, expected {tuple(scores.shape)}")
        rows = got[empty]
        if torch.isnan(rows).any():
            raise Mistake(f"in {dtype}, a query whose keys are ALL masked got NaN weights: softmax of a row of -inf is "
                          "0 / 0. Expected zeros: has_key = mask.any(dim=-1, keepdim=True); fill only rows that have "
                          "a key, then weights.masked_fill(~has_key, 0.0).")
        if close(rows, torch.full_like(rows, 1.0 / k_len), atol=1e-2):
            raise Mistake(f"in {dtype}, a query whose keys are ALL masked got uniform weights 1/{k_len} (what -1e9 or "
                          "finfo.min gives: every score equal). Expected zeros: zero the rows where "
                          "mask.any(dim=-1) is False after the softmax.")
        expect(close(rows, torch.zeros_like(rows)), f"in {dtype}, fully masked rows must be all zeros")
        atol = 1e-5 if dtype == torch.float32 else 1e-2
        diagnose(got.float(), _masked_softmax_reference(scores.float(), mask), {},
                 f"in {dtype}, with fully masked rows present, your other rows differ from the reference", atol=atol)
    passed("check_masked_softmax", "masked keys get 0, rows sum to one, fully masked rows are zeros (not NaN) in "
                                   "float32/64/16 and bfloat16")


def check_decoder_mask(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(tokens (batch, t), pad_id)`` -> boolean ``(batch, 1, t, t)``: causal AND not padding."""
    g = torch.Generator().manual_seed(1100)
    name = _name(fn, "decoder_mask")
    for lengths, t, pad_id in (([5, 3, 1], 5, 0), ([4, 6], 6, 1)):
        tokens = _tokens(lengths, t, pad_id, g)
        batch = tokens.size(0)
        mask = _tensor(call(fn, tokens.clone(), pad_id, what=f"{name}(tokens, pad_id)"), name)
        what = f"your decoder mask for tokens of shape {tuple(tokens.shape)}"
        _boolean(mask, what)
        try:
            seen = mask.expand(batch, HEADS, t, t)
        except RuntimeError:
            raise Mistake(f"{what} has shape {tuple(mask.shape)}, which does not broadcast to (batch, heads, t, t) = "
                          f"{(batch, HEADS, t, t)}: combine (batch, 1, 1, t) padding with (t, t) causal -> "
                          "(batch, 1, t, t).") from None
        pad, causal = padding_mask(tokens, pad_id), causal_mask(t)
        expected = combine_masks(pad, causal).expand(batch, HEADS, t, t)
        suspects = {
            "your mask is padding OR causal: a key is visible if EITHER allows it, so the future leaks through real "
            "tokens and padding through the past. Combine with AND (&): visible only if every mask allows it.":
                pad | causal,
            "your mask is only the causal mask: padding keys are still visible. AND it with the padding mask.":
                causal,
            "your mask is only the padding mask: future keys are still visible. AND it with the causal mask.": pad,
            f"your mask is inverted. {POLARITY_HINT}": ~combine_masks(pad, causal),
            "your causal part is shifted by one (one future key visible): use tril() with diagonal=0.":
                pad & torch.ones(t, t, dtype=torch.bool).tril(1),
            "your causal part excludes the diagonal: a position must see itself. Use tril() with diagonal=0.":
                pad & torch.ones(t, t, dtype=torch.bool).tril(-1),
        }
        for hint, bad in suspects.items():
            if torch.equal(seen, bad.expand(batch, HEADS, t, t)):
                raise Mistake(hint)
        expect(torch.equal(seen, expected), f"{what} differs from padding_mask & causal_mask at "
                                            f"{int((seen != expected).sum())} places (after broadcasting)")
    # a causal part built on the CPU would crash next to a model on the GPU: run it on another device once
    check_device_placement(fn, _tokens([4, 2], 4, 0, g), 0, what=f"your {name}(tokens, pad_id)",
                           argument="tokens")
    passed("check_decoder_mask", "(batch, 1, t, t) = padding AND causal, for several pad ids and lengths")
