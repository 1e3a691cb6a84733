"""The fast cached decoding path (tfm_lesson.decoding): the same logits as the model's forward over the whole
sequence (to 1e-5), the same greedy tokens as uncached decoding and as the learner's torch.cat cache, and none of
the per-step costs it exists to cut (no torch.cat, no reallocation, no argument checks, no mask)."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
import tfm_lesson._validate as validate
import tfm_lesson.decoding as decoding
from tfm_lesson.cache import StaticKVCache
from tfm_lesson.decoding import FastDecoder
from tfm_lesson.look.profile import ConcatKVCache

CONFIGS = [{}, {"norm_first": False, "positional": "sinusoidal"}, {"bias": False, "activation": "relu"},
           {"kv_heads": 2, "positional": "rope", "norm": "rms", "activation": "swiglu", "bias": False}]


def small(varied: bool = False, **overrides) -> T.GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=50, max_len=64, d_model=32, heads=4, d_ff=64, num_layers=2)
    model = T.GPT(T.GPTConfig(**{**cfg, **overrides})).eval()
    if varied:
        with torch.no_grad():  # larger weights than GPT-2's init: a random model whose greedy tokens vary
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.5)
    return model


def _greedy(model: T.GPT, prompt: torch.Tensor, new: int, step) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens (batch, len + new) and the logits of every step (batch, new, vocab), one step function."""
    out, logits = prompt, []
    with torch.inference_mode():
        for t in range(new):
            last = step(out, t)  # (batch, vocab)
            logits.append(last)
            out = torch.cat([out, last.argmax(-1, keepdim=True)], dim=1)
    return out, torch.stack(logits, dim=1)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_fast_step_logits_equal_the_whole_sequence_to_1e_5(overrides):
    model = small(**overrides)  # GPT-2's initialisation, as in the bench and chapter 15
    idx = torch.randint(0, 50, (3, 40), generator=torch.Generator().manual_seed(3))
    decoder = FastDecoder(model, batch=3, max_len=40)
    with torch.inference_mode():
        whole = model(idx)  # (3, 40, vocab): every position in one pass, no cache
        steps = [decoder.prefill(idx[:, :6])] + [decoder.step(idx[:, t: t + 1]) for t in range(6, 40)]
    torch.testing.assert_close(torch.stack(steps, dim=1), whole[:, 5:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_fast_path_tokens_equal_uncached_and_the_learners_cat_cache(overrides):
    model = small(varied=True, **overrides)
    prompt = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    decoder = FastDecoder(model, batch=3, max_len=7 + 30)
    cat_cache = [ConcatKVCache() for _ in model.blocks]  # chapter 15's first cache: torch.cat at every step

    ways = {
        "fast": lambda out, t: decoder.prefill(out) if t == 0 else decoder.step(out[:, -1:]),
        "torch.cat cache": lambda out, t: model(out if t == 0 else out[:, -1:], cat_cache)[:, -1],
        "uncached": lambda out, t: model(out)[:, -1],
    }
    results = {name: _greedy(model, prompt, 30, step) for name, step in ways.items()}
    tokens, logits = results["uncached"]
    assert len(set(tokens[:, 7:].flatten().tolist())) > 5  # a varied sequence, not one token repeated
    scale = logits.abs().max().item()  # this model's logits are large: agreement relative to their size
    for name in ("fast", "torch.cat cache"):
        assert torch.equal(results[name][0], tokens), name
        torch.testing.assert_close(results[name][1], logits, rtol=1e-5, atol=1e-5 * scale)
    assert len(decoder) == 7 + 29  # the prompt and every generated token but the last were fed


@pytest.mark.parametrize("overrides", CONFIGS[:2])
@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.9, top_k=10)])
def test_generate_is_the_fast_path_and_equals_uncached(overrides, sampling, monkeypatch):
    model = small(**overrides)
    steps = []
    real = FastDecoder.step
    monkeypatch.setattr(FastDecoder, "step", lambda self, token: steps.append(1) or real(self, token))
    prompt = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(2))
    a, b = (model.generate(prompt, 20, use_cache=use, generator=torch.Generator().manual_seed(0), **sampling)
            for use in (True, False))
    assert torch.equal(a, b) and len(steps) == 19
    assert not a.is_inference()  # usable afterwards for training: a normal tensor
    model.train()
    model(a).sum().backward()


def test_a_step_checks_nothing_concatenates_nothing_and_reallocates_nothing(monkeypatch):
    model = small()
    prompt = torch.randint(0, 50, (1, 4))
    decoder = FastDecoder(model, 1, 20)
    with torch.inference_mode():
        decoder.prefill(prompt)
        pointers = [(c._key.data_ptr(), c._value.data_ptr()) for c in decoder.caches]
        called = []
        for module, name in [(torch, "cat"), (torch, "aminmax"), (validate, "check_features"),
                             (validate, "check_tokens"), (decoding, "check_tokens"), (torch.Tensor, "tril"),
                             (torch.Tensor, "masked_fill")]:
            real = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *a, _r=real, _n=name, **k: called.append(_n) or _r(*a, **k))
        for t in range(5):
            decoder.step(prompt[:, -1:])
    assert called == []
    assert [(c._key.data_ptr(), c._value.data_ptr()) for c in decoder.caches] == pointers  # written in place
    assert [len(c) for c in decoder.caches] == [9, 9]


def test_greedy_generate_still_refuses_nan_logits():
    model = small()
    with torch.no_grad():
        model.blocks[1].feed_forward.w_2.bias[0] = float("nan")
    with pytest.raises(ValueError, match="logits hold NaN"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 4, temperature=0)


def test_static_cache_and_decoder_errors():
    cache = StaticKVCache(batch=2, kv_heads=4, max_len=3, d_k=8)
    k = torch.randn(2, 4, 2, 8)
    keys, values = cache.update(k, k)
    assert keys.shape == (2, 4, 2, 8) and torch.equal(keys, k)
    with pytest.raises(ValueError, match="max_len=3 cannot take 2 more positions after 2"):
        cache.update(k, k)
    with pytest.raises(ValueError, match="a cache from another batch"):
        cache.update(torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8))
    cache.reset()
    assert len(cache) == 0 and cache._key.size(2) == 3
    model = small()
    with pytest.raises(ValueError, match="max_len=65 is more than the model's context of 64"):
        FastDecoder(model, 1, 65)
    decoder = FastDecoder(model, 2, 6)
    with pytest.raises(ValueError, match=r"idx must be shaped \(batch=2, len >= 1\), got \(1, 3\)"):
        decoder.prefill(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="more than max_len=6"):
        decoder.prefill(torch.zeros(2, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decoder.prefill(torch.full((2, 2), 50))
