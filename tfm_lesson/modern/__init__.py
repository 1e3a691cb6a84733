"""Today's block: the changes between the 2017 Transformer layer and a Llama-style one (chapter 16).

One module per change, each a drop-in part for :class:`tfm_lesson.gpt.GPT` (``GPTConfig(norm="rms",
positional="rope", activation="swiglu", kv_heads=..., bias=False)``):

- :mod:`.rmsnorm`: ``RMSNorm``, layer norm without the mean;
- :mod:`.rotary`: ``RotaryEmbedding``, positions as rotations of queries and keys (RoPE);
- :mod:`.swiglu`: ``SwiGLU``, the gated feed-forward network;
- :mod:`.gqa`: ``GroupedQueryAttention``, fewer key/value heads, a smaller KV cache.

``python -m tfm_lesson.train.ablation`` (module :mod:`tfm_lesson.train.ablation`) reruns the ablation that chapter 16 shows.
"""
from .gqa import GroupedQueryAttention, kv_cache_nbytes, repeat_kv
from .rmsnorm import RMSNorm, rms_norm
from .rotary import (RotaryEmbedding, apply_rotary, interleaved_to_halves, rotary_cos_sin, rotary_frequencies,
                     rotate_half, rotate_pairs)
from .swiglu import SwiGLU, swiglu_hidden

__all__ = ["RMSNorm", "rms_norm", "RotaryEmbedding", "apply_rotary", "rotary_cos_sin", "rotary_frequencies",
           "rotate_half", "rotate_pairs", "interleaved_to_halves", "SwiGLU", "swiglu_hidden",
           "GroupedQueryAttention", "repeat_kv", "kv_cache_nbytes"]
