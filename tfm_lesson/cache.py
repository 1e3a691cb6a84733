"""The key-value cache: generate one token at a time without recomputing the prefix.

During generation the keys and values of every earlier position never change (a causal model's position
``t`` only looks at positions ``<= t``). So each attention layer keeps them and, at each step, computes
keys and values for the *new* positions only and appends them:

    cache = KVCache()
    k_all, v_all = cache.update(k_new, v_new)   # (batch, kv_heads, new_len, d_k) -> (batch, kv_heads, len(cache), d_k)

Cross-attention (the decoder looking at the encoder's memory) is simpler still: its keys and values
come from the memory, which does not change while decoding, so they are computed once
(:class:`CrossAttentionCache`).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["KVCache", "StaticKVCache", "CrossAttentionCache", "DecoderCache", "cache_nbytes",
           "causal_mask_with_offset", "check_attention_cache", "check_decoder_cache"]


def causal_mask_with_offset(new_len: int, offset: int, device: torch.device | str | None = None) -> Tensor:
    """``(new_len, offset + new_len)`` booleans: new query ``i`` (position ``offset + i``) may attend to keys
    ``0 .. offset + i``: every cached position and the new ones up to itself."""
    return torch.ones(new_len, offset + new_len, dtype=torch.bool, device=device).tril(diagonal=offset)


def _same_input(a: Tensor, b: Tensor) -> bool:
    """True when ``a`` and ``b`` hold the same numbers: one tensor, two views of the same memory (``x[:, t:t+1]``
    taken twice), or equal values (compared only when shapes agree and the cheap tests do not decide)."""
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.data_ptr() == b.data_ptr() and a.stride() == b.stride():
        return True
    return torch.equal(a, b)


def _check_kv(key: object, value: object) -> None:
    for name, t in (("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor shaped (batch, kv_heads, new_len, d_k), got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be shaped (batch, kv_heads, new_len, d_k), got shape {tuple(t.shape)}")
    if key.shape != value.shape:
        raise ValueError(f"key and value must have the same shape, got {tuple(key.shape)} and {tuple(value.shape)}")
    if key.dtype != value.dtype or key.device != value.device:
        raise ValueError(f"key and value must share dtype and device, got {key.dtype}/{key.device} and "
                         f"{value.dtype}/{value.device}")


class KVCache:
    """One self-attention layer's cache of keys and values, ``(batch, kv_heads, length, d_k)`` each.

    ``len(cache)`` is the number of positions stored, which is also the position of the next token (the
    offset that positional encodings need). ``max_len``: positions to reserve at the first update
    (e.g. the model's context); the buffer grows by doubling past it.

    Growth strategy: a buffer written in place. Appending with ``torch.cat`` would allocate a new tensor
    and copy the whole cache at every step (``length`` positions copied per token, ``length**2 / 2`` in
    total); writing the new positions into a reserved buffer copies only them, and doubling the buffer when
    it is full keeps the cost per token constant on average. ``update`` returns views of the filled part.
    """

    def __init__(self, max_len: int | None = None) -> None:
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1):
            raise ValueError(f"max_len must be a positive int or None, got {max_len!r}")
        self.max_len = max_len
        self._key: Tensor | None = None  # (batch, kv_heads, capacity, d_k)
        self._value: Tensor | None = None
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        if self._key is None:
            return "KVCache(empty)"
        batch, heads, capacity, d_k = self._key.shape
        return (f"KVCache(batch={batch}, kv_heads={heads}, length={self._length}, capacity={capacity}, d_k={d_k}, "
                f"dtype={self._key.dtype})")

    @property
    def key(self) -> Tensor | None:
        """The stored keys ``(batch, kv_heads, len(cache), d_k)`` (a view), or ``None`` when empty."""
        return None if self._key is None else self._key[:, :, : self._length]

    @property
    def value(self) -> Tensor | None:
        """The stored values ``(batch, kv_heads, len(cache), d_k)`` (a view), or ``None`` when empty."""
        return None if self._value is None else self._value[:, :, : self._length]

    @property
    def nbytes(self) -> int:
        """Bytes of the stored keys and values: ``2 x batch x kv_heads x len(cache) x d_k x bytes per number``."""
        if self._key is None:
            return 0
        return 2 * self.key.numel() * self._key.element_size()

    def _check_matches(self, key: Tensor) -> None:
        stored = self._key
        batch, heads, _, d_k = stored.shape
        new_batch, new_heads, _, new_d_k = key.shape
        if (new_batch, new_heads, new_d_k) != (batch, heads, d_k):
            raise ValueError(
                f"a cache from another batch: this cache holds (batch={batch}, kv_heads={heads}, d_k={d_k}) "
                f"but the new keys are (batch={new_batch}, kv_heads={new_heads}, d_k={new_d_k}); "
                "make a new cache for each batch (or call cache.reset())")
        if key.dtype != stored.dtype or key.device != stored.device:
            raise ValueError(f"a cache from another batch: this cache holds {stored.dtype} on {stored.device}, "
                             f"the new keys are {key.dtype} on {key.device}; make a new cache")

    def check_use(self, query: Tensor, key: Tensor) -> None:
        """Raise a message naming the mistake when this cache does not suit an attention call.

        A ``KVCache`` belongs to self-attention, where query, key and value are one tensor; given to
        cross-attention it would append the encoder's memory again at every step."""
        if not _same_input(query, key):
            raise TypeError("a KVCache belongs to self-attention (query, key and value the same tensor); this call "
                            "attends to another tensor (cross-attention?), where the KVCache would append the memory "
                            "again at every step: give cross-attention a CrossAttentionCache")

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``key``, ``value`` ``(batch, kv_heads, new_len, d_k)``; return all keys and values so far,
        ``(batch, kv_heads, len(cache), d_k)`` each."""
        _check_kv(key, value)
        new_len = key.size(2)
        total = self._length + new_len
        if self._key is None:
            capacity = max(total, self.max_len or 0)
            batch, heads, _, d_k = key.shape
            self._key = key.new_empty(batch, heads, capacity, d_k)
            self._value = value.new_empty(batch, heads, capacity, d_k)
        else:
            self._check_matches(key)
            if total > self._key.size(2):  # full: double the buffer (amortised O(1) per position)
                capacity = max(total, 2 * self._key.size(2))
                self._key = self._grow(self._key, capacity)
                self._value = self._grow(self._value, capacity)
        self._key[:, :, self._length: total] = key  # write the new positions in place
        self._value[:, :, self._length: total] = value
        self._length = total
        return self.key, self.value

    def _grow(self, buffer: Tensor, capacity: int) -> Tensor:
        batch, heads, _, d_k = buffer.shape
        bigger = buffer.new_empty(batch, heads, capacity, d_k)
        bigger[:, :, : self._length] = buffer[:, :, : self._length]
        return bigger

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` of the batch, in that order (beam search: each beam takes its parent's cache)."""
        if self._key is not None:
            for name in ("_key", "_value"):
                buffer = getattr(self, name)
                moved = buffer.new_empty(len(index), *buffer.shape[1:])
                moved[:, :, : self._length] = buffer[index, :, : self._length]  # copy only the filled positions
                setattr(self, name, moved)

    def reset(self) -> None:
        """Forget everything: the next update starts a new sequence (any batch size)."""
        self._key = self._value = None
        self._length = 0


class StaticKVCache(KVCache):
    """A :class:`KVCache` whose buffers hold ``max_len`` positions from the start, written in place.

    ``update`` (used by the model's forward, e.g. for the prompt) keeps every check of :class:`KVCache`;
    ``append`` is the unchecked hot path of :meth:`tfm_lesson.decoding.FastDecoder.step`. Neither ever reallocates: a sequence
    longer than ``max_len`` is an error, not a copy.
    """

    def __init__(self, batch: int, kv_heads: int, max_len: int, d_k: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        super().__init__(max_len)
        for name, value in (("batch", batch), ("kv_heads", kv_heads), ("d_k", d_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self._key = torch.empty(batch, kv_heads, max_len, d_k, dtype=dtype, device=device)
        self._value = torch.empty(batch, kv_heads, max_len, d_k, dtype=dtype, device=device)

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        if self._length + key.size(2) > self._key.size(2):
            raise ValueError(f"a StaticKVCache of max_len={self._key.size(2)} cannot take {key.size(2)} more "
                             f"positions after {self._length}")
        return super().update(key, value)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``key``, ``value`` ``(batch, kv_heads, new_len, d_k)`` after the stored positions, unchecked;
        return every key and value so far (views of the buffers)."""
        start = self._length
        end = self._length = start + key.size(2)
        self._key.narrow(2, start, end - start).copy_(key)
        self._value.narrow(2, start, end - start).copy_(value)
        return self._key.narrow(2, 0, end), self._value.narrow(2, 0, end)  # (batch, kv_heads, end, d_k) each

    def reset(self) -> None:
        """Forget the stored positions; the buffers stay (the next sequence must fit them)."""
        self._length = 0


class CrossAttentionCache:
    """Cross-attention's keys and values, computed once from the encoder's memory and reused at every step.

    ``update(key, value)`` stores them on the first call and ignores later arguments (pass ``None``): the
    memory does not change while decoding, so neither do its keys and values.
    """

    def __init__(self) -> None:
        self.key: Tensor | None = None  # (batch, heads, src_len, d_k)
        self.value: Tensor | None = None
        self._memory: Tensor | None = None  # the memory the keys and values came from (see check_use)

    def __len__(self) -> int:
        return 0 if self.key is None else self.key.size(2)

    def __repr__(self) -> str:
        if self.key is None:
            return "CrossAttentionCache(empty)"
        return f"CrossAttentionCache(shape={tuple(self.key.shape)}, dtype={self.key.dtype})"

    @property
    def filled(self) -> bool:
        return self.key is not None

    @property
    def nbytes(self) -> int:
        return 0 if self.key is None else 2 * self.key.numel() * self.key.element_size()

    def check_use(self, query: Tensor, memory: Tensor) -> None:
        """Raise a message naming the mistake when this cache does not suit a cross-attention call.

        The cache belongs to cross-attention (``memory`` is not the query); once filled it serves only the
        memory it was filled from (the same tensor, or one equal to it) and that memory's batch size."""
        if _same_input(query, memory):
            raise TypeError("a CrossAttentionCache belongs to cross-attention (keys and values from the encoder's "
                            "memory); this call is self-attention (query is key), which needs a KVCache")
        if self.key is None:
            self._memory = memory  # remembered, so that a later call with another input is caught
            return
        if memory.size(0) != self.key.size(0):
            raise ValueError(f"a cache from another batch: this CrossAttentionCache holds the memory of "
                             f"{self.key.size(0)} sequence(s), the call has {memory.size(0)}; make a new cache "
                             "(model.new_cache()) for each input")
        if self._memory is not None and memory is not self._memory:
            if not _same_input(memory, self._memory):
                raise ValueError("this CrossAttentionCache was filled from another memory (another input): its keys "
                                 "and values would be the old sentence's; make a new cache (model.new_cache()) for "
                                 "each input, or reset every layer's caches")
            self._memory = memory

    def update(self, key: Tensor | None, value: Tensor | None) -> tuple[Tensor, Tensor]:
        if self.key is None:
            _check_kv(key, value)
            self.key, self.value = key, value
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)
            if self._memory is not None:
                self._memory = self._memory.index_select(0, index)

    def reset(self) -> None:
        self.key = self.value = self._memory = None


class DecoderCache(NamedTuple):
    """The two caches of one decoder layer: its self-attention (grows) and its cross-attention (fixed)."""

    self_attn: KVCache
    cross_attn: CrossAttentionCache

    @property
    def nbytes(self) -> int:
        return self.self_attn.nbytes + self.cross_attn.nbytes


def check_attention_cache(cache: object, query: Tensor, key: Tensor) -> None:
    """Check the ``cache`` given to one attention call (``None`` passes): a :class:`KVCache` for
    self-attention, a :class:`CrossAttentionCache` for cross-attention, filled from this memory and batch."""
    if cache is None:
        return
    if not isinstance(cache, (KVCache, CrossAttentionCache)):
        raise TypeError(f"cache must be a KVCache (self-attention) or a CrossAttentionCache (cross-attention), got "
                        f"{type(cache).__name__}" + (" (pass one layer's cache, not the list from new_cache())"
                                                     if isinstance(cache, (list, tuple)) else ""))
    cache.check_use(query, key)


def check_decoder_cache(cache: object, num_layers: int) -> int:
    """Check a decoder's cache (``Transformer.new_cache()``) and return the number of cached positions.

    Raises a message naming the mistake: not a list of ``num_layers`` :class:`DecoderCache`, the two caches
    of a layer swapped, or layers that disagree (one layer's cache reset, or caches from another input)."""
    if not isinstance(cache, (list, tuple)) or len(cache) != num_layers:
        got = f"a {type(cache).__name__} of {len(cache)}" if isinstance(cache, (list, tuple)) else type(cache).__name__
        raise TypeError(f"cache must be a list of {num_layers} DecoderCache (one per decoder layer, "
                        f"model.new_cache()), got {got}")
    for i, layer in enumerate(cache):
        if not (isinstance(layer, tuple) and len(layer) == 2):
            raise TypeError(f"cache[{i}] must be a DecoderCache(self_attn=KVCache, cross_attn=CrossAttentionCache), "
                            f"got {type(layer).__name__}")
        if not isinstance(layer[0], KVCache) or not isinstance(layer[1], CrossAttentionCache):
            raise TypeError(f"cache[{i}] must hold (KVCache, CrossAttentionCache) in that order, got "
                            f"({type(layer[0]).__name__}, {type(layer[1]).__name__})")
    lengths = [len(layer[0]) for layer in cache]
    if len(set(lengths)) > 1:
        raise ValueError(f"the decoder layers' self-attention caches hold different lengths {lengths}: one layer's "
                         "cache was reset or comes from another input; use one model.new_cache() per input")
    filled = [layer[1].filled for layer in cache]
    if len(set(filled)) > 1 or (lengths[0] > 0 and not filled[0]):
        raise ValueError(f"the decoder layers' cross-attention caches disagree (filled: {filled}) with "
                         f"{lengths[0]} cached target positions: one layer's cache was reset; use one "
                         "model.new_cache() per input")
    return lengths[0]


def cache_nbytes(caches) -> int:
    """Total bytes held by a list of caches (or a list of per-layer tuples of caches)."""
    total = 0
    for c in caches:
        for one in (c if isinstance(c, (tuple, list)) else (c,)):
            total += one.nbytes
    return total
