"""Bad input gets a clear error naming the argument and what was expected, across the modules. Attention's own
errors and its masking (never NaN) are tested in tests/test_attention.py."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
from tfm_lesson.train.loop import make_model


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by heads=4"):
        T.MultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by heads=4"):
        T.TransformerConfig(d_model=30, heads=4)


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


# the unclear cases a careless user found: each now gets a clear error, or the same numbers as the explicit path -------
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
    from tfm_lesson.look.widgets import explorer

    monkeypatch.setattr(explorer, "BUILD_WAIT", 0.5)  # read where the Explorer is built, not in the package
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
