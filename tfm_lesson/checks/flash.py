"""Checkers for chapter 18 (attention that fits): the online softmax, tiled attention, and a matrix product's
arithmetic intensity.

- ``check_online_softmax(fn)``: ``fn(x, block_size) -> softmax(x, dim=-1)``, reading ``x`` one block of columns at a
  time; a row that is all ``-inf`` gives 0.
- ``check_tiled_attention(fn)``: ``fn(query, key, value, block_size, causal=False, mask=None) -> (batch, heads, q_len,
  d_v)``, tile by tile with a running maximum, a running sum and an output accumulator.
- ``check_arithmetic_intensity(fn)``: ``fn(m, k, n, bytes_per_number) -> FLOPs per byte`` of an ``(m, k) @ (k, n)``
  product that reads both inputs and writes the output once.

Each classic mistake is recomputed (:mod:`._flash_slips`) and named when the learner's output matches it. The
package's own ``flash_attention`` / ``online_softmax`` (and PyTorch's SDPA) are refused, under any name: the
exercises say "write it yourself". The online softmax may not call PyTorch's softmax, log_softmax or logsumexp
either, and must read its rows in blocks: watched under a ``TorchDispatchMode``, no max or sum it computes may
span a whole row (:func:`_widest_reduction`), nor, read from its code, may any reduction apply to the whole row
(:mod:`._rules_rows`, what the grader decides by). The tiled exercise must stay below the full score matrix's memory,
measured with :func:`tfm_lesson.look.memory.peak_tensor_bytes`; while grading, the grader also enforces it from
outside the kernel (:mod:`._probes`), since the kernel's measurement is the learner's code's to forge.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from ..look.memory import peak_tensor_bytes
from ._flash_slips import (NAN_QUERY, NAN_ROW, ONLINE_SLIPS, TILED_SLIPS, causal_rule, forbid_side_doors,
                           name_the_slip, nan_symptom, online, reference_attention, reference_softmax, tiled)
from ._harness import Mistake, call, close, expect, learner_side, output_of, passed
from ._rules import forbid_names, forbid_objects
from ._rules_rows import whole_row_reduction

__all__ = ["check_online_softmax", "check_tiled_attention", "check_arithmetic_intensity"]

FORBIDDEN_WHY = ("The exercise asks you to write the tiles yourself; the package's flash attention, online softmax, "
                 "attention_lse and PyTorch's scaled_dot_product_attention or logsumexp would do the work.")


SOFTMAX_WHY = ("The exercise asks you to compute the softmax yourself, block by block, with a running maximum and a "
               "running sum; PyTorch's softmax, log_softmax or logsumexp would do the work, over the whole row at once.")
BLOCKS_WHY = ("the exercise reads each row in blocks of block_size columns, so every max and sum covers one block, and "
              "the running m and d carry what the earlier blocks saw (only the final pass, exp(x - m) / d, touches the "
              "whole row)")
NOT_BLOCKED = ("NOT BLOCKED: on rows of {length} with block_size={block} your function computed a max or a sum over "
               "{widest} numbers at once, a whole row (or more): " + BLOCKS_WHY)
NOT_BLOCKED_CODE = ("NOT BLOCKED: your function computes `{code}` in {place}, a max or a sum over whole rows of x (x "
                    "itself, or a tensor computed from all of it, not from one block of its columns): " + BLOCKS_WHY)


def _forbid_package(fn: Callable, what: str) -> None:
    """The package's (or PyTorch's) finished implementation is refused, under any name."""
    from .. import flash as package

    objects = {name: getattr(package, name) for name in ("flash_attention", "online_softmax", "attention_lse",
                                                         "FlashAttention", "_forward", "_backward")}
    forbid_objects(fn, objects, what, FORBIDDEN_WHY)
    forbid_objects(fn, {"F.scaled_dot_product_attention": F.scaled_dot_product_attention}, what, FORBIDDEN_WHY,
                   owner="PyTorch's")
    forbid_names(fn, ("flash_attention", "online_softmax", "attention_lse", "FlashAttention",
                      "scaled_dot_product_attention", "logsumexp"), what, FORBIDDEN_WHY)


def _forbid_softmax(fn: Callable) -> None:
    """PyTorch's softmax, log_softmax and logsumexp are refused in the online softmax, by name or renamed."""
    forbid_objects(fn, {"torch.softmax": torch.softmax, "F.softmax": F.softmax, "torch.log_softmax":
                         torch.log_softmax, "F.log_softmax": F.log_softmax, "torch.logsumexp": torch.logsumexp},
                    "online softmax", SOFTMAX_WHY, owner="PyTorch's")
    forbid_names(fn, ("softmax", "log_softmax", "logsumexp", "Softmax", "LogSoftmax"), "online softmax", SOFTMAX_WHY)


_REDUCTIONS = {"max", "amax", "sum", "logsumexp", "_softmax", "_log_softmax", "mean", "prod", "aminmax", "nansum"}


class _Reductions(TorchDispatchMode):
    """The most numbers any one reduction (a max, a sum, ...) covered along the axes it reduced."""

    def __init__(self) -> None:
        super().__init__()
        self.widest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ in _REDUCTIONS and args and isinstance(args[0], Tensor):
            dims = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if not isinstance(dims, Tensor):  # torch.max(a, b) is elementwise, not a reduction
                shape = args[0].shape
                dims = [dims] if isinstance(dims, int) else list(dims) if isinstance(dims, (list, tuple)) else []
                axes = range(len(shape)) if not dims else {d % max(len(shape), 1) for d in dims}
                self.widest = max(self.widest, math.prod(shape[d] for d in axes) if shape else 1)
        return func(*args, **kwargs)


def _widest_reduction(fn: Callable, *args) -> int:
    """How many numbers the widest reduction of ``fn(*args)`` covered (run where the learner's code lives)."""
    watcher = _Reductions()
    with torch.no_grad(), watcher:
        fn(*args)
    return watcher.widest


def _check_blocked(fn: Callable, gen: torch.Generator) -> None:
    """Right numbers from a whole-row max and sum are not the exercise: no reduction may span a row. Watched as the
    function runs (where it runs: the submission's kernel, while grading), then read from its code (by the grader,
    from the code it extracted: :mod:`._rules_rows`), so a kernel that answers for the watch does not decide."""
    x, block = torch.randn(2, 3, 20, generator=gen), 4
    widest = call(learner_side(_widest_reduction), fn, x, block,
                  what=f"your function(x of shape {tuple(x.shape)}, block_size={block})")
    expect(widest < x.size(-1), NOT_BLOCKED.format(length=x.size(-1), block=block, widest=widest))
    found = whole_row_reduction(fn)
    if found is not None:
        raise Mistake(NOT_BLOCKED_CODE.format(code=found[0], place=found[1]))


def _softmax_cases(gen: torch.Generator) -> list[tuple[Tensor, int]]:
    rising = torch.arange(24.0).repeat(3, 1) * 2 + torch.randn(3, 24, generator=gen)  # the max grows each block
    masked = torch.randn(4, 19, generator=gen) * 3
    masked[0, 5:] = float("-inf")
    masked[1, ::2] = float("-inf")
    late = torch.tensor([[float("-inf")] * 4 + [1.0, 2.0, 3.0, 0.5], [0.3, -1.0, 2.0, 0.1, 1.0, 4.0, -2.0, 0.0]])
    return [(rising, 4), (rising, 5), (torch.randn(2, 3, 17, generator=gen) * 4, 6), (masked, 4), (late, 4),
            (torch.randn(5, 8, generator=gen), 8), (torch.randn(2, 10, generator=gen), 1),
            (torch.randn(3, 13, generator=gen, dtype=torch.float64) * 3, 4)]


def check_online_softmax(fn: Callable) -> None:
    """``fn(x, block_size)`` must equal ``x.softmax(-1)`` (0 for a row of -inf) for block sizes that do and do not
    divide the row, with the maximum growing from block to block, and a row whose first block is all -inf."""
    _forbid_package(fn, "online softmax")
    _forbid_softmax(fn)
    forbid_side_doors(fn, "online softmax")
    gen = torch.Generator().manual_seed(18)
    cases = _softmax_cases(gen)
    for x, block in cases:
        what = f"your function(x of shape {tuple(x.shape)}, {x.dtype}, block_size={block})"
        got = output_of(call(fn, x, block, what=what))
        want = reference_softmax(x)
        if close(got, want):
            continue
        expect(got.shape == want.shape, f"{what} returned shape {tuple(got.shape)}, expected {tuple(want.shape)}: "
                                        "one probability per score")
        neg_inf = torch.isinf(x) & (x < 0)
        nan_symptom(got, neg_inf.all(dim=-1), neg_inf[..., :block].all(dim=-1), NAN_ROW,
                    ONLINE_SLIPS["guard_final_only"])
        err = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()
        name_the_slip(got, ONLINE_SLIPS, lambda bug: online(x, block, bug),
                      f"{what} differs from softmax(x, dim=-1) (largest difference {err:.3g})")
    empty = torch.randn(3, 10, generator=gen)
    empty[1] = float("-inf")
    got = output_of(call(fn, empty, 4, what="your function(x with a row of -inf, block_size=4)"))
    expect(not torch.isnan(got).any(), NAN_ROW)
    expect(close(got, reference_softmax(empty)), "a row that is all -inf must give 0 (nothing to attend to), the "
                                                 "other rows their softmax")
    _check_blocked(fn, gen)
    passed("check_online_softmax", f"{len(cases) + 1} cases (block sizes that divide the row and that do not, a "
                                   "maximum that grows, a first block of -inf, a row of -inf, float32 and float64) "
                                   "equal softmax, and no max or sum spans a whole row")


def _qkv(gen: torch.Generator, q_len: int, k_len: int, d_k: int = 8, rising: bool = False):
    q = torch.randn(2, 2, q_len, d_k, generator=gen)
    k = torch.randn(2, 2, k_len, d_k, generator=gen)
    if rising:  # later keys score higher: the running maximum grows at every tile
        k = k + 0.4 * torch.arange(k_len).view(1, 1, k_len, 1) * q.mean(dim=2, keepdim=True).sign()
    return q, k, torch.randn(2, 2, k_len, d_k, generator=gen)


def _tiled_cases(gen: torch.Generator) -> list:
    """(q, k, v, block, causal, mask): tiles that do and do not divide, causal, masks that hide whole early tiles."""
    left = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    left[0, ..., :5] = False  # left padding: the first key tile (block 4) is all masked, later ones are not
    empty = torch.ones(2, 2, 10, 10, dtype=torch.bool)
    empty[0, 1, 3] = False  # this query sees no key
    empty[1, :, :, 6:] = False  # right padding
    pad = torch.ones(2, 1, 1, 13, dtype=torch.bool)
    pad[1, ..., 9:] = False
    return [(*_qkv(gen, 12, 12, rising=True), 4, False, None), (*_qkv(gen, 13, 13), 5, False, None),
            (*_qkv(gen, 9, 14), 4, False, None), (*_qkv(gen, 12, 12), 4, True, None),
            (*_qkv(gen, 13, 13, rising=True), 5, True, None), (*_qkv(gen, 16, 16), 16, True, None),
            (*_qkv(gen, 7, 11), 4, False, left.expand(2, 2, 7, 11)), (*_qkv(gen, 10, 10), 4, False, empty),
            (*_qkv(gen, 13, 13), 4, True, pad.expand(2, 2, 13, 13)),
            (*_qkv(gen, 5, 12), 4, True, None)]  # fewer queries than keys: the queries are the last positions


def _visible(q: Tensor, k: Tensor, causal: bool, mask: Tensor | None) -> Tensor:
    allowed = causal_rule(q.size(2), k.size(2)) if causal else torch.ones(q.size(2), k.size(2), dtype=torch.bool)
    return (allowed & mask if mask is not None else allowed).expand(q.size(0), q.size(1), q.size(2), k.size(2))


def check_tiled_attention(fn: Callable) -> None:
    """``fn(query, key, value, block_size, causal=False, mask=None)`` must equal attention (the course's rule: a query
    with no visible key gets 0) without causal mask and with it, for block sizes that do and do not divide the
    length, with masks that hide a whole first tile or every key of a query, and ``causal`` with a ``mask``; its
    peak memory must stay below the full score matrix's."""
    _forbid_package(fn, "tiled attention")
    forbid_side_doors(fn, "tiled attention")
    gen = torch.Generator().manual_seed(18)
    cases = _tiled_cases(gen)
    for q, k, v, block, causal, mask in cases:
        what = (f"your function(query {tuple(q.shape)}, key {tuple(k.shape)}, value, block_size={block}, "
                f"causal={causal}, mask={'None' if mask is None else 'a boolean mask'})")
        got = output_of(call(fn, q, k, v, block, causal, mask, what=what))
        want = reference_attention(q, k, v, causal, mask)
        if close(got, want):
            continue
        expect(got.shape == want.shape, f"{what} returned shape {tuple(got.shape)}, expected (batch, heads, q_len, "
                                        f"d_v) = {tuple(want.shape)}")
        visible = _visible(q, k, causal, mask)  # (batch, heads, q_len, k_len)
        nan_symptom(got, ~visible.any(dim=-1), ~visible[..., :block].any(dim=-1), NAN_QUERY,
                    TILED_SLIPS["guard_final_only"])
        err = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()
        fallback = (NAN_QUERY if torch.isnan(got).any() else
                    f"{what} differs from softmax(Q K^T / sqrt(d_k)) V (largest difference {err:.3g})")
        name_the_slip(got, TILED_SLIPS, lambda bug: tiled(q, k, v, block, causal, mask, bug), fallback)
    _check_tiled_memory(fn)
    passed("check_tiled_attention", f"{len(cases)} cases (tiles that divide the length and that do not, causal, "
                                    "fewer queries than keys, a growing maximum, a masked first tile, a query that sees no key, causal with a "
                                    "mask) equal attention, and the peak memory stays below the score matrix")


def _check_tiled_memory(fn: Callable) -> None:
    """Measured with the package's tracer: the answer's tensors may never hold a full (q_len, k_len) matrix."""
    length, block = 256, 32
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 1, length, 16, generator=gen) for _ in range(3))
    square = length * length * q.element_size()  # one (q_len, k_len) matrix of scores
    with torch.no_grad():
        peak = call(learner_side(peak_tensor_bytes), fn, q, k, v, block, False, None,
                    what=f"your function(query (1, 1, {length}, 16), ..., block_size={block})")
    expect(peak < square, f"NOT TILED: at length {length} with block_size={block} your function's tensors held "
                          f"{peak / 1024:.0f} KiB at their peak, as much as the full (q_len, k_len) score matrix "
                          f"({square / 1024:.0f} KiB) or more: it builds the whole matrix (Q K^T at once, or a full "
                          "mask or weight matrix). Compute one (block, block) tile of scores at a time; only the "
                          "running maximum, sum and accumulator live across tiles")


def check_arithmetic_intensity(fn: Callable) -> None:
    """``fn(m, k, n, bytes_per_number)``: FLOPs per byte of ``(m, k) @ (k, n)``, ``2 m k n`` FLOPs over
    ``(m k + k n + m n) x bytes_per_number`` bytes moved (each input read once, the output written once)."""
    cases = [(1, 4096, 4096, 2), (4096, 4096, 4096, 2), (512, 64, 512, 4), (1, 768, 768, 4), (128, 256, 32, 8)]
    for m, k, n, size in cases:
        flops, moved = 2 * m * k * n, (m * k + k * n + m * n) * size
        want = flops / moved
        what = f"your function(m={m}, k={k}, n={n}, bytes_per_number={size})"
        got = call(fn, m, k, n, size, what=what)
        expect(got is not None, "your code returned None: not written yet, or did you forget a `return`?")
        if isinstance(got, Tensor) and got.numel() == 1:
            got = got.item()
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"{what} returned {type(got).__name__}, expected a number (FLOPs per byte)")
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        suspects = [
            (flops / 2 / moved, "FLOPs counted as m*k*n: each of the m*k*n multiply-adds is two floating-point "
                                "operations, a multiplication and an addition, so 2*m*k*n"),
            (flops / ((m * k + k * n) * size), "the output is not counted: the (m, n) result is written to memory, "
                                               "m*n more numbers moved"),
            (flops / (moved * 8), "bits, not bytes: bytes_per_number is already in bytes (4 for float32)"),
            (flops / (m * k + k * n + m * n), "bytes_per_number is missing: the traffic is numbers moved x bytes "
                                              "per number"),
            (moved / flops, "upside down: intensity is FLOPs per byte, 2*m*k*n / bytes moved"),
        ]
        for value, hint in suspects:
            if math.isclose(got, value, rel_tol=1e-6):
                raise Mistake(hint)
        raise Mistake(f"{what} returned {got:.4g}, expected 2*m*k*n / ((m*k + k*n + m*n) * bytes) = {want:.4g}")
    passed("check_arithmetic_intensity", f"{len(cases)} products, a matrix-vector one among them, match "
                                         "2 m k n / ((m k + k n + m n) x bytes)")


# the reference pieces, for a chapter whose later cells need working pieces ----------------------------------------
def _ref_online_softmax(x: Tensor, block_size: int) -> Tensor:
    from ..flash import online_softmax

    return online_softmax(x, block_size)


def _ref_tiled_attention(query: Tensor, key: Tensor, value: Tensor, block_size: int, causal: bool = False,
                         mask: Tensor | None = None) -> Tensor:
    from ..flash import flash_attention

    return flash_attention(query, key, value, mask, block_size=block_size, causal=causal)


def _ref_intensity(m: int, k: int, n: int, bytes_per_number: int) -> float:
    return 2 * m * k * n / ((m * k + k * n + m * n) * bytes_per_number)


PIECES = {"online_softmax": (check_online_softmax, _ref_online_softmax),
          "tiled_attention": (check_tiled_attention, _ref_tiled_attention),
          "intensity": (check_arithmetic_intensity, _ref_intensity)}
