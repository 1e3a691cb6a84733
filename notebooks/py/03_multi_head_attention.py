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
# # 03 · Multi-head attention
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/03_multi_head_attention.ipynb)
#
# In chapter 01 you built scaled dot-product attention: every query takes one weighted average of the
# values. The Transformer never uses it alone. It runs **several attentions side by side**, each in its own
# small subspace, and glues their answers together. This chapter builds that block, the one the paper calls
# *multi-head attention* (section 3.2.2), and proves it equal to the one in `tfm_lesson` and to PyTorch's
# `nn.MultiheadAttention`.
#
# **What you will learn**
#
# - why queries and keys need their own learned projections: with $Q = K$ attention can only be symmetric;
# - why one attention is not enough, and what a *head* is;
# - the projections $W^Q, W^K, W^V, W^O$ and why each head works in $d_k = d_{model} / h$ dimensions;
# - how to split a `(batch, len, d_model)` tensor into `(batch, heads, len, d_k)` heads and merge them back,
#   and the classic bug of merging **without the transpose** (we measure it);
# - a slow per-head loop first, then the vectorised version that runs every head in one matmul;
# - self-attention versus cross-attention, and what multi-head attention costs;
# - three heads set by hand, and the same three heads *learned* by gradient descent in a few seconds.

# %%
import math
import time

import torch
from torch import nn

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import MultiHeadAttention, scaled_dot_product_attention, viz, widgets
from tfm_lesson.checks import check_merge_heads, check_multi_head_attention, check_split_heads
from tfm_lesson.look.toy_heads import hand_set_heads, train_heads

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## One head first: why queries and keys get their own projections
#
# In the sentence pictures of chapters 00 and 01 the queries, the keys and the values were the token vectors
# themselves: $Q = K = V = x$.
# That has two consequences you saw in the pictures. The score table $x x^\top$ is **symmetric**: the score of
# token $i$ with token $j$ equals that of $j$ with $i$. And with vectors of equal length, each token's best
# match is **itself** (a unit vector is most similar to itself). Many useful questions are not symmetric:
# "look at the previous word" wants *sat* to look at *cat*, but not *cat* at *sat*.
#
# The paper's fix is three learned matrices per head: the query of token $i$ is $x_i W^Q$, its key $x_i W^K$, its
# value $x_i W^V$. The score becomes
#
# $$s_{ij} = (x_i W^Q) \cdot (x_j W^K) = x_i \, W^Q (W^K)^\top x_j^\top ,$$
#
# which is symmetric only if the matrix $W^Q (W^K)^\top$ is. With $W^Q \ne W^K$ the question a token asks (its
# query) and what it offers to others (its key) are different things. (Chapter 01's lookup exercise needed
# exactly that: $Q \ne K$.) $W^V$ chooses what a token hands over once it is chosen. Below: the same six unit
# vectors, once as their own queries and keys, once through a random pair of projections. `nn.Linear` holds a
# weight matrix; `w_q(x)` computes $x W^Q$.

# %%
one_tokens = "the cat sat on the mat".split()
one_table = torch.randn(5, 16)
one_table = one_table / one_table.norm(dim=-1, keepdim=True)  # unit vectors, one per distinct word
one_x = one_table[[0, 1, 2, 3, 0, 4]]  # (seq_len, d_model) = (6, 16): the two 'the' share a vector
w_q, w_k = nn.Linear(16, 16, bias=False), nn.Linear(16, 16, bias=False)  # random, as before training
with torch.no_grad():
    same = one_x @ one_x.T  # (6, 6): Q = K = x
    projected = w_q(one_x) @ w_k(one_x).T  # (6, 6): Q = x W^Q, K = x W^K

# %%
# NBVAL_CHECK_OUTPUT
print("Q = K = x:           symmetric:", torch.allclose(same, same.T),
      "  every token's best key is itself:", torch.equal(same.diagonal(), same.max(-1).values))
print("Q = x W^Q, K = x W^K: symmetric:", torch.allclose(projected, projected.T),
      "  every token's best key is itself:", torch.equal(projected.diagonal(), projected.max(-1).values))

# %% [markdown]
# A single head is then $\mathrm{Attention}(x W^Q, x W^K, x W^V)$, and training chooses the three matrices. What
# one head cannot do is ask two questions at once, which brings us to several heads.

# %% [markdown]
# ## Intuition: one softmax, one opinion
#
# Attention gives each query **one** probability distribution over the keys. Take the word *sat* in
# "the cat sat on the mat". To build a good representation of *sat*, a model may want to know at the same
# time *who* sat (the subject, *cat*), *where* (*mat*), and *what came just before*. One softmax has to split
# its weight between all of these, and the average it returns blurs them into one vector.
#
# Multi-head attention asks several questions at once. Each **head** has its own queries, keys and values,
# obtained by projecting the same inputs with its own learned matrices, so each head can look for something
# different: one the previous word, one the same word elsewhere, one the nouns. Their answers are
# concatenated and mixed by one more projection.
#
# The trick that keeps this cheap: with $h$ heads, each head works in $d_k = d_{model}/h$ dimensions instead of
# $d_{model}$. Eight heads of 64 dimensions cost about as much as one head of 512 (we count it at the end).

# %% [markdown]
# ## The math
#
# From the paper (section 3.2.2), with queries $Q$, keys $K$ and values $V$:
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\,W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q,\; K W_i^K,\; V W_i^V)$$
#
# with $W_i^Q, W_i^K \in \mathbb{R}^{d_{model} \times d_k}$, $W_i^V \in \mathbb{R}^{d_{model} \times d_v}$ and
# $W^O \in \mathbb{R}^{h d_v \times d_{model}}$. The paper uses $h = 8$ and $d_k = d_v = d_{model}/h = 64$,
# and $\mathrm{Attention}(Q, K, V) = \mathrm{softmax}(Q K^\top / \sqrt{d_k})\,V$ from chapter 01.
#
# Shapes for one sequence of $n$ queries and $m$ keys:
#
# | step | shape |
# |---|---|
# | $Q$; $K$ and $V$ | $(n, d_{model})$; $(m, d_{model})$ |
# | $Q W_i^Q$; $K W_i^K$, $V W_i^V$ | $(n, d_k)$; $(m, d_k)$ |
# | scores $Q W_i^Q (K W_i^K)^\top / \sqrt{d_k}$ | $(n, m)$ |
# | $\mathrm{head}_i$ | $(n, d_k)$ |
# | $\mathrm{Concat}(\mathrm{head}_1..\mathrm{head}_h)$ | $(n, h\,d_k) = (n, d_{model})$ |
# | output, after $W^O$ | $(n, d_{model})$ |
#
# **One matrix for all heads.** Put the $h$ matrices $W_1^Q, \dots, W_h^Q$ side by side and you get one
# $d_{model} \times d_{model}$ matrix $W^Q$; then $Q W^Q$ computes every head's queries at once, and head $i$'s
# are the columns $i\,d_k$ to $(i+1)\,d_k - 1$. That is how `tfm_lesson.MultiHeadAttention` stores them: four
# `nn.Linear(d_model, d_model)` layers `w_q, w_k, w_v, w_o`. (`nn.Linear` keeps its weight as
# `(out_features, in_features)` and computes $x W^\top + b$, so head $i$'s block of $W^Q$ is
# **rows** `i*d_k:(i+1)*d_k` of `w_q.weight`. The biases are PyTorch's default; the paper's formula has none.)

# %% [markdown]
# ## Build it
#
# A small example we can print: a batch of 2 sequences of 5 tokens, $d_{model} = 12$, $h = 3$ heads, so
# $d_k = 4$. The reference module gives us the four weight matrices; everything else we write by hand.

# %%
# NBVAL_CHECK_OUTPUT
batch, length, d_model, heads = 2, 5, 12, 3
d_k = d_model // heads

mha = MultiHeadAttention(d_model, heads).to(device).eval()
x = torch.randn(batch, length, d_model).to(device)  # (batch, len, d_model), drawn on the CPU
print("d_k =", d_k)
print("x:", tuple(x.shape))
print({name: tuple(p.shape) for name, p in mha.named_parameters()})

# %% [markdown]
# ### Slow and obvious: one head at a time
#
# Follow the formula literally. For each head $i$, cut its block out of each projection, compute its
# queries, keys and values (each `(batch, len, d_k)`), run chapter 01's attention, and keep the result.
# Then concatenate the heads along the feature axis and apply $W^O$.
#
# A mask follows the convention of the whole course: boolean, `True` = may attend. For one head the scores are
# `(batch, q_len, k_len)`, so a padding mask is given here as `(batch, 1, k_len)`.

# %%
def multi_head_loop(mha, query, key, value, mask=None):
    """MultiHead(Q, K, V), one head at a time. query (batch, n, d_model), key/value (batch, m, d_model)."""
    heads, d_k = mha.heads, mha.d_k
    outputs = []
    for i in range(heads):
        rows = slice(i * d_k, (i + 1) * d_k)  # head i's block of each projection
        q_i = query @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]  # (batch, n, d_k)   = Q W_i^Q
        k_i = key @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]  # (batch, m, d_k)     = K W_i^K
        v_i = value @ mha.w_v.weight[rows].T + mha.w_v.bias[rows]  # (batch, m, d_k)   = V W_i^V
        head_i, _ = scaled_dot_product_attention(q_i, k_i, v_i, mask)  # (batch, n, d_k)
        outputs.append(head_i)
    concat = torch.cat(outputs, dim=-1)  # (batch, n, heads * d_k) = (batch, n, d_model)
    return mha.w_o(concat)  # (batch, n, d_model)


with torch.no_grad():
    out_loop = multi_head_loop(mha, x, x, x)
print("output:", tuple(out_loop.shape))

# %% [markdown]
# This is correct, and it is how the paper writes it, but it is slow in the way GPUs hate: $h$ small matrix
# products one after another, and the projections done in $3h$ pieces ($Q$, $K$, $V$ for each head). Let us do all heads at once.
#
# ### Vectorised: split the heads into a batch dimension
#
# **Project once.** `mha.w_q(x)` computes $x W^Q$ for all heads together: `(batch, len, d_model)`. Head $i$'s
# queries are its features `i*d_k:(i+1)*d_k`.
#
# **Split.** `view(batch, len, heads, d_k)` cuts the last axis into `heads` blocks of `d_k` features (no copy:
# the same memory, read differently). Attention wants, for each head, a `(len, d_k)` matrix, so we move the
# head axis in front of the positions with `transpose(1, 2)`: `(batch, heads, len, d_k)`. Now `heads` is just
# another batch dimension, and `q @ k.transpose(-2, -1)` computes every head's scores in one call:
# `(batch, heads, q_len, k_len)`.

# %%
# NBVAL_CHECK_OUTPUT
q_all = mha.w_q(x)  # (batch, len, d_model)
q_split = q_all.view(batch, length, heads, d_k).transpose(1, 2)  # (batch, heads, len, d_k)
print("projected:", tuple(q_all.shape), "-> split:", tuple(q_split.shape))
# head 1 of sequence 0 is exactly the slow loop's q_1: the block of features 4..7
print("head 1 == features 4:8:", torch.equal(q_split[0, 1], q_all[0, :, 4:8]))

# %% [markdown]
# **Merge.** After attention each head has produced `(batch, heads, len, d_k)`. To concatenate the heads
# *per position*, undo the split in reverse order: first `transpose(1, 2)` back to `(batch, len, heads, d_k)`,
# then `reshape(batch, len, d_model)`, which lays each position's $h$ blocks side by side. (After a transpose
# the memory is no longer in row order, so `.view` refuses; `.reshape` copies when it must.)

# %%
def multi_head_vectorised(mha, query, key, value, mask=None):
    """MultiHead(Q, K, V) with every head in one matmul. Returns (output, weights)."""
    batch, n, d_model = query.shape
    m = key.size(1)
    q = mha.w_q(query).view(batch, n, mha.heads, mha.d_k).transpose(1, 2)  # (batch, heads, n, d_k)
    k = mha.w_k(key).view(batch, m, mha.heads, mha.d_k).transpose(1, 2)  # (batch, heads, m, d_k)
    v = mha.w_v(value).view(batch, m, mha.heads, mha.d_k).transpose(1, 2)  # (batch, heads, m, d_k)
    heads_out, weights = scaled_dot_product_attention(q, k, v, mask)  # (batch, heads, n, d_k), (batch, heads, n, m)
    concat = heads_out.transpose(1, 2).reshape(batch, n, d_model)  # (batch, n, heads, d_k) -> (batch, n, d_model)
    return mha.w_o(concat), weights


# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    out_vec, weights = multi_head_vectorised(mha, x, x, x)
print("output:", tuple(out_vec.shape), " weights:", tuple(weights.shape))
print("loop == vectorised:", torch.allclose(out_loop, out_vec, atol=1e-6))

# %% [markdown]
# ### What goes wrong without the transpose
#
# A tempting shortcut for the merge is `heads_out.reshape(batch, n, d_model)`, skipping the transpose. The
# shape comes out right, so nothing crashes. To see what it does, fill a small tensor with labels: the entry for
# head $h$ at position $p$ holds the number $10h + p$.

# %%
# NBVAL_CHECK_OUTPUT
h_, n_, dk_ = 2, 3, 2
labels = (10 * torch.arange(h_)[:, None, None] + torch.arange(n_)[None, :, None]).expand(h_, n_, dk_)[None]
print("heads, (1, heads, len, d_k):\n", labels[0].tolist())
print("merged with the transpose, (1, len, d_model):\n", labels.transpose(1, 2).reshape(1, n_, h_ * dk_)[0].tolist())
print("merged WITHOUT the transpose:\n", labels.reshape(1, n_, h_ * dk_)[0].tolist())

# %% [markdown]
# With the transpose, row $p$ is `[p, p, 10+p, 10+p]`: position $p$'s answer from head 0, then from head 1.
# Without it, row 0 is `[0, 0, 1, 1]`: **head 0's answers for positions 0 and 1**, and no head 1 at all. The
# reshape walks memory in `(heads, len, d_k)` order, so it packs consecutive *positions* of one head into a row.
# Each output position is now built from other positions' results. How much does that change the output of our
# module?

# %%
def multi_head_no_transpose(mha, query):
    batch, n, d_model = query.shape
    q, k, v = (w(query).view(batch, n, mha.heads, mha.d_k).transpose(1, 2) for w in (mha.w_q, mha.w_k, mha.w_v))
    heads_out, _ = scaled_dot_product_attention(q, k, v)  # (batch, heads, n, d_k)
    return mha.w_o(heads_out.reshape(batch, n, d_model))  # the bug: no transpose before the reshape


with torch.no_grad():
    out_bug = multi_head_no_transpose(mha, x)
    err = (out_bug - out_vec).abs().max().item()
    size = out_vec.abs().mean().item()
print(f"same shape: {out_bug.shape == out_vec.shape};  largest error: {err:.2f}, "
      f"while a typical output entry is {size:.2f}")

# %% [markdown]
# An error as large as the outputs themselves, with the right shape: this bug trains (badly) rather than
# crashing, which is how it can go unnoticed in a from-scratch implementation. The exercise checker below
# recognises it by exactly this symptom.

# %% [markdown]
# ## Check it
#
# ### Against `tfm_lesson.MultiHeadAttention`
#
# The package's module has two paths: an **explicit** one (`need_weights=True`) that runs the readable
# attention of chapter 01 and returns the weights, and a **fast** one that calls PyTorch's fused
# `F.scaled_dot_product_attention` and returns no weights. Both must equal our two versions, with and without
# a mask. The mask: the second sequence has 2 padding tokens at the end, so its keys 3 and 4 are hidden.

# %%
# NBVAL_CHECK_OUTPUT
pad = torch.tensor([[True] * 5, [True] * 3 + [False] * 2], device=device)  # (batch, k_len): True = real token
mask4 = pad[:, None, None, :]  # (batch, 1, 1, k_len): broadcasts over heads and queries
mask3 = pad[:, None, :]  # (batch, 1, k_len): one head's (batch, q_len, k_len) scores

with torch.no_grad():
    fast, none = mha(x, x, x, mask4)  # fused SDPA path
    explicit, w_ref = mha(x, x, x, mask4, need_weights=True)  # readable path
    ours_vec, w_ours = multi_head_vectorised(mha, x, x, x, mask4)
    ours_loop = multi_head_loop(mha, x, x, x, mask3)

print("fast path gives weights:", none is not None)
for name, ours in [("loop", ours_loop), ("vectorised", ours_vec), ("explicit", explicit)]:
    print(f"{name:10s} == fast path: {torch.allclose(ours, fast, atol=1e-6)}")
print("weights equal:", torch.allclose(w_ours, w_ref, atol=1e-6), " padded keys get weight 0:",
      bool((w_ours[1, :, :, 3:] == 0).all()))

# %% [markdown]
# ### Against PyTorch's `nn.MultiheadAttention`
#
# PyTorch stores the same numbers differently: $W^Q, W^K, W^V$ stacked in one `in_proj_weight` of shape
# `(3 d_model, d_model)`, and $W^O$ in `out_proj`. `tfm_lesson.to_torch` builds an `nn.MultiheadAttention`
# (batch-first) loaded with our weights, `tfm_lesson.from_torch` goes the other way.
#
# One trap: **mask polarity**. In `nn.MultiheadAttention`, `True` in a mask means *blocked*, the opposite of
# our convention (and of `F.scaled_dot_product_attention`). `tfm_lesson.torch_mask` converts (it is `~mask`).
# We test a padding mask (`key_padding_mask`, shape `(batch, k_len)`) and a causal mask (`attn_mask`, shape
# `(q_len, k_len)`) together, and ask PyTorch for per-head weights (`average_attn_weights=False`).

# %%
# NBVAL_CHECK_OUTPUT
theirs = tfm_lesson.to_torch(mha).eval()
causal = tfm_lesson.causal_mask(length, device=device)  # (q_len, k_len), True = may attend
both = mask4 & causal  # (batch, 1, q_len, k_len)

with torch.no_grad():
    out_t, w_t = theirs(x, x, x, key_padding_mask=tfm_lesson.torch_mask(pad),
                        attn_mask=tfm_lesson.torch_mask(causal), average_attn_weights=False)
    ours_vec, w_ours = multi_head_vectorised(mha, x, x, x, both)
    round_trip = tfm_lesson.from_torch(theirs).eval()
    out_rt, _ = round_trip(x, x, x, both)

print(type(theirs).__name__, tuple(theirs.in_proj_weight.shape))
print("output  ours == torch:", torch.allclose(ours_vec, out_t, atol=1e-6))
print("weights ours == torch:", torch.allclose(w_ours, w_t, atol=1e-6))
print("from_torch(to_torch(mha)) == ours:", torch.allclose(out_rt, ours_vec, atol=1e-6))

# %% [markdown]
# And the trap, measured: hand PyTorch our padding mask unconverted. It now hides exactly the keys we meant to
# keep. Sequence 0 has no padding, so *every* key is hidden; sequence 1 attends only to its two pad tokens.

# %%
with torch.no_grad():
    wrong, _ = theirs(x, x, x, key_padding_mask=pad)  # BUG on purpose: our True = may attend, theirs = blocked
print("sequence 0, all keys hidden -> NaN everywhere:", bool(wrong[0].isnan().all()))
print(f"sequence 1, only pads visible -> largest error {(wrong[1] - fast[1]).abs().max().item():.2f}")

# %% [markdown]
# ### Self-attention and cross-attention
#
# The module does not care where $Q$, $K$ and $V$ come from; the Transformer uses it in two ways.
#
# - **Self-attention** (the encoder, and the decoder's first sub-layer): `query = key = value = x`. Every
#   position of one sequence looks at every position of the same sequence; weights `(batch, heads, n, n)`.
# - **Cross-attention** (the decoder's second sub-layer, "encoder-decoder attention" in the paper): the
#   queries come from the decoder, the keys and values from the encoder's output. A decoder of length $n$
#   reading a source of length $m$ gives weights `(batch, heads, n, m)`: not square. The padding mask is the
#   source's, `(batch, 1, 1, m)`.
#
# Cross-attention is where a bug hides that self-attention never shows: feeding a projection the wrong
# *input*, such as `K = w_k(query)` instead of `w_k(key)`. The shapes still fit, and in self-attention the
# inputs are equal, so the output is the same there. (The wrong *layer*, `w_k(query)` used as $Q$, is another
# matter: `w_q` and `w_k` hold different weights, so that changes the output in self-attention too.) The
# checker tests with `query ≠ key` for that reason.

# %%
# NBVAL_CHECK_OUTPUT
memory = torch.randn(batch, 7, d_model).to(device)  # the encoder's output: (batch, m=7, d_model)
target = torch.randn(batch, 4, d_model).to(device)  # the decoder's states: (batch, n=4, d_model)
src_pad = torch.tensor([[True] * 7, [True] * 5 + [False] * 2], device=device)[:, None, None, :]  # (batch, 1, 1, 7)

with torch.no_grad():
    cross, w_cross = multi_head_vectorised(mha, target, memory, memory, src_pad)
    cross_ref, _ = mha(target, memory, memory, src_pad)
print("cross-attention output:", tuple(cross.shape), " weights:", tuple(w_cross.shape))
print("equal to tfm_lesson:", torch.allclose(cross, cross_ref, atol=1e-6))

# %% [markdown]
# ### What it costs
#
# **Parameters.** Four $d_{model} \times d_{model}$ matrices plus four biases: $4 d_{model}^2 + 4 d_{model}$,
# **whatever the number of heads**: more heads means thinner heads, not more weights.
#
# **Compute**, in multiply-adds for a sequence of $n$ tokens attending to itself:
# the four projections cost $4 n d_{model}^2$; the scores $QK^\top$ cost $h \cdot n^2 d_k = n^2 d_{model}$,
# and the weighted sum of the values the same again. So attention costs $2 n^2 d_{model}$, the projections
# $4 n d_{model}^2$: the quadratic part wins only for $n > 2 d_{model}$ (1024 tokens in the base model).
# This is the $O(n^2 \cdot d)$ per layer of the paper's table 1.

# %%
# NBVAL_CHECK_OUTPUT
for h in (1, 8, 16):
    print(f"d_model=512, heads={h:2d}: {sum(p.numel() for p in MultiHeadAttention(512, h).parameters()):,} parameters")
print()
D = 512
for n in (10, 100, 1000, 4000):
    proj, attn = 4 * n * D * D, 2 * n * n * D
    print(f"n={n:5d}: projections {proj / 1e6:8.1f} M, attention {attn / 1e6:8.1f} M multiply-adds, "
          f"attention share {attn / (proj + attn):.0%}")

# %% [markdown]
# The loop and the vectorised version do the same arithmetic; the difference is how it is scheduled. The loop
# issues $3h$ projection products and $2h$ attention products, plus one $W^O$, per call where the vectorised version issues 4 big ones plus one batched
# attention. How much that matters depends on the hardware, so the cell below prints what *your* machine
# measures, and the ratio of the loop's time to the vectorised version's. On a GPU every small product is a
# separate kernel launch, so the loop falls further behind there than on a CPU. The fused kernel behind
# `tfm_lesson`'s fast path (`F.scaled_dot_product_attention`) goes further: it can compute the output without
# ever storing the `(batch, heads, n, n)` weights. The numbers change from run to run, more so on a busy
# machine; read them as rough. On a CPU at these sizes the three can come out about equal: the gap opens on a
# GPU and with longer sequences.

# %%
big = MultiHeadAttention(512, 8).to(device).eval()
xb = torch.randn(8, 64, 512).to(device)
timings = {}
with torch.no_grad():
    for name, fn in [("loop", lambda: multi_head_loop(big, xb, xb, xb)),
                     ("vectorised", lambda: multi_head_vectorised(big, xb, xb, xb)),
                     ("tfm_lesson fast path", lambda: big(xb, xb, xb))]:
        fn()  # warm-up
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()  # GPU calls return before the work is done
        timings[name] = (time.perf_counter() - start) / 5
        print(f"{name:22s} {timings[name] * 1e3:6.1f} ms")
print(f"on this machine the loop takes {timings['loop'] / timings['vectorised']:.1f} times as long as the "
      "vectorised version")

# %% [markdown]
# ## See it: what different heads can do
#
# A freshly initialised module attends with no particular pattern, which makes a dull picture. To see what heads
# *can* do, we set the weights by hand. Each token of "the cat sat on the mat" gets a vector with two
# parts: a one-hot for its word (a toy vocabulary of 8 words) and a one-hot for its position. Positions are a
# stand-in here; chapter 04 shows how the real model adds them. `tfm_lesson.look.toy_heads.hand_set_heads` writes the
# weights of a `MultiHeadAttention(24, heads=3)` so that
#
# - **head 0** matches a query at position $p$ with the key at position $p-1$: *look at the previous word* (position 0 has
#   no previous word, so it looks at itself) (the query of position $p$ is the unit vector $e_p$, the key of position $j$ is $e_{j+1}$, so they match
#   when $j = p - 1$: $W^Q \ne W^K$, an asymmetric pair);
# - **head 1** matches a word with the same word: *find other copies of me* (here $W^Q = W^K$, and the two
#   *the*s find each other);
# - **head 2** gives every query the same vector (through the bias of $W^Q$) and only the nouns a matching key:
#   *where are the nouns?*
#
# Three questions, three different distributions, asked in one layer: the thing one softmax cannot do. Read
# the function `hand_set_heads` in `tfm_lesson/look/toy_heads.py` to see every weight it sets.

# %% mystnb={"image": {"alt": "Three attention heatmaps over 'the cat sat on the mat': head 0 looks at the previous word (a line just below the diagonal), head 1 at the same word, head 2 at the nouns cat and mat."}}
tokens = "the cat sat on the mat".split()
demo, x_demo = hand_set_heads(tokens)  # MultiHeadAttention(24, 3), features (1, 6, 24)
with torch.no_grad():
    _, demo_weights = demo(x_demo, x_demo, x_demo, need_weights=True)  # (1, heads, 6, 6)
viz.show_heads(demo_weights[0], x_tokens=tokens, y_tokens=tokens,
               title="Three hand-set heads: previous word (0), same word (1), nouns (2)")

# %% [markdown]
# Read each panel by rows: row *sat* of head 0 puts its weight on *cat*, the word before it; row *the* of
# head 1 splits its weight between the two *the*s; every row of head 2 looks at *cat* and *mat*.
#
# ## Learned, not set: training the three heads
#
# Nobody sets weights by hand in a real model: gradient descent finds them. Here is the smallest version of
# that. `train_heads` starts from a freshly initialised `MultiHeadAttention(24, 3)` and shows it random
# sentences of 6 words from the toy vocabulary, together with the keys each head's question should pick (the
# previous word; the copies of my word; the nouns). The loss is the squared difference between each head's
# weights and those targets, and an optimiser (Adam, which chapter 10 uses for the whole model; plain
# gradient descent would do here too) updates only $W^Q$ and $W^K$, the matrices that decide where a head looks.
# This is a supervised toy: a real Transformer is never told where to look, its heads learn from the
# translation loss alone (chapters 10 and 12 show maps learned that way). On a 2-core laptop CPU the 300 steps
# take a few seconds.

# %%
start = time.perf_counter()
trained = train_heads(steps=300)
print(f"300 training steps in {time.perf_counter() - start:.1f} s;  weight on the right keys per head:",
      [round(v, 3) for v in trained.on_target])

# %%
# NBVAL_CHECK_OUTPUT
print("every head puts more than 95% of its weight on the right keys:", all(v > 0.95 for v in trained.on_target))

# %% [markdown]
# The trained heads on our sentence (bottom row) beside the hand-set ones (top row). Gradient descent found
# the three patterns; its weights are not the ones we wrote (it starts from random matrices and only needs
# products $W^Q (W^K)^\top$ that give the same scores), but the maps agree.

# %% mystnb={"image": {"alt": "Two rows of three attention heatmaps: the hand-set heads on top and the trained heads below show the same three patterns: previous word, same word and nouns."}}
with torch.no_grad():
    _, learned_weights = trained.mha(x_demo, x_demo, x_demo, need_weights=True)  # (1, heads, 6, 6)
fig = viz.show_heads(torch.stack([demo_weights[0], learned_weights[0]]), x_tokens=tokens, y_tokens=tokens)
fig.axes[0].set_ylabel("hand-set")
fig.axes[3].set_ylabel("trained")
fig.suptitle("Previous word (0), same word (1), nouns (2): set by hand (top), learned (bottom)")
fig

# %%
# NBVAL_CHECK_OUTPUT
print("hand-set and learned maps agree within 0.05 everywhere:",
      bool((learned_weights - demo_weights).abs().max() < 0.05))

# %% [markdown]
# ## Play with it
#
# Pick a head, and compare its map with the others'. Try the trained module too
# (`widgets.head_explorer(mha=trained.mha, x=x_demo, tokens=tokens)`), and a freshly initialised one
# (`widgets.head_explorer()` with no arguments): its heads are far less structured, because structure comes from
# training.

# %% mystnb={"image": {"alt": "Explorer picture: head 0's weights over the six words drawn large on the left, and the small maps of all three heads on the right with head 0 framed."}}
widgets.head_explorer(mha=demo, x=x_demo, tokens=tokens)

# %% [markdown]
# ## Exercises

# %% [markdown]
# ### Exercise 1: split the heads
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `split_heads(x, heads)` that takes `x` of shape `(batch, len, d_model)` and returns
# `(batch, heads, len, d_k)` with $d_k = d_{model}/\text{heads}$, head $h$ holding features
# `h*d_k .. (h+1)*d_k - 1` of every position. It must work for any shape and keep the dtype.

# %%
def split_heads(x, heads):
    ...  # your turn: (batch, len, d_model) -> (batch, heads, len, d_k)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def split_heads(x, heads):
    batch, length, d_model = x.shape
    return x.view(batch, length, heads, d_model // heads).transpose(1, 2)  # (batch, heads, len, d_k)


# %%
# NBVAL_CHECK_OUTPUT
check_split_heads(split_heads)

# %% [markdown]
# ### Exercise 2: merge the heads
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `merge_heads(x)`, the inverse: `(batch, heads, len, d_k)` to `(batch, len, d_model)`, each position's
# heads side by side. The checker also verifies that `split_heads(merge_heads(x))` gives `x` back.

# %%
def merge_heads(x):
    ...  # your turn: (batch, heads, len, d_k) -> (batch, len, d_model)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def merge_heads(x):
    batch, heads, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * d_k)  # (batch, len, heads, d_k) -> (batch, len, d_model)


# %%
# NBVAL_CHECK_OUTPUT
check_merge_heads(merge_heads)

# %% [markdown]
# ### Exercise 3: the whole module
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~20 min
#
# Write `MyMultiHeadAttention(d_model, heads)`, an `nn.Module` with four `nn.Linear(d_model, d_model)` layers
# named `w_q, w_k, w_v, w_o` (the names let the checker load the reference's weights into yours), and
# `forward(query, key, value, mask=None)` returning the output `(batch, q_len, d_model)`, or
# `(output, weights)`. The mask is boolean, `True` = may attend, broadcastable to
# `(batch, heads, q_len, k_len)`. Use your `split_heads` and `merge_heads`, and write the attention itself
# (scores, mask, softmax, weighted sum) rather than calling the package's: **the checker refuses a class that
# derives from `tfm_lesson.MultiHeadAttention`, or whose code names `MultiHeadAttention`, `nn.MultiheadAttention`
# or a ready-made attention such as `F.scaled_dot_product_attention`.** This exercise needs chapter 02's
# exercise 3 done first. For the mask and the softmax, reuse
# your safe `masked_softmax` of chapter 02's exercise 3 (each chapter is a fresh kernel: paste it at the top of
# the exercise cell, above your class; the solution below copies it), so that a query with no
# visible key gets all-zero weights rather than NaN: each head then outputs 0 for it, and the module returns
# the bias of `w_o` (what `w_o` gives for an all-zero input; `nn.Linear` has one, though the paper's formula
# does not). The checker tries self- and cross-attention, padding and causal masks, float32 and float64, and
# two batches with such queries: a sequence padded at the start instead of the end (left-padded) under the
# causal mask, whose first positions may see only earlier positions, all of them pads, so they see no key at
# all; and a batch whose second source sentence is all padding.

# %%
class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        ...  # your turn

    def forward(self, query, key, value, mask=None):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def masked_softmax(scores, mask):  # chapter 02, exercise 3
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1): False for a fully masked row
    filled = scores.masked_fill(~(mask | ~has_key), float("-inf"))  # such rows stay finite...
    return filled.softmax(dim=-1).masked_fill(~has_key, 0.0)  # ...and are zeroed here


class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        assert d_model % heads == 0, "d_model must be divisible by heads"
        self.heads, self.d_k = heads, d_model // heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.w_q(query), self.heads)  # (batch, heads, q_len, d_k)
        k = split_heads(self.w_k(key), self.heads)  # (batch, heads, k_len, d_k)
        v = split_heads(self.w_v(value), self.heads)  # (batch, heads, k_len, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (batch, heads, q_len, k_len)
        weights = scores.softmax(dim=-1) if mask is None else masked_softmax(scores, mask)  # over the keys
        return self.w_o(merge_heads(weights @ v)), weights  # (batch, q_len, d_model)


# %%
# NBVAL_CHECK_OUTPUT
check_multi_head_attention(MyMultiHeadAttention)

# %% [markdown]
# **Going further** (no checker): give your class an option `fused_qkv=True` that computes $Q$, $K$ and $V$
# in one matmul when `query is key is value`, as `tfm_lesson.MultiHeadAttention` does, and confirm the
# output does not change.

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("03")

# %% [markdown]
# ## Summary
#
# - With $Q = K = x$ the scores are symmetric and every token matches itself best; the projections $W^Q \ne W^K$
#   let a token ask a different question than the one it answers.
# - A head is one scaled dot-product attention in its own $d_k = d_{model}/h$-dimensional subspace; $h$ heads
#   ask $h$ questions at once, and $W^O$ mixes their answers.
# - All heads' projections live side by side in one $d_{model} \times d_{model}$ matrix per role. Split with
#   `view(batch, len, heads, d_k).transpose(1, 2)`; merge with `transpose(1, 2).reshape(batch, len, d_model)`.
#   Without the transpose the shapes still fit and the output is wrong by as much as its own size.
# - Our loop, our vectorised version, both paths of `tfm_lesson.MultiHeadAttention` and
#   `nn.MultiheadAttention` agree to 1e-6, once masks are converted (`torch_mask`: PyTorch's `True` means
#   *blocked*).
# - Self-attention: `query = key = value`; cross-attention: queries from the decoder, keys and values from the
#   encoder, weights `(batch, heads, n, m)`.
# - Parameters $4d_{model}^2 + 4d_{model}$, independent of $h$; compute $4nd_{model}^2 + 2n^2d_{model}$.
# - Heads can be set by hand to look at the previous word, the same word or the nouns; gradient descent finds
#   the same maps from random weights in a few hundred steps.
#
# Attention so far treats its input as a *set*: shuffle the tokens and the outputs shuffle along. Chapter 04
# proves it, and fixes it with positional encodings.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 03: Multi-head attention. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
