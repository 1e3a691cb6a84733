"""Checkers for chapters 07 (encoder) and 08 (decoder): layers, stacks, the target mask, loading torch weights.

Each checker loads the reference's ``state_dict`` into the learner's module (so both hold the same numbers),
runs both in eval mode on random shapes with masks, compares outputs and gradients, and when they differ
compares the learner's output with what each classic mistake would produce, to name it. The target mask's checker
lives in :mod:`.target_mask`, the weight loading's in :mod:`.load_weights`.
"""
from __future__ import annotations

import copy
import random
from typing import Any, Callable

import torch
from torch import Tensor, nn

from .. import masks as M
from ..decoder import Decoder, DecoderLayer
from ..encoder import Encoder, EncoderLayer
from ._harness import (Mistake, call, check_on_device, close, diagnose, expect, learner_side,
                       expect_written, output_of, passed, time_limit)

__all__ = ["check_encoder_layer", "check_decoder_layer", "check_encoder", "check_decoder"]

AMBIGUOUS = ("`if mask:` (or `mask or ...`) asks a whole tensor for one truth value, which PyTorch refuses "
             "(\"Boolean value of Tensor with more than one value is ambiguous\"). Test for absence instead: "
             "`if mask is not None:`")
RESIDUAL = ("gradients do not flow through the residual path: the output is right but d(loss)/d(x) is not. "
            "Did you take the residual from a copy (copy.deepcopy(x), x.detach(), x.clone().detach(), x.data)? "
            "Add the input tensor itself: `x + sublayer(x)`")


# running the learner's code ---------------------------------------------------------------------------------------
def _explain(exc: Exception) -> str | None:
    """Hints for the exceptions of classic layer and stack mistakes (the harness adds the generic ones)."""
    text = str(exc)
    if "ambiguous" in text and "Boolean value of Tensor" in text:
        return AMBIGUOUS
    if "deepcopy protocol" in text:
        return ("It failed while deep-copying a tensor: copy.deepcopy accepts only graph leaves (tensors that no "
                "operation produced), and where it does run it cuts the residual path out of the graph, so no "
                "gradient flows through it. Did you take the residual from a copy (copy.deepcopy(x), x.detach(), "
                "x.clone().detach(), x.data)? Add the input tensor itself: `x + sublayer(x)`")
    if isinstance(exc, TypeError) and "positional argument" in text:
        return ("Keep tfm_lesson's signatures, e.g. `forward(self, x, mask=None)` for an encoder layer and "
                "`forward(self, x, memory, tgt_mask=None, memory_mask=None)` for a decoder layer")
    return None


def _run(fn: Callable, *args: Any, what: str) -> Any:
    """Call learner code under the time limit; translate the exceptions of classic mistakes into their hint."""
    return call(fn, *args, what=what, explain=_explain)


def _build(cls: type, what: str, *args: Any, **kwargs: Any) -> nn.Module:
    try:
        with time_limit(None, what=f"your {what}(...)"):
            module = cls(*args, **kwargs)
    except Mistake:
        raise
    except Exception as exc:
        sig = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        raise Mistake(f"{what}({sig}) raised {type(exc).__name__}: {exc}. Keep the constructor signature of "
                      f"tfm_lesson.{what}") from exc
    expect(isinstance(module, nn.Module), f"{what}(...) should build an nn.Module, got {type(module).__name__}")
    return module


def _load(learner: nn.Module, ref: nn.Module, what: str) -> None:
    """Copy the reference's weights into the learner's module, naming missing or extra parameters."""
    expect_written(learner, what)
    try:
        missing, unexpected = learner.load_state_dict(ref.state_dict(), strict=False)
    except RuntimeError as exc:
        raise Mistake(f"could not load tfm_lesson's weights into your {what}: {str(exc).splitlines()[-1].strip()}. "
                      "Build it from tfm_lesson's parts with the same sizes") from exc
    own = dict(learner.named_parameters())
    extra = [k for k in missing if k in own]
    if unexpected:
        hint = ""
        if any(k.startswith("layers.") for k in unexpected) and not any(k.startswith("layers.") for k in own):
            hint = " Keep the layers in an nn.ModuleList (a plain Python list hides their parameters from PyTorch)."
        elif any(k.startswith("norm.") for k in unexpected):
            hint = " With norm_first=True the stack ends with a final LayerNorm named `norm`."
        raise Mistake(f"your {what} has no parameter(s) {sorted(unexpected)[:4]} that tfm_lesson's has. Use "
                      f"tfm_lesson's attribute names (self_attn, cross_attn, feed_forward, norm1, norm2, norm3; "
                      f"layers, norm for a stack).{hint}")
    if extra:
        hint = ""
        if any(k.startswith("norm.") for k in extra):
            hint = (" A post-norm stack (norm_first=False, the paper) has no final LayerNorm: every layer already "
                    "ends with one. Set `self.norm = None` unless norm_first.")
        raise Mistake(f"your {what} has parameter(s) {sorted(extra)[:4]} that tfm_lesson's has not.{hint}")


def _pair(cls: type, ref_cls: type, what: str, args: tuple, norm_first: bool) -> tuple[nn.Module, nn.Module]:
    ref = ref_cls(*args, dropout=0.0, norm_first=norm_first).eval()
    learner = _build(cls, what, *args, dropout=0.0, norm_first=norm_first)
    _load(learner, ref, what)
    return learner.eval(), ref


def _sizes(rng: random.Random) -> tuple[int, int, int]:
    heads = rng.choice([2, 4])
    d_model = heads * rng.choice([4, 6])
    return d_model, heads, 2 * d_model


def _lengths_mask(rng: random.Random, batch: int, length: int) -> tuple[Tensor, list[int]]:
    """A padding mask (batch, 1, 1, length): the first row is full, others padded."""
    lengths = [length] + [rng.randint(2, length - 1) for _ in range(batch - 1)]
    keep = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # (batch, length)
    return keep[:, None, None, :], lengths


def _grads_match(learner: nn.Module, ref: nn.Module, out: Tensor, expected: Tensor, x: Tensor, x_ref: Tensor,
                 what: str) -> None:
    weight = torch.randn_like(expected)
    x_grad, grads = learner_side(_learner_grads)(learner, out, x, weight)
    (expected * weight).sum().backward()
    expect(x_grad is not None and close(x_grad, x_ref.grad, atol=1e-4), RESIDUAL)
    theirs = dict(ref.named_parameters())
    for name, g in grads.items():
        if name in theirs and theirs[name].grad is not None:
            expect(close(g if g is not None else torch.zeros_like(theirs[name]), theirs[name].grad, atol=1e-4),
                   f"the output of your {what} matches, but the gradient of `{name}` does not: is some tensor "
                   "detached (`.detach()`, `.data`, `torch.no_grad()`) on the way?")


def _learner_grads(learner: nn.Module, out: Tensor, x: Tensor, weight: Tensor) -> tuple[Tensor | None, dict]:
    """Gradients flowing back through the learner's output to its input and to its parameters (they flow through
    the learner's code, so this runs where it lives: :func:`._replay.learner_side`)."""
    (out * weight).sum().backward()
    return x.grad, {name: p.grad for name, p in learner.named_parameters()}


# the encoder layer ----------------------------------------------------------------------------------------------
def _residual(skip: tuple[int, ...], i: int) -> Callable[[Tensor], Tensor]:
    """The residual term of sub-layer ``i``: the input itself, or nothing when ``i`` is in ``skip``."""
    return (lambda h: torch.zeros_like(h)) if i in skip else (lambda h: h)


def _encoder_variant(ref: EncoderLayer, x: Tensor, mask: Tensor | None, norm_first: bool, skip: tuple[int, ...] = (),
                     same_norm: bool = False) -> Tensor:
    """What an encoder layer computes with the given (possibly wrong) choices, from the reference's parts;
    ``skip`` lists the sub-layers (1 attention, 2 feed-forward) whose residual is missing."""
    norm2 = ref.norm1 if same_norm else ref.norm2
    r1, r2 = _residual(skip, 1), _residual(skip, 2)
    attend = lambda h: ref.self_attn(h, h, h, mask)[0]  # noqa: E731
    if norm_first:
        x = r1(x) + attend(ref.norm1(x))
        return r2(x) + ref.feed_forward(norm2(x))
    x = ref.norm1(r1(x) + attend(x))
    return norm2(r2(x) + ref.feed_forward(x))


def _missing_residuals(variant: Callable[[tuple[int, ...]], Tensor], names: list[str], norm_first: bool) -> dict:
    """Suspects for a residual connection missing in one sub-layer or in all of them."""
    shape = "x + Sublayer(LayerNorm(x))" if norm_first else "LayerNorm(x + Sublayer(x))"
    out = {f"the residual connection is missing around {name}: that sub-layer computes "
           f"{shape.replace('x + ', '')} instead of {shape}": variant((i,)) for i, name in enumerate(names, 1)}
    out[f"the residual connections are missing: every sub-layer should compute {shape}, yours drops the `x + `"] = \
        variant(tuple(range(1, len(names) + 1)))
    return out


def _norm_names(norm_first: bool) -> tuple[str, str]:
    post = "post-norm, x = LayerNorm(x + Sublayer(x))"
    pre = "pre-norm, x = x + Sublayer(LayerNorm(x))"
    return (pre, post) if norm_first else (post, pre)


def check_encoder_layer(cls: type) -> None:
    """Check ``cls(d_model, heads, d_ff, dropout=0.1, norm_first=False)`` against :class:`tfm_lesson.EncoderLayer`:
    outputs with a padding mask in post-norm and pre-norm, padding invariance, gradients, dropout."""
    rng = random.Random(7)
    torch.manual_seed(7)
    for trial, norm_first in enumerate([False, True, False]):
        d_model, heads, d_ff = _sizes(rng)
        learner, ref = _pair(cls, EncoderLayer, "EncoderLayer", (d_model, heads, d_ff), norm_first)
        dtype = torch.float64 if trial == 2 else torch.float32  # the last trial in double precision
        learner, ref = learner.to(dtype), ref.to(dtype)
        batch, length = rng.randint(2, 3), rng.randint(4, 7)
        mask, lengths = _lengths_mask(rng, batch, length)
        x = torch.randn(batch, length, d_model, dtype=dtype, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        out = output_of(_run(learner, x, mask, what="your EncoderLayer"))
        expected = ref(x_ref, mask)
        want, other = _norm_names(norm_first)
        with torch.no_grad():
            suspects = {
                "padding changes the output: your layer seems to ignore its `mask` argument (a misspelled name, or "
                "not passed on to self_attn(x, x, x, mask)?)": _encoder_variant(ref, x, None, norm_first),
                f"the layer norms are in the wrong place: norm_first={norm_first} asks for {want}, your output "
                f"matches {other}": _encoder_variant(ref, x, mask, not norm_first),
                **_missing_residuals(lambda skip: _encoder_variant(ref, x, mask, norm_first, skip),
                                     ["self-attention", "the feed-forward network"], norm_first),
                "the output looks as if norm1 was used for both sub-layers: the feed-forward sub-layer has its own "
                "norm2": _encoder_variant(ref, x, mask, norm_first, same_norm=True),
            }
        diagnose(out.detach(), expected.detach(), suspects,
                 f"your EncoderLayer (norm_first={norm_first}) does not match tfm_lesson.EncoderLayer: "
                 f"self-attention then feed-forward, each with residual and {want}")
        _grads_match(learner, ref, out, expected, x, x_ref, "EncoderLayer")
        if trial == 0:  # once more on the chapter's device (a GPU, when there is one)
            check_on_device(learner, x.detach(), mask, expected=expected.detach(), what="your EncoderLayer")
        # padding invariance: what sits at padded positions must not reach the real ones
        with torch.no_grad():
            x2 = x.detach().clone()
            for b, n in enumerate(lengths):
                x2[b, n:] = torch.randn(length - n, d_model, dtype=dtype) * 3
            out2 = output_of(_run(learner, x2, mask, what="your EncoderLayer"))
            for b, n in enumerate(lengths):
                expect(close(out2[b, :n], out[b, :n].detach()),
                       "padding changes the output: changing a padded position changed a real one. Pass the mask "
                       "to self-attention")
    # dropout: active in training, silent in eval
    learner = _build(cls, "EncoderLayer", 16, 2, 32, dropout=0.5, norm_first=False)
    x = torch.randn(2, 5, 16)
    learner.eval()
    run = lambda: output_of(_run(learner, x, what="your EncoderLayer"))  # noqa: E731
    expect(close(run(), run()),
           "in eval mode your layer gives different outputs for the same input: use nn.Dropout modules "
           "(they switch off in eval), not F.dropout(..., training=True)")
    learner.train()
    expect(not close(run(), run()),
           "in training mode with dropout=0.5 your layer gives the same output twice: is the dropout probability "
           "passed on and dropout applied to each sub-layer's output?")
    passed("check_encoder_layer", "post-norm and pre-norm, float32 and float64, with padding masks: outputs, "
           "gradients and dropout match tfm_lesson.EncoderLayer")


# the decoder layer ----------------------------------------------------------------------------------------------
def _decoder_variant(ref: DecoderLayer, x: Tensor, memory: Tensor, tgt_mask: Tensor | None,
                     memory_mask: Tensor | None, norm_first: bool, cross: str = "right",
                     skip: tuple[int, ...] = (), norm_memory: bool = False) -> Tensor:
    """What a decoder layer computes with the given (possibly wrong) choices; ``skip`` lists the sub-layers
    (1 self-attention, 2 cross-attention, 3 feed-forward) whose residual is missing; ``norm_memory`` normalises the
    memory with norm2 as well as the query (a pre-norm slip)."""
    r1, r2, r3 = _residual(skip, 1), _residual(skip, 2), _residual(skip, 3)
    self_attend = lambda h: ref.self_attn(h, h, h, tgt_mask)[0]  # noqa: E731
    mem = ref.norm2(memory) if norm_memory else memory

    def cross_attend(h: Tensor) -> Tensor:
        q, kv = {"right": (h, mem), "memory_query": (mem, h), "self": (h, h)}[cross]
        return ref.cross_attn(q, kv, kv, memory_mask if cross != "self" else tgt_mask)[0]

    if norm_first:
        x = r1(x) + self_attend(ref.norm1(x))
        x = r2(x) + cross_attend(ref.norm2(x))
        return r3(x) + ref.feed_forward(ref.norm3(x))
    x = ref.norm1(r1(x) + self_attend(x))
    x = ref.norm2(r2(x) + cross_attend(x))
    return ref.norm3(r3(x) + ref.feed_forward(x))


CROSS_QUERY = ("cross-attention is fed the wrong query: queries come from the decoder (x, one per target "
               "position), keys and values from the memory: cross_attn(x, memory, memory, memory_mask)")
SWAPPED = ("tgt_mask and memory_mask are swapped: self-attention takes tgt_mask (causal and padding, (batch, 1, t, t)), "
           "cross-attention takes memory_mask (the source's padding, (batch, 1, 1, s)): "
           "self_attn(x, x, x, tgt_mask) and cross_attn(x, memory, memory, memory_mask)")
FUTURE = ("the future leaks: changing a later target position changed earlier outputs. Self-attention must use "
          "tgt_mask (causal and padding): self_attn(x, x, x, tgt_mask)")


def check_decoder_layer(cls: type) -> None:
    """Check ``cls(d_model, heads, d_ff, dropout=0.1, norm_first=False)`` against :class:`tfm_lesson.DecoderLayer`:
    masked self-attention, cross-attention over the memory, feed-forward; outputs, causality, gradients."""
    rng = random.Random(8)
    torch.manual_seed(8)
    for trial, norm_first in enumerate([False, True, False]):
        d_model, heads, d_ff = _sizes(rng)
        learner, ref = _pair(cls, DecoderLayer, "DecoderLayer", (d_model, heads, d_ff), norm_first)
        dtype = torch.float64 if trial == 2 else torch.float32  # the last trial in double precision
        learner, ref = learner.to(dtype), ref.to(dtype)
        batch = rng.randint(2, 3)
        tgt_len = rng.randint(4, 6)
        src_len = tgt_len if trial == 0 else tgt_len + rng.randint(1, 3)  # equal lengths first: wrong queries still run
        memory_mask, _ = _lengths_mask(rng, batch, src_len)
        tgt_pad, _ = _lengths_mask(rng, batch, tgt_len)
        tgt_mask = M.combine_masks(tgt_pad, M.causal_mask(tgt_len))  # (batch, 1, tgt_len, tgt_len)
        x = torch.randn(batch, tgt_len, d_model, dtype=dtype, requires_grad=True)
        memory = torch.randn(batch, src_len, d_model, dtype=dtype)
        x_ref = x.detach().clone().requires_grad_()
        try:
            out = output_of(_run(learner, x, memory, tgt_mask, memory_mask, what="your DecoderLayer"))
        except Mistake as exc:
            if src_len != tgt_len and ("size" in str(exc) or "length" in str(exc) or "shape" in str(exc)):
                raise Mistake(f"{exc}\nWith a source longer than the target this fails. Either {CROSS_QUERY}; or "
                              f"{SWAPPED}") from exc
            raise
        expected = ref(x_ref, memory, tgt_mask, memory_mask)
        want, other = _norm_names(norm_first)
        args = (x, memory, tgt_mask, memory_mask, norm_first)
        with torch.no_grad():
            suspects = {CROSS_QUERY: _decoder_variant(ref, *args, cross="memory_query"),
                        SWAPPED: _decoder_variant(ref, x, memory, memory_mask, tgt_mask, norm_first),
                        } if src_len == tgt_len else {}
            if norm_first:
                suspects["the memory is normalised too: in pre-norm only the decoder's stream goes through norm2, "
                         "cross_attn(norm2(x), memory, memory, memory_mask); the memory is already normalised by the "
                         "encoder's final norm"] = _decoder_variant(ref, *args, norm_memory=True)
            suspects.update({
                "cross-attention never looks at the memory: it attends over x again. Use "
                "cross_attn(x, memory, memory, memory_mask)": _decoder_variant(ref, *args, cross="self"),
                FUTURE + " (your self-attention seems to ignore tgt_mask)":
                    _decoder_variant(ref, x, memory, None, memory_mask, norm_first),
                "padding in the memory changes the output: pass memory_mask to cross-attention":
                    _decoder_variant(ref, x, memory, tgt_mask, None, norm_first),
                "both masks are ignored: pass tgt_mask to self-attention and memory_mask to cross-attention":
                    _decoder_variant(ref, x, memory, None, None, norm_first),
                f"the layer norms are in the wrong place: norm_first={norm_first} asks for {want}, your output "
                f"matches {other}": _decoder_variant(ref, x, memory, tgt_mask, memory_mask, not norm_first),
                **_missing_residuals(lambda skip: _decoder_variant(ref, *args, skip=skip),
                                     ["self-attention", "cross-attention", "the feed-forward network"], norm_first),
            })
        diagnose(out.detach(), expected.detach(), suspects,
                 f"your DecoderLayer (norm_first={norm_first}) does not match tfm_lesson.DecoderLayer: masked "
                 f"self-attention, cross-attention, feed-forward, each with residual and {want}")
        _grads_match(learner, ref, out, expected, x, x_ref, "DecoderLayer")
        if trial == 0:  # once more on the chapter's device (a GPU, when there is one)
            check_on_device(learner, x.detach(), memory, tgt_mask, memory_mask, expected=expected.detach(),
                            what="your DecoderLayer")
        # causality: a later target position never changes an earlier output
        with torch.no_grad():
            x2 = x.detach().clone()
            x2[:, -1] = torch.randn(batch, d_model, dtype=dtype) * 3
            out2 = output_of(_run(learner, x2, memory, tgt_mask, memory_mask, what="your DecoderLayer"))
            expect(close(out2[:, :-1], out[:, :-1].detach()), FUTURE)
    passed("check_decoder_layer", "post-norm and pre-norm, float32 and float64, with causal and padding masks: "
           "outputs, causality and gradients match tfm_lesson.DecoderLayer")


# the stacks ---------------------------------------------------------------------------------------------------------
def _stack_pair(cls: type, ref_cls: type, what: str, rng: random.Random,
                norm_first: bool) -> tuple[nn.Module, nn.Module, int]:
    """The reference stack and the learner's, built with the same sizes, the learner's loaded with the reference's
    weights; the layer count is checked first (one layer shared by every position, or none kept)."""
    d_model, heads, d_ff = _sizes(rng)
    num_layers = rng.choice([2, 3])
    ref = ref_cls(d_model, heads, d_ff, num_layers, dropout=0.0, norm_first=norm_first).eval()
    learner = _build(cls, what, d_model, heads, d_ff, num_layers, dropout=0.0, norm_first=norm_first)
    n_learner = sum(p.numel() for p in learner.parameters())
    per_layer = sum(p.numel() for p in ref.layers[0].parameters())
    final = 0 if ref.norm is None else 2 * d_model
    expect(n_learner != per_layer + final or num_layers == 1,
           f"your {what} has the parameters of one layer, not {num_layers}: all layers share one set of weights. "
           f"Build a new layer for each position (`nn.ModuleList({what}Layer(...) for _ in range(num_layers))`), "
           "not `[layer] * num_layers`")
    expect_written(learner, what)
    expect(n_learner != 0, f"your {what} has no parameters: build num_layers layers and keep them in an nn.ModuleList "
           "called `layers` (a plain Python list hides them from PyTorch)")
    _load(learner, ref, what)
    return ref, learner.eval(), d_model


def _check_stack(cls: type, decoder: bool) -> None:
    what = "Decoder" if decoder else "Encoder"
    ref_cls = Decoder if decoder else Encoder
    rng = random.Random(9 + decoder)
    torch.manual_seed(9 + decoder)
    for norm_first in (False, True):
        ref, learner, d_model = _stack_pair(cls, ref_cls, what, rng, norm_first)
        batch, length = rng.randint(2, 3), rng.randint(4, 6)
        mask, _ = _lengths_mask(rng, batch, length)
        x = torch.randn(batch, length, d_model)
        layers = list(ref.layers)
        with torch.no_grad():
            if decoder:
                src_len = length if not norm_first else length + 2  # equal lengths first: a wrong memory still runs
                memory = torch.randn(batch, src_len, d_model)
                memory_mask, _ = _lengths_mask(rng, batch, src_len)
                tgt_mask = M.combine_masks(mask, M.causal_mask(length))
                out = output_of(_run(learner, x, memory, tgt_mask, memory_mask, what=f"your {what}"))
                expected = ref(x, memory, tgt_mask, memory_mask)
                run = lambda h, i, tm, mm, ls=layers: ls[i](h, memory, tm, mm)  # noqa: E731
                masks_ok, masks_none = (tgt_mask, memory_mask), (None, None)
            else:
                out = output_of(_run(learner, x, mask, what=f"your {what}"))
                expected = ref(x, mask)
                run = lambda h, i, m, _, ls=layers: ls[i](h, m)  # noqa: E731
                masks_ok, masks_none = (mask, None), (None, None)
            flipped = [copy.deepcopy(layer) for layer in layers]  # the layers built without norm_first
            for layer in flipped:
                layer.norm_first = not layer.norm_first

            def chain(masks: tuple, final_norm: bool = True, restart: bool = False, first_only: bool = False,
                      stack: list | None = None) -> Tensor:
                h = x
                for i in range(len(layers)):
                    h = run(x if restart else h, i, *(masks if i == 0 or not first_only else masks_none),
                            ls=stack or layers)
                return ref.norm(h) if final_norm and ref.norm is not None else h

            suspects = {
                f"your {what} does not pass the mask(s) on to every layer (padding changes the output)":
                    chain(masks_none),
                f"each layer is applied to the stack's input instead of the previous layer's output: write "
                f"`x = layer(x, ...)` in the loop": chain(masks_ok, restart=True),
            }
            suspects[f"the masks reach the first layer only: pass them to every layer in the loop, "
                     f"`x = layer(x, {'memory, tgt_mask, memory_mask' if decoder else 'mask'})`"] = \
                chain(masks_ok, first_only=True)
            suspects[f"your layers do not get norm_first={norm_first}: build every layer with the stack's settings, "
                     f"`{what}Layer(d_model, heads, d_ff, dropout, norm_first)`"] = chain(masks_ok, stack=flipped)
            if decoder and src_len == length:
                def previous_as_memory() -> Tensor:
                    h = x
                    for layer in layers:
                        h = layer(h, h, tgt_mask, memory_mask)
                    return ref.norm(h) if ref.norm is not None else h

                suspects["each layer gets the previous layer's output as its memory: every decoder layer attends "
                         "to the *same* memory, the encoder's output: `x = layer(x, memory, tgt_mask, memory_mask)`"
                         ] = previous_as_memory()
                suspects["tgt_mask and memory_mask reach the layers swapped: the order is "
                         "`layer(x, memory, tgt_mask, memory_mask)`"] = chain((memory_mask, tgt_mask))
            if ref.norm is not None:
                suspects["the final LayerNorm is missing: a pre-norm stack (norm_first=True) ends with `self.norm`, "
                         "since its last residual stream is otherwise never normalised"] = chain(masks_ok, False)
        diagnose(out, expected, suspects, f"your {what} (norm_first={norm_first}) does not match tfm_lesson.{what}")
        inputs = (x, memory, tgt_mask, memory_mask) if decoder else (x, mask)
        check_on_device(learner, *inputs, expected=expected, what=f"your {what}")
    passed(f"check_{what.lower()}", f"post-norm and pre-norm stacks of {what}Layers match tfm_lesson.{what}")


def check_encoder(cls: type) -> None:
    """Check ``cls(d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False)`` (attributes ``layers``: an
    ``nn.ModuleList`` of ``EncoderLayer``, ``norm``: final LayerNorm only when ``norm_first``) against
    :class:`tfm_lesson.Encoder`."""
    _check_stack(cls, decoder=False)


def check_decoder(cls: type) -> None:
    """Check ``cls(d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False)`` with
    ``forward(x, memory, tgt_mask=None, memory_mask=None)`` against :class:`tfm_lesson.Decoder`."""
    _check_stack(cls, decoder=True)
