"""Checkers an instructor writes in a chapter: :func:`make_checker` (the exercise's name, its inputs, the reference,
the named mistakes) returns a checker that works like the package's own, in a learner's notebook and in
``course grade`` (which finds it in the chapter and replays it in the grader's process), nbgrader and Otter.

    check_scaled_scores = make_checker(
        "scaled_scores",
        inputs=lambda g: [(torch.randn(2, n, 8, generator=g), torch.randn(2, n, 8, generator=g)) for n in (3, 5)],
        reference=lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)),
        mistakes={"the scores are not scaled: divide by sqrt(d_k)": lambda q, k: q @ k.transpose(-2, -1)},
        forbid=("scaled_dot_product_attention",),
    )
    check_scaled_scores(scaled_scores)           # in the exercise's check cell

``inputs(g)`` draws the test cases (tuples of arguments) from the ``torch.Generator`` ``g``: a learner's notebook
seeds it with 0, the grader with a seed of its own (``course grade --seed``), so an answer that memorised the
outputs of seed 0 fails. Each case is compared with ``reference(*case)``; when they differ, the first of
``mistakes`` (message -> the wrong function a learner would write) whose output the answer matches is named.
``forbid`` lists names the answer may not use (the ready-made function the exercise asks to write).

Partial credit: ``weights=[1, 1, 2]`` makes each input case a named check ("case 1", "case 2", ...) worth its weight,
in the order ``inputs`` draws them (so draw the easy cases first); the checker stops at the first case that fails and
earns the weight of the cases before it over the total (:mod:`._parts`). ``inputs`` must then draw as many cases as
there are weights, whatever the seed. Without ``weights`` the checker is all or nothing.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from ._harness import Mistake, call, close, expect, passed
from ._parts import named_checks, part, parts
from ._rules import forbid_names

__all__ = ["make_checker"]


def _same(got: Any, want: Any, atol: float, rtol: float) -> bool:
    if isinstance(want, Tensor):
        return isinstance(got, Tensor) and close(got, want, atol=atol, rtol=rtol)
    if isinstance(want, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(want) and all(
            _same(g, w, atol, rtol) for g, w in zip(got, want))
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(
            got, want, rel_tol=rtol, abs_tol=atol)
    return got == want


def _shown(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} ({str(value.dtype).removeprefix('torch.')})"
    return repr(value) if len(repr(value)) < 80 else type(value).__name__


def _check_case(fn: Callable, name: str, i: int, n: int, case: Any, reference: Callable,
                mistakes: dict[str, Callable], atol: float, rtol: float) -> None:
    """One input case against the reference; a Mistake naming the first matching mistake, else the difference."""
    case = tuple(case) if isinstance(case, (tuple, list)) else (case,)
    what = f"{name}(case {i} of {n}: {', '.join(_shown(a) for a in case)})"
    want = reference(*case)
    got = call(fn, *case, what=what)
    if _same(got, want, atol, rtol):
        return
    for hint, wrong in mistakes.items():
        if _same(got, wrong(*case), atol, rtol):
            raise Mistake(f"{what}: {hint}")
    if isinstance(want, Tensor) and isinstance(got, Tensor) and got.shape == want.shape:
        err = (got.detach().double() - want.detach().double()).abs().max().item()
        raise Mistake(f"{what} differs from the reference (largest difference {err:.3g})")
    raise Mistake(f"{what} returned {_shown(got)}, expected {_shown(want)}")


def make_checker(name: str, *, inputs: Callable[[torch.Generator], list[tuple]], reference: Callable,
                 mistakes: dict[str, Callable] | None = None, forbid: tuple[str, ...] = (), atol: float = 1e-5,
                 rtol: float = 1e-4, weights: Sequence[float] | None = None) -> Callable:
    """A checker ``check_<name>(fn, seed=0)`` for the exercise ``name`` (see the module's docstring)."""
    if not name.isidentifier():
        raise ValueError(f"name must be a Python name (the checker is check_{{name}}), got {name!r}")
    if not callable(inputs) or not callable(reference):
        raise TypeError("inputs and reference must be callables: inputs(generator) -> [args, ...], reference(*args)")
    mistakes = dict(mistakes or {})
    if weights is not None and (isinstance(weights, (str, bytes)) or not len(weights)):
        raise ValueError(f"weights must be one number > 0 per input case, e.g. [1, 1, 2], got {weights!r}")

    def checker(fn: Callable, seed: int = 0) -> None:
        if forbid:
            forbid_names(fn, forbid, name, f"The exercise asks you to write it without {', '.join(forbid)}.")
        g = torch.Generator().manual_seed(int(seed))
        cases = list(inputs(g))
        expect(len(cases) > 0, f"the checker of {name} draws no test case (its inputs gave none)")
        if weights is not None:
            expect(len(cases) == len(weights), f"the checker of {name} has {len(weights)} weights and draws "
                                               f"{len(cases)} test cases: give one weight per case")
        with parts(checker) if weights is not None else contextlib.nullcontext():
            for i, case in enumerate(cases, start=1):
                if weights is not None:
                    part(f"case {i}")
                _check_case(fn, name, i, len(cases), case, reference, mistakes, atol, rtol)
        passed(f"check_{name}", f"{len(cases)} cases drawn from seed {seed} match the reference")

    if weights is not None:
        named_checks({f"case {i}": w for i, w in enumerate(weights, start=1)})(checker)
    checker.__name__ = checker.__qualname__ = f"check_{name}"
    checker.__doc__ = f"Check an answer to the exercise {name} (made by tfm_lesson.checks.make_checker)."
    return checker
