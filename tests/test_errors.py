"""Bad input gets a clear error naming the argument and what was expected; masking never gives NaN."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T


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
    config = dict(src_vocab=20, tgt_vocab=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
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
    with pytest.raises(ValueError, match=r"share_embeddings=True needs src_vocab == tgt_vocab"):
        T.TransformerConfig(src_vocab=10, tgt_vocab=12)
    with pytest.raises(ValueError, match=r"src_pad_id must be an id in \[0, 10\)"):
        T.TransformerConfig(src_vocab=10, tgt_vocab=10, src_pad_id=10)


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
