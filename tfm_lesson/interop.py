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

:func:`from_hf` does the same for Hugging Face ``transformers``: a GPT-2 or Llama model becomes the course's
:class:`~tfm_lesson.gpt.GPT` with the matching options (chapter 16).
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

__all__ = ["from_torch", "to_torch", "torch_mask", "from_hf", "hf_config"]

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
    rates = {"dropout": layer.dropout1.p, "attention_dropout": attn.dropout,
             "activation_dropout": layer.feed_forward.dropout.p}
    if len(set(rates.values())) > 1:
        raise ValueError(f"to_torch: torch's layers take one dropout for every site, got {rates}; give the three "
                         "sites the same rate to convert")
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


# from Hugging Face transformers (chapter 16) -----------------------------------------------------------------------
_HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _hf_gpt2_config(c) -> dict:
    """GPT-2: pre-norm LayerNorm, learned positions, GELU (tanh approximation), biases, tied embeddings."""
    if c.activation_function not in _HF_ACTIVATIONS:
        raise ValueError(f"GPT-2 activation_function={c.activation_function!r} is not supported "
                         f"(supported: {sorted(_HF_ACTIVATIONS)})")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if getattr(c, flag, False):
            raise ValueError(f"GPT-2 with {flag}=True is not supported by from_hf")
    if not getattr(c, "scale_attn_weights", True):
        raise ValueError("GPT-2 with scale_attn_weights=False (no 1/sqrt(d_k)) is not supported by from_hf")
    if float(c.embd_pdrop) != float(c.resid_pdrop):
        raise ValueError(f"GPT-2 with embd_pdrop={c.embd_pdrop} != resid_pdrop={c.resid_pdrop} is not supported: the "
                         "course's GPT has one dropout for the embeddings and the sub-layers")
    return dict(vocab_size=c.vocab_size, max_len=c.n_positions, d_model=c.n_embd, heads=c.n_head,
                d_ff=c.n_inner or 4 * c.n_embd, num_layers=c.n_layer, dropout=float(c.resid_pdrop),
                attention_dropout=float(c.attn_pdrop),
                norm_first=True, final_norm=True, positional="learned",
                activation=_HF_ACTIVATIONS[c.activation_function], norm="layer", bias=True,
                tie_embeddings=bool(c.tie_word_embeddings), eps=float(c.layer_norm_epsilon))


def _hf_rope_theta(c) -> float:
    params = getattr(c, "rope_parameters", None) or {}  # transformers >= 5
    scaling = getattr(c, "rope_scaling", None) or {}  # transformers 4
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise ValueError(f"Llama with rope_type={kind!r} (scaled rotary positions) is not supported by from_hf; "
                         "only the default RoPE is")
    return float(params.get("rope_theta", getattr(c, "rope_theta", 10000.0)))


def _hf_llama_config(c) -> dict:
    """Llama: pre-norm RMSNorm, RoPE with ``rope_theta``, SwiGLU, grouped-query attention, no biases; its only
    dropout, ``attention_dropout``, is on the attention weights (none on the embeddings or residuals)."""
    if c.hidden_act != "silu":
        raise ValueError(f"Llama with hidden_act={c.hidden_act!r} is not supported (SwiGLU uses silu)")
    d_k = c.hidden_size // c.num_attention_heads
    if (getattr(c, "head_dim", None) or d_k) != d_k:
        raise ValueError(f"Llama with head_dim={c.head_dim} != hidden_size / num_attention_heads = {d_k} "
                         "is not supported by from_hf")
    bias = bool(getattr(c, "attention_bias", False))
    if bool(getattr(c, "mlp_bias", False)) != bias:
        raise ValueError("Llama with attention_bias != mlp_bias is not supported: tfm_lesson has one `bias` flag")
    return dict(vocab_size=c.vocab_size, max_len=c.max_position_embeddings, d_model=c.hidden_size,
                heads=c.num_attention_heads, d_ff=c.intermediate_size, num_layers=c.num_hidden_layers,
                dropout=0.0, attention_dropout=float(c.attention_dropout), norm_first=True, final_norm=True,
                positional="rope",
                activation="swiglu", norm="rms", kv_heads=c.num_key_value_heads or c.num_attention_heads,
                rope_theta=_hf_rope_theta(c), bias=bias, tie_embeddings=bool(c.tie_word_embeddings),
                eps=float(c.rms_norm_eps))


def _linear_pairs(mine: nn.Linear, weight: Tensor, bias: Tensor | None) -> Pairs:
    yield mine.weight, weight
    yield from _opt(mine.bias, bias)


def _gpt2_pairs(ours: nn.Module, theirs: nn.Module) -> Pairs:
    """GPT-2's ``Conv1D`` stores ``(in, out)`` weights (``x @ W + b``): transposed into ``nn.Linear``'s ``(out, in)``;
    its fused ``c_attn`` holds W^Q, W^K, W^V side by side."""
    t, d = theirs.transformer, ours.config.d_model
    yield ours.tok_embed.weight, t.wte.weight
    yield ours.positional.embedding.weight, t.wpe.weight
    for mine, block in zip(ours.blocks, t.h):
        attn, mlp = block.attn, block.mlp
        for i, lin in enumerate((mine.self_attn.w_q, mine.self_attn.w_k, mine.self_attn.w_v)):
            yield from _linear_pairs(lin, attn.c_attn.weight[:, i * d:(i + 1) * d].T, attn.c_attn.bias[i * d:(i + 1) * d])
        yield from _linear_pairs(mine.self_attn.w_o, attn.c_proj.weight.T, attn.c_proj.bias)
        yield from _linear_pairs(mine.feed_forward.w_1, mlp.c_fc.weight.T, mlp.c_fc.bias)
        yield from _linear_pairs(mine.feed_forward.w_2, mlp.c_proj.weight.T, mlp.c_proj.bias)
        yield from _norm_pairs(mine.norm1, block.ln_1)
        yield from _norm_pairs(mine.norm2, block.ln_2)
    yield from _norm_pairs(ours.norm, t.ln_f)
    if not ours.config.tie_embeddings:
        yield ours.lm_head.weight, theirs.lm_head.weight


def _llama_pairs(ours: nn.Module, theirs: nn.Module) -> Pairs:
    m = theirs.model
    yield ours.tok_embed.weight, m.embed_tokens.weight
    for mine, layer in zip(ours.blocks, m.layers):
        a, mlp = layer.self_attn, layer.mlp
        for lin, hf in ((mine.self_attn.w_q, a.q_proj), (mine.self_attn.w_k, a.k_proj), (mine.self_attn.w_v, a.v_proj),
                        (mine.self_attn.w_o, a.o_proj), (mine.feed_forward.w_gate, mlp.gate_proj),
                        (mine.feed_forward.w_up, mlp.up_proj), (mine.feed_forward.w_down, mlp.down_proj)):
            yield from _linear_pairs(lin, hf.weight, hf.bias)
        yield mine.norm1.weight, layer.input_layernorm.weight
        yield mine.norm2.weight, layer.post_attention_layernorm.weight
    yield ours.norm.weight, m.norm.weight
    if not ours.config.tie_embeddings:
        yield ours.lm_head.weight, theirs.lm_head.weight


def hf_config(model_or_config) -> "GPTConfig":  # noqa: F821 (tfm_lesson.gpt is imported lazily)
    """The :class:`~tfm_lesson.gpt.GPTConfig` that reads a ``transformers`` GPT-2 or Llama config (or model) as the
    course's options. Raises ``ValueError`` for a setting the course's GPT does not have."""
    from .gpt import GPTConfig

    c = getattr(model_or_config, "config", model_or_config)
    kind = getattr(c, "model_type", None)
    if kind == "gpt2":
        return GPTConfig(**_hf_gpt2_config(c))
    if kind == "llama":
        return GPTConfig(**_hf_llama_config(c))
    raise TypeError(f"from_hf: cannot read a {type(model_or_config).__name__} (model_type={kind!r}); "
                    "expected a transformers GPT-2 (GPT2LMHeadModel) or Llama (LlamaForCausalLM) model or config")


def from_hf(model: nn.Module) -> nn.Module:
    """The course's :class:`~tfm_lesson.gpt.GPT` equal to a ``transformers`` ``GPT2LMHeadModel`` or ``LlamaForCausalLM``.

    Reads the Hugging Face config as :class:`~tfm_lesson.gpt.GPTConfig` options (:func:`hf_config`), builds the
    course's model and copies every weight (same device and dtype; same training/eval mode). Both libraries then
    compute the same logits (to 1e-4 in float32; ``tests/test_from_hf.py``). ``transformers`` is only needed
    to make ``model``: this function imports nothing from it.

    - GPT-2: ``wte``/``wpe`` -> ``tok_embed``/``positional``; ``ln_1``, ``ln_2``, ``ln_f`` -> ``norm1``, ``norm2``,
      ``norm``; ``c_attn`` (W^Q, W^K, W^V fused, ``Conv1D`` so transposed) -> ``w_q``, ``w_k``, ``w_v``;
      ``c_proj`` -> ``w_o``; ``mlp.c_fc``/``mlp.c_proj`` -> ``w_1``/``w_2``.
    - Llama: ``q/k/v/o_proj`` -> ``w_q/w_k/w_v/w_o``; ``gate/up/down_proj`` -> ``w_gate/w_up/w_down``;
      ``input_layernorm``/``post_attention_layernorm``/``norm`` -> ``norm1``/``norm2``/``norm``.

    ``lm_head`` is tied to the embedding when it is the same tensor in ``model``, whatever the config says;
    otherwise its own weights are copied.
    """
    from .gpt import GPT

    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"from_hf expects a transformers model (GPT2LMHeadModel or LlamaForCausalLM), "
                        f"got {type(model).__name__}")
    kind = getattr(model.config, "model_type", None)
    if kind in ("gpt2", "llama") and not hasattr(model, "lm_head"):
        raise TypeError(f"from_hf needs the model with its language-model head ({'GPT2LMHeadModel' if kind == 'gpt2' else 'LlamaForCausalLM'}), "
                        f"got {type(model).__name__}")
    config = hf_config(model)
    embedding = model.transformer.wte if kind == "gpt2" else model.model.embed_tokens
    # The config's tie_word_embeddings can disagree with the weights (a head untied after loading, say): what
    # counts is whether lm_head really is the embedding matrix. If not, its own numbers are copied.
    shared = model.lm_head.weight is embedding.weight
    if config.tie_embeddings != shared:
        config = type(config)(**{**config.to_dict(), "tie_embeddings": shared})
    ours = GPT(config)
    ref = next(model.parameters())
    ours.to(device=ref.device, dtype=ref.dtype)
    _copy(_gpt2_pairs(ours, model) if kind == "gpt2" else _llama_pairs(ours, model), into_ours=True)
    return ours.train(model.training)
