"""record_attention: every map of a forward pass, by layer, head and kind, without changing the outputs."""
from __future__ import annotations

import pytest
import torch

from tfm_lesson import MultiHeadAttention, Transformer, record_attention, scaled_dot_product_attention
from tfm_lesson.look.recording import attention_kind

HEADS, ENC, DEC = 2, 2, 3


def _model(device: torch.device) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=HEADS, d_ff=32, num_encoder_layers=ENC,
                        num_decoder_layers=DEC, dropout=0.0).to(device)
    return model.eval()


def _batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]], device=device)  # (batch=2, src_len=5), padded
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 0, 0]], device=device)  # (batch=2, tgt_len=4), padded
    return src, tgt


def test_every_map_by_kind_layer_and_shape(device: torch.device) -> None:
    model = _model(device)
    src, tgt = _batch(device)
    with torch.no_grad(), record_attention(model) as rec:
        model(src, tgt)
    expected = {f"encoder.layers.{i}.self_attn" for i in range(ENC)}
    expected |= {f"decoder.layers.{i}.self_attn" for i in range(DEC)}
    expected |= {f"decoder.layers.{i}.cross_attn" for i in range(DEC)}
    assert set(rec.maps) == expected
    assert rec.kinds() == ["cross", "decoder", "encoder"]
    assert rec.layers("encoder") == list(range(ENC)) and rec.layers("cross") == list(range(DEC))
    shapes = {"encoder": (2, HEADS, 5, 5), "decoder": (2, HEADS, 4, 4), "cross": (2, HEADS, 4, 5)}
    for name, weights in rec.maps.items():
        assert tuple(weights.shape) == shapes[attention_kind(name)], name
        assert weights.device.type == device.type and not weights.requires_grad
        assert torch.allclose(weights.sum(-1), torch.ones((), device=device), atol=1e-5), f"{name}: rows sum to 1"
    # the masks show: padded source keys get 0 everywhere, the decoder never looks ahead
    for kind in ("encoder", "cross"):
        for layer in rec.layers(kind):
            assert rec.get(kind=kind, layer=layer)[1, :, :, 3:].abs().max() == 0
    decoder = rec.get(kind="decoder", layer=DEC - 1)
    assert torch.equal(decoder.triu(1), torch.zeros_like(decoder))
    assert decoder[1, :, :, 2:].abs().max() == 0  # padded target keys


def test_get_errors_name_what_exists(device: torch.device) -> None:
    model = _model(device)
    src, tgt = _batch(device)
    with torch.no_grad(), record_attention(model) as rec:
        model(src, tgt)
    with pytest.raises(KeyError, match="kind='cross', layer=7"):
        rec.get(kind="cross", layer=7)
    with pytest.raises(KeyError, match="found"):
        rec.get(kind="encoder")  # two layers: ambiguous


def test_outputs_unchanged_fast_path(device: torch.device) -> None:
    """The fast path (fused SDPA) still computes the outputs: recording adds weights, changes nothing."""
    model = _model(device)
    src, tgt = _batch(device)
    with torch.no_grad():
        plain = model(src, tgt)
        with record_attention(model):
            recorded = model(src, tgt)
        after = model(src, tgt)
    assert torch.equal(plain, recorded) and torch.equal(plain, after)


def test_outputs_unchanged_explicit_path_and_same_weights(device: torch.device) -> None:
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4).to(device).eval()
    x = torch.randn(2, 5, 16, device=device)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2], device=device)[:, None, None, :]
    out, weights = mha(x, x, x, mask, need_weights=True)
    with record_attention(mha) as rec:
        out_rec, weights_rec = mha(x, x, x, mask, need_weights=True)
    assert torch.equal(out, out_rec) and torch.equal(weights, weights_rec)
    assert list(rec.maps) == ["attention"]
    assert torch.equal(rec.maps["attention"], weights)  # explicit path: its own weights are recorded


def test_fast_path_record_equals_explicit_weights(device: torch.device) -> None:
    """What the fast path records is what the explicit path would return, for every module of the model."""
    model = _model(device)
    src, tgt = _batch(device)
    inputs: dict[str, tuple] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, args, name=n: inputs.__setitem__(name, args))
             for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    try:
        with torch.no_grad(), record_attention(model) as rec:
            model(src, tgt)
    finally:
        for h in hooks:
            h.remove()
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, args in inputs.items():
            _, explicit = modules[name](*args, need_weights=True)
            assert torch.allclose(rec.maps[name], explicit, atol=1e-6), name


def test_recorder_removed_even_after_an_error() -> None:
    model = _model(torch.device("cpu"))
    src, tgt = _batch(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="boom"):
        with record_attention(model):
            raise RuntimeError("boom")
    assert all(m._recorder is None for m in model.modules() if isinstance(m, MultiHeadAttention))
    with record_attention(model) as rec:
        pass
    model(src, tgt)
    assert rec.maps == {}  # nothing recorded outside the block


def test_gradients_flow_while_recording() -> None:
    model = _model(torch.device("cpu")).train()
    src, tgt = _batch(torch.device("cpu"))
    with record_attention(model) as rec:
        model(src, tgt).sum().backward()
    assert all(p.grad is not None for p in model.encoder.parameters())
    assert not any(w.requires_grad for w in rec.maps.values())


def test_model_without_attention_is_an_error() -> None:
    with pytest.raises(ValueError, match="no tfm_lesson MultiHeadAttention"):
        with record_attention(torch.nn.Linear(2, 2)):
            pass


def test_reference_weights_match_softmax_definition() -> None:
    """A recorded map is softmax(Q K^T / sqrt(d_k)) of the module's own projections."""
    torch.manual_seed(2)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    with torch.no_grad(), record_attention(mha) as rec:
        mha(x, x, x)
        q = mha.w_q(x).view(1, 3, 2, 4).transpose(1, 2)
        k = mha.w_k(x).view(1, 3, 2, 4).transpose(1, 2)
        _, expected = scaled_dot_product_attention(q, k, k)
        by_hand = (q @ k.transpose(-2, -1) / 2.0).softmax(-1)
    assert torch.allclose(rec.maps["attention"], expected, atol=1e-6)
    assert torch.allclose(rec.maps["attention"], by_hand, atol=1e-6)


def test_repeated_calls_keep_the_last_map() -> None:
    """Step-by-step decoding calls each module once per step: the record holds the last (longest) step."""
    torch.manual_seed(4)
    mha = MultiHeadAttention(8, 2).eval()
    with torch.no_grad(), record_attention(mha) as rec:
        for length in (1, 2, 3):
            x = torch.randn(1, length, 8)
            mha(x, x, x)
    assert tuple(rec.maps["attention"].shape) == (1, 2, 3, 3)
