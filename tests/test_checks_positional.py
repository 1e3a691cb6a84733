"""Chapter 04 checkers: the reference passes; each classic mistake fails with its own hint."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tfm_lesson
from tfm_lesson.checks import (Mistake, check_learned_positional_encoding, check_offset_rotation,
                               check_positional_encoding)


# a learner's table, written column by column, with one switch per classic mistake --------------------------------
def learner_table(max_len, d_model, *, swap=False, exponent=lambda i, j: 2 * i, start=0, multiply=False,
                  odd_bug=False):
    pe = torch.zeros(max_len, d_model)
    pos = torch.arange(start, start + max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    if odd_bug:  # cos gets every angle, which crashes when d_model is odd
        div = 10000 ** (torch.arange(0, d_model, 2) / d_model)
        pe[:, 0::2] = torch.sin(pos / div)
        pe[:, 1::2] = torch.cos(pos / div)
        return pe
    for j in range(d_model):
        i = j // 2
        freq = 10000 ** (exponent(i, j) / d_model)
        angle = pos[:, 0] * freq if multiply else pos[:, 0] / freq
        use_sin = (j % 2 == 0) != swap
        pe[:, j] = torch.sin(angle) if use_sin else torch.cos(angle)
    return pe


def concat_table(max_len, d_model):
    half = (d_model + 1) // 2
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (2 * torch.arange(half, dtype=torch.float64) / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], dim=1)


def test_reference_table_and_modules_pass(capsys):
    check_positional_encoding(tfm_lesson.sinusoidal_table)
    check_positional_encoding(learner_table)
    check_positional_encoding(tfm_lesson.SinusoidalPositionalEncoding)
    check_learned_positional_encoding(tfm_lesson.LearnedPositionalEncoding)
    out = capsys.readouterr().out
    assert out.count("check_positional_encoding passed") == 3 and "check_learned_positional_encoding passed" in out


@pytest.mark.parametrize("fn, hint", [
    (lambda n, d: learner_table(n, d, swap=True), "sin and cos look swapped"),
    (lambda n, d: learner_table(n, d, exponent=lambda i, j: i), r"exponent looks like i/d_model"),
    (lambda n, d: learner_table(n, d, exponent=lambda i, j: j), r"odd \(cos\) columns use a different frequency"),
    (lambda n, d: learner_table(n, d, exponent=lambda i, j: 2 * j), "exponent looks doubled"),
    (lambda n, d: learner_table(n, d, multiply=True), r"divide by it instead"),
    (lambda n, d: learner_table(n, d, start=1), "positions look counted from 1"),
    (concat_table, "all sines come first"),
    (lambda n, d: learner_table(n, d, odd_bug=True), r"odd d_model there is one more sin column"),
    (lambda n, d: learner_table(n, d + d % 2), r"odd d_model there is one more sin column"),
])
def test_table_mistakes(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_positional_encoding(fn)


# module versions ------------------------------------------------------------------------------------------------
class LearnerPE(nn.Module):
    def __init__(self, d_model, max_len=100):
        super().__init__()
        self.register_buffer("pe", tfm_lesson.sinusoidal_table(max_len, d_model))  # (max_len, d_model)

    def forward(self, x):
        return x + self.pe[: x.size(1)].to(x.dtype)


class SeqFirstSlice(LearnerPE):
    """The seq-first recipe on batch-first input: the table stored (max_len, 1, d_model), sliced by x.size(0)."""

    def __init__(self, d_model, max_len=100):
        super().__init__(d_model, max_len)
        self.pe = self.pe[:, None, :]  # (max_len, 1, d_model)

    def forward(self, x):
        return x + self.pe[: x.size(0)].to(x.dtype)


class BatchSliceFlat(LearnerPE):
    def forward(self, x):
        return x + self.pe[: x.size(0)].to(x.dtype)


class ScalesInput(LearnerPE):
    def forward(self, x):
        return x * math.sqrt(x.size(-1)) + self.pe[: x.size(1)].to(x.dtype)


class TrainableTable(LearnerPE):
    def __init__(self, d_model, max_len=100):
        nn.Module.__init__(self)
        self.pe = nn.Parameter(tfm_lesson.sinusoidal_table(max_len, d_model))


class SwappedModule(LearnerPE):
    def __init__(self, d_model, max_len=100):
        nn.Module.__init__(self)
        self.register_buffer("pe", learner_table(max_len, d_model, swap=True))


class Float64Table(LearnerPE):
    def forward(self, x):
        return x + self.pe[: x.size(1)].double()


@pytest.mark.parametrize("cls, hint", [
    (SeqFirstSlice, "indexed along the batch axis"),
    (BatchSliceFlat, "indexed along the batch axis"),
    (ScalesInput, r"multiplied by sqrt\(d_model\)"),
    (TrainableTable, "register_buffer"),
    (SwappedModule, "sin and cos look swapped"),
    (Float64Table, "output dtype is torch.float64 but x is torch.float32"),
])
def test_module_mistakes(cls, hint):
    with pytest.raises(Mistake, match=hint):
        check_positional_encoding(cls)


# learned encoding -----------------------------------------------------------------------------------------------
class LearnedOk(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return x + self.embedding.weight[: x.size(1)]


class LearnedBatchAxis(LearnedOk):
    def forward(self, x):
        return x + self.embedding.weight[: x.size(0)][:, None, :]


class LearnedDetached(LearnedOk):
    def forward(self, x):
        return x + self.embedding.weight[: x.size(1)].detach()


class LearnedNoEmbedding(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.table = nn.Parameter(torch.zeros(max_len, d_model))


def test_learned_plain_passes(capsys):
    check_learned_positional_encoding(LearnedOk)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("cls, hint", [
    (LearnedBatchAxis, "indexed along the batch axis"),
    (LearnedDetached, "no gradient flows back"),
    (LearnedNoEmbedding, r"needs an attribute `embedding = nn.Embedding\(max_len, d_model\)`"),
])
def test_learned_mistakes(cls, hint):
    with pytest.raises(Mistake, match=hint):
        check_learned_positional_encoding(cls)


# the rotation ---------------------------------------------------------------------------------------------------
def rotation(k, d_model, *, sign=1.0, pair_exponent=2):
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        t = k / 10000 ** (pair_exponent * i / d_model)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = math.cos(t), sign * math.sin(t)
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -sign * math.sin(t), math.cos(t)
    return m


def test_rotation_passes(capsys):
    check_offset_rotation(rotation)
    check_offset_rotation(lambda k, d: rotation(k, d).float())
    assert capsys.readouterr().out.count("check_offset_rotation passed") == 2


@pytest.mark.parametrize("fn, hint", [
    (lambda k, d: rotation(k, d, sign=-1.0), "transpose of the right one"),
    (lambda k, d: rotation(k, d, pair_exponent=1), "exponent i/d_model"),
    (lambda k, d: torch.eye(d), "the identity"),
    (lambda k, d: torch.zeros(d, d + 1), r"expected a \(d_model, d_model\)"),
])
def test_rotation_mistakes(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_offset_rotation(fn)
