"""tfm_lesson.train.cost: parameter counts equal sum(p.numel()), FLOPs equal torch's FlopCounterMode, the activation
formula equals the bytes autograd saves, the memory sum is close to the measured peak; the recipe's groups,
and gradient accumulation equal to the large batch."""
from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tfm_lesson.train import cost
from tfm_lesson.gpt import GPT, GPTConfig
from tfm_lesson.train.lm import lm_loss
from tfm_lesson.train.lm_recipe import accumulate_gradients, make_adamw, parameter_groups
from tfm_lesson.look.memory import peak_tensor_bytes
from tfm_lesson.model import Transformer, TransformerConfig

SMALL = dict(vocab_size=97, max_len=24, d_model=32, heads=4, d_ff=48, num_layers=2)
GPT_VARIANTS = [{}, dict(tie_embeddings=False), dict(bias=False), dict(positional="sinusoidal"),
                dict(norm_first=False), dict(final_norm=False), dict(activation="relu", num_layers=3),
                dict(norm="rms", activation="swiglu", positional="rope", kv_heads=2, bias=False)]
TRANSFORMER_VARIANTS = [{}, dict(share_embeddings=False, src_vocab_size=50, tie_embeddings=False),
                        dict(norm_first=True), dict(positional="learned", bias=False), dict(final_norm=True),
                        dict(num_encoder_layers=1, num_decoder_layers=4)]
BASE_SMALL = dict(src_vocab_size=60, tgt_vocab_size=60, d_model=32, heads=4, d_ff=64, num_encoder_layers=2,
                  num_decoder_layers=3, max_len=40)


@pytest.mark.parametrize("changes", GPT_VARIANTS, ids=str)
def test_gpt_parameter_formula_equals_the_model(changes):
    config = GPTConfig(**{**SMALL, **changes})
    assert cost.parameter_count(config) == sum(p.numel() for p in GPT(config).parameters())


@pytest.mark.parametrize("changes", TRANSFORMER_VARIANTS, ids=str)
def test_transformer_parameter_formula_equals_the_model(changes):
    config = TransformerConfig(**{**BASE_SMALL, **changes})
    assert cost.parameter_count(config) == sum(p.numel() for p in Transformer(config).parameters())


def test_base_transformer_is_the_paper_s_size():
    assert 60e6 < cost.parameter_count(TransformerConfig()) < 66e6  # table 3: 65 M (their vocabulary differs)


def test_breakdown_parts_add_up_and_tying_moves_the_generator():
    tied, untied = GPTConfig(**SMALL), GPTConfig(**SMALL, tie_embeddings=False)
    parts = cost.parameter_breakdown(tied)
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total") and parts["generator"] == 0
    assert cost.parameter_breakdown(untied)["generator"] == 97 * 32
    assert cost.non_embedding_parameters(tied) == cost.non_embedding_parameters(untied)


def _counted(model, x, y=None) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:  # math path: plain products
        if y is None:
            model(x)
        else:
            lm_loss(model, x, y).backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("changes, seq_len", [({}, 24), (dict(tie_embeddings=False), 7),
                                              (dict(kv_heads=2, positional="rope"), 16),
                                              (dict(activation="swiglu", num_layers=3), 11)], ids=str)
def test_flops_formula_equals_the_flop_counter(changes, seq_len):
    config = GPTConfig(**{**SMALL, **changes})
    model = GPT(config)
    x, y = torch.randint(0, 97, (3, seq_len)), torch.randint(0, 97, (3, seq_len))
    tokens = 3 * seq_len
    assert _counted(model, x) == tokens * cost.flops_per_token(config, seq_len, training=False)
    assert _counted(model, x, y) == tokens * cost.flops_per_token(config, seq_len)


def test_attention_term_grows_with_length_and_six_n_without_it():
    config = GPTConfig(**SMALL)
    short, long = cost.flops_per_token(config, 8), cost.flops_per_token(config, 16)
    assert long - short == 3 * 4 * 2 * 8 * 32  # 3 x 4 num_layers (16 - 8) d_model
    assert short - 3 * 4 * 2 * 8 * 32 == 6 * cost.matmul_parameters(config)


def test_transformer_flops_are_bench_s_formula():
    c = TransformerConfig(**BASE_SMALL)
    d, f, S, T = 32, 64, 10, 7
    enc = 2 * (S * (4 * d * d + 2 * d * f) + 2 * S * S * d)
    dec = 3 * (T * (6 * d * d + 2 * d * f) + S * 2 * d * d + 2 * T * T * d + 2 * T * S * d)
    assert cost.transformer_flops(c, S, T) == 6 * (enc + dec + T * d * 60)


def _saved_bytes(model, x, y) -> int:
    """Bytes of the distinct storages autograd keeps for the backward pass (the parameters left out)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lm_loss(model, x, y)
    return sum(seen.values())


@pytest.mark.parametrize("d_model, layers, batch, seq_len", [(32, 2, 4, 16), (64, 3, 8, 24), (48, 1, 2, 24)])
def test_activation_formula_equals_what_autograd_saves(d_model, layers, batch, seq_len):
    config = GPTConfig(vocab_size=97, max_len=24, d_model=d_model, heads=d_model // 16, d_ff=4 * d_model,
                       num_layers=layers)
    model = GPT(config)
    x, y = torch.randint(0, 97, (batch, seq_len)), torch.randint(0, 97, (batch, seq_len))
    assert _saved_bytes(model, x, y) == cost.activation_bytes(config, batch, seq_len)


@pytest.mark.parametrize("d_model, layers, batch, seq_len", [(32, 2, 4, 16), (64, 3, 8, 24)])
def test_training_memory_is_near_the_measured_peak(d_model, layers, batch, seq_len):
    config = GPTConfig(vocab_size=97, max_len=24, d_model=d_model, heads=d_model // 16, d_ff=4 * d_model,
                       num_layers=layers)
    model = GPT(config)
    x, y = torch.randint(0, 97, (batch, seq_len)), torch.randint(0, 97, (batch, seq_len))
    optimizer = make_adamw(model)

    def step():
        optimizer.zero_grad(set_to_none=True)
        lm_loss(model, x, y).backward()
        optimizer.step()

    step()  # Adam's two moments exist from here on, beside the weights
    persistent = sum(t.nbytes for t in [*model.parameters(), *(v for s in optimizer.state.values()
                                                               for v in s.values() if v.dim() > 0)])
    measured = persistent + peak_tensor_bytes(step)  # the step adds gradients and activations
    formula = cost.training_memory(config, batch, seq_len)
    assert persistent == formula["parameters"] + formula["adam"]
    assert 0.8 < measured / formula["total"] < 1.25


def test_memory_and_flops_refuse_bad_input():
    config = GPTConfig(**SMALL)
    with pytest.raises(ValueError, match="seq_len"):
        cost.flops_per_token(config, 0)
    with pytest.raises(ValueError, match="batch"):
        cost.training_memory(config, -1, 8)
    with pytest.raises(TypeError, match="GPTConfig"):
        cost.parameter_count("gpt")
    with pytest.raises(ValueError, match="seconds_per_step"):
        cost.mfu(1e9, 0.0, 1e10)


def test_mfu_is_a_fraction_of_the_measured_peak():
    peak = cost.matmul_peak("cpu", size=128, repeats=2)
    assert peak > 0 and math.isfinite(peak)
    assert cost.mfu(2e9, 1.0, 4e9) == 0.5


# ---------------------------------------------------------------------------------------------- the recipe
def test_parameter_groups_decay_matrices_only():
    model = GPT(GPTConfig(**SMALL))
    decay, rest = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.dim() == 2 for p in decay["params"]) and decay["weight_decay"] == 0.1
    assert rest["weight_decay"] == 0.0
    rest_names = {names[id(p)] for p in rest["params"]}
    assert "tok_embed.weight" in rest_names and any("positional" in n for n in rest_names)
    assert not any("positional" in names[id(p)] or "embed" in names[id(p)] for p in decay["params"])
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))  # tied matrix once
    with pytest.raises(ValueError, match="weight_decay"):
        parameter_groups(model, -1)


@pytest.mark.parametrize("micro", [2, 3, 4])
def test_accumulation_equals_the_large_batch(micro):
    torch.manual_seed(0)
    big, small = GPT(GPTConfig(**SMALL)), GPT(GPTConfig(**SMALL))
    small.load_state_dict(big.state_dict())
    x, y = torch.randint(0, 97, (8, 12)), torch.randint(0, 97, (8, 12))
    loss_big, loss_small = accumulate_gradients(big, x, y), accumulate_gradients(small, x, y, micro)
    assert abs(loss_big - loss_small) < 1e-5
    for a, b in zip(big.parameters(), small.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-5)
    # one AdamW step on each: Adam's first step is about lr x sign(g), so a gradient near zero may flip an
    # element by up to lr; all the others agree to rounding
    opt_big, opt_small = make_adamw(big, 1e-3), make_adamw(small, 1e-3)
    opt_big.step()
    opt_small.step()
    for a, b in zip(big.parameters(), small.parameters()):
        assert ((a - b).abs() > 1e-6).float().mean() < 0.01
        assert (a - b).abs().max() <= 2e-3 + 1e-6


def test_accumulation_without_weights_would_differ():
    """The test above can fail: summing unweighted micro-batch means gives 3 times the gradient."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SMALL))
    x, y = torch.randint(0, 97, (6, 12)), torch.randint(0, 97, (6, 12))
    accumulate_gradients(model, x, y, 1)
    right = model.lm_head.weight.grad.clone()
    model.zero_grad()
    accumulate_gradients(model, x, y, 3, loss_fn=lambda m, a, b: lm_loss(m, a, b) * 3)  # undoes the 1/3 weights
    torch.testing.assert_close(model.lm_head.weight.grad, 3 * right, atol=1e-6, rtol=1e-4)
    with pytest.raises(ValueError, match="micro_batches"):
        accumulate_gradients(model, x, y, 7)
