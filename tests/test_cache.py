"""The KV cache: the cache itself, attention with a cache, and decoding with it token-identical to without
(greedy and beam, encoder-decoder and decoder-only, float32). Also: few host syncs while decoding."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
import tfm_lesson.model as model_module
from tfm_lesson.cache import CrossAttentionCache, DecoderCache, KVCache, cache_nbytes, causal_mask_with_offset
from tfm_lesson.data import Vocab
from tfm_lesson.modern import GroupedQueryAttention
from tfm_lesson.decoding import SYNC_EVERY, beam_search, greedy_decode, translate

BOS, EOS, PAD = 1, 2, 0


# --- the cache itself ----------------------------------------------------------------------------------------
def test_update_appends_along_the_length_axis():
    cache = KVCache()
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    k, v = cache.update(k1, v1)
    assert k.shape == (2, 3, 4, 5) and len(cache) == 4
    k, v = cache.update(k2, v2)
    assert k.shape == (2, 3, 5, 5) and len(cache) == 5
    assert torch.equal(k, torch.cat([k1, k2], dim=2)) and torch.equal(v, torch.cat([v1, v2], dim=2))
    assert cache.nbytes == 2 * 2 * 3 * 5 * 5 * 4  # 2 (keys and values) x batch x heads x length x d_k x 4 bytes


def test_growth_past_the_reserved_length_keeps_every_position():
    cache = KVCache(max_len=3)
    steps = [torch.randn(1, 2, 1, 4) for _ in range(20)]
    for s in steps:
        k, _ = cache.update(s, s * 2)
    assert torch.equal(k, torch.cat(steps, dim=2)) and len(cache) == 20
    assert cache._key.size(2) >= 20  # doubled a few times, not once per step
    assert cache.key.shape == (1, 2, 20, 4)


def test_reorder_and_reset():
    cache = KVCache(8)
    k = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 2).contiguous()
    cache.update(k, k)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.key[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]
    cache.update(torch.zeros(3, 1, 1, 2), torch.zeros(3, 1, 1, 2))
    assert len(cache) == 3
    cache.reset()
    assert len(cache) == 0 and cache.key is None
    cache.update(torch.zeros(5, 1, 1, 2), torch.zeros(5, 1, 1, 2))  # a new batch size after reset


@pytest.mark.parametrize("shape,dtype,match", [
    ((3, 2, 1, 4), torch.float32, r"a cache from another batch: this cache holds \(batch=2, kv_heads=2, d_k=4\)"),
    ((2, 1, 1, 4), torch.float32, r"a cache from another batch"),
    ((2, 2, 1, 8), torch.float32, r"a cache from another batch"),
    ((2, 2, 1, 4), torch.float64, r"a cache from another batch: this cache holds torch.float32"),
])
def test_cache_from_another_batch(shape, dtype, match):
    cache = KVCache()
    cache.update(torch.zeros(2, 2, 3, 4), torch.zeros(2, 2, 3, 4))
    with pytest.raises(ValueError, match=match):
        cache.update(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))


def test_cache_argument_errors():
    with pytest.raises(ValueError, match=r"key must be shaped \(batch, kv_heads, new_len, d_k\)"):
        KVCache().update(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"key and value must have the same shape"):
        KVCache().update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match=r"max_len must be a positive int or None"):
        KVCache(0)


def test_causal_mask_with_offset():
    m = causal_mask_with_offset(2, 3)
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert torch.equal(causal_mask_with_offset(4, 0), T.causal_mask(4))


# --- attention with a cache ------------------------------------------------------------------------------------
def test_attention_step_with_cache_equals_attention_over_the_prefix():
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    full = mha(x, x, x, T.causal_mask(7))[0]
    cache = KVCache()
    steps = [mha(x[:, t: t + 1], x[:, t: t + 1], x[:, t: t + 1], cache=cache)[0] for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)
    # the explicit path (weights asked for) agrees, and the weights cover every cached key
    out, w = mha(x[:, :1], x[:, :1], x[:, :1], need_weights=True, cache=KVCache())
    assert w.shape == (2, 4, 1, 1)


def test_cross_attention_keys_and_values_are_computed_once():
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).eval()
    memory, queries = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    calls = []
    mha.w_k.register_forward_hook(lambda *a: calls.append("k"))
    cache = CrossAttentionCache()
    steps = [mha(queries[:, t: t + 1], memory, memory, cache=cache)[0] for t in range(6)]
    assert calls == ["k"] and len(cache) == 5
    torch.testing.assert_close(torch.cat(steps, dim=1), mha(queries, memory, memory)[0], rtol=1e-5, atol=1e-6)


# --- encoder-decoder ---------------------------------------------------------------------------------------------
def _model(norm_first: bool = False, seed: int = 0, vocab: int = 13) -> T.Transformer:
    T.seed_everything(seed)
    model = T.Transformer(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, heads=4, d_ff=64,
                          num_encoder_layers=2, num_decoder_layers=2, dropout=0.1, max_len=64, norm_first=norm_first,
                          share_embeddings=False, tie_embeddings=False)
    with torch.no_grad():  # a random model whose rows differ: sharp logits, token embeddings that matter
        model.generator.weight.normal_(0, 1.0)
        model.tgt_embed.weight.mul_(3.0)
    return model


def _pick_eos(model: T.Transformer, src: torch.Tensor, max_len: int = 20) -> int:
    """The id that, used as </s>, ends the rows at the most different steps (so padding after eos is exercised)."""
    free = greedy_decode(model, src, max_len, BOS, eos_id=-1)[:, 1:]  # never stops
    def spread(eos: int) -> int:
        return len({(row == eos).nonzero()[0].item() if (row == eos).any() else max_len for row in free})
    return max(range(3, model.config.tgt_vocab_size), key=spread)


def _src(batch: int = 6, seed: int = 1, vocab: int = 13) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, 7), generator=g)
    for i in range(batch):  # ragged: padding at the end of some rows
        n = 3 + i % 5
        src[i, n:] = PAD
        src[i, n - 1] = EOS
    return src


@pytest.mark.parametrize("norm_first", [False, True])
def test_decode_with_cache_equals_decode_of_the_whole_prefix(norm_first):
    model = _model(norm_first).eval()
    src, tgt = _src(), torch.randint(3, 13, (6, 9))
    with torch.no_grad():
        memory = model.encode(src)
        src_mask = model.make_src_mask(src)
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache()
        parts = [model.decode(tgt[:, :4], memory, src_mask, cache=cache)]
        parts += [model.decode(tgt[:, t: t + 1], memory, src_mask, cache=cache) for t in range(4, 9)]
    assert len(cache) == 2 and isinstance(cache[0], DecoderCache) and len(cache[0].self_attn) == 9
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)
    d_k, layers = 32 // 4, 2  # memory: 2 x layers x heads x d_k x length x 4 bytes, for each of the 6 rows
    assert sum(c.self_attn.nbytes for c in cache) == 2 * layers * 4 * d_k * 9 * 4 * 6
    assert sum(c.cross_attn.nbytes for c in cache) == 2 * layers * 4 * d_k * 7 * 4 * 6
    assert cache_nbytes(cache) == sum(c.nbytes for c in cache)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_and_beam_token_identical_with_and_without_cache(norm_first, seed):
    model, src = _model(norm_first, seed), _src(seed=seed + 5)
    eos = _pick_eos(model, src)
    greedy = [greedy_decode(model, src, 20, BOS, eos, use_cache=u) for u in (True, False)]
    assert torch.equal(greedy[0], greedy[1])
    ends = [(row == eos).nonzero()[0].item() if (row == eos).any() else None for row in greedy[0]]
    assert len(set(ends)) > 1  # rows end at different steps: the padding after eos is exercised
    for k in (1, 3):
        beams = [beam_search(model, src, k, 20, BOS, eos, return_scores=True, use_cache=u) for u in (True, False)]
        assert torch.equal(beams[0][0], beams[1][0])
        torch.testing.assert_close(beams[0][1], beams[1][1], rtol=1e-5, atol=1e-5)
    assert torch.equal(beam_search(model, src, 1, 20, BOS, eos), greedy[0])


def test_greedy_stops_at_the_step_the_last_row_ended():
    model, src = _model(), _src()
    free = greedy_decode(model, src, 40, BOS, eos_id=-1)[:, 1:]
    everywhere = [t for t in range(3, 13) if bool((free == t).any(dim=1).all())]  # every row ends with this eos
    eos = max(everywhere, key=lambda t: len({(row == t).nonzero()[0].item() for row in free}))
    out = greedy_decode(model, src, 40, BOS, eos)
    assert bool((out == eos).any(dim=1).all()) and out.size(1) < 41
    last_eos = max((row == eos).nonzero()[0].item() for row in out)
    assert out.size(1) == last_eos + 1  # no column of padding only, although the loop checks every few steps


def test_translate_same_with_and_without_cache():
    words = "a b c d e f g h i".split()
    vocab = Vocab.build([" ".join(words)])
    model = T.Transformer(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=16, heads=2, d_ff=32,
                          num_encoder_layers=1, num_decoder_layers=1, max_len=64,
                          src_pad_id=vocab.pad_id, tgt_pad_id=vocab.pad_id)
    texts = ["a b c", "d e", "f g h i a"]
    for beam in (1, 3):
        cached = translate(model, texts, vocab, vocab, beam_size=beam, max_len=12)
        assert cached == translate(model, texts, vocab, vocab, beam_size=beam, max_len=12, use_cache=False)


# --- decoder-only -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_gpt_generate_token_identical(temperature):
    torch.manual_seed(0)
    gpt = T.GPT(vocab_size=30, max_len=64, d_model=32, heads=4, d_ff=64, num_layers=2)
    idx = torch.randint(0, 30, (4, 5))
    a, b = (gpt.generate(idx, 40, temperature=temperature, use_cache=u, generator=torch.Generator().manual_seed(0))
            for u in (True, False))
    assert torch.equal(a, b)


# --- host syncs ---------------------------------------------------------------------------------------------------
def test_token_ids_checked_once_per_batch(monkeypatch):
    calls = []
    real = model_module.check_tokens
    monkeypatch.setattr(model_module, "check_tokens", lambda t, name, v: calls.append(name) or real(t, name, v))
    model, src = _model().eval(), _src()
    model(src, torch.randint(3, 13, (6, 5)))
    assert calls == ["src", "tgt"]
    calls.clear()
    greedy_decode(model, src, 10, BOS, EOS)
    assert calls == ["src"]  # the source once; generated ids are the model's own, never re-checked


def test_aminmax_once(monkeypatch):
    counted = []
    real = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda *a, **k: counted.append(1) or real(*a, **k))
    with pytest.raises(ValueError, match=r"tgt holds token id 99"):
        _model()(_src(), torch.full((6, 3), 99))
    assert len(counted) == 2  # src, then tgt: one reduction each


def test_decoding_reads_back_rarely(monkeypatch):
    reads = []
    for name in ("__bool__", "__int__", "item", "tolist"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _r=real, _n=name, **k: reads.append(_n) or _r(self, *a, **k))
    model, src = _model().eval(), _src()
    max_len = 24
    greedy_decode(model, src, max_len, BOS, EOS)
    # the source's id check (one tolist), one "all ended?" per SYNC_EVERY steps, and the final length
    assert len(reads) <= 1 + max_len // SYNC_EVERY + 1, reads
    reads.clear()
    beam_search(model, src, 3, max_len, BOS, EOS)
    assert len(reads) <= 1 + max_len // SYNC_EVERY + 1, reads


def test_decoding_errors():
    model, src = _model(), _src()
    with pytest.raises(ValueError, match=r"bos_id must be an id in \[0, 13\)"):
        greedy_decode(model, src, 5, 13, EOS)
    with pytest.raises(ValueError, match=r"bos_id must be an id"):
        beam_search(model, src, 2, 5, -1, EOS)
    with pytest.raises(ValueError, match=r"tgt has length 4 after 62 cached but the positional table holds max_len=64"):
        cache = model.new_cache()
        memory = model.encode(src)
        model.decode(torch.full((6, 62), 3), memory, cache=cache)
        model.decode(torch.full((6, 4), 3), memory, cache=cache)


# --- the bench section ----------------------------------------------------------------------------------------------
def test_bench_generation_quick():
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_generation import bench_generation, contenders, decode_times  # tools/bench_generation.py

    result = bench_generation(torch.device("cpu"), quick=True)
    assert result["same_tokens"] is True and result["new_tokens"] == 64
    assert set(result["tokens_per_s"]) == {"fast cached", "cached, model forward", "uncached", "transformers"}
    assert set(result["tokens_per_s"]["fast cached"]) == {32} and len(result["ms_per_token"]["uncached"]) == 64
    assert all(v > 0 for per in result["tokens_per_s"].values() for v in per.values())
    assert set(result["profile"]) == {"torch.cat cache", "KVCache", "FastDecoder"}
    assert set(result["generate_ms_per_token"]) == {"GPT.generate", "transformers generate"}
    gpt = T.GPT(vocab_size=20, max_len=16, d_model=16, heads=2, d_ff=32, num_layers=1)
    prompt = torch.zeros(2, 3, dtype=torch.long)
    expected = gpt.generate(prompt, 5, temperature=0)
    for name, way in contenders(gpt.eval(), None, 2, 8).items():
        times, out = decode_times(way, prompt, 5)
        assert len(times) == 5 and torch.equal(out, expected), name


# --- misuse is caught, never silently wrong (issue 22) -----------------------------------------------------------
def test_new_cache_reused_for_another_sentence_is_refused():
    model = _model().eval()
    bos = torch.ones(1, 1, dtype=torch.long)
    src1, src2 = torch.tensor([[3, 4, 5, 6]]), torch.tensor([[7, 8, 9, 10]])
    cache = model.new_cache()
    with torch.no_grad():
        model.decode(bos, model.encode(src1), cache=cache)
        model.decode(bos, model.encode(src1), cache=cache)  # the same memory, recomputed: accepted
        with pytest.raises(ValueError, match="another memory"):
            model.decode(bos, model.encode(src2), cache=cache)
        for layer in cache:  # after a reset of every layer the cache serves the new sentence
            layer.self_attn.reset()
            layer.cross_attn.reset()
        model.decode(bos, model.encode(src2), cache=cache)


def test_filled_cross_cache_from_another_batch_is_refused():
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).eval()
    cache = CrossAttentionCache()
    mha(torch.randn(1, 1, 16), torch.randn(1, 5, 16), torch.randn(1, 5, 16), cache=cache)
    memory = torch.randn(3, 5, 16)
    with pytest.raises(ValueError, match="another batch"):
        mha(torch.randn(3, 1, 16), memory, memory, cache=cache)


def test_cache_of_the_wrong_kind_is_refused():
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match="CrossAttentionCache belongs to cross-attention"):
        mha(x, x, x, cache=CrossAttentionCache())
    with pytest.raises(TypeError, match="KVCache belongs to self-attention"):
        mha(x, memory, memory, cache=KVCache())
    with pytest.raises(TypeError, match="not the list"):
        mha(x, x, x, cache=[KVCache()])
    gqa = GroupedQueryAttention(16, 4, 2)
    with pytest.raises(TypeError, match="must be a KVCache"):
        gqa(x, x, x, cache=CrossAttentionCache())
    with pytest.raises(TypeError, match="KVCache belongs to self-attention"):
        gqa(x, memory, memory, cache=KVCache())


def test_decode_checks_the_cache_list():
    model = _model().eval()
    src, bos = torch.tensor([[3, 4, 5]]), torch.ones(1, 1, dtype=torch.long)
    with torch.no_grad():
        memory = model.encode(src)
        with pytest.raises(TypeError, match="list of 2 DecoderCache"):
            model.decode(bos, memory, cache=model.new_cache()[:1])
        swapped = [DecoderCache(c.cross_attn, c.self_attn) for c in model.new_cache()]
        with pytest.raises(TypeError, match="in that order"):
            model.decode(bos, memory, cache=swapped)
        cache = model.new_cache()
        model.decode(bos, memory, cache=cache)
        cache[1].self_attn.reset()  # one layer's cache reset
        with pytest.raises(ValueError, match="different lengths"):
            model.decode(bos, memory, cache=cache)
        cache = model.new_cache()
        model.decode(bos, memory, cache=cache)
        cache[0].cross_attn.reset()
        with pytest.raises(ValueError, match="cross-attention caches disagree"):
            model.decode(bos, memory, cache=cache)
