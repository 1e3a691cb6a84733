"""What the figures accept: a tensor (any device, any grad), an array or a nested list, turned into a NumPy array
with a clear error naming the argument; axis labels from tokens; named series."""
from __future__ import annotations

from typing import Mapping

import numpy as np

__all__ = ["as_array", "squeeze_to", "token_labels"]


def as_array(x: object, name: str) -> np.ndarray:
    """Tensor (any device, any grad) / array / nested list -> NumPy array (float64, or bool); a clear error
    naming ``name`` otherwise."""
    try:
        import torch

        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu")
            if x.dtype == torch.bool:
                return x.numpy()
            if x.is_complex():
                raise TypeError(f"{name} must be real-valued, got dtype {x.dtype}")
            return x.to(torch.float64).numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a tensor or an array of numbers, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise TypeError(f"{name} must be a tensor or an array of numbers (ragged lists are not): {exc}") from exc
    if arr.dtype == bool:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def squeeze_to(arr: np.ndarray, ndim: int, name: str, expected: str, hint: str = "") -> np.ndarray:
    """Drop leading size-1 dimensions until ``arr`` has ``ndim`` dimensions; a clear error if it cannot."""
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be shaped {expected}, got shape {tuple(arr.shape)}{hint}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)}); expected {expected}")
    return arr


def token_labels(tokens: object, n: int, name: str, what: str) -> list[str] | None:
    """``tokens`` (a list, a space-separated str or a tensor of ids) as ``n`` axis labels, or ``None``."""
    if tokens is None:
        return None
    if isinstance(tokens, str):
        tokens = tokens.split()
    try:
        import torch

        if isinstance(tokens, torch.Tensor):
            tokens = tokens.detach().cpu().flatten().tolist()
    except ImportError:  # pragma: no cover
        pass
    labels = [str(t) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but the data has {n} {what}")
    return labels


def _check_mapping(values: object, name: str) -> Mapping:
    if not isinstance(values, Mapping) or not values:
        raise TypeError(f"{name} must be a non-empty dict of name -> values, got {type(values).__name__}"
                        + (" (empty)" if isinstance(values, Mapping) else ""))
    return values


def _float_list(values: object, name: str) -> list[float]:
    arr = as_array(values, name).astype(np.float64).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty; expected a 1-D sequence of numbers")
    return arr.tolist()
