"""Training a language model: next-token prediction, held-out perplexity, a unigram baseline, samples.

    data = prepare_lm_data(load_corpus(), vocab_size=512)          # BPE-trained, both splits encoded
    model = GPT(vocab_size=data.vocab_size, max_len=64, d_model=64, heads=4, d_ff=256, num_layers=2)
    history = train_lm(model, data, minutes=1)
    perplexity(model, data.valid), unigram_perplexity(data.train, data.valid, data.vocab_size)
    complete(model, data.tokenizer, "The small cat", max_new_tokens=40, temperature=0.8, top_k=20)

**Next-token prediction.** A window of ``max_len + 1`` tokens gives inputs ``x = w[:-1]`` and targets
``y = w[1:]``: at every position ``t`` the model, which sees ``x[:t+1]`` only (causal mask), must give
the token that comes next. The loss is the cross-entropy averaged over all positions of all windows, and
the **perplexity** is ``exp(loss)``: the number of tokens the model is, on average, as unsure as a uniform
choice among. A **unigram** model, which ignores the context and predicts every token with its frequency
in the training text, is the baseline to beat.

The command line, ``python -m tfm_lesson.train --task lm`` (or ``--text FILE``), trains with :func:`train_lm`;
``python -m tfm_lesson.generate CHECKPOINT "prompt"`` samples from the checkpoint it writes.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._validate import renamed_keywords
from .checkpoint import atomic_save, check_extra, checked_parts, run_state, with_new_names
from ..data.corpus import Corpus, load_corpus, random_windows
from ..device import auto_threads, cpu_threads, default_device, threads_for
from ..gpt import GPT, GPTConfig
from ..sampling import complete  # text in, text out: with the sampling it uses; kept importable here
from .runstate import GuardedRun, TrainingDiverged, TrainingInterrupted, rng_state, set_rng_state
from ..data.tokenizer import BPETokenizer
from .loop import make_optimizer

__all__ = ["LMData", "prepare_lm_data", "lm_loss", "lm_rate", "train_lm", "perplexity", "unigram_perplexity",
           "complete", "save_lm", "load_lm", "read_lm", "update_lm_extra", "LMCheckpoint", "LM_FORMAT",
           "TrainingDiverged", "TrainingInterrupted", "lm_fingerprint"]

LM_FORMAT = "tfm_lesson-lm/1"


@dataclass
class LMData:
    """A corpus as token ids: ``train`` and ``valid`` are 1-D ``torch.long`` tensors."""

    tokenizer: BPETokenizer
    train: Tensor
    valid: Tensor
    name: str = ""

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __repr__(self) -> str:
        return (f"LMData({self.name!r}: {self.train.numel():,} train tokens, {self.valid.numel():,} valid tokens, "
                f"vocab_size={self.vocab_size})")


def prepare_lm_data(corpus: Corpus | None = None, vocab_size: int = 512, tokenizer: BPETokenizer | None = None,
                    tokenizer_chars: int | None = 300_000) -> LMData:
    """Train a :class:`BPETokenizer` on (the first ``tokenizer_chars`` characters of) the training text,
    unless one is given, and encode both splits."""
    corpus = load_corpus() if corpus is None else corpus
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a tfm_lesson.data.corpus.Corpus (load_corpus()), got {type(corpus).__name__}")
    if tokenizer is None:
        text = corpus.train if tokenizer_chars is None else corpus.train[:tokenizer_chars]
        tokenizer = BPETokenizer().train(text, vocab_size)
    elif not isinstance(tokenizer, BPETokenizer):
        raise TypeError(f"tokenizer must be a BPETokenizer, got {type(tokenizer).__name__}")
    train = torch.tensor(tokenizer.encode(corpus.train), dtype=torch.long)
    valid = torch.tensor(tokenizer.encode(corpus.valid), dtype=torch.long)
    return LMData(tokenizer, train, valid, corpus.name)


def lm_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Mean cross-entropy of the next tokens: x, y ``(batch, len)`` with ``y[:, t]`` the token after ``x[:, t]``."""
    logits = model(x)  # (batch, len, vocab)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def lm_rate(progress: float, peak: float, warmup_fraction: float, final_fraction: float = 0.1) -> float:
    """The learning rate at ``progress`` in [0, 1] of the run: a linear warm-up to ``peak`` over the first
    ``warmup_fraction``, then a cosine decay to ``final_fraction * peak`` at the end."""
    progress = min(max(progress, 0.0), 1.0)
    if warmup_fraction > 0 and progress < warmup_fraction:
        return peak * (progress / warmup_fraction)
    rest = (progress - warmup_fraction) / max(1e-12, 1.0 - warmup_fraction)
    return peak * (final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * rest)))


@torch.no_grad()
def _windows_loss(model: nn.Module, ids: Tensor, max_len: int, batch_size: int, device: torch.device,
                  max_tokens: int | None) -> tuple[float, int]:
    """Summed next-token loss and the number of targets over consecutive windows of ``ids``."""
    if max_tokens is not None:
        ids = ids[: max_tokens + 1]
    n_windows = (ids.numel() - 1) // max_len
    if n_windows < 1:
        raise ValueError(f"ids holds {ids.numel()} tokens: too few for one window of max_len={max_len}")
    x = ids[: n_windows * max_len].view(n_windows, max_len)  # (windows, max_len)
    y = ids[1: n_windows * max_len + 1].view(n_windows, max_len)  # the same, one token later
    total = 0.0
    for i in range(0, n_windows, batch_size):
        xb, yb = x[i: i + batch_size].to(device), y[i: i + batch_size].to(device)
        logits = model(xb)  # (batch, max_len, vocab)
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), yb.reshape(-1), reduction="sum").item()
    return total, n_windows * max_len


@renamed_keywords(context="max_len")
def perplexity(model: nn.Module, ids: Tensor, max_len: int | None = None, batch_size: int = 32,
               max_tokens: int | None = None, device: torch.device | str | None = None) -> float:
    """``exp`` of the mean next-token loss over ``ids`` (1-D), read as consecutive windows of ``max_len``
    tokens (default: the model's max_len). Deterministic; eval mode, no gradients."""
    if not isinstance(ids, Tensor) or ids.dim() != 1:
        raise ValueError("ids must be a 1-D tensor of token ids (e.g. data.valid)")
    max_len = max_len or model.config.max_len
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with threads_for(model, device):
            total, count = _windows_loss(model, ids, max_len, batch_size, device, max_tokens)
    finally:
        model.train(was_training)
    return math.exp(total / count)


def unigram_perplexity(train: Tensor, valid: Tensor, vocab_size: int, alpha: float = 1.0) -> float:
    """The perplexity on ``valid`` of a model that ignores the context: every token with its frequency in
    ``train`` (add-``alpha`` smoothing, so that a token never seen in training is not impossible)."""
    for name, ids in (("train", train), ("valid", valid)):
        if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 1-D tensor of token ids")
    counts = torch.bincount(train, minlength=vocab_size).double() + alpha  # (vocab,)
    log_p = (counts / counts.sum()).log()
    return math.exp(-log_p[valid].mean().item())


@renamed_keywords(context="max_len")
def train_lm(model: GPT, data: LMData, steps: int | None = None, minutes: float | None = None, batch_size: int = 32,
             max_len: int | None = None, lr: float = 3e-3, warmup: float = 0.05, weight_decay: float = 0.0,
             clip: float | None = 1.0, eval_every: int | None = None, eval_tokens: int = 20_000,
             device: torch.device | str | None = None, seed: int = 0, threads: int | None | str = "auto",
             log: Callable[[str], None] | None = None, checkpoint: str | os.PathLike | None = None,
             save_every: int | None = None, resume: str | os.PathLike | None = None,
             checkpoint_extra: dict | None = None) -> dict[str, list]:
    """Next-token training on random windows of ``max_len`` tokens (default: the model's) of ``data.train``:
    ``steps`` optimiser steps, or as many as fit in
    ``minutes`` (both: whichever ends first). Adam (the paper's betas), a linear warm-up over the first
    ``warmup`` fraction of the run, then cosine decay (see :func:`lm_rate`), gradient clipping.

    Returns the history: ``step``, ``loss`` (training, per step), ``lr``, ``seconds`` (since the start),
    and, every ``eval_every`` steps and at the end, ``eval_step`` and ``valid_loss`` (on the first
    ``eval_tokens`` validation tokens). The model is left in eval mode.

    The run contract of :func:`tfm_lesson.train.loop.train` (:mod:`tfm_lesson.train.runstate`): with ``checkpoint``
    the run is saved there atomically every ``save_every`` steps, at the end, and on Ctrl-C or SIGTERM
    (:class:`TrainingInterrupted`); ``resume`` continues such a run exactly (same data and settings: the
    result equals the uninterrupted run's); a NaN or infinite loss raises :class:`TrainingDiverged` before
    the bad step and never overwrites a good checkpoint.
    """
    if steps is None and minutes is None:
        raise ValueError("give steps, minutes or both")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if minutes is not None and not (isinstance(minutes, (int, float)) and minutes > 0):
        raise ValueError(f"minutes must be a positive number, got {minutes!r}")
    if not isinstance(data, LMData):
        raise TypeError(f"data must be LMData (prepare_lm_data(...)), got {type(data).__name__}")
    if data.vocab_size > model.config.vocab_size:
        raise ValueError(f"the tokenizer has {data.vocab_size} tokens but the model only {model.config.vocab_size}")
    max_len = max_len or model.config.max_len
    if max_len > model.config.max_len:
        raise ValueError(f"max_len={max_len} is longer than the model's max_len of {model.config.max_len}")
    for name, value in (("eval_every", eval_every), ("save_every", save_every)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    if save_every is not None and checkpoint is None:
        raise ValueError("save_every needs checkpoint=, the file to save to")
    if clip is not None and not (math.isfinite(clip) and clip >= 0):
        raise ValueError(f"clip must be a finite number >= 0 or None (no clipping), got {clip!r}")
    check_extra(checkpoint_extra or {}, "checkpoint_extra")
    device = torch.device(device) if device is not None else default_device()
    run = _LMRun(model, data, dict(steps=steps, minutes=minutes, batch_size=batch_size, max_len=max_len, lr=lr,
                                   warmup=warmup, weight_decay=weight_decay, clip=clip, eval_tokens=eval_tokens,
                                   seed=seed), device, log, checkpoint, resume, checkpoint_extra or {})
    with cpu_threads(auto_threads(model, device, threads)):
        run.run(steps, minutes, eval_every, save_every)
    model.eval()
    return run.history


class _LMRun(GuardedRun):
    """One call of :func:`train_lm`: random windows, the warm-up/cosine rate, Adam, clipping."""

    resume_hint = "python -m tfm_lesson.train --resume {path}"

    def __init__(self, model: GPT, data: LMData, s: dict, device: torch.device, log, checkpoint, resume,
                 extra: dict) -> None:
        self.model, self.data, self.s, self.device, self.log, self.extra = model, data, s, device, log, extra
        self.settings = {k: s[k] for k in ("steps", "batch_size", "max_len", "lr", "warmup", "weight_decay", "clip",
                                           "seed")}
        self.fingerprint = lm_fingerprint(data)
        saved = _lm_run_state(resume, model, data, self.settings, self.fingerprint) if resume is not None else None
        model.to(device).train()
        self.generator = torch.Generator().manual_seed(s["seed"])
        self.optimizer = make_optimizer(model, lr=s["lr"], weight_decay=s["weight_decay"])
        self.limit = None if s["minutes"] is None else s["minutes"] * 60.0
        self.history: dict[str, list] = {"step": [], "loss": [], "lr": [], "seconds": [], "eval_step": [],
                                         "valid_loss": []}
        self.step, self.seconds_before = 0, 0.0
        if saved is not None:
            self.optimizer.load_state_dict(saved["optimizer"])
            self.generator.set_state(saved["generator"])
            self.history = {k: list(v) for k, v in saved["history"].items()}
            self.step, self.seconds_before = int(saved["step"]), float(saved.get("seconds", 0.0))
            set_rng_state(saved["rng"])
            if log:
                log(f"resumed at step {self.step} from {resume}")
        self.path = os.fspath(checkpoint) if checkpoint is not None else None
        same_file = (saved is not None and self.path is not None and os.path.exists(self.path)
                     and os.path.samefile(resume, self.path))
        self.saved_step = self.step if same_file else None
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return self.seconds_before + time.perf_counter() - self.start

    def take_step(self, check: Callable[[float], None]) -> float:
        s, steps = self.s, self.s["steps"]
        progress = max(self.step / steps if steps else 0.0,
                       (time.perf_counter() - self.start) / self.limit if self.limit else 0.0)
        rate = lm_rate(progress, s["lr"], s["warmup"])
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        # (batch, max_len) each
        x, y = random_windows(self.data.train, s["batch_size"], s["max_len"], self.generator, self.device)
        loss = lm_loss(self.model, x, y)
        check(loss.item())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if s["clip"]:
            nn.utils.clip_grad_norm_(self.model.parameters(), s["clip"])
        self.optimizer.step()
        self.history["step"].append(self.step + 1)
        self.history["loss"].append(loss.item())
        self.history["lr"].append(rate)
        self.history["seconds"].append(self.elapsed())
        return self.history["loss"][-1]

    def peak_lr(self) -> float:
        return self.s["lr"]

    def last_evaluated(self) -> int | None:
        return self.history["eval_step"][-1] if self.history["eval_step"] else None

    def evaluate(self, step: int) -> None:
        if not self.history["loss"]:
            return
        total, count = _windows_loss(self.model.eval(), self.data.valid, self.s["max_len"], self.s["batch_size"],
                                     self.device, self.s["eval_tokens"])
        self.model.train()
        self.history["eval_step"].append(step)
        self.history["valid_loss"].append(total / count)
        if self.log:
            self.log(f"step {step}: train loss {self.history['loss'][-1]:.3f}, valid loss {total / count:.3f} "
                     f"(perplexity {math.exp(total / count):.2f}), {self.history['seconds'][-1]:.0f} s")

    def write(self, step: int) -> None:
        state = {"step": step, "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                 "history": self.history, "seconds": self.elapsed(), "rng": rng_state(), "settings": self.settings,
                 "data": self.fingerprint}
        extra = {**self.extra, "steps": step, "seconds": state["seconds"]}
        save_lm(self.path, self.model, self.data.tokenizer, extra=extra, training=state)


def lm_fingerprint(data: LMData) -> str:
    """A short hash of the training tokens: a resumed run checks that it trains on the same data."""
    return hashlib.sha256(data.train.numpy().tobytes()).hexdigest()[:16]


def _lm_run_state(resume, model: GPT, data: LMData, settings: dict, fingerprint: str) -> dict:
    """Load the weights of the language-model run saved in ``resume`` into ``model``; return its state."""
    payload = read_lm(resume)
    saved = run_state(payload, resume, model, settings, fingerprint, "save_lm", "the training tokens",
                      "the text or its tokenizer changed")
    model.load_state_dict(payload["state_dict"])
    return saved


# -------------------------------------------------------------------------------------------- checkpoints
class LMCheckpoint(NamedTuple):
    model: GPT
    tokenizer: BPETokenizer
    extra: dict


def save_lm(path: str | os.PathLike, model: GPT, tokenizer: BPETokenizer, extra: dict | None = None, *,
            training: dict | None = None) -> Path:
    """Config, weights, tokenizer and ``extra`` (plain values) in one file, written atomically (a temporary
    file in the same folder, then a rename), readable with ``torch.load(..., weights_only=True)``. ``extra``
    that :func:`load_lm` would refuse is refused here, naming the entry; ``training`` is the state
    :func:`train_lm` saves to continue a run."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a tfm_lesson.GPT, got {type(model).__name__}")
    if not isinstance(tokenizer, BPETokenizer):
        raise TypeError(f"tokenizer must be a BPETokenizer, got {type(tokenizer).__name__}")
    extra, training = checked_parts(extra, training)
    path = Path(path)
    payload = {"format": LM_FORMAT, "config": model.config.to_dict(),
               "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
               "tokenizer": json.dumps(tokenizer.to_dict()), "extra": extra}
    if training is not None:
        payload["training"] = training
    atomic_save(payload, path)
    return path


def read_lm(path: str | os.PathLike) -> dict:
    """The raw contents of :func:`save_lm`'s file (a dict), read safely, or ``FileNotFoundError`` /
    ``ValueError``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's own message advises weights_only=False, which would run code from the file
        raise ValueError(f"{path} is not a tfm_lesson language-model checkpoint: torch cannot read it "
                         f"({type(exc).__name__}; a damaged or foreign file)") from None
    if not isinstance(payload, dict) or payload.get("format") != LM_FORMAT:
        raise ValueError(f"{path} is not a tfm_lesson language-model checkpoint (written by "
                         "`python -m tfm_lesson.train --task lm` or tfm_lesson.train.lm.save_lm)")
    return with_new_names(payload)


def load_lm(path: str | os.PathLike, device: torch.device | str | None = None) -> LMCheckpoint:
    """Rebuild ``(model, tokenizer, extra)`` from :func:`save_lm`'s file (no code from the file runs)."""
    payload = read_lm(path)
    try:
        model = GPT(GPTConfig(**payload["config"]))
        model.load_state_dict(payload["state_dict"])
        tokenizer = BPETokenizer.from_dict(json.loads(payload["tokenizer"]))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise ValueError(f"{path} is an incomplete or damaged language-model checkpoint: {what}") from None
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"{path}: its tokenizer has {len(tokenizer)} tokens but the model has vocab_size="
                         f"{model.config.vocab_size}; the tokenizer belongs to another model")
    device = torch.device(device) if device is not None else default_device()
    return LMCheckpoint(model.to(device).eval(), tokenizer, payload.get("extra", {}))


def update_lm_extra(path: str | os.PathLike, **values) -> None:
    """Add ``values`` to a language-model checkpoint's ``extra``, rewriting it atomically."""
    check_extra(values)
    payload = read_lm(path)
    payload["extra"] = {**payload.get("extra", {}), **values}
    atomic_save(payload, path)
