"""Numbers: an integer written in English words → the same integer in French words.

``"three hundred and seventy-one thousand, four hundred and eighty"`` →
``"trois cent soixante et onze mille quatre cent quatre-vingts"``. The words come from ``num2words``
(LGPL), which knows the French rules (``et un``, ``quatre-vingts`` but ``quatre-vingt-un``, ``deux cents``
but ``deux cent mille``). Calling it a million times is slow (~2,000 numbers/s), so below one million we
call it once for each of 0..999 and put the thousands together with the same rules; the tests compare
that composition with ``num2words`` itself.
"""
from __future__ import annotations

import random
from functools import lru_cache

from num2words import num2words

from .pairs import ParallelData, from_pairs

__all__ = ["number_words", "number_pairs", "draw_numbers", "magnitudes", "load_numbers"]


@lru_cache(maxsize=None)
def _below_thousand(lang: str) -> tuple[str, ...]:
    return tuple(num2words(i, lang=lang) for i in range(1000))


def number_words(n: int, lang: str = "en") -> str:
    """``n`` in words, as ``num2words(n, lang=lang)`` writes it (fast path for 0 <= n < 10**6)."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if lang not in ("en", "fr") or not 0 <= n < 1_000_000:
        return num2words(n, lang=lang)
    small = _below_thousand(lang)
    thousands, rest = divmod(n, 1000)
    if thousands == 0:
        return small[rest]
    if lang == "en":
        head = f"{small[thousands]} thousand"
        if rest == 0:
            return head
        return f"{head} and {small[rest]}" if rest < 100 else f"{head}, {small[rest]}"
    # French: "mille" is invariable and takes no "un"; "cents"/"vingts" lose their s before it.
    if thousands == 1:
        head = "mille"
    else:
        head = small[thousands]
        if head.endswith(("cents", "vingts")):
            head = head[:-1]
        head += " mille"
    return head if rest == 0 else f"{head} {small[rest]}"


def magnitudes(low: int, high: int) -> list[tuple[int, int]]:
    """``low..high`` cut into ranges of numbers with the same count of digits: ``[(0, 9), (10, 99), ...]``."""
    out, lo = [], low
    while lo <= high:
        hi = min(high, 10 ** len(str(lo)) - 1)
        out.append((lo, hi))
        lo = hi + 1
    return out


def draw_numbers(n: int, seed: int = 0, low: int = 0, high: int = 999_999) -> list[int]:
    """``n`` distinct integers from ``low..high``, every magnitude equally likely.

    Drawing uniformly from 0..999,999 would make nine numbers in ten six digits long and almost none small
    (57 of 50,000 below 1,000), so a model would never learn *ninety-seven*. Instead each draw first picks a
    count of digits uniformly among those with numbers left, then a number of that many digits. A magnitude
    with fewer numbers than its share (1 to 3 digits: 1,000 numbers in all) is taken whole and its share goes
    to the others.
    """
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
        raise ValueError(f"need 0 <= low <= high, got low={low}, high={high}")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= high - low + 1:
        raise ValueError(f"n must be in 1..{high - low + 1} (the size of low..high), got {n!r}")
    rng = random.Random(f"numbers-{seed}")
    ranges = magnitudes(low, high)
    left = [hi - lo + 1 for lo, hi in ranges]  # numbers not yet drawn, per magnitude
    counts = [0] * len(ranges)
    for _ in range(n):  # how many of each magnitude: one magnitude per draw, among those not exhausted
        open_ = [i for i, k in enumerate(left) if k]
        i = open_[rng.randrange(len(open_))]
        counts[i] += 1
        left[i] -= 1
    values = [v for (lo, hi), k in zip(ranges, counts) for v in rng.sample(range(lo, hi + 1), k)]
    rng.shuffle(values)
    return values


def number_pairs(n: int, seed: int = 0, low: int = 0, high: int = 999_999, src_lang: str = "en",
                 tgt_lang: str = "fr") -> list[tuple[str, str]]:
    """``n`` distinct integers from ``low..high`` (:func:`draw_numbers`: every magnitude equally likely) as
    (source, target) words."""
    values = draw_numbers(n, seed, low, high)
    return [(number_words(v, src_lang), number_words(v, tgt_lang)) for v in values]


def load_numbers(seed: int = 0, n_train: int = 50_000, n_valid: int = 1000, n_test: int = 1000,
                 low: int = 0, high: int = 999_999, src_lang: str = "en", tgt_lang: str = "fr") -> ParallelData:
    """English → French number words, every magnitude equally likely (:func:`draw_numbers`), split without
    overlap."""
    pairs = number_pairs(n_train + n_valid + n_test, seed, low, high, src_lang, tgt_lang)
    data = from_pairs(pairs, seed=seed, valid=n_valid, test=n_test, name="numbers")
    data.info.update(low=low, high=high, src_lang=src_lang, tgt_lang=tgt_lang)
    return data
