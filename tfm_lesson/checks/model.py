"""Checkers for chapter 09 (the whole Transformer): scaled embeddings, the generator, weight tying, and the
parameter count by formula."""
from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Callable

import torch
from torch import Tensor, nn

from ..model import Transformer, TransformerConfig, count_parameters
from ._harness import Mistake, call, close, diagnose, expect, expect_written, learner_side, output_of, passed
from ._rules import forbid_names, forbid_objects

COUNT_WHY = ("The exercise asks for the count from the configuration's numbers alone, without building the model "
             "(or any of its modules) and counting its parameters.")

__all__ = ["check_scaled_embedding", "check_generator", "check_tie_weights", "check_parameter_count"]


def _only(module: nn.Module, kind: type, what: str, name: str) -> nn.Module:
    found = [m for m in module.modules() if isinstance(m, kind)]
    expect(len(found) == 1, f"your {what} should hold exactly one {kind.__name__} (e.g. `self.{name}`), found "
           f"{len(found)}")
    return found[0]


# embeddings x sqrt(d_model) -------------------------------------------------------------------------------------
def check_scaled_embedding(cls: type) -> None:
    """Check ``cls(vocab_size, d_model)`` (called positionally): one ``nn.Embedding``; ``forward(tokens)``
    ``(batch, len)`` ids -> ``embedding(tokens) * sqrt(d_model)`` ``(batch, len, d_model)``."""
    rng = random.Random(21)
    torch.manual_seed(21)
    for _ in range(3):
        vocab_size, d_model = rng.randint(5, 30), rng.choice([8, 16, 36, 64])
        module = call(cls, vocab_size, d_model, what=f"Embeddings({vocab_size}, {d_model})")
        expect(isinstance(module, nn.Module), f"Embeddings(...) should build an nn.Module, got {type(module).__name__}")
        expect_written(module, "Embeddings")
        table = _only(module, nn.Embedding, "Embeddings", "embedding")
        expect(tuple(table.weight.shape) == (vocab_size, d_model),
               f"the embedding table should be (vocab_size, d_model) = {(vocab_size, d_model)}, got "
               f"{tuple(table.weight.shape)}")
        tokens = torch.randint(0, vocab_size, (rng.randint(1, 3), rng.randint(2, 6)))
        got = output_of(call(module, tokens, what="your Embeddings"))
        raw = table.weight.detach()[tokens]  # (batch, len, d_model)
        root = math.sqrt(d_model)
        diagnose(got.detach(), raw * root, {
            "embeddings not scaled by sqrt(d_model): multiply by math.sqrt(d_model) (paper, section 3.4); with "
            "tfm_lesson's small initial embeddings (std 1/sqrt(d_model)) this gives them the positional "
            "encoding's size": raw,
            "embeddings divided by sqrt(d_model): the paper *multiplies* them by sqrt(d_model)": raw / root,
            "embeddings scaled by d_model: the factor is sqrt(d_model)": raw * d_model,
        }, "your embeddings should be embedding(tokens) * sqrt(d_model)")
        got.sum().backward()
        expect(table.weight.grad is not None and close(table.weight.grad.abs().sum(),
                                                       torch.tensor(float(tokens.numel() * d_model) * root)),
               "the gradient does not reach the embedding table with the factor sqrt(d_model): is the table "
               "detached or the scale applied outside the graph (`.data`)?")
    passed("check_scaled_embedding", "embedding(tokens) * sqrt(d_model) for several vocabularies and widths")


# the generator ----------------------------------------------------------------------------------------------------
def check_generator(cls: type) -> None:
    """Check ``cls(d_model, vocab_size)`` (called positionally): one ``nn.Linear(d_model, vocab_size)``;
    ``forward(x)`` ``(batch, len, d_model)`` -> log-probabilities ``(batch, len, vocab_size)`` (log-softmax over
    the vocabulary)."""
    rng = random.Random(22)
    torch.manual_seed(22)
    for _ in range(3):
        d_model, vocab_size = rng.choice([8, 12, 16]), rng.randint(5, 20)
        module = call(cls, d_model, vocab_size, what=f"Generator({d_model}, {vocab_size})")
        expect(isinstance(module, nn.Module), f"Generator(...) should build an nn.Module, got {type(module).__name__}")
        expect_written(module, "Generator")
        proj = _only(module, nn.Linear, "Generator", "proj")
        expect((proj.in_features, proj.out_features) == (d_model, vocab_size),
               f"the projection should be nn.Linear(d_model, vocab_size) = ({d_model}, {vocab_size}), got "
               f"({proj.in_features}, {proj.out_features})")
        length = vocab_size + 1 if vocab_size < 19 else vocab_size - 1  # another length: the axis is recognisable
        x = torch.randn(2, length, d_model) * 3
        got = output_of(call(module, x, what="your Generator"))
        with torch.no_grad():
            logits = proj(x)  # (batch, len, vocab_size)
        diagnose(got.detach(), logits.log_softmax(-1), {
            "the output is the raw scores (logits): apply log_softmax over the vocabulary (dim=-1)": logits,
            "the output is probabilities (softmax): return log_softmax(dim=-1), which is stable and what the "
            "loss (NLLLoss / KL divergence) expects": logits.softmax(-1),
            "log_softmax is taken over the wrong axis: normalise over the vocabulary, dim=-1":
                logits.log_softmax(1),
        }, "your generator should return proj(x).log_softmax(dim=-1)")
        expect(close(got.exp().sum(-1), torch.ones(2, length), atol=1e-4),
               "exp(output) should sum to 1 over the vocabulary for every position")
    passed("check_generator", "nn.Linear(d_model, vocab_size) then log_softmax over the vocabulary")


# weight tying -----------------------------------------------------------------------------------------------------
def check_tie_weights(fn: Callable) -> None:
    """Check ``fn(embedding, generator)``, which makes ``generator`` (an ``nn.Linear(d_model, vocab_size, bias=False)``)
    use the very same weight Parameter as ``embedding`` (an ``nn.Embedding(vocab_size, d_model)``) (paper, 3.4)."""
    torch.manual_seed(23)
    vocab_size, d_model = 11, 8
    embedding, generator = nn.Embedding(vocab_size, d_model), nn.Linear(d_model, vocab_size, bias=False)
    original, before = generator.weight, generator.weight.detach().clone()
    table = embedding.weight  # tying the other way round (embedding.weight = generator.weight) is a tie too
    result = call(fn, embedding, generator, what="your tie_weights")
    # computed on the checker's own modules: while grading, the replay gives the grader's copies the identities the
    # learner's code gave the kernel's (which Parameter each slot holds, which storage it shares: _replay_ties)
    tied = _tied(embedding, generator, original, before, result, table)
    expect(tied["touched"], "your tie_weights is not written yet: it left the generator untouched. Make the "
           "generator use the embedding's weight: generator.weight = embedding.weight")
    expect(tied["returned"], "tie the weights in place (assign generator.weight) and return nothing; the checker "
           "inspects the modules it passed in")
    if tied["same"]:
        expect(tied["counted"] == vocab_size * d_model, "a tied matrix should be counted once")
        expect(tied["gradient"], "no gradient reached the shared weight")
        _computes_with_the_tie(embedding, generator, vocab_size)
        passed("check_tie_weights", "generator.weight is embedding.weight: one Parameter, one gradient, counted once")
        return
    if tuple(tied["shape"]) == (d_model, vocab_size):
        raise Mistake("the generator weight is transposed: nn.Linear(d_model, vocab_size).weight is already "
                      "(vocab_size, d_model), the shape of the embedding table; share it as is")
    if tied["storage"]:
        raise Mistake("the generator's weight shares storage with the embedding but is a separate Parameter (a new "
                      "nn.Parameter(...) around it, or `.data =`): two leaves, two gradients, counted twice. Assign "
                      "the Parameter itself: generator.weight = embedding.weight")
    if tied["close"]:
        raise Mistake("tied weights copied instead of shared: the generator holds a copy of the embedding, so the two "
                      "drift apart as soon as training starts. Assign the Parameter itself: "
                      "generator.weight = embedding.weight (no .clone(), no copy_)")
    raise Mistake("the generator's weight is not the embedding's: assign generator.weight = embedding.weight")


def _tied(embedding: nn.Embedding, generator: nn.Linear, original: Tensor, before: Tensor, result: object,
          table: Tensor) -> dict:
    """What the learner's tie_weights made of the two modules: which Parameter the generator holds, on whose storage,
    with what values, counted how often, and whether one gradient reaches it."""
    w, e = generator.weight, embedding.weight
    facts = {"touched": w is not original or e is not table or not torch.equal(original.detach(), before),
             "returned": result is None or result is generator, "same": w is e, "shape": list(w.shape),
             "storage": w.data_ptr() == e.data_ptr(), "close": close(w.detach(), e.detach()) if w.shape == e.shape
             else False, "counted": 0, "gradient": False}
    if facts["same"]:
        facts["counted"] = count_parameters(nn.ModuleDict({"embedding": embedding, "generator": generator}))
        generator(embedding(torch.tensor([[1, 2]]))).logsumexp(-1).sum().backward()
        facts["gradient"] = e.grad is not None
    return facts


def _computes_with_the_tie(embedding: nn.Embedding, generator: nn.Linear, vocab_size: int) -> None:
    """The modules as the learner's code left them compute what one shared matrix computes: the output and the
    gradient reaching the shared weight, run where the learner's code lives and compared here with the same
    computation on the shared matrix's values (a tie that the generator's forward then bypasses, with a frozen copy,
    a detached or a scaled weight, fails)."""
    tokens = torch.randint(0, vocab_size, (2, 5))
    out, grad = learner_side(_run_tied)(embedding, generator, tokens)
    shared = embedding.weight.detach().clone().requires_grad_()
    want = torch.nn.functional.linear(torch.nn.functional.embedding(tokens, shared), shared)  # (2, 5, vocab_size)
    want.logsumexp(-1).sum().backward()
    expect(isinstance(out, Tensor) and out.shape == want.shape and close(out, want.detach(), atol=1e-5),
           "generator.weight is embedding.weight, but the generator does not compute with it: its output is not "
           "x @ embedding.weight^T. Is its forward replaced, or the weight detached, copied or scaled inside it?")
    expect(isinstance(grad, Tensor) and grad.shape == shared.shape and close(grad, shared.grad, atol=1e-5),
           "generator.weight is embedding.weight, but the gradient reaching it is not the sum of both uses (the "
           "embedding's rows and the generator's projection): is the weight detached or copied on the way?")


def _run_tied(embedding: nn.Embedding, generator: nn.Linear, tokens: Tensor) -> tuple[Tensor, Tensor | None]:
    """The output of ``generator(embedding(tokens))`` and the gradient it sends to the embedding's weight (run where
    the modules the learner's code changed live: :func:`._replay.learner_side`)."""
    embedding.zero_grad()
    generator.zero_grad()
    out = generator(embedding(tokens))  # (batch, len, vocab_size)
    out.logsumexp(-1).sum().backward()
    grad = embedding.weight.grad
    return out.detach(), None if grad is None else grad.detach().clone()


# the parameter count ----------------------------------------------------------------------------------------------
def _formula(c: TransformerConfig, *, cross: bool = True, biases: bool = True, norms: bool = True,
             extra_tgt: bool = False, extra_gen: bool = False, full_heads: bool = False, out_proj: bool = True) -> int:
    d, f = c.d_model, c.d_ff
    b = 1 if biases else 0
    proj = (c.heads * d * d) if full_heads else d * d
    mha = 3 * (proj + b * d) + (d * d + b * d if out_proj else 0)
    ff = 2 * d * f + b * (f + d)
    ln = 2 * d if norms else 0
    enc = c.num_encoder_layers * (mha + ff + 2 * ln)
    dec = c.num_decoder_layers * ((2 if cross else 1) * mha + ff + 3 * ln)
    emb = c.src_vocab_size * d + (c.tgt_vocab_size * d if (not c.share_embeddings or extra_tgt) else 0)
    gen = c.tgt_vocab_size * d if (not c.tie_embeddings or extra_gen) else 0
    return enc + dec + emb + gen


def check_parameter_count(fn: Callable) -> None:
    """Check ``fn(config) -> int``: the number of parameters of ``Transformer(config)`` for configs that vary
    sizes, layer counts, vocabularies, ``share_embeddings`` and ``tie_embeddings`` (sinusoidal positions,
    biases, post-norm)."""
    forbid_objects(fn, {"Transformer": Transformer, "count_parameters": count_parameters,
                        "nn.Transformer": nn.Transformer}, "parameter count", COUNT_WHY)
    forbid_names(fn, ("Transformer", "count_parameters", "parameters", "named_parameters", "numel",
                  "state_dict"), "parameter count", COUNT_WHY)
    rng = random.Random(24)
    configs = [TransformerConfig()]  # the base model: 63,082,496 with a shared 37,000-token vocabulary
    for share, tie in ((True, True), (False, True), (False, False), (True, False)):
        heads = rng.choice([2, 4])
        vocab = rng.randint(20, 60)
        configs.append(TransformerConfig(
            src_vocab_size=vocab, tgt_vocab_size=vocab if share else vocab + rng.randint(1, 9), d_model=heads * 4,
            heads=heads, d_ff=rng.choice([24, 40]), num_encoder_layers=rng.randint(1, 3),
            num_decoder_layers=rng.randint(1, 3), share_embeddings=share, tie_embeddings=tie, max_len=64))
    for c in configs:
        truth = count_parameters(Transformer(c)) if c.d_model < 64 else _formula(c)
        got = call(fn, replace(c), what="your parameter-count function")
        expect(got is not None, "your parameter-count function is not written yet: it returns None. Return the count "
               "as an int")
        expect(isinstance(got, int) and not isinstance(got, bool),
               f"return an int, got {type(got).__name__} ({got!r}); use integer arithmetic (// not /)")
        if got == truth:
            continue
        settings = (f"d_model={c.d_model}, heads={c.heads}, d_ff={c.d_ff}, N_enc={c.num_encoder_layers}, "
                    f"N_dec={c.num_decoder_layers}, vocab={c.src_vocab_size}/{c.tgt_vocab_size}, "
                    f"share_embeddings={c.share_embeddings}, tie_embeddings={c.tie_embeddings}")
        suspects = {
            "the tied generator is counted again: with tie_embeddings it reuses the target embedding matrix, which "
            "counts once": _formula(c, extra_gen=True) if c.tie_embeddings else None,
            "shared embeddings are counted twice: with share_embeddings the source and target use one matrix":
                _formula(c, extra_tgt=True) if c.share_embeddings else None,
            "the decoder's cross-attention is missing: a decoder layer has two attention sub-layers (self and "
            "cross), each 4 d_model^2 + 4 d_model": _formula(c, cross=False),
            "the biases are missing: every nn.Linear has a bias (d_ff + d_model in the feed-forward, 4 d_model in "
            "attention)": _formula(c, biases=False),
            "the layer norms are missing: 2 d_model each (gain and shift), two per encoder layer, three per "
            "decoder layer": _formula(c, norms=False),
            "each head seems to get full d_model x d_model projections: the heads split d_model, so W^Q, W^K, W^V "
            "are d_model x d_model in all (heads x d_model x d_k)": _formula(c, full_heads=True),
            "the output projection W^O (d_model^2 + d_model per attention) is missing": _formula(c, out_proj=False),
        }
        for hint, value in suspects.items():
            if value is not None and got == value:
                raise Mistake(f"{hint} [{settings}: expected {truth:,}, got {got:,}]")
        raise Mistake(f"for {settings} expected {truth:,} parameters, got {got:,} (off by {got - truth:+,})")
    passed("check_parameter_count", f"your formula gives the exact count for {len(configs)} configurations, the "
           f"base model included ({_formula(configs[0]):,})")
