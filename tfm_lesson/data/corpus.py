"""Text for a language model: the course's own English, or any text file, split once into train and
validation, and batches of random windows for next-token prediction.

    corpus = load_corpus()                      # the English side of the shipped sentence pairs
    corpus = load_corpus(path="my_book.txt")    # your own text
    x, y = random_windows(ids, batch_size=32, max_len=64)   # (32, 64) each; y is x shifted left by one

**The default corpus** is the English half of ``sentences.tsv.gz``: 50,000 sentences generated for this
course by :mod:`tfm_lesson.data.sentences` (a few hundred words, simple grammar: "The small teacher washes
the famous dog."), one sentence per line, about 1.7 MB. Licence: part of tfm_lesson (MIT); the sentences
are realised with pyRealB, whose English lexicon is CC BY 4.0 (see :data:`tfm_lesson.data.CREDITS`).
A small vocabulary and regular grammar are what a tiny model can learn in a minute on a CPU, so its
samples turn from noise into sentences in one short run.

**The split** is fixed: the last 10% of the lines (at least one) are the validation text, the rest train.
The shipped sentences are stored in random order, so both halves look alike and no sentence is in both.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

from .._validate import renamed_keywords

__all__ = ["Corpus", "load_corpus", "split_text", "random_windows", "CORPUS_LICENCE"]

CORPUS_LICENCE = ("the English side of tfm_lesson's generated sentence pairs (MIT, part of tfm_lesson); "
                  "realised with pyRealB, whose English lexicon is CC BY 4.0")


@dataclass(frozen=True)
class Corpus:
    """A text split into ``train`` and ``valid`` (held out: never trained on)."""

    name: str
    train: str
    valid: str
    licence: str = ""

    def __repr__(self) -> str:
        return (f"Corpus({self.name!r}: train {len(self.train):,} characters, valid {len(self.valid):,} "
                f"characters)")


def split_text(text: str, valid_fraction: float = 0.1) -> tuple[str, str]:
    """Split at a line boundary: the last ``valid_fraction`` of the lines (at least one) is validation.

    A text with a single line is split by characters instead. Returns ``(train, valid)``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not (isinstance(valid_fraction, (int, float)) and 0.0 < valid_fraction < 1.0):
        raise ValueError(f"valid_fraction must be in (0, 1), got {valid_fraction!r}")
    if len(text) < 2:
        raise ValueError(f"text is too short to split into train and validation ({len(text)} characters)")
    lines = text.splitlines(keepends=True)
    if len(lines) >= 2:
        n_valid = min(len(lines) - 1, max(1, round(len(lines) * valid_fraction)))
        return "".join(lines[:-n_valid]), "".join(lines[-n_valid:])
    cut = min(len(text) - 1, max(1, round(len(text) * (1 - valid_fraction))))
    return text[:cut], text[cut:]


def _shipped_english() -> str:
    with resources.files("tfm_lesson.data").joinpath("sentences.tsv.gz").open("rb") as raw:
        with gzip.open(raw, "rt", encoding="utf-8") as f:
            return "".join(line.split("\t", 1)[0] + "\n" for line in f if line.strip())


def load_corpus(path: str | os.PathLike | None = None, text: str | None = None, valid_fraction: float = 0.1,
                max_chars: int | None = None) -> Corpus:
    """The shipped English sentences (default), a text file (``path``, UTF-8) or a string (``text``).

    ``max_chars`` keeps only the first that many characters of the whole text before splitting (a quick run).
    """
    if path is not None and text is not None:
        raise ValueError("give path or text, not both")
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 2):
        raise ValueError(f"max_chars must be an int >= 2, got {max_chars!r}")
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no such text file: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        name, licence = path.name, "your own text"
    elif text is not None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        name, licence = "text", "your own text"
    else:
        text, name, licence = _shipped_english(), "sentences (English)", CORPUS_LICENCE
    if max_chars is not None:
        text = text[:max_chars]
    if len(text.strip()) < 2:
        raise ValueError(f"the text of {name!r} is empty or almost: nothing to learn from")
    train, valid = split_text(text, valid_fraction)
    return Corpus(name, train, valid, licence)


@renamed_keywords(context="max_len")
def random_windows(ids: Tensor, batch_size: int, max_len: int, generator: torch.Generator | None = None,
                   device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """``batch_size`` windows at random places of a 1-D id tensor. Returns ``(x, y)``, each
    ``(batch_size, max_len)``, with ``y[:, t] = x[:, t + 1]``: the token that follows ``x[:, t]``."""
    if not isinstance(ids, Tensor) or ids.dim() != 1:
        raise ValueError(f"ids must be a 1-D tensor of token ids, got "
                         f"{tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__}")
    for name, value in (("batch_size", batch_size), ("max_len", max_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if ids.numel() < max_len + 1:
        raise ValueError(f"ids holds {ids.numel()} tokens: too few for one window of max_len={max_len} "
                         f"(needs max_len + 1 = {max_len + 1})")
    starts = torch.randint(0, ids.numel() - max_len, (batch_size,), generator=generator)  # (batch,)
    offsets = torch.arange(max_len + 1)  # (max_len + 1,)
    windows = ids[starts[:, None] + offsets]  # (batch, max_len + 1)
    x, y = windows[:, :-1], windows[:, 1:]  # inputs and their next tokens
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y
