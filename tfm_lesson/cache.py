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

__all__ = ["KVCache", "CrossAttentionCache", "DecoderCache", "cache_nbytes", "causal_mask_with_offset"]


def causal_mask_with_offset(new_len: int, offset: int, device: torch.device | str | None = None) -> Tensor:
    """``(new_len, offset + new_len)`` booleans: new query ``i`` (position ``offset + i``) may attend to keys
    ``0 .. offset + i``: every cached position and the new ones up to itself."""
    return torch.ones(new_len, offset + new_len, dtype=torch.bool, device=device).tril(diagonal=offset)


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


class CrossAttentionCache:
    """Cross-attention's keys and values, computed once from the encoder's memory and reused at every step.

    ``update(key, value)`` stores them on the first call and ignores later arguments (pass ``None``): the
    memory does not change while decoding, so neither do its keys and values.
    """

    def __init__(self) -> None:
        self.key: Tensor | None = None  # (batch, heads, src_len, d_k)
        self.value: Tensor | None = None

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

    def update(self, key: Tensor | None, value: Tensor | None) -> tuple[Tensor, Tensor]:
        if self.key is None:
            _check_kv(key, value)
            self.key, self.value = key, value
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)

    def reset(self) -> None:
        self.key = self.value = None


class DecoderCache(NamedTuple):
    """The two caches of one decoder layer: its self-attention (grows) and its cross-attention (fixed)."""

    self_attn: KVCache
    cross_attn: CrossAttentionCache

    @property
    def nbytes(self) -> int:
        return self.self_attn.nbytes + self.cross_attn.nbytes


def cache_nbytes(caches) -> int:
    """Total bytes held by a list of caches (or a list of per-layer tuples of caches)."""
    total = 0
    for c in caches:
        for one in (c if isinstance(c, (tuple, list)) else (c,)):
            total += one.nbytes
    return total
