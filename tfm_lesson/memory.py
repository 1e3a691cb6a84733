"""Peak memory of a piece of PyTorch code, measured by watching every tensor it creates (chapter 18).

Python's ``tracemalloc`` does not see PyTorch's allocations, and the process's resident size moves with the
allocator and everything else in the process. :func:`peak_tensor_bytes` runs a function under a
``TorchDispatchMode``, which sees every operator torch runs for it: each new tensor storage adds its bytes, and a
finalizer subtracts them when the storage is freed. The peak of that running sum is the most memory the function's
tensors held at one moment, beyond what existed before the call (its inputs are not counted, nor views of them).

What it cannot see: scratch buffers that a fused kernel allocates inside itself and frees before returning (the
tiles of a fused SDPA kernel, say). Those never leave the kernel; for them the process's resident size is the
honest witness (chapter 18 reads it too).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["peak_tensor_bytes"]


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
