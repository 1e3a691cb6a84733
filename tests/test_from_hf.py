"""from_hf: GPT-2 and Llama from Hugging Face transformers, at random weights, become the course's GPT and
give the same logits (<= 1e-4 in float32) and the same greedy tokens. Nothing is downloaded: every model is
built from a config (HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach the hub

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")

from tfm_lesson.gpt import GPT  # noqa: E402
from tfm_lesson.interop import from_hf, hf_config  # noqa: E402
from tfm_lesson.modern import GroupedQueryAttention, RMSNorm, SwiGLU  # noqa: E402

ATOL = 1e-4
IDS = dict(bos_token_id=0, eos_token_id=None, pad_token_id=0)

GPT2_CONFIGS = {
    "gpt2-tied": dict(vocab_size=101, n_positions=48, n_embd=32, n_layer=2, n_head=4),
    "gpt2-untied-n_inner": dict(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=6, n_inner=80,
                                tie_word_embeddings=False),
    "gpt2-exact-gelu-eps": dict(vocab_size=64, n_positions=32, n_embd=24, n_layer=2, n_head=2,
                                activation_function="gelu", layer_norm_epsilon=1e-6),
}
LLAMA_CONFIGS = {
    "llama-tied-mha": dict(vocab_size=101, hidden_size=32, intermediate_size=86, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=48,
                           tie_word_embeddings=True),
    "llama-untied-gqa-theta5e5": dict(vocab_size=97, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                                      rope_theta=500000.0, tie_word_embeddings=False),
    "llama-mqa-theta1e6-bias": dict(vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                    num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=40,
                                    rope_theta=1e6, rms_norm_eps=1e-5, attention_bias=True, mlp_bias=True),
    "llama-gqa-theta500": dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=48,
                               rope_theta=500.0),
}


def _randomise(model: nn.Module, seed: int) -> nn.Module:
    """Weights far from the tiny default init (std 0.02), so that logits are O(1) and a wrong mapping shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            else:
                fan_in = p.shape[0] if "c_" in name else p.shape[-1]  # GPT-2's Conv1D stores (in, out)
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
    return model


def _gpt2(name: str, seed: int = 0) -> nn.Module:
    config = transformers.GPT2Config(**GPT2_CONFIGS[name], **IDS)
    torch.manual_seed(seed)
    return _randomise(transformers.GPT2LMHeadModel(config), seed).eval()


def _llama(name: str, seed: int = 0) -> nn.Module:
    config = transformers.LlamaConfig(**LLAMA_CONFIGS[name], **IDS)
    torch.manual_seed(seed)
    return _randomise(transformers.LlamaForCausalLM(config), seed).eval()


def _build(name: str) -> nn.Module:
    return _gpt2(name) if name.startswith("gpt2") else _llama(name)


def _tokens(model, batch=3, length=None, seed=1):
    c = hf_config(model)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, c.vocab_size, (batch, length or c.max_len), generator=gen)


@pytest.mark.parametrize("name", [*GPT2_CONFIGS, *LLAMA_CONFIGS])
def test_same_logits_as_transformers(name, parity):
    theirs = _build(name)
    ours = from_hf(theirs)
    assert isinstance(ours, GPT) and not ours.training
    idx = _tokens(theirs)
    with torch.no_grad():
        expected = theirs(idx).logits
        got = ours(idx)
    assert expected.abs().max() > 1.0  # the weights are not near zero: the comparison means something
    parity(f"from_hf {name} (logits)", got, expected, atol=ATOL)


def test_gpt2_options_read_from_the_config():
    ours = from_hf(_gpt2("gpt2-untied-n_inner"))
    c = ours.config
    assert (c.norm, c.positional, c.activation, c.bias, c.norm_first, c.final_norm) == \
        ("layer", "learned", "gelu_tanh", True, True, True)
    assert c.d_ff == 80 and c.heads == 6 and c.num_layers == 3 and not c.tie_embeddings
    assert ours.lm_head.weight is not ours.tok_embed.weight
    tied = from_hf(_gpt2("gpt2-tied"))
    assert tied.lm_head.weight is tied.tok_embed.weight and tied.config.d_ff == 4 * 32
    assert from_hf(_gpt2("gpt2-exact-gelu-eps")).config.activation == "gelu"


def test_llama_options_read_from_the_config():
    ours = from_hf(_llama("llama-untied-gqa-theta5e5"))
    c = ours.config
    assert (c.norm, c.positional, c.activation, c.bias, c.kv_heads, c.rope_theta) == \
        ("rms", "rope", "swiglu", False, 2, 500000.0)
    block = ours.blocks[0]
    assert isinstance(block.self_attn, GroupedQueryAttention) and block.self_attn.kv_heads == 2
    assert isinstance(block.feed_forward, SwiGLU) and isinstance(block.norm1, RMSNorm)
    assert block.self_attn.rotary.base == 500000.0
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in _llama("llama-untied-gqa-theta5e5").parameters())
    tied = from_hf(_llama("llama-tied-mha"))
    assert tied.lm_head.weight is tied.tok_embed.weight and tied.config.kv_heads == 4


def test_each_option_matters():
    """The comparison can fail: change one option of the course's model and the logits move far past 1e-4."""
    theirs = _llama("llama-untied-gqa-theta5e5")
    idx = _tokens(theirs, batch=2)
    with torch.no_grad():
        expected = theirs(idx).logits
    ours = from_hf(theirs)
    wrong = {
        "rope_theta": lambda m: setattr(m.blocks[0].self_attn, "rotary", type(m.blocks[0].self_attn.rotary)(8, 10000.0)),
        "interleaved RoPE pairs": lambda m: setattr(m.blocks[0].self_attn.rotary, "interleaved", True),
        "key/value heads tiled (repeat) instead of repeat_interleave": lambda m: _tile_kv(m.blocks[0].self_attn),
        "gate and value swapped": lambda m: _swap_gate(m.blocks[0].feed_forward),
    }
    for what, spoil in wrong.items():
        model = from_hf(theirs)
        spoil(model)
        with torch.no_grad():
            err = (model(idx) - expected).abs().max().item()
        assert err > 1e-2, f"{what}: only {err:.2g} from transformers' logits"
    with torch.no_grad():
        assert (ours(idx) - expected).abs().max() <= ATOL


def _tile_kv(attn):
    import tfm_lesson.modern.gqa as gqa

    forward = attn.forward

    def tiled(*args, **kwargs):
        original = gqa.repeat_kv
        gqa.repeat_kv = lambda x, groups: x.repeat(1, groups, 1, 1)
        try:
            return forward(*args, **kwargs)
        finally:
            gqa.repeat_kv = original

    attn.forward = tiled


def _swap_gate(ffn):
    with torch.no_grad():
        gate = ffn.w_gate.weight.clone()
        ffn.w_gate.weight.copy_(ffn.w_up.weight)
        ffn.w_up.weight.copy_(gate)


@pytest.mark.parametrize("name", ["gpt2-tied", "llama-untied-gqa-theta5e5", "llama-mqa-theta1e6-bias"])
def test_greedy_generation_with_the_cache_matches_transformers(name):
    theirs = _build(name)
    ours = from_hf(theirs)
    prompt = _tokens(theirs, batch=2, length=5, seed=3)
    with torch.no_grad():
        expected = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12,
                                   do_sample=False, eos_token_id=None, pad_token_id=0)
    got = ours.generate(prompt, max_new_tokens=12, temperature=0.0, use_cache=True)
    assert torch.equal(got, expected)
    assert torch.equal(ours.generate(prompt, max_new_tokens=12, temperature=0.0, use_cache=False), expected)


def test_cache_positions_offset_like_transformers():
    """Logits of the cached steps match the full forward of transformers: the RoPE offset is right."""
    theirs = _llama("llama-gqa-theta500")
    ours = from_hf(theirs)
    idx = _tokens(theirs, batch=2, length=14, seed=4)
    with torch.no_grad():
        expected = theirs(idx).logits
        cache = ours.new_cache()
        steps = [ours(idx[:, :9], cache)] + [ours(idx[:, t:t + 1], cache) for t in range(9, 14)]
    assert (torch.cat(steps, dim=1) - expected).abs().max() <= ATOL
    assert cache[0].key.shape == (2, 2, 14, 8)  # kv_heads = 2 heads stored, not 8


def test_float64_and_training_mode_follow_the_model():
    theirs = _gpt2("gpt2-tied").double().train()
    ours = from_hf(theirs)
    assert ours.training and next(ours.parameters()).dtype == torch.float64
    idx = _tokens(theirs, batch=2, length=10)
    theirs.eval(), ours.eval()
    with torch.no_grad():
        assert (ours(idx) - theirs(idx).logits).abs().max() < 1e-10


def test_unsupported_models_and_settings_raise():
    with pytest.raises(TypeError, match="expects a transformers model"):
        from_hf(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="language-model head"):
        from_hf(transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=10, **IDS)))
    bert = transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    with pytest.raises(TypeError, match="model_type='bert'"):
        hf_config(bert)
    scaled = transformers.LlamaConfig(**LLAMA_CONFIGS["llama-tied-mha"], **IDS)
    scaled.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="rope_type='linear'"):
        hf_config(scaled)
    head_dim = transformers.LlamaConfig(**LLAMA_CONFIGS["llama-tied-mha"], head_dim=16, **IDS)
    with pytest.raises(ValueError, match="head_dim=16"):
        hf_config(head_dim)
    inverse = transformers.GPT2Config(**GPT2_CONFIGS["gpt2-tied"], scale_attn_by_inverse_layer_idx=True, **IDS)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        hf_config(inverse)


# --- issue 22: the head that is really used, and Llama's dropout where Llama has it -------------------------------
@pytest.mark.parametrize("name", ["gpt2-tied", "llama-tied-mha"])
def test_head_untied_after_loading_is_copied(name):
    """The config says tied, but lm_head is its own tensor (untied by hand): its numbers are the ones used."""
    theirs = _build(name)
    assert theirs.config.tie_word_embeddings
    gen = torch.Generator().manual_seed(7)
    theirs.lm_head.weight = nn.Parameter(torch.randn(theirs.lm_head.weight.shape, generator=gen))
    ours = from_hf(theirs)
    assert not ours.config.tie_embeddings and ours.lm_head.weight is not ours.tok_embed.weight
    idx = _tokens(theirs)
    with torch.no_grad():
        assert (ours(idx) - theirs(idx).logits).abs().max() <= ATOL


def test_llama_attention_dropout_is_attention_dropout():
    config = transformers.LlamaConfig(**LLAMA_CONFIGS["llama-untied-gqa-theta5e5"], attention_dropout=0.25, **IDS)
    ours = from_hf(transformers.LlamaForCausalLM(config))
    assert ours.config.dropout == 0.0 and ours.config.attention_dropout == 0.25
    assert ours.dropout.p == 0.0 and all(b.dropout1.p == 0.0 and b.dropout2.p == 0.0 for b in ours.blocks)
    assert all(b.self_attn.dropout == 0.25 for b in ours.blocks)


def test_gpt2_attention_dropout_is_attn_pdrop():
    config = transformers.GPT2Config(**GPT2_CONFIGS["gpt2-tied"], attn_pdrop=0.2, resid_pdrop=0.1, embd_pdrop=0.1,
                                     **IDS)
    ours = from_hf(transformers.GPT2LMHeadModel(config))
    assert ours.config.dropout == 0.1 and all(b.self_attn.dropout == 0.2 for b in ours.blocks)
    unequal = transformers.GPT2Config(**GPT2_CONFIGS["gpt2-tied"], resid_pdrop=0.1, embd_pdrop=0.3, **IDS)
    with pytest.raises(ValueError, match="embd_pdrop"):
        hf_config(unequal)
