"""What a model costs (chapter 19): parameters, FLOPs per token and training memory, by formula; MFU against a peak.

    parameter_count(GPTConfig(...))                       # == sum(p.numel() for p in GPT(config).parameters())
    flops_per_token(config, seq_len=64, training=True)    # 3 x (2 N_matmul + 4 num_layers seq_len d_model)
    training_memory(config, batch=16, seq_len=64)         # bytes: weights, gradients, Adam's moments, activations
    mfu(flops_per_step, seconds_per_step, matmul_peak(device))

**Parameters.** Each ``nn.Linear(a, b)`` holds ``a b`` weights and ``b`` biases; each layer norm a gain and a
shift of ``d_model`` each (RMSNorm: a gain only); an embedding ``vocab d_model``. A tied generator *is* the
embedding matrix and adds nothing.

**FLOPs.** A matrix product ``(m, k) @ (k, n)`` costs ``m k n`` multiply-adds, ``2 m k n`` FLOPs. Per token, every
weight of a linear layer is used in one multiply-add: ``2 N_matmul`` FLOPs, where ``N_matmul`` counts the weight
matrices of the blocks and the generator (tied or not, the generator's product is computed; the embedding look-up
is not a product). Attention adds, per layer and token, ``Q K^T`` (``seq_len d_model`` multiply-adds, against
every key of the window) and the weighted sum of the values (as many): ``4 seq_len d_model`` FLOPs, the whole
square, masked half included, as the math attention and an explicit mask compute it (a causal flash kernel skips
most masked tiles). For training that is ``12 num_layers seq_len d_model``, PaLM's attention term (Chowdhery et
al., 2022, appendix B). The backward pass costs twice the forward (a gradient
for the input and one for the weight, each a product as large): a training step is ``3 x`` the forward, the
"6N" rule. Norms, softmax, biases, activations and the optimiser are not products and are left out.

**MFU** (model FLOPs utilisation, Chowdhery et al., 2022, appendix B): the FLOPs the formula says a step needs,
over the step's time, over a peak FLOP rate. PaLM's peak is the hardware's theoretical (datasheet) one. Chapter 19
passes :func:`matmul_peak` instead, the best rate of a large matrix product measured on the same device: that is
**MFU against the measured matmul peak**, which reads higher than a datasheet MFU and is not comparable with
published ones. :func:`mfu` divides by whichever peak it is given.
"""
from __future__ import annotations

import math
import time

import torch

from ..gpt import GPTConfig
from ..model import TransformerConfig

__all__ = ["parameter_breakdown", "parameter_count", "non_embedding_parameters", "matmul_parameters",
           "flops_per_token", "transformer_flops", "activation_bytes", "training_memory", "matmul_peak", "mfu",
           "ADAM_STATES"]

ADAM_STATES = 2  # Adam and AdamW keep two numbers per parameter: the moving averages of g and of g^2


def _config(config_or_model) -> GPTConfig | TransformerConfig:
    config = getattr(config_or_model, "config", config_or_model)
    if not isinstance(config, (GPTConfig, TransformerConfig)):
        raise TypeError(f"expected a GPTConfig, TransformerConfig or a model holding one, got "
                        f"{type(config_or_model).__name__}")
    return config


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def _gpt_block(c: GPTConfig) -> dict[str, int]:
    kv = c.num_kv_heads * c.d_k  # width of the keys and of the values
    attention = 2 * _linear(c.d_model, c.d_model, c.bias) + 2 * _linear(c.d_model, kv, c.bias)  # Q, O; K, V
    if c.activation == "swiglu":
        ffn = 2 * _linear(c.d_model, c.d_ff, c.bias) + _linear(c.d_ff, c.d_model, c.bias)  # gate, up; down
    else:
        ffn = _linear(c.d_model, c.d_ff, c.bias) + _linear(c.d_ff, c.d_model, c.bias)
    return {"attention": attention, "feed_forward": ffn, "norms": 2 * _norm(c.d_model, c.norm, c.bias)}


def _norm(d_model: int, kind: str = "layer", bias: bool = True) -> int:
    return d_model * (2 if kind == "layer" and bias else 1)  # gain (+ shift)


def _gpt_breakdown(c: GPTConfig) -> dict[str, int]:
    block = _gpt_block(c)
    return {
        "embedding": c.vocab_size * c.d_model,
        "positional": c.max_len * c.d_model if c.positional == "learned" else 0,  # sinusoidal, rope: no parameter
        "attention": c.num_layers * block["attention"],
        "feed_forward": c.num_layers * block["feed_forward"],
        "norms": c.num_layers * block["norms"] + (_norm(c.d_model, c.norm, c.bias) if c.norm_first and c.final_norm
                                                  else 0),
        "generator": 0 if c.tie_embeddings else c.vocab_size * c.d_model,
    }


def _transformer_breakdown(c: TransformerConfig) -> dict[str, int]:
    d, f, b = c.d_model, c.d_ff, c.bias
    attention = 4 * _linear(d, d, b)
    ffn = _linear(d, f, b) + _linear(f, d, b)
    final = (c.norm_first if c.final_norm is None else c.final_norm)  # one LayerNorm after each stack
    return {
        "embedding": c.src_vocab_size * d + (0 if c.share_embeddings else c.tgt_vocab_size * d),
        "positional": c.max_len * d if c.positional == "learned" else 0,
        "attention": (c.num_encoder_layers + 2 * c.num_decoder_layers) * attention,  # decoder: self and cross
        "feed_forward": (c.num_encoder_layers + c.num_decoder_layers) * ffn,
        "norms": _norm(d, "layer", b) * (2 * c.num_encoder_layers + 3 * c.num_decoder_layers + (2 if final else 0)),
        "generator": 0 if c.tie_embeddings else c.tgt_vocab_size * d,
    }


def parameter_breakdown(config_or_model) -> dict[str, int]:
    """Parameters by part (embedding, positional, attention, feed_forward, norms, generator) and ``total``,
    from the config alone, for a :class:`~tfm_lesson.GPT` or a 2017 :class:`~tfm_lesson.Transformer`."""
    c = _config(config_or_model)
    parts = _gpt_breakdown(c) if isinstance(c, GPTConfig) else _transformer_breakdown(c)
    return {**parts, "total": sum(parts.values())}


def parameter_count(config_or_model) -> int:
    """``sum(p.numel() for p in model.parameters())`` of the model the config builds, by formula."""
    return parameter_breakdown(config_or_model)["total"]


def non_embedding_parameters(config_or_model) -> int:
    """Parameters without the embedding, positional and (untied) generator matrices: Kaplan et al.'s ``N``."""
    parts = parameter_breakdown(config_or_model)
    return parts["total"] - parts["embedding"] - parts["positional"] - parts["generator"]


def matmul_parameters(config: GPTConfig) -> int:
    """The weights that take part in a matrix product for each token: the blocks' weight matrices and the
    generator (``vocab d_model``, tied or not). Biases, norms and the embedding look-up are left out."""
    c = _config(config)
    if not isinstance(c, GPTConfig):
        raise TypeError("matmul_parameters takes a GPTConfig (for the Transformer see transformer_flops)")
    kv = c.num_kv_heads * c.d_k
    attention = 2 * c.d_model * c.d_model + 2 * c.d_model * kv
    ffn = (3 if c.activation == "swiglu" else 2) * c.d_model * c.d_ff
    return c.num_layers * (attention + ffn) + c.vocab_size * c.d_model


def _check_length(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int (tokens), got {value!r}")


def flops_per_token(config_or_model, seq_len: int, training: bool = True) -> int:
    """FLOPs per token of a GPT on windows of ``seq_len`` tokens: the forward is ``2 N_matmul`` (every weight
    once, multiply and add) ``+ 4 num_layers seq_len d_model`` (scores and weighted values over the whole
    ``seq_len x seq_len`` square); a training step (forward + backward) is 3 times the forward."""
    c = _config(config_or_model)
    if not isinstance(c, GPTConfig):
        raise TypeError("flops_per_token takes a GPTConfig (for the 2017 Transformer see transformer_flops)")
    _check_length(seq_len, "seq_len")
    forward = 2 * matmul_parameters(c) + 4 * c.num_layers * seq_len * c.heads * c.d_k
    return 3 * forward if training else forward


def transformer_flops(config_or_model, src_len: int, tgt_len: int, training: bool = True) -> int:
    """Matrix-product FLOPs of the 2017 Transformer for one (source, target) pair of lengths ``src_len``,
    ``tgt_len``: encoder layers ``S (4 d^2 + 2 d f) + 2 S^2 d`` multiply-adds, decoder layers ``T (6 d^2 + 2 d f)
    + 2 S d^2 + 2 T^2 d + 2 T S d`` (cross-attention's keys and values come from the memory), the generator
    ``T d V``; times 2 (FLOPs per multiply-add), times 3 for a training step."""
    c = _config(config_or_model)
    if not isinstance(c, TransformerConfig):
        raise TypeError("transformer_flops takes a TransformerConfig")
    _check_length(src_len, "src_len")
    _check_length(tgt_len, "tgt_len")
    d, f, S, T = c.d_model, c.d_ff, src_len, tgt_len
    enc = c.num_encoder_layers * (S * (4 * d * d + 2 * d * f) + 2 * S * S * d)
    dec = c.num_decoder_layers * (T * (6 * d * d + 2 * d * f) + 2 * S * d * d + 2 * T * T * d + 2 * T * S * d)
    forward = 2 * (enc + dec + T * d * c.tgt_vocab_size)
    return 3 * forward if training else forward


def activation_bytes(config_or_model, batch: int, seq_len: int, bytes_per_value: int = 4) -> int:
    """Bytes that a GPT's training forward keeps for its backward pass, ``batch x seq_len`` tokens (pre-norm,
    GELU or ReLU, layer norms, the fused attention kernel of :class:`~tfm_lesson.attention.MultiHeadAttention`).

    Per token and layer, in numbers of ``bytes_per_value``: each norm's input and output and its two statistics
    (``4 d + 4``); the packed queries, keys and values, a contiguous copy of the queries, the attention output and
    its heads merged (``6 d``); the kernel's log-sum-exp (one per head); the feed-forward's hidden layer before and
    after the activation (``2 d_ff``). Per layer, whatever the batch: the causal mask as a float
    ``seq_len x seq_len`` matrix (and two boolean columns of it), and the ``(3 d, d)`` matrix of the query, key
    and value weights joined for one product. Then the final norm (``2 d + 2``) and the log-probabilities
    (``vocab``) per token, the token ids and targets (int64, 16 bytes a token), and the loss."""
    c = _config(config_or_model)
    if not isinstance(c, GPTConfig):
        raise TypeError("activation_bytes takes a GPTConfig")
    _check_length(batch, "batch")
    _check_length(seq_len, "seq_len")
    tokens = batch * seq_len
    per_layer = tokens * (10 * c.d_model + 4 + c.heads + 2 * c.d_ff) + seq_len * seq_len + 3 * c.d_model ** 2
    head = tokens * (2 * c.d_model + 2 + c.vocab_size) + 1  # + the loss itself
    return (c.num_layers * per_layer + head) * bytes_per_value + c.num_layers * 2 * seq_len + 16 * tokens


def training_memory(config_or_model, batch: int, seq_len: int, bytes_per_value: int = 4) -> dict[str, int]:
    """Bytes of a training step with Adam(W) in one precision: ``parameters``, ``gradients`` (as many),
    ``adam`` (two moments per parameter), ``activations`` (:func:`activation_bytes`) and their ``total``."""
    p = parameter_count(config_or_model) * bytes_per_value
    parts = {"parameters": p, "gradients": p, "adam": ADAM_STATES * p,
             "activations": activation_bytes(config_or_model, batch, seq_len, bytes_per_value)}
    return {**parts, "total": sum(parts.values())}


# ------------------------------------------------------------------------------------------------------- MFU
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device | str = "cpu", size: int = 2048, repeats: int = 5,
                dtype: torch.dtype = torch.float32) -> float:
    """Best FLOP/s of a ``size x size`` matrix product of ``dtype`` on ``device`` (``2 size^3`` FLOPs per product),
    after one untimed product: the machine's own measured matmul rate. Passed to :func:`mfu`, it gives the MFU
    against the measured matmul peak, not against the datasheet peak of PaLM's MFU (the measured rate is lower)."""
    device = torch.device(device)
    _check_length(size, "size")
    _check_length(repeats, "repeats")
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def mfu(flops_per_step: float, seconds_per_step: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: ``flops_per_step / seconds_per_step`` (achieved FLOP/s) over ``peak_flops``.

    With a datasheet peak this is PaLM's MFU; with :func:`matmul_peak` it is the MFU against the measured matmul
    peak, which reads higher. Say which when you report it."""
    for name, value in (("flops_per_step", flops_per_step), ("seconds_per_step", seconds_per_step),
                        ("peak_flops", peak_flops)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return flops_per_step / seconds_per_step / peak_flops

