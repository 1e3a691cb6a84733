"""Training (paper, section 5): label smoothing, Adam with the warm-up schedule, gradient clipping, and the loop
around :func:`train_step`, with a progress bar and evaluation. Runs on CPU or GPU (mixed precision there) and,
launched with ``torchrun``, on several processes with DistributedDataParallel.

    data = tfm_lesson.data.load_task("reverse")
    model = make_model(data.src_vocab, data.tgt_vocab, d_model=64, heads=4, num_layers=2, d_ff=128)
    history = train(model, data, steps=600, batch_size=64)
    save_checkpoint("reverse.pt", model, data.src_vocab, data.tgt_vocab)

Long runs lose nothing: ``train(..., checkpoint="runs/x/model.pt", save_every=200)`` saves the whole run
(weights, optimiser, schedule, data position, random state) atomically as it goes and when stopped with
Ctrl-C or SIGTERM; ``train(..., resume="runs/x/model.pt")`` continues it exactly; a loss that turns NaN or
infinite stops the run with :class:`TrainingDiverged` and never overwrites a good checkpoint (the contract of
:mod:`tfm_lesson.train.runstate`, which the language-model trainer keeps too). Checkpoints live in
:mod:`tfm_lesson.train.checkpoint`, devices, threads, AMP and DDP in :mod:`tfm_lesson.device` (re-exported here).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from .._validate import check_positive_int, renamed_keywords
from .checkpoint import (Checkpoint, check_plain, load_checkpoint, load_run_state, read_checkpoint, save_checkpoint,
                         update_checkpoint_extra)
from ..data.batching import BatchStream, check_fits, data_fingerprint
from ..device import (DistributedInfo, amp_dtype, auto_threads, cpu_threads, default_device, distributed_info,
                     distributed_plan, is_main_process, parse_device, seed_everything, setup_distributed)
from ..model import Transformer, TransformerConfig
from .runstate import GuardedRun, TrainingDiverged, TrainingInterrupted, rng_state, set_rng_state

__all__ = ["LabelSmoothingLoss", "NoamSchedule", "noam_rate", "warmup_schedule", "make_optimizer", "make_model",
           "train", "train_step", "TrainSettings", "evaluate", "save_checkpoint", "load_checkpoint",
           "read_checkpoint", "update_checkpoint_extra", "Checkpoint", "TrainingDiverged", "TrainingInterrupted",
           "amp_dtype", "data_fingerprint", "distributed_info", "distributed_plan", "parse_device",
           "is_main_process", "cpu_threads", "DistributedInfo"]


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
                   eps: float = 1e-9, weight_decay: float = 0.0, fused: bool | None = None) -> torch.optim.Adam:
    """Adam with the paper's ``beta1 = 0.9, beta2 = 0.98, eps = 1e-9`` (section 5.3); ``lr=1.0`` because
    :func:`warmup_schedule` supplies the rate. ``fused`` (PyTorch's one-kernel update): ``None`` = on CUDA only."""
    params = list(model.parameters())
    if fused is None:
        fused = bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None)


@renamed_keywords(layers="num_layers")
def make_model(src_vocab, tgt_vocab, d_model: int = 64, heads: int = 4, num_layers: int = 2, d_ff: int = 256,
               dropout: float = 0.1, max_len: int = 512, **overrides) -> Transformer:
    """A :class:`Transformer` sized for the vocabularies, with their pad ids. Source and target share one
    embedding matrix when the two vocabularies are equal (the toy tasks), otherwise each has its own.
    ``src_vocab``/``tgt_vocab`` are :class:`~tfm_lesson.data.Vocab` objects; ``num_layers`` is the depth of
    each stack (encoder and decoder alike)."""
    share = len(src_vocab) == len(tgt_vocab) and list(src_vocab.itos) == list(tgt_vocab.itos)
    settings = dict(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab), d_model=d_model, heads=heads,
                    d_ff=d_ff, num_encoder_layers=num_layers, num_decoder_layers=num_layers, dropout=dropout,
                    max_len=max_len, share_embeddings=share, tie_embeddings=True, src_pad_id=src_vocab.pad_id,
                    tgt_pad_id=tgt_vocab.pad_id)
    settings.update(overrides)
    return Transformer(TransformerConfig(**settings))


# ----------------------------------------------------------------------------------------------- evaluation
def evaluate(model: nn.Module, pairs: Sequence[tuple[str, str]], src_vocab, tgt_vocab, beam_size: int = 1,
             limit: int | None = None, batch_size: int = 128, length_penalty_alpha: float = 0.6,
             threads: int | None | str = "auto") -> dict:
    """Translate the sources of ``pairs`` and score them against the targets: exact match, BLEU, chrF (%).

    References are written as the target vocabulary's tokeniser would write them (``tgt_vocab.normalize``),
    so a perfect model scores 100 on every metric. ``limit`` scores only the first ``limit`` pairs.
    ``threads``: CPU threads while decoding (``"auto"``: see :func:`cpu_threads`).
    """
    from ..decoding import translate
    from .metrics import scores

    pairs = list(pairs)[:limit] if limit else list(pairs)
    if not pairs:
        raise ValueError("evaluate: pairs is empty")
    hyps = translate(model, [s for s, _ in pairs], src_vocab, tgt_vocab, beam_size=beam_size,  # under the thread rule
                     batch_size=batch_size, length_penalty_alpha=length_penalty_alpha, threads=threads)
    refs = [tgt_vocab.normalize(t) for _, t in pairs]
    return scores(hyps, refs)


def _valid_loss(model: nn.Module, pairs, src_vocab, tgt_vocab, criterion: nn.Module, batch_size: int,
                device: torch.device) -> float:
    from ..data import batches

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


# ------------------------------------------------------------------------------------------------ the step
def train_step(model: nn.Module, src: Tensor, tgt: Tensor, optimizer: torch.optim.Optimizer, scheduler,
               criterion: Callable[[Tensor, Tensor], Tensor], clip: float | None, *, scaler=None, autocast=None,
               check: Callable[[float], None] | None = None) -> float:
    """One optimiser step on one batch, the step chapter 10 has the learner write, in its order: shift the
    targets, forward, loss, backward, clip the gradients to norm ``clip`` (``None``: no clipping), optimiser
    step, schedule step, clear the gradients. Returns the batch's loss (a float).

    ``src`` ``(batch, src_len)``, ``tgt`` ``(batch, tgt_len)`` = ``<s> ... </s>``. On a GPU :func:`train` adds
    ``autocast`` (a context for the forward pass) and ``scaler`` (a ``GradScaler``, for float16); ``check``
    sees the loss before ``backward`` and may raise (a diverged run stops before its bad step)."""
    decoder_input, labels = tgt[:, :-1], tgt[:, 1:]  # (batch, tgt_len - 1) each: teacher forcing
    with autocast if autocast is not None else nullcontext():
        logits = model(src, decoder_input)  # (batch, tgt_len - 1, tgt_vocab_size)
    loss = criterion(logits.float(), labels)
    loss_value = float(loss.detach())
    if check is not None:
        check(loss_value)
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
    if clip is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_value


# ------------------------------------------------------------------------------------------------ the loop
@dataclass
class TrainSettings:
    """Everything :func:`train` takes besides the model and the data (see :func:`train` for each field)."""

    steps: int | None = None
    minutes: float | None = None
    batch_size: int = 64
    warmup: int = 400
    lr_factor: float = 1.0
    peak_lr: float | None = None
    smoothing: float = 0.1
    clip: float | None = 1.0
    device: torch.device | str | None = None
    eval_every: int | None = None
    eval_limit: int = 200
    callback: Callable[[int, dict], None] | None = None
    seed: int = 0
    amp: bool = True
    progress: bool = True
    log: Callable[[str], None] | None = None
    threads: int | None | str = "auto"
    checkpoint: str | os.PathLike | None = None
    save_every: int | None = None
    resume: str | os.PathLike | None = None
    checkpoint_extra: dict = field(default_factory=dict)

    def check(self) -> None:
        """A ``ValueError`` naming the first setting out of range."""
        if self.steps is None and self.minutes is None:
            raise ValueError("train: give steps (reproducible) or minutes (wall clock), or both")
        if self.steps is not None:
            check_positive_int(self.steps, "steps")
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes!r}")
        check_positive_int(self.batch_size, "batch_size")
        for name in ("eval_every", "save_every"):
            if getattr(self, name) is not None:
                check_positive_int(getattr(self, name), name)
        if self.save_every is not None and self.checkpoint is None:
            raise ValueError("save_every needs checkpoint=, the file to save to")
        if self.peak_lr is not None and not (math.isfinite(self.peak_lr) and self.peak_lr > 0):
            raise ValueError(f"peak_lr must be a finite number > 0, got {self.peak_lr!r}")
        if self.clip is not None and not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"clip must be a finite number > 0 or None (no clipping), got {self.clip!r}")
        check_plain(self.checkpoint_extra if self.checkpoint_extra is not None else {}, "checkpoint_extra")


def train(model: Transformer, data, settings: TrainSettings | None = None, /, **options) -> dict[str, list]:
    """Train ``model`` on ``data.train`` (a :class:`tfm_lesson.data.ParallelData`) with teacher forcing, one
    :func:`train_step` at a time. The settings are a :class:`TrainSettings` or its fields as keywords.

    Stops after ``steps`` optimiser steps or ``minutes`` of wall clock, whichever comes first (at least one of
    them is required; a fixed ``steps`` is reproducible). Each step: a batch of ``batch_size`` pairs,
    label-smoothed loss, backward, gradients clipped to norm ``clip``, Adam step, warm-up schedule step.
    The rate follows the paper's formula times ``lr_factor``; ``peak_lr`` instead picks the factor that makes
    the rate at step ``warmup`` (its maximum) equal ``peak_lr`` — handy for small ``d_model`` and short warm-ups,
    where the bare formula peaks high (d_model=64, warmup=100: 0.0125).
    Every ``eval_every`` steps (and at the end) the valid split is scored: loss on all of it, exact match /
    BLEU / chrF with greedy decoding on its first ``eval_limit`` pairs; then ``callback(step, history)``.
    On CUDA the forward pass runs under autocast when ``amp`` (:func:`amp_dtype`). Under ``torchrun`` the model
    is wrapped in DistributedDataParallel, each rank takes every ``world_size``-th batch and rank 0 shows
    progress, evaluates and saves (:func:`distributed_plan`: with fewer GPUs than processes, gloo on the CPU).

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
    for models under 5 M parameters on CPU, see :func:`tfm_lesson.device.auto_threads`; ``None``: torch's).
    """
    settings = dataclasses.replace(settings, **options) if settings is not None else TrainSettings(**options)
    settings.checkpoint_extra = settings.checkpoint_extra or {}
    settings.check()
    if not data.train:
        raise ValueError("train: data.train is empty")
    max_len = getattr(getattr(model, "config", None), "max_len", None)
    if max_len is not None:
        check_fits(data.train, data.src_vocab, data.tgt_vocab, max_len)
    explicit = settings.device is not None
    device = parse_device(settings.device) if explicit else default_device()
    with cpu_threads(auto_threads(model, device, settings.threads)):
        return _TranslationRun(model, data, settings, device, explicit).go()


class _TranslationRun(GuardedRun):
    """One call of :func:`train`: the set-up, then :class:`GuardedRun`'s loop around :func:`train_step`."""

    def __init__(self, model: Transformer, data, s: TrainSettings, device: torch.device, explicit: bool) -> None:
        self.dist, self.device = setup_distributed(device, explicit, s.log)
        self.main = self.dist.rank == 0
        self.say = (s.log or print) if self.main else (lambda _msg: None)
        self.model, self.data, self.s = model, data, s
        seed_everything(s.seed)
        lr_factor = s.lr_factor if s.peak_lr is None else s.peak_lr / noam_rate(s.warmup, model.config.d_model,
                                                                                  s.warmup)
        self.settings = {"batch_size": s.batch_size, "warmup": s.warmup, "lr_factor": float(lr_factor),
                         "smoothing": s.smoothing, "clip": s.clip, "seed": s.seed, "world_size": self.dist.world_size}
        self.fingerprint = data_fingerprint(data.train)
        saved = load_run_state(s.resume, model, self.settings, self.fingerprint) if s.resume is not None else None
        model.to(self.device).train()
        self.net: nn.Module = model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            self.net = DistributedDataParallel(model, device_ids=[self.device.index]
                                               if self.device.type == "cuda" else None)
        self.criterion = LabelSmoothingLoss(s.smoothing, model.config.tgt_pad_id)
        self.optimizer = make_optimizer(model)
        self.scheduler = warmup_schedule(self.optimizer, model.config.d_model, s.warmup, lr_factor)
        self.amp_dtype = amp_dtype(self.device, s.amp)
        self.autocast = torch.autocast("cuda", dtype=self.amp_dtype) if self.amp_dtype is not None else None
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        if self.amp_dtype is not None:
            self.precision_hint = (f" or float16 overflow (the forward pass runs in {self.amp_dtype}: try "
                                   "amp=False / --no-amp)")
        self.stream = BatchStream(data.train, data.src_vocab, data.tgt_vocab, s.batch_size, s.seed, self.device,
                                   self.dist.rank, self.dist.world_size)
        self.history: dict[str, list] = {k: [] for k in ("step", "loss", "lr", "tokens", "valid_step", "valid_loss",
                                                         "valid_exact_match", "valid_bleu", "valid_chrf")}
        self.step, self.seconds_before = 0, 0.0
        if saved is not None:
            self._continue(saved)
        self.path = os.fspath(s.checkpoint) if s.checkpoint is not None else None
        same_file = (saved is not None and self.path is not None and os.path.exists(self.path)
                     and os.path.samefile(s.resume, self.path))
        self.saved_step = self.step if same_file else None  # the step the file at ``path`` holds

    def _continue(self, saved: dict) -> None:
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        if self.scaler.is_enabled() and saved.get("scaler"):
            self.scaler.load_state_dict(saved["scaler"])
        self.stream.epoch, self.stream.position = saved["stream"]["epoch"], saved["stream"]["position"]
        self.history = {k: list(v) for k, v in saved["history"].items() if k != "seconds"}
        self.step, self.seconds_before = int(saved["step"]), float(saved.get("seconds", 0.0))
        set_rng_state(saved["rng"])
        self.say(f"resumed at step {self.step} from {self.s.resume}")

    def go(self) -> dict[str, list]:
        from tqdm.auto import tqdm

        s = self.s
        self.bar = tqdm(total=s.steps, initial=min(self.step, s.steps or self.step),
                        disable=not (s.progress and self.main), desc="training", unit="step", leave=True)
        self.start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)  # train_step clears the gradients after each step
        try:
            self.run(s.steps, s.minutes, s.eval_every, s.save_every, on_step=self._progress)
        finally:
            self.bar.close()
        self.model.eval()
        return self.history

    def take_step(self, check: Callable[[float], None]) -> float:
        batch = next(self.stream)
        lr = self.optimizer.param_groups[0]["lr"]
        loss = train_step(self.net, batch.src, batch.tgt, self.optimizer, self.scheduler, self.criterion,
                          self.s.clip, scaler=self.scaler if self.scaler.is_enabled() else None,
                          autocast=self.autocast, check=check)
        self.history["lr"].append(lr)
        self.history["step"].append(self.step + 1)
        self.history["loss"].append(loss)
        self.history["tokens"].append(int(batch.n_tokens))
        return loss

    def _progress(self) -> None:
        self.bar.update(1)
        if self.step % 10 == 0:
            self.bar.set_postfix(loss=f"{self.history['loss'][-1]:.3f}", lr=f"{self.history['lr'][-1]:.2e}")

    def agree(self, *flags: bool) -> list[bool]:
        """Under DDP every rank must take the same decision (stop, diverged): any rank's True wins."""
        if not self.dist.enabled:
            return list(flags)
        import torch.distributed as dist

        t = torch.tensor([float(f) for f in flags], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [bool(v) for v in t.tolist()]

    def peak_lr(self) -> float:
        return self.scheduler.lr_lambdas[0].peak()

    def last_evaluated(self) -> int | None:
        return self.history["valid_step"][-1] if self.history["valid_step"] else None

    def evaluate(self, step: int) -> None:
        data, s = self.data, self.s
        if not (self.main and data.valid):
            return
        valid_loss = _valid_loss(self.model, data.valid, data.src_vocab, data.tgt_vocab, self.criterion,
                                 max(s.batch_size, 128), self.device)
        metrics = evaluate(self.model, data.valid, data.src_vocab, data.tgt_vocab, limit=s.eval_limit)
        self.model.train()
        self.history["valid_step"].append(step)
        self.history["valid_loss"].append(valid_loss)
        for name, value in metrics.items():
            self.history[f"valid_{name}"].append(value)
        message = (f"step {step}: valid loss {valid_loss:.3f}, exact {metrics['exact_match']:.1f}%, "
                   f"BLEU {metrics['bleu']:.1f}, chrF {metrics['chrf']:.1f}")
        self.bar.write(message) if not self.bar.disable else self.say(message)
        if s.callback is not None:
            s.callback(step, self.history)

    def finish(self) -> None:
        self.history["seconds"] = self.seconds_before + time.perf_counter() - self.start

    def write(self, step: int) -> None:
        seconds = self.seconds_before + time.perf_counter() - self.start
        state = {"step": step, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "scaler": self.scaler.state_dict(), "stream": self.stream.state(), "history": self.history,
                 "seconds": seconds, "rng": rng_state(), "settings": self.settings, "data": self.fingerprint}
        extra = {**self.s.checkpoint_extra, "steps": step, "seconds": seconds}
        save_checkpoint(self.path, self.model, self.data.src_vocab, self.data.tgt_vocab, extra=extra, training=state)
