"""The language-model recipe (chapter 19): AdamW with parameter groups, warm-up + cosine, clipping, accumulation.

    optimizer = make_adamw(model)                               # decay on weight matrices only
    history = train_recipe(model, data, steps=300, batch_size=16)

**Parameter groups.** AdamW (Loshchilov & Hutter, 2019) shrinks every weight a little at each step, apart from
the gradient: ``w <- w - lr * (adam_update + weight_decay * w)``. That pull towards zero suits the weight
matrices of the linear layers. It does not suit the gains and biases of the norms and the biases of the linear
layers (a gain pulled to zero switches its feature off, and none of them can make the model memorise), nor the
embeddings (a row of a token seen rarely gets few gradients and would be pulled to zero between them). So they go
in a second group with ``weight_decay=0``. A tied generator is the embedding matrix: it counts once, undecayed.

**Schedule.** :func:`tfm_lesson.train.lm.lm_rate`: a linear warm-up to the peak rate, then a cosine decay to a tenth
of it. **Clipping**: the gradient's global norm is scaled down to ``clip`` when it is larger.

**Gradient accumulation.** :func:`accumulate_gradients` cuts a batch into ``micro_batches`` slices, runs forward
and backward on each, and weights each slice's mean loss by its share of the targets, so that the summed gradient
is the gradient of the whole batch's mean loss: one optimiser step on it equals the large batch's step, to
rounding, with a fraction of the activation memory.

The numbers (peak rate, warm-up fraction, decay, betas, clip) live in :data:`tfm_lesson.train.recipes.LM_RECIPE`.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
from torch import Tensor, nn

from ..data.corpus import random_windows
from ..device import auto_threads, cpu_threads, default_device
from .lm import LMData, lm_loss, lm_rate
from ..positional import LearnedPositionalEncoding
from .recipes import LM_RECIPE

__all__ = ["parameter_groups", "make_adamw", "accumulate_gradients", "recipe_step", "train_recipe"]


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: ``{"params": matrices, "weight_decay": weight_decay}`` (the weights of linear layers)
    and ``{"params": rest, "weight_decay": 0.0}`` (embeddings, learned positions, norms' gains and shifts,
    biases). Each parameter appears once, a tied matrix too (as the embedding it is)."""
    if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
    no_decay: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, (nn.Embedding, LearnedPositionalEncoding)):
            for p in module.parameters():
                no_decay[id(p)] = p
    decay, rest = [], []
    for p in model.parameters():  # each shared tensor once
        if not p.requires_grad:
            continue
        (rest if id(p) in no_decay or p.dim() < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": float(weight_decay)}, {"params": rest, "weight_decay": 0.0}]


def make_adamw(model: nn.Module, lr: float = LM_RECIPE["peak_lr"], weight_decay: float = LM_RECIPE["weight_decay"],
               betas: tuple[float, float] = LM_RECIPE["betas"], eps: float = LM_RECIPE["eps"]) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` over :func:`parameter_groups`."""
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=betas, eps=eps)


def accumulate_gradients(model: nn.Module, x: Tensor, y: Tensor, micro_batches: int = 1,
                         loss_fn: Callable[[nn.Module, Tensor, Tensor], Tensor] = lm_loss) -> float:
    """Add to ``.grad`` the gradient of the mean loss over the whole batch ``x, y`` ``(batch, len)``, computed in
    ``micro_batches`` slices of the batch; returns that mean loss. Each slice's mean loss is weighted by its
    share of the rows, so unequal slices (batch not divisible) are weighted right too."""
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive int, got {micro_batches!r}")
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"x and y must both be (batch, len), got {tuple(x.shape)} and {tuple(y.shape)}")
    if micro_batches > x.size(0):
        raise ValueError(f"micro_batches={micro_batches} is more than the batch's {x.size(0)} rows")
    total = 0.0
    for xs, ys in zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches)):
        share = xs.size(0) / x.size(0)
        loss = loss_fn(model, xs, ys) * share  # this slice's part of the batch mean
        loss.backward()
        total += loss.item()
    return total


def recipe_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, lr: float,
                clip: float | None = LM_RECIPE["clip"], micro_batches: int = 1) -> tuple[float, float]:
    """One optimiser step of the recipe at learning rate ``lr``: gradients (accumulated over ``micro_batches``),
    clipping to global norm ``clip`` (``None``: none), AdamW. Returns ``(loss, gradient norm before clipping)``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss = accumulate_gradients(model, x, y, micro_batches)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    norm = nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
    optimizer.step()
    return loss, float(norm)


def train_recipe(model: nn.Module, data: LMData, steps: int, batch_size: int, max_len: int | None = None,
                 peak_lr: float = LM_RECIPE["peak_lr"], warmup: float = LM_RECIPE["warmup"],
                 weight_decay: float = LM_RECIPE["weight_decay"], clip: float | None = LM_RECIPE["clip"],
                 micro_batches: int = 1, seed: int = 0, device: torch.device | str | None = None,
                 threads: int | None | str = "auto") -> dict[str, list]:
    """Train ``model`` for ``steps`` steps of ``batch_size`` random windows of ``data.train`` with the recipe.

    Seeded (the windows come from a generator seeded with ``seed``), with the course's thread rule
    (:func:`tfm_lesson.device.auto_threads`). Returns ``step``, ``loss``, ``lr``, ``grad_norm``, ``seconds``.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    device = torch.device(device) if device is not None else default_device()
    max_len = max_len or model.config.max_len
    model.to(device).train()
    optimizer = make_adamw(model, peak_lr, weight_decay)
    generator = torch.Generator().manual_seed(seed)
    history: dict[str, list] = {"step": [], "loss": [], "lr": [], "grad_norm": [], "seconds": []}
    start = time.perf_counter()
    with cpu_threads(auto_threads(model, device, threads)):
        for step in range(steps):
            rate = lm_rate(step / steps, peak_lr, warmup, LM_RECIPE["final_fraction"])
            x, y = random_windows(data.train, batch_size, max_len, generator, device)  # (batch, max_len) each
            loss, norm = recipe_step(model, optimizer, x, y, rate, clip, micro_batches)
            if not torch.isfinite(torch.tensor(loss)):
                raise FloatingPointError(f"the loss became {loss} at step {step + 1}: lower peak_lr")
            for key, value in (("step", step + 1), ("loss", loss), ("lr", rate), ("grad_norm", norm),
                               ("seconds", time.perf_counter() - start)):
                history[key].append(value)
    model.eval()
    return history
