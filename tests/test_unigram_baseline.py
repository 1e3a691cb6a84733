"""unigram_baseline: the held-out loss of a context-free model on exactly the tokens the trainer scores."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tfm_lesson.train.ablation import unigram_baseline
from tfm_lesson.train.lm import _windows_loss, unigram_perplexity


class Unigram(nn.Module):
    """Logits = log unigram probabilities at every position, whatever the input."""

    def __init__(self, log_p: torch.Tensor) -> None:
        super().__init__()
        self.log_p = log_p

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.log_p.expand(*ids.shape, -1)  # (batch, context, vocab)


def _data(vocab: int = 7, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    train = torch.multinomial(torch.arange(1.0, vocab + 1), 500, replacement=True, generator=gen)
    valid = torch.multinomial(torch.arange(vocab, 0.0, -1), 203, replacement=True, generator=gen)
    return SimpleNamespace(train=train, valid=valid, vocab_size=vocab)


@pytest.mark.parametrize("eval_tokens,max_len", [(100, 8), (100, 32), (1000, 16), (64, 64)])
def test_equals_the_trainers_score_of_a_unigram_model(eval_tokens, max_len):
    data = _data()
    counts = torch.bincount(data.train, minlength=data.vocab_size).double() + 1.0
    model = Unigram((counts / counts.sum()).log().float())
    total, count = _windows_loss(model, data.valid, max_len, 4, torch.device("cpu"), eval_tokens)
    assert unigram_baseline(data, eval_tokens, max_len) == pytest.approx(total / count, rel=1e-6)


def test_by_hand():
    data = SimpleNamespace(train=torch.tensor([0, 0, 1]), valid=torch.tensor([2, 0, 1, 0, 1]), vocab_size=3)
    # add-one counts 3, 2, 1 of 6; max_len 2, eval_tokens 4: the targets are valid[1:5] = 0, 1, 0, 1
    expected = -(math.log(3 / 6) + math.log(2 / 6)) / 2
    assert unigram_baseline(data, eval_tokens=4, max_len=2) == pytest.approx(expected)
    assert unigram_baseline(data, eval_tokens=4, max_len=2) == pytest.approx(
        math.log(unigram_perplexity(data.train, data.valid[1:5], 3)))


def test_too_few_tokens_is_a_clear_error():
    data = SimpleNamespace(train=torch.tensor([0, 1]), valid=torch.tensor([0, 1, 0]), vocab_size=2)
    with pytest.raises(ValueError, match="max_len=8"):
        unigram_baseline(data, eval_tokens=100, max_len=8)


@pytest.mark.slow
def test_the_shipped_table_stores_this_baseline():
    from tfm_lesson.train.ablation import load_ablation
    from tfm_lesson.data.corpus import load_corpus
    from tfm_lesson.train.lm import prepare_lm_data

    settings = load_ablation()["settings"]
    data = prepare_lm_data(load_corpus(), vocab_size=settings["vocab_size"], tokenizer_chars=50_000)
    max_len = settings["sizes"].get("max_len", 64)
    assert settings["unigram_loss"] == pytest.approx(unigram_baseline(data, settings["eval_tokens"], max_len), rel=1e-9)
