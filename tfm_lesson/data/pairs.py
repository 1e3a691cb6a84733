"""Parallel data: (source, target) pairs split into train/valid/test, with their vocabularies.

:func:`from_pairs` is the one road every task takes: it drops duplicate sources (the first pair of a
source wins), shuffles with a seed, cuts valid and test off, and builds both vocabularies from the
training split only. Because sources are unique before the cut, no source is in two splits.
:func:`read_tsv` reads the Tatoeba/Anki ``english<TAB>french[<TAB>attribution...]`` format.
"""
from __future__ import annotations

import io
import random
import warnings
from dataclasses import dataclass, field
from os import PathLike

from .vocab import Vocab

__all__ = ["ParallelData", "from_pairs", "read_tsv", "dedupe_by_source", "split_pairs"]

Pair = tuple[str, str]


@dataclass
class ParallelData:
    """A task's splits and vocabularies (built from ``train`` only)."""

    name: str
    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    src_vocab: Vocab
    tgt_vocab: Vocab
    info: dict = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        """Number of pairs per split and vocabulary sizes."""
        return {"train": len(self.train), "valid": len(self.valid), "test": len(self.test),
                "src_vocab": len(self.src_vocab), "tgt_vocab": len(self.tgt_vocab)}

    def split(self, name: str) -> list[Pair]:
        """``"train"``, ``"valid"`` or ``"test"`` by name."""
        if name not in ("train", "valid", "test"):
            raise ValueError(f"split must be 'train', 'valid' or 'test', got {name!r}")
        return getattr(self, name)

    def __repr__(self) -> str:
        s = self.sizes()
        return (f"ParallelData({self.name!r}, train={s['train']}, valid={s['valid']}, test={s['test']}, "
                f"src_vocab={s['src_vocab']}, tgt_vocab={s['tgt_vocab']})")


def dedupe_by_source(pairs) -> list[Pair]:
    """Keep the first pair of each source (sources compared after stripping outer spaces)."""
    seen: set[str] = set()
    out: list[Pair] = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"pairs[{i}] must be a (source, target) pair of str, got {pair!r}")
        src, tgt = pair
        if not (isinstance(src, str) and isinstance(tgt, str)):
            raise TypeError(f"pairs[{i}] must hold two str, got ({type(src).__name__}, {type(tgt).__name__})")
        src, tgt = src.strip(), tgt.strip()
        if src in seen:
            continue
        seen.add(src)
        out.append((src, tgt))
    return out


def _count(part: float | int, n: int, name: str) -> int:
    if isinstance(part, bool) or not isinstance(part, (int, float)) or part < 0:
        raise ValueError(f"{name} must be a fraction in [0, 1) or a count >= 0, got {part!r}")
    if isinstance(part, float):
        if part >= 1:
            raise ValueError(f"{name} as a fraction must be < 1, got {part}")
        return int(round(part * n))
    return int(part)


def split_pairs(pairs: list[Pair], seed: int = 0, valid: float | int = 0.05,
                test: float | int = 0.05) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Shuffle ``pairs`` with ``seed`` and cut off ``valid`` and ``test`` (fractions, or counts if int)."""
    n = len(pairs)
    n_valid, n_test = _count(valid, n, "valid"), _count(test, n, "test")
    if n_valid + n_test >= n:
        raise ValueError(f"valid ({n_valid}) + test ({n_test}) leave no training pairs out of {n}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    shuffled = [pairs[i] for i in order]
    return shuffled[n_valid + n_test:], shuffled[:n_valid], shuffled[n_valid:n_valid + n_test]


def from_pairs(pairs, seed: int = 0, valid: float | int = 0.05, test: float | int = 0.05,
               tokenizer: str = "words", name: str = "pairs", lower: bool = False, min_freq: int = 1,
               max_vocab: int | None = None, src_tokenizer: str | None = None,
               tgt_tokenizer: str | None = None, max_len: int | None = None) -> ParallelData:
    """Dedupe by source, split without overlap, build vocabularies from the training split.

    ``valid``/``test``: a fraction of the distinct pairs (float) or a number of pairs (int).
    ``src_tokenizer``/``tgt_tokenizer`` override ``tokenizer`` for one side.
    ``max_len``: drop the pairs a model with that many positions cannot read, a source of more than
    ``max_len - 1`` tokens (``</s>`` is added) or a target of more than ``max_len - 1`` (``<s>`` is
    added); ``info["too_long"]`` counts them.
    """
    unique = dedupe_by_source(pairs)
    too_long = 0
    if max_len is not None:
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
            raise ValueError(f"max_len must be an int >= 2 (a token and </s>), got {max_len!r}")
        src_tok = Vocab(tokenizer=src_tokenizer or tokenizer, lower=lower)
        tgt_tok = Vocab(tokenizer=tgt_tokenizer or tokenizer, lower=lower)
        kept = [(s, t) for s, t in unique
                if len(src_tok.tokenize(s)) < max_len and len(tgt_tok.tokenize(t)) < max_len]
        too_long = len(unique) - len(kept)
        unique = kept
    try:
        train, valid_pairs, test_pairs = split_pairs(unique, seed=seed, valid=valid, test=test)
    except ValueError as err:
        dropped = f", {too_long} more too long for max_len={max_len}" if too_long else ""
        raise ValueError(f"{name}: {len(unique)} distinct source sentence(s){dropped}: {err}") from None
    src_vocab = Vocab.build((s for s, _ in train), min_freq=min_freq, max_size=max_vocab,
                            tokenizer=src_tokenizer or tokenizer, lower=lower)
    tgt_vocab = Vocab.build((t for _, t in train), min_freq=min_freq, max_size=max_vocab,
                            tokenizer=tgt_tokenizer or tokenizer, lower=lower)
    info = {"seed": seed, "pairs_given": len(pairs) if hasattr(pairs, "__len__") else None,
            "distinct_sources": len(unique) + too_long, "too_long": too_long}
    return ParallelData(name, train, valid_pairs, test_pairs, src_vocab, tgt_vocab, info)


def read_tsv(path: str | PathLike, max_pairs: int | None = None, return_skipped: bool = False,
             warn: bool = True):
    """Read ``source<TAB>target[<TAB>anything...]`` lines (UTF-8; Tatoeba/Anki format).

    Extra columns are ignored. Blank lines, lines without a tab and lines with an empty side are
    skipped and counted; a warning gives the count (``warn=False`` silences it). With
    ``return_skipped=True`` returns ``(pairs, n_skipped)``. ``max_pairs`` stops after that many pairs.
    A file that is not UTF-8 text raises ``ValueError`` naming the file and the first bad line.
    """
    if max_pairs is not None and (isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 0):
        raise ValueError(f"max_pairs must be an int >= 0 or None, got {max_pairs!r}")
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{path} is not UTF-8 text: line {line} holds the byte 0x{raw[err.start]:02x}, "
                         "which UTF-8 does not allow there; save the file as UTF-8 (for example "
                         f"iconv -f latin1 -t utf-8 {path} > fixed.tsv)") from None
    pairs: list[Pair] = []
    skipped = 0
    for line in io.StringIO(text, newline=""):
        if max_pairs is not None and len(pairs) >= max_pairs:
            break
        line = line.rstrip("\r\n")
        if not line.strip():
            skipped += 1
            continue
        cols = line.split("\t")
        if len(cols) < 2 or not cols[0].strip() or not cols[1].strip():
            skipped += 1
            continue
        pairs.append((cols[0].strip(), cols[1].strip()))
    if skipped and warn:
        warnings.warn(f"read_tsv: skipped {skipped} blank or malformed line(s) in {path}", stacklevel=2)
    return (pairs, skipped) if return_skipped else pairs
