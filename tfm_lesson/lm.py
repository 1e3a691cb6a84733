"""Training a language model: next-token prediction, held-out perplexity, a unigram baseline, samples.

    data = prepare_lm_data(load_corpus(), vocab_size=512)          # BPE-trained, both splits encoded
    model = GPT(vocab_size=data.vocab_size, context=64, d_model=64, heads=4, d_ff=256, num_layers=2)
    history = train_lm(model, data, minutes=1)
    perplexity(model, data.valid), unigram_perplexity(data.train, data.valid, data.vocab_size)
    complete(model, data.tokenizer, "The small cat", max_new_tokens=40, temperature=0.8, top_k=20)

**Next-token prediction.** A window of ``context + 1`` tokens gives inputs ``x = w[:-1]`` and targets
``y = w[1:]``: at every position ``t`` the model, which sees ``x[:t+1]`` only (causal mask), must give
the token that comes next. The loss is the cross-entropy averaged over all positions of all windows, and
the **perplexity** is ``exp(loss)``: the number of tokens the model is, on average, as unsure as a uniform
choice among. A **unigram** model, which ignores the context and predicts every token with its frequency
in the training text, is the baseline to beat.

The command line, ``python -m tfm_lesson.train --task lm`` (or ``--text FILE``), calls :func:`main_lm`;
``python -m tfm_lesson.generate CHECKPOINT "prompt"`` samples from the checkpoint it writes.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._io import atomic_open
from .data.corpus import Corpus, load_corpus, random_windows
from .device import default_device
from .gpt import GPT, GPTConfig
from .tokenizer import BPETokenizer
from .training import cpu_threads, make_optimizer

__all__ = ["LMData", "prepare_lm_data", "lm_loss", "lm_rate", "train_lm", "perplexity", "unigram_perplexity",
           "complete", "save_lm", "load_lm", "LMCheckpoint", "main_lm", "LM_FORMAT", "LM_DEFAULTS"]

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


def _threads_for(model: nn.Module, device: torch.device):
    """One CPU thread for a small model on the CPU (faster there, and far faster on a busy machine; see
    :func:`tfm_lesson.training.cpu_threads`); otherwise torch's own choice."""
    small = sum(p.numel() for p in model.parameters()) < 5_000_000
    return cpu_threads(1 if device.type == "cpu" and small else None)


@torch.no_grad()
def _windows_loss(model: nn.Module, ids: Tensor, context: int, batch_size: int, device: torch.device,
                  max_tokens: int | None) -> tuple[float, int]:
    """Summed next-token loss and the number of targets over consecutive windows of ``ids``."""
    if max_tokens is not None:
        ids = ids[: max_tokens + 1]
    n_windows = (ids.numel() - 1) // context
    if n_windows < 1:
        raise ValueError(f"ids holds {ids.numel()} tokens: too few for one window of context={context}")
    x = ids[: n_windows * context].view(n_windows, context)  # (windows, context)
    y = ids[1: n_windows * context + 1].view(n_windows, context)  # the same, one token later
    total = 0.0
    for i in range(0, n_windows, batch_size):
        xb, yb = x[i: i + batch_size].to(device), y[i: i + batch_size].to(device)
        logits = model(xb)  # (batch, context, vocab)
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), yb.reshape(-1), reduction="sum").item()
    return total, n_windows * context


def perplexity(model: nn.Module, ids: Tensor, context: int | None = None, batch_size: int = 32,
               max_tokens: int | None = None, device: torch.device | str | None = None) -> float:
    """``exp`` of the mean next-token loss over ``ids`` (1-D), read as consecutive windows of ``context``
    tokens (default: the model's context). Deterministic; eval mode, no gradients."""
    if not isinstance(ids, Tensor) or ids.dim() != 1:
        raise ValueError("ids must be a 1-D tensor of token ids (e.g. data.valid)")
    context = context or model.config.context
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with _threads_for(model, device):
            total, count = _windows_loss(model, ids, context, batch_size, device, max_tokens)
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


def train_lm(model: GPT, data: LMData, steps: int | None = None, minutes: float | None = None, batch_size: int = 32,
             context: int | None = None, lr: float = 3e-3, warmup: float = 0.05, weight_decay: float = 0.0,
             clip: float = 1.0, eval_every: int | None = None, eval_tokens: int = 20_000,
             device: torch.device | str | None = None, seed: int = 0, threads: int | None | str = "auto",
             log: Callable[[str], None] | None = None) -> dict[str, list]:
    """Next-token training on random windows of ``data.train``: ``steps`` optimiser steps, or as many as fit in
    ``minutes`` (both: whichever ends first). Adam (the paper's betas), a linear warm-up over the first
    ``warmup`` fraction of the run, then cosine decay (see :func:`lm_rate`), gradient clipping.

    Returns the history: ``step``, ``loss`` (training, per step), ``lr``, ``seconds`` (since the start),
    and, every ``eval_every`` steps and at the end, ``eval_step`` and ``valid_loss`` (on the first
    ``eval_tokens`` validation tokens). The model is left in eval mode.
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
    context = context or model.config.context
    if context > model.config.context:
        raise ValueError(f"context={context} is longer than the model's context of {model.config.context}")
    device = torch.device(device) if device is not None else default_device()
    if threads == "auto":
        small = sum(p.numel() for p in model.parameters()) < 5_000_000
        threads = 1 if device.type == "cpu" and small else None
    model.to(device).train()
    generator = torch.Generator().manual_seed(seed)
    optimizer = make_optimizer(model, lr=lr, weight_decay=weight_decay)
    limit = None if minutes is None else minutes * 60.0
    history: dict[str, list] = {"step": [], "loss": [], "lr": [], "seconds": [], "eval_step": [], "valid_loss": []}

    def evaluate(step: int) -> None:
        total, count = _windows_loss(model.eval(), data.valid, context, batch_size, device, eval_tokens)
        model.train()
        history["eval_step"].append(step)
        history["valid_loss"].append(total / count)
        if log:
            log(f"step {step}: train loss {history['loss'][-1]:.3f}, valid loss {total / count:.3f} "
                f"(perplexity {math.exp(total / count):.2f}), {history['seconds'][-1]:.0f} s")

    start = time.perf_counter()
    step = 0
    with cpu_threads(threads):
        while True:
            elapsed = time.perf_counter() - start
            progress = max(step / steps if steps else 0.0, elapsed / limit if limit else 0.0)
            if (steps is not None and step >= steps) or (limit is not None and elapsed >= limit):
                break
            rate = lm_rate(progress, lr, warmup)
            for group in optimizer.param_groups:
                group["lr"] = rate
            x, y = random_windows(data.train, batch_size, context, generator, device)  # (batch, context) each
            loss = lm_loss(model, x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            step += 1
            history["step"].append(step)
            history["loss"].append(loss.item())
            history["lr"].append(rate)
            history["seconds"].append(time.perf_counter() - start)
            if eval_every and step % eval_every == 0:
                evaluate(step)
        if step and (not history["eval_step"] or history["eval_step"][-1] != step):
            evaluate(step)
    model.eval()
    return history


def complete(model: GPT, tokenizer: BPETokenizer, prompt: str = "", max_new_tokens: int = 60,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = 0, use_cache: bool = True) -> str:
    """The text ``model`` writes after ``prompt`` (the continuation only). An empty prompt starts from a
    line break, the separator between the corpus's sentences. ``seed`` fixes the sample (``None``: fresh)."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    ids = tokenizer.encode(prompt or "\n")
    device = next(model.parameters()).device
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, prompt_len)
    with _threads_for(model, device):
        out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                             use_cache=use_cache, generator=generator)
    return tokenizer.decode(out[0, len(ids):].tolist())


# -------------------------------------------------------------------------------------------- checkpoints
class LMCheckpoint(NamedTuple):
    model: GPT
    tokenizer: BPETokenizer
    extra: dict


def save_lm(path: str | os.PathLike, model: GPT, tokenizer: BPETokenizer, extra: dict | None = None) -> Path:
    """Config, weights, tokenizer and ``extra`` (plain values) in one file, written atomically (a temporary
    file in the same folder, then a rename), readable with ``torch.load(..., weights_only=True)``."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a tfm_lesson.GPT, got {type(model).__name__}")
    if not isinstance(tokenizer, BPETokenizer):
        raise TypeError(f"tokenizer must be a BPETokenizer, got {type(tokenizer).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": LM_FORMAT, "config": model.config.to_dict(),
               "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
               "tokenizer": json.dumps(tokenizer.to_dict()), "extra": dict(extra or {})}
    with atomic_open(path, "wb") as fh:
        torch.save(payload, fh)
    return path


def load_lm(path: str | os.PathLike, device: torch.device | str | None = None) -> LMCheckpoint:
    """Rebuild ``(model, tokenizer, extra)`` from :func:`save_lm`'s file (no code from the file runs)."""
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
                         "`python -m tfm_lesson.train --task lm` or tfm_lesson.lm.save_lm)")
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


# ------------------------------------------------------------------------------------------ command line
LM_DEFAULTS = dict(vocab_size=512, context=64, d_model=64, heads=4, layers=2, d_ff=256, dropout=0.0, batch_size=32,
                   peak_lr=3e-3, steps=1000, seed=0)


def main_lm(args, parser=None) -> int:
    """``python -m tfm_lesson.train --task lm`` / ``--text FILE``: train a GPT, print samples and held-out
    perplexity, save ``OUT/lm.pt``; the last line of stdout is a JSON summary. Flags left unset (``None``)
    take :data:`LM_DEFAULTS`; a bad flag is a usage error (exit status 2)."""

    def usage_error(message: str) -> None:
        if parser is not None:
            parser.error(message)  # usage on stderr, exit status 2
        print(f"python -m tfm_lesson.train: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def flag(name: str):
        value = getattr(args, name, None)
        return LM_DEFAULTS.get(name) if value is None else value

    if getattr(args, "resume", None) is not None:
        usage_error("--resume is for translation runs; a language-model run starts afresh")
    vocab_size, context = flag("vocab_size"), flag("context")
    d_model, heads, layers, d_ff = flag("d_model"), flag("heads"), flag("layers"), flag("d_ff")
    batch_size, dropout, seed = flag("batch_size"), flag("dropout"), flag("seed")
    if vocab_size < 256:
        usage_error(f"--vocab-size must be at least 256 (the byte alphabet), got {vocab_size}")
    if context < 2:
        usage_error(f"--context must be at least 2, got {context}")
    for name, value in (("--d-model", d_model), ("--heads", heads), ("--layers", layers), ("--d-ff", d_ff),
                        ("--batch-size", batch_size)):
        if value < 1:
            usage_error(f"{name} must be >= 1, got {value}")
    if d_model % heads:
        usage_error(f"--d-model {d_model} must be divisible by --heads {heads}")
    if args.steps is not None and args.steps < 1:
        usage_error(f"--steps must be >= 1, got {args.steps}")
    if args.minutes is not None and not (args.minutes > 0 and math.isfinite(args.minutes)):
        usage_error(f"--minutes must be a positive number, got {args.minutes}")
    if not 0 <= dropout < 1:
        usage_error(f"--dropout must be in [0, 1), got {dropout}")
    peak_lr = flag("peak_lr")
    if not (peak_lr > 0 and math.isfinite(peak_lr)):
        usage_error(f"--peak-lr must be a positive number, got {peak_lr}")
    warmup = getattr(args, "warmup", None)
    if warmup is not None and warmup < 0:
        usage_error(f"--warmup must be >= 0, got {warmup}")
    try:
        device = torch.device(args.device) if getattr(args, "device", None) else default_device()
    except RuntimeError as exc:
        usage_error(f"--device: {exc}")
    if device.type == "cuda" and not torch.cuda.is_available():
        usage_error(f"--device {args.device}: CUDA is not available on this machine")
    out = getattr(args, "out", None) or Path("runs/lm")
    if (out / "lm.pt").exists() and not getattr(args, "overwrite", False):
        usage_error(f"{out / 'lm.pt'} already holds a run: pass --overwrite to replace it, or choose another --out")
    text_file = getattr(args, "text", None)
    try:
        corpus = load_corpus(path=text_file)
    except (FileNotFoundError, ValueError) as exc:
        usage_error(f"--text: {exc}")
    torch.manual_seed(seed)
    if getattr(args, "threads", None) is not None:
        torch.set_num_threads(max(1, args.threads))
    data = prepare_lm_data(corpus, vocab_size=vocab_size)
    print(f"corpus: {corpus!r}", flush=True)
    print(f"tokens: {data!r}", flush=True)
    if data.train.numel() < context + 1 or data.valid.numel() < context + 1:
        usage_error(f"the text is too short for --context {context}: {data.train.numel()} training and "
                    f"{data.valid.numel()} validation tokens; give more text or a smaller --context")
    model = GPT(GPTConfig(vocab_size=data.vocab_size, context=context, d_model=d_model, heads=heads, d_ff=d_ff,
                          num_layers=layers, dropout=dropout))
    print(f"model: d_model={d_model} heads={heads} layers={layers} d_ff={d_ff} context={context} "
          f"parameters={sum(p.numel() for p in model.parameters())}", flush=True)
    steps = args.steps if args.steps is not None or args.minutes is not None else LM_DEFAULTS["steps"]
    # --warmup counts steps; train_lm takes the fraction of the run (5% unless told)
    warmup_fraction = 0.05 if warmup is None or not steps else min(0.5, warmup / steps)
    model.to(device)
    before = complete(model, data.tokenizer, "", max_new_tokens=min(30, context - 1), temperature=1.0, seed=seed)
    quiet = getattr(args, "no_progress", False)
    history = train_lm(model, data, steps=steps, minutes=args.minutes, batch_size=batch_size, lr=peak_lr,
                       warmup=warmup_fraction,
                       eval_every=getattr(args, "eval_every", None) or 100, device=device, seed=seed,
                       log=None if quiet else (lambda m: print(m, flush=True)))
    valid_ppl = perplexity(model, data.valid)
    baseline = unigram_perplexity(data.train, data.valid, data.vocab_size)
    after = complete(model, data.tokenizer, "", max_new_tokens=min(30, context - 1), temperature=0.8, top_k=20,
                     seed=seed)
    print(f"sample at step 0: {before!r}", flush=True)
    print(f"sample after training: {after!r}", flush=True)
    path = save_lm(out / "lm.pt", model, data.tokenizer,
                   extra={"corpus": corpus.name, "steps": len(history["step"]), "seconds": history["seconds"][-1],
                          "valid_perplexity": valid_ppl, "unigram_perplexity": baseline})
    print(f"checkpoint: {path}", flush=True)
    print(json.dumps({"task": "lm", "corpus": corpus.name, "train_tokens": data.train.numel(),
                      "valid_tokens": data.valid.numel(), "vocab_size": data.vocab_size,
                      "valid_perplexity": round(valid_ppl, 3), "unigram_perplexity": round(baseline, 3),
                      "steps": len(history["step"]), "seconds": round(history["seconds"][-1], 1),
                      "device": str(device), "checkpoint": str(path)}), flush=True)
    return 0
