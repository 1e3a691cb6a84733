"""The whole Transformer (paper, section 3): embeddings, positional encoding, encoder, decoder, generator."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from ._validate import check_positive_int, check_probability, check_tokens, renamed_keywords
from .cache import DecoderCache, causal_mask_with_offset, check_decoder_cache
from .decoder import Decoder
from .encoder import Encoder
from .feedforward import ACTIVATIONS
from .masks import causal_mask, combine_masks, padding_mask
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding

__all__ = ["TransformerConfig", "Transformer", "EncoderDecoder", "count_parameters", "parameter_table"]


@renamed_keywords(src_vocab="src_vocab_size", tgt_vocab="tgt_vocab_size")
@dataclass
class TransformerConfig:
    """Every setting of :class:`Transformer`. Defaults are the paper's base model (table 3) with a shared
    37,000-token vocabulary, shared source/target embeddings tied to the generator, post-norm.

    ``src_vocab_size``/``tgt_vocab_size`` are numbers of tokens (``src_vocab``/``tgt_vocab`` elsewhere in the
    package are the :class:`~tfm_lesson.data.Vocab` objects); ``max_len`` is the most positions the model sees.

    Dropout: the paper (section 5.4) drops out each sub-layer's output and the sums of embeddings and positions,
    both at ``dropout``. By default the attention weights and the feed-forward hidden units are dropped out at the
    same rate too, as ``nn.Transformer`` does; ``attention_dropout=0.0, activation_dropout=0.0`` is the paper's.
    """

    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    # Two stacks, two depths (nn.Transformer's names); elsewhere one depth number is ``num_layers``
    # (make_model, GPTConfig, the recipes), which make_model gives to both stacks.
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1  # P_drop (paper, section 5.4): each sub-layer's output, before the residual sum
    embedding_dropout: float | None = None  # on embeddings + positions (the paper's second site); None: dropout
    attention_dropout: float | None = None  # on the attention weights (not in the paper); None: dropout
    activation_dropout: float | None = None  # on the feed-forward hidden units (not in the paper); None: dropout
    max_len: int = 5000
    positional: str = "sinusoidal"  # or "learned"
    norm_first: bool = False  # False: post-norm (the paper); True: pre-norm
    final_norm: bool | None = None  # LayerNorm after each stack; None: only with pre-norm. nn.Transformer: True
    share_embeddings: bool = True  # one embedding matrix for source and target (needs src_vocab_size == tgt_vocab_size)
    tie_embeddings: bool = True  # generator weight = target embedding (the paper, section 3.4)
    activation: str = "relu"
    eps: float = 1e-5
    bias: bool = True
    src_pad_id: int = 0
    tgt_pad_id: int = 0

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "heads", "d_ff", "num_encoder_layers",
                     "num_decoder_layers", "max_len"):
            check_positive_int(getattr(self, name), name)
        check_probability(self.dropout, "dropout")
        for name in ("embedding_dropout", "attention_dropout", "activation_dropout"):
            if getattr(self, name) is not None:
                check_probability(getattr(self, name), name)
        for name in ("norm_first", "share_embeddings", "tie_embeddings", "bias", "final_norm"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "final_norm" and value is None):
                raise TypeError(f"{name} must be True or False{' (or None)' if name == 'final_norm' else ''}, "
                                f"got {value!r}" + (" (a string is not a boolean: 'False' would count as true)"
                                                    if isinstance(value, str) else ""))
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"eps must be a positive float, got {self.eps!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by heads={self.heads}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(f"share_embeddings=True needs src_vocab_size == tgt_vocab_size, got "
                             f"{self.src_vocab_size} and {self.tgt_vocab_size}; use one joint vocabulary or set "
                             "share_embeddings=False")
        for name, vocab in (("src_pad_id", self.src_vocab_size), ("tgt_pad_id", self.tgt_vocab_size)):
            pad = getattr(self, name)
            if not isinstance(pad, int) or not 0 <= pad < vocab:
                raise ValueError(f"{name} must be an id in [0, {vocab}), got {pad!r}")

    def to_dict(self) -> dict:
        return asdict(self)


class EncoderDecoder(nn.Module):
    """The two stacks without embeddings or generator: the counterpart of ``nn.Transformer``.

    Works on embeddings ``(batch, len, d_model)``; masks are tfm_lesson booleans (True = may attend).
    """

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        memory = self.encoder(src, src_mask)  # (batch, src_len, d_model)
        return self.decoder(tgt, memory, tgt_mask, memory_mask)  # (batch, tgt_len, d_model)


class Transformer(nn.Module):
    """Encoder-decoder Transformer: ``forward(src, tgt)`` -> logits ``(batch, tgt_len, tgt_vocab_size)``.

    ``encode`` and ``decode`` are exposed for decoding one token at a time; masks are built from the pad
    ids (and causal for the target) when not given.
    """

    def __init__(self, config: TransformerConfig | None = None, **overrides) -> None:
        super().__init__()
        config = TransformerConfig(**{**(asdict(config) if config else {}), **overrides})
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, c.d_model)
        positional = SinusoidalPositionalEncoding if c.positional == "sinusoidal" else LearnedPositionalEncoding
        self.positional = positional(c.d_model, c.max_len)
        self.dropout = nn.Dropout(c.dropout if c.embedding_dropout is None else c.embedding_dropout)
        stack = dict(d_model=c.d_model, heads=c.heads, d_ff=c.d_ff, dropout=c.dropout, norm_first=c.norm_first,
                     activation=c.activation, eps=c.eps, bias=c.bias, final_norm=c.final_norm,
                     attention_dropout=c.attention_dropout, activation_dropout=c.activation_dropout)
        self.encoder = Encoder(num_layers=c.num_encoder_layers, **stack)
        self.decoder = Decoder(num_layers=c.num_decoder_layers, **stack)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.reset_parameters()
        if c.tie_embeddings:
            self.generator.weight = self.tgt_embed.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform for every weight matrix of the stacks, zero biases, and N(0, 1/d_model) for the
        embeddings, so that ``embedding * sqrt(d_model)`` starts with unit variance."""
        for stack in (self.encoder, self.decoder):
            for p in stack.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
            for m in stack.modules():
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
        for emb in {id(e): e for e in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(emb.weight, std=self.config.d_model ** -0.5)
        if not self.config.tie_embeddings:
            nn.init.normal_(self.generator.weight, std=self.config.d_model ** -0.5)

    # masks -----------------------------------------------------------------------------------------------
    def make_src_mask(self, src: Tensor) -> Tensor:
        """``(batch, 1, 1, src_len)``: real source tokens are visible."""
        return padding_mask(src, self.config.src_pad_id)

    def make_tgt_mask(self, tgt: Tensor) -> Tensor:
        """``(batch, 1, tgt_len, tgt_len)``: real target tokens, and only earlier positions."""
        return combine_masks(padding_mask(tgt, self.config.tgt_pad_id), causal_mask(tgt.size(1), tgt.device))

    # the three steps -------------------------------------------------------------------------------------
    def _embed(self, tokens: Tensor, embedding: nn.Embedding, name: str, vocab: int, offset: int = 0,
               check_ids: bool = True) -> Tensor:
        if check_ids:
            check_tokens(tokens, name, vocab)
        if tokens.size(1) < 1:
            raise ValueError(f"{name} must hold at least one token per sequence, got shape {tuple(tokens.shape)}")
        if offset + tokens.size(1) > self.config.max_len:
            raise ValueError(f"{name} has length {tokens.size(1)}" + (f" after {offset} cached" if offset else "") +
                             f" but the positional table holds max_len={self.config.max_len} positions")
        x = embedding(tokens) * math.sqrt(self.config.d_model)  # (batch, len, d_model)
        return self.dropout(self.positional(x, offset))

    def encode(self, src: Tensor, src_mask: Tensor | None = None, *, check_ids: bool = True) -> Tensor:
        """src ``(batch, src_len)`` ids -> memory ``(batch, src_len, d_model)``."""
        x = self._embed(src, self.src_embed, "src", self.config.src_vocab_size, check_ids=check_ids)
        return self.encoder(x, self.make_src_mask(src) if src_mask is None else src_mask)

    def new_cache(self, max_len: int | None = None) -> list[DecoderCache]:
        """Empty caches for :meth:`decode`, one :class:`~tfm_lesson.cache.DecoderCache` per decoder layer."""
        return self.decoder.new_cache(max_len)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               tgt_mask: Tensor | None = None, cache: list[DecoderCache] | None = None, *,
               check_ids: bool = True) -> Tensor:
        """tgt ``(batch, tgt_len)`` ids and memory -> decoder states ``(batch, tgt_len, d_model)``.

        ``src_mask`` hides padded memory positions from cross-attention (pass the one used to encode);
        ``tgt_mask`` defaults to causal and target padding.

        With ``cache`` (from :meth:`new_cache`), ``tgt`` holds only the new tokens; their positions start
        at the number of cached ones and the default ``tgt_mask`` is causal over cached and new positions
        (padding is not known for cached positions: pass ``tgt_mask`` ``(batch, 1, tgt_len, cached + tgt_len)``
        when the target holds padding). ``check_ids=False`` skips the id check (one host sync) for ids that
        the model itself produced.
        """
        offset = 0 if cache is None else check_decoder_cache(cache, len(self.decoder.layers))
        x = self._embed(tgt, self.tgt_embed, "tgt", self.config.tgt_vocab_size, offset, check_ids)
        if tgt_mask is None:
            if cache is None:
                tgt_mask = self.make_tgt_mask(tgt)
            elif tgt.size(1) > 1:  # one new token may see every cached position: no mask needed
                tgt_mask = causal_mask_with_offset(tgt.size(1), offset, tgt.device)
        return self.decoder(x, memory, tgt_mask, src_mask, cache)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None) -> Tensor:
        """src ``(batch, src_len)``, tgt ``(batch, tgt_len)`` ids -> logits ``(batch, tgt_len, tgt_vocab_size)``."""
        check_tokens(src, "src", self.config.src_vocab_size)  # before the masks are built from them
        check_tokens(tgt, "tgt", self.config.tgt_vocab_size)
        if src.size(0) != tgt.size(0):
            raise ValueError(f"src and tgt must have the same batch size, got {src.size(0)} and {tgt.size(0)}")
        src_mask = self.make_src_mask(src) if src_mask is None else src_mask
        memory = self.encode(src, src_mask, check_ids=False)  # checked above: once per batch
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask, check_ids=False))


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_table(model: nn.Module) -> dict[str, int]:
    """Parameters per top-level child, each shared tensor counted at its first owner; plus ``"total"``."""
    seen: set[int] = set()
    table: dict[str, int] = {}
    for name, child in model.named_children():
        n = 0
        for p in child.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        table[name] = n
    table["total"] = sum(table.values())
    return table
