"""Batches: pairs → padded id tensors, with the masks the model needs.

Source sentences are encoded ``w1 ... wn </s>``; targets ``<s> w1 ... wm </s>``. Teacher forcing
feeds ``tgt_in = tgt[:, :-1]`` (starts with ``<s>``) and scores predictions against
``tgt_out = tgt[:, 1:]`` (ends with ``</s>``). Padding uses ``pad_id`` (0).
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..masks import causal_mask, padding_mask
from .vocab import Vocab

__all__ = ["Batch", "batches", "batch_order", "make_batch", "encode_batch", "pad_sequences", "BatchStream",
           "data_fingerprint", "check_fits"]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0, device: torch.device | str | None = None) -> Tensor:
    """List of id lists → ``(batch, max_len)`` LongTensor, right-padded with ``pad_id``."""
    if len(seqs) == 0:
        raise ValueError("pad_sequences: seqs must hold at least one sequence")
    width = max(len(s) for s in seqs)
    if width == 0:
        raise ValueError("pad_sequences: every sequence is empty")
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out if device is None else out.to(device)


def encode_batch(texts: Sequence[str], vocab: Vocab, bos: bool = False, eos: bool = True,
                 device: torch.device | str | None = None) -> Tensor:
    """Encode source sentences for translation: ``(batch, src_len)`` ids padded with ``vocab.pad_id``."""
    if isinstance(texts, str):
        texts = [texts]
    return pad_sequences([vocab.encode(t, bos=bos, eos=eos) for t in texts], vocab.pad_id, device)


@dataclass
class Batch:
    """One padded batch. ``src``: ``(batch, src_len)``; ``tgt``: ``(batch, tgt_len)`` = ``<s> ... </s>``."""

    src: Tensor
    tgt: Tensor
    pad_id: int = 0

    @property
    def tgt_in(self) -> Tensor:
        """Decoder input ``(batch, tgt_len - 1)``: ``<s> w1 ... wm`` (padded)."""
        return self.tgt[:, :-1]

    @property
    def tgt_out(self) -> Tensor:
        """What the decoder must predict ``(batch, tgt_len - 1)``: ``w1 ... wm </s>`` (padded)."""
        return self.tgt[:, 1:]

    @property
    def src_mask(self) -> Tensor:
        """``(batch, 1, 1, src_len)``: True where the source key is a real token."""
        return padding_mask(self.src, self.pad_id)

    @property
    def tgt_mask(self) -> Tensor:
        """``(batch, 1, tgt_len - 1, tgt_len - 1)``: causal and not padding, for ``tgt_in``."""
        t = self.tgt_in.size(1)
        return padding_mask(self.tgt_in, self.pad_id) & causal_mask(t, device=self.tgt.device)

    @property
    def n_tokens(self) -> int:
        """Number of real (non-pad) tokens in ``tgt_out``: the count a per-token loss divides by."""
        return int((self.tgt_out != self.pad_id).sum())

    @property
    def n_seqs(self) -> int:
        return self.src.size(0)

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: torch.device | str | None) -> "Batch":
        """Copy to ``device`` (non-blocking where possible)."""
        if device is None:
            return self
        return Batch(self.src.to(device, non_blocking=True), self.tgt.to(device, non_blocking=True), self.pad_id)


def make_batch(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab,
               device: torch.device | str | None = None) -> Batch:
    """One :class:`Batch` from a list of pairs."""
    if src_vocab.pad_id != tgt_vocab.pad_id:
        raise ValueError("src_vocab and tgt_vocab must share the pad id")
    src = pad_sequences([src_vocab.encode(s, bos=False, eos=True) for s, _ in pairs], src_vocab.pad_id)
    tgt = pad_sequences([tgt_vocab.encode(t, bos=True, eos=True) for _, t in pairs], tgt_vocab.pad_id)
    return Batch(src, tgt, src_vocab.pad_id).to(device)


def batch_order(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int,
                shuffle: bool = True, seed: int = 0, sort_by_length: bool = False,
                drop_last: bool = False) -> list[list[int]]:
    """The indices into ``pairs`` of each batch that :func:`batches` would build, in order (nothing encoded).

    Knowing the plan without building the batches lets a process under ``torchrun`` build only its own
    batches, and lets a resumed run skip the batches it already trained on.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    order = list(range(len(pairs)))
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(order)
    if sort_by_length:
        # sort inside windows of 50 batches, so batches stay varied from one window to the next
        window = batch_size * 50
        lengths = [len(src_vocab.tokenize(pairs[i][0])) + len(tgt_vocab.tokenize(pairs[i][1])) / 1000
                   for i in range(len(pairs))]
        order = [i for w in range(0, len(order), window)
                 for i in sorted(order[w:w + window], key=lambda i: lengths[i])]
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if drop_last and chunks and len(chunks[-1]) < batch_size:
        chunks.pop()
    if sort_by_length and shuffle:
        rng.shuffle(chunks)
    return chunks


def batches(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int,
            shuffle: bool = True, seed: int = 0, device: torch.device | str | None = None,
            sort_by_length: bool = False, drop_last: bool = False, start: int = 0, rank: int = 0,
            world_size: int = 1) -> Iterator[Batch]:
    """One pass over ``pairs`` in batches of ``batch_size``.

    ``shuffle`` orders the pairs at random with ``seed`` (pass the epoch number, e.g. ``seed=epoch``, for a
    new order each epoch). ``sort_by_length`` groups pairs of similar source length into the same batch
    (less padding), then shuffles the order of the batches when ``shuffle``. ``drop_last`` drops a final
    short batch. ``start`` skips the first ``start`` batches; ``rank``/``world_size`` build only every
    ``world_size``-th batch, from batch ``rank`` on (one process's share under ``torchrun``); the others are
    never encoded. The order is :func:`batch_order`'s.
    """
    for name, value, low in (("start", start, 0), ("rank", rank, 0), ("world_size", world_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size={world_size}, got {rank}")
    chunks = batch_order(pairs, src_vocab, tgt_vocab, batch_size, shuffle, seed, sort_by_length, drop_last)
    for index in range(start, len(chunks)):
        if index % world_size == rank:
            yield make_batch([pairs[i] for i in chunks[index]], src_vocab, tgt_vocab, device)


class BatchStream:
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

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self):
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




def data_fingerprint(pairs: Sequence[tuple[str, str]]) -> str:
    """A short hash of the training pairs, in order: a resumed run checks that it trains on the same data."""
    digest = hashlib.sha256()
    for src, tgt in pairs:
        digest.update(f"{src}\t{tgt}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def check_fits(pairs: Sequence[tuple[str, str]], src_vocab: Vocab, tgt_vocab: Vocab, max_len: int) -> None:
    """Refuse, before training, pairs longer than the model's ``max_len`` positions (they would crash it
    mid-run), with a ``ValueError`` that counts them."""
    # a token is at least one character, and Unicode normalisation (NFC) at most triples a text's length:
    # only texts of max_len / 3 characters or more can be too long, the others need no tokenising
    suspects = [(s, t) for s, t in pairs if 3 * max(len(s), len(t)) >= max_len]
    needed = [max(len(src_vocab.tokenize(s)), len(tgt_vocab.tokenize(t))) + 1 for s, t in suspects]
    longest = max(needed, default=0)
    if longest > max_len:
        n = sum(1 for k in needed if k > max_len)
        raise ValueError(f"train: {n} training pair(s) need more than the model's max_len={max_len} positions "
                         f"(the longest needs {longest}); drop them (from_pairs(..., max_len={max_len})) or build "
                         "the model with a larger max_len")
