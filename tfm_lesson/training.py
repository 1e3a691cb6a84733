"""Training (paper, section 5): label smoothing, Adam with the warm-up schedule, gradient clipping, a loop
with a progress bar and evaluation, checkpoints. Runs on CPU or GPU (mixed precision there) and, launched
with ``torchrun``, on several processes with DistributedDataParallel.

    data = tfm_lesson.data.load_task("reverse")
    model = make_model(data.src_vocab, data.tgt_vocab, d_model=64, heads=4, layers=2, d_ff=128)
    history = train(model, data, steps=600, batch_size=64)
    save_checkpoint("reverse.pt", model, data.src_vocab, data.tgt_vocab)

Long runs lose nothing: ``train(..., checkpoint="runs/x/model.pt", save_every=200)`` saves the whole run
(weights, optimiser, schedule, data position, random state) atomically as it goes and when stopped with
Ctrl-C or SIGTERM; ``train(..., resume="runs/x/model.pt")`` continues it exactly; a loss that turns NaN or
infinite stops the run with :class:`TrainingDiverged` and never overwrites a good checkpoint.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import pickle
import random
import signal
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from ._checks import check_positive_int
from ._io import atomic_open
from .device import default_device, seed_everything
from .model import Transformer, TransformerConfig

__all__ = ["LabelSmoothingLoss", "NoamSchedule", "noam_rate", "warmup_schedule", "make_optimizer", "make_model",
           "train", "evaluate", "save_checkpoint", "load_checkpoint", "read_checkpoint", "update_checkpoint_extra",
           "Checkpoint", "TrainingDiverged", "TrainingInterrupted", "amp_dtype", "data_fingerprint",
           "distributed_info", "distributed_plan", "parse_device", "is_main_process", "cpu_threads"]


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
    local_world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def distributed_info() -> DistributedInfo:
    """Rank and world size from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``: the processes on this machine)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    return DistributedInfo(rank, world, int(os.environ.get("LOCAL_RANK", str(rank))),
                           int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))


def is_main_process() -> bool:
    """True on rank 0 (or when not distributed): the process that prints and saves."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def parse_device(value: torch.device | str) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` -> a ``torch.device`` that exists on this machine, or a
    ``ValueError`` that says why not (no CUDA GPU, no GPU with that number, an unknown name)."""
    try:
        device = value if isinstance(value, torch.device) else torch.device(str(value))
    except (RuntimeError, ValueError):
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {value!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(value)!r}: this machine has no CUDA GPU that PyTorch can use "
                             "(torch.cuda.is_available() is False); use cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {str(value)!r}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"device {str(value)!r}: Apple's MPS is not available here; use cpu")
    elif device.type != "cpu":
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {value!r}")
    return device


def distributed_plan(device: torch.device, local_rank: int, local_world_size: int, cuda_count: int,
                     explicit: bool) -> tuple[str, torch.device, str | None]:
    """``(backend, device, note)`` for one process under torchrun. On the CPU: gloo. On CUDA: nccl with one GPU
    per process (``cuda:local_rank``) when the machine has a GPU for each of its processes; otherwise a GPU
    that was asked for (``explicit``) is refused with a ``ValueError``, and a default one falls back to gloo
    on the CPU, with a ``note`` saying so (every process takes the same decision)."""
    if device.type != "cuda":
        return "gloo", device, None
    if local_world_size <= cuda_count:
        return "nccl", torch.device("cuda", local_rank), None
    why = (f"torchrun started {local_world_size} processes on this machine, which has {cuda_count} CUDA GPU(s); "
           "DistributedDataParallel on GPUs needs one GPU per process")
    if explicit:
        raise ValueError(f"{why}: use --nproc_per_node={max(cuda_count, 1)} or fewer, or --device cpu")
    return "gloo", torch.device("cpu"), f"{why}: training on the CPU with gloo instead"


def _setup_distributed(device: torch.device, explicit: bool = True,
                       log: Callable[[str], None] | None = None) -> tuple[DistributedInfo, torch.device]:
    """Join the process group torchrun prepared: gloo on CPU, nccl on GPU (one GPU per local rank)."""
    import torch.distributed as dist

    info = distributed_info()
    if not info.enabled:
        return info, device
    cuda_count = torch.cuda.device_count() if device.type == "cuda" else 0
    backend, device, note = distributed_plan(device, info.local_rank, info.local_world_size, cuda_count, explicit)
    if note and info.rank == 0:
        (log or print)(note)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
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
def amp_dtype(device: torch.device | str, amp: bool = True) -> torch.dtype | None:
    """The dtype :func:`train` runs the forward pass in under autocast: ``None`` on the CPU or with
    ``amp=False``; ``bfloat16`` on a GPU of compute capability 8.0 or more (Ampere, Hopper and later, which
    compute in bf16 natively); ``float16``, with a ``GradScaler``, on older GPUs (T4: 7.5, V100: 7.0).

    ``torch.cuda.is_bf16_supported()`` is not the test: it answers True on a T4 or V100 too, where bf16 is
    emulated and slower than float32.
    """
    device = torch.device(device)
    if not amp or device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return torch.bfloat16 if (major, minor) >= (8, 0) else torch.float16


def _autocast(device: torch.device, amp: bool):
    """``(context, dtype)``: autocast in :func:`amp_dtype`'s dtype, or a no-op context and ``None``."""
    dtype = amp_dtype(device, amp)
    if dtype is None:
        return nullcontext(), None
    return torch.autocast("cuda", dtype=dtype), dtype


class _BatchStream:
    """Endless training batches, a new shuffle every epoch (``seed + epoch``). Under ``torchrun`` batch ``i``
    of an epoch belongs to rank ``i % world`` and only that rank builds it. ``state()`` is where the stream
    stands (epoch, and the batches of this epoch already taken by all ranks together): a resumed run
    continues from there with the same batches in the same order."""

    def __init__(self, pairs, src_vocab, tgt_vocab, batch_size: int, seed: int, device: torch.device,
                 rank: int = 0, world: int = 1, epoch: int = 0, position: int = 0) -> None:
        self.pairs, self.src_vocab, self.tgt_vocab = pairs, src_vocab, tgt_vocab
        self.batch_size, self.seed, self.device, self.rank, self.world = batch_size, seed, device, rank, world
        self.epoch, self.position = epoch, position
        self._plan: list[list[int]] | None = None

    def __iter__(self) -> "_BatchStream":
        return self

    def __next__(self):
        from .data.batching import batch_order, make_batch

        while True:
            if self._plan is None:
                self._plan = batch_order(self.pairs, self.src_vocab, self.tgt_vocab, self.batch_size, shuffle=True,
                                         seed=self.seed + self.epoch)
                if len(self._plan) <= self.rank:
                    raise ValueError(f"the training split gives no batch for rank {self.rank} of {self.world}: "
                                     "too few pairs")
            index = self.position + (self.rank - self.position) % self.world  # this rank's next batch
            if index < len(self._plan):
                self.position = (index // self.world + 1) * self.world  # every rank took one batch of this round
                return make_batch([self.pairs[i] for i in self._plan[index]], self.src_vocab, self.tgt_vocab,
                                  self.device)
            self.epoch, self.position, self._plan = self.epoch + 1, 0, None

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}


class TrainingDiverged(RuntimeError):
    """The loss (or a weight) became NaN or infinite: :func:`train` stopped and saved nothing."""

    def __init__(self, message: str, step: int, loss: float, lr: float, checkpoint: str | None) -> None:
        super().__init__(message)
        self.step, self.loss, self.lr, self.checkpoint = step, loss, lr, checkpoint


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM reached :func:`train`: it finished the step, saved, and stopped."""

    def __init__(self, message: str, step: int, checkpoint: str, signal_name: str) -> None:
        super().__init__(message)
        self.step, self.checkpoint, self.signal_name = step, checkpoint, signal_name

    def __str__(self) -> str:
        return str(self.args[0])


class _StopRequests:
    """While active (main thread only), SIGINT and SIGTERM set ``self.signal`` instead of killing the run, so
    the loop can finish its step and save. A second Ctrl-C raises ``KeyboardInterrupt`` at once."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.signal, self._previous = enabled, None, {}

    def __enter__(self) -> "_StopRequests":
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):  # not allowed here (an embedded interpreter): keep the default
                    pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt("a second Ctrl-C: stopped at once, without saving this step")
        self.signal = signum

    def __exit__(self, *exc) -> bool:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        return False


def data_fingerprint(pairs: Sequence[tuple[str, str]]) -> str:
    """A short hash of the training pairs, in order: a resumed run checks that it trains on the same data."""
    digest = hashlib.sha256()
    for src, tgt in pairs:
        digest.update(f"{src}\t{tgt}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def _rng_state() -> dict:
    """Every random generator a run draws from (dropout: torch's), as plain values and tensors."""
    version, internal, gauss = random.getstate()
    state: dict = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [str(kind), torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    return state


def _set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        try:
            import numpy as np

            kind, keys, pos, has_gauss, cached = state["numpy"]
            np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))
        except ImportError:
            pass


def _first_bad_parameter(model: nn.Module) -> str | None:
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):
            return name
    return None


def train(model: Transformer, data, steps: int | None = None, minutes: float | None = None, batch_size: int = 64,
          warmup: int = 400, lr_factor: float = 1.0, peak_lr: float | None = None, smoothing: float = 0.1, clip: float | None = 1.0,
          device: torch.device | str | None = None, eval_every: int | None = None, eval_limit: int = 200,
          callback: Callable[[int, dict], None] | None = None, seed: int = 0, amp: bool = True,
          progress: bool = True, log: Callable[[str], None] | None = None,
          threads: int | None | str = "auto", checkpoint: str | os.PathLike | None = None,
          save_every: int | None = None, resume: str | os.PathLike | None = None,
          checkpoint_extra: dict | None = None) -> dict[str, list]:
    """Train ``model`` on ``data.train`` (a :class:`tfm_lesson.data.ParallelData`) with teacher forcing.

    Stops after ``steps`` optimiser steps or ``minutes`` of wall clock, whichever comes first (at least one of
    them is required; a fixed ``steps`` is reproducible). Each step: a batch of ``batch_size`` pairs,
    label-smoothed loss, backward, gradients clipped to norm ``clip``, Adam step, warm-up schedule step.
    The rate follows the paper's formula times ``lr_factor``; ``peak_lr`` instead picks the factor that makes
    the rate at step ``warmup`` (its maximum) equal ``peak_lr`` — handy for small ``d_model`` and short warm-ups,
    where the bare formula peaks high (d_model=64, warmup=100: 0.0125).
    Every ``eval_every`` steps (and at the end) the valid split is scored: loss on all of it, exact match /
    BLEU / chrF with greedy decoding on its first ``eval_limit`` pairs; ``callback(step, history)`` is then
    called. On CUDA the forward pass runs under autocast when ``amp`` (see :func:`amp_dtype`: bf16 on GPUs
    that compute it natively, else fp16 with a GradScaler).
    Under ``torchrun`` the model is wrapped in DistributedDataParallel and each rank builds and takes every
    ``world_size``-th batch; only rank 0 shows progress, evaluates and saves. With fewer GPUs than processes
    it trains on the CPU with gloo, or refuses if ``device`` named a GPU (see :func:`distributed_plan`).

    **Nothing is lost.** With ``checkpoint`` (a file path) the run is saved there, atomically, every
    ``save_every`` steps and at the end, with everything needed to continue it: weights, optimiser, schedule,
    step, the position in the data and the random state. Ctrl-C or SIGTERM then finishes the current step,
    saves and raises :class:`TrainingInterrupted` (a ``KeyboardInterrupt``). ``resume`` (such a file)
    continues that run: with the same data and settings the result equals the uninterrupted run's; ``steps``
    counts from the run's start, ``minutes`` from now. A NaN or infinite loss stops the run with
    :class:`TrainingDiverged` before the bad step, and a checkpoint is never written over with
    non-finite weights. ``checkpoint_extra`` is stored in the checkpoint's ``extra``.

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
    if save_every is not None:
        check_positive_int(save_every, "save_every")
        if checkpoint is None:
            raise ValueError("save_every needs checkpoint=, the file to save to")
    if peak_lr is not None and not (math.isfinite(peak_lr) and peak_lr > 0):
        raise ValueError(f"peak_lr must be a finite number > 0, got {peak_lr!r}")
    if clip is not None and not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be a finite number > 0 or None (no clipping), got {clip!r}")
    if checkpoint_extra is not None:
        _check_plain(checkpoint_extra, "checkpoint_extra")
    if not data.train:
        raise ValueError("train: data.train is empty")
    _check_lengths(model, data)

    explicit = device is not None
    device = parse_device(device) if device is not None else default_device()
    with cpu_threads(_auto_threads(model, device, threads)):
        return _train(model, data, steps, minutes, batch_size, warmup, lr_factor, peak_lr, smoothing, clip, device,
                      eval_every, eval_limit, callback, seed, amp, progress, log, checkpoint, save_every, resume,
                      checkpoint_extra or {}, explicit)


def _check_lengths(model: nn.Module, data) -> None:
    """Refuse, before training, pairs longer than the model's positions (they would crash it mid-run)."""
    max_len = getattr(getattr(model, "config", None), "max_len", None)
    if max_len is None:
        return
    src_vocab, tgt_vocab = data.src_vocab, data.tgt_vocab
    # a token is at least one character, and Unicode normalisation (NFC) at most triples a text's length:
    # only texts of max_len / 3 characters or more can be too long, the others need no tokenising
    suspects = [(s, t) for s, t in data.train if 3 * max(len(s), len(t)) >= max_len]
    needed = [max(len(src_vocab.tokenize(s)), len(tgt_vocab.tokenize(t))) + 1 for s, t in suspects]
    longest = max(needed, default=0)
    if longest > max_len:
        n = sum(1 for k in needed if k > max_len)
        raise ValueError(f"train: {n} training pair(s) need more than the model's max_len={max_len} positions "
                         f"(the longest needs {longest}); drop them (from_pairs(..., max_len={max_len})) or build "
                         "the model with a larger max_len")


def _train(model, data, steps, minutes, batch_size, warmup, lr_factor, peak_lr, smoothing, clip, device,
           eval_every, eval_limit, callback, seed, amp, progress, log, checkpoint, save_every, resume,
           checkpoint_extra, explicit_device) -> dict[str, list]:
    dist_info, device = _setup_distributed(device, explicit_device, log)
    main = dist_info.rank == 0
    say = (log or print) if main else (lambda _msg: None)
    seed_everything(seed)
    if peak_lr is not None:
        lr_factor = peak_lr / noam_rate(warmup, model.config.d_model, warmup)
    settings = {"batch_size": batch_size, "warmup": warmup, "lr_factor": float(lr_factor), "smoothing": smoothing,
                "clip": clip, "seed": seed, "world_size": dist_info.world_size}
    fingerprint = data_fingerprint(data.train)
    saved = _resume_state(resume, model, data, settings, fingerprint) if resume is not None else None
    model.to(device).train()
    net: nn.Module = model
    if dist_info.enabled:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    criterion = LabelSmoothingLoss(smoothing, model.config.tgt_pad_id)
    optimizer = make_optimizer(model)
    scheduler = warmup_schedule(optimizer, model.config.d_model, warmup, lr_factor)
    autocast, amp_dtype_ = _autocast(device, amp)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype_ == torch.float16)
    stream = _BatchStream(data.train, data.src_vocab, data.tgt_vocab, batch_size, seed, device,
                          dist_info.rank, dist_info.world_size)

    history: dict[str, list] = {k: [] for k in ("step", "loss", "lr", "tokens", "valid_step", "valid_loss",
                                                 "valid_exact_match", "valid_bleu", "valid_chrf")}
    step, seconds_before = 0, 0.0
    if saved is not None:
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        if scaler.is_enabled() and saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        stream.epoch, stream.position = saved["stream"]["epoch"], saved["stream"]["position"]
        history = {k: list(v) for k, v in saved["history"].items() if k != "seconds"}
        step, seconds_before = int(saved["step"]), float(saved.get("seconds", 0.0))
        _set_rng_state(saved["rng"])
        say(f"resumed at step {step} from {resume}")
    from tqdm.auto import tqdm

    bar = tqdm(total=steps, initial=min(step, steps or step), disable=not (progress and main), desc="training",
               unit="step", leave=True)
    start = time.perf_counter()
    deadline = start + 60.0 * minutes if minutes is not None else math.inf
    path = os.fspath(checkpoint) if checkpoint is not None else None
    same_file = saved is not None and path is not None and os.path.exists(path) and os.path.samefile(resume, path)
    saved_step = step if same_file else None  # the step the file at ``path`` holds

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

    def diverged(step: int, loss: float, what: str) -> TrainingDiverged:
        finite = [(s, v) for s, v in zip(history["step"], history["loss"]) if math.isfinite(v)]
        last = f" The last finite loss was {finite[-1][1]:.4g} at step {finite[-1][0]}." if finite else ""
        lr = optimizer.param_groups[0]["lr"]
        kept = (f" The last good checkpoint, {path} (step {saved_step}), is kept as it was." if saved_step is not None
                else " Nothing was saved.")
        precision = f" or float16 overflow (the forward pass runs in {amp_dtype_}: try amp=False / --no-amp)" \
            if amp_dtype_ is not None else ""
        message = (f"training diverged at step {step}: {what}.{last} The learning rate was {lr:.3g} (peak "
                   f"{scheduler.lr_lambdas[0].peak():.3g}). Likely causes: a learning rate too high (lower peak_lr "
                   f"/ --peak-lr, or a longer warmup), no gradient clipping (clip / --clip){precision}.{kept}")
        return TrainingDiverged(message, step, loss, lr, path if saved_step is not None else None)

    def save(step: int) -> None:
        nonlocal saved_step
        if not (main and path) or saved_step == step:
            return
        bad = _first_bad_parameter(model)
        if bad is not None:
            raise diverged(step, history["loss"][-1] if history["loss"] else math.nan,
                           f"the weight {bad} is no longer finite")
        state = {"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "scaler": scaler.state_dict(), "stream": stream.state(), "history": history,
                 "seconds": seconds_before + time.perf_counter() - start, "rng": _rng_state(), "settings": settings,
                 "data": fingerprint}
        extra = {**checkpoint_extra, "steps": step, "seconds": state["seconds"]}
        save_checkpoint(path, model, data.src_vocab, data.tgt_vocab, extra=extra, training=state)
        saved_step = step

    def agree(*flags: bool) -> list[bool]:
        """Under DDP every rank must take the same decision (stop, diverged): any rank's True wins."""
        if not dist_info.enabled:
            return list(flags)
        import torch.distributed as dist

        t = torch.tensor([float(f) for f in flags], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [bool(v) for v in t.tolist()]

    try:
        with _StopRequests(enabled=path is not None) as stop:
            while True:
                out_of_time, stop_asked = agree(time.perf_counter() >= deadline, stop.signal is not None)
                if stop_asked:
                    save(step)
                    name = signal.Signals(stop.signal).name if stop.signal is not None else "a signal on another rank"
                    raise TrainingInterrupted(f"training stopped by {name} after step {step}; the run is saved in "
                                              f"{path}: continue it with resume={path!r}", step, path, name)
                if (steps is not None and step >= steps) or out_of_time:
                    break
                batch = next(stream)
                with autocast:
                    logits = net(batch.src, batch.tgt_in)  # (batch, tgt_len, tgt_vocab): teacher forcing
                loss = criterion(logits.float(), batch.tgt_out)
                loss_value = float(loss.detach())
                (bad_loss,) = agree(not math.isfinite(loss_value))
                if bad_loss:
                    raise diverged(step + 1, loss_value, f"the loss is {loss_value}")
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
                history["loss"].append(loss_value)
                history["tokens"].append(int(batch.n_tokens))
                bar.update(1)
                if step % 10 == 0:
                    bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", lr=f"{history['lr'][-1]:.2e}")
                if eval_every and step % eval_every == 0:
                    run_eval(step)
                if save_every and step % save_every == 0:
                    save(step)
            if not history["valid_step"] or history["valid_step"][-1] != step:
                run_eval(step)
            history["seconds"] = seconds_before + time.perf_counter() - start
            save(step)
    finally:
        bar.close()
    model.eval()
    return history


def _resume_state(resume, model: nn.Module, data, settings: dict, fingerprint: str) -> dict:
    """Load the weights of the run saved in ``resume`` into ``model``; return its training state."""
    payload = read_checkpoint(resume)
    saved = payload.get("training")
    if not isinstance(saved, dict):
        raise ValueError(f"resume: {resume} holds a model but no training state (it was saved by save_checkpoint, "
                         "not by train(checkpoint=...)), so it cannot be continued")
    if payload["config"] != model.config.to_dict():
        diff = {k: (v, payload["config"].get(k)) for k, v in model.config.to_dict().items()
                if payload["config"].get(k) != v}
        raise ValueError(f"resume: the model's config differs from the run in {resume}: "
                         + ", ".join(f"{k}={a!r} here, {b!r} there" for k, (a, b) in diff.items()))
    if saved.get("data") != fingerprint:
        raise ValueError(f"resume: the training pairs differ from those of the run in {resume} (the file, the "
                         "task's settings or the seed changed); a run continues only on the same data")
    for name, value in settings.items():
        theirs = saved["settings"].get(name)
        same = (math.isclose(value, theirs, rel_tol=1e-9) if isinstance(value, float) and isinstance(theirs, float)
                else value == theirs)
        if not same:
            raise ValueError(f"resume: {name}={value!r} differs from the run in {resume} ({name}={theirs!r}); "
                             "continue it with the same settings")
    model.load_state_dict(_full_state_dict(payload))
    return saved


# ---------------------------------------------------------------------------------------------- checkpoints
class Checkpoint(NamedTuple):
    model: Transformer
    src_vocab: object
    tgt_vocab: object
    extra: dict


_PLAIN = (str, int, float, bool, type(None), bytes, bytearray, complex, torch.Size)


def _check_plain(value, where: str = "extra") -> None:
    """Raise TypeError, naming the entry, for anything ``torch.load(weights_only=True)`` would refuse."""
    kind = type(value)
    if kind in _PLAIN or isinstance(value, Tensor):
        return
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            _check_plain(key, f"{where} key {key!r}")
            _check_plain(item, f"{where}[{key!r}]")
        return
    if kind in (list, tuple, set):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(f"{where} is a {kind.__module__}.{kind.__qualname__}, which load_checkpoint (torch.load with "
                    "weights_only=True) would refuse; store plain values instead: str, int, float, bool, None, "
                    "lists, tuples, dicts and tensors (e.g. str(path), float(x), x.tolist())")


def _round_trip(extra: dict) -> None:
    """The loader's own verdict on ``extra``: saved and read back in memory, as load_checkpoint would."""
    buffer = io.BytesIO()
    torch.save(extra, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        detail = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line or "Unsupported" in line),
                      type(err).__name__)
        raise TypeError(f"extra holds a value that load_checkpoint (torch.load with weights_only=True) would "
                        f"refuse ({detail}); store plain values instead") from None


def _cpu(value):
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu(v) for v in value)
    return value


def _dedupe_tied(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Keep one copy of each tensor that several keys share (tied embeddings), before moving to the CPU: a
    CUDA tensor copied to the CPU key by key would be stored once per key. Returns (state, {alias: key})."""
    first: dict[tuple, str] = {}
    kept: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    for key, value in state.items():
        ident = None
        if value.numel() > 0 and value.device.type != "meta":
            ident = (str(value.device), value.untyped_storage().data_ptr(), value.storage_offset(),
                     tuple(value.shape), tuple(value.stride()), value.dtype)
        if ident is not None and ident in first:
            tied[key] = first[ident]
            continue
        if ident is not None:
            first[ident] = key
        kept[key] = value.detach().cpu()
    return kept, tied


def _atomic_save(payload: dict, path: str | os.PathLike) -> None:
    """``torch.save`` through :func:`tfm_lesson._io.atomic_open`: the target is always either the old complete
    file or the new complete one, never half written."""
    with atomic_open(path, "wb") as fh:
        torch.save(payload, fh)


def save_checkpoint(path: str | os.PathLike, model: nn.Module, src_vocab, tgt_vocab, extra: dict | None = None,
                    *, training: dict | None = None) -> None:
    """Save config (a dict), both vocabularies (dicts), the weights and ``extra`` (plain Python values) in one
    file that ``torch.load(..., weights_only=True)`` can read.

    The file is written atomically (a temporary file in the same folder, flushed, then renamed): a save that
    fails midway leaves the previous checkpoint intact. A weight shared by several keys (tied embeddings) is
    stored once. ``extra`` values that the loader would refuse (a ``Path``, a NumPy number, an object) are
    refused here, with the key named. ``training`` is the state :func:`train` saves to continue a run.
    """
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tfm_lesson.Transformer, got {type(model).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict of plain values or None, got {type(extra).__name__}")
    extra = dict(extra or {})
    _check_plain(extra, "extra")
    _round_trip(extra)
    if training is not None:
        training = _cpu(training)
        _check_plain(training, "training")
    state, tied = _dedupe_tied(model.state_dict())
    payload = {"format": "tfm_lesson/1", "config": model.config.to_dict(), "state_dict": state, "tied": tied,
               "src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "extra": extra}
    if training is not None:
        payload["training"] = training
    _atomic_save(payload, path)


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The raw contents of a checkpoint (a dict), read safely (``weights_only=True``), or a clear error:
    ``FileNotFoundError`` for a missing file, ``ValueError`` for an empty, truncated, corrupt or foreign one.
    A folder holding ``model.pt`` reads that file."""
    path = os.fspath(path)
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.pt")):
        path = os.path.join(path, "model.pt")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder without model.pt; give the checkpoint file")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes): not a checkpoint; a save was cut off before any byte was "
                         "written. Use an earlier checkpoint or train again")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = next((line for line in lines if "GLOBAL" in line or "Unsupported" in line),
                      lines[0] if lines else type(err).__name__)
        if "GLOBAL" in detail:  # weights_only met a class or function to call: refuse, never run it
            raise ValueError(f"{path} was refused: it holds Python objects, not only plain values and tensors, and "
                             f"loading those could run code ({detail})") from None
        raise ValueError(f"{path} is not a readable checkpoint: the file is truncated or corrupt ({detail})") from None
    except Exception as err:  # torch reports a cut-off file as RuntimeError, EOFError, OSError, ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"{path} is not a readable checkpoint: the file is truncated or corrupt "
                         f"({type(err).__name__}: {first})") from None
    needed = ("config", "state_dict", "src_vocab", "tgt_vocab")
    if not isinstance(payload, dict) or any(k not in payload for k in needed):
        raise ValueError(f"{path} is not a tfm_lesson checkpoint (expected the keys {', '.join(needed)})")
    return payload


def _full_state_dict(payload: dict) -> dict[str, Tensor]:
    state = dict(payload["state_dict"])
    for alias, key in payload.get("tied", {}).items():
        state[alias] = state[key]
    return state


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None) -> Checkpoint:
    """Rebuild ``(model, src_vocab, tgt_vocab, extra)`` from :func:`save_checkpoint`'s file, safely
    (``weights_only=True``: no code from the file runs). The model is in eval mode on ``device``.
    Errors: see :func:`read_checkpoint`."""
    from .data import Vocab

    device = parse_device(device) if device is not None else default_device()
    payload = read_checkpoint(path)
    try:
        model = Transformer(TransformerConfig(**payload["config"]))
        model.load_state_dict(_full_state_dict(payload))
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"{path} does not fit a tfm_lesson Transformer: {first}") from None
    return Checkpoint(model.to(device).eval(), Vocab.from_dict(payload["src_vocab"]),
                      Vocab.from_dict(payload["tgt_vocab"]), payload.get("extra", {}))


def update_checkpoint_extra(path: str | os.PathLike, **values) -> None:
    """Add ``values`` to a checkpoint's ``extra`` (e.g. test metrics after training), rewriting it atomically."""
    _check_plain(values, "extra")
    _round_trip(values)
    payload = read_checkpoint(path)
    payload["extra"] = {**payload.get("extra", {}), **values}
    _atomic_save(payload, path)


from .reference import compare_to_reference  # noqa: E402,F401  (re-exported here: "is my run normal?")
