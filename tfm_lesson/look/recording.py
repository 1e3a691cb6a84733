"""Record every attention map of a forward pass, without changing its outputs.

    with record_attention(model) as rec:
        model(src, tgt)
    rec.maps["encoder.layers.0.self_attn"]      # (batch, heads, q_len, k_len)
    rec.get(kind="cross", layer=1)              # same, found by kind and layer

Works with any module that contains ``tfm_lesson.MultiHeadAttention``s. While recording, each attention
module still computes its output exactly as it would otherwise (fast path included); it additionally
computes the softmax weights, detached, for the record. A module called several times in the block (step-by-step
decoding) keeps the map of its last call.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from torch import Tensor, nn

__all__ = ["AttentionRecord", "record_attention", "attention_kind"]


def attention_kind(name: str) -> str:
    """Classify an attention module by its qualified name: ``encoder``, ``decoder`` or ``cross``."""
    if "cross_attn" in name:
        return "cross"
    if "decoder" in name:
        return "decoder"
    if "encoder" in name:
        return "encoder"
    return "self"


def _layer_index(name: str) -> int | None:
    found = re.findall(r"layers\.(\d+)\.", name)
    return int(found[-1]) if found else None


@dataclass
class AttentionRecord:
    """Attention weights by module name, in the order they were computed."""

    maps: dict[str, Tensor] = field(default_factory=dict)

    def add(self, name: str, weights: Tensor) -> None:
        self.maps[name] = weights.detach()

    def get(self, kind: str | None = None, layer: int | None = None) -> Tensor:
        """The one map of ``kind`` (``encoder``/``decoder``/``cross``/``self``) at ``layer``."""
        found = self.select(kind, layer)
        if len(found) != 1:
            raise KeyError(f"expected one attention map for kind={kind!r}, layer={layer!r}; found {list(found)}"
                           f" among {list(self.maps)}")
        return next(iter(found.values()))

    def select(self, kind: str | None = None, layer: int | None = None) -> dict[str, Tensor]:
        return {n: w for n, w in self.maps.items()
                if (kind is None or attention_kind(n) == kind) and (layer is None or _layer_index(n) == layer)}

    def kinds(self) -> list[str]:
        return sorted({attention_kind(n) for n in self.maps})

    def layers(self, kind: str) -> list[int]:
        return sorted({i for n in self.maps if attention_kind(n) == kind and (i := _layer_index(n)) is not None})


@contextmanager
def record_attention(model: nn.Module) -> Iterator[AttentionRecord]:
    """Context manager: record the attention weights of every ``MultiHeadAttention`` inside ``model``."""
    from ..attention import MultiHeadAttention

    record = AttentionRecord()
    modules = [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    if not modules:
        raise ValueError(f"record_attention: {type(model).__name__} contains no tfm_lesson MultiHeadAttention")
    for name, module in modules:
        module._recorder = (record, name or "attention")
    try:
        yield record
    finally:
        for _, module in modules:
            module._recorder = None
