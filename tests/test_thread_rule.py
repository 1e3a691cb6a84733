"""The decoders follow the thread rule: a small model on the CPU decodes with one thread by default, whatever the
machine's count, so that a chapter's decoded figures do not depend on the machine; ``threads=`` overrides it."""
from __future__ import annotations

import inspect

import pytest
import torch

from tfm_lesson import decoding
from tfm_lesson.data import Vocab
from tfm_lesson.device import follows_thread_rule
from tfm_lesson.train.loop import evaluate, make_model


@pytest.fixture
def tiny():
    vocab = Vocab.build(["a b c d e"])
    torch.manual_seed(0)
    return make_model(vocab, vocab, d_model=16, heads=2, d_ff=32).eval(), vocab


@pytest.mark.parametrize("threads,expected", [("auto", 1), (2, 2), (None, 3)])
def test_translate_follows_the_thread_rule(tiny, monkeypatch, threads, expected):
    model, vocab = tiny
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        seen = []
        original = decoding.greedy_decode.__wrapped__

        def recording(model, *args, **kwargs):
            seen.append(torch.get_num_threads())
            return original(model, *args, **kwargs)

        monkeypatch.setattr(decoding, "greedy_decode", recording)  # translate calls it inside its own rule
        decoding.translate(model, ["a b", "c"], vocab, vocab, threads=threads)
        assert seen == [expected]
        assert torch.get_num_threads() == 3  # restored afterwards
    finally:
        torch.set_num_threads(before)


def test_evaluate_passes_its_threads_to_translate(tiny, monkeypatch):
    model, vocab = tiny
    got = {}

    def fake_translate(model, texts, *args, threads="auto", **kwargs):
        got["threads"] = threads
        return list(texts)

    monkeypatch.setattr(decoding, "translate", fake_translate)
    evaluate(model, [("a b", "a b")], vocab, vocab, threads=None)
    assert got["threads"] is None


@pytest.mark.parametrize("name", ["greedy_decode", "beam_search", "sequence_log_prob", "translate"])
def test_decoders_document_threads(name):
    parameter = inspect.signature(getattr(decoding, name)).parameters["threads"]
    assert parameter.default == "auto" and parameter.kind is inspect.Parameter.KEYWORD_ONLY


def test_a_decoder_runs_with_one_thread_by_default(tiny):
    model, vocab = tiny
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        @follows_thread_rule
        def probe(model):
            return torch.get_num_threads()

        assert probe(model) == 1
        assert probe(model, threads=None) == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
