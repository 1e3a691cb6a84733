"""What every checker shares: run the learner's code, compare with the reference, name the mistake.

Three things every checker gets from here:

* :class:`Mistake`, the exception a checker raises. In IPython/Jupyter it renders itself as the message first,
  then only the frames of the learner's own code (none of the checker's insides); in plain Python it is an
  ordinary ``AssertionError``.
* :func:`call` runs the learner's code under a time limit (:data:`TIME_LIMIT` seconds, an endless loop becomes a
  hint instead of a hung kernel) and turns the exceptions of common slips into hints.
* :func:`run_on_device` runs the learner's code on the chapter's device (``tfm_lesson.default_device()``) and
  hands back CPU tensors to compare; :func:`check_device_placement` checks that a tensor the learner builds
  lands on its input's device (on a machine without a GPU it uses PyTorch's data-free ``meta`` device, so the
  check runs everywhere).
"""
from __future__ import annotations

import copy
import ctypes
import os
import signal
import sys
import sysconfig
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn

__all__ = ["Mistake", "passed", "output_of", "close", "expect", "diagnose", "call", "time_limit", "TIME_LIMIT",
           "expect_written", "explain_exception", "run_on_device", "check_on_device", "check_device_placement", "to_device", "to_cpu"]

#: Seconds the learner's code may run in one call before a checker stops it (``TFM_CHECK_TIME_LIMIT`` overrides).
TIME_LIMIT: float = float(os.environ.get("TFM_CHECK_TIME_LIMIT", "30"))

_PACKAGE = str(Path(__file__).resolve().parent.parent)  # tfm_lesson/
_LIBRARIES = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                                     sysconfig.get_paths()["platlib"], torch.__path__[0])})


# the exception a checker raises -------------------------------------------------------------------------------------
def _is_learners(filename: str) -> bool:
    """A frame of the learner's code: not the package, not torch, not the standard library or installed packages."""
    if filename.startswith("<frozen"):
        return False
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    if path.startswith(_PACKAGE) or path.startswith(_LIBRARIES):
        return False
    return "site-packages" not in path and "dist-packages" not in path


def _learner_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of the learner's own code, outermost first: the cell that called the checker, then (through the
    exceptions the checker caught) the learner's function where it failed."""
    frames: list[traceback.FrameSummary] = []
    seen: set[int] = set()
    chain: list[BaseException] = []
    while exc is not None and id(exc) not in seen:  # the Mistake, then what it was raised from
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    for link in chain:
        for frame in traceback.extract_tb(link.__traceback__):
            if _is_learners(frame.filename) and (frame.filename, frame.lineno, frame.name) not in {
                    (f.filename, f.lineno, f.name) for f in frames}:
                frames.append(frame)
    return frames


def _where(filename: str) -> str:
    """``Cell In[5]`` for a notebook cell (as IPython names it), else the file name."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        name = shell.compile.format_code_name(filename) if shell is not None else None
        if name:
            return " ".join(name)
    except Exception:  # no IPython, or an IPython without format_code_name
        pass
    return f'File "{filename}"'


class Mistake(AssertionError):
    """Raised by a checker: the message says what looks wrong and what to look at.

    IPython and Jupyter call :meth:`_render_traceback_` to show it: the message first, then the lines of the
    learner's own code that led there; the checker's own frames are left out."""

    def _render_traceback_(self) -> list[str]:
        red, bold, reset = "\x1b[31m", "\x1b[1m", "\x1b[0m"
        lines = [f"{red}{bold}Mistake{reset}{red}: {self}{reset}"]
        frames = _learner_frames(self)
        if frames:
            lines.append("")
            lines.append("Where in your code (most recent call last):")
            for frame in frames:
                lines.append(f"  {_where(frame.filename)}, line {frame.lineno}, in {frame.name}")
                if frame.line:
                    lines.append(f"    {frame.line.strip()}")
        return lines


def passed(name: str, detail: str) -> None:
    """The one success line a checker prints."""
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


# a time limit on the learner's code -----------------------------------------------------------------------------------
class _OutOfTime(BaseException):
    """Raised inside the learner's code when its time is up (a BaseException, so `except Exception:` in the learner's
    code cannot swallow it)."""


_active = threading.local()


def _timeout_message(what: str, seconds: float) -> str:
    return (f"{what} did not return within {seconds:g} s: an endless loop? Look for a `while` whose condition never "
            "becomes false, or a loop that grows the list it walks over")


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """SIGALRM in the main thread: interrupts pure-Python loops and sleeps alike."""
    def ring(signum: int, frame: Any) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    """A timer thread that raises in this thread (CPython's PyThreadState_SetAsyncExc): works in any thread and on
    any OS, but only between Python bytecodes (a long C call finishes first)."""
    target = ctypes.c_ulong(threading.get_ident())
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(target, ctypes.py_object(_OutOfTime))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
        if state["fired"]:  # clear an exception still pending after the code returned
            ctypes.pythonapi.PyThreadState_SetAsyncExc(target, None)


def _mechanism(prefer: str | None = None) -> str:
    """``"alarm"`` in the main thread on Unix when no other timer is running (a pytest-timeout alarm, say),
    ``"thread"`` on CPython otherwise, ``"none"`` where neither works."""
    if prefer is not None:
        return prefer
    if (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)):
        return "alarm"
    if sys.implementation.name == "cpython":
        return "thread"
    return "none"


@contextmanager
def time_limit(seconds: float | None = None, what: str = "your code", mechanism: str | None = None) -> Iterator[None]:
    """Stop the code in the ``with`` block after ``seconds`` (default :data:`TIME_LIMIT`) with a :class:`Mistake`
    that suggests an endless loop. Nested limits: the outermost one rules. ``seconds <= 0`` turns the limit off."""
    seconds = TIME_LIMIT if seconds is None else seconds
    how = _mechanism(mechanism)
    if seconds <= 0 or how == "none" or getattr(_active, "on", False):
        yield
        return
    guard = _alarm if how == "alarm" else _watchdog
    _active.on = True
    try:
        with guard(seconds):
            yield
    except _OutOfTime as exc:
        raise Mistake(_timeout_message(what, seconds)) from exc
    finally:
        _active.on = False


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
         explain: Callable[[Exception], str | None] | None = None, **kwargs: Any) -> Any:
    """Call the learner's code under a time limit; an exception becomes a :class:`Mistake` that says where it came
    from, with a hint when ``explain`` (then :func:`explain_exception`) recognises it."""
    try:
        with time_limit(limit, what=what):
            return fn(*args, **kwargs)
    except Mistake:
        raise
    except Exception as exc:  # the learner's exception, re-raised with context
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        hint = (explain(exc) if explain is not None else None) or explain_exception(exc)
        message = f"{what} raised {type(exc).__name__}: {first}"
        raise Mistake(f"{message}. {hint}" if hint else f"{what} raised {type(exc).__name__}: {exc}") from exc


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
