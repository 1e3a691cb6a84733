"""Checkers for chapter 06: the position-wise feed-forward network, GELU, and one encoder layer's parameter budget."""
from __future__ import annotations

import inspect
import math
import random
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..encoder import EncoderLayer
from ..feedforward import PositionwiseFeedForward
from ._harness import Mistake, call, check_on_device, close, diagnose, expect, expect_written, output_of, passed
from ._rules import forbid_names, forbid_ready_made

__all__ = ["check_feed_forward", "check_gelu", "check_layer_budget"]

_ACT = {"relu": F.relu, "gelu": F.gelu}


def _name(obj: object) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


def _accepts(cls: type, name: str) -> bool:
    """Whether ``cls(...)`` takes a keyword ``name`` (explicitly or through ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _linear(module: nn.Module, name: str, d_in: int, d_out: int, d_model: int, d_ff: int) -> nn.Linear:
    lin = getattr(module, name, None)
    expect(isinstance(lin, nn.Linear),
           f"your feed-forward network has no nn.Linear called `{name}`: name the two layers as the reference does, "
           f"w_1 = nn.Linear(d_model, d_ff) and w_2 = nn.Linear(d_ff, d_model) (got {type(lin).__name__}).")
    expect((lin.in_features, lin.out_features) == (d_in, d_out),
           f"`{name}` maps {lin.in_features} -> {lin.out_features} features, expected {d_in} -> {d_out} "
           f"(d_model={d_model}, d_ff={d_ff}): w_1 expands d_model -> d_ff, w_2 projects d_ff -> d_model.")
    expect(lin.bias is not None, f"`{name}` has no bias: the paper's FFN is max(0, x W_1 + b_1) W_2 + b_2.")
    return lin


def _ffn_suspects(x: Tensor, ref: PositionwiseFeedForward, activation: str) -> dict[str, Tensor]:
    w1, w2 = ref.w_1, ref.w_2
    act = _ACT[activation]
    other = "gelu" if activation == "relu" else "relu"
    h = w1(x)  # (batch, seq_len, d_ff)
    return {
        "your output matches w_2(w_1(x)) with NO activation: without the nonlinearity the two linear maps collapse "
        "into one (W_1 W_2 is a single d_model x d_model matrix). Put the activation between them: "
        "w_2(activation(w_1(x))).": w2(h),
        "your output matches the activation applied AFTER the second linear, activation(w_2(w_1(x))): it belongs "
        "between the two, on the d_ff-wide hidden layer: w_2(activation(w_1(x))).": act(w2(h)),
        "your output matches activation(w_2(activation(w_1(x)))): there is one activation too many, after the "
        "second linear; the FFN's output must be able to be negative. Remove the last one.": act(w2(act(h))),
        f"your output matches {other.upper()} where {activation.upper()} was asked for: use the activation the "
        f"module was built with (activation={activation!r}).": w2(_ACT[other](h)),
        "your output matches GELU's tanh approximation; the reference (and nn.TransformerEncoderLayer's 'gelu') "
        "is the exact x * Phi(x): F.gelu(h) without approximate='tanh'.": w2(F.gelu(h, approximate="tanh")),
        "your output matches the activation applied to the input, w_2(w_1(activation(x))): it goes on the hidden "
        "layer, after w_1: w_2(activation(w_1(x))).": w2(w1(act(x))),
        "your output matches the FFN plus a residual, x + FFN(x): the residual and the norm belong to the encoder "
        "layer (chapter 05/07), not to the feed-forward module.": x + w2(act(h)),
    }


def check_feed_forward(cls: type, trials: int = 4, seed: int = 0) -> None:
    """``cls(d_model, d_ff)`` has ``w_1 = nn.Linear(d_model, d_ff)`` and ``w_2 = nn.Linear(d_ff, d_model)`` and
    computes ``w_2(activation(w_1(x)))`` for ``x (batch, seq_len, d_model)``. An ``activation="relu"|"gelu"``
    keyword and a ``dropout`` keyword are tested when the class accepts them."""
    gen = random.Random(seed)
    torch.manual_seed(seed)
    cls_name = _name(cls)
    activations = ["relu", "gelu"] if _accepts(cls, "activation") else ["relu"]
    runs = 0
    for trial in range(trials * len(activations)):
        activation = activations[trial % len(activations)]
        dtype = torch.float64 if trial % 3 == 2 else torch.float32
        d_model = gen.choice([4, 8, 12, 16])
        d_ff = d_model * gen.choice([2, 4])
        kwargs = {"activation": activation} if len(activations) > 1 else {}
        module = call(cls, d_model, d_ff, **kwargs, what=f"{cls_name}({d_model}, {d_ff}"
                      + (f", activation={activation!r})" if kwargs else ")"))
        expect(isinstance(module, nn.Module), "your feed-forward network must be an nn.Module.")
        expect_written(module, "feed-forward network")
        module = module.to(dtype).eval()
        w_1 = _linear(module, "w_1", d_model, d_ff, d_model, d_ff)
        w_2 = _linear(module, "w_2", d_ff, d_model, d_model, d_ff)
        ref = PositionwiseFeedForward(d_model, d_ff, activation=activation).to(dtype).eval()
        with torch.no_grad():  # the learner's weights go into the reference; biases far from zero
            w_1.bias.normal_(0, 0.5)
            w_2.bias.normal_(0, 0.5)
            for mine, theirs in ((ref.w_1, w_1), (ref.w_2, w_2)):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
        x = torch.randn(gen.randint(1, 3), gen.randint(2, 6), d_model, dtype=dtype)  # (batch, seq_len, d_model)
        got = output_of(call(module, x, what=f"{cls_name}.forward"))
        expect(got.dtype == dtype, f"your feed-forward network turned a {dtype} input into {got.dtype}.")
        # position-wise first (a mixing FFN differs from everything else too):
        # permuting the positions permutes the outputs
        perm = torch.randperm(x.size(1))
        got_perm = output_of(call(module, x[:, perm], what=f"{cls_name}.forward"))
        expect(close(got_perm.detach(), got.detach()[:, perm]),
               "permuting the positions of x did not just permute your output: the FFN must act on each position "
               "on its own (no mixing along the sequence axis).")
        with torch.no_grad():
            expected = ref(x)
            suspects = _ffn_suspects(x, ref, activation)
        diagnose(got.detach(), expected, suspects,
                 f"your FFN differs from w_2({activation}(w_1(x))) (shape {tuple(x.shape)}, {dtype})",
                 atol=1e-5 if dtype == torch.float32 else 1e-9)
        if trial == 0:  # once more on the chapter's device (a GPU, when there is one)
            check_on_device(module, x, expected=expected, what=f"your {cls_name}")
        runs += 1

    dropout_note = ""
    if _accepts(cls, "dropout"):
        module = call(cls, 8, 32, dropout=0.5, what=f"{cls_name}(8, 32, dropout=0.5)")
        ref = PositionwiseFeedForward(8, 32)
        with torch.no_grad():
            ref.w_1.load_state_dict(_linear(module, "w_1", 8, 32, 8, 32).state_dict())
            ref.w_2.load_state_dict(_linear(module, "w_2", 32, 8, 8, 32).state_dict())
        x = torch.randn(4, 16, 8)
        module.eval()
        first = output_of(call(module, x, what=f"{cls_name}.forward in eval mode"))
        second = output_of(call(module, x, what=f"{cls_name}.forward in eval mode"))
        expect(close(first.detach(), second.detach()) and close(first.detach(), ref(x).detach()),
               "in eval mode your output is random (two calls differ, or it differs from the dropout-free FFN): "
               "dropout is still applied in eval mode. Use an nn.Dropout module (it follows .train()/.eval()), "
               "or pass training=self.training to F.dropout.")
        module.train()
        noisy = output_of(call(module, x, what=f"{cls_name}.forward in training mode"))
        expect(not close(noisy.detach(), ref(x).detach()),
               "with dropout=0.5 in training mode your output equals the dropout-free FFN: dropout is never applied.")
        dropout_note = "; dropout off in eval, on in training"
    passed("check_feed_forward", f"matches tfm_lesson.PositionwiseFeedForward ({'/'.join(activations)}) on {runs} "
                                 f"random shapes in float32 and float64; acts on each position on its own"
                                 f"{dropout_note}")


# GELU ----------------------------------------------------------------------------------------------------------------
def check_gelu(fn: Callable[[Tensor], Tensor], seed: int = 0) -> None:
    """``fn(x)`` must return the exact GELU, ``x * Phi(x)`` with ``Phi`` the standard normal CDF, elementwise, from
    ``torch.erf`` (not ``F.gelu`` or ``nn.GELU``: the exercise says so)."""
    why = "The exercise asks for x * Phi(x) from its definition, with torch.erf, without calling F.gelu."
    forbid_ready_made(fn, {"PyTorch's own F.gelu": F.gelu, "PyTorch's own nn.GELU": nn.GELU}, "gelu", why)
    forbid_names(fn, ("gelu", "GELU"), "gelu", why)
    torch.manual_seed(seed)
    for dtype in (torch.float32, torch.float64):
        x = torch.cat([torch.linspace(-6, 6, 120, dtype=dtype), torch.randn(200, dtype=dtype) * 3])
        x = x.reshape(4, 10, 8)  # (batch, seq_len, d_ff): any shape, GELU is elementwise
        got = output_of(call(fn, x.clone(), what="your gelu"))
        expect(got.dtype == dtype, f"your gelu turned a {dtype} input into {got.dtype}.")
        expected = F.gelu(x)
        atol = 1e-6 if dtype == torch.float32 else 1e-12
        diagnose(got, expected, {
            "your gelu matches the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): close, "
            "but the paper's GELU (Hendrycks & Gimpel) and F.gelu are the exact x * Phi(x) with "
            "Phi(x) = 0.5 (1 + erf(x / sqrt(2))).": F.gelu(x, approximate="tanh"),
            "your gelu matches the sigmoid approximation x * sigmoid(1.702 x); use the exact x * Phi(x), "
            "Phi(x) = 0.5 (1 + erf(x / sqrt(2))).": x * torch.sigmoid(1.702 * x),
            "your gelu matches x * 0.5 (1 + erf(x)): the normal CDF needs erf(x / sqrt(2)), not erf(x).":
                x * 0.5 * (1 + torch.erf(x)),
            "your gelu matches 0.5 (1 + erf(x / sqrt(2))), which is Phi(x) alone: GELU multiplies it by x.":
                0.5 * (1 + torch.erf(x / math.sqrt(2))),
            "your gelu matches x * (1 + erf(x / sqrt(2))): Phi(x) has a factor 0.5 in front.":
                x * (1 + torch.erf(x / math.sqrt(2))),
            "your gelu matches ReLU, max(0, x): GELU is smooth, x * Phi(x), and slightly negative for x < 0.":
                F.relu(x),
            "your gelu matches x * sigmoid(x) (SiLU/swish), a different activation: GELU is x * Phi(x).":
                F.silu(x),
        }, f"your gelu differs from x * Phi(x) ({dtype})", atol=atol)
    passed("check_gelu", "exact x * Phi(x) on 640 values in [-6, 6] and beyond, float32 and float64")


# parameter budget of one encoder layer -------------------------------------------------------------------------------
def check_layer_budget(fn: Callable[[int, int, int], dict], seed: int = 0) -> None:
    """``fn(d_model, heads, d_ff)`` returns ``{"attention": int, "feed_forward": int, "norms": int}``, the
    parameters (weights and biases) of one encoder layer's self-attention, feed-forward network and two layer
    norms, counted with pen and paper (no module built)."""
    gen = random.Random(seed)
    configs = [(512, 8, 2048), (64, 4, 256), (96, 2, 200)]
    configs += [(h * gen.randint(2, 16), h, gen.randint(8, 300)) for h in (1, 3, 6)]
    for d_model, heads, d_ff in configs:
        got = call(fn, d_model, heads, d_ff, what=f"your function({d_model}, {heads}, {d_ff})")
        expect(got is not None, "your layer_budget is not written yet: it returns None. Return a dict with the keys "
               '"attention", "feed_forward" and "norms".')
        expect(isinstance(got, dict) and {"attention", "feed_forward", "norms"} <= set(got),
               'return a dict with the keys "attention", "feed_forward" and "norms".')
        layer = EncoderLayer(d_model, heads, d_ff, dropout=0.0)
        true = {"attention": sum(p.numel() for p in layer.self_attn.parameters()),
                "feed_forward": sum(p.numel() for p in layer.feed_forward.parameters()),
                "norms": sum(p.numel() for p in (*layer.norm1.parameters(), *layer.norm2.parameters()))}
        where = f"(d_model={d_model}, heads={heads}, d_ff={d_ff})"
        a, f, n = (int(got[k]) for k in ("attention", "feed_forward", "norms"))
        d = d_model
        if a != true["attention"]:
            hints = {
                4 * d * d: "you counted the four projection matrices but not their biases (4 d_model each).",
                3 * d * d + 3 * d: "you counted W^Q, W^K, W^V but forgot the output projection W^O.",
                3 * d * d: "you counted W^Q, W^K, W^V without biases and forgot W^O.",
                heads * (4 * d * d + 4 * d): "attention's count does not grow with heads: each head projects to "
                                             "d_k = d_model / heads, so all heads together are d_model x d_model.",
                heads * 4 * d * d: "attention's count does not grow with heads: each head projects to "
                                   "d_k = d_model / heads, so all heads together are d_model x d_model.",
                4 * d * d // heads + 4 * d: "you counted one head's share; W^Q, W^K, W^V, W^O are each d_model x "
                                            "d_model over all heads together.",
            }
            raise Mistake(f"attention {where}: got {a}, expected {true['attention']}. "
                          + hints.get(a, "W^Q, W^K, W^V and W^O are each d_model x d_model, plus a d_model bias "
                                         "each: 4 d_model^2 + 4 d_model, whatever the number of heads."))
        if f != true["feed_forward"]:
            hints = {
                2 * d * d_ff: "you counted W_1 and W_2 but not the biases b_1 (d_ff) and b_2 (d_model).",
                2 * d * d_ff + d_ff: "you forgot b_2 (d_model numbers).",
                2 * d * d_ff + d: "you forgot b_1 (d_ff numbers).",
                2 * d * d_ff + 2 * d_ff: "b_2 has d_model numbers (the output width), not d_ff.",
                2 * d * d_ff + 2 * d: "b_1 has d_ff numbers (the hidden width), not d_model.",
                d * d_ff + d_ff: "there are two linear maps, W_1 (d_model x d_ff) and W_2 (d_ff x d_model).",
            }
            raise Mistake(f"feed_forward {where}: got {f}, expected {true['feed_forward']}. "
                          + hints.get(f, "W_1 is d_model x d_ff, W_2 is d_ff x d_model, plus b_1 (d_ff) and "
                                         "b_2 (d_model): 2 d_model d_ff + d_ff + d_model."))
        if n != true["norms"]:
            hints = {0: "layer norm has learned parameters: a gain and a shift per feature.",
                     2 * d: "there are two layer norms per encoder layer (after attention and after the FFN), each "
                            "with a gain and a shift: 4 d_model.",
                     d: "each of the two layer norms has a gain AND a shift of d_model numbers: 4 d_model."}
            raise Mistake(f"norms {where}: got {n}, expected {true['norms']}. "
                          + hints.get(n, "two layer norms, each a gain and a shift of d_model numbers: 4 d_model."))
    passed("check_layer_budget", f"attention, feed-forward and norm counts right for {len(configs)} configurations, "
                                 "including the base model (d_model=512, heads=8, d_ff=2048)")
