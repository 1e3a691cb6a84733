"""Inputs no one knows in advance: while grading, every seed a checker sets is mixed with a *salt* the grader draws.

A checker seeds its own random draws (``torch.manual_seed(0)``, ``torch.Generator().manual_seed(101)``,
``random.Random(7)``), so in a learner's notebook its inputs are the same every run: good for a learner, and a way
for an answer to learn the outputs by heart. While ``course grade`` records and replays a check
(:mod:`._replay`), :func:`salted` mixes every such seed with the grader's salt, drawn anew for each submission and
handed to the kernel only when the check runs: the checker's logic is unchanged (two calls with the same seed still
draw the same numbers, so a reference and the learner's module still start from the same weights), but its inputs
are ones no answer could have seen before.
"""
from __future__ import annotations

import contextlib
import hashlib
import random
from typing import Iterator

import torch

__all__ = ["salted", "mix"]


def mix(seed: int, salt: int) -> int:
    """A seed drawn from ``seed`` and ``salt`` (the same pair gives the same seed; any other pair, another one)."""
    digest = hashlib.sha256(f"{int(seed)}:{int(salt)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@contextlib.contextmanager
def salted(salt: int | None) -> Iterator[None]:
    """Within the block, ``torch.manual_seed``, ``torch.Generator(...).manual_seed`` and ``random.Random(seed)`` /
    ``random.seed`` use ``mix(seed, salt)``; with ``salt`` None, nothing changes."""
    if salt is None:
        yield
        return
    manual_seed, generator, rng, seed = torch.manual_seed, torch.Generator, random.Random, random.seed

    class SaltedGenerator(generator):  # type: ignore[misc, valid-type]
        def manual_seed(self, value: int) -> "SaltedGenerator":
            return super().manual_seed(mix(value, salt))

    class SaltedRandom(rng):  # type: ignore[misc, valid-type]
        def seed(self, a: object = None, version: int = 2) -> None:
            super().seed(mix(a, salt) if isinstance(a, int) else a, version)

    SaltedGenerator.__name__ = SaltedGenerator.__qualname__ = "Generator"
    SaltedRandom.__name__ = SaltedRandom.__qualname__ = "Random"
    torch.manual_seed = lambda value: manual_seed(mix(value, salt))
    torch.Generator = SaltedGenerator
    random.Random = SaltedRandom
    random.seed = lambda a=None, version=2: seed(mix(a, salt) if isinstance(a, int) else a, version)
    try:
        yield
    finally:
        torch.manual_seed, torch.Generator, random.Random, random.seed = manual_seed, generator, rng, seed
