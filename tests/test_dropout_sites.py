"""Each dropout site is its own setting: ``dropout`` (each sub-layer's output, the paper's residual dropout),
``embedding_dropout`` (embeddings + positions), ``attention_dropout`` (the attention weights) and
``activation_dropout`` (the feed-forward hidden units). None means ``dropout``, so the defaults drop out exactly
where they did before the sites were split (and where ``nn.Transformer`` does)."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
from tfm_lesson.interop import to_torch


def _rates(layer) -> dict:
    return {"residual": layer.dropout1.p, "attention": layer.self_attn.dropout,
            "activation": layer.feed_forward.dropout.p}


def test_defaults_drop_out_at_every_site_at_the_shared_rate():
    assert _rates(T.EncoderLayer(16, 2, 32, dropout=0.2)) == {"residual": 0.2, "attention": 0.2, "activation": 0.2}
    dec = T.DecoderLayer(16, 2, 32, dropout=0.2)
    assert _rates(dec) == {"residual": 0.2, "attention": 0.2, "activation": 0.2} and dec.cross_attn.dropout == 0.2


def test_each_site_takes_its_own_rate():
    enc = T.Encoder(16, 2, 32, num_layers=2, dropout=0.1, attention_dropout=0.0, activation_dropout=0.3)
    assert all(_rates(l) == {"residual": 0.1, "attention": 0.0, "activation": 0.3} for l in enc.layers)
    dec = T.Decoder(16, 2, 32, num_layers=2, dropout=0.1, attention_dropout=0.25, activation_dropout=0.0)
    assert all(_rates(l) == {"residual": 0.1, "attention": 0.25, "activation": 0.0} for l in dec.layers)
    assert all(l.cross_attn.dropout == 0.25 for l in dec.layers)


def test_the_papers_sites_only():
    # section 5.4: residual dropout and the embedding sums, nothing on the attention weights or the hidden units
    model = T.Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                          num_decoder_layers=1, dropout=0.1, attention_dropout=0.0, activation_dropout=0.0)
    assert model.dropout.p == 0.1
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        assert _rates(layer) == {"residual": 0.1, "attention": 0.0, "activation": 0.0}
    assert T.Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                         num_decoder_layers=1, embedding_dropout=0.0).dropout.p == 0.0


def test_only_the_switched_on_site_makes_training_mode_random():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    quiet = T.EncoderLayer(16, 2, 32, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0).train()
    assert torch.equal(quiet(x), quiet(x))
    for site in ("attention_dropout", "activation_dropout"):
        layer = T.EncoderLayer(16, 2, 32, dropout=0.0, **{site: 0.5}).train()
        assert not torch.equal(layer(x), layer(x)), site
        assert torch.equal(layer.eval()(x), layer(x))


def test_none_is_the_shared_rate_to_the_last_bit():
    # the defaults draw the same random numbers as an explicit rate at every site: stored runs do not move
    kw = dict(src_vocab_size=30, tgt_vocab_size=30, d_model=16, heads=2, d_ff=32, num_encoder_layers=2,
              num_decoder_layers=2, dropout=0.1)
    src, tgt = torch.randint(1, 30, (3, 7)), torch.randint(1, 30, (3, 5))
    outs = []
    for extra in ({}, dict(embedding_dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)):
        torch.manual_seed(0)
        model = T.Transformer(**kw, **extra).train()
        torch.manual_seed(1)
        outs.append(model(src, tgt))
    assert torch.equal(*outs)


@pytest.mark.parametrize("name", ["attention_dropout", "activation_dropout"])
def test_bad_rates_name_the_setting(name):
    with pytest.raises(ValueError, match=name):
        T.EncoderLayer(16, 2, 32, **{name: 1.5})
    with pytest.raises(ValueError, match=name):
        T.TransformerConfig(**{name: -0.1})
    with pytest.raises(ValueError, match="embedding_dropout"):
        T.TransformerConfig(embedding_dropout=1.0)


def test_torch_conversion_needs_one_rate():
    to_torch(T.EncoderLayer(16, 2, 32, dropout=0.1))  # one rate everywhere: converts
    with pytest.raises(ValueError, match="one dropout for every site"):
        to_torch(T.EncoderLayer(16, 2, 32, dropout=0.1, attention_dropout=0.0))
