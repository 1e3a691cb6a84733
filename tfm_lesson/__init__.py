"""tfm_lesson: the Transformer of "Attention Is All You Need", built step by step and proven equal to PyTorch."""
from .attention import MultiHeadAttention, scaled_dot_product_attention
from .cache import CrossAttentionCache, KVCache
from .decoder import Decoder, DecoderLayer
from .device import default_device, seed_everything
from .encoder import Encoder, EncoderLayer
from .feedforward import PositionwiseFeedForward
from .gpt import GPT, GPTConfig
from .interop import from_hf, from_torch, to_torch, torch_mask
from .masks import causal_mask, check_mask, combine_masks, padding_mask
from .model import EncoderDecoder, Transformer, TransformerConfig, count_parameters, parameter_table
from .norm import LayerNorm, layer_norm
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding, sinusoidal_table
from .recording import AttentionRecord, record_attention
from .tokenizer import BPETokenizer

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention", "MultiHeadAttention",
    "padding_mask", "causal_mask", "combine_masks", "check_mask",
    "SinusoidalPositionalEncoding", "LearnedPositionalEncoding", "sinusoidal_table",
    "LayerNorm", "layer_norm", "PositionwiseFeedForward",
    "EncoderLayer", "Encoder", "DecoderLayer", "Decoder",
    "TransformerConfig", "Transformer", "EncoderDecoder", "count_parameters", "parameter_table",
    "from_torch", "to_torch", "torch_mask", "from_hf",
    "record_attention", "AttentionRecord",
    "default_device", "seed_everything",
    "GPTConfig", "GPT", "KVCache", "CrossAttentionCache",
    "BPETokenizer",
]


def __getattr__(name: str):
    """``tfm_lesson.quiz`` on first use (so ``python -m tfm_lesson.quiz`` runs it fresh)."""
    if name == "quiz":
        import importlib

        return importlib.import_module(f"{__name__}.quiz")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
