"""Every component against PyTorch's own: loaded weights, same inputs and masks, outputs and gradients to 1e-5.
Attention's parity tests are in tests/test_attention.py."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson as T


# layer norm, feed-forward, positional encoding -----------------------------------------------------------------------
@pytest.mark.parametrize("explicit", [False, True])
def test_layer_norm_matches_torch(device, parity, explicit):
    torch.manual_seed(3)
    theirs = nn.LayerNorm(20, eps=1e-5).to(device)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours = T.LayerNorm(20, explicit=explicit).to(device)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(5, 7, 20, device=device) * 3 + 1
    parity("LayerNorm", ours(x), theirs(x))


def test_feed_forward_matches_torch_layer(device, parity, no_torch_fastpath):
    torch.manual_seed(4)
    layer = nn.TransformerEncoderLayer(16, 2, 40, dropout=0.0, batch_first=True).to(device).eval()
    ff = T.from_torch(layer).feed_forward
    x = torch.randn(3, 5, 16, device=device)
    parity("PositionwiseFeedForward", ff(x), layer.linear2(F.relu(layer.linear1(x))))


def test_sinusoidal_table_matches_the_formula(parity):
    table = T.sinusoidal_table(50, 12)
    for pos in (0, 1, 17, 49):
        for i in range(6):
            angle = pos / 10000 ** (2 * i / 12)
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    assert T.sinusoidal_table(10, 7).shape == (10, 7)  # odd d_model: the last column is a sine


def test_positional_encoding_adds_the_table_per_position(device):
    pe = T.SinusoidalPositionalEncoding(8, max_len=20).to(device)
    x = torch.zeros(3, 5, 8, device=device)
    out = pe(x, offset=2)
    assert torch.equal(out[1], T.sinusoidal_table(20, 8)[2:7].to(device))
    learned = T.LearnedPositionalEncoding(8, max_len=20).to(device)
    assert torch.equal(learned(x)[2], learned.embedding.weight[:5])


# encoder and decoder -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(device, parity, no_torch_fastpath, norm_first, activation):
    torch.manual_seed(5)
    theirs = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                        norm_first=norm_first).to(device).eval()
    ours = T.from_torch(theirs)
    assert ours.norm_first == norm_first and ours.feed_forward.activation == activation
    x = torch.randn(3, 7, 32, device=device, requires_grad=True)
    tokens = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]], device=device)
    mask = T.padding_mask(tokens, 0)
    out = ours(x, mask)
    ref = theirs(x, src_key_padding_mask=T.torch_mask(mask[:, 0, 0]))
    parity("EncoderLayer", out, ref)
    g_ours = torch.autograd.grad(out.square().sum(), x, retain_graph=True)[0]
    g_theirs = torch.autograd.grad(ref.square().sum(), x, retain_graph=True)[0]
    parity("EncoderLayer (grad)", g_ours, g_theirs)
    out.square().sum().backward()
    ref.square().sum().backward()
    parity("EncoderLayer (grad)", ours.norm2.weight.grad, theirs.norm2.weight.grad)
    parity("EncoderLayer (grad)", ours.self_attn.w_q.weight.grad, theirs.self_attn.in_proj_weight.grad[:32])
    parity("EncoderLayer (grad)", ours.feed_forward.w_1.weight.grad, theirs.linear1.weight.grad)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(device, parity, no_torch_fastpath, norm_first):
    torch.manual_seed(6)
    theirs = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                        norm_first=norm_first).to(device).eval()
    ours = T.from_torch(theirs)
    x = torch.randn(2, 6, 32, device=device, requires_grad=True)
    memory = torch.randn(2, 9, 32, device=device)
    tgt_mask = T.causal_mask(6, device)
    src = torch.tensor([[1] * 9, [1] * 5 + [0] * 4], device=device)
    memory_mask = T.padding_mask(src, 0)
    out = ours(x, memory, tgt_mask, memory_mask)
    ref = theirs(x, memory, tgt_mask=T.torch_mask(tgt_mask), memory_key_padding_mask=T.torch_mask(memory_mask[:, 0, 0]))
    parity("DecoderLayer", out, ref)
    out.sum().backward()
    ref.sum().backward()
    parity("DecoderLayer (grad)", ours.cross_attn.w_o.weight.grad, theirs.multihead_attn.out_proj.weight.grad)
    parity("DecoderLayer (grad)", ours.norm3.weight.grad, theirs.norm3.weight.grad)


@pytest.mark.parametrize("final_norm", [False, True])
def test_stacks_match_torch(device, parity, no_torch_fastpath, final_norm):
    torch.manual_seed(7)
    enc_layer = nn.TransformerEncoderLayer(24, 3, 48, dropout=0.0, batch_first=True)
    dec_layer = nn.TransformerDecoderLayer(24, 3, 48, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(enc_layer, 3, norm=nn.LayerNorm(24) if final_norm else None,
                                    enable_nested_tensor=False).to(device).eval()
    decoder = nn.TransformerDecoder(dec_layer, 2, norm=nn.LayerNorm(24) if final_norm else None).to(device).eval()
    ours_enc, ours_dec = T.from_torch(encoder), T.from_torch(decoder)
    assert (ours_enc.norm is not None) == final_norm and len(ours_dec.layers) == 2
    src, tgt = torch.randn(2, 8, 24, device=device), torch.randn(2, 5, 24, device=device)
    memory = ours_enc(src)
    parity("Encoder", memory, encoder(src))
    causal = T.causal_mask(5, device)
    parity("Decoder", ours_dec(tgt, memory, causal), decoder(tgt, memory, tgt_mask=T.torch_mask(causal)))


def test_nn_transformer_round_trip(device, parity, no_torch_fastpath):
    torch.manual_seed(8)
    theirs = nn.Transformer(32, 4, 2, 2, 64, dropout=0.0, batch_first=True).to(device).eval()
    ours = T.from_torch(theirs)
    assert isinstance(ours, T.EncoderDecoder) and ours.encoder.norm is not None  # nn.Transformer's final norms
    src, tgt = torch.randn(3, 7, 32, device=device), torch.randn(3, 5, 32, device=device)
    causal = T.causal_mask(5, device)
    parity("EncoderDecoder vs nn.Transformer", ours(src, tgt, tgt_mask=causal),
           theirs(src, tgt, tgt_mask=T.torch_mask(causal)))
    back = T.to_torch(ours).eval()
    for (n1, p1), (n2, p2) in zip(theirs.state_dict().items(), back.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_stacks_match_nn_transformer(device, parity, no_torch_fastpath, norm_first):
    """The full model: our embeddings + generator around nn.Transformer's stacks give our logits."""
    torch.manual_seed(9)
    model = T.Transformer(T.TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, heads=4, d_ff=64,
                                              num_encoder_layers=2, num_decoder_layers=2, dropout=0.0,
                                              norm_first=norm_first)).to(device).eval()
    theirs = T.to_torch(model).eval()
    src = torch.randint(1, 30, (2, 6), device=device)
    tgt = torch.randint(1, 30, (2, 5), device=device)
    src[1, 4:] = 0
    logits = model(src, tgt)
    scale = math.sqrt(32)
    src_x = model.positional(model.src_embed(src) * scale)
    tgt_x = model.positional(model.tgt_embed(tgt) * scale)
    pad = T.torch_mask(model.make_src_mask(src)[:, 0, 0])
    hidden = theirs(src_x, tgt_x, tgt_mask=T.torch_mask(T.causal_mask(5, device)), src_key_padding_mask=pad,
                    memory_key_padding_mask=pad)
    parity("Transformer vs nn.Transformer stacks", logits, model.generator(hidden))


# the whole model -----------------------------------------------------------------------------------------------------
def test_base_model_parameter_count_is_the_papers():
    model = T.Transformer()  # defaults = base model, shared 37,000-token vocabulary, tied embeddings
    n = T.count_parameters(model)
    assert abs(n - 65e6) / 65e6 <= 0.05, n
    table = T.parameter_table(model)
    assert table["total"] == n and table["generator"] == 0  # the generator reuses the embedding


def test_state_dict_round_trip(device, tmp_path):
    torch.manual_seed(10)
    cfg = T.TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                              num_decoder_layers=1)
    model = T.Transformer(cfg).to(device).eval()
    torch.save(model.state_dict(), tmp_path / "m.pt")
    fresh = T.Transformer(cfg).to(device).eval()
    fresh.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    assert fresh.generator.weight is fresh.tgt_embed.weight  # tying survives loading
    src, tgt = torch.randint(1, 20, (2, 5), device=device), torch.randint(1, 20, (2, 4), device=device)
    assert torch.equal(model(src, tgt), fresh(src, tgt))


def test_transformer_builds_masks_from_pad_ids(device):
    torch.manual_seed(11)
    model = T.Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                          num_decoder_layers=1, dropout=0.0).to(device).eval()
    src = torch.tensor([[5, 6, 7, 0, 0]], device=device)
    tgt = torch.tensor([[1, 4, 9]], device=device)
    explicit = model(src, tgt, model.make_src_mask(src), model.make_tgt_mask(tgt))
    assert torch.equal(model(src, tgt), explicit)
    # padding really is hidden: changing a padded source position's token changes nothing
    src2 = src.clone()
    src2[0, 4] = 0
    other = torch.tensor([[5, 6, 7, 0, 0]], device=device)
    assert torch.allclose(model(other, tgt), model(src2, tgt))
    # and the decoder is causal: a later target token does not change earlier logits
    tgt2 = tgt.clone()
    tgt2[0, 2] = 13
    assert torch.allclose(model(src, tgt)[:, :2], model(src, tgt2)[:, :2], atol=1e-6)
