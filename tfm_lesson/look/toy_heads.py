"""Three attention heads on toy sentences (chapter 03): set by hand, and learned by a short training run.

Every token is a vector of one-hot features: its word (``WORDS``), then its position, then zeros up to
``d_model = 24``. The three heads of a ``MultiHeadAttention(24, heads=3)`` answer three questions:

- head 0, *the previous word*: the query at position ``p`` matches the key at ``p - 1`` (position 0 looks at
  itself);
- head 1, *the same word*: a word's query matches the keys of the same word;
- head 2, *the nouns*: every query asks the same question, and only nouns (``NOUNS``) answer.

:func:`hand_set_heads` writes those weights by hand. :func:`train_heads` starts from random weights and learns
the queries and keys of the same three heads by gradient descent, from sentences and the keys each question
should pick, so the learned maps can be put beside the hand-set ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..attention import MultiHeadAttention
from ..device import cpu_threads

__all__ = ["WORDS", "NOUNS", "D_MODEL", "HEADS", "features", "hand_set_heads", "toy_targets", "toy_batch", "TrainedHeads",
           "train_heads"]

WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "rug")
NOUNS = ("cat", "mat", "dog", "rug")
D_MODEL, HEADS = 24, 3
D_K = D_MODEL // HEADS  # 8: room for one feature per word, and for one per position
MAX_LEN = D_K - 1  # head 0 writes position p + 1 into its 8 dimensions


def _word_ids(tokens: list[str]) -> Tensor:
    unknown = [t for t in tokens if t not in WORDS]
    if unknown:
        raise ValueError(f"tokens: unknown word(s) {unknown}; the toy vocabulary is {list(WORDS)}")
    if not 1 <= len(tokens) <= MAX_LEN:
        raise ValueError(f"tokens: a sentence of 1 to {MAX_LEN} words, got {len(tokens)}")
    return torch.tensor([WORDS.index(t) for t in tokens])


def features(ids: Tensor) -> Tensor:
    """Word ids ``(batch, len)`` -> one-hot features ``(batch, len, D_MODEL)``: word, then position."""
    if ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"ids: expected integer word ids of shape (batch, len), got {ids.dtype} {tuple(ids.shape)}")
    batch, length = ids.shape
    if length > MAX_LEN:
        raise ValueError(f"ids: at most {MAX_LEN} positions, got {length}")
    x = torch.zeros(batch, length, D_MODEL)
    x.scatter_(-1, ids[..., None], 1.0)  # word one-hot: features 0 .. len(WORDS) - 1
    x[:, torch.arange(length), len(WORDS) + torch.arange(length)] = 1.0  # position one-hot
    return x  # (batch, len, D_MODEL)


def hand_set_heads(tokens: list[str], c: float = 4.0) -> tuple[MultiHeadAttention, Tensor]:
    """A ``MultiHeadAttention(24, 3)`` whose heads look at the previous word, the same word and the nouns, and
    the features ``(1, len, 24)`` of ``tokens``. ``c`` sets the sharpness: a match scores ``c**2 / sqrt(d_k)``."""
    x = features(_word_ids(tokens)[None])  # (1, len, D_MODEL)
    n_words = len(WORDS)
    mha = MultiHeadAttention(D_MODEL, HEADS).eval()
    h0, h1, h2 = 0, D_K, 2 * D_K  # first row of each head's block of w_q / w_k
    with torch.no_grad():
        for layer in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            layer.weight.zero_()
            layer.bias.zero_()
        mha.w_v.weight.copy_(torch.eye(D_MODEL))  # values and output pass the features through
        mha.w_o.weight.copy_(torch.eye(D_MODEL))
        for p in range(MAX_LEN):  # head 0: query at p carries e_p, key at j carries e_(j+1): p meets j = p - 1
            mha.w_q.weight[h0 + p, n_words + p] = c
            if p + 1 < D_K:
                mha.w_k.weight[h0 + p + 1, n_words + p] = c
        mha.w_k.weight[h0, n_words] = c  # position 0 has no previous word: it looks at itself
        for w in range(n_words):  # head 1: the same word gives the same direction to query and key
            mha.w_q.weight[h1 + w, w] = c
            mha.w_k.weight[h1 + w, w] = c
        mha.w_q.bias[h2] = c  # head 2: every query asks the same thing ...
        for noun in NOUNS:  # ... and only nouns answer
            mha.w_k.weight[h2, WORDS.index(noun)] = c
    return mha, x


def toy_targets(ids: Tensor) -> Tensor:
    """Where each head's question should look in sentences ``ids`` ``(batch, length)``: target weights
    ``(batch, HEADS, length, length)`` spread evenly over the right keys (head 0: the previous position, position
    0 itself; head 1: every copy of my word, me included; head 2: every noun; a row with no noun stays 0)."""
    batch, length = ids.shape
    nouns = torch.tensor([WORDS.index(n) for n in NOUNS])
    previous = torch.eye(length)[(torch.arange(length) - 1).clamp(min=0)].expand(batch, length, length)
    same = (ids[:, :, None] == ids[:, None, :]).float()  # (batch, q, k): same word
    noun = (ids[..., None] == nouns).any(-1).float()[:, None, :].expand(batch, length, length)  # (batch, q, k)
    targets = torch.stack([previous, same, noun], dim=1)  # (batch, HEADS, q, k)
    return targets / targets.sum(-1, keepdim=True).clamp(min=1.0)


def toy_batch(batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random sentences ``(batch, length)``, each with at least one noun, and their :func:`toy_targets`."""
    ids = torch.randint(len(WORDS), (batch, length), generator=generator)
    nouns = torch.tensor([WORDS.index(n) for n in NOUNS])
    none = ~(ids[..., None] == nouns).any(-1).any(-1)  # sentences without a noun get one at a random place
    where = torch.randint(length, (batch,), generator=generator)
    pick = nouns[torch.randint(len(NOUNS), (batch,), generator=generator)]
    ids[none, where[none]] = pick[none]
    return ids, toy_targets(ids)


@dataclass
class TrainedHeads:
    """The result of :func:`train_heads`: the trained attention, and per head the mean weight its queries put on
    the right keys (1.0 = all of it) on fresh sentences."""

    mha: MultiHeadAttention
    on_target: list[float]
    steps: int


def train_heads(steps: int = 300, batch: int = 64, length: int = 6, lr: float = 0.05, seed: int = 0) -> TrainedHeads:
    """Train the queries and keys (``w_q``, ``w_k``) of a freshly initialised ``MultiHeadAttention(24, 3)``: the loss
    is the squared difference between each head's weights and :func:`toy_batch`'s targets. ``w_v`` and ``w_o`` do
    not enter the loss and stay as initialised. The global random state is left untouched; it runs on one CPU
    thread, as the course's other trainings of small models do."""
    if steps < 1 or batch < 1 or not 1 <= length <= MAX_LEN:
        raise ValueError(f"steps and batch must be >= 1 and length in [1, {MAX_LEN}]; got {steps}, {batch}, {length}")
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mha = MultiHeadAttention(D_MODEL, HEADS)
    optimiser = torch.optim.Adam([*mha.w_q.parameters(), *mha.w_k.parameters()], lr=lr)
    with cpu_threads(1):
        for _ in range(steps):
            ids, targets = toy_batch(batch, length, g)
            x = features(ids)
            _, weights = mha(x, x, x, need_weights=True)  # (batch, HEADS, q, k)
            loss = (weights - targets).pow(2).sum(-1).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    mha.eval()
    with torch.no_grad():
        ids, targets = toy_batch(1000, length, g)
        x = features(ids)
        _, weights = mha(x, x, x, need_weights=True)
        on_target = (weights * (targets > 0)).sum(-1).mean(dim=(0, 2)).tolist()  # (HEADS,)
    return TrainedHeads(mha, on_target, steps)
