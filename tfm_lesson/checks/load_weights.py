"""Checker for chapter 07's weight loading (split from :mod:`.layers`):

- ``check_load_encoder_layer(fn)``: ``fn(ours, theirs)`` copies an ``nn.TransformerEncoderLayer``'s weights into a
  :class:`tfm_lesson.EncoderLayer` in place.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..encoder import EncoderLayer
from ..interop import from_torch
from ._harness import Mistake, close, expect, passed, time_limit

__all__ = ["check_load_encoder_layer"]


# loading torch's weights ---------------------------------------------------------------------------------------------
def check_load_encoder_layer(fn: Callable) -> None:
    """Check ``fn(ours, theirs)``, which copies an ``nn.TransformerEncoderLayer``'s weights into a
    :class:`tfm_lesson.EncoderLayer` in place."""
    torch.manual_seed(12)
    d_model, heads, d_ff = 12, 3, 20
    theirs = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True).eval()
    ours = EncoderLayer(d_model, heads, d_ff, dropout=0.0).eval()
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    source = {k: v.clone() for k, v in theirs.state_dict().items()}
    try:
        with time_limit(None, what="your function"):
            result = fn(ours, theirs)
    except Mistake:
        raise
    except RuntimeError as exc:
        if "leaf Variable" in str(exc) or "in-place" in str(exc):
            raise Mistake("copying into a parameter that requires grad must happen under `with torch.no_grad():` "
                          f"(got: {exc})") from exc
        raise Mistake(f"your function raised RuntimeError: {exc}") from exc
    except Exception as exc:
        raise Mistake(f"your function raised {type(exc).__name__}: {exc}") from exc
    changed = next((k for k, v in theirs.state_dict().items() if not torch.equal(v, source[k])), None)
    expect(changed is None, f"your function changed `theirs` in place (its `{changed}`): the weights go FROM theirs "
                            "INTO ours. `a.copy_(b)` writes b into a, so it is ours_parameter.copy_(theirs_parameter)")
    expect(result is not None or any(not torch.equal(v, before[k]) for k, v in ours.state_dict().items()),
           "your load_encoder_layer is not written yet: it changed no weight of `ours`. Copy each of torch's weights "
           "into the matching parameter of `ours`, under `with torch.no_grad():`")
    ref = from_torch(theirs)
    d = d_model
    w_in = theirs.self_attn.in_proj_weight.detach()
    blocks = {"W^Q": w_in[:d], "W^K": w_in[d:2 * d], "W^V": w_in[2 * d:]}
    names = {"self_attn.w_q.weight": "W^Q", "self_attn.w_k.weight": "W^K", "self_attn.w_v.weight": "W^V"}
    want = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        p, target = p.detach(), want[name].detach()
        if torch.equal(p, target):
            continue
        if name in names:
            for label, block in blocks.items():
                if torch.equal(p, block):
                    raise Mistake(f"`{name}` holds the rows of in_proj_weight that belong to {label}: in_proj_weight "
                                  f"stacks W^Q, W^K, W^V (in that order), d_model rows each; {names[name]} is "
                                  f"rows {list(names.values()).index(names[name]) * d}:"
                                  f"{(list(names.values()).index(names[name]) + 1) * d}")
        if p.dim() == 2 and p.shape == target.T.shape and torch.equal(p, target.T):
            raise Mistake(f"`{name}` is transposed: nn.Linear stores weight as (out_features, in_features) in both "
                          "libraries, so copy it as is")
        if name.endswith("bias"):
            raise Mistake(f"`{name}` was not copied: the biases (in_proj_bias split in three, out_proj.bias, "
                          "linear1/linear2.bias, norm biases) are weights too")
        raise Mistake(f"`{name}` does not hold torch's weight. Match: self_attn.w_q/w_k/w_v <- in_proj_weight split "
                      "in three, w_o <- out_proj, feed_forward.w_1/w_2 <- linear1/linear2, norm1/norm2 <- norm1/norm2")
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        x = torch.randn(2, 5, d_model)
        with torch.no_grad():
            expect(close(ours(x), theirs(x)), "every parameter matches, yet the outputs differ; are the layer's "
                   "settings (norm_first, eps, activation) the same?")
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
    passed("check_load_encoder_layer", "every weight lands in its place; outputs equal nn.TransformerEncoderLayer's")
