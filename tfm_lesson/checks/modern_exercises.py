"""Checkers for chapter 16's exercises (split from :mod:`.modern`): RMSNorm in half precision, and SwiGLU's hidden
size as Llama sizes it.

- ``check_rms_norm_half(fn)``: ``fn(x, weight, eps)`` -> RMSNorm with its statistics in float32, cast back;
- ``check_llama_hidden(fn)``: ``fn(d_model, multiple_of, ffn_dim_multiplier=None)`` -> the published hidden sizes.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..modern.rmsnorm import rms_norm
from ._harness import Mistake, call, close, expect, output_of, passed
from ._rules import forbid_names
from .modern import _NO_KEEPDIM, _explain_rms_error, _rms_suspects

__all__ = ["check_rms_norm_half", "check_llama_hidden"]

# RMSNorm in half precision (exercise 1) --------------------------------------------------------------------------------
_HALF_ATOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5, torch.float64: 1e-9}
_HALF_RTOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-4, torch.float64: 1e-9}


def _half_safe_reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Statistics and the division in float32, the result cast back to x's dtype, then the gain (LlamaRMSNorm)."""
    x32 = x.float()
    normalised = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)  # (..., d_model), float32
    return weight * normalised.to(x.dtype)


def _half_close(got: Tensor, expected: Tensor, dtype: torch.dtype) -> bool:
    return got.shape == expected.shape and bool(torch.allclose(
        got.detach().cpu().double(), expected.detach().cpu().double(), atol=_HALF_ATOL[dtype], rtol=_HALF_RTOL[dtype]))


def _half_suspects(x: Tensor, weight: Tensor, eps: float) -> dict[str, Tensor]:
    """The classic RMSNorm mistakes, computed in float64 (so that only the mistake, not the rounding, shows)."""
    suspects = {hint: value for hint, value in _rms_suspects(x.double(), weight.double(), eps).items()
                if "built with" not in hint and hint != _NO_KEEPDIM}
    for fixed in (1e-5, 1e-6, 1e-8):
        if not math.isclose(fixed, eps):
            x64 = x.double()
            suspects[f"your output uses eps = {fixed:g}, not the eps={eps:g} passed to it: use the argument `eps`."] = \
                x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + fixed) * weight.double()
    return suspects


def _rms_half_written_yourself(fn: Callable) -> None:
    forbid_names(fn, ("rms_norm", "RMSNorm", "LlamaRMSNorm"), "rms_norm_half_safe",
                 "That is a ready-made RMSNorm (and torch's own float16 RMSNorm overflows in some versions); the "
                 "exercise asks you to write the float32 statistics yourself.")


def check_rms_norm_half(fn: Callable, seed: int = 0) -> None:
    """``fn(x, weight, eps)``: RMSNorm safe in half precision. ``x (..., d_model)`` in float16, bfloat16 or float32,
    ``weight (d_model,)`` in the same dtype; the mean of squares and the division computed in float32, the result
    cast back to ``x.dtype`` (then multiplied by the gain, as ``transformers``' ``LlamaRMSNorm`` does)."""
    _rms_half_written_yourself(fn)
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen)

    cases = [
        ("float32 activations with a non-zero mean", randn(2, 5, 8) * 2 + 1, torch.float32, 1e-5),
        ("small float32 activations with eps=1e-2", randn(2, 4, 6) * 1e-2 + 1e-2, torch.float32, 1e-2),
        ("ordinary float16 activations", randn(2, 5, 8) * 2 + 0.5, torch.float16, 1e-5),
        ("LARGE float16 activations (about 1,000: their squares, about 1e6, exceed float16's largest number, 65,504)",
         randn(2, 5, 8) * 1000 + 300, torch.float16, 1e-5),
        ("bfloat16 activations", randn(2, 5, 8) * 3 - 1, torch.bfloat16, 1e-5),
        ("a 4-D float16 input (batch, heads, seq_len, d_k)", randn(2, 3, 4, 8) * 400, torch.float16, 1e-6),
    ]
    for what, x, dtype, eps in cases:
        x = x.to(dtype)
        weight = (torch.rand(x.size(-1), generator=gen) + 0.5).to(dtype)
        got = output_of(call(fn, x.clone(), weight.clone(), eps, what=f"rms_norm_half_safe on {what}",
                             explain=_explain_rms_error))
        expect(got.shape == x.shape, f"on {what}: your output has shape {tuple(got.shape)}, expected {tuple(x.shape)}.")
        if got.dtype != dtype:
            if dtype == torch.bfloat16 and got.dtype == torch.float16:
                raise Mistake("for a bfloat16 input your output is float16: cast back to the INPUT's dtype, "
                              ".to(x.dtype), not to a fixed .half() / torch.float16 (bfloat16 models exist too).")
            want, have = str(dtype).replace("torch.", ""), str(got.dtype).replace("torch.", "")
            raise Mistake(f"for a {want} input your output is {have}: compute the statistics in float32, then cast back "
                          f"to the input's dtype, .to(x.dtype); the next layer's weights are {want} and expect {want} "
                          f"inputs. (A {want} gain times a float32 tensor is float32: cast before multiplying by the "
                          "gain, or after.)")
        expected = _half_safe_reference(x, weight, eps)
        if _half_close(got, expected, dtype):
            continue
        if dtype == torch.float16 and (not torch.isfinite(got).all() or got.abs().max() < 1e-2):
            raise Mistake(f"on {what} your output is {'inf/NaN' if not torch.isfinite(got).all() else 'all zeros'}: "
                          "the squares OVERFLOWED in float16 (x**2 above 65,504 becomes inf, and x / sqrt(inf) = 0). "
                          "Cast x to float32 BEFORE squaring: x32 = x.float(), then mean(x32**2), the division, and "
                          ".to(x.dtype) at the end. (Casting after squaring, x.pow(2).float(), is too late.)")
        if dtype != torch.float16:
            x32 = x.float()
            rounded = weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).half().to(dtype)
            if close(got.float(), rounded.float(), atol=1e-6, rtol=1e-6):
                raise Mistake(f"on {what} your output went through float16: cast back to the INPUT's dtype, "
                              f".to(x.dtype), not to a fixed .half() / torch.float16.")
        for hint, buggy in _half_suspects(x, weight, eps).items():
            if _half_close(got, buggy, dtype):
                raise Mistake(f"on {what}: {hint}")
        raise Mistake(f"on {what} (shape {tuple(x.shape)}) your output differs from weight * x / sqrt(mean(x**2) + eps) "
                      f"computed in float32 and cast back to {dtype}: largest difference "
                      f"{(got.double() - expected.double()).abs().max().item():.3g}.")
    passed("check_rms_norm_half", f"float32 statistics, result in the input's dtype, on {len(cases)} inputs (float16 "
                                  "activations whose squares overflow float16, bfloat16, float32, another eps, 4-D)")


# SwiGLU's hidden size, as Llama sizes it (exercise 3) ------------------------------------------------------------------
# (name, d_model, multiple_of, ffn_dim_multiplier, intermediate_size): the published configs (params.json of Meta's
# releases; transformers' config.json gives the same intermediate_size)
LLAMA_SIZES = [
    ("Llama 1 65B", 8192, 256, None, 22016),
    ("Llama 2 7B", 4096, 256, None, 11008),
    ("Llama 2 13B", 5120, 256, None, 13824),
    ("Llama 2 70B", 8192, 4096, 1.3, 28672),
    ("Llama 3 8B", 4096, 1024, 1.3, 14336),
    ("Llama 3 70B", 8192, 4096, 1.3, 28672),
]
_SMALL_SIZES = [(64, 32, None), (96, 64, None), (48, 16, 1.5), (128, 128, 1.3), (100, 8, None), (512, 256, 2.0)]


def _up(n: int, multiple: int) -> int:
    return multiple * -(-n // multiple)


def llama_hidden_reference(d_model: int, multiple_of: int, ffn_dim_multiplier: float | None = None) -> int:
    """Llama's reference code: ``int(2/3 * 4 d_model)``, times ``ffn_dim_multiplier`` (rounded down) when given, then
    up to a multiple of ``multiple_of``."""
    hidden = int(2 * (4 * d_model) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return _up(hidden, multiple_of)


def _llama_suspects(d: int, m: int, mult: float | None) -> dict[str, int]:
    scale = (lambda h: int(mult * h)) if mult is not None else (lambda h: h)
    h = scale(int(8 * d / 3))
    return {
        "your sizes keep the FFN's 4 * d_model: SwiGLU has THREE matrices (gate, value, down) where the FFN has two, "
        "so the hidden size shrinks to 2/3 of 4 * d_model to keep the parameters: 3 * d * h = 2 * d * (4 d) gives "
        "h = 8 d / 3.": _up(scale(4 * d), m),
        "your sizes take 2/3 of d_model, not of the FFN's hidden size 4 * d_model: h = 2/3 * 4 * d_model.":
            _up(scale(int(2 * d / 3)), m),
        "your sizes use 3/2 instead of 2/3: three matrices instead of two means a SMALLER hidden size, 2/3 * 4 * "
        "d_model.": _up(scale(int(3 * 4 * d / 2)), m),
        f"your sizes round DOWN to a multiple of multiple_of: Llama rounds UP, multiple_of * ceil(h / multiple_of) "
        f"(e.g. -(-h // multiple_of) * multiple_of), so a layer is never smaller than the parameter budget.":
            m * (h // m),
        "your sizes round to the NEAREST multiple of multiple_of: Llama rounds UP, multiple_of * ceil(h / multiple_of).":
            m * round(h / m),
        "your sizes skip the rounding to a multiple of multiple_of: round h up to the next multiple, "
        "multiple_of * ceil(h / multiple_of) (hardware-friendly matrix shapes).": h,
        "your sizes ignore ffn_dim_multiplier: when it is given (Llama 2 70B, Llama 3), multiply the 2/3 * 4 * d_model "
        "size by it BEFORE rounding up to the multiple.": _up(int(8 * d / 3), m),
        "your sizes apply ffn_dim_multiplier AFTER rounding up to the multiple: multiply first, then round up, so "
        "that the result is a multiple of multiple_of.": int((mult or 1.0) * _up(int(8 * d / 3), m)),
    }


def check_llama_hidden(fn: Callable) -> None:
    """``fn(d_model, multiple_of, ffn_dim_multiplier=None) -> int``: the hidden size of Llama's SwiGLU, 2/3 of the
    2017 FFN's ``4 * d_model`` (scaled by ``ffn_dim_multiplier`` when given), rounded up to a multiple of
    ``multiple_of``. Checked against the published sizes of six Llama models and six small configs."""
    forbid_names(fn, ("swiglu_hidden",), "llama_hidden",
                 "That is the package's answer (and it has no ffn_dim_multiplier); the exercise asks you to work the "
                 "rule out.")
    cases = [(name, d, m, mult, size) for name, d, m, mult, size in LLAMA_SIZES]
    cases += [(f"d_model={d}, multiple_of={m}" + (f", ffn_dim_multiplier={mult}" if mult else ""), d, m, mult,
               llama_hidden_reference(d, m, mult)) for d, m, mult in _SMALL_SIZES]
    got_all = {}
    for name, d, m, mult, size in cases:
        args = (d, m) if mult is None else (d, m, mult)
        got = call(fn, *args, what=f"llama_hidden{args}")
        if got is None:
            raise Mistake("your llama_hidden returned None: not written yet, or did you forget a `return`?")
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"llama_hidden{args} returned {got!r} ({type(got).__name__}): return an int, the size of a layer "
               "(int(...) after any division).")
        got_all[name] = got
    wrong = [(name, d, m, mult, size) for name, d, m, mult, size in cases if got_all[name] != size]
    if wrong:
        # a slip explains the answers when it predicts ALL of them, the right ones too (rounding to the nearest
        # multiple equals rounding down wherever it is wrong; only the cases where it rounds up tell the two apart)
        for hint in _llama_suspects(*wrong[0][1:4]):
            if all(got_all[name] == _llama_suspects(d, m, mult)[hint] for name, d, m, mult, _ in cases):
                raise Mistake(hint)
        name, d, m, mult, size = wrong[0]
        raise Mistake(f"for {name} (d_model={d}, multiple_of={m}, ffn_dim_multiplier={mult}) your size is "
                      f"{got_all[name]:,}; the published intermediate_size is {size:,}. ({len(wrong)} of {len(cases)} "
                      "sizes differ.)")
    ratios = ", ".join(f"{name} {3 * size / (8 * d):.3f}" for name, d, _, _, size in LLAMA_SIZES)
    passed("check_llama_hidden", f"the intermediate_size of {len(LLAMA_SIZES)} Llama models and {len(_SMALL_SIZES)} "
                                 f"small configs. SwiGLU's parameters / the 2017 FFN's (3 h / 8 d_model): {ratios}")
