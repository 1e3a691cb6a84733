"""Checkers for chapter 12 (looking inside a trained model):

- ``check_query_entropy(fn)``: ``fn(weights (batch, heads, q, k), mask)`` -> ``(batch, heads, q)`` normalised
  entropy of each query's attention over the keys it can see, 0 where it sees fewer than two;
- ``check_heads_off(fn)``: ``fn(attention, heads)`` a context manager in which the given heads of a tfm_lesson
  ``MultiHeadAttention`` contribute nothing (a forward pre-hook on ``w_o``), removed afterwards;
- ``check_rank_correlation(fn)``: ``fn(x, y)`` -> Spearman's rank correlation of two 1-D tensors.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ._harness import Mistake, call, close, expect, learner_side, passed

__all__ = ["check_query_entropy", "check_heads_off", "check_rank_correlation"]


# entropy per query -------------------------------------------------------------------------------------------------
def _weights(g: torch.Generator, batch: int, heads: int, q: int, mask: Tensor) -> Tensor:
    scores = torch.randn(batch, heads, q, mask.size(-1), generator=g) * 2
    full = mask.expand(batch, heads, q, mask.size(-1))
    w = scores.masked_fill(~full, float("-inf")).softmax(-1)
    return torch.nan_to_num(w, nan=0.0)  # rows without a key: all zero


def _entropy(w: Tensor, mask: Tensor, bug: str = "") -> Tensor:
    full = mask.expand_as(w)
    k = full.sum(-1).float()  # (batch, heads, q)
    if bug == "nan":
        h = -(w * w.log()).sum(-1)
    else:
        h = -(w * w.clamp_min(1e-12).log()).masked_fill(~full, 0).sum(-1)
    if bug == "raw":
        return torch.where(k >= 2, h, torch.zeros_like(h))
    if bug == "all_keys":
        return torch.where(k >= 2, h / math.log(w.size(-1)), torch.zeros_like(h))
    if bug == "no_guard":
        return h / k.log()
    if bug == "log2":
        return torch.where(k >= 2, h / k.log2(), torch.zeros_like(h))
    return torch.where(k >= 2, h / k.clamp_min(2).log(), torch.zeros_like(h))


def check_query_entropy(fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    """``fn(weights, mask)``: weights ``(batch, heads, q, k)`` (rows sum to 1 over the visible keys, 0 elsewhere),
    mask boolean broadcastable to them (True = visible). Returns ``(batch, heads, q)``: ``H / log(k_visible)`` with
    ``H = -sum_j a_j log a_j`` over the visible keys; 0 for queries that see fewer than two keys."""
    g = torch.Generator().manual_seed(120)
    lengths = torch.tensor([5, 3, 1])
    pad = torch.arange(6) < lengths[:, None]  # (3, 6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    for name, mask in (("padding", pad[:, None, None, :]), ("causal and padding", pad[:, None, None, :] & causal)):
        w = _weights(g, 3, 2, 6, mask)
        what = f"query_entropy(weights {tuple(w.shape)}, {name} mask {tuple(mask.shape)})"
        got = call(fn, w.clone(), mask.clone(), what=what)
        expect(isinstance(got, Tensor), f"{what} returned {type(got).__name__}, expected a tensor")
        got = got.detach().float()
        want = _entropy(w, mask)
        expect(got.shape == want.shape, f"{what} returned shape {tuple(got.shape)}, expected (batch, heads, q) = "
               f"{tuple(want.shape)}: one number per query")
        if close(got, want):
            continue
        if torch.isnan(got).any():
            raise Mistake(f"{what} holds NaN: masked keys have weight 0 and 0 * log(0) is NaN in floating point; "
                          "clamp the weights before the log (w.clamp_min(1e-12).log()) or zero the masked terms, and "
                          "give queries with fewer than two visible keys 0 (log 1 = 0 would divide by zero)")
        for bug, hint in (
                ("raw", "not normalised: divide the entropy by log(k), k the number of keys THIS query can see, so "
                        "that 1 means uniform whatever the length"),
                ("all_keys", "normalised by the log of ALL keys: padded and future keys cannot be attended, so "
                             "divide by the log of the number of VISIBLE keys (mask.sum(-1))"),
                ("no_guard", "queries that see fewer than two keys: their entropy is 0 and log(1) = 0, so 0 / 0; "
                             "give them 0"),
        ):
            if close(torch.nan_to_num(got, nan=-1.0), torch.nan_to_num(_entropy(w, mask, bug), nan=-1.0)):
                raise Mistake(hint)
        if close(got, -want):
            raise Mistake("the sign is wrong: H = -sum a log a is >= 0 (log a <= 0)")
        raise Mistake(f"{what} differs from -sum(a log a) / log(k_visible) (largest difference "
                      f"{(got - want).abs().max().item():.3g})")
    passed("check_query_entropy", "normalised by the visible keys, 0 for queries that see fewer than two, no NaN")


# switching heads off ----------------------------------------------------------------------------------------------
def _by_hand(mha, x: Tensor, mem: Tensor, heads) -> Tensor:
    from ..attention import scaled_dot_product_attention

    q, k, v = mha._split_heads(mha.w_q(x)), mha._split_heads(mha.w_k(mem)), mha._split_heads(mha.w_v(mem))
    out, _ = scaled_dot_product_attention(q, k, v)  # (batch, heads, q, d_k)
    out = out.clone()
    for h in heads:
        out[:, h] = 0.0
    return mha.w_o(mha._merge_heads(out))


def check_heads_off(fn: Callable) -> None:
    """``fn(attention, heads)``: a context manager (``with fn(mha, [0, 2]): ...``) in which the listed heads of a
    tfm_lesson ``MultiHeadAttention`` contribute nothing, and after which — even after an error inside the block —
    the module is exactly as before."""
    from ..attention import MultiHeadAttention

    torch.manual_seed(121)
    mha = MultiHeadAttention(d_model=16, heads=4, dropout=0.0).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    with torch.no_grad():
        before = mha(x, mem, mem)[0]
        for heads in ([0], [1, 3], [0, 1, 2, 3]):
            what = f"with heads_off(mha, {heads})"
            ctx = call(fn, mha, list(heads), what=f"heads_off(mha, {heads})")
            expect(hasattr(ctx, "__enter__") and hasattr(ctx, "__exit__"),
                   f"heads_off(...) returned {type(ctx).__name__}, expected a context manager: decorate the "
                   "generator with @contextlib.contextmanager")
            inside, after = learner_side(_inside_and_after)(ctx, mha, x, mem)
            want = _by_hand(mha, x, mem, heads)
            if not close(inside, want):
                if close(inside, before):
                    raise Mistake(f"{what}: the output did not change — is the hook registered on mha.w_o (as a "
                                  "forward PRE-hook, which sees the concatenated heads) and does it return the "
                                  "modified input as a tuple?")
                out_slice = before.clone()
                for h in heads:
                    out_slice[..., h * mha.d_k:(h + 1) * mha.d_k] = 0.0
                if close(inside, out_slice):
                    raise Mistake(f"{what}: you zeroed part of the OUTPUT of W^O. After the projection every feature "
                                  "mixes all heads; zero head h's slice of the INPUT of w_o (a forward pre-hook), "
                                  "features h * d_k to (h + 1) * d_k - 1")
                strided = _strided(mha, x, mem, heads)
                if close(inside, strided):
                    raise Mistake(f"{what}: wrong slice. The heads are concatenated one after another, so head h "
                                  "owns features h * d_k ... (h + 1) * d_k - 1, not every heads-th feature")
                raise Mistake(f"{what}: the output differs from W^O applied to the heads with {heads} zeroed")
            expect(close(after, before), f"after the block {what} the module still behaves differently: remove the "
                   "hook when the block ends (handle.remove() in a finally:)")
        ctx = call(fn, mha, [2], what="heads_off(mha, [2])")
        expect(close(learner_side(_after_an_error)(ctx, mha, x, mem), before), "after an error inside the block the hook stays: remove it in a "
               "try/finally, so that the module is restored whatever happens in the block")
    passed("check_heads_off", "the listed heads' slices zeroed before W^O, the hook removed afterwards, even after "
           "an error")


def _inside_and_after(ctx, mha, x: Tensor, mem: Tensor) -> tuple[Tensor, Tensor]:
    """The module's output inside the learner's block and after it (the learner's hook acts on the checker's module,
    so this runs where the learner's code lives: :func:`._replay.learner_side`)."""
    with ctx:
        inside = mha(x, mem, mem)[0]
    return inside, mha(x, mem, mem)[0]


def _after_an_error(ctx, mha, x: Tensor, mem: Tensor) -> Tensor:
    """The module's output after an error ended the learner's block."""
    try:
        with ctx:
            raise KeyError("an error inside the block")
    except KeyError:
        pass
    return mha(x, mem, mem)[0]


def _strided(mha, x, mem, heads):
    def hook(module, inputs):
        (z,) = inputs
        z = z.clone()
        for h in heads:
            z[..., h::mha.heads] = 0.0
        return (z,)

    handle = mha.w_o.register_forward_pre_hook(hook)
    try:
        return mha(x, mem, mem)[0]
    finally:
        handle.remove()


# rank correlation -------------------------------------------------------------------------------------------------
def _ranks(x: Tensor) -> Tensor:
    """Ranks 1..n, ties given the mean of their ranks."""
    order = x.argsort()
    ranks = torch.empty_like(x, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(x) + 1, dtype=torch.float64)
    for value in x.unique():
        same = x == value
        ranks[same] = ranks[same].mean()
    return ranks


def _pearson(a: Tensor, b: Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def check_rank_correlation(fn: Callable[[Tensor, Tensor], float]) -> None:
    """``fn(x, y)`` for two 1-D tensors of the same length -> Spearman's rank correlation: the Pearson correlation
    of their ranks, ties given the mean of the ranks they share (as ``scipy.stats.spearmanr``)."""
    g = torch.Generator().manual_seed(122)
    x1 = torch.randn(24, generator=g)
    cases = [(x1, x1 ** 3 + 0.1 * torch.randn(24, generator=g)),  # monotone but bent: Pearson < 1
             (torch.randn(30, generator=g), torch.randn(30, generator=g)),
             (torch.tensor([2., 0., 9., 0., 5., 2., 0., 1.]), torch.tensor([4., 3., 7., 1., 8., 2., 0., 4.]))]
    for x, y in cases:
        what = f"rank_correlation(x ({len(x)},), y ({len(y)},))"
        got = call(fn, x.clone(), y.clone(), what=what)
        if isinstance(got, Tensor) and got.numel() == 1:
            got = got.item()
        expect(isinstance(got, (int, float)) and not isinstance(got, bool),
               f"{what} returned {type(got).__name__}, expected one number (a float); did you forget a `return`?")
        got = float(got)
        want = _pearson(_ranks(x), _ranks(y))
        if abs(got - want) < 1e-5:
            continue
        if abs(got - _pearson(x, y)) < 1e-5:
            raise Mistake("that is Pearson's correlation of the values; Spearman's is Pearson's correlation of "
                          "their RANKS, so a few extreme values cannot dominate it")
        if abs(got - _pearson(x.argsort().double(), y.argsort().double())) < 1e-5:
            raise Mistake("argsort gives the ORDER (which element is smallest), not the ranks: the rank of each "
                          "element is x.argsort().argsort()")
        plain = _pearson(x.argsort().argsort().double(), y.argsort().argsort().double())
        if abs(got - plain) < 1e-5:
            raise Mistake("tied values must share the mean of their ranks (three values tied for ranks 1-3 all get "
                          "rank 2); here ties got distinct ranks")
        raise Mistake(f"{what} = {got:.4f}, expected {want:.4f} (Pearson's correlation of the ranks)")
    passed("check_rank_correlation", "Spearman's correlation: Pearson's of the ranks, ties averaged")


# the reference pieces, for a chapter whose later cells need working pieces ----------------------------------------
def _ref_query_entropy(weights: Tensor, mask: Tensor) -> Tensor:
    return _entropy(weights, mask)


def _ref_heads_off(attention, heads):
    from contextlib import contextmanager

    @contextmanager
    def off():
        d_k = attention.d_k

        def zero(module, inputs):
            (x,) = inputs
            x = x.clone()
            for h in heads:
                x[..., h * d_k:(h + 1) * d_k] = 0.0
            return (x,)

        handle = attention.w_o.register_forward_pre_hook(zero)
        try:
            yield
        finally:
            handle.remove()

    return off()


def _ref_rank_correlation(x: Tensor, y: Tensor) -> float:
    return _pearson(_ranks(x.flatten()), _ranks(y.flatten()))


PIECES = {"query_entropy": (check_query_entropy, _ref_query_entropy),
          "heads_off": (check_heads_off, _ref_heads_off),
          "rank_correlation": (check_rank_correlation, _ref_rank_correlation)}
