"""Chapters 11 and 12 checkers: the references pass; each classic mistake fails with its own hint."""
from __future__ import annotations

import math
import re
from contextlib import contextmanager

import pytest
import sacrebleu
import torch

from tfm_lesson.checks import (Mistake, check_beam_step, check_corpus_and_mean_bleu, check_heads_off,
                               check_length_normalised, check_query_entropy, check_rank_correlation)
from tfm_lesson.checks.decoding import _beam_step
from tfm_lesson.checks.inside import _entropy
from conftest import passes as _passes, raises_mistake as _raises  # noqa: E402


# --- beam step -------------------------------------------------------------------------------------------------------
def _learner_beam(scores, log_probs, finished, beam_size, pad_id):
    vocab = log_probs.size(-1)
    ended = torch.full_like(log_probs, float("-inf"))
    ended[:, pad_id] = 0.0
    cand = scores[:, None] + torch.where(finished[:, None], ended, log_probs)  # (k, V)
    top, flat = cand.view(-1).topk(beam_size)
    return top, flat // vocab, flat % vocab


def test_beam_step_reference_passes(capsys):
    _passes(check_beam_step, _learner_beam, capsys)
    _passes(check_beam_step, lambda *a: tuple(reversed([x for x in reversed(_learner_beam(*a))])), capsys)


@pytest.mark.parametrize("bug, hint", [
    ("extend_finished", "a finished beam was extended by real words"),
    ("per_beam", "you kept the best token of each beam"),
    ("forget", "the beams' past scores are ignored"),
    ("swap_div", "parent and token are swapped"),
])
def test_beam_step_mistakes(bug, hint):
    _raises(check_beam_step, lambda s, lp, f, k, p: _beam_step(s, lp, f, k, p, bug), hint)


# --- length penalty --------------------------------------------------------------------------------------------------
def test_length_normalised_reference_passes(capsys):
    _passes(check_length_normalised, lambda s, n, a: s / ((5 + n) / 6) ** a, capsys)


@pytest.mark.parametrize("fn, hint", [
    (lambda s, n, a: s * ((5 + n) / 6) ** a, "multiplied by the length penalty"),
    (lambda s, n, a: s / n ** a, "plain length normalisation"),
    (lambda s, n, a: s / ((5 + n) / 6), "alpha is ignored"),
    (lambda s, n, a: s / ((6 + n) / 6) ** a, "the length counts <s>"),
])
def test_length_normalised_mistakes(fn, hint):
    _raises(check_length_normalised, fn, hint)


# --- BLEU --------------------------------------------------------------------------------------------------------------
def _bleu(hyps, refs, bug=""):
    corpus = sacrebleu.corpus_bleu(*((refs, [hyps]) if bug == "swap_corpus" else (hyps, [refs]))).score
    pairs = [(r, h) if bug == "swap_sentence" else (h, r) for h, r in zip(hyps, refs)]
    mean = sum(sacrebleu.sentence_bleu(a, [b]).score for a, b in pairs) / len(pairs)
    if bug == "same":
        return mean, mean
    if bug == "swap":
        return mean, corpus
    return corpus, mean


def test_bleu_reference_passes(capsys):
    _passes(check_corpus_and_mean_bleu, _bleu, capsys)
    _passes(check_corpus_and_mean_bleu, lambda h, r: (sacrebleu.corpus_bleu(h, [r]), _bleu(h, r)[1]), capsys)


@pytest.mark.parametrize("bug, hint", [
    ("same", "corpus BLEU is NOT the mean of sentence BLEUs"),
    ("swap", "the two numbers are swapped"),
    ("swap_corpus", "BLEU is not symmetric"),
    ("swap_sentence", "swapped in sentence_bleu"),
])
def test_bleu_mistakes(bug, hint):
    _raises(check_corpus_and_mean_bleu, lambda h, r: _bleu(h, r, bug), hint)


def test_beam_step_topk_per_row_is_named():
    def per_row(s, lp, f, k, p):
        top, token = (s[:, None] + lp).topk(k, dim=-1)  # (k, k): k tokens for EACH beam
        return top, torch.arange(k)[:, None].expand(k, k), token
    _raises(check_beam_step, per_row, "flatten to (k * V,) first")


def test_bleu_refs_not_wrapped_is_named():
    _raises(check_corpus_and_mean_bleu, lambda h, r: (sacrebleu.corpus_bleu(h, r).score, _bleu(h, r)[1]), "")


# --- entropy per query -------------------------------------------------------------------------------------------------
def _learner_entropy(w, mask):
    full = mask.expand_as(w)
    k = full.sum(-1).float()
    h = -(w * w.clamp_min(1e-12).log()).masked_fill(~full, 0).sum(-1)
    return torch.where(k >= 2, h / k.clamp_min(2).log(), torch.zeros_like(h))


def test_query_entropy_reference_passes(capsys):
    _passes(check_query_entropy, _learner_entropy, capsys)


@pytest.mark.parametrize("bug, hint", [
    ("nan", "0 * log(0) is NaN"),
    ("raw", "not normalised"),
    ("all_keys", "normalised by the log of ALL keys"),
    ("no_guard", "0 * log(0) is NaN"),
])
def test_query_entropy_mistakes(bug, hint):
    _raises(check_query_entropy, lambda w, m: _entropy(w, m, bug), hint)


def test_query_entropy_no_guard_without_nan_and_sign():
    _raises(check_query_entropy, lambda w, m: torch.nan_to_num(_entropy(w, m, "no_guard"), nan=0.5, posinf=0.5),
            "")
    _raises(check_query_entropy, lambda w, m: -_learner_entropy(w, m), "the sign is wrong")


# --- heads off ---------------------------------------------------------------------------------------------------------
def _heads_off(bug=""):
    @contextmanager
    def heads_off(attention, heads):
        d_k = attention.d_k

        def pre(module, inputs):
            (x,) = inputs
            x = x.clone()
            for h in heads:
                if bug == "strided":
                    x[..., h::attention.heads] = 0.0
                else:
                    x[..., h * d_k:(h + 1) * d_k] = 0.0
            return (x,)

        def post(module, inputs, output):
            output = output.clone()
            for h in heads:
                output[..., h * d_k:(h + 1) * d_k] = 0.0
            return output

        def nothing(module, inputs):
            (x,) = inputs
            x = x.clone()
            x[..., 0] = x[..., 0]
            return None

        if bug == "output":
            handle = attention.w_o.register_forward_hook(post)
        elif bug == "noop":
            handle = attention.w_o.register_forward_pre_hook(nothing)
        else:
            handle = attention.w_o.register_forward_pre_hook(pre)
        if bug == "no_finally":
            yield
            handle.remove()
        elif bug == "never_removed":
            yield
        else:
            try:
                yield
            finally:
                handle.remove()
    return heads_off


def test_heads_off_reference_passes(capsys):
    _passes(check_heads_off, _heads_off(), capsys)


@pytest.mark.parametrize("bug, hint", [
    ("strided", "wrong slice"),
    ("output", "you zeroed part of the OUTPUT of W^O"),
    ("noop", "the output did not change"),
    ("never_removed", "remove the hook when the block ends"),
    ("no_finally", "after an error inside the block the hook stays"),
])
def test_heads_off_mistakes(bug, hint):
    _raises(check_heads_off, _heads_off(bug), hint)


def test_heads_off_needs_a_context_manager():
    _raises(check_heads_off, lambda attention, heads: None, "expected a context manager")


# --- rank correlation --------------------------------------------------------------------------------------------------
def _pearson(a, b):
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def _spearman(x, y):
    def ranks(v):
        r = torch.empty(len(v), dtype=torch.float64)
        r[v.argsort()] = torch.arange(1, len(v) + 1, dtype=torch.float64)
        for value in v.unique():
            r[v == value] = r[v == value].mean()
        return r
    return _pearson(ranks(x), ranks(y))


def test_rank_correlation_reference_passes(capsys):
    _passes(check_rank_correlation, _spearman, capsys)
    scipy_stats = pytest.importorskip("scipy.stats")
    _passes(check_rank_correlation, lambda x, y: scipy_stats.spearmanr(x.numpy(), y.numpy())[0], capsys)


@pytest.mark.parametrize("fn, hint", [
    (_pearson, "that is Pearson's correlation of the values"),
    (lambda x, y: _pearson(x.argsort().double(), y.argsort().double()), "argsort gives the ORDER"),
    (lambda x, y: _pearson(x.argsort().argsort().double(), y.argsort().argsort().double()), "tied values"),
])
def test_rank_correlation_mistakes(fn, hint):
    _raises(check_rank_correlation, fn, hint)


@pytest.mark.parametrize("check", [check_beam_step, check_length_normalised, check_corpus_and_mean_bleu,
                                   check_query_entropy, check_heads_off, check_rank_correlation])
def test_an_empty_stub_gets_a_mistake_not_a_crash(check):
    with pytest.raises(Mistake):
        check(lambda *args: None)
