"""Chapter 19 checkers: the reference passes; each named slip fails with its own hint."""
from __future__ import annotations

import pytest

from tfm_lesson.train import cost
from tfm_lesson.checks import Mistake, check_flops_per_token, check_params, check_training_bytes
from conftest import passes as _passes, raises_mistake as _raises  # noqa: E402


def params_by_parts(c):
    d, f, b = c.d_model, c.d_ff, c.bias
    block = 4 * (d * d + (d if b else 0)) + d * f + (f if b else 0) + f * d + (d if b else 0) + 2 * d * (2 if b else 1)
    return c.vocab_size * d + c.max_len * d + c.num_layers * block + d * (2 if b else 1) + \
        (0 if c.tie_embeddings else c.vocab_size * d)


def flops_by_hand(c, n):
    n_matmul = c.num_layers * (4 * c.d_model ** 2 + 2 * c.d_model * c.d_ff) + c.vocab_size * c.d_model
    return 3 * (2 * n_matmul + 4 * c.num_layers * n * c.d_model)


def bytes_by_hand(c, batch, n):
    return 16 * cost.parameter_count(c) + cost.activation_bytes(c, batch, n)


def test_references_pass(capsys):
    _passes(check_params, params_by_parts, capsys)
    _passes(check_params, cost.parameter_count, capsys)
    _passes(check_flops_per_token, flops_by_hand, capsys)
    _passes(check_training_bytes, bytes_by_hand, capsys)


def _untied_always(c):
    return params_by_parts(c) + (c.vocab_size * c.d_model if c.tie_embeddings else 0)


def _no_generator(c):
    return params_by_parts(c) - (0 if c.tie_embeddings else c.vocab_size * c.d_model)


def _no_bias(c):
    import dataclasses
    return params_by_parts(dataclasses.replace(c, bias=False)) + (c.num_layers * 2 * c.d_model + c.d_model
                                                                   if c.bias else 0)


@pytest.mark.parametrize("fn, hint", [
    (_untied_always, "counted twice"), (_no_generator, "untied generator was left out"),
    (_no_bias, "biases are missing"), (lambda c: params_by_parts(c) - c.max_len * c.d_model, "learned positions"),
    (lambda c: params_by_parts(c) - c.d_model * (2 if c.bias else 1), "final layer norm"),
    (lambda c: params_by_parts(c) + 1, "expected"), (lambda c: None, "returned NoneType"),
    # the bias rules a learner guesses (a learner's read of the chapter: each got the generic message before)
    (lambda c: params_by_parts(c) + (0 if c.bias else (2 * c.num_layers + 1) * c.d_model), "lose their shift"),
    (lambda c: params_by_parts(c) - (c.num_layers * (c.d_ff + c.d_model) if c.bias else 0), "feed-forward's biases"),
    (lambda c: params_by_parts(c) + (0 if c.tie_embeddings else c.vocab_size), "generator has no bias"),
])
def test_params_slips(fn, hint):
    _raises(check_params, fn, hint)


@pytest.mark.parametrize("fn, hint", [
    (lambda c, n: flops_by_hand(c, n) // 3, "forward pass alone"),
    (lambda c, n: flops_by_hand(c, n) - 12 * c.num_layers * n * c.d_model, "attention term is missing"),
    (lambda c, n: flops_by_hand(c, n) - 6 * c.num_layers * n * c.d_model, "attention term is halved"),
    (lambda c, n: flops_by_hand(c, n) - 6 * c.vocab_size * c.d_model, "generator is missing"),
    (lambda c, n: 6 * cost.parameter_count(c) + 12 * c.num_layers * n * c.d_model, "6 x all parameters"),
    (lambda c, n: flops_by_hand(c, n) // 2, "multiply-add as one FLOP"),
    (lambda c, n: 6 * n, "expected"),
])
def test_flops_slips(fn, hint):
    _raises(check_flops_per_token, fn, hint)


def flops_written_with(c, n, *, attention_layers=True, keys=None, attention_width=None):
    """The chapter's formula as a learner writes it, with the attention term's count of layers, keys per query and
    features changeable."""
    d, f, layers = c.d_model, c.d_ff, c.num_layers
    n_matmul = layers * (4 * d * d + 2 * d * f) + c.vocab_size * d
    keys = n if keys is None else keys
    width = d if attention_width is None else attention_width
    attention = 4 * (layers if attention_layers else 1) * keys * width
    return 3 * (2 * n_matmul + attention)


@pytest.mark.parametrize("fn, hint", [
    (lambda c, n: flops_written_with(c, n, attention_layers=False), "not multiplied by num_layers"),
    (lambda c, n: flops_written_with(c, n, keys=(n + 1) / 2), "you averaged the keys a causal query sees"),
    (lambda c, n: flops_written_with(c, n, attention_width=c.d_model // c.heads), "the attention term counts one head"),
])
def test_flops_attention_term_slips_named(fn, hint):
    with pytest.raises(Mistake, match=hint) as info:
        check_flops_per_token(fn)
    assert "expected" not in str(info.value)  # not the generic "gave ..., expected ..."


@pytest.mark.parametrize("fn, hint", [
    (lambda c, b, n: 8 * cost.parameter_count(c) + cost.activation_bytes(c, b, n), "Adam's state is missing"),
    (lambda c, b, n: 12 * cost.parameter_count(c) + cost.activation_bytes(c, b, n), "TWO"),
    (lambda c, b, n: 16 * cost.parameter_count(c), "activations are missing"),
    (lambda c, b, n: 4 * cost.parameter_count(c) + cost.activation_bytes(c, b, n), "not of bytes"),
    (lambda c, b, n: 16 * cost.parameter_count(c) + b * cost.activation_bytes(c, b, n), "batch again"),
    (lambda c, b, n: "big", "return a number"),
])
def test_bytes_slips(fn, hint):
    _raises(check_training_bytes, fn, hint)


def test_a_crash_becomes_a_hint():
    with pytest.raises(Mistake, match="raised ZeroDivisionError"):
        check_params(lambda c: 1 / 0)
