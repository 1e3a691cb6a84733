"""GPT: shapes, causality, tied weights, clear errors, and the cache giving the same logits and tokens."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
from tfm_lesson.gpt import GPTBlock, _make_attention, _make_feed_forward, _make_norm, _make_positional


def small(**overrides) -> T.GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=40, max_len=48, d_model=32, heads=4, d_ff=64, num_layers=2)
    return T.GPT(T.GPTConfig(**{**cfg, **overrides}))


def test_shapes_and_defaults():
    model = small()
    idx = torch.randint(0, 40, (3, 11))
    assert model(idx).shape == (3, 11, 40)
    c = model.config
    assert (c.norm_first, c.final_norm, c.positional, c.activation, c.bias, c.tie_embeddings) == \
        (True, True, "learned", "gelu", True, True)
    assert model.norm is not None and len(model.blocks) == 2
    assert isinstance(model.blocks[0], GPTBlock)
    assert not hasattr(model.blocks[0], "cross_attn")  # the decoder layer without cross-attention


def test_keyword_config_and_post_norm_has_no_final_norm():
    model = T.GPT(vocab_size=10, max_len=8, d_model=8, heads=2, d_ff=16, num_layers=1, norm_first=False)
    assert model.norm is None
    assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 10)


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False}, {"positional": "sinusoidal"},
                                       {"activation": "gelu_tanh", "bias": False, "tie_embeddings": False}])
def test_causal(overrides):
    model = small(**overrides).eval()
    idx = torch.randint(0, 40, (2, 12))
    changed = idx.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 40
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_tied_and_untied_weights():
    tied, untied = small(), small(tie_embeddings=False)
    assert tied.lm_head.weight is tied.tok_embed.weight
    assert untied.lm_head.weight is not untied.tok_embed.weight
    assert T.count_parameters(untied) - T.count_parameters(tied) == 40 * 32
    assert "lm_head.weight" in tied.state_dict()


def test_gelu_tanh_is_gpt2_gelu():
    model = small(activation="gelu_tanh")
    x = torch.randn(1, 3, 32)
    ff = model.blocks[0].feed_forward
    expected = ff.w_2(torch.nn.functional.gelu(ff.w_1(x), approximate="tanh"))
    torch.testing.assert_close(ff(x), expected)


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False}, {"positional": "sinusoidal"}])
def test_cached_logits_equal_uncached(overrides):
    model = small(**overrides).eval()
    idx = torch.randint(0, 40, (3, 20))
    full = model(idx)
    cache = model.new_cache()
    pieces = [model(idx[:, :5], cache)]  # a prompt, then one token at a time, then a chunk of 4
    for t in range(5, 16):
        pieces.append(model(idx[:, t: t + 1], cache))
    pieces.append(model(idx[:, 16:], cache))
    assert len(cache[0]) == 20 and all(len(c) == 20 for c in cache)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False, "positional": "sinusoidal"}])
@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=1.0),
                                      dict(temperature=0.8, top_k=5, top_p=0.9)])
def test_generate_token_identical_with_and_without_cache(overrides, sampling):
    model = small(**overrides)
    idx = torch.randint(0, 40, (3, 6))
    outs = [model.generate(idx, 30, use_cache=use, generator=torch.Generator().manual_seed(3), **sampling)
            for use in (True, False)]
    assert outs[0].shape == (3, 36)
    assert torch.equal(outs[0][:, :6], idx)
    assert torch.equal(outs[0], outs[1])


def test_generate_restores_training_and_is_deterministic_when_greedy():
    model = small(dropout=0.3)
    model.train()
    idx = torch.randint(0, 40, (2, 4))
    a = model.generate(idx, 10, temperature=0)
    assert model.training
    assert torch.equal(a, model.generate(idx, 10, temperature=0))  # dropout off while generating
    assert torch.equal(model.generate(idx, 0), idx)
    assert a.dtype == torch.long


def test_generator_makes_samples_reproducible():
    model = small()
    idx = torch.zeros(4, 1, dtype=torch.long)
    a = model.generate(idx, 12, generator=torch.Generator().manual_seed(7))
    b = model.generate(idx, 12, generator=torch.Generator().manual_seed(7))
    c = model.generate(idx, 12, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("field,value,error,match", [
    ("norm_first", "False", TypeError, r"norm_first must be True or False, got 'False'"),
    ("tie_embeddings", 1, TypeError, r"tie_embeddings must be True or False"),
    ("positional", "alibi", ValueError, r"positional must be one of"),
    ("activation", "tanh", ValueError, r"activation must be one of"),
    ("norm", "batch", ValueError, r"norm must be one of"),
    ("heads", 5, ValueError, r"d_model=32 must be divisible by heads=5"),
    ("kv_heads", 3, ValueError, r"heads=4 must be divisible by kv_heads=3"),
    ("max_len", 0, ValueError, r"max_len must be a positive int"),
    ("dropout", 1.0, ValueError, r"dropout must be a float in \[0, 1\)"),
    ("eps", 0.0, ValueError, r"eps must be a positive number"),
    ("rope_theta", -1.0, ValueError, r"rope_theta must be a positive number"),
])
def test_config_errors(field, value, error, match):
    cfg = dict(vocab_size=40, max_len=48, d_model=32, heads=4, d_ff=64, num_layers=2)
    with pytest.raises(error, match=match):
        T.GPTConfig(**{**cfg, field: value})


def test_factories_name_what_is_not_implemented():
    cfg = T.GPTConfig(vocab_size=40, max_len=48, d_model=32, heads=4, d_ff=64, num_layers=2)
    for field, factory in (("norm", _make_norm), ("activation", _make_feed_forward),
                           ("positional", _make_positional)):
        bad = T.GPTConfig(**cfg.to_dict())
        setattr(bad, field, "something-new")  # a value a future option might add
        with pytest.raises(ValueError, match=rf"{field}='something-new' is not implemented"):
            factory(bad)
    assert isinstance(_make_attention(cfg), T.MultiHeadAttention)


def test_input_errors():
    model = small()
    with pytest.raises(ValueError, match=r"idx holds token id 40, outside the vocabulary \[0, 40\)"):
        model(torch.tensor([[1, 40]]))
    with pytest.raises(ValueError, match=r"idx holds token id -1"):
        model.generate(torch.tensor([[-1, 2]]), 3)
    with pytest.raises(TypeError, match=r"must be an integer tensor \(torch.long"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(TypeError, match=r"idx must hold integer token ids, got dtype torch.uint8"):
        model(torch.tensor([[1, 2]], dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"shaped \(batch, seq_len\)"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"49 tokens, more than the context of max_len=48"):
        model(torch.zeros(1, 49, dtype=torch.long))
    with pytest.raises(ValueError, match=r"prompt \(40 tokens\) plus max_new_tokens=9 is 49 positions, more than "
                                         r"the context of max_len=48"):
        model.generate(torch.zeros(1, 40, dtype=torch.long), 9)
    with pytest.raises(ValueError, match=r"more than the context"):
        model.generate(torch.zeros(1, 40, dtype=torch.long), 9, use_cache=False)  # the same rule without a cache
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int >= 0"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), -1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.5), r"temperature must be a finite number >= 0"),
    (dict(top_k=0), r"top_k must be an int >= 1"),
    (dict(top_p=0.0), r"top_p must be a number in \(0, 1\]"),
    (dict(top_p=1.5), r"top_p must be a number in \(0, 1\]"),
])
def test_generate_sampling_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        small().generate(torch.zeros(1, 2, dtype=torch.long), 3, **kwargs)


def test_cache_errors():
    model = small().eval()
    with pytest.raises(TypeError, match=r"cache must be a list of 2 KVCache"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=[T.KVCache()])
    cache = model.new_cache()
    model(torch.zeros(2, 3, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"a cache from another batch: .*batch=2.*batch=3"):
        model(torch.zeros(3, 1, dtype=torch.long), cache)
    model2 = small()
    cache = model2.new_cache()
    model2(torch.zeros(1, 40, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"after 40 cached, more than the context of max_len=48"):
        model2(torch.zeros(1, 9, dtype=torch.long), cache)


def test_factory_errors_list_every_option_there_is():
    from tfm_lesson import gpt

    config = gpt.GPTConfig(vocab_size=10, max_len=8, d_model=8, heads=2, d_ff=16, num_layers=1)
    for field, factory, kinds in (("norm", gpt._make_norm, gpt.NORM_KINDS),
                                  ("activation", gpt._make_feed_forward, gpt.ACTIVATION_KINDS),
                                  ("positional", gpt._make_positional, gpt.POSITIONAL_KINDS)):
        broken = gpt.GPTConfig(**config.to_dict())
        setattr(broken, field, "nope")  # past the config's own check: the factory must still say what exists
        with pytest.raises(ValueError) as err:
            factory(broken)
        assert all(repr(kind) in str(err.value) for kind in kinds), str(err.value)
