"""Checkers for chapter 04 (positional encoding): the sinusoidal table or module, the learned encoding, and the
rotation that moves a sinusoidal encoding k positions along.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))
"""
from __future__ import annotations

import inspect
import math
from typing import Callable

import torch
from torch import Tensor, nn

from ..positional import LearnedPositionalEncoding
from ._harness import Mistake, call, close, diagnose, expect, output_of, passed

__all__ = ["check_positional_encoding", "check_learned_positional_encoding", "check_offset_rotation"]

SWAPPED = ("sin and cos look swapped: even columns 2i hold sin(pos / 10000^(2i/d_model)), odd columns 2i+1 hold "
           "the cos of the same angle")
HALF_EXPONENT = ("the exponent looks like i/d_model where the paper has 2i/d_model: with i the index of the "
                 "(sin, cos) pair, the wavelengths must run from 2*pi to 10000*2*pi over the d_model/2 pairs")
COLUMN_EXPONENT = ("the odd (cos) columns use a different frequency from their sin partner: column 2i+1 shares "
                   "the exponent 2i/d_model of column 2i (use 2*(j//2)/d_model for column j, not j/d_model)")
DOUBLE_EXPONENT = ("the exponent looks doubled (2j/d_model with j the column index, i.e. 4i/d_model): the "
                   "exponent for the pair (2i, 2i+1) is 2i/d_model")
MULTIPLIED = ("the angle looks like pos * 10000^(2i/d_model): divide by it instead (pos / 10000^(2i/d_model)), so "
              "frequencies shrink, not grow, along the dimensions")
STARTS_AT_ONE = "positions look counted from 1: the first position is pos = 0, whose encoding is (0, 1, 0, 1, ...)"
CONCATENATED = ("all sines come first and then all cosines: the paper interleaves them, sin in even columns 2i and "
                "cos in odd columns 2i+1")
BATCH_AXIS = ("positions look indexed along the batch axis (pe[:x.size(0)]): the input is batch-first, "
              "(batch, seq_len, d_model), so take the first x.size(1) positions and broadcast them over the batch")
SCALED_X = ("x looks multiplied by sqrt(d_model) before the encoding is added: that scaling belongs to the "
            "embedding layer (chapter 09); the positional encoding only adds PE")
ONLY_PE = "the output looks like the encoding alone: forward must return x + PE (the input plus its positions)"
ODD = ("with an odd d_model there is one more sin column (even index) than cos columns: fill table[:, 0::2] with "
       "sin(angle) and table[:, 1::2] with cos(angle[:, :d_model // 2])")


# the table and its classic wrong versions, one switch each ------------------------------------------------------
def _table(max_len: int, d_model: int, *, exponent: str = "2i", swap: bool = False, start: int = 0,
           layout: str = "interleave", multiply: bool = False) -> Tensor:
    """The (max_len, d_model) sinusoidal table in float64, optionally with one classic mistake."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    col = torch.arange(d_model)
    if layout == "interleave":
        pair, is_sin = col // 2, col % 2 == 0  # column j belongs to pair j // 2
    else:  # all sines, then all cosines
        half = (d_model + 1) // 2
        pair, is_sin = torch.where(col < half, col, col - half), col < half
    power = {"2i": 2 * pair, "i": pair, "j": col, "2j": 2 * col}[exponent].double() / d_model  # (d_model,)
    scale = 10000.0 ** power
    angle = pos * scale if multiply else pos / scale  # (max_len, d_model)
    if swap:
        is_sin = ~is_sin
    return torch.where(is_sin, torch.sin(angle), torch.cos(angle))


def _table_suspects(max_len: int, d_model: int) -> dict[str, Tensor]:
    return {SWAPPED: _table(max_len, d_model, swap=True),
            HALF_EXPONENT: _table(max_len, d_model, exponent="i"),
            COLUMN_EXPONENT: _table(max_len, d_model, exponent="j"),
            DOUBLE_EXPONENT: _table(max_len, d_model, exponent="2j"),
            MULTIPLIED: _table(max_len, d_model, multiply=True),
            STARTS_AT_ONE: _table(max_len, d_model, start=1),
            CONCATENATED: _table(max_len, d_model, layout="concat")}


def _is_module_class(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, nn.Module)


def _odd_hint(exc: Mistake, d_model: int) -> Mistake:
    return Mistake(f"{exc}\nHint (d_model={d_model} is odd): {ODD}") if d_model % 2 else exc


def _check_table_fn(fn: Callable[[int, int], Tensor]) -> int:
    cases = [(12, 8), (50, 16), (9, 6), (30, 64), (10, 7), (5, 1), (20, 33)]  # odd d_model last
    for max_len, d_model in cases:
        try:
            got = output_of(call(fn, max_len, d_model, what=f"your table function({max_len}, {d_model})"))
        except Mistake as exc:
            raise _odd_hint(exc, d_model) from None
        want = _table(max_len, d_model)
        expect(got.is_floating_point(), f"the table must be floating point, got dtype {got.dtype}")
        if got.shape != want.shape:
            hint = ODD if d_model % 2 else "one row per position, one column per feature"
            raise Mistake(f"for max_len={max_len}, d_model={d_model} the table has shape {tuple(got.shape)}, expected "
                          f"(max_len, d_model) = {tuple(want.shape)}. {hint}")
        diagnose(got.double(), want, _table_suspects(max_len, d_model),
                 f"table(max_len={max_len}, d_model={d_model}) differs from "
                 "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), "
                 "PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))" + (f". {ODD}" if d_model % 2 else ""), atol=1e-5)
    return len(cases)


def _module_suspects(x: Tensor, table: Tensor, max_len: int, d_model: int) -> dict[str, Tensor]:
    batch, seq_len, _ = x.shape
    x64 = x.double()
    s = {BATCH_AXIS: x64 + table[:batch][:, None, :] if batch <= max_len else torch.full((), math.inf),
         SCALED_X: x64 * math.sqrt(d_model) + table[:seq_len],
         ONLY_PE: table[:seq_len].expand(batch, seq_len, d_model)}
    for hint, wrong in _table_suspects(max_len, d_model).items():
        s[hint] = x64 + wrong[:seq_len]
    return s


def _check_module(cls: type[nn.Module]) -> int:
    gen = torch.Generator().manual_seed(7)
    # (batch, seq_len, d_model, max_len, dtype): batch != seq_len everywhere, so positions taken along the batch
    # axis show; odd d_model last.
    cases = [(3, 5, 8, 40, torch.float32), (2, 9, 16, 20, torch.float64), (4, 1, 6, 10, torch.float32),
             (1, 12, 32, 12, torch.float64), (5, 3, 7, 16, torch.float32)]
    seq_len = int(torch.randint(2, 20, (1,), generator=gen))  # one random setting, batch != seq_len
    cases.insert(-1, (seq_len + int(torch.randint(1, 4, (1,), generator=gen)), seq_len,
                      2 * int(torch.randint(1, 20, (1,), generator=gen)), seq_len + 5, torch.float64))
    for batch, seq_len, d_model, max_len, dtype in cases:
        try:
            module = call(cls, d_model, max_len, what=f"{cls.__name__}(d_model={d_model}, max_len={max_len})")
        except Mistake as exc:
            raise _odd_hint(exc, d_model) from None
        expect(isinstance(module, nn.Module), "your class must be an nn.Module")
        trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
        expect(trainable == 0, f"your sinusoidal encoding has {trainable} trainable parameters: the table is fixed, "
                               "store it with self.register_buffer('pe', table), not nn.Parameter")
        x = torch.randn(batch, seq_len, d_model, generator=gen, dtype=torch.float64).to(dtype)
        try:
            got = output_of(call(module, x.clone(), what=f"your forward on x of shape {tuple(x.shape)}"))
        except Mistake as exc:
            if "must match the size" in str(exc) or "size of tensor" in str(exc):
                raise Mistake(f"{exc}\nHint: {BATCH_AXIS}") from None
            raise _odd_hint(exc, d_model) from None
        table = _table(max_len, d_model)
        want = x.double() + table[:seq_len]  # (batch, seq_len, d_model) + (seq_len, d_model)
        setting = f"x of shape (batch={batch}, seq_len={seq_len}, d_model={d_model}), max_len={max_len}"
        if got.shape != want.shape:
            raise Mistake(f"{setting}: output has shape {tuple(got.shape)}, expected {tuple(want.shape)}, the shape "
                          "of x. " + (BATCH_AXIS if got.dim() == 3 and got.size(1) != seq_len else ""))
        expect(got.dtype == dtype, f"{setting}: output dtype is {got.dtype} but x is {dtype}: add the table as "
                                   "x.dtype (e.g. `self.pe[:n].to(x.dtype)`), or later layers receive the wrong dtype")
        diagnose(got.double(), want, _module_suspects(x, table, max_len, d_model),
                 f"{setting}: forward(x) differs from x + PE[:seq_len]" + (f". {ODD}" if d_model % 2 else ""),
                 atol=1e-5)
    return len(cases)


def check_positional_encoding(fn_or_cls: Callable[[int, int], Tensor] | type[nn.Module]) -> None:
    """Either a table function ``fn(max_len, d_model) -> (max_len, d_model)``, or a module class
    ``cls(d_model, max_len)`` whose ``forward(x)`` returns ``x + PE[:seq_len]`` for batch-first
    ``x (batch, seq_len, d_model)``. Compared with the paper's sinusoids, odd d_model included."""
    if _is_module_class(fn_or_cls):
        n = _check_module(fn_or_cls)
        passed("check_positional_encoding", f"{n} settings (batch != seq_len, float32 and float64, odd d_model): "
                                            "forward(x) = x + PE[:seq_len]")
    else:
        expect(callable(fn_or_cls), "pass a function fn(max_len, d_model) or an nn.Module class cls(d_model, max_len)")
        n = _check_table_fn(fn_or_cls)
        passed("check_positional_encoding", f"{n} tables (odd d_model included) match the paper's sinusoids")


def check_learned_positional_encoding(cls: type[nn.Module]) -> None:
    """``cls(d_model, max_len)`` with an ``embedding = nn.Embedding(max_len, d_model)`` (one trained vector per
    position) and ``forward(x) = x + embedding.weight[:seq_len]`` for batch-first ``x (batch, seq_len, d_model)``."""
    expect(_is_module_class(cls), "pass the class itself (an nn.Module subclass), not an instance")
    gen = torch.Generator().manual_seed(8)
    cases = [(3, 5, 8, 16, torch.float32), (2, 7, 12, 7, torch.float64), (6, 2, 4, 9, torch.float32)]
    with torch.random.fork_rng(devices=[]):
        for batch, seq_len, d_model, max_len, dtype in cases:
            module = call(cls, d_model, max_len, what=f"{cls.__name__}(d_model={d_model}, max_len={max_len})")
            emb = getattr(module, "embedding", None)
            expect(isinstance(emb, nn.Embedding) and tuple(emb.weight.shape) == (max_len, d_model),
                   f"your module needs an attribute `embedding = nn.Embedding(max_len, d_model)` (here "
                   f"nn.Embedding({max_len}, {d_model})), one vector per position, as in "
                   f"tfm_lesson.LearnedPositionalEncoding; found {type(emb).__name__ if emb is not None else 'none'}")
            n_params = sum(p.numel() for p in module.parameters() if p.requires_grad)
            expect(n_params == max_len * d_model,
                   f"expected max_len * d_model = {max_len * d_model} trainable parameters, found {n_params}")
            ref = LearnedPositionalEncoding(d_model, max_len)
            with torch.no_grad():
                ref.embedding.weight.normal_(generator=gen)  # larger than the default init, so mistakes show
            module.load_state_dict(ref.state_dict(), strict=False)
            module, ref = module.to(dtype), ref.to(dtype)
            x = torch.randn(batch, seq_len, d_model, generator=gen, dtype=torch.float64).to(dtype)
            try:
                got = output_of(call(module, x, what=f"your forward on x of shape {tuple(x.shape)}"))
            except Mistake as exc:
                if "must match the size" in str(exc) or "size of tensor" in str(exc):
                    raise Mistake(f"{exc}\nHint: {BATCH_AXIS}") from None
                raise
            want = ref(x)
            table = ref.embedding.weight.detach().double()
            setting = f"x of shape (batch={batch}, seq_len={seq_len}, d_model={d_model}), max_len={max_len}"
            expect(got.dtype == dtype, f"{setting}: output dtype is {got.dtype}, expected {dtype}")
            diagnose(got.double(), want.double(),
                     {BATCH_AXIS: (x.double() + table[:batch][:, None, :] if batch <= max_len
                                   else torch.full((), math.inf)),
                      SCALED_X: x.double() * math.sqrt(d_model) + table[:seq_len],
                      ONLY_PE: table[:seq_len].expand(batch, seq_len, d_model),
                      "the learned vectors look taken from the end of the table: position p uses row p "
                      "(embedding.weight[:seq_len])": x.double() + table[max_len - seq_len:]},
                     f"{setting}: forward(x) differs from x + embedding.weight[:seq_len]", atol=1e-5)
            expect(got.requires_grad, "the output does not depend on the learned table (no gradient flows back): "
                                      "add the nn.Embedding's weights, do not detach or copy them")
            got.sum().backward()
            grad = module.embedding.weight.grad
            expect(grad is not None, "no gradient reached embedding.weight: the learned vectors would never train")
            want_grad = torch.zeros(max_len, d_model, dtype=dtype)
            want_grad[:seq_len] = batch  # every sequence of the batch uses positions 0 .. seq_len-1 once
            expect(close(grad, want_grad), f"{setting}: the gradient of sum(output) with respect to embedding.weight "
                                           f"should be {batch} (the batch size) on rows 0..{seq_len - 1} and 0 on the "
                                           "other rows: each sequence uses each of its positions once")
    passed("check_learned_positional_encoding", f"{len(cases)} settings: outputs, parameter count and gradients "
                                                "match tfm_lesson.LearnedPositionalEncoding")


def _rotation(k: int, d_model: int, *, transpose: bool = False, exponent: str = "2i") -> Tensor:
    """M (d_model, d_model) with PE(pos + k) = M @ PE(pos) for column vectors PE(pos)."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    power = {"2i": 2 * i, "i": i}[exponent] / d_model
    theta = k / 10000.0 ** power  # (d_model/2,) the angle each (sin, cos) pair turns by
    c, s = torch.cos(theta), torch.sin(theta)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    e, o = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    # sin(a + t) = sin a cos t + cos a sin t;  cos(a + t) = cos a cos t - sin a sin t
    m[e, e], m[e, o], m[o, e], m[o, o] = c, s, -s, c
    return m.T.contiguous() if transpose else m


def check_offset_rotation(fn: Callable[[int, int], Tensor]) -> None:
    """``fn(k, d_model)`` -> ``M (d_model, d_model)`` such that ``PE(pos + k) = M @ PE(pos)`` for every position,
    with ``PE(pos)`` a column of the sinusoidal table (d_model even). M must not depend on pos."""
    cases = [(1, 4), (3, 8), (10, 16), (0, 6), (25, 32), (7, 2)]
    for k, d_model in cases:
        got = output_of(call(fn, k, d_model, what=f"your function({k}, {d_model})"))
        expect(got.shape == (d_model, d_model),
               f"for k={k}, d_model={d_model} expected a (d_model, d_model) = ({d_model}, {d_model}) matrix, got "
               f"shape {tuple(got.shape)}")
        expect(got.is_floating_point(), f"the matrix must be floating point, got dtype {got.dtype}")
        want = _rotation(k, d_model)
        table = _table(64 + k, d_model)  # (positions, d_model), rows are PE(pos)
        moved = table[:64] @ got.double().T  # row pos holds M @ PE(pos)
        if close(moved, table[k:k + 64], atol=1e-5):
            continue
        diagnose(got.double(), want,
                 {"your matrix turns each (sin, cos) pair by -k positions: it is the transpose of the right one. "
                  "sin(a + t) = sin a cos t + cos a sin t, so the sin row is (cos t, sin t) and the cos row "
                  "(-sin t, cos t)": _rotation(k, d_model, transpose=True),
                  "the angles use the exponent i/d_model; pair i turns by t = k / 10000^(2i/d_model)":
                      _rotation(k, d_model, exponent="i"),
                  "the matrix is the identity: it should move the encoding k positions along, not leave it":
                      torch.eye(d_model, dtype=torch.float64)},
                 f"for k={k}, d_model={d_model}, M @ PE(pos) differs from PE(pos + k). Each (sin, cos) pair (2i, 2i+1) "
                 f"is a 2x2 rotation block by the angle t = k / 10000^(2i/d_model); everything else is 0", atol=1e-5)
    passed("check_offset_rotation", f"{len(cases)} offsets: M @ PE(pos) = PE(pos + k) at every position, the same M "
                                    "for all of them")
