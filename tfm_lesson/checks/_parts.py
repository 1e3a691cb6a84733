"""Named checks with weights: partial credit for a checker that gets part of the way.

A checker names its checks, in the order it runs them, with a weight each; it stops at its first failing check, so
its credit is the weight of the checks before that one over the total (a checker that passes earns 1, one without
named checks earns 1 or 0)::

    @named_checks({"shape": 1, "dtype": 1, "values": 2})
    def check_split_heads(fn):
        with parts(check_split_heads):
            part("shape")     # every case's shape ...
            ...
            part("dtype")     # ... then every case's dtype ...
            ...
            part("values")    # ... then every case's values
            ...

:func:`named_checks` only puts the names on the checker (``checker.checks``; the nbgrader and Otter exports read
them), it does not wrap it. :func:`parts` is a context manager around the checker's body; :func:`part` says which
check runs from here on (the first one runs until the first :func:`part`). Checks run in the order they are named:
going back to an earlier one is the checker's bug (``ValueError``), since the checks after it would be credited
without having run for every case.

Where the credit is computed: :func:`scored` runs a checker and returns its :class:`Tally`. The grader calls it
(through :func:`~._replay.replay_scored`) while it *replays* the checker in its own process, so the credit comes from
the checker's own steps there, never from anything the submission's kernel wrote. In a notebook a failing checker's
:class:`~._mistake.Mistake` also shows "k of n checks passed" under its message (its text stays the same).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

__all__ = ["named_checks", "parts", "part", "scored", "Tally"]

_local = threading.local()  # .stack: the open parts, outermost first; .tally: where scored() wants the outcome


@dataclass(frozen=True)
class Tally:
    """How far a checker with named checks got: ``reached`` is the index of the check that failed
    (``len(names)`` when all passed)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    reached: int

    @property
    def fraction(self) -> float:
        """The weight of the checks passed over the total, in [0, 1]."""
        return sum(self.weights[:self.reached]) / sum(self.weights)

    @property
    def passed(self) -> tuple[str, ...]:
        return self.names[:self.reached]

    @property
    def failed(self) -> str | None:
        return self.names[self.reached] if self.reached < len(self.names) else None

    def summary(self) -> str:
        """``2 of 3 checks passed: shape, values; failed: masked positions``."""
        done = f"{self.reached} of {len(self.names)} checks passed"
        if self.passed:
            done += ": " + ", ".join(self.passed)
        return done + (f"; failed: {self.failed}" if self.failed is not None else "")


def _spec(checks: Mapping[str, float] | Callable) -> dict[str, float]:
    spec = getattr(checks, "checks", None) if callable(checks) else checks
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError("parts(...) takes the named checks (a dict name -> weight, or a checker decorated with "
                         f"named_checks), got {checks!r}")
    out = {}
    for name, weight in spec.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a check's name must be a non-empty string, got {name!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ValueError(f"the weight of check {name!r} must be a number > 0, got {weight!r}")
        out[name] = float(weight)
    return out


def named_checks(checks: Mapping[str, float]) -> Callable[[Callable], Callable]:
    """Name a checker's checks and their weights, in the order it runs them; returns the checker itself (no
    wrapper), with ``checker.checks`` set."""
    spec = _spec(checks)

    def name(checker: Callable) -> Callable:
        checker.checks = dict(spec)
        return checker
    return name


class _Open:
    def __init__(self, spec: dict[str, float]) -> None:
        self.names, self.weights = tuple(spec), tuple(spec.values())
        self.at = 0

    def tally(self, done: bool) -> Tally:
        return Tally(self.names, self.weights, len(self.names) if done else self.at)


def _stack() -> list[_Open]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@contextlib.contextmanager
def parts(checks: Mapping[str, float] | Callable) -> Iterator[None]:
    """Run the checker's body with its named checks (a dict, or the checker decorated with :func:`named_checks`).
    A checker called by another one keeps its own checks; the credit is the outermost checker's."""
    stack = _stack()
    opened = _Open(_spec(checks))
    stack.append(opened)
    try:
        yield
    except BaseException as exc:
        if len(stack) == 1:
            tally = opened.tally(done=False)
            if getattr(_local, "tally", None) is not None:
                _local.tally.append(tally)
            if isinstance(exc, AssertionError):  # a Mistake: the notebook shows the tally under its message
                try:
                    exc._tfm_tally = tally.summary()
                except AttributeError:
                    pass
        raise
    else:
        if len(stack) == 1 and getattr(_local, "tally", None) is not None:
            _local.tally.append(opened.tally(done=True))
    finally:
        stack.pop()


def part(name: str) -> None:
    """From here on the checker runs its check ``name`` (the checks before it passed)."""
    stack = _stack()
    if not stack:
        raise RuntimeError(f"part({name!r}) outside `with parts(...)`: open the checker's named checks first")
    opened = stack[-1]
    if name not in opened.names:
        raise ValueError(f"part({name!r}): not one of the checker's named checks {list(opened.names)}")
    index = opened.names.index(name)
    if index < opened.at:
        raise ValueError(f"part({name!r}) after {opened.names[opened.at]!r}: checks run in the order they are named")
    opened.at = index


def scored(checker: Callable, *args: Any, **kwargs: Any) -> tuple[BaseException | None, Tally | None]:
    """Run ``checker(*args, **kwargs)``: (the exception it raised or None, its :class:`Tally`, or None for a checker
    without named checks). Nothing it raises escapes, except KeyboardInterrupt and SystemExit."""
    outer = getattr(_local, "tally", None)
    _local.tally = []
    error: BaseException | None = None
    try:
        checker(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        error = exc
    finally:
        found, _local.tally = _local.tally, outer
    return error, (found[0] if found else None)


def credit(error: BaseException | None, tally: Tally | None) -> float:
    """The fraction a run earned: 1 when it passed, else what its named checks passed (0 without any)."""
    if error is None:
        return 1.0
    return tally.fraction if tally is not None else 0.0


# the nbgrader and Otter exports run these in the submission's kernel (those tools grade there) -----------------------
def partial_points(points: float, checker: Callable, /, *args: Any, **kwargs: Any) -> float | None:
    """For nbgrader's autograded test cell: run the checker; None when it passes (nbgrader gives a test cell that
    shows no value its full points); when it fails after passing some of its named checks, print its message and
    return the points earned, ``points`` times its credit rounded to two decimals (nbgrader takes a test cell's
    numeric value as its partial credit); otherwise raise its exception (0 points)."""
    error, tally = scored(checker, *args, **kwargs)
    if error is None:
        return None
    earned = round(points * credit(error, tally), 2)
    if tally is None or earned <= 0:
        raise error
    print(f"{type(error).__name__}: {error}\n({tally.summary()}: {earned:g} of {points:g} points)")
    return earned


def reached(check: int, checker: Callable, /, *args: Any, **kwargs: Any) -> None:
    """For Otter's test case of a checker's ``check``-th named check (1-based): run the checker; raise its exception
    unless it got past that check (a checker without named checks: unless it passed)."""
    error, tally = scored(checker, *args, **kwargs)
    if error is not None and (tally is None or tally.reached < check):
        raise error
