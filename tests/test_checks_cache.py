"""Chapter 15 checkers: the reference passes; each classic mistake fails with its own hint."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfm_lesson.cache import causal_mask_with_offset
from tfm_lesson.checks import (Mistake, check_cache_memory, check_cached_attention, check_cross_attention_step,
                               check_forward_with_cache)


# one attention step with a cache ------------------------------------------------------------------------------------
def cached_attention(q, k_new, v_new, k_cache, v_cache, *, axis=2, order="cache_first", mask="offset", keys="all",
                     scale=None):
    if order == "cache_first":
        k_all, v_all = torch.cat([k_cache, k_new], dim=axis), torch.cat([v_cache, v_new], dim=axis)
    else:
        k_all, v_all = torch.cat([k_new, k_cache], dim=axis), torch.cat([v_new, v_cache], dim=axis)
    k, v = (k_all, v_all) if keys == "all" else (k_new, v_new)
    new, total = q.size(2), k.size(2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale or q.size(-1))
    if mask == "offset":
        m = causal_mask_with_offset(new, total - new)
    elif mask == "top_left":
        m = torch.ones(new, total, dtype=torch.bool).tril()
    else:
        m = None
    if m is not None:
        scores = scores.masked_fill(~m, float("-inf"))
    out = scores.softmax(dim=-1) @ v
    if keys == "new_returned":
        return out, k_new, v_new
    return out, k_all, v_all


def test_cached_attention_reference_passes(capsys):
    check_cached_attention(cached_attention)
    assert "✔ check_cached_attention passed" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    (dict(axis=1), "appended along the heads axis"),
    (dict(axis=-1), "appended along the feature axis"),
    (dict(axis=0), "appended along the batch axis"),
    (dict(order="new_first"), "the new keys come before the cached ones"),
    (dict(mask="top_left"), "the causal mask is not shifted by the cache length"),
    (dict(mask=None), "with several new positions at once"),
    (dict(keys="new"), "the queries attend only to the new keys"),
    (dict(keys="new_returned"), "the cache must grow"),
])
def test_cached_attention_mistakes(kwargs, hint):
    with pytest.raises(Mistake, match=hint):
        check_cached_attention(lambda *a: cached_attention(*a, **kwargs))


def test_cached_attention_wrong_scale():
    def wrong(q, *rest):
        return cached_attention(q, *rest, scale=q.size(-1) * q.size(1))
    with pytest.raises(Mistake, match="divide by sqrt\\(d_k\\)"):
        check_cached_attention(wrong)


# the cache's memory -------------------------------------------------------------------------------------------------
def memory(layers, heads, d_k, length, batch, dtype, *, kv=2, unit=1, use_layers=True, use_batch=True, extra=1,
           fixed_bytes=None):
    size = fixed_bytes or torch.empty((), dtype=dtype).element_size()
    return kv * (layers if use_layers else 1) * (batch if use_batch else 1) * heads * extra * d_k * length * size * unit


def test_cache_memory_reference_passes(capsys):
    check_cache_memory(memory)
    assert "✔ check_cache_memory passed" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    (dict(kv=1), "the factor 2 is missing"),
    (dict(unit=8), "that is bits, not bytes"),
    (dict(use_layers=False), "the number of layers is missing"),
    (dict(use_batch=False), "the batch is missing"),
    (dict(fixed_bytes=4), "4 bytes per number whatever the dtype"),
])
def test_cache_memory_mistakes(kwargs, hint):
    with pytest.raises(Mistake, match=hint):
        check_cache_memory(lambda *a: memory(*a, **kwargs))


def test_cache_memory_heads_twice():
    with pytest.raises(Mistake, match="heads counted twice"):
        check_cache_memory(lambda L, h, d, n, b, dt: memory(L, h, d, n, b, dt, extra=h))


def test_cache_memory_wrong_type():
    with pytest.raises(Mistake, match="expected a number of bytes"):
        check_cache_memory(lambda *a: "a lot")


# a GPT forward pass with the cache ----------------------------------------------------------------------------------
def forward(model, idx, caches, *, offset=True, mask=True, final_norm=True, shared=False):
    start = len(caches[0])
    x = model.tok_embed(idx)
    x = model.positional(x, start if offset else 0)
    m = causal_mask_with_offset(idx.size(1), start) if (mask and idx.size(1) > 1) else None
    for i, block in enumerate(model.blocks):
        x = block(x, m, caches[0] if shared else caches[i])
    if final_norm:
        x = model.norm(x)
    return model.lm_head(x)


def test_forward_with_cache_reference_passes(capsys):
    check_forward_with_cache(forward)
    assert "✔ check_forward_with_cache passed" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    (dict(offset=False), "the position offset is missing"),
    (dict(mask=False), "need a causal mask shifted by the cache length"),
    (dict(final_norm=False), "the final norm is missing"),
])
def test_forward_with_cache_mistakes(kwargs, hint):
    with pytest.raises(Mistake, match=hint):
        check_forward_with_cache(lambda *a: forward(*a, **kwargs))


def test_forward_with_cache_shared_cache():
    with pytest.raises(Mistake, match="the blocks share one cache|caches\\[i\\] to block i"):
        check_forward_with_cache(lambda *a: forward(*a, shared=True))


def test_forward_whole_sequence_is_not_fed():
    fed = []

    def whole(model, idx, caches):  # a learner who keeps their own prefix and feeds all of it: the cache overflows
        fed.append(idx)
        return forward(model, torch.cat(fed, dim=1), caches)[:, -idx.size(1):]
    with pytest.raises(Mistake, match="feed only the new tokens|caches hold"):
        check_forward_with_cache(whole)


@pytest.mark.parametrize("fn", [lambda model, idx, caches: model(idx, caches),
                                lambda model, idx, caches: model.forward(idx, cache=caches)])
def test_forward_with_cache_by_the_models_own_forward_is_refused(fn):
    """The exercise says "without calling model(...)": the GPT's own cached forward pass is refused by name."""
    with pytest.raises(Mistake, match=r"WRITE IT YOURSELF: your function calls model\(\.\.\.\)"):
        check_forward_with_cache(fn)


# cross-attention keys once ------------------------------------------------------------------------------------------
def cross_step(mha, x, memory, store, *, once=True):
    if not once or "k" not in store:
        store["k"], store["v"] = mha._split_heads(mha.w_k(memory)), mha._split_heads(mha.w_v(memory))
    q = mha._split_heads(mha.w_q(x))
    return mha.w_o(mha._merge_heads(F.scaled_dot_product_attention(q, store["k"], store["v"])))


def test_cross_attention_reference_passes(capsys):
    check_cross_attention_step(cross_step)
    assert "✔ check_cross_attention_step passed" in capsys.readouterr().out


def test_cross_attention_recomputed_every_step():
    with pytest.raises(Mistake, match="projected again at every step"):
        check_cross_attention_step(lambda *a: cross_step(*a, once=False))


def test_cross_attention_plain_call_recomputes():
    with pytest.raises(Mistake, match="projected again at every step"):
        check_cross_attention_step(lambda mha, x, memory, store: mha(x, memory, memory)[0])


@pytest.mark.parametrize("checker", [check_cached_attention, check_cache_memory, check_forward_with_cache,
                                     check_cross_attention_step])
def test_an_unwritten_stub_is_named(checker):
    def stub(*args):
        ...  # your turn

    with pytest.raises(Mistake, match="returned None: not written yet"):
        checker(stub)
