"""Bad input gets a clear error naming the argument and what was expected; masking never gives NaN."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
from tfm_lesson.training import make_model


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by heads=4"):
        T.MultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by heads=4"):
        T.TransformerConfig(d_model=30, heads=4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(d_model=0, heads=1), r"d_model must be a positive int"),
    (dict(d_model=8, heads=2, dropout=1.5), r"dropout must be a float in \[0, 1\)"),
    (dict(d_model=8.0, heads=2), r"d_model must be a positive int"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        T.MultiHeadAttention(**kwargs)


def test_mask_of_the_wrong_shape_names_the_dimension():
    mha = T.MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"mask has shape \(2, 1, 1, 6\).*k_len dimension is 6, expected 5 or 1"):
        mha(x, x, x, torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"batch dimension is 3, expected 2 or 1"):
        mha(x, x, x, torch.ones(3, 1, 1, 5, dtype=torch.bool))


def test_mask_of_the_wrong_dtype_is_refused():
    x = torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match=r"mask must be boolean with True = may attend"):
        T.MultiHeadAttention(16, 4)(x, x, x, torch.zeros(2, 1, 1, 5))  # an additive float mask
    with pytest.raises(TypeError, match=r"mask must be boolean"):
        T.scaled_dot_product_attention(x, x, x, torch.ones(2, 5, 5, dtype=torch.long))


def test_mismatched_feature_sizes():
    mha = T.MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"key has 12 features in its last dimension, expected d_model=16"):
        mha(torch.randn(2, 5, 16), torch.randn(2, 5, 12), torch.randn(2, 5, 12))
    with pytest.raises(ValueError, match=r"query and key must share d_k"):
        T.scaled_dot_product_attention(torch.randn(2, 5, 8), torch.randn(2, 5, 7), torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match=r"x must be shaped \(\.\.\., d_model=16\)"):
        T.LayerNorm(16)(torch.randn(2, 5, 15))
    with pytest.raises(ValueError, match=r"x has 15 features in its last dimension, expected d_model=16"):
        T.PositionwiseFeedForward(16, 64)(torch.randn(2, 5, 15))
    with pytest.raises(ValueError, match=r"memory has 8 features"):
        T.DecoderLayer(16, 4, 32)(torch.randn(2, 5, 16), torch.randn(2, 7, 8))


def _small(**overrides) -> T.Transformer:
    config = dict(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                  num_decoder_layers=1, max_len=10, dropout=0.0)
    return T.Transformer(**{**config, **overrides}).eval()


def test_token_ids_outside_the_vocabulary():
    model = _small()
    with pytest.raises(ValueError, match=r"src holds token id 20, outside the vocabulary \[0, 20\)"):
        model(torch.tensor([[1, 20]]), torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"tgt holds token id -1"):
        model(torch.tensor([[1, 2]]), torch.tensor([[1, -1]]))
    with pytest.raises(TypeError, match=r"src must hold integer token ids, got dtype torch.float32"):
        model(torch.tensor([[1.0, 2.0]]), torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"src and tgt must have the same batch size, got 2 and 1"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_sequence_longer_than_the_positional_table():
    with pytest.raises(ValueError, match=r"src has length 11 but the positional table holds max_len=10"):
        _small()(torch.ones(1, 11, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"seq_len=12.*max_len=10"):
        T.SinusoidalPositionalEncoding(8, max_len=10)(torch.zeros(1, 12, 8))


def test_bad_config_values():
    with pytest.raises(ValueError, match=r"positional must be 'sinusoidal' or 'learned'"):
        T.TransformerConfig(positional="rotary")
    with pytest.raises(ValueError, match=r"share_embeddings=True needs src_vocab_size == tgt_vocab_size"):
        T.TransformerConfig(src_vocab_size=10, tgt_vocab_size=12)


@pytest.mark.parametrize("make, old, new", [
    (lambda: T.TransformerConfig(src_vocab=10, tgt_vocab_size=10), "src_vocab", "src_vocab_size"),
    (lambda: T.Transformer(tgt_vocab=10), "tgt_vocab", "tgt_vocab_size"),
    (lambda: T.GPTConfig(vocab_size=10, context=8, d_model=8, heads=2, d_ff=8, num_layers=1), "context", "max_len"),
    (lambda: T.GPT(vocab_size=10, context=8, d_model=8, heads=2, d_ff=8, num_layers=1), "context", "max_len"),
    (lambda: make_model(None, None, layers=2), "layers", "num_layers")])
def test_an_old_keyword_names_the_new_one(make, old, new):
    """Keywords renamed for one name per concept: the old spelling is refused, naming today's."""
    with pytest.raises(TypeError, match=rf"got the keyword {old}=, which is now called {new}="):
        make()
    with pytest.raises(ValueError, match=r"src_pad_id must be an id in \[0, 10\)"):
        T.TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, src_pad_id=10)


# fully masked rows and low precision ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_gives_zeros_never_nan(device, dtype, need_weights):
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).to(device=device, dtype=dtype).eval()
    x = torch.randn(2, 5, 16, device=device, dtype=dtype)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool, device=device)
    mask[0, :, 2, :] = False  # query 2 of sequence 0 sees no key at all
    out, weights = mha(x, x, x, mask, need_weights=need_weights)
    assert not torch.isnan(out).any() and not torch.isinf(out).any()
    bias = mha.w_o.bias  # a query that attends to nothing gets zero context, so only W^O's bias is left
    assert torch.allclose(out[0, 2], bias, atol=1e-6)
    if need_weights:
        assert torch.equal(weights[0, :, 2], torch.zeros_like(weights[0, :, 2]))
        assert torch.allclose(weights[1].float().sum(-1), torch.ones(4, 5, device=device), atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_masking_works_in_half_precision(device, dtype):
    """-1e9 overflows float16; tfm_lesson masks with -inf and removes fully masked rows, so masked keys get
    exactly zero weight in every dtype."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 4, 8, device=device) for _ in range(3))
    mask = torch.tensor([True, True, False, False], device=device)
    out, weights = T.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert torch.equal(weights[..., 2:].float(), torch.zeros(2, 3, 4, 2, device=device))
    ref, _ = T.scaled_dot_product_attention(q, k, v, mask)
    assert torch.allclose(out.float(), ref, atol=5e-2)


# the unclear cases a careless user found: each now gets a clear error, or the same numbers as the explicit path -------
def test_a_one_dimensional_mask_works_on_both_paths():
    """A (k_len,) key mask passed the mask check, then raised IndexError inside the fast path."""
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([True, True, True, False, False])
    fast, _ = mha(x, x, x, mask)
    explicit, _ = mha(x, x, x, mask, need_weights=True)
    full, _ = mha(x, x, x, mask[None, None, None, :].expand(2, 4, 5, 5))
    assert torch.allclose(fast, explicit, atol=1e-6) and torch.allclose(fast, full, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_input_dtype_other_than_the_modules_names_both(dtype):
    x = torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match=rf"query has dtype {dtype} but MultiHeadAttention's weights are torch.float32"):
        T.MultiHeadAttention(16, 4)(x.to(dtype), x.to(dtype), x.to(dtype))
    with pytest.raises(TypeError, match=rf"x has dtype {dtype} but LayerNorm's weights are torch.float32"):
        T.LayerNorm(16)(x.to(dtype))
    with pytest.raises(TypeError, match=rf"has dtype {dtype} but MultiHeadAttention's weights are torch.float32"):
        T.EncoderLayer(16, 4, 32, dropout=0.0)(x.to(dtype))


def test_mixed_precision_under_autocast_is_still_accepted():
    torch.manual_seed(0)
    mha, norm = T.MultiHeadAttention(16, 4).eval(), T.LayerNorm(16)
    x = torch.randn(2, 5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = torch.nn.functional.linear(x, torch.eye(16))  # bfloat16 under autocast
        assert h.dtype == torch.bfloat16
        out, _ = mha(h, h, h)
        norm(out)
    assert torch.isfinite(out).all()


def test_an_empty_target_or_source_is_named():
    """A target of length 0 was reported as a causal_mask size error."""
    model = _small()
    with pytest.raises(ValueError, match=r"tgt must hold at least one token per sequence, got shape \(1, 0\)"):
        model(torch.tensor([[1, 2]]), torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"src must hold at least one token per sequence, got shape \(1, 0\)"):
        model(torch.zeros(1, 0, dtype=torch.long), torch.tensor([[1, 2]]))


@pytest.mark.parametrize("pad_id", [None, 0.0, "0", True])
def test_padding_mask_needs_an_int_pad_id(pad_id):
    with pytest.raises(TypeError, match=r"padding_mask: pad_id must be the int id of the padding token"):
        T.padding_mask(torch.tensor([[1, 0]]), pad_id)


@pytest.mark.parametrize("field", ["norm_first", "share_embeddings", "tie_embeddings", "bias", "final_norm"])
@pytest.mark.parametrize("value", ["False", 0, 1, "yes"])
def test_boolean_config_fields_refuse_strings_and_ints(field, value):
    """norm_first="False" was accepted and, being a non-empty string, built a pre-norm model."""
    with pytest.raises(TypeError, match=rf"{field} must be True or False"):
        T.TransformerConfig(**{field: value})
    T.TransformerConfig(**{field: True})
    with pytest.raises(ValueError, match=r"eps must be a positive float"):
        T.TransformerConfig(eps="1e-5")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("masked", [False, True])
def test_nan_and_inf_propagate_through_the_fast_path_as_through_the_explicit_one(device, bad, masked):
    """The fused kernel returned finite numbers for a NaN or -inf query, where the explicit path and
    nn.MultiheadAttention give NaN; with a padding mask, a NaN key it hides gave NaN everywhere. On a GPU,
    other fused kernels run: the same holds there."""
    torch.manual_seed(0)
    mha = T.MultiHeadAttention(16, 4).to(device).eval()
    x = torch.randn(2, 5, 16, device=device)
    mask = T.padding_mask(torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], device=device), 0) if masked else None
    for where in ("query", "key", "value"):
        q, k, v = x.clone(), x.clone(), x.clone()
        {"query": q, "key": k, "value": v}[where][0, 4 if masked else 1, 3] = bad
        fast, _ = mha(q, k, v, mask)
        explicit, _ = mha(q, k, v, mask, need_weights=True)
        assert torch.equal(torch.isnan(fast), torch.isnan(explicit)), (where, torch.isnan(fast).any(-1))
        assert torch.equal(torch.isinf(fast), torch.isinf(explicit)), where
        finite = torch.isfinite(explicit)
        assert torch.allclose(fast[finite], explicit[finite], atol=1e-5), where
    if not masked:  # and as torch.nn does
        ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).to(device).eval()
        q = x.clone()
        q[0, 1, 3] = bad
        assert torch.isnan(ref(q, x, x)[0][0, 1]).all() and torch.isnan(mha(q, x, x)[0][0, 1]).all()


@pytest.mark.parametrize("where", ["a hidden key's value", "a visible key's value"])
def test_a_fully_masked_query_gives_zero_on_both_paths_even_beside_a_nan_value(device, where):
    """A query with no visible key has weights 0 everywhere; 0 times a NaN value was NaN on the explicit path
    and 0 on the fast one. Both now give 0 for that query; for the other queries the NaN value reaches their
    output on both paths alike (0 times NaN is NaN in a matrix product, as in torch.nn)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, device=device) for _ in range(3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]], device=device)
    v[..., 0 if where == "a visible key's value" else 2, 1] = float("nan")
    explicit, _ = T.scaled_dot_product_attention(q, k, v, mask)
    fast = T.attention.fast_attention(q, k, v, mask)
    assert torch.equal(explicit[..., 1, :], torch.zeros_like(explicit[..., 1, :]))  # query 1 sees nothing
    assert torch.equal(torch.isnan(fast), torch.isnan(explicit))
    assert torch.allclose(fast.nan_to_num(), explicit.nan_to_num(), atol=1e-6)
    assert torch.isnan(explicit[..., [0, 2], 1]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_explicit_layer_norm_of_large_half_values(dtype):
    """In float16 the squared deviations of values near 60,000 overflow: the explicit path returned zeros."""
    x = torch.tensor([[60000.0, 59000.0, 61000.0, 60500.0]])
    explicit = T.LayerNorm(4, explicit=True).to(dtype)(x.to(dtype))
    ref = T.LayerNorm(4)(x)
    assert explicit.dtype == dtype
    assert torch.allclose(explicit.float(), ref, atol=2e-2)
    try:
        fused = T.LayerNorm(4).to(dtype)(x.to(dtype))
    except RuntimeError as exc:  # torch < 2.3 has no float16 layer norm kernel on the CPU
        assert "not implemented" in str(exc)
    else:
        assert torch.allclose(explicit.float(), fused.float(), atol=1e-2)


# widgets stay responsive ----------------------------------------------------------------------------------------------
def _texts(fig) -> list:
    return [t for t in fig.findobj(lambda o: hasattr(o, "get_text") and hasattr(o, "_preprocess_math")) if t.get_text()]


def test_explorer_text_with_dollars_is_drawn_as_text():
    """"it costs $5 and $6" was drawn as math: "5and6" in italics."""
    from tfm_lesson import widgets

    explorer = widgets.translate_widget(lambda s: s.upper(), "it costs $5 and $6")
    shown = {t._preprocess_math(t.get_text()) for t in _texts(explorer.figure)}
    assert ("it costs $5 and $6", False) in shown and ("IT COSTS $5 AND $6", False) in shown, shown
    assert not any(is_math for _, is_math in shown)


def test_a_long_input_is_cut_with_a_note():
    from tfm_lesson import widgets

    seen = []
    explorer = widgets.translate_widget(lambda s: seen.append(len(s)) or "ok", "word " * 20_000)
    assert seen and max(seen) <= widgets.TEXT_LIMIT
    assert any("only the first 300 of 99,999 characters are used" in t.get_text() for t in _texts(explorer.figure))


def test_a_slow_callback_never_blocks_building_or_the_browser(monkeypatch):
    import threading
    import time

    from tfm_lesson import widgets

    monkeypatch.setattr(widgets, "BUILD_WAIT", 0.5)
    release = threading.Event()
    calls = []

    def slow(text):
        calls.append(text)
        release.wait(60)
        return text

    start = time.perf_counter()
    explorer = widgets.translate_widget(slow, "hello")
    assert time.perf_counter() - start < 10, "building waited for the callback"
    assert "drawing" in explorer.status.value and not explorer.image.value
    box = explorer.controls["source"]
    start = time.perf_counter()
    for text in ("hello w", "hello wo", "hello world"):  # typed in the browser while the first render runs
        with box._lock_property(value=text):
            box.value = text
    assert time.perf_counter() - start < 2, "a change from the browser waited for the render"
    release.set()
    assert explorer.wait(30) and explorer.png and explorer.error == ""
    assert calls[0] == "hello" and calls[-1] == "hello world" and len(calls) <= 3  # changes merged
