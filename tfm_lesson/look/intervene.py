"""Interventions on one attention head (chapter 17): read a head's output, replace it by zero or its mean
(:func:`ablate_head`), or copy it from a clean run into a corrupted one (:func:`patch_head`); and :func:`spearman`,
the rank correlation that compares what attention shows with what an intervention measures.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor, nn

from .._validate import check_positive_int
from ..attention import MultiHeadAttention

__all__ = ["attention_modules", "ablate_head", "patch_head", "head_outputs", "spearman", "spearman_p_value"]


# -- interventions on one head ---------------------------------------------------------------------------------------
def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """The model's tfm_lesson attention modules, ``(name, module)``, in definition order (index = ``layer``)."""
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    if not found:
        raise ValueError(f"{type(model).__name__} contains no tfm_lesson MultiHeadAttention")
    return found


def _module(model: nn.Module, layer: int | str, head: int) -> MultiHeadAttention:
    found = attention_modules(model)
    if isinstance(layer, str):
        named = dict(found)
        if layer not in named:
            raise ValueError(f"layer {layer!r} is not an attention module of the model; one of {list(named)}")
        module = named[layer]
    elif isinstance(layer, int) and not isinstance(layer, bool) and 0 <= layer < len(found):
        module = found[layer][1]
    else:
        raise ValueError(f"layer must be an attention module's name or an index in [0, {len(found)}), got {layer!r}")
    if not isinstance(head, int) or isinstance(head, bool) or not 0 <= head < module.heads:
        raise ValueError(f"head must be an int in [0, {module.heads}), got {head!r}")
    return module


@contextmanager
def _on_heads(module: MultiHeadAttention, edit: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """While active, the merged head outputs entering ``w_o`` pass through ``edit`` as ``(batch, len, heads, d_k)``."""
    def hook(_mod, args):
        x = args[0]
        heads = x.view(*x.shape[:-1], module.heads, module.d_k)
        return (edit(heads).reshape(x.shape),) + tuple(args[1:])

    handle = module.w_o.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _shape_of(x: object) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


def _run(model: nn.Module, inputs) -> Tensor:
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    with torch.no_grad():
        out = model(*args)
    return out[0] if isinstance(out, tuple) else out


def _positions(positions, length: int) -> slice | list[int]:
    if positions is None:
        return slice(None)
    pos = [positions] if isinstance(positions, int) else list(positions)
    if not pos or not all(isinstance(p, int) and not isinstance(p, bool) and -length <= p < length for p in pos):
        raise ValueError(f"positions must be ints in [0, {length}) (query positions), got {positions!r}")
    return pos


def head_outputs(model: nn.Module, inputs, layer: int | str) -> Tensor:
    """Every head's output at ``layer`` for ``inputs`` (a tensor or a tuple for ``model(*inputs)``):
    ``(batch, len, heads, d_k)``, what enters ``w_o``."""
    module = _module(model, layer, 0)
    store: list[Tensor] = []

    def keep(h: Tensor) -> Tensor:
        store.append(h.detach().clone())
        return h

    with _on_heads(module, keep):
        _run(model, inputs)
    return store[-1]


def ablate_head(model: nn.Module, inputs, layer: int | str, head: int, mode: str = "mean",
                positions=None) -> Tensor:
    """``model(*inputs)`` with one head's output replaced at ``positions`` (default all): by zeros
    (``mode="zero"``) or by its mean over the batch and positions of this input (``"mean"``). Returns the output."""
    module = _module(model, layer, head)
    if mode not in ("zero", "mean"):
        raise ValueError(f"mode must be 'zero' or 'mean', got {mode!r}")

    def edit(h: Tensor) -> Tensor:
        h = h.clone()
        where = _positions(positions, h.size(1))
        if mode == "zero":
            h[:, where, head] = 0
        else:
            h[:, where, head] = h[:, :, head].mean(dim=(0, 1))
        return h

    model_was = model.training
    model.eval()
    try:
        with _on_heads(module, edit):
            return _run(model, inputs)
    finally:
        model.train(model_was)


def patch_head(model: nn.Module, clean, corrupted, layer: int | str, head: int, positions=None,
               patch: Callable[[Tensor, Tensor, int, int], Tensor] | None = None) -> Tensor:
    """Activation patching: ``model(*corrupted)`` with the output of ``head`` at ``layer`` replaced, at the query
    ``positions`` (default all), by its output on the ``clean`` input. Returns the patched output.

    ``clean`` and ``corrupted`` must have the same shapes (the same positions exist in both runs). ``patch``, if
    given, does the replacing, one position at a time: ``patch(clean_heads, corrupted_heads, head, position)`` ->
    a patched copy of ``corrupted_heads`` (both ``(batch, len, heads, d_k)``), chapter 17's exercise.
    """
    module = _module(model, layer, head)
    if patch is not None and not callable(patch):
        raise ValueError(f"patch must be a function patch(clean, corrupted, head, position), got "
                         f"{type(patch).__name__}")
    c_args = clean if isinstance(clean, tuple) else (clean,)
    x_args = corrupted if isinstance(corrupted, tuple) else (corrupted,)
    if len(c_args) != len(x_args) or any(a.shape != b.shape for a, b in zip(c_args, x_args)):
        raise ValueError(f"clean and corrupted inputs must have the same shapes, got "
                         f"{[tuple(a.shape) for a in c_args]} and {[tuple(b.shape) for b in x_args]}")
    model_was = model.training
    model.eval()
    try:
        source = head_outputs(model, clean, layer)  # (batch, len, heads, d_k)

        def edit(h: Tensor) -> Tensor:
            where = _positions(positions, h.size(1))
            if patch is None:
                h = h.clone()
                h[:, where, head] = source[:, where, head]
                return h
            for position in (range(h.size(1)) if isinstance(where, slice) else where):
                h = patch(source, h, head, position)
                if not isinstance(h, Tensor) or h.shape != source.shape:
                    raise ValueError(f"patch must return a tensor shaped like the heads' outputs "
                                     f"{tuple(source.shape)}, got {_shape_of(h)}")
            return h

        with _on_heads(module, edit):
            return _run(model, corrupted)
    finally:
        model.train(model_was)


# -- rank correlation -------------------------------------------------------------------------------------------------
def _ranks(x: Tensor) -> Tensor:
    """Ranks 1..n, ties given the mean of the ranks they span."""
    order = x.argsort()
    ranks = torch.empty(len(x), dtype=torch.float64)
    ranks[order] = torch.arange(1, len(x) + 1, dtype=torch.float64)
    for value in x.unique():
        tied = x == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x, y) -> float:
    """Spearman's rank correlation of two equally long sequences (ties get mean ranks): the Pearson correlation
    of their ranks, in [-1, 1]. NaN-free: raises when either is constant or shorter than 2."""
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    y = torch.as_tensor(y, dtype=torch.float64).flatten()
    if x.numel() != y.numel():
        raise ValueError(f"x and y must have the same length, got {x.numel()} and {y.numel()}")
    if x.numel() < 2:
        raise ValueError("spearman needs at least two values")
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise ValueError("x and y must be finite")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    if denom == 0:
        raise ValueError("spearman is undefined when x or y is constant")
    return float((rx * ry).sum() / denom)


def spearman_p_value(x, y, samples: int = 200_000, seed: int = 0) -> float:
    """Two-sided p-value of :func:`spearman` under "no relation": the share of reorderings of ``y`` whose rank
    correlation with ``x`` is at least as far from 0 as the observed one. Exact (all n! reorderings) for n <= 9,
    else estimated from ``samples`` random reorderings (seeded). No normal approximation: it is poor for a few heads.
    """
    observed = spearman(x, y)  # checks the arguments
    rx = _ranks(torch.as_tensor(x, dtype=torch.float64).flatten())
    ry = _ranks(torch.as_tensor(y, dtype=torch.float64).flatten())
    rx, ry = rx - rx.mean(), ry - ry.mean()
    n = len(rx)
    if n <= 9:
        orders = torch.tensor(list(itertools.permutations(range(n))))  # (n!, n)
    else:
        check_positive_int(samples, "samples")
        gen = torch.Generator().manual_seed(seed)
        orders = torch.rand(samples, n, generator=gen).argsort(dim=-1)  # (samples, n): random reorderings
    rhos = (ry[orders] * rx).sum(dim=-1) / math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rhos.abs() >= abs(observed) - 1e-12).double().mean())
