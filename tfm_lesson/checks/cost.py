"""Checkers for chapter 19: what it costs.

- ``check_params(fn)``: ``fn(config: GPTConfig) -> int``, the parameters of ``GPT(config)`` (layer norms, GELU,
  learned positions; with or without biases, tied or untied generator), equal to ``sum(p.numel())``;
- ``check_flops_per_token(fn)``: ``fn(config, seq_len) -> int``, the FLOPs of one training step per token:
  ``3 x (2 N_matmul + 4 num_layers seq_len d_model)``;
- ``check_training_bytes(fn)``: ``fn(config, batch, seq_len) -> int``, the bytes of a float32 training step with
  AdamW: weights, gradients, Adam's two moments, and ``tfm_lesson.train.cost.activation_bytes``.

Each compares with :mod:`tfm_lesson.train.cost` on several configs and names the slip a wrong answer matches.
"""
from __future__ import annotations

from typing import Callable

from ..train.cost import activation_bytes, flops_per_token, matmul_parameters, parameter_breakdown, parameter_count
from ..gpt import GPTConfig
from ._harness import Mistake, call, passed

__all__ = ["check_params", "check_flops_per_token", "check_training_bytes"]

_CONFIGS = [
    GPTConfig(vocab_size=512, max_len=64, d_model=64, heads=4, d_ff=256, num_layers=2),
    GPTConfig(vocab_size=300, max_len=32, d_model=48, heads=3, d_ff=96, num_layers=3, tie_embeddings=False),
    GPTConfig(vocab_size=1000, max_len=128, d_model=32, heads=2, d_ff=128, num_layers=1, bias=False),
    GPTConfig(vocab_size=97, max_len=16, d_model=16, heads=1, d_ff=40, num_layers=4, bias=False,
              tie_embeddings=False),
]
_LENGTHS = [64, 32, 128, 16]


def _biases(c: GPTConfig) -> int:  # linear layers' biases: Q, K, V, O and the two feed-forward layers
    return c.num_layers * (4 * c.d_model + c.d_ff + c.d_model) if c.bias else 0


def _norms(c: GPTConfig) -> int:
    return parameter_breakdown(c)["norms"]


PARAM_MISTAKES: dict[str, Callable[[GPTConfig], int]] = {
    "an untied generator was left out: with tie_embeddings=False the output layer is its own (vocab, d_model) "
    "matrix, as large as the embedding": lambda c: parameter_count(c) - parameter_breakdown(c)["generator"],
    "a tied generator was counted twice: with tie_embeddings=True it IS the embedding matrix and adds nothing":
        lambda c: parameter_count(c) + (c.vocab_size * c.d_model if c.tie_embeddings else 0),
    "the linear layers' biases are missing: with bias=True each nn.Linear(a, b) also holds b biases (4 d_model "
    "in attention, d_ff + d_model in the feed-forward, per layer)": lambda c: parameter_count(c) - _biases(c),
    "the layer norms are missing: two per block (gain and shift, 2 d_model each with bias, d_model without) and "
    "the final one": lambda c: parameter_count(c) - _norms(c),
    "the final layer norm is missing (the pre-norm GPT has one after the last block)":
        lambda c: parameter_count(c) - c.d_model * (2 if c.bias else 1),
    "the learned positions are missing: an embedding of max_len x d_model":
        lambda c: parameter_count(c) - c.max_len * c.d_model,
    "with bias=False the layer norms lose their shift too (only the gain, d_model each): you kept 2 d_model per norm":
        lambda c: parameter_count(c) + (0 if c.bias else (2 * c.num_layers + 1) * c.d_model),
    "the feed-forward's biases are missing: with bias=True its two nn.Linear layers hold d_ff + d_model biases per "
    "layer": lambda c: parameter_count(c) - (c.num_layers * (c.d_ff + c.d_model) if c.bias else 0),
    "the generator has no bias (untied or tied): its (vocab, d_model) matrix is all; you added vocab_size":
        lambda c: parameter_count(c) + (0 if c.tie_embeddings else c.vocab_size),
}


def _as_number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "item"):
        raise Mistake(f"{what} returned {type(value).__name__}; return a number (an int)")
    return float(value.item() if hasattr(value, "item") else value)


def _diagnose(got: list[float], expected: list[int], mistakes: dict[str, list[int]], what: str,
              fallback: str) -> None:
    if all(abs(g - e) <= 0.5 for g, e in zip(got, expected)):
        return
    for hint, values in mistakes.items():
        if values != expected and all(abs(g - v) <= 0.5 for g, v in zip(got, values)):
            raise Mistake(f"{what}: {hint}")
    first = next(i for i, (g, e) in enumerate(zip(got, expected)) if abs(g - e) > 0.5)
    raise Mistake(f"{what} gave {got[first]:,.0f} for {_CONFIGS[first]}, expected {expected[first]:,}. {fallback}")


def check_params(fn: Callable[[GPTConfig], int]) -> None:
    """``fn(config)`` must equal ``sum(p.numel() for p in GPT(config).parameters())`` on four configs."""
    got = [_as_number(call(fn, c, what="your params(config)"), "your params(config)") for c in _CONFIGS]
    expected = [parameter_count(c) for c in _CONFIGS]
    _diagnose(got, expected, {h: [f(c) for c in _CONFIGS] for h, f in PARAM_MISTAKES.items()}, "params(config)",
              "Count part by part: embedding, positions, per block (attention 4 linear layers, feed-forward 2, "
              "two norms), final norm, and the generator only if untied")
    passed("check_params", f"{len(_CONFIGS)} configs (biases or none, tied or untied) counted exactly")


def _flops_mistakes(c: GPTConfig, n: int) -> dict[str, float]:
    right = flops_per_token(c, n)
    attention = 3 * 4 * c.num_layers * n * c.d_model
    return {
        "that is the forward pass alone (2 FLOPs per weight): a training step adds the backward pass, twice the "
        "forward, so 6 per weight (3 x the forward)": right // 3,
        "the attention term is missing: each token's query meets seq_len keys (Q K^T) and weighs seq_len values, "
        "4 x num_layers x seq_len x d_model FLOPs forward": right - attention,
        "the attention term is halved: this course (like PaLM) counts the whole seq_len x seq_len square, masked "
        "half included (count 4, not 2, x num_layers x seq_len x d_model forward)": right - attention // 2,
        "the generator is missing: the (d_model, vocab) product runs for every token, tied or not": right -
        6 * c.vocab_size * c.d_model,
        "you counted 6 x all parameters: the embedding look-up and the learned positions are not products (and "
        "norms, biases are not counted), but the generator's product is": 6 * parameter_count(c) + attention,
        "you counted a multiply-add as one FLOP: it is two (one multiply, one add)": right // 2,
        "the attention term is not multiplied by num_layers: every block runs its own Q K^T and weighted sum, "
        "4 x num_layers x seq_len x d_model FLOPs forward (like the blocks' weights, counted once per layer)":
            right - attention + attention // c.num_layers,
        "you averaged the keys a causal query sees, (seq_len + 1) / 2: this exercise counts attention's products "
        "over the whole seq_len x seq_len square, seq_len keys for every query (the masked half included, as PaLM "
        "counts), 4 x num_layers x seq_len x d_model forward":
            right - attention + 6 * c.num_layers * (n + 1) * c.d_model,
        "the attention term counts one head: each head's products run over d_k = d_model / heads features, and the "
        "heads together over d_model, so 4 x num_layers x seq_len x d_model forward":
            right - attention + attention // c.heads,
    }


def check_flops_per_token(fn: Callable[[GPTConfig, int], int]) -> None:
    """``fn(config, seq_len)`` must equal :func:`tfm_lesson.train.cost.flops_per_token` (training) on four configs."""
    got = [_as_number(call(fn, c, n, what="your flops_per_token(config, seq_len)"), "your flops_per_token")
           for c, n in zip(_CONFIGS, _LENGTHS)]
    expected = [flops_per_token(c, n) for c, n in zip(_CONFIGS, _LENGTHS)]
    table = [_flops_mistakes(c, n) for c, n in zip(_CONFIGS, _LENGTHS)]
    _diagnose(got, expected, {h: [t[h] for t in table] for h in table[0]}, "flops_per_token(config, seq_len)",
              "Forward: 2 x N_matmul (blocks' weight matrices and the generator) + 4 x num_layers x seq_len x "
              "d_model; training: 3 x that")
    n_matmul = matmul_parameters(_CONFIGS[0])
    passed("check_flops_per_token", f"4 configs exact (the first: N_matmul = {n_matmul:,}, "
                                    f"{expected[0]:,} FLOPs per token at seq_len {_LENGTHS[0]})")


_BATCHES = [16, 4, 2, 8]


def _bytes_mistakes(c: GPTConfig, b: int, n: int) -> dict[str, int]:
    p, act = 4 * parameter_count(c), activation_bytes(c, b, n)
    return {
        "Adam's state is missing: it keeps two numbers per parameter (the moving averages of g and g^2), 8 bytes "
        "per parameter in float32": 2 * p + act,
        "one float per parameter is missing: the gradients take as many bytes as the weights, and Adam keeps TWO "
        "moments (m and v) besides them, 16 bytes per parameter in all": 3 * p + act,
        "the activations are missing: add tfm_lesson.train.cost.activation_bytes(config, batch, seq_len)": 4 * p,
        "the parameters' part is a count of numbers, not of bytes: each float32 takes 4 bytes (weights, "
        "gradients and Adam's two moments: 16 bytes per parameter)": p + act,
        "the activations were multiplied by the batch again: activation_bytes already counts batch x seq_len "
        "tokens": 4 * p + b * act,
    }


def check_training_bytes(fn: Callable[[GPTConfig, int, int], int]) -> None:
    """``fn(config, batch, seq_len)`` must equal ``tfm_lesson.train.cost.training_memory(...)["total"]``."""
    cases = list(zip(_CONFIGS, _BATCHES, _LENGTHS))
    got = [_as_number(call(fn, c, b, n, what="your training_bytes(config, batch, seq_len)"), "your training_bytes")
           for c, b, n in cases]
    expected = [4 * 4 * parameter_count(c) + activation_bytes(c, b, n) for c, b, n in cases]
    table = [_bytes_mistakes(c, b, n) for c, b, n in cases]
    mistakes: dict[str, list[int]] = {}
    for hint in table[0]:
        values = [t[hint] for t in table]
        if values not in mistakes.values():  # two slips giving the same number: the first names it
            mistakes[hint] = values
    _diagnose(got, expected, mistakes, "training_bytes(config, batch, seq_len)",
              "4 bytes per number: weights + gradients + Adam's 2 moments = 16 bytes per parameter, plus the "
              "activations")
    passed("check_training_bytes", f"{len(cases)} configs exact: 16 bytes per parameter + the activations")
