"""Verdicts computed where the learner's code never ran: record the checker in the submission's kernel, replay it in
the grader.

A checker is ordinary code that calls the learner's function or class and compares. In a notebook it runs as it
is. To grade, it runs twice, with the learner's objects standing behind *handles* (:class:`Handle`):

1. **Record**, in the submission's (sandboxed) kernel: :func:`record` runs the checker with each learner object
   behind a handle. Every operation the checker performs on a handle (call it, read or set an attribute, iterate,
   ``with``, copy, ask its signature) really happens, and its result is written to a *trace* as plain data
   (:mod:`._wire`: tensors as bytes, no pickle), with a fingerprint of its inputs, what it did to the checker's
   own objects it was handed (a tensor or a module changed in place, which tensor each slot of a module holds and
   whose storage it shares, :mod:`._replay_ties`; an optimizer stepped) and to the random number generator.
   Results that are not plain data (a module the learner built) become handles in turn.
2. **Replay**, in the grader's own process: :func:`replay` runs the *same* checker with handles that perform
   nothing and answer every operation from the trace (after checking it is the operation, on the same handle,
   with the same inputs). The comparison, the naming of mistakes and the verdict all happen here. The kernel
   can patch ``print``, ``importlib``, ``torch`` or IPython as it likes: what reaches the grader is data, and
   data can only earn what the learner's outputs earn.

What a checker must keep to (the sweep in ``tests/test_replay.py`` holds every exercise to it): it reads the
learner's work only through operations on the handles it was given; the rest of its work is deterministic
(seeded); and where it needs something the learner's objects do *to the checker's own objects while the checker
is running them* (a hook the learner registered on the checker's module, gradients flowing back through the
learner's output, a peak of memory), it computes it inside :func:`learner_side`, whose result is recorded whole:
the kernel's word, so what decides a pass with no output to check is also ruled on here (a source rule).
Source rules (``checks/_rules.py``) read the source the grader extracted, not the kernel.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import os
import threading
from typing import Any, Callable, Iterator

import torch

from . import _rules
from ._mistake import Mistake
from ._parts import Tally, credit, scored
from ._salt import salted
from ._replay_state import (Divergence, Owned, _NotValue, _not_value, _perform, exception_from, exception_to,
                            no_collection, restore_globals, snapshot_globals)
from ._wire import WireError, decode, digest, encode, importable_name

__all__ = ["Handle", "record", "replay", "replay_scored", "learner_side", "recording", "replaying", "passed_line",
           "Divergence",
           "TRACE_LIMIT"]

TRACE_LIMIT = 64 * 1024 * 1024  # bytes of record a check may leave (the largest honest one is under 1 MB)
_SPECIAL = ("__call__", "__iter__", "__len__", "__getitem__", "__setitem__", "__contains__", "__enter__", "__exit__",
            "__bool__", "__next__")
# operations that read the learner's object: the checker's own objects are not looked at around them (reading an
# attribute that is a property running code that changes the checker's objects is not carried)
_READS = ("getattr", "signature", "repr", "len", "contains", "bool")
_session: _Session | None = None
_lock = threading.Lock()  # one replay at a time in the grader's process (the RNG and the session are global)


class Handle:
    """A learner's object as the checker sees it while grading: every use is an operation of the session."""

    __slots__ = ("_tfm_id", "_tfm_meta")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_tfm_"):
            raise AttributeError(name)
        return _op("getattr", self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        _op("setattr", self, name, value)

    def __delattr__(self, name: str) -> None:
        _op("delattr", self, name)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(handle, nn.Module) asks this
        return decode(self._tfm_meta["cls"], _no_handle)

    @property
    def __signature__(self) -> inspect.Signature:
        params = _op("signature", self)
        return inspect.Signature([inspect.Parameter(name, inspect._ParameterKind(kind),
                                                    **({"default": default} if has else {}))
                                  for name, kind, has, default in params])

    def __repr__(self) -> str:
        return _op("repr", self)

    def __deepcopy__(self, memo: dict) -> Any:
        return _op("deepcopy", self)

    def __copy__(self) -> Any:
        return _op("copy", self)

    def __reduce_ex__(self, protocol: int) -> Any:
        raise TypeError("a learner's object cannot be pickled while grading")


def _special(name: str) -> Callable:
    if name == "__call__":
        return lambda self, *args, **kwargs: _op("call", self, args, kwargs)
    if name == "__iter__":
        return lambda self: iter(_op("iter", self))
    if name == "__exit__":
        return lambda self, *exc: _op("exit", self, exception_to(exc[1]) if len(exc) > 1 and exc[1] else None)
    return lambda self, *args: _op(name.strip("_"), self, *args)


_types: dict[tuple[str, tuple[str, ...]], type] = {}


def _handle_type(name: str, specials: tuple[str, ...]) -> type:
    """A Handle class named like the learner's object's class (messages print ``type(x).__name__``), with the
    special methods that class has (so ``callable``, ``hasattr(x, "__enter__")`` and ``len`` answer as they would)."""
    key = (name, specials)
    if key not in _types:
        _types[key] = type(name if name.isidentifier() else "object", (Handle,),
                           {"__slots__": (), "__module__": "learner", **{s: _special(s) for s in specials}})
    return _types[key]


def _make_handle(number: int, meta: dict) -> Handle:
    specials = tuple(s for s in meta.get("specials", ()) if s in _SPECIAL)
    proxy = object.__new__(_handle_type(str(meta.get("name", "object")), specials))
    object.__setattr__(proxy, "_tfm_id", number)
    object.__setattr__(proxy, "_tfm_meta", meta)
    return proxy


def _no_handle(data: dict) -> Any:
    raise WireError("a class on the wire must be importable")


def _op(kind: str, proxy: Handle, *payload: Any) -> Any:
    if _session is None:
        raise RuntimeError("a grading handle used outside a grading session")
    return _session.op(kind, proxy, payload)


class _Session:
    """What record and replay share: the handles, the checker's own objects seen so far, the fingerprints."""

    def __init__(self) -> None:
        self.handles: list[Handle] = []
        self.owned = Owned()
        self.owned.is_handle = lambda value: isinstance(value, Handle)

    def other(self, obj: Any) -> str:
        """Names what :func:`._wire.digest` cannot read: a handle by its number, the rest by its type."""
        return f"H{obj._tfm_id}" if isinstance(obj, Handle) else f"O{type(obj).__qualname__}"

    def fingerprint(self, payload: tuple) -> str:
        return digest(payload, self.other)

    def handle(self, data: dict) -> Any:
        if "own" in data:
            return self.owned.get(data["own"])
        if "H" not in data:
            raise WireError("not a value on the wire")
        number = data["H"]
        if number < len(self.handles):
            return self.handles[number]
        if number != len(self.handles) or not isinstance(data.get("new"), dict):
            raise WireError("a handle out of sequence")
        self.handles.append(_make_handle(number, data["new"]))
        return self.handles[-1]


class _Recorder(_Session):
    """The kernel's side: performs each operation on the real object and writes what came back."""

    def __init__(self) -> None:
        super().__init__()
        self.real: list[Any] = []
        self.ids: dict[int, int] = {}
        self.entries: list[dict] = []
        self.size = 0
        self.quiet = 0  # inside learner_side: operations act directly and are not written
        self.owned.encoder = lambda value: self.wrap(value)[1]

    def wrap(self, value: Any) -> tuple[Any, Any]:
        """(what the checker gets, what the trace keeps) for a result."""
        own = self.owned.index_of(value)
        if own is not None:
            return value, {"own": own}
        if isinstance(value, tuple) and type(value) is tuple or type(value) is list:
            pairs = [self.wrap(v) for v in value]
            return type(value)(p[0] for p in pairs), {type(value).__name__: [p[1] for p in pairs]}
        if type(value) is dict:
            pairs = [(self.wrap(k), self.wrap(v)) for k, v in value.items()]
            return {k[0]: v[0] for k, v in pairs}, {"dict": [[k[1], v[1]] for k, v in pairs]}
        try:
            return value, encode(value, _not_value)
        except _NotValue:
            pass
        if id(value) in self.ids:
            number = self.ids[id(value)]
            return self.handles[number], {"H": number}
        return self.new_handle(value)

    def new_handle(self, value: Any) -> tuple[Handle, dict]:
        number = len(self.handles)
        klass = type(value)
        cls = next((c for c in (klass, *klass.__mro__[1:]) if importable_name(c)), object)
        meta = {"name": klass.__name__, "cls": {"ref": importable_name(cls)},
                "specials": [s for s in _SPECIAL if hasattr(klass, s)]}
        self.ids[id(value)] = number
        self.real.append(value)
        self.handles.append(_make_handle(number, meta))
        return self.handles[-1], {"H": number, "new": meta}

    def unwrap(self, value: Any) -> Any:
        """``value`` with the learner's real objects in place of handles; a container that holds no handle is passed
        as it is (the learner's code may be meant to fill it: a cache, a store)."""
        if isinstance(value, Handle):
            return self.real[value._tfm_id]
        if type(value) in (tuple, list):
            items = [self.unwrap(v) for v in value]
            return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
        if type(value) is dict:
            items = {k: self.unwrap(v) for k, v in value.items()}
            return value if all(items[k] is v for k, v in value.items()) else items
        return value

    def op(self, kind: str, proxy: Handle, payload: tuple) -> Any:
        real = self.real[proxy._tfm_id]
        if self.quiet:
            return _perform(kind, real, self.unwrap(payload))
        entry: dict[str, Any] = {"op": kind, "h": proxy._tfm_id, "in": self.fingerprint(payload)}
        self.owned.register(payload)
        return self.run(entry, lambda: _perform(kind, real, self.unwrap(payload)), wrap=True)

    def side(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        if self.quiet:
            return fn(*args, **kwargs)
        entry: dict[str, Any] = {"op": "side", "h": -1, "in": self.fingerprint((args, kwargs))}
        self.owned.register((args, kwargs))

        def run() -> Any:
            self.quiet += 1
            try:
                return fn(*[self.unwrap(a) for a in args], **{k: self.unwrap(v) for k, v in kwargs.items()})
            finally:
                self.quiet -= 1
        return self.run(entry, run, wrap=False)

    def run(self, entry: dict, action: Callable[[], Any], wrap: bool) -> Any:
        reads = entry["op"] in _READS
        if not reads:
            self.owned.refresh()
        rng = torch.get_rng_state()
        try:
            result = action()
        except BaseException as exc:
            entry["raise"] = exception_to(exc)
            self.close(entry, rng)
            raise
        if wrap:
            view, entry["out"] = self.wrap(result)
        else:
            view, entry["out"] = result, encode(result, _no_handle)
        self.close(entry, rng)
        return view

    def close(self, entry: dict, rng: torch.Tensor) -> None:
        entry["state"] = [] if entry["op"] in _READS else self.owned.changes()
        after = torch.get_rng_state()
        if not torch.equal(after, rng):
            entry["rng"] = encode(after, _no_handle)
        self.size += len(json.dumps(entry))
        if self.size > TRACE_LIMIT:
            raise MemoryError(f"the check's record passed {TRACE_LIMIT >> 20} MB")
        self.entries.append(entry)


class _Replayer(_Session):
    """The grader's side: answers each operation from the trace."""

    def __init__(self, entries: list) -> None:
        super().__init__()
        self.entries, self.at = entries, 0
        self.passed: list[str] = []  # the checker's success lines

    def next(self, kind: str, number: int, payload: tuple) -> dict:
        if self.at >= len(self.entries):
            raise Divergence(f"the check asked for more ({kind}) than the kernel recorded")
        entry = self.entries[self.at]
        self.at += 1
        if not isinstance(entry, dict) or entry.get("op") != kind or entry.get("h") != number:
            raise Divergence(f"step {self.at}: the check did {kind} where the kernel recorded "
                             f"{entry.get('op') if isinstance(entry, dict) else entry!r}")
        if entry.get("in") != self.fingerprint(payload):
            raise Divergence(f"step {self.at} ({kind}): its inputs differ from the ones the kernel recorded")
        self.owned.register(payload)
        return entry

    def answer(self, entry: dict) -> Any:
        """The recorded result (decoded first: handles are numbered in the order the kernel met them), the changes
        to the checker's objects, the generator's state; then the result, or the recorded exception."""
        result = decode(entry.get("out"), self.handle) if "raise" not in entry else None
        self.owned.apply(entry.get("state", []), lambda d: decode(d, self.handle))
        if entry.get("rng") is not None:
            torch.set_rng_state(decode(entry["rng"], _no_handle))
        if "raise" in entry:
            raise exception_from(entry["raise"])
        return result

    def op(self, kind: str, proxy: Handle, payload: tuple) -> Any:
        return self.answer(self.next(kind, proxy._tfm_id, payload))

    def side(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        return self.answer(self.next("side", -1, (args, kwargs)))


def learner_side(fn: Callable) -> Callable:
    """``fn`` (the checker's own code) run where the learner's objects live, its result kept whole: for what the
    learner's code does while the checker runs its own objects (hooks, gradients flowing back, memory peaks). In a
    notebook it is ``fn`` itself. Its result must be plain data (tensors, numbers, containers of them)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs) if _session is None else _session.side(fn, args, kwargs)
    run.__name__ = getattr(fn, "__name__", "learner_side")
    return run


def passed_line(line: str) -> bool:
    """While replaying, keep the checker's success line for the grader (True); else False (the checker prints it)."""
    if isinstance(_session, _Replayer):
        _session.passed.append(line)
        return True
    return False


def recording() -> bool:
    """Whether the checker is being recorded in a submission's kernel (source rules wait for the replay)."""
    return isinstance(_session, _Recorder)


def replaying() -> bool:
    """Whether the checker is being replayed in the grader."""
    return isinstance(_session, _Replayer)


_rules.grading_mode = lambda: "record" if recording() else "replay" if replaying() else None
_rules.handle_number = lambda obj: obj._tfm_id if isinstance(obj, Handle) else None


@contextlib.contextmanager
def _active(session: _Session) -> Iterator[None]:
    global _session
    _session = session
    try:
        yield
    finally:
        _session = None


def _name(checker: Callable) -> str:
    name = getattr(checker, "__name__", "")
    if not (isinstance(name, str) and name.startswith("check_")):
        raise Divergence(f"not a checker: {checker!r}")
    return name


def record(checker: Callable, answers: list[Any], kwargs: dict, path: str, name: str | None = None,
           salt: int | None = None) -> None:
    """In the kernel: run the checker function ``checker(*answers, **kwargs)`` with the answers behind handles; write the trace to ``path``
    (JSON). The checker's own verdict here is not the grade: the grader replays the trace."""
    session = _Recorder()
    start = snapshot_globals()
    args = [session.new_handle(a)[0] for a in answers]
    metas = [h._tfm_meta for h in args]
    outcome = "passed"
    with _active(session):
        try:
            with salted(salt):
                checker(*args, **kwargs)
        except BaseException as exc:  # the replay decides; this only notes how the record ended
            outcome = f"{type(exc).__name__}: {exc}"[:500]
    data = {"version": 1, "checker": name or _name(checker), "start": start, "answers": metas, "entries": session.entries,
            "record": outcome}
    temporary = f"{path}.part"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(temporary, path)


def replay(checker: Callable, trace: Any, kwargs: dict, answers_source: str | None = None,
           answer_names: list[str] | None = None, salt: int | None = None) -> tuple[bool, str]:
    """In the grader: replay ``checker`` from ``trace`` (read from the kernel's JSON); returns (passed, message: the
    checker's success line, or the mistake it names).
    ``answers_source`` is the learner's code as the grader extracted it and ``answer_names`` the names the check
    call passes, for the source rules; ``salt`` the one the kernel was given (:mod:`._salt`)."""
    passed, message, *_ = replay_scored(checker, trace, kwargs, answers_source, answer_names, salt)
    return passed, message


def replay_scored(checker: Callable, trace: Any, kwargs: dict, answers_source: str | None = None,
                  answer_names: list[str] | None = None,
                  salt: int | None = None) -> tuple[bool, str, float, Tally | None]:
    """:func:`replay`, with the credit the replayed checker earned (1 when it passed; the fraction of its named
    checks it passed, :mod:`._parts`; 0 for a record that does not replay) and its tally (None without named
    checks). The credit comes from the checker's own steps here, in the grader's process."""
    with _lock, no_collection():
        start = snapshot_globals()
        tally: Tally | None = None
        try:
            if not isinstance(trace, dict) or trace.get("version") != 1 or trace.get("checker") != _name(checker):
                raise Divergence("the kernel's record is not this check's")
            restore_globals(trace.get("start"))
            session = _Replayer(list(trace.get("entries") or []))
            metas = trace.get("answers") or []
            if answer_names is not None and len(metas) != len(answer_names):
                raise Divergence(f"the record holds {len(metas)} answers, the check takes {len(answer_names)}")
            args = [session.handle({"H": i, "new": meta}) for i, meta in enumerate(metas)]
            with _active(session), _rules.source(answers_source, answer_names), salted(salt):
                # the checker itself, under any wrapper put in front of it
                error, tally = scored(inspect.unwrap(checker), *args, **kwargs)
            if error is not None:
                raise error
            if session.at != len(session.entries):
                raise Divergence(f"the check ended after {session.at} of the {len(session.entries)} recorded steps")
            return True, "\n".join(session.passed), 1.0, tally
        except Mistake as exc:
            return False, str(exc), credit(exc, tally), tally
        except (Divergence, WireError) as exc:
            return False, f"the grader could not replay the check from the kernel's record ({exc})", 0.0, None
        except BaseException as exc:  # a checker's own failure: the checks it passed before, with the reason
            return False, f"the check stopped with {type(exc).__name__}: {exc}", credit(exc, tally), tally
        finally:
            restore_globals(start)
