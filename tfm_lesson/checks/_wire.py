"""Plain data on the wire between a submission's kernel and the grader: what :mod:`._replay` records.

:func:`encode` turns a value into JSON-ready data and :func:`decode` turns it back, with no pickle anywhere: tensors
travel as dtype, shape and raw bytes (base64), containers as lists, and only a short list of *kinds* is ever
rebuilt (numbers, strings, tensors, parameters, sizes, dtypes, devices, NumPy scalars, classes and functions of
torch / this package by name). What the wire cannot carry as data is left to the caller (``other``): the replay
names it by a number (a *handle*) instead. Decoding refuses anything else, so a forged trace can only hand the
checker values the learner's code could have returned.
"""
from __future__ import annotations

import base64
import hashlib
import importlib
import json
import math
from typing import Any, Callable

import types

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["encode", "decode", "digest", "WireError", "importable_name"]

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.uint8,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)}
_SAFE_MODULES = ("torch", "tfm_lesson", "math", "builtins", "collections", "numpy", "types")
_TYPES = {types.FunctionType: "types:FunctionType", types.MethodType: "types:MethodType",
          types.BuiltinFunctionType: "types:BuiltinFunctionType", types.GeneratorType: "types:GeneratorType",
          types.ModuleType: "types:ModuleType"}
_NUMBER_BYTES = 1 << 28  # 256 MiB of tensor data in one value is more than any checker hands out


class WireError(BaseException):
    """A value that cannot travel (encoding), or data that is not a value (decoding). A BaseException, like the
    replay's :class:`~._replay_state.Divergence`: a checker's ``except Exception`` (which turns the learner's errors
    into hints) must not take a broken record for the learner's error."""


def importable_name(obj: Any) -> str | None:
    """``"module:qualname"`` when ``obj`` is a class (or a function of torch or this package) that importing by that
    name gives back; None otherwise (the learner's own classes and functions are never importable this way)."""
    if isinstance(obj, type) and obj in _TYPES:
        return _TYPES[obj]
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if not (isinstance(obj, type) or (callable(obj) and _function_allowed(module, qualname))):
        return None
    if module.split(".")[0] not in _SAFE_MODULES:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return None
    return f"{module}:{qualname}" if found is obj else None


def _function_allowed(module: str, qualname: str) -> bool:
    """Functions travel by name only from the model's side of torch and of this package (never a loader, a writer, a
    command line or the course's tools), so a forged record cannot hand the checker one of those."""
    if qualname.split(".")[-1] in ("load", "save", "main", "system", "run", "grade", "export"):
        return False
    if module == "math" or module in ("torch", "torch.nn.functional", "torch.functional", "torch.nn.init"):
        return True
    parts = module.split(".")
    return parts[0] == "tfm_lesson" and (len(parts) == 2 or parts[1] == "modern") and not parts[-1].startswith(
        ("_io", "device", "interop"))


def _import(name: str) -> Any:
    module, _, qualname = name.partition(":")
    if module.split(".")[0] not in _SAFE_MODULES:
        raise WireError(f"not a name the wire may carry: {name}")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not (isinstance(found, type) or _function_allowed(module, qualname)) or (
            module == "types" and found not in _TYPES):
        raise WireError(f"not a name the wire may carry: {name}")
    return found


def _tensor(t: Tensor, other: Callable[[Any], Any]) -> dict:
    meta = t.device.type == "meta"
    data = None
    if not meta:
        plain = t.detach().cpu().contiguous()
        if plain.is_conj():
            plain = plain.resolve_conj()
        data = base64.b64encode(plain.reshape(-1).view(torch.uint8).numpy().tobytes() if plain.numel() else b"").decode()
    grad = t.grad if t.is_leaf and t.requires_grad and not meta else None
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "data": data,
            "meta": meta, "rg": bool(t.requires_grad), "param": isinstance(t, nn.Parameter),
            "grad": None if grad is None else _tensor(grad, other)}


def encode(value: Any, other: Callable[[Any], Any]) -> Any:
    """``value`` as JSON-ready data; ``other(obj)`` encodes what is not a value (it returns JSON-ready data)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and type(value) is int:
        return value if abs(value) < 2 ** 53 else {"int": str(value)}
    if isinstance(value, float) and type(value) is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return {"np": value.dtype.str, "v": encode(value.item(), other)}
    if isinstance(value, Tensor) and type(value) in (Tensor, nn.Parameter):
        return {"T": _tensor(value, other)}
    if isinstance(value, torch.Size):
        return {"size": list(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if type(value) in (tuple, list):
        return {type(value).__name__: [encode(v, other) for v in value]}
    if type(value) is dict:
        return {"dict": [[encode(k, other), encode(v, other)] for k, v in value.items()]}
    if type(value) in (set, frozenset):
        items = [encode(v, other) for v in value]
        return {type(value).__name__: sorted(items, key=lambda d: json.dumps(d, sort_keys=True))}
    name = importable_name(value)
    if name is not None:
        return {"ref": name}
    return other(value)


def _decode_tensor(d: dict, find: Callable[[Any], Any]) -> Tensor:
    dtype = _DTYPES.get(d.get("dtype"))
    shape = d.get("shape")
    if dtype is None or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise WireError("a tensor with a dtype or shape the wire does not carry")
    if d.get("meta"):
        t = torch.empty(shape, dtype=dtype, device="meta")
    else:
        raw = base64.b64decode(d.get("data") or "")
        numel = math.prod(shape)
        if len(raw) != numel * torch.empty((), dtype=dtype).element_size() or len(raw) > _NUMBER_BYTES:
            raise WireError("a tensor whose bytes do not fill its shape")
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone() if numel \
            else torch.empty(shape, dtype=dtype)
    if d.get("param"):
        t = nn.Parameter(t, requires_grad=bool(d.get("rg")))
    elif d.get("rg") and (t.is_floating_point() or t.is_complex()):
        t.requires_grad_(True)
    if d.get("grad") is not None and t.requires_grad:
        t.grad = _decode_tensor(d["grad"], find)
    return t


def decode(data: Any, find: Callable[[dict], Any]) -> Any:
    """The value ``data`` stands for; ``find(d)`` rebuilds what ``other`` encoded (a handle). WireError for data
    that is none of the kinds above."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if not isinstance(data, dict) or len(data) == 0:
        raise WireError(f"not a value on the wire: {type(data).__name__}")
    if "T" in data:
        return _decode_tensor(data["T"], find)
    if "int" in data:
        return int(data["int"])
    if "float" in data:
        return float(data["float"])
    if "np" in data:
        return np.array(decode(data["v"], find), dtype=np.dtype(data["np"]))[()]
    if "size" in data:
        return torch.Size(int(n) for n in data["size"])
    if "dtype" in data:
        if data["dtype"] not in _DTYPES:
            raise WireError(f"unknown dtype {data['dtype']!r}")
        return _DTYPES[data["dtype"]]
    if "device" in data:
        return torch.device(str(data["device"]))
    if "tuple" in data:
        return tuple(decode(v, find) for v in data["tuple"])
    if "list" in data:
        return [decode(v, find) for v in data["list"]]
    if "set" in data or "frozenset" in data:
        items = [decode(v, find) for v in data.get("set", data.get("frozenset"))]
        return set(items) if "set" in data else frozenset(items)
    if "dict" in data:
        return {decode(k, find): decode(v, find) for k, v in data["dict"]}
    if "ref" in data:
        return _import(str(data["ref"]))
    return find(data)


def digest(value: Any, other: Callable[[Any], str]) -> str:
    """A short fingerprint of ``value`` (tensors by dtype, shape and bytes; modules by class and state), the same in
    the kernel and in the grader for the same inputs; ``other(obj)`` names anything else."""
    h = hashlib.sha1()

    def feed(v: Any) -> None:
        if isinstance(v, Tensor):
            h.update(f"T{v.dtype}{tuple(v.shape)}{v.requires_grad}".encode())
            if v.device.type != "meta":
                h.update(v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if v.numel() else b"")
        elif isinstance(v, nn.Module) and importable_name(type(v)):
            h.update(f"M{type(v).__qualname__}{v.training}".encode())
            for k, t in v.state_dict(keep_vars=True).items():
                h.update(k.encode())
                feed(t)
        elif isinstance(v, (tuple, list)):
            h.update(f"{type(v).__name__}{len(v)}".encode())
            for item in v:
                feed(item)
        elif isinstance(v, dict):
            h.update(f"d{len(v)}".encode())
            for k, item in v.items():
                feed(k)
                feed(item)
        elif v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device, torch.Size)):
            h.update(f"{type(v).__name__}:{v!r}".encode())
        else:
            h.update(other(v).encode())

    feed(value)
    return h.hexdigest()[:16]
