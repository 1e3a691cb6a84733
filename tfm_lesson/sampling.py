"""Choosing the next token from a language model's logits: greedy, temperature, top-k, top-p; and
:func:`complete`, the text a language model writes after a prompt.

    probs = softmax(logits / temperature)      temperature -> 0: greedy; 1: the model's distribution
    top-k: keep the k largest logits           top-p (nucleus): keep the most probable tokens until their
                                               probability reaches p

Ties are kept together: top-k keeps every logit equal to the k-th largest (so it may keep more than k
tokens), and top-p keeps every token as probable as the last one it needs. The result never depends on
the order of tied tokens in the vocabulary.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .data.tokenizer import BPETokenizer
from .device import threads_for

__all__ = ["filter_top_k", "filter_top_p", "next_token_probs", "sample_next", "draw_next", "check_sampling",
           "complete"]


NAN_LOGITS = ("logits hold NaN (the model's output is not a number: a diverged or broken model?); "
              "no token can be chosen")


def _check_logits(logits: object) -> Tensor:
    if not isinstance(logits, Tensor):
        raise TypeError(f"logits must be a torch.Tensor shaped (batch, vocab), got {type(logits).__name__}")
    if logits.dim() < 1 or logits.size(-1) == 0:
        raise ValueError(f"logits must be shaped (..., vocab) with vocab >= 1, got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got dtype {logits.dtype}")
    return logits


def _check_top_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be an int >= 1 (or None for no top-k), got {k!r}")
    return k


def _check_top_p(p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1] (or None for no top-p), got {p!r}")
    return float(p)


def _check_temperature(t: object) -> float:
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0.0 or t == float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
    return float(t)


def check_sampling(temperature: object = 1.0, top_k: object = None, top_p: object = None) -> None:
    """Raise a clear ``ValueError`` for a bad temperature, ``top_k`` or ``top_p`` (before any work is done)."""
    _check_temperature(temperature)
    if top_k is not None:
        _check_top_k(top_k)
    if top_p is not None:
        _check_top_p(top_p)


def filter_top_k(logits: Tensor, k: int) -> Tensor:
    """Set every logit below the k-th largest (along the last dimension) to ``-inf``.

    Logits equal to the k-th largest are all kept. ``k >= vocab`` keeps everything.
    """
    _check_logits(logits)
    k = _check_top_k(k)
    if k >= logits.size(-1):
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit
    return logits.masked_fill(logits < kth, float("-inf"))


def filter_top_p(logits: Tensor, p: float) -> Tensor:
    """Nucleus filtering: keep the smallest set of most probable tokens whose probability sums to at least
    ``p`` (and every token tied with the least probable one kept); set the rest to ``-inf``.

    The most probable token is always kept; ``p = 1`` keeps everything.
    """
    _check_logits(logits)
    p = _check_top_p(p)
    if p == 1.0:
        return logits
    probs = logits.float().softmax(dim=-1)  # (..., vocab)
    sorted_probs, _ = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of the tokens ranked above each one
    keep_sorted = mass_before < p  # the first token always: its mass_before is 0
    # the least probable kept token sets the bar; every token at least as probable is kept (ties included)
    bar = sorted_probs.masked_fill(~keep_sorted, float("inf")).amin(dim=-1, keepdim=True)  # (..., 1)
    return logits.masked_fill(probs < bar, float("-inf"))


def next_token_probs(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> Tensor:
    """The distribution the next token is drawn from: logits ``(..., vocab)`` divided by ``temperature``,
    filtered by ``top_k`` then ``top_p``, softmax -> probabilities ``(..., vocab)`` (float32).
    ``temperature == 0`` is greedy: all the mass on the argmax."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).float()
    if torch.isneginf(logits).all(dim=-1).any():
        raise ValueError("a row of logits is -inf everywhere: no token is allowed")
    logits = logits.float()
    z = logits / temperature
    if torch.isposinf(z).any() or torch.isnan(z).any():
        # A tiny temperature overflows: measured from each row's maximum instead, the best token gets 0 and the
        # others a negative number or -inf (greedy in the limit), never inf - inf = NaN.
        gap = logits - logits.amax(dim=-1, keepdim=True)  # (..., vocab), <= 0
        z = torch.where(gap == 0, 0.0, gap / temperature)
    if top_k is not None:
        z = filter_top_k(z, top_k)
    if top_p is not None:
        z = filter_top_p(z, top_p)
    return z.softmax(dim=-1)


def sample_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                generator: torch.Generator | None = None) -> Tensor:
    """Pick one token per row. logits ``(batch, vocab)`` -> ids ``(batch,)`` (``torch.long``).

    ``temperature == 0`` is greedy (the argmax; ``top_k``/``top_p`` cannot change it). Otherwise the logits
    are divided by ``temperature``, filtered by ``top_k`` then ``top_p``, and one token is drawn from the
    softmax with ``generator`` (for reproducible samples). ``top_k=1`` is greedy whenever the maximum is
    unique.
    """
    _check_logits(logits)
    if logits.dim() != 2:
        raise ValueError(f"logits must be shaped (batch, vocab), got shape {tuple(logits.shape)}")
    check_sampling(temperature, top_k, top_p)
    if torch.isnan(logits).any():
        raise ValueError(NAN_LOGITS)
    return draw_next(logits, temperature, top_k, top_p, generator)


def draw_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
              generator: torch.Generator | None = None) -> Tensor:
    """:func:`sample_next` without its checks, for a decoding loop that checked its arguments once (and its
    logits for NaN in its own way). logits ``(batch, vocab)`` -> ids ``(batch,)``."""
    if temperature == 0:
        return logits.argmax(dim=-1)  # (batch,)
    probs = next_token_probs(logits, temperature, top_k, top_p)  # (batch, vocab)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (batch,)


def complete(model: nn.Module, tokenizer: BPETokenizer, prompt: str = "", max_new_tokens: int = 60,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = 0, use_cache: bool = True) -> str:
    """The text ``model`` (a :class:`tfm_lesson.GPT`, or any model with its ``generate``) writes after ``prompt``
    (the continuation only). An empty prompt starts from a
    line break, the separator between the corpus's sentences. ``seed`` fixes the sample (``None``: fresh)."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    ids = tokenizer.encode(prompt or "\n")
    device = next(model.parameters()).device
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, prompt_len)
    with threads_for(model, device):
        out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                             use_cache=use_cache, generator=generator)
    return tokenizer.decode(out[0, len(ids):].tolist())
