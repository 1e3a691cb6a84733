"""BLEU, chrF and exact match: known values, edge cases, bad input."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from tfm_lesson.train.metrics import bleu, chrf, exact_match, scores


def test_perfect_and_disjoint():
    refs = ["le chat noir dort .", "trois chiens mangent ."]
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert chrf(refs, refs) == pytest.approx(100.0)
    assert exact_match(refs, refs) == 100.0
    assert bleu(["x y z w"] * 2, refs) == pytest.approx(0.0)
    assert chrf(["qqqq"] * 2, ["zzzz"] * 2) == pytest.approx(0.0)


def _bleu_by_hand(hyp: list[str], ref: list[str]) -> float:
    """Papineni's formula for one sentence pair with every n-gram precision non-zero (no smoothing needed)."""
    logs = []
    for n in range(1, 5):
        h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
        r = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
        logs.append(math.log(sum((h & r).values()) / sum(h.values())))
    bp = min(1.0, math.exp(1 - len(ref) / len(hyp)))
    return 100 * bp * math.exp(sum(logs) / 4)


def test_bleu_matches_the_formula():
    hyp = "the cat sat on the mat today".split()
    ref = "the cat sat on the red mat today again".split()
    assert bleu([" ".join(hyp)], [" ".join(ref)]) == pytest.approx(_bleu_by_hand(hyp, ref), abs=1e-6)


def test_chrf_known_value():
    # one character different out of "abcd" vs "abce": chrF is between 0 and 100, and symmetric here
    a, b = chrf(["abcd"], ["abce"]), chrf(["abce"], ["abcd"])
    assert 0 < a < 100 and a == pytest.approx(b)
    # more overlap, higher score
    assert chrf(["the black cat"], ["the black cats"]) > chrf(["the cat"], ["the black cats"])


def test_exact_match_ignores_whitespace_only():
    assert exact_match(["a  b", "c"], ["a b", "d"]) == 50.0
    assert exact_match(["A b"], ["a b"]) == 0.0


def test_scores_keys():
    out = scores(["a b c d"], ["a b c d"])
    assert set(out) == {"exact_match", "bleu", "chrf"} and all(v == pytest.approx(100) for v in out.values())


@pytest.mark.parametrize("hyps, refs, error", [
    ("a b", ["a b"], TypeError),
    (["a"], ["a", "b"], ValueError),
    ([], [], ValueError),
    ([1], ["a"], TypeError),
])
def test_bad_input(hyps, refs, error):
    with pytest.raises(error, match="hypotheses|references"):
        bleu(hyps, refs)
