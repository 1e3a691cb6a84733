"""Checkers for chapter 11 (beam search and BLEU):

- ``check_beam_step(fn)``: ``fn(scores (k,), log_probs (k, V), finished (k,), beam_size, pad_id)`` ->
  ``(new_scores, parent, token)``, each ``(beam_size,)``: one step of beam search for one sentence;
- ``check_length_normalised(fn)``: ``fn(scores, lengths, alpha)`` -> ``scores / ((5 + lengths) / 6) ** alpha``
  (GNMT's length penalty, Wu et al. 2016);
- ``check_corpus_and_mean_bleu(fn)``: ``fn(hypotheses, references)`` -> ``(corpus BLEU, mean of sentence BLEUs)``
  with sacreBLEU.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ._harness import Mistake, call, close, expect, passed

__all__ = ["check_beam_step", "check_length_normalised", "check_corpus_and_mean_bleu"]


# one beam-search step ---------------------------------------------------------------------------------------------
def _beam_step(scores: Tensor, log_probs: Tensor, finished: Tensor, beam_size: int, pad_id: int,
               bug: str = "") -> tuple[Tensor, Tensor, Tensor]:
    k, vocab = log_probs.shape
    if bug != "extend_finished":
        ended = torch.full_like(log_probs, float("-inf"))
        ended[:, pad_id] = 0.0
        log_probs = torch.where(finished[:, None], ended, log_probs)
    if bug == "per_beam":  # the best token of each beam, not the best k of all k * V
        best, token = log_probs.max(dim=-1)
        new = scores + best
        order = new.topk(beam_size).indices
        return new[order], order, token[order]
    if bug == "forget":
        cand = log_probs + 0 * scores[:, None]
    else:
        cand = scores[:, None] + log_probs  # (k, V)
    top, flat = cand.reshape(-1).topk(beam_size)
    if bug == "swap_div":
        return top, flat % vocab, flat // vocab
    return top, flat // vocab, flat % vocab


def check_beam_step(fn: Callable[..., tuple[Tensor, Tensor, Tensor]]) -> None:
    """``fn(scores, log_probs, finished, beam_size, pad_id)``: scores ``(k,)`` total log-probabilities of the live
    beams, log_probs ``(k, V)`` of the next token after each, finished ``(k,)`` beams that produced </s> (they may
    only be extended by ``pad_id``, at no cost). Returns the ``beam_size`` best extensions of all ``k * V``:
    ``(new_scores, parent, token)``, sorted best first."""
    g = torch.Generator().manual_seed(110)
    for k, vocab, pad_id, n_done in ((4, 9, 0, 1), (3, 7, 2, 0), (5, 11, 0, 2), (4, 6, 1, 4)):
        scores = -torch.rand(k, generator=g) * 3 - torch.arange(k) * 0.5  # distinct, best first
        log_probs = (torch.randn(k, vocab, generator=g) * 2).log_softmax(-1)
        finished = torch.zeros(k, dtype=torch.bool)
        finished[torch.randperm(k, generator=g)[:n_done]] = True
        what = f"beam_step(scores ({k},), log_probs ({k}, {vocab}), finished, beam_size={k}, pad_id={pad_id})"
        result = call(fn, scores.clone(), log_probs.clone(), finished.clone(), k, pad_id, what=what)
        expect(isinstance(result, (tuple, list)) and len(result) == 3,
               f"{what} should return (new_scores, parent, token), got {type(result).__name__}")
        got = [torch.as_tensor(r).detach().cpu() for r in result]
        want = _beam_step(scores, log_probs, finished, k, pad_id)
        expect(all(g_.numel() == k for g_ in got), f"{what}: each of (new_scores, parent, token) should hold "
               f"beam_size = {k} entries, got sizes {[g_.numel() for g_ in got]}. A topk along dim=-1 of the (k, V) "
               "candidates keeps beam_size tokens PER beam: flatten to (k * V,) first")
        got = [g_.reshape(-1) for g_ in got]
        order = got[0].argsort(descending=True)  # accept any order of the k survivors ...
        mine = [x[order] for x in got]
        if close(mine[0], want[0]) and torch.equal(mine[1].long(), want[1]) and torch.equal(mine[2].long(), want[2]):
            continue
        for bug, hint in (
                ("extend_finished", "a finished beam was extended by real words: once a beam produced </s> it may "
                                    "only be followed by pad_id, at log-probability 0, so its score stays as it was "
                                    "(set its row of log_probs to -inf everywhere except pad_id, which gets 0)"),
                ("per_beam", "you kept the best token of each beam: beam search ranks ALL k * V extensions "
                             "together (flatten (k, V) and take the top beam_size), so one strong beam may "
                             "produce several survivors and a weak one none"),
                ("forget", "the beams' past scores are ignored: rank by the TOTAL log-probability, "
                           "scores[:, None] + log_probs"),
                ("swap_div", "parent and token are swapped: in the flattened (k * V) index i, the beam is "
                             "i // V and the token i % V"),
        ):
            bugged = _beam_step(scores, log_probs, finished, k, pad_id, bug)
            b_order = bugged[0].argsort(descending=True)
            bugged = [x[b_order] for x in bugged]
            if close(mine[0], bugged[0], atol=1e-4) and torch.equal(mine[1].long(), bugged[1]) and \
                    torch.equal(mine[2].long(), bugged[2]):
                raise Mistake(hint)
        raise Mistake(f"{what} picked {list(zip(mine[1].tolist(), mine[2].tolist()))} (parent, token), expected "
                      f"{list(zip(want[1].tolist(), want[2].tolist()))}: candidates are scores[:, None] + log_probs "
                      "with finished rows allowed only pad_id at cost 0; keep the top beam_size of all k * V")
    passed("check_beam_step", "the top beam_size of all k * V extensions, finished beams carried over with padding")


# the length penalty -----------------------------------------------------------------------------------------------
def check_length_normalised(fn: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """``fn(scores, lengths, alpha)`` -> ``scores / ((5 + lengths) / 6) ** alpha`` for tensors ``scores`` (total
    log-probabilities, <= 0) and ``lengths`` (generated tokens, </s> included)."""
    g = torch.Generator().manual_seed(111)
    for alpha in (0.6, 1.0, 0.0, 2.0):
        scores = -torch.rand(6, generator=g) * 10 - 0.5
        lengths = torch.randint(1, 15, (6,), generator=g).float()
        what = f"length_normalised(scores, lengths, alpha={alpha})"
        got = call(fn, scores.clone(), lengths.clone(), alpha, what=what)
        expect(isinstance(got, Tensor), f"{what} returned {type(got).__name__}, expected a tensor shaped like "
               "scores; did you forget a `return`?")
        got = got.detach().float().reshape(-1)
        lp = ((5 + lengths) / 6) ** alpha
        want = scores / lp
        if close(got, want):
            continue
        suspects = {
            "multiplied by the length penalty: divide by it. Log-probabilities are negative, so multiplying by a "
            "larger penalty makes long outputs score even lower, the opposite of the aim": scores * lp,
            "that is plain length normalisation, scores / length ** alpha; GNMT's penalty is "
            "((5 + length) / 6) ** alpha, gentler for short outputs": scores / lengths ** alpha,
            "alpha is ignored: the exponent of the penalty is alpha (0 turns it off)": scores / ((5 + lengths) / 6),
            "the penalty is ((5 + length) / 6) ** alpha: 5 + length, divided by 6": scores / ((1 + lengths) / 6) ** alpha,
            "the length counts <s>: count the generated tokens only (</s> included, <s> not)":
                scores / ((6 + lengths) / 6) ** alpha,
        }
        for hint, value in suspects.items():
            if close(got, value):
                if alpha == 0.0 and close(value, want):
                    continue
                raise Mistake(hint)
        raise Mistake(f"{what} differs from scores / ((5 + lengths) / 6) ** alpha "
                      f"(largest difference {(got - want).abs().max().item():.3g})")
    passed("check_length_normalised", "scores / ((5 + length) / 6) ** alpha for alpha 0, 0.6, 1 and 2")


# corpus BLEU against the mean of sentence BLEUs -------------------------------------------------------------------
BLEU_HYPS = ["le chat noir dort .", "les enfants ne mangent pas .", "il pleut", "un grand chien blanc court .",
             "nous voyons la mer"]
BLEU_REFS = ["le chat noir dort .", "les enfants ne mangent pas de pain .", "il pleut beaucoup .",
             "un grand chien blanc court vite .", "nous voyons la mer bleue ."]


def check_corpus_and_mean_bleu(fn: Callable[[list, list], tuple[float, float]]) -> None:
    """``fn(hypotheses, references)`` (lists of strings, one reference per hypothesis) -> ``(corpus, mean)``:
    sacreBLEU's corpus BLEU of the whole list, and the mean of the sentence BLEUs of each pair."""
    import sacrebleu

    for hyps, refs in ((BLEU_HYPS, BLEU_REFS), (BLEU_HYPS[1:4], BLEU_REFS[1:4])):
        what = f"corpus_and_mean_bleu({len(hyps)} hypotheses, {len(refs)} references)"
        result = call(fn, list(hyps), list(refs), what=what)
        expect(isinstance(result, (tuple, list)) and len(result) == 2,
               f"{what} should return two numbers (corpus, mean), got {type(result).__name__}")
        try:
            corpus, mean = (float(x.score) if hasattr(x, "score") else float(x) for x in result)
        except (TypeError, ValueError) as exc:
            raise Mistake(f"{what} should return two numbers (BLEU scores in [0, 100]): {exc}") from exc
        want_c = sacrebleu.corpus_bleu(hyps, [refs]).score
        sent = [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hyps, refs)]
        want_m = sum(sent) / len(sent)
        ok_c, ok_m = abs(corpus - want_c) < 1e-6, abs(mean - want_m) < 1e-6
        if ok_c and ok_m:
            continue
        if abs(corpus - want_m) < 1e-6 and abs(mean - want_c) < 1e-6:
            raise Mistake("the two numbers are swapped: return (corpus BLEU, mean of sentence BLEUs)")
        if abs(corpus - mean) < 1e-6:
            raise Mistake("both numbers are the same: corpus BLEU is NOT the mean of sentence BLEUs. "
                          "sacrebleu.corpus_bleu(hyps, [refs]) pools the n-gram counts of all sentences first, then "
                          "takes one geometric mean and one brevity penalty")
        swapped_c = sacrebleu.corpus_bleu(refs, [hyps]).score
        if abs(corpus - swapped_c) < 1e-6:
            raise Mistake("hypotheses and references are swapped in corpus_bleu(hypotheses, [references]): BLEU is "
                          "not symmetric (precision of the hypothesis, brevity penalty on it)")
        swapped_m = sum(sacrebleu.sentence_bleu(r, [h]).score for h, r in zip(hyps, refs)) / len(hyps)
        if abs(mean - swapped_m) < 1e-6:
            raise Mistake("hypothesis and reference are swapped in sentence_bleu(hypothesis, [reference])")
        if not ok_c:
            raise Mistake(f"corpus BLEU = {corpus:.2f}, expected {want_c:.2f}: call "
                          "sacrebleu.corpus_bleu(hypotheses, [references]) — the references go in a list of "
                          "reference streams, one stream here")
        raise Mistake(f"mean of sentence BLEUs = {mean:.2f}, expected {want_m:.2f}: average "
                      "sacrebleu.sentence_bleu(h, [r]).score over the pairs")
    passed("check_corpus_and_mean_bleu", "corpus BLEU and the mean of sentence BLEUs, as sacreBLEU computes them")


# the reference pieces, for a chapter whose later cells need working pieces ----------------------------------------
def _ref_beam_step(scores: Tensor, log_probs: Tensor, finished: Tensor, beam_size: int, pad_id: int):
    return _beam_step(scores, log_probs, finished, beam_size, pad_id)


def _ref_length_normalised(scores: Tensor, lengths: Tensor, alpha: float) -> Tensor:
    return scores / ((5 + lengths) / 6) ** alpha


def _ref_corpus_and_mean_bleu(hypotheses: list, references: list) -> tuple[float, float]:
    import sacrebleu

    sentence = [sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hypotheses, references)]
    return sacrebleu.corpus_bleu(hypotheses, [references]).score, sum(sentence) / len(sentence)


PIECES = {"beam_step": (check_beam_step, _ref_beam_step),
          "length_normalised": (check_length_normalised, _ref_length_normalised),
          "corpus_and_mean_bleu": (check_corpus_and_mean_bleu, _ref_corpus_and_mean_bleu)}
