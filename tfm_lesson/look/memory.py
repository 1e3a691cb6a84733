"""Peak memory of a piece of PyTorch code, measured by watching every tensor it creates (chapter 18).

Python's ``tracemalloc`` does not see PyTorch's allocations, and the process's resident size moves with the
allocator and everything else in the process. :func:`peak_tensor_bytes` runs a function under a
``TorchDispatchMode``, which sees every operator torch runs for it: each new tensor storage adds its bytes, and a
finalizer subtracts them when the storage is freed. The peak of that running sum is the most memory the function's
tensors held at one moment, beyond what existed before the call (its inputs are not counted, nor views of them).

What it cannot see: scratch buffers that a fused kernel allocates inside itself and frees before returning (the
tiles of a fused SDPA kernel, say). Those never leave the kernel; for them the process's resident size is the
honest witness: :func:`resident_peak_rise` (Linux) resets the process's high-water mark of resident memory, runs
the function, and reads how far the mark rose. It sees everything the process touched, kernel scratch included,
but also whatever else the process did meanwhile, in whole pages.
"""
from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["peak_tensor_bytes", "resident_peak_rise"]


class _TensorBytes(TorchDispatchMode):
    """Counts the bytes of live tensor storages created under it; keeps the largest count seen."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._owned: dict[int, int] = {}  # data pointer of a storage created here -> its bytes

    def _free(self, ptr: int) -> None:
        self.live -= self._owned.pop(ptr, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in tree_flatten((args, kwargs))[0] if isinstance(a, Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            ptr, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or ptr in inputs or ptr in self._owned:  # a view, an in-place result, or counted already
                continue
            self._owned[ptr] = size
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, ptr)
        return out


def peak_tensor_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """The largest number of bytes that tensors created by ``fn(*args, **kwargs)`` held at one moment.

    The result of ``fn`` is dropped at the end (its bytes count while it lives, as they would in a program).
    Tensors that existed before the call are not counted. Run it under ``torch.no_grad()`` to measure inference
    alone (with autograd on, what the backward pass keeps counts too)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable (the code to measure), got {type(fn).__name__}")
    tracker = _TensorBytes()
    with tracker:
        result = fn(*args, **kwargs)
        del result
    return tracker.peak


_PROC = Path("/proc/self")


def _high_water_kib() -> int:
    for line in (_PROC / "status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no VmHWM line: resident_peak_rise needs Linux")


def resident_peak_rise(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Bytes by which the process's peak resident memory rose while ``fn(*args, **kwargs)`` ran (Linux only).

    Writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark ``VmHWM`` to the current resident size;
    after the call, ``VmHWM`` minus that size is what the call added at its worst moment, counted in pages, with
    every allocation of the process (fused kernels' scratch buffers included). Raises ``RuntimeError`` where
    ``/proc`` does not offer this (macOS, Windows, an old kernel)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable (the code to measure), got {type(fn).__name__}")
    try:
        (_PROC / "clear_refs").write_text("5")
        before = _high_water_kib()
    except OSError as exc:
        raise RuntimeError(f"resident_peak_rise needs Linux's /proc/self/clear_refs: {exc}") from exc
    result = fn(*args, **kwargs)
    del result
    return (_high_water_kib() - before) * 1024
