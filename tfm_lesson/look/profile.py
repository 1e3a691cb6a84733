"""Where the milliseconds of one step go: ``torch.profiler`` and a count of Python calls (chapter 15, the bench).

    report = profile_step(lambda: model(token, cache), steps=20)
    print(report.table())                    # operators, calls per step, time per step, by kind
    print(compare_profiles({"before": a, "after": b}))

``step`` is called ``warmup`` times, then ``steps`` times under a plain clock, then ``steps`` times under the
profiler (which slows every operator a little), then once while Python's profiling hook counts the calls. Each operator's *self* time (its own, not its callees') is summed by kind: matrix products, attention,
memory allocation, copies, mask building and guards, element-wise arithmetic, views, other. Every figure is the
median over the steps, so that a step slowed by another program does not count. What the clock sees beyond all
operators is time spent outside them: Python, argument checks, the dispatcher.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile, record_function

from .._validate import check_positive_int
from ..cache import KVCache
from ..decoding import FastDecoder
from ..device import threads_for

__all__ = ["KINDS", "StepProfile", "profile_step", "count_python_calls", "compare_profiles", "ConcatKVCache",
           "profile_decoding"]

# operator names (without "aten::") by kind; anything else is "other"
KINDS: dict[str, tuple[str, ...]] = {
    "matrix products": ("addmm", "mm", "bmm", "matmul", "linear", "baddbmm", "addmv", "mv", "dot"),
    "attention": ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
                  "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                  "scaled_dot_product_attention", "softmax", "_softmax"),
    "allocation": ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "new_empty", "new_zeros",
                   "resize_", "full", "ones"),
    "copies": ("copy_", "cat", "stack", "clone", "contiguous", "_to_copy", "to", "index_select", "index_copy_",
               "index_put_", "embedding"),
    "masks and guards": ("tril", "triu", "masked_fill", "masked_fill_", "where", "any", "all", "logical_not",
                         "bitwise_not", "logical_or", "bitwise_or", "logical_and", "isnan", "eq", "lt", "ge",
                         "aminmax", "item", "_local_scalar_dense", "is_nonzero"),
    "element-wise": ("add", "add_", "sub", "mul", "div", "gelu", "relu", "silu", "layer_norm", "native_layer_norm",
                     "sum", "mean", "var", "rsqrt", "sqrt", "pow", "argmax", "fill_"),
    "views": ("view", "reshape", "_reshape_alias", "_unsafe_view", "transpose", "permute", "select", "slice",
              "narrow", "unbind", "as_strided", "t", "expand", "unsqueeze", "squeeze", "detach", "alias",
              "split", "chunk", "resolve_conj", "resolve_neg", "lift_fresh"),
}
_KIND_OF = {name: kind for kind, names in KINDS.items() for name in names}


def _kind(op: str) -> str:
    return _KIND_OF.get(op.removeprefix("aten::"), "other")


@dataclass
class StepProfile:
    """One step's profile: per operator ``(name, calls per step, self ms per step)`` (operators called by other
    operators included), the same by kind, the operator calls made from Python (top level) and all Python
    calls per step, and the step's time under a plain clock."""

    ops: list[tuple[str, float, float]]
    kinds: dict[str, float]
    op_calls: float
    python_calls: int
    step_ms: float
    label: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def op_ms(self) -> float:
        """Self time of all operators, ms per step (measured under the profiler)."""
        return sum(self.kinds.values())

    @property
    def outside_ms(self) -> float:
        """The step's clock time beyond its operators: Python, checks, dispatch (never below 0)."""
        return max(0.0, self.step_ms - self.op_ms)

    def table(self, top: int = 12) -> str:
        """The ``top`` operators by self time, then the time by kind."""
        lines = [f"{self.label or 'step'}: {self.step_ms:.3f} ms per step (plain clock), "
                 f"{self.op_calls:.0f} operator calls from Python, {self.python_calls} Python calls",
                 f"{'operator':44} {'calls':>6} {'ms':>8}"]
        for name, calls, ms in self.ops[:top]:
            lines.append(f"{name:44} {calls:6.0f} {ms:8.3f}")
        lines.append(f"{'by kind':44} {'':6} {'ms':>8}")
        for kind, ms in sorted(self.kinds.items(), key=lambda kv: -kv[1]):
            lines.append(f"{kind:44} {'':6} {ms:8.3f}")
        lines.append(f"{'outside the operators (Python, checks)':44} {'':6} {self.outside_ms:8.3f}")
        return "\n".join(lines)


def count_python_calls(fn: Callable[[], object]) -> int:
    """Calls of Python functions and of built-in functions (torch's operators included) made by one ``fn()``."""
    calls = -1  # the call of fn itself does not count
    inside = False  # counting starts at fn's own frame: what the profiler reports around it differs by Python version
    target = getattr(fn, "__code__", None)

    def hook(frame, event, arg):
        nonlocal calls, inside
        if not inside and event == "call" and (target is None or frame.f_code is target):
            inside = True
        if inside and event in ("call", "c_call"):
            calls += 1
        if inside and event == "return" and (target is None or frame.f_code is target) and frame.f_back is not None \
                and frame.f_back.f_code is count_python_calls.__code__:
            inside = False  # fn returned: what follows (restoring the profiler) is not fn's

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return max(0, calls)


_STEP = "tfm_lesson.profile_step"


def _per_step(events) -> list[tuple[dict[str, tuple[int, float]], int]]:
    """For each step of one profiler session: ``{operator: (calls, self ms)}`` and the calls made from Python."""
    steps = {id(e): ({}, 0) for e in events if e.name == _STEP}
    for event in events:
        if event.name == _STEP:
            continue
        root, parent = event, event.cpu_parent
        while parent is not None and parent.name != _STEP:
            root, parent = parent, parent.cpu_parent
        if parent is None:
            continue  # outside every step (the profiler's own events)
        ops, calls = steps[id(parent)]
        count, ms = ops.get(event.key, (0, 0.0))
        ops[event.key] = (count + 1, ms + event.self_cpu_time_total / 1e3)
        steps[id(parent)] = (ops, calls + (root is event))  # a direct child of the step: called from Python
    return list(steps.values())


@contextmanager
def _native_stderr_silenced():
    """Send what C++ code writes to file descriptor 2 to /dev/null meanwhile (the profiler's start/stop lines)."""
    try:
        sys.stderr.flush()
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):
        yield
        return
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def profile_step(step: Callable[[], object], steps: int = 20, warmup: int = 3, label: str = "",
                 step_ms: float | None = None) -> StepProfile:
    """Profile ``step`` (a callable with no arguments, e.g. one cached decoding step) over ``steps`` calls.

    ``step`` is called ``warmup + 2 * steps + 1`` times in all (a decoding step must have room for that many
    positions). Times are per step: operator self times under ``torch.profiler``, the step's own time as the
    median of a plain clock, or ``step_ms`` when the caller timed it (then the clock's ``steps`` calls are skipped).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    for _ in range(warmup):
        step()
    clock = []
    for _ in range(steps if step_ms is None else 0):  # the plain clock first: before the profiler's own threads
        start = time.perf_counter()
        step()
        clock.append(time.perf_counter() - start)
    with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function(_STEP):
                step()
    per_step = _per_step(prof.events())
    names = {name for one, _ in per_step for name in one}
    median = statistics.median
    ops = sorted(((name, median([one.get(name, (0, 0.0))[0] for one, _ in per_step]),
                   median([one.get(name, (0, 0.0))[1] for one, _ in per_step])) for name in names), key=lambda r: -r[2])
    kinds = {kind: median([sum(ms for name, (_, ms) in one.items() if _kind(name) == kind) for one, _ in per_step])
             for kind in {_kind(name) for name in names}}
    top_level = median([calls for _, calls in per_step])
    python_calls = count_python_calls(step)
    return StepProfile(ops=ops, kinds=kinds, op_calls=top_level, python_calls=python_calls,
                       step_ms=1e3 * statistics.median(clock) if step_ms is None else step_ms, label=label)


def compare_profiles(profiles: dict[str, StepProfile]) -> str:
    """Side by side: ms per step by kind, operator calls and Python calls, one column per profile."""
    names = list(profiles)
    kinds = list(KINDS) + ["other"]
    width = max(12, *(len(n) for n in names))
    lines = [f"{'':40}" + "".join(f"{n:>{width + 2}}" for n in names)]

    def row(title: str, values: list[str]) -> None:
        lines.append(f"{title:40}" + "".join(f"{v:>{width + 2}}" for v in values))

    row("ms per step (plain clock)", [f"{p.step_ms:.3f}" for p in profiles.values()])
    for kind in kinds:
        row(f"  {kind}", [f"{p.kinds.get(kind, 0.0):.3f}" for p in profiles.values()])
    row("  outside the operators (Python, checks)", [f"{p.outside_ms:.3f}" for p in profiles.values()])
    row("operator calls from Python per step", [f"{p.op_calls:.0f}" for p in profiles.values()])
    row("Python calls per step", [f"{p.python_calls}" for p in profiles.values()])
    return "\n".join(lines)


class ConcatKVCache(KVCache):
    """The first cache a learner writes (chapter 15): ``torch.cat`` at every step, a new tensor each time."""

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        if self._key is None:
            self._key, self._value = key, value
        else:  # (batch, heads, length + new, d_k): the whole cache copied into a new tensor
            self._key, self._value = torch.cat([self._key, key], dim=2), torch.cat([self._value, value], dim=2)
        self._length = self._key.size(2)
        return self._key, self._value


def profile_decoding(model: nn.Module, prompt_len: int = 16, steps: int = 20, warmup: int = 3,
                     seed: int = 0) -> dict[str, StepProfile]:
    """Profile one cached decoding step of ``model`` (a :class:`tfm_lesson.GPT`, batch 1) three ways, after a
    ``prompt_len``-token prompt, under ``torch.inference_mode`` and the package's thread rule (one thread for a small
    model on the CPU, as ``GPT.generate`` runs); the three steps' plain clocks are taken in turns:

    - ``"torch.cat cache"``: ``model(token, cache)`` with :class:`ConcatKVCache` (the learner's first cache);
    - ``"KVCache"``: ``model(token, cache)`` with ``model.new_cache()`` (a buffer written in place);
    - ``"FastDecoder"``: :meth:`tfm_lesson.decoding.FastDecoder.step` (the overhead cut).
    """
    check_positive_int(prompt_len, "prompt_len")
    needed = prompt_len + warmup + 2 * steps + 1
    if needed > model.config.max_len:
        raise ValueError(f"prompt_len + warmup + 2 * steps + 1 = {needed} positions, more than the model's "
                         f"context of max_len={model.config.max_len}")
    device = model.tok_embed.weight.device
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.config.vocab_size, (1, prompt_len), generator=gen).to(device)
    token = prompt[:, -1:]  # the same token at every step: the work of a step does not depend on which
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), threads_for(model, device):  # the thread rule, as GPT.generate runs
            cat_cache, kv_cache = [ConcatKVCache() for _ in model.blocks], model.new_cache(needed)
            decoder = FastDecoder(model, 1, needed)
            model(prompt, cat_cache), model(prompt, kv_cache), decoder.prefill(prompt)
            ways = {"torch.cat cache": lambda: model(token, cat_cache), "KVCache": lambda: model(token, kv_cache),
                    "FastDecoder": lambda: decoder.step(token)}
            clock = _interleaved_clock(ways, steps, warmup)  # one step of each in turn: a burst of load hits all
            results = {label: profile_step(step, steps, 0, label, step_ms=clock[label]) for label, step in ways.items()}
    finally:
        model.train(was_training)
    return results


def _interleaved_clock(ways: dict[str, Callable[[], object]], steps: int, warmup: int) -> dict[str, float]:
    """Median ms of one call of each way, timed in turns (A B C A B C ...) after ``warmup`` turns."""
    times: dict[str, list[float]] = {label: [] for label in ways}
    for turn in range(warmup + steps):
        for label, step in ways.items():
            start = time.perf_counter()
            step()
            if turn >= warmup:
                times[label].append(time.perf_counter() - start)
    return {label: 1e3 * statistics.median(t) for label, t in times.items()}
