"""How good is a translation? Corpus BLEU and chrF (computed by sacreBLEU, the reference implementation), and
exact match. All three are percentages in ``[0, 100]``.

    bleu(["the cat sat"], ["the cat sat"])          # 100.0
    scores(hypotheses, references)                  # {"exact_match": .., "bleu": .., "chrf": ..}
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["bleu", "chrf", "exact_match", "scores"]


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[list[str], list[str]]:
    for name, seq in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(seq, str) or not all(isinstance(s, str) for s in seq):
            raise TypeError(f"{name} must be a list of strings (one per sentence), got {type(seq).__name__}")
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must have the same length, got {len(hypotheses)} and "
                         f"{len(references)}")
    if not hypotheses:
        raise ValueError("hypotheses and references are empty: nothing to score")
    return list(hypotheses), list(references)


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (Papineni et al., 2002) with sacreBLEU's defaults (13a tokenisation, exp smoothing), in
    ``[0, 100]``. One reference per hypothesis."""
    import sacrebleu

    hyps, refs = _check(hypotheses, references)
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (Popović, 2015): character n-gram F-score (n <= 6, beta = 2), in ``[0, 100]``."""
    import sacrebleu

    hyps, refs = _check(hypotheses, references)
    return float(sacrebleu.corpus_chrf(hyps, [refs]).score)


def _normalise(text: str) -> str:
    return " ".join(text.split())


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Percentage of hypotheses equal to their reference (whitespace differences ignored)."""
    hyps, refs = _check(hypotheses, references)
    return 100.0 * sum(_normalise(h) == _normalise(r) for h, r in zip(hyps, refs)) / len(hyps)


def scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """All three metrics at once: ``{"exact_match", "bleu", "chrf"}``."""
    return {"exact_match": exact_match(hypotheses, references), "bleu": bleu(hypotheses, references),
            "chrf": chrf(hypotheses, references)}
