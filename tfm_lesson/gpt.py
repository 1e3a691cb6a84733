"""A decoder-only language model (GPT) built from the course's own parts.

A GPT block is the paper's decoder layer with the cross-attention taken out: there is no encoder, so
there is no memory to look at. What is left: causal self-attention and the feed-forward network, each
with its residual, dropout and layer norm. Stack ``num_layers`` blocks on token + position embeddings,
add a final layer norm (pre-norm) and a linear layer to vocabulary logits (tied to the embedding):

    logits = GPT(config)(idx)                             # idx (batch, len) -> (batch, len, vocab)
    out = model.generate(idx, max_new_tokens=50, temperature=0.8, top_k=40)

Defaults follow GPT-2's layout: pre-norm, final norm, learned positions, GELU, biases, tied embeddings,
and no ``sqrt(d_model)`` scaling of the embeddings (the 2017 paper scales them, GPT-2 does not).
The sub-modules are built by the small factories ``_make_norm``, ``_make_attention``,
``_make_feed_forward`` and ``_make_positional``; a value the config accepts but no factory implements
yet raises a clear ``ValueError``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
from torch import Tensor, nn

from ._validate import check_positive_int, check_probability, check_tokens, renamed_keywords
from .attention import MultiHeadAttention
from .cache import KVCache, causal_mask_with_offset
from .decoding import FastDecoder
from .device import follows_thread_rule
from .feedforward import PositionwiseFeedForward
from .modern import GroupedQueryAttention, RMSNorm, RotaryEmbedding, SwiGLU
from .norm import LayerNorm
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from .sampling import NAN_LOGITS, check_sampling, draw_next, sample_next

__all__ = ["GPTConfig", "GPTBlock", "GPT", "causal_mask_with_offset"]

POSITIONAL_KINDS = ("learned", "sinusoidal", "rope")
ACTIVATION_KINDS = ("gelu", "gelu_tanh", "relu", "swiglu")
NORM_KINDS = ("layer", "rms")
_BOOL_FIELDS = ("norm_first", "final_norm", "bias", "tie_embeddings")


@renamed_keywords(context="max_len")
@dataclass
class GPTConfig:
    """Every setting of :class:`GPT`. ``max_len``: the most positions the model sees (prompt + generated), its
    context.

    ``final_norm`` adds a layer norm after the last block; it only applies with pre-norm (``norm_first``),
    since a post-norm block already ends with a norm. ``kv_heads``: heads for keys and values (``None``:
    as many as ``heads``). ``dropout`` applies to the embeddings, to each sub-layer's output and to the
    feed-forward's hidden units; ``attention_dropout`` to the attention weights (``None``: ``dropout``; Llama has
    only this one).
    """

    vocab_size: int
    max_len: int
    d_model: int
    heads: int
    d_ff: int
    num_layers: int
    dropout: float = 0.0
    norm_first: bool = True
    final_norm: bool = True
    positional: str = "learned"  # "learned" | "sinusoidal" | "rope"
    activation: str = "gelu"  # "gelu" | "gelu_tanh" (GPT-2) | "relu" | "swiglu"
    norm: str = "layer"  # "layer" | "rms"
    kv_heads: int | None = None
    rope_theta: float = 10000.0
    bias: bool = True
    tie_embeddings: bool = True
    eps: float = 1e-5
    attention_dropout: float | None = None  # dropout on the attention weights; None: the same as ``dropout``

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_len", "d_model", "heads", "d_ff", "num_layers"):
            check_positive_int(getattr(self, name), name)
        check_probability(self.dropout, "dropout")
        if self.attention_dropout is not None:
            check_probability(self.attention_dropout, "attention_dropout")
        for name in _BOOL_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
        for name, allowed in (("positional", POSITIONAL_KINDS), ("activation", ACTIVATION_KINDS), ("norm", NORM_KINDS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by heads={self.heads} (d_k = d_model / heads)")
        if self.kv_heads is not None:
            check_positive_int(self.kv_heads, "kv_heads")
            if self.heads % self.kv_heads:
                raise ValueError(f"heads={self.heads} must be divisible by kv_heads={self.kv_heads} "
                                 "(each key/value head serves heads / kv_heads query heads)")
        if isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float)) or not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be a positive number, got {self.rope_theta!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"eps must be a positive number, got {self.eps!r}")

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def attention_p(self) -> float:
        """The dropout probability on the attention weights."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def num_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    def to_dict(self) -> dict:
        return asdict(self)


# factories: one place per option, so a new option is a small edit here ------------------------------------
def _make_norm(config: GPTConfig) -> nn.Module:
    if config.norm == "layer":
        return LayerNorm(config.d_model, config.eps, config.bias)
    if config.norm == "rms":  # chapter 16: no mean, no shift
        return RMSNorm(config.d_model, config.eps)
    raise ValueError(f"norm={config.norm!r} is not implemented in tfm_lesson.gpt (available: {NORM_KINDS})")


def _make_attention(config: GPTConfig) -> nn.Module:
    """Self-attention called as ``attn(x, x, x, mask, cache=cache) -> (output, weights)``."""
    if config.num_kv_heads != config.heads or config.positional == "rope":  # chapter 16: GQA and/or RoPE
        rotary = RotaryEmbedding(config.d_k, config.rope_theta) if config.positional == "rope" else None
        return GroupedQueryAttention(config.d_model, config.heads, config.num_kv_heads, config.attention_p,
                                     config.bias, rotary)
    return MultiHeadAttention(config.d_model, config.heads, config.attention_p, config.bias)


def _make_feed_forward(config: GPTConfig) -> nn.Module:
    if config.activation in ("gelu", "gelu_tanh", "relu"):
        return PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation, config.bias)
    if config.activation == "swiglu":  # chapter 16: d_ff is the gate's size (Llama's intermediate_size)
        return SwiGLU(config.d_model, config.d_ff, config.dropout, config.bias)
    raise ValueError(f"activation={config.activation!r} is not implemented in tfm_lesson.gpt "
                     f"(available: {ACTIVATION_KINDS})")


def _make_positional(config: GPTConfig) -> nn.Module | None:
    """The positional encoding added to the embeddings, or ``None`` when positions enter elsewhere."""
    if config.positional == "learned":
        return LearnedPositionalEncoding(config.d_model, config.max_len)
    if config.positional == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model, config.max_len)
    if config.positional == "rope":  # chapter 16: positions rotate queries and keys inside attention
        return None
    raise ValueError(f"positional={config.positional!r} is not implemented in tfm_lesson.gpt "
                     f"(available: {POSITIONAL_KINDS})")


class GPTBlock(nn.Module):
    """The decoder layer without cross-attention: causal self-attention and feed-forward, each with
    dropout, residual and norm. ``norm_first=True`` (GPT-2): ``x + sublayer(norm(x))``; False (the paper):
    ``norm(x + sublayer(x))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.d_model, self.norm_first = config.d_model, config.norm_first
        self.self_attn = _make_attention(config)
        self.feed_forward = _make_feed_forward(config)
        self.norm1 = _make_norm(config)
        self.norm2 = _make_norm(config)
        self.dropout1 = nn.Dropout(config.dropout)
        self.dropout2 = nn.Dropout(config.dropout)

    def _self_attend(self, x: Tensor, mask: Tensor | None, cache: KVCache | None) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, mask, cache=cache)[0])

    def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None) -> Tensor:
        """x ``(batch, len, d_model)``; mask broadcastable to ``(batch, heads, len, cached + len)``."""
        if self.norm_first:
            x = x + self._self_attend(self.norm1(x), mask, cache)
            return x + self.dropout2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self._self_attend(x, mask, cache))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class GPT(nn.Module):
    """Decoder-only Transformer: ``forward(idx)`` -> next-token logits ``(batch, len, vocab_size)``."""

    def __init__(self, config: GPTConfig | None = None, **overrides) -> None:
        super().__init__()
        if config is None and not overrides:
            raise TypeError("GPT needs a GPTConfig (or its fields as keyword arguments)")
        config = GPTConfig(**{**(asdict(config) if config else {}), **overrides})
        self.config = c = config
        self.tok_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.positional = _make_positional(c)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(GPTBlock(c) for _ in range(c.num_layers))
        self.norm = _make_norm(c) if (c.norm_first and c.final_norm) else None
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.reset_parameters()
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_embed.weight  # one matrix: embedding and output projection

    def reset_parameters(self) -> None:
        """GPT-2's initialisation: N(0, 0.02) for weights and embeddings, zero biases, and the projections
        that write into the residual stream (attention output, second feed-forward layer) scaled by
        ``1 / sqrt(2 num_layers)`` so the residual sum does not grow with depth."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith(("self_attn.w_o.weight", "feed_forward.w_2.weight", "feed_forward.w_down.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * self.config.num_layers))

    def new_cache(self, max_len: int | None = None) -> list[KVCache]:
        """One empty :class:`KVCache` per block; ``max_len`` positions reserved up front (optional)."""
        return [KVCache(max_len) for _ in self.blocks]

    def _check_cache(self, cache: object) -> int:
        if not isinstance(cache, (list, tuple)) or len(cache) != len(self.blocks) or \
                not all(isinstance(c, KVCache) for c in cache):
            got = f"{type(cache).__name__} of {len(cache)}" if isinstance(cache, (list, tuple)) else type(cache).__name__
            raise TypeError(f"cache must be a list of {len(self.blocks)} KVCache (one per block, "
                            f"model.new_cache()), got {got}")
        offset = len(cache[0])
        if any(len(c) != offset for c in cache):
            raise ValueError(f"the caches of the blocks hold different lengths {[len(c) for c in cache]}; "
                             "use the list from model.new_cache() for one sequence")
        return offset

    def forward(self, idx: Tensor, cache: list[KVCache] | None = None) -> Tensor:
        """idx ``(batch, len)`` token ids -> logits ``(batch, len, vocab_size)``.

        With ``cache`` (from :meth:`new_cache`), ``idx`` holds only the new tokens: their positions start at
        ``len(cache[0])``, they attend to the cached positions too, and their keys and values are appended.
        """
        check_tokens(idx, "idx", self.config.vocab_size)
        offset = 0 if cache is None else self._check_cache(cache)
        if idx.size(1) == 0:
            raise ValueError("idx must hold at least one token per row, got shape "
                             f"{tuple(idx.shape)}")
        if offset + idx.size(1) > self.config.max_len:
            raise ValueError(f"idx has {idx.size(1)} tokens" + (f" after {offset} cached" if offset else "") +
                             f", more than the context of max_len={self.config.max_len} positions")
        return self._logits(idx, cache, offset)

    def _logits(self, idx: Tensor, cache: list[KVCache] | None, offset: int) -> Tensor:
        """The forward pass without argument checks (``generate`` checks once, not at every step)."""
        new_len = idx.size(1)
        x = self.tok_embed(idx)  # (batch, len, d_model)
        if self.positional is not None:
            x = self.positional(x, offset)
        x = self.dropout(x)
        # one new token may see every cached position: no mask needed; otherwise causal, shifted by the offset
        mask = None if new_len == 1 else causal_mask_with_offset(new_len, offset, idx.device)  # (len, offset + len)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache[i])
        if self.norm is not None:
            x = self.norm(x)
        return self.lm_head(x)  # (batch, len, vocab_size)

    @follows_thread_rule
    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, use_cache: bool = True,
                 generator: torch.Generator | None = None) -> Tensor:
        """Continue each row of ``idx`` ``(batch, len)`` by ``max_new_tokens`` tokens -> ``(batch, len +
        max_new_tokens)``.

        Runs in eval mode under ``torch.inference_mode`` (the training flag is restored after), with the package's
        thread rule (``threads="auto"``: one thread for a small model on the CPU; see :func:`tfm_lesson.device.threads_for`). ``temperature=0`` is
        greedy; see :func:`tfm_lesson.sampling.sample_next`. ``use_cache=True`` feeds each new token alone
        and reuses the keys and values of the earlier ones; ``False`` recomputes the whole sequence at
        every step. Both give the same tokens. The prompt plus the new tokens must fit in the context: a
        longer request is an error (never silently cropped), with or without the cache.
        """
        check_tokens(idx, "idx", self.config.vocab_size)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        check_sampling(temperature, top_k, top_p)
        batch, length = idx.shape
        if length == 0:
            raise ValueError("idx must hold a prompt of at least one token per row, got shape (batch, 0)")
        total = length + max_new_tokens
        if total > self.config.max_len:
            raise ValueError(f"the prompt ({length} tokens) plus max_new_tokens={max_new_tokens} is {total} positions, "
                             f"more than the context of max_len={self.config.max_len}; shorten the prompt or ask for "
                             "fewer tokens")
        out = idx.new_empty(batch, total)  # (batch, len + max_new_tokens), filled as we go
        out[:, :length] = idx
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():  # no autograd bookkeeping at all (stronger than no_grad)
                self._generate(out, length, temperature, top_k, top_p, use_cache, generator)
        finally:
            self.train(was_training)
        return out

    def _generate(self, out: Tensor, length: int, temperature: float, top_k: int | None, top_p: float | None,
                  use_cache: bool, generator: torch.Generator | None) -> None:
        """Fill ``out[:, length:]`` (arguments checked by :meth:`generate`). With the cache: a
        :class:`~tfm_lesson.decoding.FastDecoder` (checks and fused weights once, a static cache, one token per
        step); without it: the whole sequence at every step."""
        batch, total = out.shape
        decoder = FastDecoder(self, batch, total) if use_cache else None
        logits = decoder.prefill(out[:, :length]) if use_cache else self._logits(out[:, :length], None, 0)[:, -1]
        nan_seen = torch.zeros((), dtype=torch.bool, device=out.device)  # greedy: checked once, at the end
        for t in range(length, total):
            if temperature == 0:
                nan_seen |= logits.isnan().any()
                out[:, t] = draw_next(logits, 0.0)  # the argmax; no read back to the host per step
            else:  # sampling reads the logits back anyway (next_token_probs): the checked path
                out[:, t] = sample_next(logits, temperature, top_k, top_p, generator)
            if t + 1 == total:
                break
            if use_cache:  # only the new token; its position is t
                logits = decoder.step(out[:, t: t + 1])
            else:  # the whole sequence again
                logits = self._logits(out[:, : t + 1], None, 0)[:, -1]
        if bool(nan_seen):
            raise ValueError(NAN_LOGITS)

    def extra_repr(self) -> str:
        return ", ".join(f"{f.name}={getattr(self.config, f.name)!r}" for f in fields(self.config)
                         if f.name in ("vocab_size", "max_len", "d_model", "heads", "num_layers"))
