"""What every checker shares: run the learner's code, compare with the reference, name the mistake."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

__all__ = ["Mistake", "passed", "output_of", "close", "expect", "diagnose", "call"]


class Mistake(AssertionError):
    """Raised by a checker: the message says what looks wrong and what to look at."""


def passed(name: str, detail: str) -> None:
    """The one success line a checker prints."""
    print(f"✔ {name} passed: {detail}")


def output_of(result: Any) -> Tensor:
    """The output tensor, whether the learner returned ``out`` or ``(out, weights, ...)``."""
    if isinstance(result, (tuple, list)):
        if not result:
            raise Mistake("your function returned an empty tuple; return the output tensor (or (output, weights))")
        result = result[0]
    if not isinstance(result, Tensor):
        raise Mistake(f"expected a torch.Tensor, got {type(result).__name__}; did you forget a `return`?")
    return result


def close(a: Tensor, b: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape and the same numbers (NaN never equals anything)."""
    return a.shape == b.shape and bool(torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol))


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Mistake(message)


def call(fn: Callable, *args: Any, what: str = "your code", **kwargs: Any) -> Any:
    """Call the learner's code; an exception becomes a :class:`Mistake` that says where it came from."""
    try:
        return fn(*args, **kwargs)
    except Mistake:
        raise
    except Exception as exc:  # the learner's exception, re-raised with context
        raise Mistake(f"{what} raised {type(exc).__name__}: {exc}") from exc


def diagnose(got: Tensor, expected: Tensor, suspects: dict[str, Tensor], fallback: str, atol: float = 1e-5) -> None:
    """If ``got`` is not ``expected``: name the first classic mistake whose output ``got`` matches exactly,
    else raise ``fallback``. ``suspects`` maps a hint to what the buggy version would have produced."""
    if close(got, expected, atol=atol):
        return
    if got.shape != expected.shape:
        raise Mistake(f"output has shape {tuple(got.shape)}, expected {tuple(expected.shape)}. {fallback}")
    if torch.isnan(got).any():
        raise Mistake("your output contains NaN: " + next(
            (h for h, s in suspects.items() if torch.isnan(s).any()), fallback))
    for hint, buggy in suspects.items():
        if close(got, buggy, atol=atol):
            raise Mistake(hint)
    err = (got.float() - expected.float()).abs().max().item()
    raise Mistake(f"{fallback} (largest difference from the reference: {err:.3g})")
