"""Training (paper, section 5): label smoothing, Adam with the warm-up schedule, gradient clipping, a loop
with a progress bar and evaluation, checkpoints. Runs on CPU or GPU (mixed precision there) and, launched
with ``torchrun``, on several processes with DistributedDataParallel.

    data = tfm_lesson.data.load_task("reverse")
    model = make_model(data.src_vocab, data.tgt_vocab, d_model=64, heads=4, layers=2, d_ff=128)
    history = train(model, data, steps=600, batch_size=64)
    save_checkpoint("reverse.pt", model, data.src_vocab, data.tgt_vocab)
"""
from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from ._checks import check_positive_int
from .device import default_device, seed_everything
from .model import Transformer, TransformerConfig

__all__ = ["LabelSmoothingLoss", "NoamSchedule", "noam_rate", "warmup_schedule", "make_optimizer", "make_model",
           "train", "evaluate", "save_checkpoint", "load_checkpoint", "Checkpoint", "distributed_info",
           "is_main_process", "cpu_threads"]


@contextmanager
def cpu_threads(threads: int | None):
    """Run the block with ``torch.set_num_threads(threads)`` (``None``: unchanged), then restore the count.

    Small models multiply small matrices, where intra-op parallelism gains nothing and costs a great deal on
    a busy CPU: measured on a shared 2-core machine, a training step of a 0.17 M-parameter model took 0.04 s
    with one thread and 0.08-0.6 s with two. :func:`train` and :func:`evaluate` therefore use one thread on
    CPU for models under 5 M parameters unless told otherwise (``threads=``).
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _auto_threads(model: nn.Module, device: torch.device, threads: int | None | str) -> int | None:
    if threads != "auto":
        return threads
    if device.type != "cpu":
        return None
    small = sum(p.numel() for p in model.parameters()) < 5_000_000
    return 1 if small else None


# ----------------------------------------------------------------------------------------------- the loss
class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against a smoothed target (paper, section 5.4: ``epsilon_ls = 0.1``).

    The target distribution puts ``1 - smoothing`` on the right token and spreads ``smoothing`` evenly over
    the whole vocabulary, so the loss of one position is

        (1 - smoothing) * (-log p[target]) + smoothing * mean_v(-log p[v]).

    Positions whose target is ``pad_id`` are ignored; ``reduction="mean"`` averages over the real tokens.
    The same numbers as ``F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad_id)``.
    """

    def __init__(self, smoothing: float = 0.1, pad_id: int = 0, reduction: str = "mean") -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.smoothing, self.pad_id, self.reduction = smoothing, pad_id, reduction

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        """logits ``(..., vocab)``, target ``(...)`` ids -> a scalar (or ``(...)`` with ``reduction="none"``)."""
        if logits.shape[:-1] != target.shape:
            raise ValueError(f"logits must be shaped (..., vocab) with ... = target's shape {tuple(target.shape)}, "
                             f"got {tuple(logits.shape)}")
        log_probs = logits.float().log_softmax(dim=-1)  # (..., vocab)
        keep = target != self.pad_id  # (...)
        nll = -log_probs.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1)  # (...) -log p[target]
        uniform = -log_probs.mean(dim=-1)  # (...) cross-entropy against the uniform distribution
        loss = ((1.0 - self.smoothing) * nll + self.smoothing * uniform) * keep
        if self.reduction == "none":
            return loss
        if self.reduction == "sum":
            return loss.sum()
        return loss.sum() / keep.sum().clamp(min=1)

    def extra_repr(self) -> str:
        return f"smoothing={self.smoothing}, pad_id={self.pad_id}"


# ------------------------------------------------------------------------------- optimiser and schedule
def noam_rate(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The paper's learning rate (section 5.3), step counted from 1:
    ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``."""
    step = max(1, step)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


class NoamSchedule:
    """``NoamSchedule(d_model, warmup, factor)(i)``: :func:`noam_rate` at step ``i + 1`` (``LambdaLR`` counts
    from 0). Linear warm-up for ``warmup`` steps, then decay as ``1 / sqrt(step)``."""

    def __init__(self, d_model: int, warmup: int = 4000, factor: float = 1.0) -> None:
        self.d_model = check_positive_int(d_model, "d_model")
        self.warmup = check_positive_int(warmup, "warmup")
        if not factor > 0:
            raise ValueError(f"factor must be > 0, got {factor!r}")
        self.factor = float(factor)

    def __call__(self, index: int) -> float:
        return noam_rate(index + 1, self.d_model, self.warmup, self.factor)

    def peak(self) -> float:
        """The largest rate, reached at step ``warmup``."""
        return noam_rate(self.warmup, self.d_model, self.warmup, self.factor)


def warmup_schedule(optimizer: torch.optim.Optimizer, d_model: int, warmup: int = 4000,
                    factor: float = 1.0) -> LambdaLR:
    """A ``LambdaLR`` that sets the optimiser's learning rate to the paper's formula at every step.

    The schedule gives the rate itself, so each parameter group's base rate is set to 1.0 first.
    Call ``scheduler.step()`` after each ``optimizer.step()``.
    """
    for group in optimizer.param_groups:
        group["lr"] = 1.0
        group["initial_lr"] = 1.0
    return LambdaLR(optimizer, NoamSchedule(d_model, warmup, factor))


def make_optimizer(model: nn.Module, lr: float = 1.0, betas: tuple[float, float] = (0.9, 0.98),
                   eps: float = 1e-9, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam with the paper's ``beta1 = 0.9, beta2 = 0.98, eps = 1e-9`` (section 5.3). ``lr=1.0`` because
    :func:`warmup_schedule` supplies the actual rate."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def make_model(src_vocab, tgt_vocab, d_model: int = 64, heads: int = 4, layers: int = 2, d_ff: int = 256,
               dropout: float = 0.1, max_len: int = 512, **overrides) -> Transformer:
    """A :class:`Transformer` sized for the vocabularies, with their pad ids. Source and target share one
    embedding matrix when the two vocabularies are equal (the toy tasks), otherwise each has its own."""
    share = len(src_vocab) == len(tgt_vocab) and list(src_vocab.itos) == list(tgt_vocab.itos)
    settings = dict(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), d_model=d_model, heads=heads, d_ff=d_ff,
                    num_encoder_layers=layers, num_decoder_layers=layers, dropout=dropout, max_len=max_len,
                    share_embeddings=share, tie_embeddings=True, src_pad_id=src_vocab.pad_id,
                    tgt_pad_id=tgt_vocab.pad_id)
    settings.update(overrides)
    return Transformer(TransformerConfig(**settings))


# --------------------------------------------------------------------------------------------- distributed
class DistributedInfo(NamedTuple):
    rank: int
    world_size: int
    local_rank: int

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def distributed_info() -> DistributedInfo:
    """Rank and world size from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    return DistributedInfo(rank, world, int(os.environ.get("LOCAL_RANK", str(rank))))


def is_main_process() -> bool:
    """True on rank 0 (or when not distributed): the process that prints and saves."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _setup_distributed(device: torch.device) -> tuple[DistributedInfo, torch.device]:
    """Join the process group torchrun prepared: gloo on CPU, nccl on GPU (one GPU per local rank)."""
    import torch.distributed as dist

    info = distributed_info()
    if not info.enabled:
        return info, device
    if device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return info, device


# ----------------------------------------------------------------------------------------------- evaluation
def evaluate(model: nn.Module, pairs: Sequence[tuple[str, str]], src_vocab, tgt_vocab, beam_size: int = 1,
             limit: int | None = None, batch_size: int = 128, length_penalty_alpha: float = 0.6,
             threads: int | None | str = "auto") -> dict:
    """Translate the sources of ``pairs`` and score them against the targets: exact match, BLEU, chrF (%).

    References are written as the target vocabulary's tokeniser would write them (``tgt_vocab.normalize``),
    so a perfect model scores 100 on every metric. ``limit`` scores only the first ``limit`` pairs.
    ``threads``: CPU threads while decoding (``"auto"``: see :func:`cpu_threads`).
    """
    from .decoding import translate
    from .metrics import scores

    pairs = list(pairs)[:limit] if limit else list(pairs)
    if not pairs:
        raise ValueError("evaluate: pairs is empty")
    device = next(model.parameters()).device if any(True for _ in model.parameters()) else torch.device("cpu")
    with cpu_threads(_auto_threads(model, device, threads)):
        hyps = translate(model, [s for s, _ in pairs], src_vocab, tgt_vocab, beam_size=beam_size,
                         batch_size=batch_size, length_penalty_alpha=length_penalty_alpha)
    refs = [tgt_vocab.normalize(t) for _, t in pairs]
    return scores(hyps, refs)


def _valid_loss(model: nn.Module, pairs, src_vocab, tgt_vocab, criterion: nn.Module, batch_size: int,
                device: torch.device) -> float:
    from .data import batches

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches(pairs, src_vocab, tgt_vocab, batch_size, shuffle=False, device=device):
            logits = model(batch.src, batch.tgt_in)
            n = int(batch.n_tokens)
            total += float(criterion(logits, batch.tgt_out)) * n
            count += n
    model.train(was_training)
    return total / max(count, 1)


# ------------------------------------------------------------------------------------------------ the loop
def _autocast(device: torch.device, amp: bool):
    """bf16 autocast where the GPU supports it, else fp16 (with a GradScaler); nothing on CPU."""
    if not (amp and device.type == "cuda"):
        return nullcontext(), None
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype), dtype


def _batch_stream(pairs, src_vocab, tgt_vocab, batch_size: int, seed: int, device: torch.device,
                  rank: int, world: int):
    """Endless stream of training batches, a new shuffle every epoch; batch ``i`` goes to rank ``i % world``."""
    from .data import batches

    epoch = 0
    while True:
        produced = False
        for i, batch in enumerate(batches(pairs, src_vocab, tgt_vocab, batch_size, shuffle=True,
                                          seed=seed + epoch, device=device)):
            if i % world == rank:
                produced = True
                yield batch
        if not produced:
            raise ValueError(f"the training split gives no batch for rank {rank} of {world}: too few pairs")
        epoch += 1


def train(model: Transformer, data, steps: int | None = None, minutes: float | None = None, batch_size: int = 64,
          warmup: int = 400, lr_factor: float = 1.0, peak_lr: float | None = None, smoothing: float = 0.1, clip: float | None = 1.0,
          device: torch.device | str | None = None, eval_every: int | None = None, eval_limit: int = 200,
          callback: Callable[[int, dict], None] | None = None, seed: int = 0, amp: bool = True,
          progress: bool = True, log: Callable[[str], None] | None = None,
          threads: int | None | str = "auto") -> dict[str, list]:
    """Train ``model`` on ``data.train`` (a :class:`tfm_lesson.data.ParallelData`) with teacher forcing.

    Stops after ``steps`` optimiser steps or ``minutes`` of wall clock, whichever comes first (at least one of
    them is required; a fixed ``steps`` is reproducible). Each step: a batch of ``batch_size`` pairs,
    label-smoothed loss, backward, gradients clipped to norm ``clip``, Adam step, warm-up schedule step.
    The rate follows the paper's formula times ``lr_factor``; ``peak_lr`` instead picks the factor that makes
    the rate at step ``warmup`` (its maximum) equal ``peak_lr`` — handy for small ``d_model`` and short warm-ups,
    where the bare formula peaks high (d_model=64, warmup=100: 0.0125).
    Every ``eval_every`` steps (and at the end) the valid split is scored: loss on all of it, exact match /
    BLEU / chrF with greedy decoding on its first ``eval_limit`` pairs; ``callback(step, history)`` is then
    called. On CUDA the forward pass runs under autocast (bf16, or fp16 with a GradScaler) when ``amp``.
    Under ``torchrun`` the model is wrapped in DistributedDataParallel and each rank takes every
    ``world_size``-th batch; only rank 0 shows progress and evaluates.

    Returns the history: ``step``, ``loss``, ``lr``, ``tokens`` per step, and ``valid_step``, ``valid_loss``,
    ``valid_exact_match``, ``valid_bleu``, ``valid_chrf`` per evaluation, plus ``seconds`` (one number).
    The model is left in eval mode on ``device``. ``threads``: CPU threads during training (``"auto"``: one
    for models under 5 M parameters on CPU, see :func:`cpu_threads`; ``None``: torch's setting).
    """
    if steps is None and minutes is None:
        raise ValueError("train: give steps (reproducible) or minutes (wall clock), or both")
    if steps is not None:
        check_positive_int(steps, "steps")
    if minutes is not None and not minutes > 0:
        raise ValueError(f"minutes must be > 0, got {minutes!r}")
    check_positive_int(batch_size, "batch_size")
    if eval_every is not None:
        check_positive_int(eval_every, "eval_every")
    if not data.train:
        raise ValueError("train: data.train is empty")

    device = torch.device(device) if device is not None else default_device()
    with cpu_threads(_auto_threads(model, device, threads)):
        return _train(model, data, steps, minutes, batch_size, warmup, lr_factor, peak_lr, smoothing, clip, device,
                      eval_every, eval_limit, callback, seed, amp, progress, log)


def _train(model, data, steps, minutes, batch_size, warmup, lr_factor, peak_lr, smoothing, clip, device,
           eval_every, eval_limit, callback, seed, amp, progress, log) -> dict[str, list]:
    dist_info, device = _setup_distributed(device)
    main = dist_info.rank == 0
    say = (log or print) if main else (lambda _msg: None)
    seed_everything(seed)
    model.to(device).train()
    net: nn.Module = model
    if dist_info.enabled:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    criterion = LabelSmoothingLoss(smoothing, model.config.tgt_pad_id)
    optimizer = make_optimizer(model)
    if peak_lr is not None:
        if not peak_lr > 0:
            raise ValueError(f"peak_lr must be > 0, got {peak_lr!r}")
        lr_factor = peak_lr / noam_rate(warmup, model.config.d_model, warmup)
    scheduler = warmup_schedule(optimizer, model.config.d_model, warmup, lr_factor)
    autocast, amp_dtype = _autocast(device, amp)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
    stream = _batch_stream(data.train, data.src_vocab, data.tgt_vocab, batch_size, seed, device,
                           dist_info.rank, dist_info.world_size)

    history: dict[str, list] = {k: [] for k in ("step", "loss", "lr", "tokens", "valid_step", "valid_loss",
                                                 "valid_exact_match", "valid_bleu", "valid_chrf")}
    from tqdm.auto import tqdm

    bar = tqdm(total=steps, disable=not (progress and main), desc="training", unit="step", leave=True)
    start = time.perf_counter()
    deadline = start + 60.0 * minutes if minutes is not None else math.inf

    def run_eval(step: int) -> None:
        if not (main and data.valid):
            return
        valid_loss = _valid_loss(model, data.valid, data.src_vocab, data.tgt_vocab, criterion,
                                 max(batch_size, 128), device)
        metrics = evaluate(model, data.valid, data.src_vocab, data.tgt_vocab, limit=eval_limit)
        model.train()
        history["valid_step"].append(step)
        history["valid_loss"].append(valid_loss)
        for name, value in metrics.items():
            history[f"valid_{name}"].append(value)
        message = (f"step {step}: valid loss {valid_loss:.3f}, exact {metrics['exact_match']:.1f}%, "
                   f"BLEU {metrics['bleu']:.1f}, chrF {metrics['chrf']:.1f}")
        bar.write(message) if not bar.disable else say(message)
        if callback is not None:
            callback(step, history)

    step = 0
    while True:
        out_of_time = time.perf_counter() >= deadline
        if dist_info.enabled and minutes is not None:  # every rank must stop at the same step
            import torch.distributed as dist

            flag = torch.tensor([float(out_of_time)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            out_of_time = bool(flag.item())
        if (steps is not None and step >= steps) or out_of_time:
            break
        batch = next(stream)
        with autocast:
            logits = net(batch.src, batch.tgt_in)  # (batch, tgt_len, tgt_vocab): teacher forcing
        loss = criterion(logits.float(), batch.tgt_out)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if clip is not None:
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        history["lr"].append(optimizer.param_groups[0]["lr"])
        scheduler.step()
        step += 1
        history["step"].append(step)
        history["loss"].append(float(loss.detach()))
        history["tokens"].append(int(batch.n_tokens))
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", lr=f"{history['lr'][-1]:.2e}")
        if eval_every and step % eval_every == 0:
            run_eval(step)
    if not history["valid_step"] or history["valid_step"][-1] != step:
        run_eval(step)
    bar.close()
    history["seconds"] = time.perf_counter() - start
    model.eval()
    return history


# ---------------------------------------------------------------------------------------------- checkpoints
class Checkpoint(NamedTuple):
    model: Transformer
    src_vocab: object
    tgt_vocab: object
    extra: dict


def save_checkpoint(path: str | os.PathLike, model: nn.Module, src_vocab, tgt_vocab, extra: dict | None = None) -> None:
    """Save config (a dict), both vocabularies (dicts), the weights and ``extra`` (plain Python values) in one
    file that ``torch.load(..., weights_only=True)`` can read."""
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tfm_lesson.Transformer, got {type(model).__name__}")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    payload = {"format": "tfm_lesson/1", "config": model.config.to_dict(), "state_dict": state,
               "src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "extra": dict(extra or {})}
    directory = os.path.dirname(os.fspath(path))
    if directory:
        os.makedirs(directory, exist_ok=True)
    torch.save(payload, path)


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None) -> Checkpoint:
    """Rebuild ``(model, src_vocab, tgt_vocab, extra)`` from :func:`save_checkpoint`'s file, safely
    (``weights_only=True``: no code from the file runs). The model is in eval mode on ``device``."""
    from .data import Vocab

    device = torch.device(device) if device is not None else default_device()
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or "config" not in payload or "state_dict" not in payload:
        raise ValueError(f"{path} is not a tfm_lesson checkpoint (expected keys config, state_dict, vocabs)")
    model = Transformer(TransformerConfig(**payload["config"]))
    model.load_state_dict(payload["state_dict"])
    return Checkpoint(model.to(device).eval(), Vocab.from_dict(payload["src_vocab"]),
                      Vocab.from_dict(payload["tgt_vocab"]), payload.get("extra", {}))
