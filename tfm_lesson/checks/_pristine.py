"""Pristine inputs: the learner's code gets copies of its inputs, and changing one in place is named.

Every checker hands its inputs to the learner's code through :func:`._harness.call`, which uses this module: the
learner's function receives *copies* (tensors cloned, lists, tuples, dicts and sets copied all the way down), so the
checker's own tensors, from which it computes the expected result, stay as they were whatever the answer does to
its arguments. After the call the copies are compared with the originals; an answer that changed one in place
(``query.mul_(2)``, ``scores[mask] = 0``, ``tokens.append(...)``) fails with a message that names the argument, even
when its output is right: the caller's tensor is not the function's to change.

Configurations (dataclasses such as ``GPTConfig``) are copied and compared field by field too. Other objects
(modules, optimizers, caches) are handed over as they are: changing them is what some exercises ask for.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import Any, Callable, Collection

import torch
from torch import Tensor

from ._mistake import Mistake

__all__ = ["copy_inputs", "argument_names", "changed_in_place", "check_unchanged"]


def copy_inputs(value: Any) -> Any:
    """``value`` with every tensor cloned (the autograd graph still reaches the original) and every list, tuple, dict
    and set copied; any other object is the same object."""
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, list):
        return [copy_inputs(v) for v in value]
    if isinstance(value, tuple):
        items = [copy_inputs(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: copy_inputs(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return type(value)(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a config: plain values, copied whole
        return copy.deepcopy(value)
    return value


def _same_tensor(a: Tensor, b: Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.device.type == "meta":
        return True
    a, b = a.detach(), b.detach()
    if a.is_floating_point() or a.is_complex():
        both_nan = torch.isnan(a) & torch.isnan(b)
        return bool(((a == b) | both_nan).all())
    return bool(torch.equal(a, b))


def changed_in_place(original: Any, copy: Any) -> str | None:
    """How ``copy`` (what the learner's code received) now differs from ``original``, or None when it does not."""
    if dataclasses.is_dataclass(original) and not isinstance(original, type) and copy is not original:
        for field in dataclasses.fields(original):
            before, after = getattr(original, field.name), getattr(copy, field.name, None)
            if before != after:
                return f"its field {field.name} went from {before!r} to {after!r}"
        return None
    if isinstance(original, Tensor):
        if not isinstance(copy, Tensor):
            return "it is no longer a tensor"
        if copy.shape != original.shape:
            return f"its shape went from {tuple(original.shape)} to {tuple(copy.shape)}"
        if copy.dtype != original.dtype:
            return f"its dtype went from {original.dtype} to {copy.dtype}"
        if not _same_tensor(original, copy):
            where = (original.detach() != copy.detach()) & ~(
                torch.isnan(original.detach()) & torch.isnan(copy.detach())
                if original.is_floating_point() else torch.zeros_like(original, dtype=torch.bool))
            return f"{int(where.sum())} of its {original.numel()} values changed"
        return None
    if isinstance(original, (list, tuple)):
        if len(copy) != len(original):
            return f"its length went from {len(original)} to {len(copy)}"
        for i, (o, c) in enumerate(zip(original, copy)):
            why = changed_in_place(o, c)
            if why:
                return f"item {i}: {why}"
        return None
    if isinstance(original, dict):
        if set(copy) != set(original):
            return f"its keys went from {sorted(map(str, original))} to {sorted(map(str, copy))}"
        for k in original:
            why = changed_in_place(original[k], copy[k])
            if why:
                return f"entry {k!r}: {why}"
        return None
    if isinstance(original, (set, frozenset)):
        return None if copy == original else f"it went from {len(original)} to {len(copy)} elements"
    return None


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """The learner's own names for the positional arguments ``args`` (``argument 1``, ... when unknown)."""
    names = [f"argument {i + 1}" for i in range(len(args))]
    try:
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return names
    for i, param in enumerate(params[:len(args)]):
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            break
        if param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names[i] = param.name
    return names


def check_unchanged(fn: Callable, what: str, originals: tuple, copies: tuple, kw_originals: dict, kw_copies: dict,
                    mutable: Collection[int | str] = ()) -> None:
    """Raise a :class:`Mistake` naming the first argument whose copy the learner's code changed in place."""
    names = argument_names(fn, originals, kw_originals)
    pairs = [(i, names[i], o, c) for i, (o, c) in enumerate(zip(originals, copies))]
    pairs += [(k, k, kw_originals[k], kw_copies[k]) for k in kw_originals]
    for key, name, original, copy in pairs:
        if key in mutable:
            continue
        why = changed_in_place(original, copy)
        if why:
            raise Mistake(f"{what} changed `{name}` in place: {why}. The caller's `{name}` is not yours to change (it "
                          "may be used again, and the checker compares with the untouched inputs). "
                          + _instead(name, original))


def _instead(name: str, original: Any) -> str:
    """How to leave ``name`` alone, for a tensor or for a container."""
    if isinstance(original, Tensor):
        return (f"Build a new tensor instead: `{name} = {name} * 2` or `{name}.mul(2)` make a new one, while "
                f"`{name} *= 2`, `{name}.mul_(2)`, `{name}.masked_fill_(...)` or `{name}[...] = ...` overwrite the "
                f"caller's (`{name} = {name}.clone()` first if you must write into it)")
    kind = type(original).__name__
    if dataclasses.is_dataclass(original):
        return (f"Read its fields without setting them; for a changed configuration make a new one: "
                f"`dataclasses.replace({name}, field=value)`")
    return (f"Build and return a new {kind} instead (`{name}.append(...)`, `{name}[:] = ...`, `{name}.sort()` or "
            f"`+=` change the caller's; start from `{kind}({name})` if you must)")
