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

__all__ = ["number_words", "number_pairs", "load_numbers"]


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


def number_pairs(n: int, seed: int = 0, low: int = 0, high: int = 999_999, src_lang: str = "en",
                 tgt_lang: str = "fr") -> list[tuple[str, str]]:
    """``n`` distinct integers from ``low..high`` (sampled without replacement) as (source, target) words."""
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
        raise ValueError(f"need 0 <= low <= high, got low={low}, high={high}")
    if not isinstance(n, int) or not 1 <= n <= high - low + 1:
        raise ValueError(f"n must be in 1..{high - low + 1} (the size of low..high), got {n!r}")
    values = random.Random(f"numbers-{seed}").sample(range(low, high + 1), n)
    return [(number_words(v, src_lang), number_words(v, tgt_lang)) for v in values]


def load_numbers(seed: int = 0, n_train: int = 50_000, n_valid: int = 1000, n_test: int = 1000,
                 low: int = 0, high: int = 999_999, src_lang: str = "en", tgt_lang: str = "fr") -> ParallelData:
    """English → French number words, split without overlap."""
    pairs = number_pairs(n_train + n_valid + n_test, seed, low, high, src_lang, tgt_lang)
    data = from_pairs(pairs, seed=seed, valid=n_valid, test=n_test, name="numbers")
    data.info.update(low=low, high=high, src_lang=src_lang, tgt_lang=tgt_lang)
    return data
