"""The chapter 09 checkers pass the reference and name each classic mistake by its hint."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tfm_lesson as T
from tfm_lesson.checks import (Mistake, check_generator, check_parameter_count, check_scaled_embedding,
                               check_tie_weights)


class Embeddings(nn.Module):
    def __init__(self, vocab_size, d_model, scale=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale is None else scale(d_model)

    def forward(self, tokens):
        return self.embedding(tokens) * self.scale


class Generator(nn.Module):
    def __init__(self, d_model, vocab_size, finish=lambda z: z.log_softmax(dim=-1)):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)
        self.finish = finish

    def forward(self, x):
        return self.finish(self.proj(x))


def tie(embedding, generator):
    generator.weight = embedding.weight


def formula(c):
    d, f = c.d_model, c.d_ff
    mha = 4 * d * d + 4 * d
    ff = 2 * d * f + f + d
    n = c.num_encoder_layers * (mha + ff + 4 * d) + c.num_decoder_layers * (2 * mha + ff + 6 * d)
    n += c.src_vocab_size * d + (0 if c.share_embeddings else c.tgt_vocab_size * d)
    return n + (0 if c.tie_embeddings else c.tgt_vocab_size * d)


def test_references_pass(capsys):
    check_scaled_embedding(Embeddings)
    check_generator(Generator)
    check_tie_weights(tie)
    check_parameter_count(formula)
    assert capsys.readouterr().out.count("passed") == 4


def fails(checker, candidate, *hints):
    with pytest.raises(Mistake) as info:
        checker(candidate)
    for hint in hints:
        assert hint in str(info.value), str(info.value)


@pytest.mark.parametrize("scale, hint", [
    (lambda d: 1.0, "not scaled by sqrt(d_model)"),
    (lambda d: 1 / math.sqrt(d), "divided by sqrt(d_model)"),
    (lambda d: d, "scaled by d_model"),
])
def test_embedding_mistakes(scale, hint):
    fails(check_scaled_embedding, lambda v, d: Embeddings(v, d, scale), hint)


@pytest.mark.parametrize("finish, hint", [
    (lambda z: z, "raw scores (logits)"),
    (lambda z: z.softmax(-1), "probabilities (softmax)"),
    (lambda z: z.log_softmax(1), "wrong axis"),
])
def test_generator_mistakes(finish, hint):
    fails(check_generator, lambda d, v: Generator(d, v, finish), hint)


def test_sizes_are_named_vocab_size_and_passed_by_position():
    """Chapter 09 asks for Embeddings(vocab_size, d_model) and Generator(d_model, vocab_size): the checkers pass the
    two sizes by position (any parameter names work) and name a swapped pair in the chapter's words."""
    check_scaled_embedding(lambda n_tokens, width: Embeddings(n_tokens, width))
    check_generator(lambda width, n_tokens: Generator(width, n_tokens))
    fails(check_scaled_embedding, lambda v, d: Embeddings(d, v), "the embedding table should be (vocab_size, d_model)")
    fails(check_generator, lambda d, v: Generator(v, d), "the projection should be nn.Linear(d_model, vocab_size)")


def _copied(embedding, generator):
    with torch.no_grad():
        generator.weight.copy_(embedding.weight)


def _cloned(embedding, generator):
    generator.weight = nn.Parameter(embedding.weight.detach().clone())


def _rewrapped(embedding, generator):
    generator.weight = nn.Parameter(embedding.weight)


def test_tie_mistakes():
    fails(check_tie_weights, _copied, "copied instead of shared")
    fails(check_tie_weights, _cloned, "copied instead of shared")
    fails(check_tie_weights, _rewrapped, "separate Parameter")


def test_parameter_count_mistakes():
    def tied_twice(c):
        return formula(c) + (c.tgt_vocab_size * c.d_model if c.tie_embeddings else 0)

    def no_cross(c):
        return formula(c) - c.num_decoder_layers * (4 * c.d_model ** 2 + 4 * c.d_model)

    def no_norms(c):
        return formula(c) - 2 * c.d_model * (2 * c.num_encoder_layers + 3 * c.num_decoder_layers)

    fails(check_parameter_count, tied_twice, "tied generator is counted again")
    fails(check_parameter_count, no_cross, "cross-attention is missing")
    fails(check_parameter_count, no_norms, "layer norms are missing")
    fails(check_parameter_count, lambda c: formula(c) / 1, "return an int")


def test_parameter_count_by_building_the_model_is_refused():
    """The exercise says "without building it": a count read off a built model is refused, however it is reached
    (a hostile class scored 2/2 with it)."""
    import tfm_lesson as T
    from tfm_lesson.model import count_parameters

    def built(c):
        return count_parameters(T.Transformer(c))

    def summed(c):
        return sum(p.numel() for p in T.Transformer(c).parameters())

    make = T.Transformer

    def renamed(c):
        return count_parameters(make(c))

    for answer in (built, summed, renamed):
        fails(check_parameter_count, answer, "WRITE IT YOURSELF")


# exercise stubs, as the student copy has them, are "not written yet" ------------------------------------------------
class StubModule(nn.Module):
    def __init__(self, *args):
        super().__init__()
        ...  # your turn

    def forward(self, x):
        ...  # your turn


@pytest.mark.parametrize("checker, stub", [
    (check_scaled_embedding, StubModule),
    (check_generator, StubModule),
    (check_tie_weights, lambda embedding, generator: None),
    (check_parameter_count, lambda config: None),
])
def test_stubs_are_not_written_yet(checker, stub):
    with pytest.raises(Mistake, match="not written yet"):
        checker(stub)


def _transposed(embedding, generator):
    generator.weight = nn.Parameter(embedding.weight.t())


def _transposed_copy(embedding, generator):
    generator.weight = nn.Parameter(embedding.weight.detach().t().clone())


def _data_assigned(embedding, generator):
    generator.weight.data = embedding.weight.data


def _wrapped_data(embedding, generator):
    generator.weight = nn.Parameter(embedding.weight.data)


def _returned(embedding, generator):
    generator.weight = embedding.weight
    return embedding.weight


def _tied_the_other_way(embedding, generator):
    embedding.weight = generator.weight  # one Parameter shared: the generator's (a tie as good as the usual one)


def _tied_but_frozen(embedding, generator):
    generator.weight = embedding.weight
    frozen = embedding.weight.detach().clone()
    generator.forward = lambda x: torch.nn.functional.linear(x, frozen)  # computes with a copy after all


def _tied_but_detached(embedding, generator):
    generator.weight = embedding.weight
    generator.forward = lambda x: torch.nn.functional.linear(x, generator.weight.detach())


def _tied_but_scaled(embedding, generator):
    generator.weight = embedding.weight
    generator.forward = lambda x: torch.nn.functional.linear(x, generator.weight * 0)


def _tied_returning_generator(embedding, generator):
    generator.weight = embedding.weight
    return generator


@pytest.mark.parametrize("answer, hint", [
    (_transposed, "transposed"),
    (_transposed_copy, "transposed"),
    (_data_assigned, "separate Parameter"),
    (_wrapped_data, "separate Parameter"),
    (_rewrapped, "separate Parameter"),
    (_copied, "copied instead of shared"),
    (_cloned, "copied instead of shared"),
    (_returned, "return nothing"),
    (_tied_but_frozen, "gradient reaching it"),
    (_tied_but_detached, "gradient reaching it"),
    (_tied_but_scaled, "does not compute with it"),
])
def test_every_tie_mistake_is_named(answer, hint):
    """Each named slip (with TFM_CHECKS_VIA_REPLAY=1, through record and replay: the identities travel as data)."""
    fails(check_tie_weights, answer, hint)


def test_a_tie_that_returns_the_generator_passes(capsys):
    passes_tie = check_tie_weights(_tied_returning_generator)
    assert passes_tie is None and "✔ check_tie_weights passed" in capsys.readouterr().out


def test_a_tie_the_other_way_round_passes(capsys):
    """embedding.weight = generator.weight shares one Parameter too (a hostile class found it refused)."""
    check_tie_weights(_tied_the_other_way)
    assert "✔ check_tie_weights passed" in capsys.readouterr().out
