"""Turning a trained model into translations: greedy decoding and beam search, both batched; and
:class:`FastDecoder`, cached decoding of a GPT with the per-token overhead cut (chapter 15's last section).

Both run the encoder once (``model.encode``) and then add one token per step, reading the generator's
prediction for the last position. With ``use_cache=True`` (the default, chapter 15) each step feeds only
the newest token and the decoder's layers keep the keys and values of the earlier ones; with
``use_cache=False`` each step runs ``model.decode`` on the whole prefix again. Both give the same tokens.
Every decoder here also takes ``threads`` (default ``"auto"``, the thread rule of
:func:`tfm_lesson.device.auto_threads`: one thread for a small model on the CPU), so that what it decodes does not
depend on the machine's thread count.

    tokens = greedy_decode(model, src, max_len=20, bos_id=1, eos_id=2)      # (batch, <= 21)
    tokens = beam_search(model, src, beam_size=4, max_len=20, bos_id=1, eos_id=2)
    translate(model, ["three cats"], src_vocab, tgt_vocab, beam_size=4)     # ["trois chats"]

Returned token tensors start with ``bos_id``; after a sequence's ``eos_id`` comes padding
(``model.config.tgt_pad_id``).

The loops keep their work on the model's device: tokens are written into a tensor made up front, and
whether every row has ended is read back to the host only every ``SYNC_EVERY`` steps (a read-back waits
for the GPU to finish; a few extra steps after the last row ended cost less, and are cut off at the end).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validate import check_positive_int, check_tokens
from .attention import MultiHeadAttention
from .cache import StaticKVCache, causal_mask_with_offset
from .device import follows_thread_rule
from .feedforward import ACTIVATIONS, PositionwiseFeedForward
from .masks import padding_mask
from .norm import LayerNorm

SYNC_EVERY = 8  # steps between checks of "has every row ended?" (each check copies one bool to the host)

__all__ = ["greedy_decode", "beam_search", "sequence_log_prob", "translate", "encode_texts", "length_penalty",
           "FastDecoder"]


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _check_src(src: object) -> Tensor:
    if not isinstance(src, Tensor) or src.dim() != 2 or src.is_floating_point():
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be a (batch, src_len) tensor of token ids, got {shape}")
    return src


def _check_bos(model: nn.Module, bos_id: object, eos_id: object) -> None:
    vocab = model.config.tgt_vocab_size
    if isinstance(bos_id, bool) or not isinstance(bos_id, int) or not 0 <= bos_id < vocab:
        raise ValueError(f"bos_id must be an id in [0, {vocab}), got {bos_id!r}")
    if isinstance(eos_id, bool) or not isinstance(eos_id, int):
        raise ValueError(f"eos_id must be an int, got {eos_id!r}")


def _next_log_probs(model: nn.Module, ys: Tensor, memory: Tensor, src_mask: Tensor, cache: list | None = None) -> Tensor:
    """log p(next token | prefix ys, source): ``(batch, tgt_vocab_size)``.

    Without a cache the whole prefix ``ys`` is decoded again. With one, only the tokens not cached yet
    (the last one, after the first step) are fed; the mask hides padded prefix positions exactly as the
    uncached mask does. The ids come from the model itself (or ``bos_id``, checked once), so they are not
    checked again at every step.
    """
    if cache is None:
        states = model.decode(ys, memory, src_mask, check_ids=False)  # (batch, t, d_model)
    else:
        new = ys[:, len(cache[0].self_attn):]  # (batch, new_len): the tokens the cache has not seen
        tgt_mask = padding_mask(ys, model.config.tgt_pad_id)  # (batch, 1, 1, t): padded keys hidden
        if new.size(1) > 1:
            tgt_mask = tgt_mask & causal_mask_with_offset(new.size(1), ys.size(1) - new.size(1), ys.device)
        states = model.decode(new, memory, src_mask, tgt_mask, cache=cache, check_ids=False)  # (batch, new_len, d_model)
    return model.generator(states[:, -1]).float().log_softmax(dim=-1)  # (batch, tgt_vocab_size)


@follows_thread_rule
def greedy_decode(model: nn.Module, src: Tensor, max_len: int, bos_id: int, eos_id: int,
                  src_mask: Tensor | None = None, use_cache: bool = True) -> Tensor:
    """Pick the most probable next token at every step, for a whole batch at once.

    src ``(batch, src_len)`` -> tokens ``(batch, 1 + n)`` with ``n <= max_len`` generated tokens, starting
    with ``bos_id``; a row stops at its ``eos_id`` and is padded afterwards. Stops early when every row ended
    (``n`` is the step at which the last row ended). ``use_cache``: see the module's docstring.
    """
    src = _check_src(src)
    check_positive_int(max_len, "max_len")
    _check_bos(model, bos_id, eos_id)
    pad_id = model.config.tgt_pad_id
    batch, device = src.size(0), src.device
    with _eval_mode(model):
        src_mask = model.make_src_mask(src) if src_mask is None else src_mask  # (batch, 1, 1, src_len)
        memory = model.encode(src, src_mask)  # (batch, src_len, d_model): computed once
        cache = model.new_cache(1 + max_len) if use_cache else None
        ys = torch.full((batch, 1 + max_len), pad_id, dtype=torch.long, device=device)  # filled column by column
        ys[:, 0] = bos_id
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        ended_at = torch.full((batch,), max_len, dtype=torch.long, device=device)  # step of each row's eos
        for step in range(1, max_len + 1):
            next_token = _next_log_probs(model, ys[:, :step], memory, src_mask, cache).argmax(dim=-1)  # (batch,)
            next_token = next_token.masked_fill(done, pad_id)
            ys[:, step] = next_token
            ended = ~done & (next_token == eos_id)
            ended_at = ended_at.masked_fill(ended, step)
            done |= ended
            if step % SYNC_EVERY == 0 and bool(done.all()):  # a host sync only every SYNC_EVERY steps
                break
        return ys[:, : 1 + int(ended_at.max())]  # one copy to the host at the end: drop the steps after the last eos


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT's length normalisation (Wu et al., 2016): ``((5 + length) / 6) ** alpha``; ``alpha=0`` is none."""
    return ((5 + length) / 6) ** alpha


@follows_thread_rule
def beam_search(model: nn.Module, src: Tensor, beam_size: int, max_len: int, bos_id: int, eos_id: int,
                length_penalty_alpha: float = 0.6, src_mask: Tensor | None = None,
                return_scores: bool = False, use_cache: bool = True) -> Tensor | tuple[Tensor, Tensor]:
    """Keep the ``beam_size`` most probable prefixes per sentence; the whole batch's beams run together.

    Each step scores every extension of every live prefix by its total log-probability, keeps the top
    ``beam_size`` per sentence, and lets finished prefixes (those that produced ``eos_id``) carry on unchanged
    with padding. At the end the winner of each sentence is the hypothesis with the highest
    ``log p / length_penalty(length, alpha)`` (``alpha = length_penalty_alpha``; 0 compares raw log-probs).

    src ``(batch, src_len)`` -> tokens ``(batch, 1 + n)`` (and, with ``return_scores``, the winners'
    total log-probabilities ``(batch,)``). ``beam_size=1`` is exactly :func:`greedy_decode`. With
    ``use_cache`` every beam's self-attention cache follows its parent at each step (``cache.reorder``); the
    cross-attention caches need no reordering, since a beam's parent is a beam of the same sentence.
    """
    src = _check_src(src)
    check_positive_int(beam_size, "beam_size")
    check_positive_int(max_len, "max_len")
    _check_bos(model, bos_id, eos_id)
    if length_penalty_alpha < 0:
        raise ValueError(f"length_penalty_alpha must be >= 0, got {length_penalty_alpha!r}")
    pad_id = model.config.tgt_pad_id
    batch, k, device = src.size(0), beam_size, src.device
    with _eval_mode(model):
        src_mask = model.make_src_mask(src) if src_mask is None else src_mask
        memory = model.encode(src, src_mask)  # (batch, src_len, d_model), once
        # every sentence gets k copies of its memory: row b * k + j is beam j of sentence b
        memory = memory.repeat_interleave(k, dim=0)  # (batch * k, src_len, d_model)
        src_mask = src_mask.expand(batch, *src_mask.shape[1:]).repeat_interleave(k, dim=0)
        ys = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)  # (batch * k, 1)
        scores = torch.zeros(batch, k, device=device)  # total log-prob of each beam
        scores[:, 1:] = float("-inf")  # at the start all beams are the same prefix: expand only the first
        done = torch.zeros(batch * k, dtype=torch.bool, device=device)
        lengths = torch.zeros(batch * k, device=device)  # generated tokens, eos included
        cache = model.new_cache(1 + max_len) if use_cache else None
        for step in range(1, max_len + 1):
            log_probs = _next_log_probs(model, ys, memory, src_mask, cache)  # (batch * k, vocab)
            vocab = log_probs.size(-1)
            # a finished beam may only be extended by padding, at no cost: its score stays as it was
            finished = torch.full_like(log_probs, float("-inf"))
            finished[:, pad_id] = 0.0
            log_probs = torch.where(done[:, None], finished, log_probs)
            candidates = (scores.view(batch * k, 1) + log_probs).view(batch, k * vocab)  # (batch, k * vocab)
            scores, flat = candidates.topk(k, dim=-1)  # (batch, k)
            parent = flat // vocab + torch.arange(batch, device=device)[:, None] * k  # row in (batch * k)
            token = (flat % vocab).view(-1)  # (batch * k,)
            parent = parent.view(-1)
            ys = torch.cat([ys[parent], token[:, None]], dim=1)  # (batch * k, t + 1)
            if cache is not None:
                for layer_cache in cache:
                    layer_cache.self_attn.reorder(parent)  # each beam continues its parent's prefix
            was_done = done[parent]
            lengths = lengths[parent] + (~was_done).float()
            done = was_done | (token == eos_id)
            if step % SYNC_EVERY == 0 and bool(done.all()):  # a host sync only every SYNC_EVERY steps
                break
        normalised = scores / length_penalty(lengths.view(batch, k), length_penalty_alpha)  # (batch, k)
        best = normalised.argmax(dim=-1) + torch.arange(batch, device=device) * k  # (batch,)
        out = ys[best]
        out = out[:, : max(1, int((out != pad_id).sum(dim=1).max()))]  # drop columns that are only padding
        if return_scores:
            return out, scores.view(-1)[best]
    return out


@follows_thread_rule
def sequence_log_prob(model: nn.Module, src: Tensor, tokens: Tensor, eos_id: int) -> Tensor:
    """Total log-probability the model gives each target sequence (teacher forcing), up to and including
    its first ``eos_id``. src ``(batch, src_len)``, tokens ``(batch, 1 + n)`` starting with bos -> ``(batch,)``."""
    src, tokens = _check_src(src), _check_src(tokens)
    with _eval_mode(model):
        log_probs = model(src, tokens[:, :-1]).float().log_softmax(dim=-1)  # (batch, n, vocab)
        target = tokens[:, 1:]  # (batch, n)
        picked = log_probs.gather(-1, target[..., None]).squeeze(-1)  # (batch, n)
        # count a token if no eos came before it
        before_eos = (target == eos_id).long().cumsum(dim=1) - (target == eos_id).long() == 0
        return (picked * before_eos).sum(dim=1)


def encode_texts(texts: Sequence[str], vocab, device: torch.device | str | None = None) -> Tensor:
    """Source sentences -> padded ids ``(batch, src_len)``, each ending with ``</s>`` as in training."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings; wrap a single sentence in a list")
    from .data import encode_batch

    return encode_batch(list(texts), vocab, device=device)


@follows_thread_rule
def translate(model: nn.Module, texts: Sequence[str], src_vocab, tgt_vocab, beam_size: int = 1,
              max_len: int | None = None, length_penalty_alpha: float = 0.6, batch_size: int = 128,
              use_cache: bool = True) -> list[str]:
    """Translate a list of sentences (greedy when ``beam_size == 1``), in batches of ``batch_size``.

    ``max_len`` (generated tokens) defaults to twice the longest source plus 10, within the model's
    positional table. The tokens of a batch are copied to the host once.
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings; wrap a single sentence in a list")
    check_positive_int(beam_size, "beam_size")
    device = next(model.parameters()).device
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        src = encode_texts(texts[start:start + batch_size], src_vocab, device)  # (batch, src_len)
        limit = max_len or min(2 * src.size(1) + 10, model.config.max_len - 1)
        if beam_size == 1:
            tokens = greedy_decode(model, src, limit, tgt_vocab.bos_id, tgt_vocab.eos_id, use_cache=use_cache)
        else:
            tokens = beam_search(model, src, beam_size, limit, tgt_vocab.bos_id, tgt_vocab.eos_id,
                                 length_penalty_alpha, use_cache=use_cache)
        out.extend(tgt_vocab.decode(row) for row in tokens.tolist())  # one copy to the host per batch
    return out


# --- fast cached decoding of a GPT (chapter 15, "Where the milliseconds went") ----------------------------------
# A cached step of a small GPT needs a few million multiply-adds, a fraction of a millisecond of a laptop's
# arithmetic. What ``model(token, cache)`` spends beyond that is paid again at every token: argument checks in every
# module, the Q, K and V weights concatenated anew in every layer for the fused projection, the cache checked at
# every append, autograd's bookkeeping, a few hundred small operator calls. FastDecoder pays each of those once,
# when it is built, and then runs the same arithmetic: each layer's W^Q, W^K, W^V concatenated once and every
# weight kept transposed for torch.addmm; a StaticKVCache (the whole context reserved, written in place); no mask
# for the single new query, which may see every cached key; no checks in ``step``. The prompt goes through the
# model's own forward, which fills the same caches. Blocks without a short path here (grouped-query or rotary
# attention, chapter 16) take the model's own step. tests/test_fast_decode.py proves the tokens equal to uncached
# decoding and the logits equal to 1e-5.


def _affine(linear: nn.Linear) -> Callable[[Tensor], Tensor]:
    """``linear`` as one ``addmm`` (or ``mm``) on 2-d input, with the weight transposed once."""
    weight_t, bias = linear.weight.t(), linear.bias
    if bias is None:
        return lambda x: x @ weight_t
    return lambda x: torch.addmm(bias, x, weight_t)


def _norm(norm: nn.Module) -> Callable[[Tensor], Tensor]:
    if isinstance(norm, LayerNorm) and not norm.explicit:  # the fused kernel, without the module's checks
        shape, weight, bias, eps = (norm.d_model,), norm.weight, norm.bias, norm.eps
        return lambda x: F.layer_norm(x, shape, weight, bias, eps)
    return norm  # any other norm (RMSNorm): the module itself


def _feed_forward(ff: nn.Module) -> Callable[[Tensor], Tensor]:
    if isinstance(ff, PositionwiseFeedForward):
        w_1, w_2, act = _affine(ff.w_1), _affine(ff.w_2), ACTIVATIONS[ff.activation]
        return lambda x: w_2(act(w_1(x)))  # (batch, d_model) -> (batch, d_ff) -> (batch, d_model)
    return lambda x: ff(x[:, None])[:, 0]  # any other network (SwiGLU): the module, on (batch, 1, d_model)


class _FastBlock:
    """One GPT block's step for a single new position, ``x (batch, d_model)``, with plain tensors."""

    def __init__(self, block: nn.Module, cache: StaticKVCache) -> None:
        attn: MultiHeadAttention = block.self_attn
        self.cache, self.norm_first = cache, block.norm_first
        self.heads, self.d_k = attn.heads, attn.d_k
        weight = torch.cat([attn.w_q.weight, attn.w_k.weight, attn.w_v.weight])  # (3 d_model, d_model), once
        bias = None if attn.w_q.bias is None else torch.cat([attn.w_q.bias, attn.w_k.bias, attn.w_v.bias])
        weight_t = weight.t()
        self.qkv = (lambda x: x @ weight_t) if bias is None else (lambda x: torch.addmm(bias, x, weight_t))
        self.out = _affine(attn.w_o)
        self.norm1, self.norm2 = _norm(block.norm1), _norm(block.norm2)
        self.feed_forward = _feed_forward(block.feed_forward)

    def _attend(self, h: Tensor) -> Tensor:
        batch = h.size(0)
        # (batch, 3 d_model) -> (batch, 3, heads, 1, d_k): q, k, v of the new position, heads split
        q, k, v = self.qkv(h).view(batch, 3, self.heads, 1, self.d_k).unbind(1)
        keys, values = self.cache.append(k, v)  # (batch, heads, cached + 1, d_k) each
        out = F.scaled_dot_product_attention(q, keys, values)  # (batch, heads, 1, d_k): no mask for one query
        return self.out(out.reshape(batch, self.heads * self.d_k))  # heads merged -> (batch, d_model)

    def __call__(self, x: Tensor) -> Tensor:
        if self.norm_first:
            x = x + self._attend(self.norm1(x))
            return x + self.feed_forward(self.norm2(x))
        x = self.norm1(x + self._attend(x))
        return self.norm2(x + self.feed_forward(x))


class FastDecoder:
    """Decode token by token from ``model`` (a :class:`tfm_lesson.GPT`), ``batch`` rows, up to ``max_len``
    positions (prompt + new tokens; default the model's context).

    Build it after the weights are final: it keeps the fused Q/K/V weights it makes at ``__init__``. The model
    is put in eval mode (dropout off); call ``prefill(prompt)`` once, then ``step(token)`` per new token,
    under ``torch.inference_mode()`` (``step`` does not enter it itself: that would cost at every token).
    """

    def __init__(self, model: nn.Module, batch: int, max_len: int | None = None) -> None:
        config = model.config
        max_len = config.max_len if max_len is None else max_len
        check_positive_int(batch, "batch")
        check_positive_int(max_len, "max_len")
        if max_len > config.max_len:
            raise ValueError(f"max_len={max_len} is more than the model's context of {config.max_len} positions")
        self.model, self.max_len = model.eval(), max_len
        weight = model.tok_embed.weight
        self.caches = [StaticKVCache(batch, config.num_kv_heads, max_len, config.d_k, weight.dtype, weight.device)
                       for _ in model.blocks]
        with torch.no_grad():  # plain tensors (not inference tensors): usable in and out of inference mode
            self._blocks = [_FastBlock(b, c) if type(b.self_attn) is MultiHeadAttention else _ModelBlock(b, c)
                            for b, c in zip(model.blocks, self.caches)]
        self._norm = None if model.norm is None else _norm(model.norm)
        self._head = _affine(model.lm_head)

    def __len__(self) -> int:
        """Positions decoded so far (the position of the next token)."""
        return len(self.caches[0])

    def prefill(self, idx: Tensor) -> Tensor:
        """Run the prompt ``idx (batch, len)`` through the model, filling the caches; the last position's logits
        ``(batch, vocab)``."""
        check_tokens(idx, "idx", self.model.config.vocab_size)
        batch = self.caches[0]._key.size(0)
        if idx.size(0) != batch or idx.size(1) == 0:
            raise ValueError(f"idx must be shaped (batch={batch}, len >= 1), got {tuple(idx.shape)}")
        if len(self) + idx.size(1) > self.max_len:
            raise ValueError(f"idx has {idx.size(1)} tokens after {len(self)}, more than max_len={self.max_len}")
        return self.model._logits(idx, self.caches, len(self))[:, -1]

    def step(self, token: Tensor) -> Tensor:
        """One new token per row, ``token (batch, 1)`` -> its logits ``(batch, vocab)``. Unchecked: the token
        ids must be the model's own (in the vocabulary) and ``len(self) < max_len``."""
        model, position = self.model, len(self)
        x = F.embedding(token[:, 0], model.tok_embed.weight)  # (batch, d_model)
        if model.positional is not None:
            x = x + model.positional.encoding(1, position)  # (batch, d_model) + (1, d_model)
        for block in self._blocks:
            x = block(x)
        if self._norm is not None:
            x = self._norm(x)
        return self._head(x)  # (batch, vocab)


class _ModelBlock:
    """A block without a short path here (grouped-query or rotary attention): the model's own step."""

    def __init__(self, block: nn.Module, cache: StaticKVCache) -> None:
        self.block, self.cache = block, cache

    def __call__(self, x: Tensor) -> Tensor:
        return self.block(x[:, None], None, self.cache)[:, 0]  # (batch, 1, d_model) through the block
