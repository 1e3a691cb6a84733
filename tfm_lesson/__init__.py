"""tfm_lesson: the Transformer of "Attention Is All You Need", built step by step and proven equal to PyTorch."""
from . import _moved

_moved.install()  # old module paths (tfm_lesson.look.viz, tfm_lesson.train.loop, ...) keep importing

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
from .look.recording import AttentionRecord, record_attention
from .data.tokenizer import BPETokenizer

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
    """An old module path as an attribute (``tfm_lesson.course.quiz``, ``tfm_lesson.look.viz``): the module at its new path."""
    new = _moved.new_name(f"{__name__}.{name}")
    if new is None and name in ("checks", "course", "look", "train"):  # a folder, on first use: T.course.quiz.show
        new = f"{__name__}.{name}"
    if new is not None:
        import importlib

        return importlib.import_module(new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
