"""Checkers for chapter 15 (fast generation): one attention step with a KV cache, the cache's memory, a GPT
forward pass that uses the cache, and cross-attention keys computed once.

- ``check_cached_attention(fn)``: ``fn(q, k_new, v_new, k_cache, v_cache) -> (out, k_all, v_all)``, all shaped
  ``(batch, heads, len, d_k)``; ``q`` holds the new positions' queries.
- ``check_cache_memory(fn)``: ``fn(num_layers, heads, d_k, length, batch, dtype) -> bytes``.
- ``check_forward_with_cache(fn)``: ``fn(model, new_idx, caches) -> logits (batch, new_len, vocab)`` for a
  :class:`tfm_lesson.GPT`, built from its parts.
- ``check_cross_attention_step(fn)``: ``fn(mha, x_new, memory, store) -> (batch, new_len, d_model)``, keeping the
  memory's keys and values in the dict ``store``.
"""
from __future__ import annotations

import math
import re
from typing import Callable

import torch
from torch import Tensor

from ..cache import KVCache, causal_mask_with_offset
from ._harness import Mistake, call, close, diagnose, expect, output_of, passed

__all__ = ["check_cached_attention", "check_cache_memory", "check_forward_with_cache", "check_cross_attention_step"]

NOT_APPENDED = ("the returned keys are only the new ones: the cache must grow, k_all = the cached keys followed by "
                "the new ones, torch.cat([k_cache, k_new], dim=2)")
WRONG_ORDER = ("the new keys come before the cached ones: append at the end, torch.cat([k_cache, k_new], dim=2), so "
               "that key j is position j")
HEADS_AXIS = ("appended along the heads axis (dim=1): the cache grows along the length axis, dim=2 (or -2) of "
              "(batch, heads, length, d_k)")
FEATURE_AXIS = ("appended along the feature axis (dim=-1): the cache grows along the length axis, dim=2 (or -2) of "
                "(batch, heads, length, d_k)")
BATCH_AXIS = ("appended along the batch axis (dim=0): the cache grows along the length axis, dim=2 (or -2) of "
              "(batch, heads, length, d_k)")
NO_MASK = ("with several new positions at once (the prompt), new query i must not see the new keys after it: "
           "use a causal mask shifted by the cache length, causal_mask_with_offset(new_len, cached_len)")
TOP_LEFT = ("the causal mask is not shifted by the cache length: new query i is at position cached_len + i and sees "
            "keys 0 .. cached_len + i (every cached key), not keys 0 .. i. torch.ones(new, total).tril(cached_len)")
ONLY_NEW = ("the queries attend only to the new keys: attention must run over all keys, the cached ones and the "
            "new ones (k_all, v_all)")
SCALE_D = "scores look scaled by sqrt(d_k * heads) or another number: divide by sqrt(d_k), the size of one head"


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _axis_hint(exc: Exception) -> str | None:
    """torch.cat along the wrong axis fails with "... except in dimension N ...": name the axis."""
    match = re.search(r"except in dimension (-?\d+)", str(exc))
    if match:
        return {"0": BATCH_AXIS, "1": HEADS_AXIS, "3": FEATURE_AXIS, "-1": FEATURE_AXIS}.get(match.group(1))
    return None


def check_cached_attention(fn: Callable) -> None:
    """One attention step with a cache: append the new keys and values along the length axis, attend the new queries
    to every key (causal among the new ones, shifted by the cache length)."""
    gen = torch.Generator().manual_seed(15)
    cases = [(2, 3, 4, 1, 8), (1, 2, 0, 5, 4), (3, 4, 6, 3, 8), (2, 2, 5, 1, 16), (2, 1, 3, 4, 6)]
    for batch, heads, cached, new, d_k in cases:
        k_cache, v_cache = (torch.randn(batch, heads, cached, d_k, generator=gen) for _ in range(2))
        q, k_new, v_new = (torch.randn(batch, heads, new, d_k, generator=gen) for _ in range(3))
        k_all, v_all = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        mask = causal_mask_with_offset(new, cached)
        want = _attention(q, k_all, v_all, mask)
        what = (f"your function(q {tuple(q.shape)}, k_new, v_new, k_cache {tuple(k_cache.shape)}, v_cache) "
                f"[batch={batch}, heads={heads}, cached={cached}, new={new}, d_k={d_k}]")
        result = call(fn, q.clone(), k_new.clone(), v_new.clone(), k_cache.clone(), v_cache.clone(), what=what,
                      explain=_axis_hint)
        expect(result is not None, "your code returned None: not written yet, or did you forget a `return`?")
        expect(isinstance(result, (tuple, list)) and len(result) == 3,
               f"{what} must return three tensors (out, k_all, v_all), got {type(result).__name__}")
        out, got_k, got_v = (output_of(r) for r in result)
        if got_k.shape != k_all.shape:
            if got_k.shape == k_new.shape:
                raise Mistake(NOT_APPENDED)
            for dim, hint in ((1, HEADS_AXIS), (3, FEATURE_AXIS), (0, BATCH_AXIS)):
                along = list(k_new.shape)
                along[dim] += k_cache.shape[dim]
                if tuple(got_k.shape) == tuple(along):
                    raise Mistake(hint)
            raise Mistake(f"k_all has shape {tuple(got_k.shape)}, expected (batch, heads, cached + new, d_k) = "
                          f"{tuple(k_all.shape)}")
        if cached and not close(got_k, k_all):
            expect(not close(got_k, torch.cat([k_new, k_cache], dim=2)), WRONG_ORDER)
            raise Mistake("k_all is not the cached keys followed by the new ones: torch.cat([k_cache, k_new], dim=2)")
        expect(close(got_v, v_all), "v_all is not the cached values followed by the new ones: "
                                    "torch.cat([v_cache, v_new], dim=2)")
        top_left = torch.ones(new, cached + new, dtype=torch.bool).tril()
        suspects = {ONLY_NEW: _attention(q, k_new, v_new, torch.ones(new, new, dtype=torch.bool).tril()),
                    TOP_LEFT: _attention(q, k_all, v_all, top_left),
                    NO_MASK: _attention(q, k_all, v_all, None),
                    SCALE_D: _attention(q * math.sqrt(1 / heads), k_all, v_all, mask)}
        if new == 1:  # one new query may see every key: leaving the mask out cannot matter
            suspects.pop(NO_MASK)
        diagnose(out, want, suspects, f"{what}: the output differs from attention of the new queries over every key, "
                                      "softmax(q k_all^T / sqrt(d_k)) v_all with the shifted causal mask")
    passed("check_cached_attention", f"{len(cases)} cases (an empty cache, one new token, several new tokens) equal "
                                     "attention over the whole prefix")


BYTES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.float64: 8}


def check_cache_memory(fn: Callable) -> None:
    """``fn(num_layers, heads, d_k, length, batch, dtype)`` -> bytes of a self-attention KV cache:
    ``2 x num_layers x batch x heads x d_k x length x bytes per number``."""
    cases = [(3, 4, 16, 100, 1, torch.float32), (12, 12, 64, 1024, 1, torch.float32),
             (3, 8, 32, 50, 4, torch.float16), (6, 2, 8, 7, 3, torch.bfloat16), (1, 1, 1, 1, 2, torch.float64)]
    for layers, heads, d_k, length, batch, dtype in cases:
        size = BYTES[dtype]
        want = 2 * layers * batch * heads * d_k * length * size
        what = f"your function(num_layers={layers}, heads={heads}, d_k={d_k}, length={length}, batch={batch}, {dtype})"
        got = call(fn, layers, heads, d_k, length, batch, dtype, what=what)
        expect(got is not None, "your code returned None: not written yet, or did you forget a `return`?")
        if isinstance(got, Tensor) and got.numel() == 1:
            got = got.item()
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"{what} returned {type(got).__name__}, expected a number of bytes")
        if got == want:
            continue
        base = want // (2 * size)  # layers x batch x heads x d_k x length
        suspects = [
            (base * size, "the factor 2 is missing: the cache holds keys AND values, two tensors of the same size"),
            (want * 8, "that is bits, not bytes: a float32 number takes 4 bytes (dtype.itemsize / element_size())"),
            (want // layers, "the number of layers is missing: every layer keeps its own keys and values"),
            (want // batch if batch > 1 else -1, "the batch is missing: every sequence of the batch has its own cache"),
            (want * heads, "heads counted twice (heads x d_model?): one layer stores heads x d_k = d_model numbers "
                           "per position for the keys"),
            (2 * base * 4, "4 bytes per number whatever the dtype: half precision (float16, bfloat16) takes 2 bytes, "
                           "float64 takes 8; use torch.empty((), dtype=dtype).element_size()"),
        ]
        for value, hint in suspects:
            if got == value:
                raise Mistake(hint)
        raise Mistake(f"{what} returned {got}, expected 2 x layers x batch x heads x d_k x length x bytes = {want}")
    passed("check_cache_memory", f"{len(cases)} cases, float64 to bfloat16, match 2 x layers x batch x heads x d_k x "
                                 "length x bytes")


OFFSET = ("the position offset is missing: with a cache, the new tokens are at positions len(cache) .. len(cache) + "
          "new_len - 1, so add model.positional(x, offset) with offset = len(caches[0]), not positions from 0")
FWD_NO_MASK = ("several new tokens at once (the prompt) need a causal mask shifted by the cache length: "
               "causal_mask_with_offset(new_len, offset); a single new token needs none")
NO_FINAL_NORM = "the final norm is missing: after the last block, x = model.norm(x), then model.lm_head(x)"
ONE_CACHE = ("the blocks share one cache: each block has its own keys and values, so pass caches[i] to block i "
             "(model.new_cache() makes one per block)")


def _reference_forward(model, idx: Tensor, caches: list[KVCache], *, offset: bool = True, mask: bool = True,
                       final_norm: bool = True) -> Tensor:
    start = len(caches[0])
    x = model.tok_embed(idx)
    if model.positional is not None:
        x = model.positional(x, start if offset else 0)
    m = causal_mask_with_offset(idx.size(1), start) if (mask and idx.size(1) > 1) else None
    for block, cache in zip(model.blocks, caches):
        x = block(x, m, cache)
    if final_norm and model.norm is not None:
        x = model.norm(x)
    return model.lm_head(x)


def _whole_pass_refused(*args, **kwargs) -> None:
    raise Mistake("WRITE IT YOURSELF: your function calls model(...) (or model.forward), the GPT's own forward pass, "
                  "which does the work. The exercise asks for the pass from the model's parts: model.tok_embed, "
                  "model.positional(x, offset), each of model.blocks as block(x, mask, cache), model.norm, "
                  "model.lm_head")


def check_forward_with_cache(fn: Callable) -> None:
    """``fn(model, new_idx, caches)`` -> logits ``(batch, new_len, vocab)``: the GPT's forward pass over the new
    tokens only, from its parts (embedding, positions from the cache length, blocks with their caches, final norm,
    head). Fed a prompt, then single tokens, then a chunk, it must give the logits of one pass over everything."""
    from ..gpt import GPT, GPTConfig

    torch.manual_seed(15)
    model = GPT(GPTConfig(vocab_size=30, max_len=32, d_model=16, heads=2, d_ff=32, num_layers=2)).eval()
    idx = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(3))
    pieces = [(0, 4), (4, 5), (5, 6), (6, 7), (7, 12)]  # a prompt of 4, three single tokens, a chunk of 5
    with torch.no_grad():
        want = model(idx)
        caches = model.new_cache()
        got = []
        model.forward = _whole_pass_refused  # the learner's model(...) or model.forward(...) is named
        for a, b in pieces:
            what = f"your function(model, idx[:, {a}:{b}], caches) with {a} positions cached"
            try:
                out = output_of(call(fn, model, idx[:, a:b], caches, what=what))
            except Mistake as exc:
                if len(caches[0]) > b and len(caches[-1]) < b:  # the first cache got every block's keys
                    raise Mistake(f"{ONE_CACHE} ({exc})") from None
                raise
            after = [len(c) for c in caches]
            if after != [b] * len(caches):
                if len(set(id(c) for c in caches)) < len(caches) or (after[0] > b and after[-1] < b):
                    raise Mistake(ONE_CACHE)
                raise Mistake(f"after {what} the caches hold {after} positions, expected {b} in each: pass caches[i] to "
                              "block i, and feed only the new tokens")
            expect(out.shape == (2, b - a, 30), f"{what} returned shape {tuple(out.shape)}, expected (batch, new_len, "
                                                f"vocab) = (2, {b - a}, 30)")
            got.append(out)
        del model.forward  # the class's forward again
        got = torch.cat(got, dim=1)
        suspects = {}
        for hint, kwargs in ((OFFSET, dict(offset=False)), (FWD_NO_MASK, dict(mask=False)),
                             (NO_FINAL_NORM, dict(final_norm=False))):
            buggy_caches = model.new_cache()
            suspects[hint] = torch.cat([_reference_forward(model, idx[:, a:b], buggy_caches, **kwargs)
                                        for a, b in pieces], dim=1)
    diagnose(got, want, suspects, "the logits differ from one pass over the whole sequence, model(idx)")
    passed("check_forward_with_cache", "a prompt, single tokens and a chunk give the logits of one pass over all "
                                       "12 tokens")


RECOMPUTED = ("the memory's keys and values are projected again at every step: compute mha.w_k(memory) and "
              "mha.w_v(memory) once, keep them in the store, and reuse them (the memory does not change while "
              "decoding)")


CROSS_SLIPS = {
    "keys": "the keys were never projected with mha.w_k: compute them from the memory, mha.w_k(memory), on the "
            "first step and keep them in the store",
    "swap_kv": "keys and values are swapped: the scores use mha.w_v(memory) and the weighted sum mha.w_k(memory); K "
               "comes from w_k, V from w_v (check which one you store under which name)",
    "no_wq": "the query is not projected: the new positions' queries are mha.w_q(x_new), split into heads, before "
             "they meet the stored keys",
    "no_wo": "the output projection is missing: after merging the heads, return mha.w_o(merged), as the module does",
    "no_scale": "the scores are not divided by sqrt(d_k): softmax(Q K^T / sqrt(d_k)) V, d_k = mha.d_k (F.scaled_dot_"
                "product_attention does it for you)",
}


def _cross(mha, x: Tensor, memory: Tensor, bug: str = "") -> Tensor:
    """Cross-attention of ``x`` over ``memory`` through ``mha``'s layers, or with one slip (``bug``)."""
    def heads(t: Tensor) -> Tensor:  # (batch, len, d_model) -> (batch, heads, len, d_k)
        return t.view(t.size(0), t.size(1), mha.heads, mha.d_k).transpose(1, 2)

    q = heads(x if bug == "no_wq" else mha.w_q(x))
    k, v = heads(memory if bug == "keys" else mha.w_k(memory)), heads(mha.w_v(memory))
    k, v = (v, k) if bug == "swap_kv" else (k, v)
    scores = q @ k.transpose(-2, -1) / (1.0 if bug == "no_scale" else math.sqrt(mha.d_k))
    out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(x.shape)  # (batch, new_len, d_model)
    return out if bug == "no_wo" else mha.w_o(out)


def check_cross_attention_step(fn: Callable) -> None:
    """``fn(mha, x_new, memory, store)`` -> cross-attention output ``(batch, new_len, d_model)`` for the new target
    positions; the memory's keys and values are computed on the first call and kept in ``store`` (a dict)."""
    from ..attention import MultiHeadAttention

    torch.manual_seed(15)
    mha = MultiHeadAttention(16, 4).eval()
    # each projection counts its own calls in a plain attribute: a fact of the module, which the grader's replay
    # carries back with the module's state (a list the hooks filled would stay in the kernel)
    def count(module: torch.nn.Module, *_: object) -> None:
        module.projections += 1

    mha.w_k.projections = mha.w_v.projections = 0
    hooks = [mha.w_k.register_forward_hook(count), mha.w_v.register_forward_hook(count)]
    try:
        for batch, src_len in ((2, 5), (3, 7)):
            memory = torch.randn(batch, src_len, 16)
            x = torch.randn(batch, 6, 16)
            with torch.no_grad():
                want = mha(x, memory, memory)[0]
                mha.w_k.projections = mha.w_v.projections = 0
                store: dict = {}
                got = []
                for t in range(6):
                    what = f"your function(mha, x[:, {t}:{t + 1}], memory {tuple(memory.shape)}, store), step {t}"
                    got.append(output_of(call(fn, mha, x[:, t: t + 1], memory, store, what=what, mutable=(3,))))
            got = torch.cat(got, dim=1)
            expect(got.shape == want.shape, f"the outputs have shape {tuple(got.shape)} together, expected "
                                            f"{tuple(want.shape)} (batch, new_len, d_model) per step")
            if not close(got, want):
                with torch.no_grad():
                    suspects = {hint: _cross(mha, x, memory, bug) for bug, hint in CROSS_SLIPS.items()}
                diagnose(got, want, suspects, "the output differs from cross-attention over the memory, "
                                              "mha(x_new, memory, memory)[0]")
            expect(mha.w_k.projections <= 1 and mha.w_v.projections <= 1, RECOMPUTED)
            expect(mha.w_k.projections == 1, CROSS_SLIPS["keys"])
    finally:
        for h in hooks:
            h.remove()
    passed("check_cross_attention_step", "6 steps over two memories equal cross-attention, with the memory's keys and "
                                         "values projected once per memory")
