"""What every checker shares: run the learner's code, compare with the reference, name the mistake.

Three things every checker gets from here:

* :class:`Mistake`, the exception a checker raises (its home is :mod:`._mistake`, which also renders it). In
  IPython/Jupyter it shows its message first, then only the frames of the learner's own code.
* :func:`call` runs the learner's code on copies of its inputs (an input changed in place is named, see
  :mod:`._pristine`), under a time limit (:data:`TIME_LIMIT` seconds, an endless loop becomes a
  hint instead of a hung kernel; the limit itself is :mod:`._time_limit`) and turns the exceptions of common slips into hints.
* :func:`run_on_device` runs the learner's code on the chapter's device (``tfm_lesson.default_device()``) and
  hands back CPU tensors to compare; :func:`check_device_placement` checks that a tensor the learner builds
  lands on its input's device (on a machine without a GPU it uses PyTorch's data-free ``meta`` device, so the
  check runs everywhere).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Collection

import torch
from torch import Tensor, nn

from ._mistake import Mistake
from ._pristine import check_unchanged, copy_inputs
from ._replay import learner_side
from ._time_limit import TIME_LIMIT, time_limit

__all__ = ["Mistake", "passed", "output_of", "close", "expect", "diagnose", "call", "time_limit", "TIME_LIMIT",
           "expect_written", "explain_exception", "run_on_device", "check_on_device", "check_device_placement", "to_device", "to_cpu",
           "learner_side"]


def passed(name: str, detail: str) -> None:
    """The one success line a checker prints (not while the grader replays it: the grade says it)."""
    from ._replay import passed_line

    if not passed_line(f"✔ {name} passed: {detail}"):
        print(f"✔ {name} passed: {detail}")


def output_of(result: Any) -> Tensor:
    """The output tensor, whether the learner returned ``out`` or ``(out, weights, ...)``."""
    if isinstance(result, (tuple, list)):
        if not result:
            raise Mistake("your function returned an empty tuple; return the output tensor (or (output, weights))")
        result = result[0]
    if result is None:
        raise Mistake("your code returned None: not written yet, or did you forget a `return`?")
    if not isinstance(result, Tensor):
        raise Mistake(f"expected a torch.Tensor, got {type(result).__name__}; did you forget a `return`?")
    return result


def close(a: Tensor, b: Tensor, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape and the same numbers (NaN never equals anything); compared on the CPU."""
    return a.shape == b.shape and bool(torch.allclose(a.detach().cpu().float(), b.detach().cpu().float(),
                                                      atol=atol, rtol=rtol))


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Mistake(message)


def expect_written(module: nn.Module, what: str) -> None:
    """An exercise stub (``__init__`` that builds nothing) gets "not written yet", not a list of missing weights."""
    if not any(True for _ in module.parameters()) and not any(True for _ in module.children()):
        raise Mistake(f"your {what} is not written yet: its __init__ builds no sub-modules, so it has no parameters. "
                      f"Build the parts in __init__ (as attributes of self), then write forward")


# turning exceptions from the learner's code into hints -------------------------------------------------------------
_DEVICE_WORDS = ("same device", "expected device", "found at least two devices", "Expected all tensors")


def _mentions_devices(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception it was raised from is PyTorch's device mismatch."""
    for _ in range(5):
        if exc is None:
            return False
        if any(w in str(exc) for w in _DEVICE_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def explain_exception(exc: BaseException) -> str | None:
    """A hint for the exceptions that common slips raise, or None."""
    text = str(exc)
    if _mentions_devices(exc):
        return ("your code mixes tensors on two devices (CPU and GPU). Build every new tensor on the device of the "
                "input it goes with: `torch.ones(n, n, dtype=torch.bool, device=tokens.device)`, or "
                "`.to(x.device)`; build your mask on `tokens.device`")
    if "not implemented for" in text and ("bitwise_and" in text or "bitwise_or" in text or "logical" in text):
        return ("`&` and `|` combine boolean tensors, and one of yours is a float tensor (torch.ones gives floats). "
                "So build the triangle as a boolean tensor: `torch.ones(n, n, dtype=torch.bool, device=tgt.device)`")
    if isinstance(exc, (TypeError, AttributeError)) and "tuple" in text:
        return ("a tuple turned up where a tensor belongs. Attention modules return (output, weights): take the "
                "output with `[0]`, e.g. `self.self_attn(x, x, x, mask)[0]`")
    return None


def call(fn: Callable, *args: Any, what: str = "your code", limit: float | None = None,
         explain: Callable[[Exception], str | None] | None = None, mutable: Collection[int | str] = (),
         **kwargs: Any) -> Any:
    """Call the learner's code under a time limit, on copies of its inputs (:mod:`._pristine`): the caller's tensors
    stay as they were, and an answer that changes an input in place fails naming it (except the positions or
    keywords in ``mutable``, the arguments an exercise asks to change). An exception becomes a :class:`Mistake` that
    says where it came from, with a hint when ``explain`` (then :func:`explain_exception`) recognises it."""
    copies, kw_copies = copy_inputs(args), copy_inputs(kwargs)
    copies = tuple(a if i in mutable else c for i, (a, c) in enumerate(zip(args, copies)))
    kw_copies = {k: kwargs[k] if k in mutable else c for k, c in kw_copies.items()}
    try:
        with time_limit(limit, what=what):
            result = fn(*copies, **kw_copies)
    except Mistake:
        raise
    except Exception as exc:  # the learner's exception, re-raised with context
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        hint = (explain(exc) if explain is not None else None) or explain_exception(exc)
        message = f"{what} raised {type(exc).__name__}: {first}"
        raise Mistake(f"{message}. {hint}" if hint else f"{what} raised {type(exc).__name__}: {exc}") from exc
    check_unchanged(fn, what, args, copies, kwargs, kw_copies, mutable)
    return result


def diagnose(got: Tensor, expected: Tensor, suspects: dict[str, Tensor], fallback: str, atol: float = 1e-5) -> None:
    """If ``got`` is not ``expected``: name the first classic mistake whose output ``got`` matches exactly,
    else raise ``fallback``. ``suspects`` maps a hint to what the buggy version would have produced."""
    if close(got, expected, atol=atol):
        return
    got, expected = got.detach().cpu(), expected.detach().cpu()
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


# the chapter's device -------------------------------------------------------------------------------------------------
def to_device(value: Any, device: torch.device | str) -> Any:
    """Tensors (in tuples, lists and dicts too) moved to ``device``; modules are copied, then moved."""
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, nn.Module):
        return copy.deepcopy(value).to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def to_cpu(value: Any) -> Any:
    """Tensors (in tuples, lists and dicts too) moved to the CPU, for comparing (meta tensors hold no numbers and
    stay where they are)."""
    if isinstance(value, Tensor):
        return value if value.device.type == "meta" else value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def _chapter_device() -> torch.device:
    from ..device import default_device

    return default_device()


def run_on_device(fn: Callable, *args: Any, what: str = "your code", device: torch.device | str | None = None,
                  limit: float | None = None, explain: Callable[[Exception], str | None] | None = None,
                  **kwargs: Any) -> Any:
    """Run ``fn`` with its tensor arguments on ``device`` (default: the chapter's, ``default_device()``) and return
    the result on the CPU. A device mismatch inside the learner's code becomes a hint to build new tensors on the
    input's device."""
    device = torch.device(device) if device is not None else _chapter_device()
    fn = to_device(fn, device)  # a module is copied to the device; a function stays as it is
    result = call(fn, *to_device(args, device), what=what, limit=limit, explain=explain,
                  **to_device(kwargs, device))
    return to_cpu(result)


def check_device_placement(fn: Callable, *args: Any, what: str = "your function", argument: str = "tokens",
                           device: torch.device | str | None = None, **kwargs: Any) -> None:
    """Run ``fn`` on copies of its tensor arguments placed on ``device`` (default: the chapter's GPU when there is
    one, else PyTorch's ``meta`` device, which holds shapes and no numbers, so the check runs on any machine) and
    check that every tensor it returns is on that device. A tensor built without ``device=`` lands on the CPU: the
    learner learns it here instead of from a crash next to a model on the GPU. ``argument`` names the input the
    learner should take the device from."""
    if device is None:
        device = _chapter_device()
        device = torch.device("meta") if device.type == "cpu" else device
    device = torch.device(device)
    fix = f"build new tensors on `{argument}.device` (`torch.ones(n, n, dtype=torch.bool, device={argument}.device)`)"
    try:
        with time_limit(None, what=what):
            result = fn(*to_device(args, device), **to_device(kwargs, device))
    except Mistake:
        raise
    except Exception as exc:
        if _mentions_devices(exc):
            raise Mistake(f"{what} mixes devices when `{argument}` is on another device than the CPU (here: "
                          f"{device.type}): it builds a tensor on the CPU and combines it with `{argument}`; "
                          f"{fix}") from exc
        return  # something the meta device cannot do (reading values, say): nothing to conclude
    outputs = [result] if isinstance(result, Tensor) else [r for r in result if isinstance(r, Tensor)] \
        if isinstance(result, (tuple, list)) else []
    for out in outputs:
        expect(out.device.type == device.type,
               f"{what} returns a tensor on {out.device.type} when `{argument}` is on {device.type}: {fix}, or it "
               "will crash next to a model on the GPU")


def check_on_device(module_or_fn: Callable, *args: Any, expected: Tensor, what: str = "your code",
                    device: torch.device | str | None = None, atol: float = 1e-4) -> None:
    """Run the learner's module or function once more on the chapter's device (a GPU when there is one; nothing to
    do on a CPU-only machine unless ``device`` is given) and compare its output, on the CPU, with ``expected``. A
    module is copied there, so the caller's stays where it is. A device mismatch inside becomes a hint."""
    if device is None:
        device = _chapter_device()
        if device.type == "cpu":
            return  # the checker has already run everything on the CPU
    device = torch.device(device)
    with torch.no_grad():
        got = output_of(run_on_device(module_or_fn, *args, what=f"{what} on {device.type}", device=device))
    if device.type == "meta":
        expect(got.shape == expected.shape,
               f"{what} on the meta device gives shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
        return
    expect(close(got, expected, atol=atol),
           f"{what} gives different numbers on {device.type} than on the CPU (largest difference "
           f"{(got.float() - expected.detach().cpu().float()).abs().max().item():.3g}): does it build a tensor on "
           "a fixed device, or read `.data` / numpy values on the way?")
