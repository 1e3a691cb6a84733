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
    check_target_mask(lambda tgt, pad_id: T.combine_masks(T.padding_mask(tgt, pad_id), T.causal_mask(tgt.size(1))))
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
    fails(check_encoder_layer, DeepcopyResidual, "gradients do not flow through the residual path")
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
