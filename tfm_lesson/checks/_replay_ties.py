"""Identity among the checker's own tensors, as data: what :mod:`._replay_state` carries besides their values.

A module's values travel as a state dict; which *object* sits in each of its slots (a parameter or a buffer, by
path) does not. Yet a checker may ask exactly that: weight tying is ``generator.weight = embedding.weight`` (one
Parameter in two modules), and its classic slips are a separate Parameter on the same storage
(``nn.Parameter(embedding.weight)``, ``generator.weight.data = embedding.weight.data``) or a copy. So the tensors
the checker hands over are *known*, numbered in order of first sight (each handed tensor, and each slot of each
handed module); a new tensor the learner's code puts in a slot is numbered as the record meets it. A module's state
then lists each slot that no longer holds its own tensor, or that now shares another known tensor's storage:

    [path, known number or None (a new tensor, numbered now), view or None, requires_grad]

where a view is ``[known number of the storage's first holder, size, stride, storage offset from it]``. The replay
puts the grader's own tensors in the same slots (the very object, or a view of the grader's storage), so the grader
computes identity and storage facts on its own objects. Not carried: a slot the grader's module lacks (one the
learner's code added), and a tensor that goes back to storage of its own after sharing another's.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ._wire import WireError

__all__ = ["Known", "slots", "describe", "apply_ties"]


def slots(module: nn.Module) -> list[tuple[str, Tensor]]:
    """Every parameter and buffer of ``module`` by path, a shared one under each of its paths."""
    return [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]


def _storage(t: Tensor) -> tuple[str, int] | None:
    if t.device.type == "meta":
        return None
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # a sparse or other tensor without one storage
        return None
    return (t.device.type, storage.data_ptr()) if storage.nbytes() else None


class Known:
    """The tensors a record can name, numbered alike on both sides."""

    def __init__(self) -> None:
        self.tensors: list[Tensor | None] = []
        self.at: dict[int, int] = {}  # id -> its first number
        self.origin: dict[tuple[int, str], int] = {}  # (owned object, slot path) -> the number it held when handed
        self.base: dict[int, int | None] = {}  # number -> the storage holder it was a view of when first seen

    def add(self, t: Tensor | None) -> int:
        """Number ``t`` (a new number, even for a tensor seen before: the other side may hold two objects there)."""
        number = len(self.tensors)
        self.tensors.append(t)
        if t is not None:
            self.at.setdefault(id(t), number)
            self.base[number] = holder(t, self.storages(), number, self)
        return number

    def register(self, number: int, obj: Any) -> None:
        """The checker's object ``number``, seen for the first time: its tensors become known."""
        if isinstance(obj, Tensor) and id(obj) not in self.at:
            self.add(obj)
        elif isinstance(obj, nn.Module):
            for path, t in slots(obj):
                self.origin[(number, path)] = self.at[id(t)] if id(t) in self.at else self.add(t)

    def get(self, number: Any) -> Tensor:
        if not isinstance(number, int) or not 0 <= number < len(self.tensors) or self.tensors[number] is None:
            raise WireError("a reference to a tensor the checker never handed over")
        return self.tensors[number]  # type: ignore[return-value]

    def storages(self) -> dict[tuple[str, int], list[int]]:
        """Each storage the known tensors use now -> their numbers, in order."""
        out: dict[tuple[str, int], list[int]] = {}
        for j, t in enumerate(self.tensors):
            key = _storage(t) if t is not None else None
            if key is not None:
                out.setdefault(key, []).append(j)
        return out


def holder(t: Tensor, storages: dict, below: int, known: Known) -> int | None:
    """The first known tensor (numbered below ``below``) whose storage ``t`` shares, of the same dtype."""
    key = _storage(t)
    for j in storages.get(key, ()) if key is not None else ():
        other = known.tensors[j]
        if j >= below:
            break
        if other is not None and other is not t and other.dtype == t.dtype:
            return j
    return None


def describe(number: int, module: nn.Module, known: Known, register: bool) -> list:
    """The slots of the checker's object ``number`` that hold another tensor than their own or share another's
    storage (kernel side). ``register``: number the new tensors (writing a state), else describe them only (a
    fingerprint)."""
    out = []
    storages = known.storages()
    for path, t in slots(module):
        j = known.at.get(id(t))
        first = holder(t, storages, len(known.tensors) if j is None else j, known)
        view = None
        if first is not None and (j is None or first != known.base.get(j)):
            start = known.tensors[first].storage_offset()  # type: ignore[union-attr]
            view = [first, list(t.shape), list(t.stride()), t.storage_offset() - start]
        if j is None:
            if register:
                key = _storage(t)
                new = known.add(t)
                if key is not None:
                    storages.setdefault(key, []).append(new)
            out.append([path, None, view, bool(t.requires_grad)])
        elif j != known.origin.get((number, path)) or view is not None:
            out.append([path, j, view, bool(t.requires_grad)])
    return out


def _view(known: Known, view: Any) -> Tensor:
    if not (isinstance(view, list) and len(view) == 4 and all(isinstance(v, list) and len(v) <= 8 and
                                                              all(type(n) is int for n in v) for v in view[1:3])
            and type(view[3]) is int):
        raise WireError("a view must be [tensor, size, stride, offset]")
    first = known.get(view[0])
    try:
        return first.detach().as_strided(view[1], view[2], first.storage_offset() + view[3])
    except RuntimeError as exc:  # out of the storage's bounds, a negative stride
        raise WireError(f"a view that does not fit its tensor's storage ({exc})") from None


def apply_ties(module: nn.Module, ties: Any, known: Known) -> None:
    """Put in ``module``'s slots the grader's tensors that :func:`describe` named (replay side)."""
    if not isinstance(ties, list):
        raise WireError("a module's ties must be a list")
    for item in ties:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and type(item[3]) is bool):
            raise WireError("a tie must be [path, tensor, view, requires_grad]")
        path, number, view, grad = item
        owner_name, _, name = path.rpartition(".")
        try:
            owner = module.get_submodule(owner_name) if owner_name else module
        except AttributeError:
            owner = None
        table = None if owner is None else owner._parameters if name in owner._parameters else \
            owner._buffers if name in owner._buffers else None
        if table is None or table.get(name) is None:  # a slot the grader's module does not have
            if number is None:
                known.add(None)
            continue
        t = table[name] if number is None else known.get(number)
        if view is not None:
            shared = _view(known, view)
            if number is None:  # a new tensor on a known one's storage
                t = nn.Parameter(shared, requires_grad=grad) if table is owner._parameters else shared
            else:
                with torch.no_grad():
                    t.data = shared
        if table is owner._parameters and not isinstance(t, nn.Parameter):
            raise WireError("a parameter's slot must hold a Parameter")
        table[name] = t
        if number is None:
            known.add(t)
