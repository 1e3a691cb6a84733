"""Data for training: toy tasks, number and sentence translation pairs, a TSV loader, vocabularies, batches.

Everything is generated or shipped inside the package and deterministic by seed; nothing is downloaded.

>>> data = load_task("reverse", seed=0)          # ParallelData: train/valid/test + vocabularies
>>> batch = next(batches(data.train, data.src_vocab, data.tgt_vocab, batch_size=32))
>>> batch.src.shape, batch.tgt_in.shape           # (32, src_len), (32, tgt_len - 1)

Tasks: ``copy``, ``reverse``, ``sort`` (toy), ``numbers`` (English → French number words, num2words),
``sentences`` (English → French sentences realised with pyRealB from a bilingual lexicon; see
:data:`CREDITS`). Your own corpus: ``from_pairs(read_tsv("fra.txt"))``.
"""
from __future__ import annotations

from .lexicon import CREDITS
from .alignments import AlignedPair, align_clause, generate_aligned
from .batching import Batch, batches, encode_batch, make_batch, pad_sequences
from .numbers import load_numbers, number_pairs, number_words
from .pairs import ParallelData, dedupe_by_source, from_pairs, read_tsv, split_pairs
from .sentences import generate_sentences, load_sentences, shipped_sentences
from .toy import TOY_TASKS, load_toy, toy_pairs
from .vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab

__all__ = [
    "Vocab", "PAD", "BOS", "EOS", "UNK", "SPECIALS",
    "ParallelData", "from_pairs", "read_tsv", "dedupe_by_source", "split_pairs",
    "Batch", "batches", "make_batch", "encode_batch", "pad_sequences",
    "TOY_TASKS", "toy_pairs", "load_toy", "number_words", "number_pairs", "load_numbers",
    "generate_sentences", "load_sentences", "shipped_sentences",
    "AlignedPair", "align_clause", "generate_aligned",
    "TASKS", "load_task", "CREDITS",
]

TASKS = (*TOY_TASKS, "numbers", "sentences")


def load_task(name: str, seed: int = 0, **kw) -> ParallelData:
    """Splits and vocabularies of a task by name: ``copy``, ``reverse``, ``sort``, ``numbers``, ``sentences``.

    Keyword arguments go to the task's loader: :func:`load_toy` (``n_train, n_valid, n_test, min_len,
    max_len, vocab_size``), :func:`load_numbers` (``n_train, n_valid, n_test, low, high``),
    :func:`load_sentences` (``n, n_train, n_valid, n_test, generate_seed``). ``seed`` fixes the sequences
    drawn (toy, numbers) and the shuffle that splits them; the shipped sentences are the same for every
    ``seed``, only their split changes (pass ``generate_seed`` for new sentences).
    """
    if name in TOY_TASKS:
        return load_toy(name, seed=seed, **kw)
    if name == "numbers":
        return load_numbers(seed=seed, **kw)
    if name == "sentences":
        return load_sentences(seed=seed, **kw)
    raise ValueError(f"task name must be one of {TASKS}, got {name!r}")

