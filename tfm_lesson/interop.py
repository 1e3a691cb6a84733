"""Weights to and from ``torch.nn``: prove that tfm_lesson computes what PyTorch computes.

    ours = from_torch(nn.TransformerEncoderLayer(64, 4, batch_first=True))
    theirs = to_torch(ours)

Where PyTorch and the paper differ, tfm_lesson makes it an option, not a special case:

- ``nn.TransformerEncoder``/``Decoder`` inside ``nn.Transformer`` always end with a LayerNorm, even in
  post-norm, where the paper has none: that is ``final_norm=True`` on :class:`~tfm_lesson.Encoder`.
- ``nn.MultiheadAttention`` stores W^Q, W^K, W^V fused in one ``in_proj_weight`` (3 d_model, d_model);
  tfm_lesson keeps ``w_q``, ``w_k``, ``w_v`` apart (the paper's names), the same numbers split in three.
- Mask polarity: ``nn.MultiheadAttention`` and ``nn.Transformer`` take ``True`` = *blocked*; tfm_lesson and
  ``F.scaled_dot_product_attention`` take ``True`` = *may attend*. Convert with :func:`torch_mask` (``~mask``).
- ``nn.Transformer`` has no embeddings or generator: ``from_torch`` gives an :class:`~tfm_lesson.EncoderDecoder`,
  and ``to_torch(Transformer)`` converts the stacks only.

tfm_lesson modules are always batch-first; the weights do not depend on ``batch_first``.
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .decoder import Decoder, DecoderLayer
from .encoder import Encoder, EncoderLayer
from .model import EncoderDecoder, Transformer

__all__ = ["from_torch", "to_torch", "torch_mask"]

Pairs = Iterator[tuple[Tensor, Tensor]]


def torch_mask(mask: Tensor | None) -> Tensor | None:
    """tfm_lesson mask (True = may attend) -> ``nn.MultiheadAttention`` mask (True = blocked)."""
    return None if mask is None else ~mask


# (ours, theirs) tensor pairs; copying either way goes through these ------------------------------------------------
def _opt(a: Tensor | None, b: Tensor | None) -> Pairs:
    if (a is None) != (b is None):
        raise ValueError("one module has a bias where the other has none")
    if a is not None:
        yield a, b


def _mha_pairs(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> Pairs:
    d = ours.d_model
    for i, lin in enumerate((ours.w_q, ours.w_k, ours.w_v)):
        yield lin.weight, theirs.in_proj_weight[i * d:(i + 1) * d]
        yield from _opt(lin.bias, None if theirs.in_proj_bias is None else theirs.in_proj_bias[i * d:(i + 1) * d])
    yield ours.w_o.weight, theirs.out_proj.weight
    yield from _opt(ours.w_o.bias, theirs.out_proj.bias)


def _norm_pairs(ours: nn.Module, theirs: nn.LayerNorm) -> Pairs:
    yield ours.weight, theirs.weight
    yield from _opt(ours.bias, theirs.bias)


def _ff_pairs(ours: nn.Module, theirs: nn.Module) -> Pairs:
    for mine, lin in ((ours.feed_forward.w_1, theirs.linear1), (ours.feed_forward.w_2, theirs.linear2)):
        yield mine.weight, lin.weight
        yield from _opt(mine.bias, lin.bias)


def _layer_pairs(ours: EncoderLayer | DecoderLayer, theirs: nn.Module) -> Pairs:
    yield from _mha_pairs(ours.self_attn, theirs.self_attn)
    if isinstance(ours, DecoderLayer):
        yield from _mha_pairs(ours.cross_attn, theirs.multihead_attn)
        yield from _norm_pairs(ours.norm3, theirs.norm3)
    yield from _ff_pairs(ours, theirs)
    yield from _norm_pairs(ours.norm1, theirs.norm1)
    yield from _norm_pairs(ours.norm2, theirs.norm2)


def _stack_pairs(ours: Encoder | Decoder, theirs: nn.Module) -> Pairs:
    for mine, layer in zip(ours.layers, theirs.layers):
        yield from _layer_pairs(mine, layer)
    if ours.norm is not None:
        yield from _norm_pairs(ours.norm, theirs.norm)


def _pairs(ours: nn.Module, theirs: nn.Module) -> Pairs:
    if isinstance(ours, MultiHeadAttention):
        return _mha_pairs(ours, theirs)
    if isinstance(ours, (EncoderLayer, DecoderLayer)):
        return _layer_pairs(ours, theirs)
    if isinstance(ours, (Encoder, Decoder)):
        return _stack_pairs(ours, theirs)
    return iter([*_stack_pairs(ours.encoder, theirs.encoder), *_stack_pairs(ours.decoder, theirs.decoder)])


@torch.no_grad()
def _copy(pairs: Pairs, into_ours: bool) -> None:
    for mine, theirs in pairs:
        if mine.shape != theirs.shape:
            raise ValueError(f"shape mismatch while copying weights: {tuple(mine.shape)} vs {tuple(theirs.shape)}")
        (mine if into_ours else theirs).copy_(theirs if into_ours else mine)


# reading a torch module's settings --------------------------------------------------------------------------------
def _activation(layer: nn.Module) -> str:
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or isinstance(act, nn.GELU):
        return "gelu"
    raise ValueError(f"unsupported activation {act!r}: tfm_lesson supports relu and gelu")


def _check_torch_mha(m: nn.MultiheadAttention) -> None:
    if not m._qkv_same_embed_dim:
        raise ValueError("nn.MultiheadAttention with kdim/vdim != embed_dim is not supported")
    if m.bias_k is not None or m.add_zero_attn:
        raise ValueError("nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")


def _layer_settings(layer: nn.Module) -> dict:
    _check_torch_mha(layer.self_attn)
    return dict(d_model=layer.self_attn.embed_dim, heads=layer.self_attn.num_heads, d_ff=layer.linear1.out_features,
                dropout=layer.dropout.p, norm_first=layer.norm_first, activation=_activation(layer),
                eps=layer.norm1.eps, bias=layer.linear1.bias is not None)


def _build_ours(module: nn.Module) -> nn.Module:
    if isinstance(module, nn.MultiheadAttention):
        _check_torch_mha(module)
        return MultiHeadAttention(module.embed_dim, module.num_heads, module.dropout, module.in_proj_bias is not None)
    if isinstance(module, nn.TransformerEncoderLayer):
        return EncoderLayer(**_layer_settings(module))
    if isinstance(module, nn.TransformerDecoderLayer):
        return DecoderLayer(**_layer_settings(module))
    if isinstance(module, (nn.TransformerEncoder, nn.TransformerDecoder)):
        cls = Encoder if isinstance(module, nn.TransformerEncoder) else Decoder
        return cls(num_layers=len(module.layers), final_norm=module.norm is not None,
                   **_layer_settings(module.layers[0]))
    if isinstance(module, nn.Transformer):
        return EncoderDecoder(_build_ours(module.encoder), _build_ours(module.decoder))
    raise TypeError(f"from_torch: cannot convert {type(module).__name__}; expected nn.MultiheadAttention, "
                    "nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder, "
                    "nn.TransformerDecoder or nn.Transformer")


def from_torch(module: nn.Module) -> nn.Module:
    """The tfm_lesson module matching a ``torch.nn`` one, configured like it and loaded with its weights."""
    ours = _build_ours(module)
    ref = next(module.parameters())
    ours.to(device=ref.device, dtype=ref.dtype)
    _copy(_pairs(ours, module), into_ours=True)
    return ours.train(module.training)


def _layer_kwargs(layer: EncoderLayer | DecoderLayer) -> dict:
    attn = layer.self_attn
    return dict(d_model=attn.d_model, nhead=attn.heads, dim_feedforward=layer.feed_forward.d_ff,
                dropout=attn.dropout, activation=layer.feed_forward.activation, layer_norm_eps=layer.norm1.eps,
                batch_first=True, norm_first=layer.norm_first, bias=attn.w_q.bias is not None)


def _final_norm(stack: Encoder | Decoder) -> nn.LayerNorm | None:
    if stack.norm is None:
        return None
    return nn.LayerNorm(stack.norm.d_model, eps=stack.norm.eps, bias=stack.norm.bias is not None)


def _build_torch(ours: nn.Module) -> nn.Module:
    if isinstance(ours, MultiHeadAttention):
        return nn.MultiheadAttention(ours.d_model, ours.heads, dropout=ours.dropout, bias=ours.w_q.bias is not None,
                                     batch_first=True)
    if isinstance(ours, EncoderLayer):
        return nn.TransformerEncoderLayer(**_layer_kwargs(ours))
    if isinstance(ours, DecoderLayer):
        return nn.TransformerDecoderLayer(**_layer_kwargs(ours))
    if isinstance(ours, Encoder):
        return nn.TransformerEncoder(_build_torch(ours.layers[0]), len(ours.layers), norm=_final_norm(ours),
                                     enable_nested_tensor=False)
    if isinstance(ours, Decoder):
        return nn.TransformerDecoder(_build_torch(ours.layers[0]), len(ours.layers), norm=_final_norm(ours))
    if isinstance(ours, (EncoderDecoder, Transformer)):
        encoder, decoder = _build_torch(ours.encoder), _build_torch(ours.decoder)
        return nn.Transformer(custom_encoder=encoder, custom_decoder=decoder, batch_first=True,
                              **{k: v for k, v in _layer_kwargs(ours.encoder.layers[0]).items()
                                 if k not in ("batch_first", "activation", "layer_norm_eps", "norm_first", "bias")})
    raise TypeError(f"to_torch: cannot convert {type(ours).__name__}")


def to_torch(module: nn.Module) -> nn.Module:
    """The ``torch.nn`` module matching a tfm_lesson one (batch-first), loaded with its weights.

    A :class:`~tfm_lesson.Transformer` gives an ``nn.Transformer`` of its two stacks (no embeddings)."""
    theirs = _build_torch(module)
    ref = next(module.parameters())
    theirs.to(device=ref.device, dtype=ref.dtype)
    _copy(_pairs(module, theirs), into_ours=False)
    return theirs.train(module.training)
