# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -cellView,-jupyter
#     formats: ipynb,py//py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %%
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import glob, importlib, importlib.util, os, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    # the course's release from PyPI, else from GitHub; or a wheel put beside this notebook; or what you name
    sources = ["tfm-lesson==0.1.0", "tfm-lesson @ git+https://github.com/tfm-lesson/tfm_lesson@v0.1.0"]
    sources = sorted(glob.glob("tfm_lesson-*.whl"))[-1:] or sources  # or a wheel put beside this notebook
    if os.environ.get("TFM_LESSON_SOURCE"):  # anything pip can install
        sources = [os.environ["TFM_LESSON_SOURCE"]]
    failures = []
    for source in sources:
        print("installing tfm_lesson from", source, flush=True)
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], capture_output=True, text=True)
        if pip.returncode == 0:
            break
        failures.append("  " + source + ": " + ((pip.stderr or pip.stdout).strip().splitlines() or ["?"])[-1])
    importlib.invalidate_caches()
    if importlib.util.find_spec("tfm_lesson") is None:
        class SetupFailed(Exception):
            def _render_traceback_(self):  # Jupyter and Colab show this message alone, without a traceback
                return str(self).splitlines()

        def not_installed(shell, etype, value, tb, tb_offset=None):  # later cells: one line, not a traceback
            if str(getattr(value, "name", "")).split(".")[0] == "tfm_lesson":
                value = SetupFailed("tfm_lesson is not installed: the set-up cell (the first code cell) says why.")
            shell.showtraceback((type(value), value, tb))

        if "get_ipython" in globals():
            get_ipython().set_custom_exc((ModuleNotFoundError,), not_installed)
        raise SetupFailed("\n".join([
            "The set-up failed: pip could not install tfm_lesson. What pip said:", *failures,
            "Two ways out; then run this cell again:",
            "  1. set TFM_LESSON_SOURCE to something pip can install, in a cell above this one, e.g.",
            "     os.environ['TFM_LESSON_SOURCE'] = 'git+https://github.com/OWNER/REPOSITORY@TAG' (or a wheel's path);",
            "  2. or download the wheel (tfm_lesson-...-py3-none-any.whl) from the release page",
            "     https://github.com/tfm-lesson/tfm_lesson/releases/tag/v0.1.0",
            "     and put it beside this notebook (Colab: the folder icon on the left, then upload).",
            "The cells below need tfm_lesson: they will not run until this one succeeds."]))

# %% [markdown]
# # 13 · Common mistakes
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/13_common_mistakes.ipynb)
#
# A Transformer written from scratch almost never crashes. It has the right shapes, its loss goes down,
# and it can still be wrong in a way that costs you days: a scale off by a factor of two, a mask that is
# silently ignored, a gradient that never reaches the residual path. This chapter collects bugs of the kind
# that from-scratch implementations make, writes each one down in a few lines, shows what it does
# to the numbers, and names the checker of `tfm_lesson.checks` that catches it.
#
# **What you will learn**
#
# - why these bugs hide: most of them keep every shape right, and many only show on a corner case
#   (a fully masked row, float16, a mask that lets each position see only itself);
# - fifteen classic mistakes, each with its smallest reproduction, its symptom and the checker whose hint
#   names it;
# - one of them (a causal mask off by one) trained for a few hundred steps next to the correct model: the
#   buggy loss looks *better*, and the model is useless;
# - the designs such implementations often get right (learned positions, a fused QKV projection, separate
#   $W^Q, W^K, W^V$, masks built from pad ids, pre-norm with a log-probability generator), each shown to be an
#   option of `tfm_lesson` or numerically equal to it.

# %% [markdown]
# ## Intuition: why a wrong Transformer still trains
#
# A neural network is a very forgiving program. If attention is scaled by the wrong constant, the weights
# are simply a little flatter, and the projections learn to compensate. If the heads are merged in the
# wrong order, each position's vector is filled with pieces of other positions, and the layers around it
# learn to make what use they can of that mixture. If the feed-forward network has no activation,
# the model is a bit less expressive, nothing more. The loss goes down in every case, so "it trains" is no
# evidence that it is right.
#
# The only reliable test is **parity**: load the *same weights* into your module and into a reference,
# feed both the *same inputs*, including the awkward ones, and compare the outputs to a tolerance. That is
# what every checker in `tfm_lesson.checks` does. When the outputs differ, the checker also runs the
# classic wrong versions on the same weights; if your output matches one of them exactly, the checker knows
# *which* mistake you made and says so.
#
# A checker raises an `AssertionError` (its subclass `Mistake`) with the hint. In this chapter we want to
# read the hints without stopping the notebook, so we wrap each call:

# %%
import copy
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson
from tfm_lesson import (EncoderLayer, LayerNorm, MultiHeadAttention, Transformer, causal_mask, padding_mask,
                        scaled_dot_product_attention, sinusoidal_table, viz, widgets)
from tfm_lesson.train.loop import cpu_threads
from tfm_lesson.checks import (check_attention, check_causal_mask, check_decoder_mask, check_encoder_layer,
                               check_feed_forward, check_generator, check_layer_norm,
                               check_learned_positional_encoding, check_multi_head_attention, check_padding_mask,
                               check_positional_encoding)

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()


def hint_of(check) -> str:
    """Run ``check()``; return the checker's hint if it found a mistake."""
    try:
        check()
    except AssertionError as exc:
        return "✘ " + str(exc)
    return "(no mistake found)"


# %% [markdown]
# ## The math we hold the code to
#
# Everything below is measured against the paper's formulas and, for layer norm and pre-norm, which the paper
# does not write out, against the standard definitions (layer norm: Ba et al., 2016; pre-norm: tensor2tensor's
# default, studied by Xiong et al., 2020):
#
# - attention: $\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$,
#   with $d_k = d_{model}/h$ for each of the $h$ heads;
# - multi-head attention: $\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)W^O$ with
#   $\mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$;
# - layer norm: $\gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta$, with the biased variance
#   $\sigma^2$ over the $d_{model}$ features of one position;
# - feed-forward: $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$;
# - positions: $PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d_{model}})$,
#   $PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d_{model}})$, added at position $pos$ of each sequence;
# - a sub-layer with its residual: $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$ (post-norm, the paper) or
#   $x + \mathrm{Sublayer}(\mathrm{LayerNorm}(x))$ (pre-norm);
# - masks: booleans, **True = may attend**, broadcastable to `(batch, heads, q_len, k_len)`.
#
# ## Part 1 · Mistakes inside attention
#
# We write each buggy multi-head attention as a small subclass of `tfm_lesson.MultiHeadAttention` that
# overrides `forward`: it keeps the reference's parameters `w_q, w_k, w_v, w_o` (so a checker can load the
# reference's weights into it) and changes one line. First the correct version, written out, so the bugs
# differ from it by exactly one thing. Chapter 03's exercise forbids exactly this kind of subclass (there the
# reference could do the work for you), so here we tell the checker that we derive from it on purpose:
# `written_yourself=False` skips that rule and keeps every other check.

# %%
# NBVAL_CHECK_OUTPUT
class WrittenOut(MultiHeadAttention):
    """Multi-head attention, every step visible; subclasses flip one switch each."""
    scale_by = "d_k"  # the bug below: "d_model"
    query_layer = "w_q"  # the bug below: "w_k"
    merge_transpose = True  # the bug below: False

    def forward(self, query, key, value, mask=None, need_weights=True, cache=None):  # the reference's signature
        if cache is not None:
            raise NotImplementedError("this written-out version recomputes every key and value: no cache")
        batch, q_len, _ = query.shape
        q = self._split_heads(getattr(self, self.query_layer)(query))  # (batch, heads, q_len, d_k)
        k = self._split_heads(self.w_k(key))  # (batch, heads, k_len, d_k)
        v = self._split_heads(self.w_v(value))  # (batch, heads, k_len, d_k)
        scale = math.sqrt(self.d_k if self.scale_by == "d_k" else self.d_model)
        scores = q @ k.transpose(-2, -1) / scale  # (batch, heads, q_len, k_len)
        if mask is not None:
            has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1): False for a query that sees no key
            scores = scores.masked_fill(~(mask | ~has_key), float("-inf"))  # such a row stays finite...
        weights = scores.softmax(dim=-1)  # (batch, heads, q_len, k_len)
        if mask is not None:
            weights = weights.masked_fill(~has_key, 0.0)  # ...and gets zero weights (mistake 4 below)
        out = weights @ v  # (batch, heads, q_len, d_k)
        if self.merge_transpose:
            out = out.transpose(1, 2)  # (batch, q_len, heads, d_k)
        return self.w_o(out.reshape(batch, q_len, self.d_model)), weights  # (batch, q_len, d_model)


check_multi_head_attention(WrittenOut, written_yourself=False)

# %% [markdown]
# ### Mistake 1 · scores scaled by $\sqrt{d_{model}}$ instead of $\sqrt{d_k}$
#
# Each head's dot product sums $d_k$ products, so its variance is about $d_k$; dividing by $\sqrt{d_k}$
# brings it back to 1. Dividing by $\sqrt{d_{model}} = \sqrt{h}\,\sqrt{d_k}$ shrinks every score by another
# $\sqrt{h}$: with 8 heads the logits are almost 3 times too small and every head's softmax is flatter than
# it should be. No error, no NaN, just blurrier attention. The symptom we measure: the **entropy** of the
# attention rows (in nats; a uniform row over $n$ keys has $\ln n$).

# %%
class ScaledByDModel(WrittenOut):
    scale_by = "d_model"  # BUG: sqrt(d_model) = sqrt(heads) * sqrt(d_k)


def entropy(weights):  # (..., k_len) -> mean entropy of the rows, in nats
    return float(-(weights * weights.clamp_min(1e-12).log()).sum(-1).mean())


torch.manual_seed(0)
right = WrittenOut(64, 8).eval()
wrong = ScaledByDModel(64, 8).eval()
wrong.load_state_dict(right.state_dict())
x = torch.randn(1, 10, 64) * 2
with torch.no_grad():
    w_right, w_wrong = right(x, x, x)[1], wrong(x, x, x)[1]  # (1, 8, 10, 10)
print(f"uniform entropy ln(10) = {math.log(10):.2f}")
print(f"entropy, sqrt(d_k):     {entropy(w_right):.2f}")
print(f"entropy, sqrt(d_model): {entropy(w_wrong):.2f}   (flatter)")

# %% mystnb={"image": {"alt": "Two rows of four attention heatmaps: with the correct sqrt(d_k) scale (top) some weights are bright, with the wrong sqrt(d_model) scale (bottom) every map is almost uniform."}}
viz.show_heads(torch.stack([w_right[0, :4], w_wrong[0, :4]]), title="heads 0-3: sqrt(d_k) (top) vs sqrt(d_model)",
               row_label="scale")

# %%
# NBVAL_CHECK_OUTPUT
print(hint_of(lambda: check_multi_head_attention(ScaledByDModel, written_yourself=False)))

# %% [markdown]
# ### Mistake 2 · a cross-attention whose query goes through the key layer
#
# Project the query with `w_k` instead of `w_q` and two things go wrong. First, $W^Q$ is never used: it gets
# no gradient and stays at its initial value. Second, in self-attention, where `query` and `key` are the same
# tensor $x$, the scores become $xW^K(xW^K)^\top$, a **symmetric** matrix: query $i$'s score for key $j$
# equals query $j$'s score for key $i$. The layer can no longer express "$i$ looks at $j$ but $j$ does not look
# at $i$" (a word attending to its verb, say) in its scores; only the softmax, normalising each row on its own,
# makes the weights differ. In cross-attention the query comes from the decoder and the keys from the
# encoder, so the scores are not even square, but the wrong matrix is still used. Symptoms: symmetric
# self-attention scores, and `w_q` receives **no gradient at all**.

# %%
# NBVAL_CHECK_OUTPUT
class QueryWithKeyLayer(WrittenOut):
    query_layer = "w_k"  # BUG: Q = query W^K


torch.manual_seed(0)
buggy = QueryWithKeyLayer(16, 4)
x_self = torch.randn(1, 5, 16)
with torch.no_grad():
    for name, query_layer in (("correct, w_q", buggy.w_q), ("buggy,   w_k", buggy.w_k)):
        scores = buggy._split_heads(query_layer(x_self)) @ buggy._split_heads(buggy.w_k(x_self)).transpose(-2, -1)
        print(f"{name}: self-attention scores symmetric:", torch.allclose(scores, scores.transpose(-2, -1), atol=1e-5))
decoder_states, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
buggy(decoder_states, memory, memory)[0].sum().backward()
print("w_q received a gradient:", buggy.w_q.weight.grad is not None)
print(hint_of(lambda: check_multi_head_attention(QueryWithKeyLayer, written_yourself=False)))

# %% [markdown]
# ### Mistake 3 · heads merged without the transpose
#
# After attention the heads are `(batch, heads, q_len, d_k)`. A bare `.reshape(batch, q_len, d_model)` is
# legal (the number of elements matches) but it lays the memory out head by head, so "position 0" of the
# result holds the first few positions of head 0. Positions leak into each other: changing the **second**
# token of the input changes the output at the **first** position even without any attention between them.
# We show that with a mask that lets each position attend only to itself: with a correct merge, position 0
# cannot depend on position 1.
#
# No training can undo this. $W^O$ acts on each position's vector on its own, so it cannot fetch back the
# pieces of position 0 that the reshape put into other positions' rows. Under a causal mask it is worse: the
# output at position 0 now holds attention results computed for the next few positions, which saw later
# tokens. The decoder reads the future, as with mistake 8's `tril(1)`, and its training loss looks better than
# it should.

# %%
class MergeWithoutTranspose(WrittenOut):
    merge_transpose = False  # BUG: (batch, heads, q_len, d_k).reshape(batch, q_len, d_model)


def position_0_depends_on_position_1(cls):
    torch.manual_seed(0)
    module = cls(16, 4).eval()
    only_self = torch.eye(6, dtype=torch.bool)  # (q_len, k_len): each position sees itself only
    x = torch.randn(1, 6, 16)
    x2 = x.clone()
    x2[0, 1] += 1.0  # change position 1 only
    with torch.no_grad():
        return not torch.allclose(module(x, x, x, only_self)[0][0, 0], module(x2, x2, x2, only_self)[0][0, 0])


# NBVAL_CHECK_OUTPUT
print("correct merge: position 0 depends on position 1:", position_0_depends_on_position_1(WrittenOut))
print("bare reshape:  position 0 depends on position 1:", position_0_depends_on_position_1(MergeWithoutTranspose))

# %%
# NBVAL_CHECK_OUTPUT
print(hint_of(lambda: check_multi_head_attention(MergeWithoutTranspose, written_yourself=False)))

# %% [markdown]
# ## Part 2 · Mistakes with masks
#
# Masks are where most silent bugs live, because a wrong mask is still a tensor of the right shape. For
# these we use plain attention functions `fn(query, key, value, mask=None)` and `check_attention`, which
# tries 2-D and `(batch, heads)` inputs, several masks, fully masked rows, and four dtypes.
#
# ### Mistake 4 · `-inf` masking that gives NaN on fully masked rows
#
# Filling the masked scores with $-\infty$ is right, until a query has **no** visible key. The key-only
# padding masks of this course never do that to a right-padded batch: they hide padded *keys*, so even a padded
# query still sees the real tokens (chapter 08). Fully masked rows come from other masks: a sequence that is
# padding only (an empty sentence in the batch), a **left**-padded target under the causal mask (the causal
# mask lets the first query see only itself, a pad that the padding mask hides, so it sees no key), or a mask that hides padded *queries* too, such as the outer
# product `pad[:, None, :, None] & pad[:, None, None, :]` some implementations build. Such a row is all
# $-\infty$, and
# $\mathrm{softmax}$ computes $e^{-\infty} / \sum e^{-\infty} = 0/0$ = NaN. One NaN in the forward pass
# becomes NaN in every gradient, and the whole model is NaN after one optimiser step.

# %%
def attention_neg_inf(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # BUG: a row with no True becomes all -inf
    return scores.softmax(dim=-1) @ value


q = k = v = torch.randn(1, 3, 4)
mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])  # query 1 sees nothing

# NBVAL_CHECK_OUTPUT
print("buggy,      query 1:", attention_neg_inf(q, k, v, mask)[0, 1])
print("tfm_lesson, query 1:", scaled_dot_product_attention(q, k, v, mask)[0][0, 1])

# %%
# NBVAL_CHECK_OUTPUT
print(hint_of(lambda: check_attention(attention_neg_inf)))

# %% [markdown]
# ### Mistake 5 · `-1e9` overflowing float16
#
# The usual fix for the NaN, filling with a large negative number such as `-1e9`, has its own trap: the
# largest float16 is 65504. In half precision (mixed-precision training, a GPU) `masked_fill` refuses the
# value. This version handles fully masked rows correctly, so float16 is its only problem.

# %%
# NBVAL_CHECK_OUTPUT
def attention_minus_1e9(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., q_len, k_len)
    if mask is None:
        return scores.softmax(dim=-1) @ value
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1)
    scores = scores.masked_fill(~mask, -1e9)  # BUG: -1e9 does not exist in float16
    return scores.softmax(dim=-1).masked_fill(~has_key, 0.0) @ value


print("float32 agrees with tfm_lesson:",
      torch.allclose(attention_minus_1e9(q, k, v, mask), scaled_dot_product_attention(q, k, v, mask)[0]))
try:
    attention_minus_1e9(q.half(), k.half(), v.half(), mask)
except RuntimeError as exc:
    print("float16:", type(exc).__name__, "-", exc)
print(hint_of(lambda: check_attention(attention_minus_1e9)))

# %% [markdown]
# ### Mistake 6 · mask polarity flipped between SDPA and `nn.MultiheadAttention`
#
# PyTorch has two conventions. `F.scaled_dot_product_attention` (SDPA for short) and `tfm_lesson` read a
# boolean mask as **True = may attend**; `nn.MultiheadAttention`'s `attn_mask` and `key_padding_mask` read it
# as **True = blocked**. Code moved from one to the other without flipping the mask attends to exactly the
# tokens it should ignore: the padding.

# %%
def attention_torch_polarity(query, key, value, mask=None):
    # BUG: the mask was inverted for nn.MultiheadAttention (True = blocked), then handed to SDPA
    return F.scaled_dot_product_attention(query, key, value, attn_mask=None if mask is None else ~mask)


tokens = torch.tensor([[7, 8, 9, 0, 0]])  # three real tokens, two pads (pad id 0)
keep = padding_mask(tokens, 0)  # (1, 1, 1, 5)
x = torch.randn(1, 1, 5, 4)
weights_right = scaled_dot_product_attention(x, x, x, keep)[1]
weights_wrong = torch.softmax((x @ x.transpose(-2, -1) / 2).masked_fill(keep, float("-inf")), dim=-1)

# NBVAL_CHECK_OUTPUT
print("weight on the two pads, right:  ", round(float(weights_right[..., 3:].sum(-1).mean()), 3))
print("weight on the two pads, flipped:", round(float(weights_wrong[..., 3:].sum(-1).mean()), 3))

# %% mystnb={"image": {"alt": "Attention heatmap with the mask's polarity flipped: every query puts all its weight on the two pad columns and none on the real tokens 7, 8 and 9."}}
viz.show_attention(weights_wrong[0, 0], x_tokens=["7", "8", "9", "pad", "pad"], y_tokens=["7", "8", "9", "pad", "pad"],
                   title="flipped polarity: only the pads get attention")

# %% [markdown]
# The same trap, the other way round, with PyTorch's own module: hand `tfm_lesson`'s padding mask (True = real
# token) to `nn.MultiheadAttention` as `key_padding_mask` (True = ignore this key) and it ignores the real
# tokens. `tfm_lesson.torch_mask` converts between the two conventions.

# %%
torch.manual_seed(0)
torch_mha = nn.MultiheadAttention(4, 1, batch_first=True).eval()
seq = torch.randn(1, 5, 4)  # (batch, len, d_model)
with torch.no_grad():
    _, torch_flipped = torch_mha(seq, seq, seq, key_padding_mask=keep[:, 0, 0, :])  # BUG: torch's True = ignore
    _, torch_right = torch_mha(seq, seq, seq, key_padding_mask=tfm_lesson.torch_mask(keep[:, 0, 0, :]))  # ~mask
# NBVAL_CHECK_OUTPUT
print("nn.MultiheadAttention, weight of the real queries on the pads:")
print("  with tfm_lesson's mask:   ", round(float(torch_flipped[0, :3, 3:].sum(-1).mean()), 3))
print("  with torch_mask(mask):    ", round(float(torch_right[0, :3, 3:].sum(-1).mean()), 3))

# %%
# NBVAL_CHECK_OUTPUT
print(hint_of(lambda: check_attention(attention_torch_polarity)))

# %% [markdown]
# ### Mistake 7 · a padding mask on the wrong axis
#
# A padding mask hides padded **keys**: it is `(batch, 1, 1, k_len)`, the sequence on the last axis, so that it
# broadcasts along the queries. Put the sequence on the query axis, `(batch, 1, seq_len, 1)`, and it
# broadcasts the other way: the padded *queries* see nothing (their rows are fully masked) while every real
# query still attends to the padding.

# %%
# NBVAL_CHECK_OUTPUT
def padding_mask_on_queries(tokens, pad_id):
    return (tokens != pad_id)[:, None, :, None]  # BUG: (batch, 1, seq_len, 1) masks rows, not columns


wrong_axis = padding_mask_on_queries(tokens, 0).expand(1, 1, 5, 5)[0, 0]
right_axis = padding_mask(tokens, 0).expand(1, 1, 5, 5)[0, 0]
print(hint_of(lambda: check_padding_mask(padding_mask_on_queries)))

# %% mystnb={"image": {"alt": "Two mask pictures: the correct padding mask hides the two pad columns as keys, the wrongly shaped one hides the two pad rows as queries instead."}}
names = ["7", "8", "9", "pad", "pad"]
fig = viz.Figure(figsize=(7, 3), dpi=90, layout="constrained")
left, right_ax = fig.subplots(1, 2)
viz.show_mask(right_axis, x_tokens=names, y_tokens=names, title="(batch, 1, 1, k_len): pads hidden as keys", ax=left)
viz.show_mask(wrong_axis, x_tokens=names, y_tokens=names, title="(batch, 1, q_len, 1): as queries", ax=right_ax)
fig

# %% [markdown]
# ### Mistake 8 · a causal mask off by one
#
# The decoder's mask lets query $i$ see keys $0..i$: the lower triangle **with** the diagonal, `tril()`.
# `tril(1)` lets it also see key $i+1$, the very token it has to predict. Teacher forcing makes this
# dramatic: the training loss collapses, because the model just copies the next input, and at inference,
# where the next token does not exist yet, it has learned little (below: a greedy copy accuracy near 0.2,
# against 0.98 for the correct mask). We measure this below with a real
# training run.

# %%
# NBVAL_CHECK_OUTPUT
def causal_off_by_one(size):
    return torch.ones(size, size, dtype=torch.bool).tril(1)  # BUG: one step into the future


print(causal_off_by_one(4).int())
print(hint_of(lambda: check_causal_mask(causal_off_by_one)))

# %% [markdown]
# **The loss curves.** A tiny `tfm_lesson.Transformer` (one layer each side, `d_model = 32`, 4 heads) learns
# to copy random sequences of 8 digits. The leaky model is the same class with `make_tgt_mask` using
# `tril(1)`. A third model swaps mistake 1 (scores divided by $\sqrt{d_{model}}$) into every attention
# module. All three start from the same weights and see the same batches; afterwards we decode greedily,
# one token at a time, as at inference.

# %%
class LeakyTransformer(Transformer):
    def make_tgt_mask(self, tgt):
        size = tgt.size(1)
        leak = torch.ones(size, size, dtype=torch.bool, device=tgt.device).tril(1)  # BUG
        return padding_mask(tgt, self.config.tgt_pad_id) & leak


VOCAB, LENGTH, BOS = 12, 8, 1  # ids 2..11 are the digits


def copy_batch(batch_size, gen):
    src = torch.randint(2, VOCAB, (batch_size, LENGTH), generator=gen)
    tgt_in = torch.cat([torch.full((batch_size, 1), BOS), src[:, :-1]], dim=1)  # teacher forcing: shifted right
    return src.to(device), tgt_in.to(device), src.to(device)


def train(cls, steps=300, attention=None):
    """Train ``cls`` on the copy task; ``attention``: a buggy class swapped into every attention module."""
    tfm_lesson.seed_everything(0)
    model = cls(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, heads=4, d_ff=64, num_encoder_layers=1,
                num_decoder_layers=1, dropout=0.0, max_len=16).to(device)
    for module in model.modules():
        if attention is not None and type(module) is MultiHeadAttention:
            module.__class__ = attention  # same parameters, the buggy forward
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen, losses = torch.Generator().manual_seed(1), []
    for _ in range(steps):
        src, tgt_in, tgt_out = copy_batch(32, gen)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


@torch.no_grad()
def greedy_accuracy(model, n=64):
    src, _, _ = copy_batch(n, torch.Generator().manual_seed(99))
    out = torch.full((n, 1), BOS, device=device)
    for _ in range(LENGTH):
        out = torch.cat([out, model(src, out)[:, -1:].argmax(-1)], dim=1)  # (n, t + 1)
    return float((out[:, 1:] == src).float().mean())


start = time.perf_counter()
with cpu_threads(1 if device.type == "cpu" else None):  # tiny matrices: one CPU thread is much faster
    model_right, loss_right = train(Transformer)
    model_leaky, loss_leaky = train(LeakyTransformer)
    model_d_model, loss_d_model = train(Transformer, attention=ScaledByDModel)
    acc_right, acc_leaky = greedy_accuracy(model_right), greedy_accuracy(model_leaky)
    acc_d_model = greedy_accuracy(model_d_model)
print(f"trained three models in {time.perf_counter() - start:.1f} s on {device}")
early = slice(10, 50)  # steps 10-49
print(f"mean training loss over steps 10-49: correct {sum(loss_right[early]) / 40:.3f}, "
      f"leaky {sum(loss_leaky[early]) / 40:.3f}, sqrt(d_model) {sum(loss_d_model[early]) / 40:.3f}")
print(f"final training loss: correct {loss_right[-1]:.3f}, leaky {loss_leaky[-1]:.3f}, "
      f"sqrt(d_model) {loss_d_model[-1]:.3f}")
print(f"greedy copy accuracy: correct {acc_right:.2f}, leaky {acc_leaky:.2f}, sqrt(d_model) {acc_d_model:.2f}")

# %% mystnb={"image": {"alt": "Line chart of training loss on the copy task for the correct model and two buggy ones: all three fall towards zero, the leaky causal mask fastest."}}
viz.plot_lines({"correct": loss_right, "causal mask off by one, tril(1)": loss_leaky,
                "scores / sqrt(d_model)": loss_d_model},
               title="copy task: every model 'trains'", xlabel="step", ylabel="cross-entropy")

# %% [markdown]
# The leaky curve drops below the correct one **at once**: copying the next decoder input is easier than
# finding the token in the source, so over steps 10–49 its loss is already well below both others (1.67,
# against 2.11 for the correct model and 2.14 for the $\sqrt{d_{model}}$ one, in the cell above). Those three
# means came out the same under PyTorch's three CPU kernel settings on one machine (`ATEN_CPU_CAPABILITY` =
# `default`, `avx2`, `avx512`; they round sums differently); the later figures moved in their last digits (the
# leaky model's greedy accuracy 0.18 to 0.22, the final losses by up to 0.013), and a GPU can print other ones,
# so read yours from the cell. That early gap is the classic sign of a leak. A lower *final* loss is not:
# here the $\sqrt{d_{model}}$ model also ends below the correct one (under all three settings; with two other
# initial seeds it ended above), and it leaks nothing. At inference the
# leak has nothing to read (the next token does not exist yet), and the greedy accuracy shows what the model
# really learned. The $\sqrt{d_{model}}$ model trains almost as well as the correct one on this small task
# (greedy accuracy 0.97 to 0.98 against 0.98 under the three settings; 0.97 and 0.93 against 1.00 with the
# two other seeds; its
# logits start $\sqrt{h} = 2$ times too small; larger query and key weights could make up for that, but on a
# task this easy a somewhat flatter attention does no visible harm): its loss curve and its accuracy would
# never tell you that anything is wrong. It is still not
# the paper's model, and in a deep stack with many heads it starts with needlessly flat attention. Only the
# checker tells you.
#
# ### Mistake 9 · `if mask:` on a tensor
#
# `if mask:` means "if there is a mask" to the writer, but to Python it asks the tensor for one truth value.
# For a tensor with more than one element PyTorch refuses. It only fails when a mask is actually passed,
# so a quick test without masks passes. (And for a one-element mask it silently tests the *value*.)

# %%
# NBVAL_CHECK_OUTPUT
class IfMask(EncoderLayer):
    def forward(self, x, mask=None):
        if mask:  # BUG: means "mask is not None", asks the tensor for a single bool
            x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        else:
            x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.feed_forward(x))


layer = IfMask(16, 2, 32, dropout=0.0)
try:
    layer(torch.randn(2, 5, 16), padding_mask(torch.tensor([[3, 3, 3, 0, 0], [3, 3, 3, 3, 3]]), 0))
except RuntimeError as exc:
    print("RuntimeError:", exc)
print(hint_of(lambda: check_encoder_layer(IfMask)))

# %% [markdown]
# ### Mistake 10 · a misspelled mask variable
#
# Picture scores filled with `masked_fill(maks == 0, ...)`, one letter swapped. What happens depends
# on what `maks` is when the line runs:
#
# - if no `maks` exists, a `NameError`, but **only when a mask is passed**: the unmasked tests pass;
# - if a `maks` exists (in a notebook, some cell you ran an hour ago), the mask is **silently replaced** by
#   that stale object. With `maks = None` the layer simply attends to the padding.

# %%
# NBVAL_CHECK_OUTPUT
class MisspelledMask(EncoderLayer):
    def forward(self, x, mask=None):
        attn_mask = maks if mask is not None else None  # noqa: F821 - BUG: maks, not mask
        x = self.norm1(x + self.self_attn(x, x, x, attn_mask)[0])
        return self.norm2(x + self.feed_forward(x))


print("no `maks` defined, called without a mask:",
      tuple(MisspelledMask(16, 2, 32, dropout=0.0)(torch.randn(1, 3, 16)).shape), "- no error")
print("no `maks` defined, the checker (which passes masks):")
print(hint_of(lambda: check_encoder_layer(MisspelledMask)))

maks = None  # a stale global from an earlier experiment
print("\nwith a stale `maks = None` in the notebook:")
print(hint_of(lambda: check_encoder_layer(MisspelledMask)))
del maks

# %% [markdown]
# ## Part 3 · Mistakes in the other components
#
# ### Mistake 11 · LayerNorm with eps outside the square root
#
# $\frac{x-\mu}{\sqrt{\sigma^2} + \epsilon}$ and $\frac{x-\mu}{\sqrt{\sigma^2 + \epsilon}}$ are equal to many
# digits when $\sigma^2 \gg \epsilon$, which is why the bug survives casual tests. When the variance of a
# position is small, as for a near-constant row, they are not: eps inside the root bounds the output by
# $|x - \mu| / \sqrt{\epsilon}$, eps outside gives a far larger value.

# %%
class EpsOutsideSqrt(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (var.sqrt() + self.eps) + self.bias  # BUG: eps outside sqrt


# NBVAL_CHECK_OUTPUT
for spread in (1.0, 1e-3):
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0)) * spread
    err = (EpsOutsideSqrt(8)(x) - nn.LayerNorm(8)(x)).abs().max().item()
    print(f"feature std {spread:g}: largest difference from nn.LayerNorm = {err:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
print(hint_of(lambda: check_layer_norm(EpsOutsideSqrt)))

# %% [markdown]
# ### Mistake 12 · a feed-forward network with no activation
#
# Without the ReLU, $(xW_1 + b_1)W_2 + b_2 = x\,W_1W_2 + (b_1W_2 + b_2)$ is one affine map (a linear map plus
# a constant): the `d_ff = 4 d_model` hidden layer adds parameters but no expressive power. Symptom: the module
# is **affine**, $f(a + b) - f(0) = (f(a) - f(0)) + (f(b) - f(0))$.

# %%
class NoActivation(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x))  # BUG: no ReLU between the two layers


def is_affine(module):
    a, b, zero = torch.randn(1, 3, 16), torch.randn(1, 3, 16), torch.zeros(1, 3, 16)  # (batch, len, d_model)
    f0 = module(zero)
    return torch.allclose(module(a + b) - f0, (module(a) - f0) + (module(b) - f0), atol=1e-5)


torch.manual_seed(0)
# NBVAL_CHECK_OUTPUT
print("no activation is affine:", is_affine(NoActivation(16, 64)))
print("tfm_lesson FFN is affine:", is_affine(tfm_lesson.PositionwiseFeedForward(16, 64)))

# %%
# NBVAL_CHECK_OUTPUT
print(hint_of(lambda: check_feed_forward(NoActivation)))

# %% [markdown]
# ### Mistake 13 · positions indexed along the batch axis
#
# Code written for sequence-first tensors `(seq_len, batch, d_model)` takes the table as `pe[:x.size(0)]`.
# Given batch-first tensors `(batch, seq_len, d_model)`, `x.size(0)` is the batch size: every token of
# sequence $b$ gets the encoding of position $b$, and the order of the words is lost. It never crashes:
# `pe[:batch].unsqueeze(1)` is `(batch, 1, d_model)`, which broadcasts over the sequence axis for *any* batch
# size (up to `max_len`). Only the numbers tell: within a sequence, every position gets the same encoding.

# %%
class PositionsAlongBatch(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", sinusoidal_table(max_len, d_model))  # (max_len, d_model)

    def forward(self, x):  # x: (batch, seq_len, d_model)
        return x + self.pe[: x.size(0)].unsqueeze(1).to(x.dtype)  # BUG: pe[:batch], (batch, 1, d_model)


x = torch.zeros(3, 5, 8)  # three sequences of 5 tokens: no error
out = PositionsAlongBatch(8)(x)  # (3, 5, 8)
# NBVAL_CHECK_OUTPUT
print("output shape:", tuple(out.shape))
print("within each sequence, all 5 positions got the same encoding:", bool((out == out[:, :1]).all()))
print("sequence b got the encoding of position b:", torch.equal(out[:, 0], sinusoidal_table(3, 8)))
print(hint_of(lambda: check_positional_encoding(PositionsAlongBatch)))

# %% [markdown]
# ### Mistake 14 · residuals copied with `deepcopy`
#
# `residual = copy.deepcopy(x)` looks like a careful way to keep the input. But a deep copy of a tensor is
# a new tensor **outside the autograd graph**: the output is the same number, the gradient through the
# residual path is gone. Inside a real model every layer's input is the result of an operation, and there
# `deepcopy` raises a `RuntimeError`, which is what you will usually meet: in the cell below the first copy
# works (its input is a leaf tensor, made by hand) and the second one, of `norm1`'s output, raises. Where it
# does run, on a leaf, it silently cuts the gradient, as `x.detach()` or `x.data` would anywhere; the checker's
# hint names both. The residual connection exists precisely to carry gradients: a
# model whose residuals are cut that way trains like a deep network without shortcuts.

# %%
# NBVAL_CHECK_OUTPUT
class DeepcopyResidual(EncoderLayer):
    def forward(self, x, mask=None):
        residual = copy.deepcopy(x)  # BUG: cut from the graph
        x = self.norm1(residual + self.self_attn(x, x, x, mask)[0])
        residual = copy.deepcopy(x)
        return self.norm2(residual + self.feed_forward(x))


torch.manual_seed(0)
layer_right, layer_copy = EncoderLayer(16, 2, 32, dropout=0.0), DeepcopyResidual(16, 2, 32, dropout=0.0)
layer_copy.load_state_dict(layer_right.state_dict())
x = torch.randn(2, 5, 16, requires_grad=True)
x_copy = x.detach().clone().requires_grad_()
layer_right(x).sum().backward()
try:
    layer_copy(x_copy).sum().backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc).splitlines()[0])
print(hint_of(lambda: check_encoder_layer(DeepcopyResidual)))

# %% [markdown]
# ### Mistake 15 · post-norm prose over pre-norm code
#
# The docstring says "as in the paper, $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$", the code normalises
# first. Both train, and both are legitimate designs (see part 4), but they are different models: a
# post-norm layer ends with a LayerNorm, so every position of its output has mean 0 and standard deviation
# 1 (before the gain and shift); a pre-norm layer's output does not.

# %%
class PostNormProsePreNormCode(EncoderLayer):
    """Post-norm, as in the paper: x = LayerNorm(x + Sublayer(x))."""

    def forward(self, x, mask=None):  # BUG: the code is pre-norm, whatever norm_first says
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask)[0]
        return x + self.feed_forward(self.norm2(x))


torch.manual_seed(0)
x = torch.randn(2, 5, 16) * 3
with torch.no_grad():
    std_post = EncoderLayer(16, 2, 32, dropout=0.0).eval()(x).std(-1, unbiased=False).mean()
    std_bug = PostNormProsePreNormCode(16, 2, 32, dropout=0.0).eval()(x).std(-1, unbiased=False).mean()
# NBVAL_CHECK_OUTPUT
print(f"per-position std of the output: post-norm {std_post:.2f}, the 'post-norm' class {std_bug:.1f}")
print(hint_of(lambda: check_encoder_layer(PostNormProsePreNormCode)))

# %% [markdown]
# ## Part 4 · Good designs from the classic implementations, done right
#
# (The table in the summary at the end collects the fifteen mistakes, their symptoms and their checkers.)
#
# The mistakes above are of the kind that from-scratch implementations of the paper in tutorials, notebooks
# and blog posts make; we name no tutorial for them, so take each one as a pattern to recognise rather than a
# charge against any particular code. Many such tutorials descend from The Annotated Transformer (Rush, 2018),
# and several of the patterns here are its own, as anyone can check in its code: its `LayerNorm` makes mistake 11 (eps added to the
# standard deviation) and uses the unbiased standard deviation besides, label smoothing is computed with `nn.KLDivLoss`
# (chapter 10), and the generator ends in a log-softmax (chapter 09). Its sub-layer connection normalises
# *first* while the text quotes post-norm (chapter 05), but that is a choice it states openly in a comment, not
# a silent mismatch. They were not only bugs. They made design choices that differ from the paper's
# default or from `tfm_lesson`'s code, and are perfectly good. Each is either an option of `tfm_lesson` or
# computes the same numbers; here is the proof for each.
#
# ### Learned positional embeddings
#
# Instead of the sinusoid table, one trained vector per position: an `nn.Embedding(max_len, d_model)`
# indexed by position (never by batch). `tfm_lesson` has it as `TransformerConfig(positional="learned")`.

# %%
# NBVAL_CHECK_OUTPUT
class LearnedPositions(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)  # (max_len, d_model)

    def forward(self, x):  # x: (batch, seq_len, d_model)
        return x + self.embedding.weight[: x.size(1)]  # positions along axis 1


check_learned_positional_encoding(LearnedPositions)
small = dict(src_vocab_size=12, tgt_vocab_size=12, d_model=16, heads=4, d_ff=32, num_encoder_layers=1,
             num_decoder_layers=1, dropout=0.0, max_len=16)
print(type(Transformer(positional="learned", **small).positional).__name__)

# %% [markdown]
# ### A fused QKV projection
#
# For self-attention, $Q$, $K$ and $V$ are three projections of the same $x$, so one
# `nn.Linear(d_model, 3 d_model)` computes all three in a single matmul: its weight is $W^Q$, $W^K$, $W^V$
# stacked. (`tfm_lesson.MultiHeadAttention` does exactly this internally when `query is key is value`.)
# Load the reference's three weights, concatenated, into a fused module and compare.

# %%
class FusedQKVAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)  # [W^Q; W^K; W^V] stacked
        self.out = nn.Linear(d_model, d_model)  # W^O

    def forward(self, x, mask=None):
        batch, length, d_model = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.heads, self.d_k)  # (batch, len, 3, heads, d_k)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (batch, heads, len, d_k)
        out, _ = scaled_dot_product_attention(q, k, v, mask)  # (batch, heads, len, d_k)
        return self.out(out.transpose(1, 2).reshape(batch, length, d_model))


torch.manual_seed(0)
mha, fused = MultiHeadAttention(16, 4).eval(), FusedQKVAttention(16, 4)
with torch.no_grad():
    fused.qkv.weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))  # (48, 16)
    fused.qkv.bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))  # (48,)
    fused.out.load_state_dict(mha.w_o.state_dict())
x = torch.randn(3, 6, 16)
pad = padding_mask(torch.tensor([[5, 5, 5, 5, 0, 0], [5] * 6, [5, 0, 0, 0, 0, 0]]), 0)  # (3, 1, 1, 6)
with torch.no_grad():
    same = torch.allclose(fused(x, pad), mha(x, x, x, pad)[0], atol=1e-6)
# NBVAL_CHECK_OUTPUT
print("fused QKV == tfm_lesson.MultiHeadAttention:", same)

# %% [markdown]
# ### Separate $W^Q, W^K, W^V$ with split and merge of heads
#
# The paper's layout, written with explicit `split` and `merge` functions, with the transpose on both sides.
# It follows `tfm_lesson`'s attribute names, so `check_multi_head_attention` loads the reference's weights
# into it and compares self- and cross-attention, with and without masks, in two dtypes. The attention itself
# is the package's `scaled_dot_product_attention` (chapter 01's), which chapter 03's exercise forbids, so here
# too the checker is told `written_yourself=False`.

# %%
# NBVAL_CHECK_OUTPUT
class SeparateProjections(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def split(self, x):  # (batch, len, d_model) -> (batch, heads, len, d_k)
        return x.view(x.size(0), x.size(1), self.heads, self.d_k).transpose(1, 2)

    def merge(self, x):  # (batch, heads, len, d_k) -> (batch, len, d_model)
        return x.transpose(1, 2).reshape(x.size(0), x.size(2), self.heads * self.d_k)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.w_q(query)), self.split(self.w_k(key)), self.split(self.w_v(value))
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(self.merge(out)), weights


check_multi_head_attention(SeparateProjections, written_yourself=False)

# %% [markdown]
# ### A model that builds its masks from pad ids
#
# Rather than asking the caller for masks, the model derives them from the token ids: the source mask hides
# the pad id, the target mask hides the pad id **and** the future. `tfm_lesson.Transformer` does this when no
# mask is given (`make_src_mask`, `make_tgt_mask`). We write the target mask as a function, check it, and
# show the model's implicit masks give the same logits as explicit ones.

# %%
def target_mask(tokens, pad_id):
    size = tokens.size(1)
    real = (tokens != pad_id)[:, None, None, :]  # (batch, 1, 1, t): padded keys hidden
    return real & torch.ones(size, size, dtype=torch.bool, device=tokens.device).tril()  # (batch, 1, t, t)


check_decoder_mask(target_mask)
model = Transformer(**small).eval()
src = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
tgt = torch.tensor([[1, 4, 4, 0, 0], [1, 5, 5, 5, 2]])
with torch.no_grad():
    implicit = model(src, tgt)  # masks built from the pad ids
    explicit = model(src, tgt, padding_mask(src, 0), target_mask(tgt, 0))
# NBVAL_CHECK_OUTPUT
print("make_tgt_mask == target_mask:", torch.equal(model.make_tgt_mask(tgt), target_mask(tgt, 0)))
print("implicit masks give the same logits:", torch.allclose(implicit, explicit))

# %% [markdown]
# ### Pre-norm with a generator of log-probabilities
#
# Several of those implementations put the LayerNorm before each sub-layer (pre-norm, which trains more stably in deep stacks
# and then needs a final LayerNorm after the stack) and ended the model with a generator that returns
# $\log \mathrm{softmax}$ rather than logits. In `tfm_lesson` pre-norm is `norm_first=True`, the final norm
# comes with it, and the generator returns logits: its `log_softmax` is what their generators return. `check_encoder_layer`
# already tests `norm_first=True`; `check_generator` tests a log-probability generator.

# %%
class LogProbGenerator(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x):  # (batch, len, d_model) -> (batch, len, vocab_size) log-probabilities
        return self.proj(x).log_softmax(dim=-1)


check_generator(LogProbGenerator)
pre_norm = Transformer(norm_first=True, **small).eval()
gen = LogProbGenerator(16, 12)
with torch.no_grad():
    gen.proj.weight.copy_(pre_norm.generator.weight)  # tied to the target embedding
    gen.proj.bias.zero_()  # tfm_lesson's generator has no bias
    log_probs = gen(pre_norm.decode(tgt, pre_norm.encode(src), padding_mask(src, 0)))
    same = torch.allclose(log_probs, pre_norm(src, tgt).log_softmax(-1), atol=1e-6)
# NBVAL_CHECK_OUTPUT
print("final LayerNorm after the pre-norm encoder:", pre_norm.encoder.norm is not None)
print("log-prob generator == log_softmax(tfm_lesson logits):", same)

# %% [markdown]
# ## Play with it
#
# The mask explorer of chapter 02 shows what a correct padding and causal mask look like, and the attention
# weights they produce. Compare its causal picture with the `tril(1)` mask above: the off-by-one mask has one
# extra diagonal of True above the main one. (In a live notebook, move the sliders; here you see its
# default state.)

# %% mystnb={"image": {"alt": "Explorer picture: the padding of a two-sentence batch, the first sentence's padding-plus-causal mask, and the attention weights it allows, zero for every blocked key."}}
widgets.mask_explorer(lengths=(6, 4), causal=True)

# %% [markdown]
# ## Exercises
#
# Each exercise gives you a buggy piece from this chapter. Fix it; the checker tells you when you are done.
#
# ### Exercise 1: attention without NaN on fully masked rows
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `my_attention`: a fixed `attention_neg_inf` (which returns only the output) so that a query with no visible key gets an all-zero output instead of NaN, in
# every float dtype (hint: `mask.any(-1, keepdim=True)`). Return `(output, weights)`, with or without a mask.

# %%
def my_attention(query, key, value, mask=None):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., q_len, k_len)
    if mask is None:
        weights = scores.softmax(dim=-1)
        return weights @ value, weights  # (..., q_len, d_v), (..., q_len, k_len)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1)
    scores = scores.masked_fill(~(mask | ~has_key), float("-inf"))  # empty rows stay finite
    weights = scores.softmax(dim=-1).masked_fill(~has_key, 0.0)  # ... and are zeroed
    return weights @ value, weights


# %%
# NBVAL_CHECK_OUTPUT
check_attention(my_attention)

# %% [markdown]
# ### Exercise 2: the causal mask
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write the causal mask correctly: `(size, size)` booleans, query $i$ sees keys $0..i$.

# %%
def my_causal_mask(size):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_causal_mask(size):
    return torch.ones(size, size, dtype=torch.bool).tril()  # (q_len, k_len), diagonal included


# %%
# NBVAL_CHECK_OUTPUT
check_causal_mask(my_causal_mask)

# %% [markdown]
# ### Exercise 3: layer norm with eps in the right place
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~10 min
#
# Fix the layer norm: eps inside the square root. Keep the parameters `weight` (the gain, ones) and `bias`
# (the shift, zeros).

# %%
class MyLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):  # (..., d_model)
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


# %%
# NBVAL_CHECK_OUTPUT
check_layer_norm(MyLayerNorm)

# %% [markdown]
# ### Exercise 4: one encoder layer without mistakes 9, 10, 14 and 15
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Fix the encoder layer of mistakes 9, 10, 14 and 15 at once: a layer that passes its `mask`
# argument on (spelled right, tested with `is not None` or not at all), keeps the residual in the graph, and
# is post-norm when `self.norm_first` is false, pre-norm when it is true. Keep the dropout modules
# `self.dropout1`, `self.dropout2` on each sub-layer's output.

# %%
class MyEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):  # x: (batch, len, d_model)
        if self.norm_first:  # pre-norm: x + Sublayer(LayerNorm(x))
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask)[0])
            return x + self.dropout2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)[0]))  # post-norm: LayerNorm(x + Sublayer(x))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


# %%
# NBVAL_CHECK_OUTPUT
check_encoder_layer(MyEncoderLayer)

# %% [markdown]
# ## Check your understanding

# %%
tfm_lesson.course.quiz.show("13")

# %% [markdown]
# ## Summary
#
# - Most from-scratch bugs keep every shape right and still train; "the loss goes down" proves nothing.
#   Parity with a reference on the same weights, including corner cases, does.
# - The corner cases that expose them: several heads ($\sqrt{d_{model}}$ vs $\sqrt{d_k}$), query $\ne$ key
#   (the wrong projection), a mask that lets each position see only itself (the missing transpose: positions leak into each other), fully masked
#   rows (NaN), float16 (`-1e9`), comparing positions within a sequence (positions on the batch axis), a small
#   variance (eps), gradients rather than outputs (`deepcopy`), and actually passing a mask (`if mask:`,
#   `maks`).
# - A training loss far *below* a correct model's from the very first steps is a warning sign too: a causal
#   mask off by one lets the decoder read the answer. (A slightly lower final loss alone proves nothing.)
# - The checkers of `tfm_lesson.checks` each run the classic wrong versions on the same weights and name the
#   one you wrote; the table below lists which checker catches which mistake.
# - The good designs of those classic implementations (learned positions, fused QKV, separate projections
#   with split/merge, masks from pad ids, pre-norm with log-probabilities) are options of `tfm_lesson` or
#   proven equal to it.
#
# **Mistake → symptom → checker**
#
# | # | mistake | symptom | caught by |
# |---|---|---|---|
# | 1 | scores / $\sqrt{d_{model}}$ | flatter attention (higher entropy), still trains | `check_multi_head_attention` |
# | 2 | query projected with `w_k` | symmetric self-attention scores; `w_q` gets no gradient | `check_multi_head_attention` |
# | 3 | heads merged without the transpose | positions leak into each other (under a causal mask, into the past: a leak of the future) | `check_multi_head_attention` |
# | 4 | `-inf` on a fully masked row | NaN output, then NaN everywhere | `check_attention` |
# | 5 | `-1e9` in float16 | `RuntimeError: ... overflow` | `check_attention` |
# | 6 | polarity flipped (SDPA vs `nn.MultiheadAttention`) | attends only to the padding | `check_attention` |
# | 7 | padding mask on the query axis | real queries still see the pads | `check_padding_mask` |
# | 8 | causal mask `tril(1)` | training loss too good, greedy decoding fails | `check_causal_mask` |
# | 9 | `if mask:` | `RuntimeError: Boolean value of Tensor ... ambiguous` | `check_encoder_layer` |
# | 10 | misspelled `maks` | `NameError` only with a mask, or the mask silently ignored | `check_encoder_layer` |
# | 11 | eps outside the square root | wrong output for small-variance rows | `check_layer_norm` |
# | 12 | FFN without activation | the FFN is affine | `check_feed_forward` |
# | 13 | `pe[:x.size(0)]` on batch-first input | all positions of a sequence equal; no error for any batch size | `check_positional_encoding` |
# | 14 | residual via `deepcopy` | gradient lost (or `RuntimeError` from deepcopy) | `check_encoder_layer` |
# | 15 | post-norm docstring, pre-norm code | output not normalised; wrong model | `check_encoder_layer` |
#
# **The classic implementations' designs → where they live in `tfm_lesson` → how we proved it**
#
# | design | in `tfm_lesson` | parity shown by |
# |---|---|---|
# | learned positional embeddings | `TransformerConfig(positional="learned")`, `LearnedPositionalEncoding` | `check_learned_positional_encoding` |
# | fused QKV, `Linear(d_model, 3 d_model)` | inside `MultiHeadAttention` for self-attention | `torch.allclose` with concatenated weights |
# | separate $W^Q, W^K, W^V$ with split/merge | `MultiHeadAttention` (`w_q`, `w_k`, `w_v`, `w_o`) | `check_multi_head_attention` |
# | masks built from pad ids | `Transformer.make_src_mask` / `make_tgt_mask` | `check_decoder_mask`, equal logits |
# | pre-norm, log-probability generator | `norm_first=True`; `log_softmax` of the logits | `check_generator`, `torch.allclose` |

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 13: Common mistakes. Version `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
