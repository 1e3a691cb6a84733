"""Toy tasks: copy, reverse and sort a sequence of symbols.

A sequence is ``min_len..max_len`` symbols drawn uniformly from ``vocab_size`` symbols, written as
space-separated integers ``"0" .. str(vocab_size - 1)`` (so "sort" means numeric order). The target is the
same sequence copied, reversed or sorted. Sources are distinct, so no sequence is in two splits.
"""
from __future__ import annotations

import random

from .pairs import ParallelData, from_pairs

__all__ = ["TOY_TASKS", "toy_pairs", "load_toy"]

TOY_TASKS = ("copy", "reverse", "sort")


def _target(task: str, seq: list[int]) -> list[int]:
    if task == "copy":
        return list(seq)
    if task == "reverse":
        return seq[::-1]
    return sorted(seq)


def toy_pairs(task: str, n: int, seed: int = 0, min_len: int = 4, max_len: int = 12,
              vocab_size: int = 20) -> list[tuple[str, str]]:
    """``n`` distinct (source, target) pairs of the toy ``task``, deterministic by ``seed``."""
    if task not in TOY_TASKS:
        raise ValueError(f"task must be one of {TOY_TASKS}, got {task!r}")
    if not (isinstance(min_len, int) and isinstance(max_len, int) and 1 <= min_len <= max_len):
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}")
    possible = sum(vocab_size ** k for k in range(min_len, max_len + 1))
    if n > possible // 2:
        raise ValueError(f"n={n} is more than half of the {possible} possible sequences: "
                         "widen min_len..max_len or vocab_size")
    rng = random.Random(f"toy-{seed}")  # one stream for every task: copy/reverse/sort share their sources
    seen: set[tuple[int, ...]] = set()
    pairs: list[tuple[str, str]] = []
    while len(pairs) < n:
        seq = [rng.randrange(vocab_size) for _ in range(rng.randint(min_len, max_len))]
        key = tuple(seq)
        if key in seen:
            continue
        seen.add(key)
        pairs.append((" ".join(map(str, seq)), " ".join(map(str, _target(task, seq)))))
    return pairs


def load_toy(task: str, seed: int = 0, n_train: int = 20000, n_valid: int = 1000, n_test: int = 1000,
             min_len: int = 4, max_len: int = 12, vocab_size: int = 20) -> ParallelData:
    """Train/valid/test splits of a toy task with their vocabularies."""
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if not isinstance(value, int) or value < (1 if name == "n_train" else 0):
            raise ValueError(f"{name} must be a non-negative int (n_train >= 1), got {value!r}")
    pairs = toy_pairs(task, n_train + n_valid + n_test, seed, min_len, max_len, vocab_size)
    data = from_pairs(pairs, seed=seed, valid=n_valid, test=n_test, name=task)
    # the alphabet is known by design: every symbol gets an id even if the training split missed it
    for vocab in (data.src_vocab, data.tgt_vocab):
        for symbol in range(vocab_size):
            vocab.add(str(symbol))
    data.info.update(min_len=min_len, max_len=max_len, vocab_size=vocab_size)
    return data
