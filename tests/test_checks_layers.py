"""The chapter 07/08 checkers pass the reference and name each classic mistake by its hint."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import tfm_lesson as T
from tfm_lesson.checks import (Mistake, check_decoder, check_decoder_layer, check_encoder, check_encoder_layer,
                               check_load_encoder_layer, check_target_mask)


# references pass -------------------------------------------------------------------------------------------------
def test_references_pass(capsys):
    check_encoder_layer(T.EncoderLayer)
    check_decoder_layer(T.DecoderLayer)
    check_encoder(T.Encoder)
    check_decoder(T.Decoder)
    check_target_mask(lambda tgt, pad_id: T.combine_masks(T.padding_mask(tgt, pad_id),
                                                         T.causal_mask(tgt.size(1), device=tgt.device)))
    check_load_encoder_layer(lambda ours, theirs: ours.load_state_dict(T.from_torch(theirs).state_dict()))
    assert capsys.readouterr().out.count("passed") == 6


def fails(checker, candidate, *hints: str) -> None:
    with pytest.raises(Mistake) as info:
        checker(candidate)
    for hint in hints:
        assert hint in str(info.value), str(info.value)


# encoder layer mistakes -------------------------------------------------------------------------------------------
class DetachedResidual(T.EncoderLayer):
    def forward(self, x, mask=None):
        residual = x.detach()  # the residual path is cut from the graph
        if self.norm_first:
            x = residual + self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)[0]
            return x + self.feed_forward(self.norm2(x))
        x = self.norm1(residual + self.self_attn(x, x, x, mask)[0])
        return self.norm2(x + self.feed_forward(x))


class DeepcopyResidual(T.EncoderLayer):
    def forward(self, x, mask=None):
        residual = copy.deepcopy(x)
        x = self.norm1(residual + self.self_attn(x, x, x, mask)[0])
        residual = copy.deepcopy(x)
        return self.norm2(residual + self.feed_forward(x))


class IfMask(T.EncoderLayer):
    def forward(self, x, mask=None):
        if mask:
            x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        else:
            x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.feed_forward(x))


class MisspelledMask(T.EncoderLayer):
    def forward(self, x, maks=None):  # the mask arrives as `maks` and is never used
        x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.feed_forward(x))


class AlwaysPreNorm(T.EncoderLayer):
    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask)[0]
        return x + self.feed_forward(self.norm2(x))


def test_encoder_layer_mistakes():
    fails(check_encoder_layer, DetachedResidual, "gradients do not flow through the residual path")
    fails(check_encoder_layer, DeepcopyResidual, "deep-copying a tensor", "no gradient flows through it")
    fails(check_encoder_layer, IfMask, "Boolean value of Tensor", "if mask is not None")
    fails(check_encoder_layer, MisspelledMask, "padding changes the output", "ignore its `mask` argument")
    fails(check_encoder_layer, AlwaysPreNorm, "layer norms are in the wrong place", "norm_first=False")


# decoder layer mistakes -------------------------------------------------------------------------------------------
class MemoryAsQuery(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(memory, x, x, memory_mask)[0])
        return self.norm3(x + self.feed_forward(x))


class NoCausal(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x)[0])  # tgt_mask forgotten: the future leaks
        x = self.norm2(x + self.cross_attn(x, memory, memory, memory_mask)[0])
        return self.norm3(x + self.feed_forward(x))


class DecoderIfMask(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        mask = tgt_mask if tgt_mask else None
        return super().forward(x, memory, mask, memory_mask)


class DecoderSwappedNorm(T.DecoderLayer):
    def __init__(self, *args, norm_first=False, **kwargs):
        super().__init__(*args, norm_first=not norm_first, **kwargs)


def test_decoder_layer_mistakes():
    fails(check_decoder_layer, MemoryAsQuery, "cross-attention is fed the wrong query")
    fails(check_decoder_layer, NoCausal, "the future leaks")
    fails(check_decoder_layer, DecoderIfMask, "if mask is not None")
    fails(check_decoder_layer, DecoderSwappedNorm, "layer norms are in the wrong place")


# stacks -----------------------------------------------------------------------------------------------------------
class SharedLayers(T.Encoder):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, heads, d_ff, num_layers, dropout, norm_first)
        self.layers = nn.ModuleList([self.layers[0]] * num_layers)


class NoMaskPassed(T.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x)
        return x if self.norm is None else self.norm(x)


class NoFinalNorm(T.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class DecoderRestart(T.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        out = x
        for layer in self.layers:
            out = layer(x, memory, tgt_mask, memory_mask)
        return out if self.norm is None else self.norm(out)


def test_stack_mistakes():
    fails(check_encoder, SharedLayers, "share one set of weights")
    fails(check_encoder, NoMaskPassed, "does not pass the mask")
    fails(check_encoder, NoFinalNorm, "final LayerNorm is missing")
    fails(check_decoder, DecoderRestart, "instead of the previous layer's output")


# target mask ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn, hint", [
    (lambda tgt, p: T.causal_mask(tgt.size(1)), "padding is not masked"),
    (lambda tgt, p: T.padding_mask(tgt, p), "the future leaks"),
    (lambda tgt, p: ~(T.padding_mask(tgt, p) & T.causal_mask(tgt.size(1))), "polarity is inverted"),
    (lambda tgt, p: T.padding_mask(tgt, p) & torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).tril(-1),
     "shifted by one"),
    (lambda tgt, p: (T.padding_mask(tgt, p) & T.causal_mask(tgt.size(1))).float(), "must be boolean"),
    (lambda tgt, p: T.causal_mask(tgt.size(1))[None, None] & (tgt != p)[:, None, :, None], "wrong axis"),
])
def test_target_mask_mistakes(fn, hint):
    fails(check_target_mask, fn, hint)


def test_target_mask_built_on_the_cpu_is_caught_without_a_gpu():
    # right values, but the triangle ignores tgt's device: on a GPU the model would crash; the meta device finds it
    fails(check_target_mask, lambda tgt, p: T.combine_masks(T.padding_mask(tgt, p), T.causal_mask(tgt.size(1))),
          "build new tensors on `tgt.device`")
    fails(check_target_mask, lambda tgt, p: (tgt != p)[:, None, None, :] & torch.ones(tgt.size(1), tgt.size(1)).tril(),
          "build the triangle as a boolean tensor")


# loading torch weights --------------------------------------------------------------------------------------------
def _load_swapped(ours, theirs):
    d = ours.d_model
    with torch.no_grad():
        ours.load_state_dict(T.from_torch(theirs).state_dict())
        ours.self_attn.w_q.weight.copy_(theirs.self_attn.in_proj_weight[d:2 * d])  # W^K's rows
        ours.self_attn.w_k.weight.copy_(theirs.self_attn.in_proj_weight[:d])


def _load_transposed(ours, theirs):
    with torch.no_grad():
        ours.load_state_dict(T.from_torch(theirs).state_dict())
        ours.self_attn.w_o.weight.copy_(theirs.self_attn.out_proj.weight.T)


def _load_without_no_grad(ours, theirs):
    ours.self_attn.w_o.weight.copy_(theirs.self_attn.out_proj.weight)


def test_load_mistakes():
    fails(check_load_encoder_layer, _load_swapped, "belong to W^K", "stacks W^Q, W^K, W^V")
    fails(check_load_encoder_layer, _load_transposed, "is transposed")
    fails(check_load_encoder_layer, _load_without_no_grad, "torch.no_grad()")


# the slips that used to get only "does not match" ------------------------------------------------------------------
class EncoderNoResidualAttn(T.EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(self.self_attn(x, x, x, mask)[0])  # no x + ...
        return self.norm2(x + self.feed_forward(x))


class EncoderTuple(T.EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, mask))  # forgot [0]
        return self.norm2(x + self.feed_forward(x))


class StubLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        ...  # your turn

    def forward(self, x, *args, **kwargs):
        ...  # your turn


class StubStack(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__()
        ...  # your turn

    def forward(self, x, *args, **kwargs):
        ...  # your turn


class DecoderSwappedMasks(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return super().forward(x, memory, memory_mask, tgt_mask)


class DecoderNoResidualCross(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), tgt_mask)[0]
            x = self.cross_attn(self.norm2(x), memory, memory, memory_mask)[0]
            return x + self.feed_forward(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(self.cross_attn(x, memory, memory, memory_mask)[0])  # no x + ...
        return self.norm3(x + self.feed_forward(x))


class DecoderNormalisedMemory(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, tgt_mask, memory_mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, tgt_mask)[0]
        h, m = self.norm2(x), self.norm2(memory)  # the memory is normalised too
        x = x + self.cross_attn(h, m, m, memory_mask)[0]
        return x + self.feed_forward(self.norm3(x))


class DecoderTuple(T.DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, memory_mask))  # forgot [0]
        return self.norm3(x + self.feed_forward(x))


class EncoderNormFirstNotPassed(T.Encoder):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, heads, d_ff, num_layers, dropout, norm_first)
        self.layers = nn.ModuleList(T.EncoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers))


class EncoderMaskFirstOnly(T.Encoder):
    def forward(self, x, mask=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, mask if i == 0 else None)
        return x if self.norm is None else self.norm(x)


class DecoderPreviousAsMemory(T.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, x, tgt_mask, memory_mask)  # the previous output used as memory
        return x if self.norm is None else self.norm(x)


class DecoderMaskFirstOnly(T.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, *((tgt_mask, memory_mask) if i == 0 else (None, None)))
        return x if self.norm is None else self.norm(x)


class DecoderNormFirstNotPassed(T.Decoder):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__(d_model, heads, d_ff, num_layers, dropout, norm_first)
        self.layers = nn.ModuleList(T.DecoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers))


class DecoderStackSwappedMasks(T.Decoder):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory, memory_mask, tgt_mask)
        return x if self.norm is None else self.norm(x)


@pytest.mark.parametrize("checker, candidate, hints", [
    (check_encoder_layer, EncoderNoResidualAttn, ["residual connection is missing around self-attention"]),
    (check_encoder_layer, EncoderTuple, ["(output, weights)", "`[0]`"]),
    (check_encoder_layer, StubLayer, ["not written yet"]),
    (check_decoder_layer, StubLayer, ["not written yet"]),
    (check_encoder, StubStack, ["not written yet"]),
    (check_decoder, StubStack, ["not written yet"]),
    (check_decoder_layer, DecoderSwappedMasks, ["tgt_mask and memory_mask are swapped"]),
    (check_decoder_layer, DecoderNoResidualCross, ["residual connection is missing around cross-attention"]),
    (check_decoder_layer, DecoderNormalisedMemory, ["the memory is normalised too"]),
    (check_decoder_layer, DecoderTuple, ["`[0]`"]),
    (check_encoder, EncoderNormFirstNotPassed, ["do not get norm_first=True"]),
    (check_encoder, EncoderMaskFirstOnly, ["masks reach the first layer only"]),
    (check_decoder, DecoderPreviousAsMemory, ["previous layer's output as its memory"]),
    (check_decoder, DecoderMaskFirstOnly, ["masks reach the first layer only"]),
    (check_decoder, DecoderNormFirstNotPassed, ["do not get norm_first=True"]),
    (check_decoder, DecoderStackSwappedMasks, ["reach the layers swapped"]),
])
def test_common_slips_are_named(checker, candidate, hints):
    fails(checker, candidate, *hints)


def test_load_stub_is_not_written_yet():
    fails(check_load_encoder_layer, lambda ours, theirs: None, "not written yet")
