"""Chapter 18's classic slips, recomputed: the online softmax and tiled attention written right, or with one named
mistake, so that a checker can say which mistake a wrong answer made (:func:`name_the_slip`).

Each ``bug`` below is a slip learners make (an inverted rescale factor, a forgotten ``m = m_new``, a dropped last
partial block, tile-local causal positions, ...); ``ONLINE_SLIPS`` and ``TILED_SLIPS`` map it to the message that names it.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ._harness import Mistake
from ._rules import forbid_names

SIDE_DOORS = ("numpy", "threading", "Thread", "multiprocessing", "concurrent", "ThreadPoolExecutor",
              "ProcessPoolExecutor", "_disable_current_modes", "DisableTorchFunction", "_python_dispatch", "ctypes")
SIDE_DOORS_WHY = ("These exercises are written with PyTorch's tensor operations, in the thread that calls your function: "
                  "the check watches those operations, so NumPy, threads or processes, and switching PyTorch's modes "
                  "off are not used here.")


def forbid_side_doors(fn, what: str, more: tuple[str, ...] = ()) -> None:
    """Chapter 18's answers may not leave PyTorch's operations in the calling thread, where the check watches them
    (a hostile class passed naive answers run in a thread, in NumPy, or with PyTorch's modes switched off); read from
    the code, so a kernel cannot answer for it."""
    forbid_names(fn, SIDE_DOORS + more, what, SIDE_DOORS_WHY)

__all__ = ["ONLINE_SLIPS", "TILED_SLIPS", "online", "tiled", "causal_rule", "reference_attention", "reference_softmax",
           "name_the_slip", "nan_symptom", "same_numbers", "NAN_ROW", "NAN_QUERY"]

NAN_ROW = ("a row that sees nothing (all -inf) gives NaN: exp(-inf - (-inf)) is NaN. Subtract 0 instead of a -inf "
           "maximum (torch.where(m == -inf, 0, m)), and give such a row 0: the course's rule for a query with no key")
NAN_QUERY = ("a query that may see no key gives NaN: its maximum stays -inf and exp(-inf - (-inf)) is NaN, and its sum "
             "l is 0. Subtract 0 where m is -inf, and set the output of a query with l == 0 to 0 (the course's rule)")
_GUARD_IN_LOOP = ("while every key (column) of a block seen so far is -inf, m_new is -inf and exp(x - m_new) = "
                  "exp(-inf - (-inf)) is NaN, which poisons the sum for good; replace a -inf maximum by 0 INSIDE the "
                  "loop, at every block (shift = torch.where(m_new == -inf, 0, m_new)), not only in the final pass")
_INVERTED = ("the rescale factor is upside down: the old sum was measured against the old maximum m, so moving it to "
             "the new maximum m_new multiplies it by exp(m - m_new) (at most 1), not exp(m_new - m)")
_NO_UPDATE = ("the running maximum never moves: after each block set m = m_new, or every later block is rescaled "
              "against the first maximum (-inf) again")
_DROP_LAST = ("the last, shorter block is dropped: when the length is not a multiple of block_size the loop must "
              "still visit the remainder, range(0, length, block_size) with slices that stop at the end")

ONLINE_SLIPS = {
    "no_rescale": ("the running sum is not rescaled when the maximum grows: a block with a larger maximum m_new makes "
                   "the old sum (measured against the old m) too large; multiply it by exp(m - m_new) before adding "
                   "the block's exp(x - m_new)"),
    "per_block": ("each block is normalised by its own sum: the softmax divides by the sum over the WHOLE row, known "
                  "only after the last block; keep the unnormalised exp(x - m) sums and divide once, at the end"),
    "guard_final_only": ("a row whose first block is all -inf (and later ones are not) came out NaN or zero: "
                         + _GUARD_IN_LOOP),
    "inverted": _INVERTED,
    "no_update": _NO_UPDATE,
    "drop_last": _DROP_LAST,
}

TILED_SLIPS = {
    "flipped_offset": ("with fewer queries than keys your causal offset has the wrong sign, so the queries see no key "
                       "at all and come out 0: the queries are the sequence's LAST positions, AFTER the earlier keys, "
                       "so query i sits at position i + (k_len - q_len), not i - (k_len - q_len)"),
    "top_left": ("with fewer queries than keys your causal mask lines up at the top-left: the queries are the "
                 "sequence's LAST positions (one decoding step after a cache of keys), so query i sits at position "
                 "i + k_len - q_len and sees every key up to there"),
    "no_rescale": ("the running sum and the output accumulator are not rescaled when the maximum grows: multiply both "
                   "l and acc by alpha = exp(m - m_new) before adding the new tile's p.sum(-1) and p @ v"),
    "no_rescale_acc": ("the running sum is rescaled but the output accumulator is not: acc was summed against the old "
                       "maximum too, so it needs the same factor, acc = alpha * acc + p @ v with "
                       "alpha = exp(m - m_new)"),
    "no_rescale_sum": ("the output accumulator is rescaled but the running sum is not: l = alpha * l + p.sum(-1), "
                       "with the same alpha = exp(m - m_new) as acc"),
    "per_block": ("each tile's probabilities are normalised by that tile's own sum (softmax per tile): the weights "
                  "of a query sum to 1 over ALL its keys, so divide the accumulator by the running sum l of every "
                  "tile seen, once after the last key tile"),
    "causal_local": ("the causal mask uses the row and column inside the tile: query q0 + r may see key k0 + c when "
                     "k0 + c <= q0 + r, i.e. compare the positions in the whole sequence (torch.arange(q0, q1) "
                     "against torch.arange(k0, k1)), not torch.ones(block_q, block_k).tril()"),
    "causal_local_skip": ("the tiles above the diagonal are skipped correctly, but the causal mask in the tiles you "
                          "keep compares the row and column inside the tile: compare positions in the whole "
                          "sequence, torch.arange(k0, k1) <= torch.arange(q0, q1)[:, None]"),
    "strict": ("the causal mask hides the diagonal: query i may see key j when j <= i (itself included), not j < i; "
               "the first query then sees nothing at all"),
    "skip_diagonal": ("the causal skip drops the diagonal tile: a key tile may be skipped only when its FIRST key comes "
                      "after the tile's LAST query (k0 > q1 - 1); the tile with k0 == q0 holds the diagonal and must "
                      "be computed"),
    "ignore_mask_when_causal": ("with causal=True your function ignores `mask`: the two combine, a key is visible "
                                "when the causal rule AND the mask allow it (apply both, one after the other)"),
    "ignore_mask": ("your function ignores `mask`: masked keys still get weight. Fill their scores with -inf in every "
                    "tile, s.masked_fill(~mask[..., q0:q1, k0:k1], float('-inf'))"),
    "guard_final_only": ("a query whose first key tile is all masked (and later ones are not) came out NaN or zero: "
                         + _GUARD_IN_LOOP),
    "inverted": _INVERTED,
    "no_update": _NO_UPDATE,
    "drop_last": _DROP_LAST,
    "no_scale": ("the scores are not divided by sqrt(d_k): S = Q K^T / sqrt(d_k) in every tile, as in chapter 01"),
}


def _safe(m: Tensor) -> Tensor:
    return torch.where(torch.isinf(m) & (m < 0), 0.0, m)


def reference_softmax(x: Tensor) -> Tensor:
    """softmax over the last axis, 0 for a row that is all -inf."""
    out = x.softmax(dim=-1)
    return torch.where(torch.isinf(x).all(dim=-1, keepdim=True) & (x < 0).all(dim=-1, keepdim=True), 0.0, out)


def _rescale(m: Tensor, m_new: Tensor, bug: str | None) -> Tensor:
    if bug == "inverted":
        return torch.exp(_safe(m_new) - m)
    if bug == "guard_final_only":
        return torch.exp(m - m_new)
    return torch.exp(m - _safe(m_new))


def _blocks(length: int, block: int, bug: str | None) -> range:
    return range(0, length - block + 1 if bug == "drop_last" else length, block)


def online(x: Tensor, block: int, bug: str | None = None) -> Tensor:
    """The online softmax over the last axis of ``x``, or one of its classic mistakes (``bug``)."""
    if bug == "per_block":
        parts = [torch.nan_to_num(x[..., s:s + block].softmax(dim=-1)) for s in range(0, x.size(-1), block)]
        return torch.cat(parts, dim=-1)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    d = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for s in _blocks(x.size(-1), block, bug):
        blk = x[..., s:s + block]
        m_new = torch.maximum(m, blk.amax(dim=-1))
        shift = m_new if bug == "guard_final_only" else _safe(m_new)
        scale = torch.ones_like(d) if bug == "no_rescale" else _rescale(m, m_new, bug)
        d = d * scale + torch.exp(blk - shift.unsqueeze(-1)).sum(dim=-1)
        m = m if bug == "no_update" else m_new
    out = torch.exp(x - _safe(m).unsqueeze(-1)) / d.unsqueeze(-1)
    return torch.where((d > 0).unsqueeze(-1), out, 0.0)


def _allowed(q0: int, q1: int, k0: int, k1: int, causal: bool, mask: Tensor | None, bug: str | None,
             offset: int = 0) -> Tensor:
    """Which keys of the tile each query may see; ``offset`` = k_len - q_len: query i sits at position i + offset."""
    allowed = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool)
    if causal and bug in ("causal_local", "causal_local_skip"):
        allowed = allowed.tril()
    elif causal:
        shift = 0 if bug == "top_left" else -offset if bug == "flipped_offset" else offset
        rows, cols = torch.arange(q0, q1).unsqueeze(-1) + shift, torch.arange(k0, k1)
        allowed = cols < rows if bug == "strict" else cols <= rows
    if mask is not None and bug != "ignore_mask" and not (causal and bug == "ignore_mask_when_causal"):
        allowed = allowed & mask[..., q0:q1, k0:k1]
    return allowed


def _skipped(q0: int, q1: int, k0: int, causal: bool, bug: str | None) -> bool:
    if not causal:
        return False
    if bug == "skip_diagonal":
        return k0 >= q0  # skips from the diagonal tile on
    return bug == "causal_local_skip" and k0 > q1 - 1


def tiled(q: Tensor, k: Tensor, v: Tensor, block: int, causal: bool, mask: Tensor | None,
          bug: str | None = None) -> Tensor:
    """Tiled attention over ``(batch, heads, len, d)`` tensors, or one of its classic mistakes (``bug``)."""
    b, h, q_len, d_k = q.shape
    scale = 1.0 if bug == "no_scale" else math.sqrt(d_k)
    out = q.new_zeros(b, h, q_len, v.size(-1))
    for q0 in range(0, q_len, block):
        q1 = min(q0 + block, q_len)
        m = q.new_full((b, h, q1 - q0), float("-inf"))
        l = q.new_zeros(b, h, q1 - q0)
        acc = q.new_zeros(b, h, q1 - q0, v.size(-1))
        for k0 in _blocks(k.size(2), block, bug):
            k1 = min(k0 + block, k.size(2))
            if _skipped(q0, q1, k0, causal, bug):
                continue
            s = q[:, :, q0:q1] @ k[:, :, k0:k1].transpose(-2, -1) / scale  # (batch, heads, block_q, block_k)
            s = s.masked_fill(~_allowed(q0, q1, k0, k1, causal, mask, bug, k.size(2) - q_len), float("-inf"))
            if bug == "per_block":
                acc = acc + torch.nan_to_num(s.softmax(dim=-1)) @ v[:, :, k0:k1]
                continue
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = m_new if bug == "guard_final_only" else _safe(m_new)
            p = torch.exp(s - shift.unsqueeze(-1))
            alpha = _rescale(m, m_new, bug)
            l = (l if bug in ("no_rescale", "no_rescale_sum") else alpha * l) + p.sum(dim=-1)
            acc = (acc if bug in ("no_rescale", "no_rescale_acc") else alpha.unsqueeze(-1) * acc) + p @ v[:, :, k0:k1]
            m = m if bug == "no_update" else m_new
        if bug == "per_block":
            out[:, :, q0:q1] = acc
        else:
            seen = l > 0
            out[:, :, q0:q1] = torch.where(seen.unsqueeze(-1), acc / torch.where(seen, l, 1.0).unsqueeze(-1), 0.0)
    return out


def causal_rule(q_len: int, k_len: int) -> Tensor:
    """``(q_len, k_len)``: True where a query may see a key under ``causal=True``. The queries are the sequence's last
    ``q_len`` positions (one decoding step against a cache sees every key), as the package's ``flash_attention``."""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)


def reference_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V with the causal rule and the mask; 0 for a query that sees no key."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, q_len, k_len)
    allowed = causal_rule(q.size(2), k.size(2)) if causal else torch.ones(q.size(2), k.size(2), dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    has_key = allowed.any(dim=-1, keepdim=True)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return torch.where(has_key, torch.nan_to_num(weights), 0.0) @ v


def same_numbers(got: Tensor, buggy: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape, NaN in the same places, and the same numbers elsewhere (compared in float64)."""
    if got.shape != buggy.shape:
        return False
    got, buggy = got.detach().cpu().double(), buggy.detach().cpu().double()
    if not torch.equal(torch.isnan(got), torch.isnan(buggy)):
        return False
    keep = ~torch.isnan(got)
    return bool(torch.allclose(got[keep], buggy[keep], atol=atol, rtol=rtol))


def nan_symptom(got: Tensor, hidden: Tensor, first_hidden: Tensor, nothing: str, later: str) -> None:
    """Name NaN rows: ``hidden`` marks rows that see nothing at all (message ``nothing``), ``first_hidden`` rows whose
    first block is all hidden while later ones are not (message ``later``)."""
    nan_rows = torch.isnan(got).any(dim=-1)
    if bool((nan_rows & hidden).any()):
        raise Mistake(nothing)
    if bool((nan_rows & first_hidden & ~hidden).any()):
        raise Mistake(later)


def name_the_slip(got: Tensor, slips: dict[str, str], recompute, fallback: str) -> None:
    """Raise the message of the first slip whose recomputed output (``recompute(bug)``) ``got`` matches, else
    ``fallback``."""
    for bug, hint in slips.items():
        with torch.no_grad():
            buggy = recompute(bug)
        if same_numbers(got, buggy):
            raise Mistake(hint)
    raise Mistake(fallback)
