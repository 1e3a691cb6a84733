"""What :mod:`._replay` carries besides results: the checker's own objects the learner's code was handed (and what it
did to them), exceptions, and the global state a checker starts from (random generators, default dtype, grad mode).
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import inspect
import random
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn

from ._mistake import learner_lines
from ._replay_ties import Known, apply_ties, describe
from ._wire import WireError, _import, digest, encode, importable_name

__all__ = ["Divergence", "Owned", "exception_to", "exception_from", "snapshot_globals", "restore_globals", "_perform"]


class Divergence(BaseException):
    """The replay asked for something other than what the kernel recorded (a forged or broken record)."""


def _no_handle(obj: Any) -> Any:
    raise WireError(f"{type(obj).__name__} is not plain data")


# the checker's own objects ------------------------------------------------------------------------------------------
_KINDS = (Tensor, nn.Module, torch.optim.Optimizer, torch.Generator, list, dict, set)


def _kept(obj: Any) -> bool:
    """One of the checker's objects whose changes the replay carries: a tensor, module, optimizer, generator, list,
    dict, or an object of this package (a cache, a configuration) with attributes."""
    if isinstance(obj, _KINDS):
        return True
    module = getattr(type(obj), "__module__", "") or ""
    return module.startswith("tfm_lesson.") and hasattr(obj, "__dict__") and not isinstance(obj, type) and \
        importable_name(type(obj)) is not None


def _tensor_bytes(h: Any, t: Tensor | None) -> None:
    if t is None:
        h.update(b"-")
        return
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.device.type != "meta" and t.numel():
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


class Owned:
    """The checker's objects seen among an operation's inputs, in order of first sight, with what each last was."""

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.where: dict[int, int] = {}
        self.seen: list[str] = []
        self.encoder: Callable[[Any], Any] = lambda v: encode(v, _no_handle)
        self.is_handle: Callable[[Any], bool] = lambda v: False  # the learner's objects are not the checker's
        self.known = Known()  # their tensors, for identity and shared storage (:mod:`._replay_ties`)

    def index_of(self, obj: Any) -> int | None:
        return self.where.get(id(obj)) if _kept(obj) else None

    def get(self, number: Any) -> Any:
        if not isinstance(number, int) or not 0 <= number < len(self.objects):
            raise WireError("a reference to an object the checker never handed over")
        return self.objects[number]

    def register(self, value: Any) -> None:
        if self.is_handle(value):
            return
        if _kept(value) and id(value) not in self.where:
            self.where[id(value)] = len(self.objects)
            self.objects.append(value)
            self.known.register(len(self.objects) - 1, value)
            self.seen.append(self.fingerprint(value))
        if type(value) in (tuple, list):
            for v in value:
                self.register(v)
        elif type(value) is dict:
            for v in value.values():
                self.register(v)

    def fingerprint(self, obj: Any) -> str:
        h = hashlib.sha1()
        if isinstance(obj, Tensor):
            _tensor_bytes(h, obj)
            _tensor_bytes(h, obj.grad if obj.is_leaf else None)
        elif isinstance(obj, nn.Module):
            h.update(repr(_plain_attributes(obj)).encode())
            for name, t in obj.state_dict(keep_vars=True).items():
                h.update(name.encode())
                _tensor_bytes(h, t)
            for name, p in obj.named_parameters():
                h.update(name.encode())
                _tensor_bytes(h, p.grad)
            h.update(repr(describe(self.where[id(obj)], obj, self.known, register=False)).encode())
        elif isinstance(obj, torch.Generator):
            _tensor_bytes(h, obj.get_state())
        elif isinstance(obj, torch.optim.Optimizer):
            h.update(digest(obj.state_dict(), _by_identity).encode())
        elif isinstance(obj, set):
            h.update(repr(sorted(map(repr, obj))).encode())
        elif not isinstance(obj, (list, dict)):
            h.update(digest(dict(vars(obj)), _by_identity).encode())
        else:
            h.update(digest(obj, _by_identity).encode())
        return h.hexdigest()

    def state(self, obj: Any, number: int) -> Any:
        """What ``obj`` (the checker's object ``number``) holds now, as data."""
        if isinstance(obj, Tensor):
            return encode(obj, _no_handle)
        if isinstance(obj, nn.Module):
            return {"sd": encode(dict(obj.state_dict()), _no_handle),
                    "grads": encode({n: p.grad for n, p in obj.named_parameters()}, _no_handle),
                    "attributes": _plain_attributes(obj), "ties": describe(number, obj, self.known, register=True)}
        if isinstance(obj, torch.optim.Optimizer):
            return encode(obj.state_dict(), _no_handle)
        if isinstance(obj, torch.Generator):
            return encode(obj.get_state(), _no_handle)
        if isinstance(obj, (list, dict, set)):
            return self.encoder(type(obj)(obj))
        return {"vars": self.encoder(dict(vars(obj)))}

    def refresh(self) -> None:
        """Look at every object again (kernel side, before the learner's code runs): what the checker itself changed
        since is not the learner's doing, and a change back to an earlier state must still be seen."""
        self.seen = [self.fingerprint(obj) for obj in self.objects]

    def changes(self) -> list:
        """``[number, state]`` of each object that changed since it was last looked at (kernel side)."""
        out = []
        for i, obj in enumerate(self.objects):
            now = self.fingerprint(obj)
            if now != self.seen[i]:
                out.append([i, self.state(obj, i)])
                self.seen[i] = self.fingerprint(obj)  # the new tensors it holds are known now
        return out

    def apply(self, changes: Any, decode: Callable[[Any], Any]) -> None:
        """Make the grader's objects what the kernel's became."""
        if not isinstance(changes, list):
            raise WireError("a record's changes must be a list")
        for item in changes:
            if not (isinstance(item, list) and len(item) == 2):
                raise WireError("a change must be [object, state]")
            obj = self.get(item[0])
            _apply(obj, item[1], decode, self.known)
            self.seen[item[0]] = self.fingerprint(obj)


def _load_state(module: nn.Module, state: Any) -> None:
    """Each parameter and buffer of ``state`` into ``module``: copied in place when its shape and dtype still fit,
    else put in its place (the learner's code may have replaced a weight by one of another shape)."""
    if not isinstance(state, dict):
        raise WireError("a module's state must be a dict")
    for key, value in state.items():
        owner_name, _, name = str(key).rpartition(".")
        try:
            owner = module.get_submodule(owner_name) if owner_name else module
        except AttributeError:
            continue
        current = getattr(owner, name, None)
        if not isinstance(value, Tensor) or not isinstance(current, Tensor):
            continue
        if current.shape == value.shape and current.dtype == value.dtype:
            with torch.no_grad():
                current.copy_(value)
        elif name in owner._parameters:
            owner._parameters[name] = nn.Parameter(value.detach(), requires_grad=current.requires_grad)
        elif name in owner._buffers:
            owner._buffers[name] = value.detach()


def _apply(obj: Any, state: Any, decode: Callable[[Any], Any], known: Known) -> None:
    if isinstance(obj, Tensor):
        new = decode(state)
        if not isinstance(new, Tensor):
            raise WireError("a tensor's new state must be a tensor")
        with torch.no_grad():
            if new.shape == obj.shape and new.dtype == obj.dtype:
                obj.copy_(new)
            else:
                obj.data = new.detach()
        if obj.is_leaf and (obj.requires_grad or new.grad is not None):
            obj.grad = new.grad
    elif isinstance(obj, nn.Module):
        if not isinstance(state, dict):
            raise WireError("a module's new state must be a dict")
        apply_ties(obj, state.get("ties", []), known)  # which tensor each slot holds, then their values
        _load_state(obj, decode(state.get("sd")))
        grads = decode(state.get("grads")) or {}
        for name, p in obj.named_parameters():
            p.grad = grads.get(name)
        for m, attributes in zip(obj.modules(), state.get("attributes", [])):
            for name, value in attributes.items():
                if name in vars(m) and type(value) in _PLAIN:
                    setattr(m, name, value)
    elif isinstance(obj, torch.optim.Optimizer):
        obj.load_state_dict(decode(state))
    elif isinstance(obj, torch.Generator):
        obj.set_state(decode(state))
    elif isinstance(obj, list):
        obj[:] = decode(state)
    elif isinstance(obj, (dict, set)):
        obj.clear()
        obj.update(decode(state))
    elif isinstance(state, dict) and isinstance(decode(state.get("vars")), dict):
        for name, value in decode(state["vars"]).items():
            if isinstance(name, str) and name.isidentifier():
                setattr(obj, name, value)
    else:
        raise WireError("a change to an object that is none of the kinds the replay carries")


_PLAIN = (bool, int, float, str)


def _plain_attributes(module: nn.Module) -> list[dict]:
    """Each sub-module's own plain attributes (``training``, a counter of calls, a flag), in ``modules()`` order."""
    return [{k: v for k, v in vars(m).items() if type(v) in _PLAIN} for m in module.modules()]


def _by_identity(obj: Any) -> str:
    return f"O{type(obj).__qualname__}{id(obj)}"


# the operations on a learner's object (kernel side) ------------------------------------------------------------------
class _NotValue(Exception):
    """Raised by :func:`_not_value`: what the wire cannot carry as data (the recorder makes it a handle)."""


def _not_value(obj: Any) -> Any:
    raise _NotValue


def _perform(kind: str, real: Any, payload: tuple) -> Any:
    """The operation itself, on the learner's real object (in the kernel)."""
    if kind == "getattr":
        return getattr(real, payload[0])
    if kind == "setattr":
        return setattr(real, payload[0], payload[1])
    if kind == "delattr":
        return delattr(real, payload[0])
    if kind == "call":
        return real(*payload[0], **payload[1])
    if kind == "iter":
        return list(real)
    if kind == "signature":
        return [[p.name, int(p.kind), p.default is not p.empty, _plain(p.default)]
                for p in inspect.signature(real).parameters.values()]
    if kind == "repr":
        return repr(real)
    if kind in ("deepcopy", "copy"):
        import copy

        return copy.deepcopy(real) if kind == "deepcopy" else copy.copy(real)
    if kind == "exit":
        return real.__exit__(None, None, None) if payload[0] is None else real.__exit__(
            type(exception_from(payload[0])), exception_from(payload[0]), None)
    return getattr(real, f"__{kind}__")(*payload)


def _plain(value: Any) -> Any:
    """A default value when it is plain data, else None (a signature's defaults are only told apart by presence)."""
    try:
        encode(value, _not_value)
        return value if not isinstance(value, torch.Tensor) else None
    except _NotValue:
        return None



# exceptions ---------------------------------------------------------------------------------------------------------
def exception_to(exc: BaseException | None, depth: int = 0) -> dict | None:
    """An exception as data: its nearest importable class, its own class name, its arguments and its cause."""
    if exc is None or depth > 3:
        return None
    cls = next(c for c in type(exc).__mro__ if importable_name(c) and issubclass(c, BaseException))
    try:
        args = encode(list(exc.args), _no_handle)
    except (WireError, Exception):  # arguments that are not data: the message
        args = encode([str(exc)], _no_handle)
    return {"cls": importable_name(cls), "name": type(exc).__name__, "args": args, "lines": learner_lines(exc)[-5:],
            "cause": exception_to(exc.__cause__ or exc.__context__, depth + 1)}


_made: dict[tuple[type, str], type] = {}


def exception_from(data: Any, depth: int = 0) -> BaseException:
    """The exception ``data`` describes (its class rebuilt by name when it was the learner's own)."""
    from ._wire import decode

    if not isinstance(data, dict) or depth > 3:
        raise WireError("not an exception on the wire")
    cls = _import(str(data.get("cls")))
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise WireError("not an exception class")
    name = str(data.get("name", cls.__name__))
    if name != cls.__name__ and name.isidentifier():
        cls = _made.setdefault((cls, name), type(name, (cls,), {"__module__": "learner"}))
    exc = cls.__new__(cls)
    args = decode(data.get("args"), _no_handle)
    exc.args = tuple(args) if isinstance(args, list) else (str(args),)
    lines = data.get("lines")
    if isinstance(lines, list):
        exc._tfm_learner_lines = [str(line)[:500] for line in lines[-5:]]
    if data.get("cause") is not None:
        exc.__cause__ = exception_from(data["cause"], depth + 1)
    return exc


# the state a checker starts from -------------------------------------------------------------------------------------
def snapshot_globals() -> dict:
    version, state, gauss = random.getstate()
    return {"rng": encode(torch.get_rng_state(), _no_handle), "dtype": str(torch.get_default_dtype()),
            "grad": torch.is_grad_enabled(), "py": [version, list(state), gauss], "threads": torch.get_num_threads()}


def restore_globals(start: Any) -> None:
    """Set the random generators, default dtype and grad mode from ``start`` (one thread, as a grading kernel has)."""
    from ._wire import decode

    if not isinstance(start, dict):
        raise Divergence("the record has no starting state")
    torch.set_rng_state(decode(start["rng"], _no_handle))
    dtype = {"torch.float32": torch.float32, "torch.float64": torch.float64, "torch.float16": torch.float16,
             "torch.bfloat16": torch.bfloat16}.get(start.get("dtype"), torch.float32)
    torch.set_default_dtype(dtype)
    torch.set_grad_enabled(bool(start.get("grad", True)))
    version, state, gauss = start["py"]
    random.setstate((int(version), tuple(int(s) for s in state), gauss))
    threads = int(start.get("threads", 1))
    if threads != torch.get_num_threads():
        torch.set_num_threads(max(1, threads))


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No cyclic garbage collection while a check replays (collected once before). A finalizer run in the middle of
    the replay can re-enter CPython 3.11's AST conversion and break the one under way ("SystemError: AST constructor
    recursion depth mismatch"): asyncio's "Task exception was never retrieved", left by a kernel the grader
    restarted, formats a traceback, which parses source lines with ``ast``, while the source rules parse the code.
    The same guard as every parse the grader makes (:mod:`tfm_lesson._syntax`), so threads do not undo each other's."""
    from .._syntax import no_collection as guarded

    gc.collect()
    with guarded():
        yield
