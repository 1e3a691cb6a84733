"""Checkers for chapter 03 (multi-head attention): splitting heads, merging heads, the whole module.

Each checker builds the classic wrong versions from the reference's own weights and, when the learner's
output matches one of them, says which mistake it is.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from ..attention import MultiHeadAttention
from ._harness import Mistake, call, check_on_device, close, diagnose, expect, output_of, passed
from ._parts import named_checks, part, parts
from ._rules import forbid_names, forbid_reference_base

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head_attention"]

DTYPES = (torch.float32, torch.float64)

SPLIT_NO_TRANSPOSE = (
    "heads look split without the transpose: reshaping (batch, len, d_model) straight to (batch, heads, len, d_k) "
    "hands each head a jumble of positions. View it as (batch, len, heads, d_k) first, then .transpose(1, 2)")
SPLIT_INTERLEAVED = (
    "each head got every heads-th feature instead of a contiguous block of d_k features: view the last "
    "dimension as (heads, d_k), not (d_k, heads)")
MERGE_NO_TRANSPOSE = (
    "heads look merged without the transpose: (batch, heads, len, d_k) must become (batch, len, heads, d_k) "
    "with .transpose(1, 2) BEFORE the reshape to (batch, len, d_model); a bare reshape mixes positions and heads")
MERGE_INTERLEAVED = (
    "the merged features are interleaved (d_k-major): after .transpose(1, 2) the tensor is (batch, len, heads, "
    "d_k); reshape it as it is, do not permute d_k in front of heads")
SCALE_D_MODEL = (
    "scores look scaled by sqrt(d_model), not sqrt(d_k): each head's dot products sum d_k = d_model / heads "
    "terms, so divide by sqrt(d_k)")
NO_SCALE = "scores look unscaled: divide Q K^T by sqrt(d_k) before the softmax"
SOFTMAX_AXIS = (
    "softmax over the wrong axis: each query's weights must sum to 1 over the keys, i.e. softmax(dim=-1) on "
    "(batch, heads, q_len, k_len)")
MASK_POLARITY = (
    "inverted mask polarity: in tfm_lesson True means *may attend*, so fill the scores where the mask is False "
    "(`scores.masked_fill(~mask, float('-inf'))`)")
KV_FROM_QUERY = (
    "keys and values look computed from the query: in cross-attention K and V come from the `key` and `value` "
    "arguments (the other sequence), only Q comes from `query`")
NO_W_O = "the output projection W^O looks missing: return self.w_o(merged heads)"
SPLIT_AND_MERGE_NO_TRANSPOSE = (
    "heads look split AND merged without the transpose (the two bare reshapes undo each other's layout, but "
    "attention then mixes the wrong features): split with .view(batch, len, heads, d_k).transpose(1, 2), merge "
    "with .transpose(1, 2).reshape(batch, len, d_model)")


FULLY_MASKED_NAN = (
    "{setting}: your output is NaN for the queries that see no key at all ({count} of them, the first at batch "
    "{b}, query {i}): every key of their mask row is False. Their scores are all -inf, and the softmax of a row of "
    "-inf is 0/0 = NaN. Such a query must get zero weights, so each head outputs 0 there and the module returns "
    "the bias of w_o (what w_o gives for an all-zero input), as tfm_lesson.MultiHeadAttention does. Use your safe "
    "masked_softmax of chapter 02 (exercise 3) for the mask and the softmax: it leaves a fully masked row unmasked "
    "before the softmax and zeroes it after")
FULLY_MASKED_UNIFORM = (
    "{setting}: for the queries that see no key at all your output is what equal weights over every key would give "
    "(each head outputs the mean of its values): a large finite fill such as -1e9 turns a fully masked row into a "
    "uniform one. Such a query must get zero weights, so each head outputs 0 there and the module returns the bias "
    "of w_o (what w_o gives for an all-zero input): zero the weights "
    "of a row with no visible key after the softmax, as your safe masked_softmax of chapter 02 (exercise 3) does")
FULLY_MASKED_OTHER = (
    "{setting}: your output is right for every query that sees a key, and wrong for the queries that see none. "
    "Such a query must get zero weights, so each head outputs 0 there and the module returns the bias of w_o (what "
    "w_o gives for an all-zero input), as tfm_lesson.MultiHeadAttention does. Zeroing the output after w_o, rather "
    "than the weights, gives 0 instead of that bias")


def _layer_hint(role: str, used: str) -> str:
    right = {"query": "w_q", "key": "w_k", "value": "w_v"}[role]
    return (f"the {role} looks projected with {used} instead of {right}: Q = query W^Q, K = key W^K, V = value W^V; "
            f"the layers hold different weights, so the wrong one changes the output in self-attention too")


# reference pieces, written plainly so the wrong versions differ from them by one thing ----------------------------
def _split(x: Tensor, heads: int, mode: str = "ok") -> Tensor:
    batch, length, d_model = x.shape
    d_k = d_model // heads
    if mode == "no_transpose":
        return x.reshape(batch, heads, length, d_k)
    if mode == "interleaved":
        return x.view(batch, length, d_k, heads).permute(0, 3, 1, 2)
    return x.view(batch, length, heads, d_k).transpose(1, 2)  # (batch, heads, len, d_k)


def _merge(x: Tensor, mode: str = "ok") -> Tensor:
    batch, heads, length, d_k = x.shape
    if mode == "no_transpose":
        return x.reshape(batch, length, heads * d_k)
    if mode == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(batch, length, heads * d_k)
    return x.transpose(1, 2).reshape(batch, length, heads * d_k)  # (batch, len, d_model)


def _mha_variant(ref: MultiHeadAttention, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, *,
                 scale: float | None = None, split: str = "ok", merge: str = "ok",
                 layers: tuple[str, str, str] = ("w_q", "w_k", "w_v"), kv_from_query: bool = False,
                 softmax_dim: int = -1, invert: bool = False, w_o: bool = True, fill: float = float("-inf")) -> Tensor:
    """Multi-head attention with the reference's weights and (optionally) one classic mistake."""
    if kv_from_query:
        key = value = query
    lq, lk, lv = (getattr(ref, name) for name in layers)
    q = _split(lq(query), ref.heads, split)  # (batch, heads, q_len, d_k)
    k = _split(lk(key), ref.heads, split)  # (batch, heads, k_len, d_k)
    v = _split(lv(value), ref.heads, split)  # (batch, heads, k_len, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(ref.d_k if scale is None else scale)  # (batch, heads, q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)  # a fully masked row: NaN (or uniform)
    out = _merge(scores.softmax(dim=softmax_dim) @ v, merge)  # (batch, q_len, d_model)
    return ref.w_o(out) if w_o else out


# split / merge --------------------------------------------------------------------------------------------------
def _shapes(gen: torch.Generator) -> list[tuple[int, int, int, int]]:
    """(batch, length, heads, d_k) with length != heads, so a forgotten transpose shows in the shape."""
    cases = [(2, 5, 4, 3), (3, 7, 2, 8), (1, 3, 8, 2)]
    for _ in range(2):
        heads = int(torch.randint(2, 6, (1,), generator=gen))
        length = heads + int(torch.randint(1, 5, (1,), generator=gen))
        cases.append((int(torch.randint(1, 4, (1,), generator=gen)), length, heads,
                      int(torch.randint(2, 7, (1,), generator=gen))))
    return cases


def _view_hint(exc: Mistake) -> Mistake:
    if "view size is not compatible" in str(exc):
        return Mistake(f"{exc}\nHint: after .transpose the tensor is not contiguous in memory; use .reshape(...) "
                       "(or .contiguous().view(...))")
    return exc


SPLIT_CHECKS = {"shape": 1, "dtype": 1, "values": 2}  # named checks, in order, with their weights (checks._parts)
MERGE_CHECKS = {"shape": 1, "dtype": 1, "values": 2}


def _outputs(fn: Callable, inputs: list[tuple[Tensor, int]], what: str, with_heads: bool) -> list[Tensor]:
    """The learner's output for each input: ``fn(x, heads)``, or ``fn(x)`` without ``with_heads``."""
    outs = []
    for x, heads in inputs:
        try:
            outs.append(output_of(call(fn, x.clone(), *((heads,) if with_heads else ()), what=what)))
        except Mistake as exc:
            raise _view_hint(exc) from None
    return outs


@named_checks(SPLIT_CHECKS)
def check_split_heads(fn: Callable[[Tensor, int], Tensor]) -> None:
    """``fn(x, heads)``: ``x (batch, len, d_model)`` -> ``(batch, heads, len, d_k)`` with ``d_k = d_model / heads``,
    head ``h`` holding features ``h*d_k .. (h+1)*d_k - 1`` of every position. Named checks: every case's shape,
    then dtype, then values."""
    gen = torch.Generator().manual_seed(3)
    cases = _shapes(gen)
    inputs = [(torch.randn(batch, length, heads * d_k, generator=gen, dtype=torch.float64).to(dtype), heads)
              for (batch, length, heads, d_k), dtype in zip(cases, DTYPES * len(cases))]
    with parts(check_split_heads):
        part("shape")
        outs = _outputs(fn, inputs, "your split_heads", with_heads=True)
        for (batch, length, heads, d_k), (x, _), got in zip(cases, inputs, outs):
            want_shape = (batch, heads, length, d_k)
            if got.shape == (batch, length, heads, d_k) and got.shape != want_shape:
                raise Mistake(f"output has shape {tuple(got.shape)} = (batch, len, heads, d_k): the view is right but "
                              "the .transpose(1, 2) that puts heads before positions is missing")
            expect(got.shape == want_shape, f"output has shape {tuple(got.shape)}, expected {want_shape}. "
                                            + _split_fallback(x, heads, want_shape))
        part("dtype")
        for (x, _), got in zip(inputs, outs):
            expect(got.dtype == x.dtype, f"output dtype is {got.dtype}, but x was {x.dtype}: keep the input's dtype")
        part("values")
        for (x, heads), got in zip(inputs, outs):
            want = _split(x, heads)
            diagnose(got, want, {SPLIT_NO_TRANSPOSE: _split(x, heads, "no_transpose"),
                                 SPLIT_INTERLEAVED: _split(x, heads, "interleaved")},
                     _split_fallback(x, heads, tuple(want.shape)), atol=0.0)
    passed("check_split_heads", f"{len(cases)} shapes, float32 and float64, every head holds its own block of d_k "
                                "features")


def _split_fallback(x: Tensor, heads: int, want: tuple) -> str:
    return (f"for x of shape {tuple(x.shape)} and heads={heads} the output should be (batch, heads, len, d_k) = "
            f"{want}, with head h holding features h*d_k:(h+1)*d_k")


def _merge_fallback(x: Tensor, want: tuple) -> str:
    return (f"for x of shape {tuple(x.shape)} the output should be (batch, len, d_model) = {want}, the heads' d_k "
            "features side by side for each position")


@named_checks(MERGE_CHECKS)
def check_merge_heads(fn: Callable[[Tensor], Tensor]) -> None:
    """``fn(x)``: ``x (batch, heads, len, d_k)`` -> ``(batch, len, d_model)``, the inverse of splitting. Named checks:
    every case's shape, then dtype, then values."""
    gen = torch.Generator().manual_seed(4)
    cases = _shapes(gen)
    inputs = [(torch.randn(batch, heads, length, d_k, generator=gen, dtype=torch.float64).to(dtype), heads)
              for (batch, length, heads, d_k), dtype in zip(cases, DTYPES * len(cases))]
    with parts(check_merge_heads):
        part("shape")
        outs = _outputs(fn, inputs, "your merge_heads", with_heads=False)
        for (batch, length, heads, d_k), (x, _), got in zip(cases, inputs, outs):
            want_shape = (batch, length, heads * d_k)
            expect(got.shape == want_shape, f"output has shape {tuple(got.shape)}, expected {want_shape}. "
                                            + _merge_fallback(x, want_shape))
        part("dtype")
        for (x, _), got in zip(inputs, outs):
            expect(got.dtype == x.dtype, f"output dtype is {got.dtype}, but x was {x.dtype}: keep the input's dtype")
        part("values")
        for (x, heads), got in zip(inputs, outs):
            want = _merge(x)
            diagnose(got, want, {MERGE_NO_TRANSPOSE: _merge(x, "no_transpose"),
                                 MERGE_INTERLEAVED: _merge(x, "interleaved")},
                     _merge_fallback(x, tuple(want.shape)), atol=0.0)
            expect(close(_split(got, heads), x, atol=0.0), "merging then splitting again should give back x exactly")
    passed("check_merge_heads", f"{len(cases)} shapes, float32 and float64, and split(merge(x)) == x")


# the whole module -----------------------------------------------------------------------------------------------
def _padding(batch: int, length: int, gen: torch.Generator) -> Tensor:
    """(batch, 1, 1, length), True = real key; every row keeps >= 1 real key and hides >= 1 pad."""
    real = torch.randint(1, length, (batch,), generator=gen)  # 1 .. length-1 real keys
    return (torch.arange(length)[None, :] < real[:, None])[:, None, None, :]


def _left_padded(batch: int, length: int, gen: torch.Generator) -> Tensor:
    """(batch, 1, 1, length), True = real key, with 1 .. length-1 pads at the START of each sequence: under the
    causal mask, the first (padded) queries of each sequence see no key at all."""
    pads = torch.randint(1, length, (batch,), generator=gen)
    return (torch.arange(length)[None, :] >= pads[:, None])[:, None, None, :]


def _fully_masked(got: Tensor, want: Tensor, empty: Tensor, suspects: dict[str, Tensor], uniform: Tensor,
                  setting: str, atol: float) -> None:
    """Compare an output where some queries see no key (``empty`` ``(batch, q_len)``): a NaN there, then the other
    queries (with the usual hints), then the empty queries' values. Raises a Mistake (the outputs differ)."""
    got, want, empty = got.detach().cpu(), want.detach().cpu(), empty.cpu()
    if torch.isnan(got[empty]).any() and not torch.isnan(got[~empty]).any():
        b, i = (int(n) for n in (torch.isnan(got).any(-1) & empty).nonzero()[0])
        raise Mistake(FULLY_MASKED_NAN.format(setting=setting, count=int(empty.sum()), b=b, i=i))
    diagnose(got[~empty], want[~empty], {h: s[~empty] for h, s in suspects.items() if s.shape == want.shape},
             f"{setting}: your output differs from tfm_lesson.MultiHeadAttention loaded with the same weights",
             atol=atol)
    if close(got[empty], uniform.detach().cpu()[empty], atol=atol):
        raise Mistake(FULLY_MASKED_UNIFORM.format(setting=setting))
    raise Mistake(FULLY_MASKED_OTHER.format(setting=setting))


def _check_layout(model: nn.Module, d_model: int) -> None:
    for name in ("w_q", "w_k", "w_v", "w_o"):
        layer = getattr(model, name, None)
        expect(isinstance(layer, nn.Linear),
               f"your module needs an attribute `{name}` that is nn.Linear(d_model, d_model) (as in "
               f"tfm_lesson.MultiHeadAttention), got {type(layer).__name__}")
        expect(layer.in_features == d_model and layer.out_features == d_model,
               f"`{name}` must map d_model={d_model} to d_model={d_model} features (all heads side by side), got "
               f"nn.Linear({layer.in_features}, {layer.out_features})")


def _suspects(ref: MultiHeadAttention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> dict[str, Tensor]:
    def run(**kw) -> Tensor:
        try:
            return _mha_variant(ref, q, k, v, mask, **kw)
        except RuntimeError:  # this mistake cannot even run on these shapes (the learner's would have crashed)
            return torch.full((), float("inf"))

    s = {}
    if mask is not None:
        s[MASK_POLARITY] = run(invert=True)
    s[SCALE_D_MODEL] = run(scale=ref.d_model)
    s[NO_SCALE] = run(scale=1.0)
    s[MERGE_NO_TRANSPOSE] = run(merge="no_transpose")
    s[SPLIT_NO_TRANSPOSE] = run(split="no_transpose")
    s[SPLIT_AND_MERGE_NO_TRANSPOSE] = run(split="no_transpose", merge="no_transpose")
    s[SPLIT_INTERLEAVED] = run(split="interleaved", merge="interleaved")
    s[SOFTMAX_AXIS] = run(softmax_dim=-2)
    for role, i, used in (("query", 0, "w_k"), ("query", 0, "w_v"), ("key", 1, "w_q"), ("key", 1, "w_v"),
                          ("value", 2, "w_k"), ("value", 2, "w_q")):
        layers = ["w_q", "w_k", "w_v"]
        layers[i] = used
        s[_layer_hint(role, used)] = run(layers=tuple(layers))
    if q is not k:
        s[KV_FROM_QUERY] = run(kv_from_query=True)
    s[NO_W_O] = run(w_o=False)
    return s


def _cross_call(model: nn.Module, q: Tensor, k: Tensor, v: Tensor, kwargs: dict, kind: str, q_len: int,
                k_len: int) -> Tensor:
    """The learner's forward; a shape error in cross-attention with q_len != k_len gets the two likely causes."""
    try:
        return output_of(call(model, q, k, v, what="your forward(query, key, value, mask)", **kwargs))
    except Mistake as exc:
        if kind == "cross" and q_len != k_len and ("size" in str(exc) or "shape" in str(exc)):
            raise Mistake(f"{exc}\nIn this cross-attention the query has q_len={q_len} positions and the key and "
                          f"value k_len={k_len}. K and V come from the other sequence, K = w_k(key) and "
                          "V = w_v(value) (one of them made from the query has the wrong length), and they are split "
                          "into heads with the key's length, key.size(1), not the query's.") from exc
        raise


def _written_yourself(cls: type[nn.Module]) -> None:
    """Exercise 3's rule: the class derives from nn.Module, not the package's module, and calls no ready-made attention."""
    instead = "derive from nn.Module and write the scores, mask, softmax and weighted sum"
    forbid_reference_base(cls, "class", instead)
    forbid_names(cls, ("MultiHeadAttention", "MultiheadAttention", "multi_head_attention_forward",
                       "scaled_dot_product_attention", "fast_attention"), "class",
                 f"That is a ready-made attention; the exercise asks you to {instead} yourself")


def _mha_cases(gen: torch.Generator) -> list[tuple]:
    """(batch, q_len, k_len, d_model, heads, kind, mask, dtype): unmasked first, so a softmax-axis or scaling bug is
    named before masks come into play; cross-attention always has query != key (and mostly q_len != k_len)."""
    cases = [
        (2, 5, 5, 16, 4, "self", None, torch.float32),
        (3, 4, 6, 12, 3, "cross", None, torch.float64),
        (2, 6, 6, 8, 2, "self", "padding", torch.float32),
        (3, 5, 7, 24, 4, "cross", "padding", torch.float64),
        (2, 4, 4, 20, 5, "cross", "padding", torch.float32),
        (2, 6, 6, 16, 4, "self", "causal", torch.float64),
    ]
    for j in range(2):  # and two random settings
        heads = int(torch.randint(2, 5, (1,), generator=gen))
        q_len = int(torch.randint(2, 7, (1,), generator=gen))
        cases.append((int(torch.randint(1, 4, (1,), generator=gen)), q_len,
                      q_len + int(torch.randint(1, 4, (1,), generator=gen)),
                      heads * int(torch.randint(2, 7, (1,), generator=gen)), heads, "cross",
                      ("padding", None)[j], DTYPES[j]))
    cases += [  # queries that see no key at all: weights 0, never NaN
        (3, 6, 6, 16, 4, "self", "causal, left-padded", torch.float32),
        (3, 4, 5, 12, 3, "cross", "padding, one source all padding", torch.float64),
    ]
    return cases


def _mha_mask(mask_kind: str | None, batch: int, q_len: int, k_len: int, gen: torch.Generator) -> Tensor | None:
    """The mask a case names: None, padding (batch, 1, 1, k_len), causal (q_len, k_len), or one that leaves some
    queries no key at all."""
    mask = None
    if mask_kind == "padding":
        mask = _padding(batch, k_len, gen)  # (batch, 1, 1, k_len)
    elif mask_kind == "causal":
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()  # (q_len, k_len)
    elif mask_kind == "causal, left-padded":  # the padded first queries see only pads: no key at all
        mask = _left_padded(batch, k_len, gen) & torch.ones(q_len, k_len, dtype=torch.bool).tril()
    elif mask_kind == "padding, one source all padding":  # an empty sentence in the batch
        mask = _padding(batch, k_len, gen)  # (batch, 1, 1, k_len)
        mask[1] = False  # sequence 1: every key is padding
    return mask


MHA_CHECKS = {"projections": 1, "without a mask": 2, "with a mask": 1, "queries that see no key": 1}


def _mha_part(mask_kind: str | None) -> str:
    """Which named check a case belongs to (its mask says)."""
    if mask_kind is None:
        return "without a mask"
    return "with a mask" if mask_kind in ("padding", "causal") else "queries that see no key"


def _mha_build(cls: type[nn.Module], case: tuple, gen: torch.Generator) -> tuple:
    """The reference, the learner's module loaded with its weights, and the inputs of one case (the reference's and
    the learner's weights drawn from the global generator, the inputs from ``gen``, in the cases' order)."""
    batch, q_len, k_len, d_model, heads, kind, mask_kind, dtype = case
    ref = MultiHeadAttention(d_model, heads).to(dtype).eval()
    model = call(cls, d_model, heads, what=f"{getattr(cls, '__name__', 'your class')}({d_model}, {heads})")
    expect(isinstance(model, nn.Module), "your class must be an nn.Module (subclass torch.nn.Module)")
    _check_layout(model, d_model)
    missing = model.load_state_dict(ref.state_dict(), strict=False).missing_keys
    expect(not any(m.split(".")[0] in ("w_q", "w_k", "w_v", "w_o") for m in missing),
           f"could not load the reference's weights: missing {missing}")
    model = model.to(dtype).eval()
    x = torch.randn(batch, q_len, d_model, generator=gen, dtype=torch.float64).to(dtype)
    if kind == "self":
        q = k = v = x
    else:
        q = x  # (batch, q_len, d_model), e.g. the decoder's states
        k = v = torch.randn(batch, k_len, d_model, generator=gen, dtype=torch.float64).to(dtype)  # the encoder's
    return ref, model, q, k, v, _mha_mask(mask_kind, batch, q_len, k_len, gen)


def _mha_compare(case: tuple, ref: nn.Module, model: nn.Module, q: Tensor, k: Tensor, v: Tensor,
                 mask: Tensor | None) -> None:
    """The learner's output for one case against the reference's; a Mistake naming what differs."""
    batch, q_len, k_len, d_model, heads, kind, mask_kind, dtype = case
    empty = None if mask is None else ~mask.expand(batch, heads, q_len, k_len).any(-1).all(1)  # (batch, q_len)
    kwargs = {} if mask is None else {"mask": mask}
    with torch.no_grad():
        got = _cross_call(model, q, k, v, kwargs, kind, q_len, k_len)
        want, _ = ref(q, k, v, mask)
        want_explicit, _ = ref(q, k, v, mask, need_weights=True)
        assert close(want, want_explicit), "internal: reference paths disagree"
        setting = (f"{kind}-attention, batch={batch}, q_len={q_len}, k_len={k_len}, d_model={d_model}, "
                   f"heads={heads}, mask={mask_kind}, {str(dtype).replace('torch.', '')}")
        if got.shape != want.shape:
            raise Mistake(f"{setting}: output has shape {tuple(got.shape)}, expected (batch, q_len, d_model) "
                          f"= {tuple(want.shape)}")
        expect(got.dtype == dtype, f"{setting}: output dtype {got.dtype}, expected {dtype}")
        tol = 1e-5 if dtype == torch.float32 else 1e-9
        if close(got, want, atol=tol):
            if dtype == torch.float32 and mask_kind == "padding":  # once more on the chapter's GPU, if any
                check_on_device(model, q, k, v, mask, expected=want, what="your module", atol=1e-4)
            return
        if empty is not None and bool(empty.any()):
            _fully_masked(got, want, empty, _suspects(ref, q, k, v, mask),
                          _mha_variant(ref, q, k, v, mask, fill=-1e9), setting, atol=tol)
        diagnose(got, want, _suspects(ref, q, k, v, mask),
                 f"{setting}: your output differs from tfm_lesson.MultiHeadAttention loaded with the same "
                 "weights", atol=tol)


@named_checks(MHA_CHECKS)
def check_multi_head_attention(cls: type[nn.Module], *, written_yourself: bool = True) -> None:
    """``cls(d_model, heads)`` with ``w_q, w_k, w_v, w_o`` ``nn.Linear(d_model, d_model)`` layers and
    ``forward(query, key, value, mask=None)`` returning the output ``(batch, q_len, d_model)`` or
    ``(output, weights)``. The reference's weights are loaded into it; self- and cross-attention, with and
    without masks (True = may attend), in float32 and float64, must give the reference's output. That includes
    queries whose keys are all masked: their attention weights are 0, so their output is ``w_o(0)``, never NaN.
    Named checks, in order: the projections (every setting's module built and loaded), the settings without a
    mask, those with a mask, those with queries that see no key.

    ``written_yourself=True`` applies chapter 03 exercise 3's rule first (no subclass of the package's
    ``MultiHeadAttention``, no ready-made attention called); chapter 13 derives from the package's class on purpose,
    to change one line of a written-out ``forward``, and passes ``False``."""
    if written_yourself:
        _written_yourself(cls)
    gen = torch.Generator().manual_seed(5)
    cases = _mha_cases(gen)
    with torch.random.fork_rng(devices=[]), parts(check_multi_head_attention):
        torch.manual_seed(5)
        part("projections")
        built = [_mha_build(cls, case, gen) for case in cases]
        for name in list(MHA_CHECKS)[1:]:
            part(name)
            for case, setting in zip(cases, built):
                if _mha_part(case[6]) == name:
                    _mha_compare(case, *setting)
    passed("check_multi_head_attention", f"{len(cases)} settings (self- and cross-attention, padding and causal "
                                         "masks, queries with no visible key, float32 and float64) match "
                                         "tfm_lesson.MultiHeadAttention")
