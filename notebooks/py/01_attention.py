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
# # 01 · Scaled dot-product attention
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/01_attention.ipynb)
#
# Everything in the Transformer is built around one operation, which the paper (section 3.2.1) calls *scaled
# dot-product attention*:
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V .$$
#
# In this chapter you build it twice — first as a loop over queries that you can read line by line, then as
# two matrix products — prove it equal to `tfm_lesson`'s and PyTorch's, and then take the formula apart to
# see why the $\sqrt{d_k}$ is there.
#
# **What you will learn**
#
# - attention as a *soft* dictionary lookup: queries, keys and values;
# - the shapes at each step, for one sentence and for `(batch, heads)` at once;
# - a slow per-query loop, then the vectorised version, equal to `tfm_lesson.scaled_dot_product_attention` and
#   `torch.nn.functional.scaled_dot_product_attention`;
# - why the paper chose dot products over *additive* attention, and **why $\sqrt{d_k}$**: we measure that dot
#   products of $d_k$-dimensional vectors have variance $d_k$, and watch an unscaled softmax saturate (one
#   weight near 1, gradients near 0);
# - how to choose queries and keys by hand so that attention becomes an exact lookup;
# - how to read an attention map, and how the scale works as a *temperature*.

# %%
import math

import torch
import torch.nn.functional as F

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import scaled_dot_product_attention, viz, widgets
from tfm_lesson.checks import check_attention, check_attention_scores, check_retrieval

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## Intuition: a soft dictionary lookup
#
# A Python dictionary maps a key to a value: you ask with a query, the one key **equal** to it answers, and you
# get its value. Attention relaxes every part of that:
#
# - keys and queries are vectors, and instead of "equal or not" we measure how **similar** the query is to each
#   key with a dot product (large when they point the same way);
# - instead of picking one key, a softmax turns the similarities into **weights** that are positive and sum to
#   one — a probability distribution over the keys;
# - the answer is the **weighted average** of the values.
#
# Every token of a sentence asks its own query, so each token ends up with its own mix of the others'
# values. Because the whole thing is made of products and a softmax, it is differentiable: training learns what
# the queries, keys and values should be (chapter 03 adds those learned projections). Here $Q$, $K$ and $V$ are
# given.

# %% [markdown]
# ## The math, with shapes
#
# For one sentence: $n$ queries $Q \in \mathbb{R}^{n \times d_k}$, $m$ keys $K \in \mathbb{R}^{m \times d_k}$
# and their values $V \in \mathbb{R}^{m \times d_v}$ (one value per key).
#
# | step | formula | shape |
# |---|---|---|
# | scores | $S = Q K^\top / \sqrt{d_k}$ | `(q_len, k_len)` = $(n, m)$ |
# | weights | $A = \mathrm{softmax}(S)$, row by row | `(q_len, k_len)`, each row sums to 1 |
# | output | $A V$ | `(q_len, d_v)` = $(n, d_v)$ |
#
# Row $i$ of the output is $\sum_j A_{ij} v_j$: query $i$'s mix of the values. The softmax runs over the
# **keys** (the last axis): each query distributes one unit of attention over the keys. With a batch of
# sentences and several heads, every tensor gains leading `(batch, heads)` dimensions and the formula does not
# change. In the self-attention of an encoder, $Q$, $K$ and $V$ all come from the same sentence, so $n = m$;
# in the decoder's cross-attention the queries come from the target and the keys from the source, so $n \ne m$.
# We keep $n \ne m$ below, so a mixed-up axis shows.

# %% [markdown]
# ## Build it, slowly: one query at a time
#
# Four queries, six keys, $d_k = 8$, $d_v = 5$. For each query: score it against every key, softmax the six
# scores, average the six values with those weights.

# %%
n, m, d_k, d_v = 4, 6, 8, 5
Q = torch.randn(n, d_k).to(device)  # (q_len, d_k), drawn on the CPU: the same numbers on a GPU machine too
K = torch.randn(m, d_k).to(device)  # (k_len, d_k)
V = torch.randn(m, d_v).to(device)  # (k_len, d_v)


def attention_loop(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention, one query at a time: easy to read, slow to run."""
    out = []
    for q in Q:  # q: (d_k,)
        scores = torch.stack([q @ k for k in K]) / math.sqrt(Q.size(-1))  # (k_len,): one score per key
        weights = scores.exp() / scores.exp().sum()  # (k_len,): positive, sums to 1 (see ch. 00 for the max trick)
        out.append(sum(w * v for w, v in zip(weights, V)))  # (d_v,): weighted average of the value rows
    return torch.stack(out)  # (q_len, d_v)


out_loop = attention_loop(Q, K, V)

# %% [markdown]
# ## Build it, fast: two matrix products
#
# The inner loop over keys is a row of $Q K^\top$; the loop over queries stacks those rows. The weighted sum is
# a matrix product with $V$. `transpose(-2, -1)` and `dim=-1` make the same three lines work for any leading
# dimensions.

# %%
def attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))  # (..., q_len, k_len)
    weights = scores.softmax(dim=-1)  # (..., q_len, k_len), rows sum to 1
    return weights @ V  # (..., q_len, d_v)


out_fast = attention(Q, K, V)

# %% [markdown]
# ## Check it: the same numbers as `tfm_lesson` and PyTorch
#
# `tfm_lesson.scaled_dot_product_attention(query, key, value, mask=None)` is the package's readable version; it
# returns `(output, weights)`. PyTorch's `F.scaled_dot_product_attention` is the fused version used for speed
# (it never hands out the weights). We compare the loop on one sentence, and the other three on a batch of 2 sentences with 3 heads.

# %%
Qb = torch.randn(2, 3, n, d_k).to(device)  # (batch, heads, q_len, d_k)
Kb = torch.randn(2, 3, m, d_k).to(device)  # (batch, heads, k_len, d_k)
Vb = torch.randn(2, 3, m, d_v).to(device)  # (batch, heads, k_len, d_v)
ours = attention(Qb, Kb, Vb)  # (batch, heads, q_len, d_v)
package, weights = scaled_dot_product_attention(Qb, Kb, Vb)
fused = F.scaled_dot_product_attention(Qb, Kb, Vb)
err = max((ours - package).abs().max().item(), (ours - fused).abs().max().item())

# %%
# NBVAL_CHECK_OUTPUT
print("loop == matmul (one sentence):", torch.allclose(out_loop, out_fast, atol=1e-5))
print("output:", tuple(ours.shape), " weights:", tuple(weights.shape))
print("ours == tfm_lesson == torch (within 1e-5):", err < 1e-5)
print("every row of weights sums to 1:", torch.allclose(weights.sum(-1), torch.ones(2, 3, n, device=device)))

# %% [markdown]
# ## Why dot products, and why a scale: the paper's argument
#
# Section 3.2.1 of the paper compares two ways of scoring a query against a key.
#
# - **Additive attention** (Bahdanau et al., 2015, the attention of the recurrent translators before the
#   Transformer) feeds the query and the key through a small network with one hidden layer:
#   $\mathrm{score}(q, k) = w^\top \tanh(W_1 q + W_2 k)$.
# - **Dot-product attention** simply takes $q \cdot k$, so all the scores of a sentence are one matrix product
#   $Q K^\top$.
#
# The two cost about the same number of operations in theory, but dot products run as one large matrix
# multiplication, for which GPUs and linear-algebra libraries are heavily optimised, and need no
# `(q_len, k_len, hidden)` tensor in memory; so dot-product attention is much faster and lighter in practice.
# There is a catch the paper reports from earlier experiments (Britz et al., 2017): for small $d_k$ the two
# work about equally well, but for large $d_k$ additive attention wins against dot products *without*
# scaling. The paper's explanation is that for large $d_k$ the dot products grow large, which pushes the
# softmax into a region where its gradients are tiny. Its remedy is the factor $1/\sqrt{d_k}$: keep the speed
# of dot products and remove their weakness. The rest of this section checks that explanation by measuring it.

# %% [markdown]
# ## Why divide by $\sqrt{d_k}$?
#
# The paper's footnote 4 gives the reason in one line: if the components of $q$ and $k$ are independent with
# mean 0 and variance 1, then $q \cdot k = \sum_{c=1}^{d_k} q_c k_c$ has mean 0 and variance $d_k$. Each term
# $q_c k_c$ has variance $\mathbb{E}[q_c^2]\,\mathbb{E}[k_c^2] = 1$, and variances of independent terms add up.
# So the typical size of a score, its standard deviation, grows like $\sqrt{d_k}$; dividing by $\sqrt{d_k}$ brings
# it back to 1, whatever the width of the model.
#
# Let us not take it on faith. For each $d_k$ we draw 20,000 pairs of random unit-variance vectors and measure
# the variance of their dot product, before and after scaling. (The vectors are drawn by the CPU's seeded
# generator, so a machine with a GPU draws them too. Not bit for bit everywhere: PyTorch's CPU kernels compute
# `torch.randn` slightly differently, so the kernel setting `ATEN_CPU_CAPABILITY=default` draws numbers that differ
# from those of `avx2` and `avx512` in their last digits. The printed variances came out the same, to the digits
# shown, under all three settings.)

# %%
gen = torch.Generator().manual_seed(0)
d_ks = [4, 16, 64, 256, 1024]
rows = []
for dk in d_ks:
    q = torch.randn(20_000, dk, generator=gen)  # (pairs, d_k), unit variance
    k = torch.randn(20_000, dk, generator=gen)
    dots = (q * k).sum(-1)  # (pairs,): one dot product per pair
    rows.append((dk, dots.var().item(), (dots / math.sqrt(dk)).var().item()))

# %%
print(f"{'d_k':>5} {'var(q.k)':>9} {'var(q.k) / d_k':>15} {'var(q.k / sqrt(d_k))':>21}")
for dk, var, scaled_var in rows:
    print(f"{dk:>5} {var:>9.1f} {var / dk:>15.2f} {scaled_var:>21.2f}")

# %%
# NBVAL_CHECK_OUTPUT
print("var(q.k) within 5% of d_k for every d_k:", all(abs(var / dk - 1) < 0.05 for dk, var, _ in rows))
print("scaled variance within 5% of 1 for every d_k:", all(abs(sv - 1) < 0.05 for _, _, sv in rows))

# %% [markdown]
# The variance of the raw dot product is $d_k$ (the printed ratio is 1 up to sampling noise, at every width), and the
# scaled one stays at 1.
#
# **Why a large variance hurts: the softmax saturates.** The softmax only cares about *differences* between
# scores. When scores are spread over $\pm 32$ (that is $\sqrt{1024}$), the largest one beats the second by so
# much that it takes nearly all the weight: the softmax behaves like a hard `argmax`. Worse, its gradient
# vanishes: $\partial a_j / \partial s_i = a_j(\delta_{ij} - a_i)$ is close to 0 when one $a$ is about 1 and
# the others about 0, so the queries and keys that produced the scores barely learn.
#
# We measure both, for ten keys per query: the **largest weight** in each row (1/10 would be uniform, 1 is a
# hard choice) and the **size of the gradient** of the weights with respect to the scores (its Frobenius norm,
# the square root of the sum of its squared entries, averaged over 500 rows).

# %%
def saturation(dk: int, scaled: bool, n_rows: int = 500, keys: int = 10) -> tuple[float, float]:
    """Mean largest weight and mean gradient size of softmax rows of `keys` scores, for random q, k."""
    q = torch.randn(n_rows, 1, dk, generator=gen)  # (rows, 1 query, d_k)
    k = torch.randn(n_rows, keys, dk, generator=gen)  # (rows, keys, d_k)
    s = (q @ k.transpose(-2, -1)).squeeze(1)  # (rows, keys)
    if scaled:
        s = s / math.sqrt(dk)
    a = s.softmax(-1)  # (rows, keys)
    jac = torch.diag_embed(a) - a[:, :, None] * a[:, None, :]  # (rows, keys, keys): d a_j / d s_i
    return a.max(-1).values.mean().item(), jac.norm(dim=(-2, -1)).mean().item()


unscaled = [saturation(dk, scaled=False) for dk in d_ks]
scaled = [saturation(dk, scaled=True) for dk in d_ks]

# %%
print(f"{'d_k':>5} {'max weight':>11} {'(scaled)':>9} {'gradient':>9} {'(scaled)':>9}")
for dk, (mu, gu), (ms, gs) in zip(d_ks, unscaled, scaled):
    print(f"{dk:>5} {mu:>11.2f} {ms:>9.2f} {gu:>9.2f} {gs:>9.2f}")

# %%
# NBVAL_CHECK_OUTPUT
print("unscaled: largest weight > 0.9 and gradient < 0.1 at d_k=1024:", unscaled[-1][0] > 0.9 and unscaled[-1][1] < 0.1)
print("scaled: both within 0.05 of their d_k=4 values at every d_k:",
      all(abs(a - scaled[0][0]) < 0.05 and abs(g - scaled[0][1]) < 0.05 for a, g in scaled))

# %% [markdown]
# ## See it: saturation as the width grows
#
# Left to right, $d_k$ grows from 4 to 1024. Without the scale (the two curves labelled "Q Kᵀ") the largest
# weight climbs towards 1 and the gradient falls towards 0: attention becomes a hard, untrainable choice. With the
# scale (the two curves labelled "Q Kᵀ / √d_k") both stay flat: the softmax sees scores of the same spread at
# every width. (At $d_k = 4$ even the unscaled scores are already twice too spread, $\sqrt{4} = 2$.)

# %% mystnb={"image": {"alt": "Line chart over d_k from 4 to 1024: without the square-root scale the largest softmax weight climbs towards 1 and the gradient size falls towards 0, while with the scale both stay level."}}
viz.plot_lines({
    "largest weight, Q Kᵀ": [u[0] for u in unscaled],
    "largest weight, Q Kᵀ / √d_k": [s[0] for s in scaled],
    "gradient size, Q Kᵀ": [u[1] for u in unscaled],
    "gradient size, Q Kᵀ / √d_k": [s[1] for s in scaled],
}, x=[math.log2(dk) for dk in d_ks], xlabel="log₂ d_k  (d_k = 4 … 1024)", ylabel="mean over 500 queries",
    title="Without √d_k the softmax saturates: one weight → 1, gradient → 0")

# %% [markdown]
# ## See it: an attention map over a sentence
#
# Now a map you can read. Six tokens of "the cat sat on the mat" get random vectors ($d_k = 16$); the two *the*
# share one vector. In this self-attention $Q = K = V = x$ (no learned projections yet), and a vector's dot
# product with itself is its squared length, typically larger than its dot product with an unrelated random
# vector; so a token's query tends to score highest with its own key (these vectors are not scaled to length 1,
# so that is likely, not guaranteed): look for the bright diagonal, and for the two *the* rows, which are
# identical and attend equally to both *the* keys. The rows are queries, the columns keys, and each row sums to
# one. After training (chapter 10) the maps become far more interesting; the picture is read the same way.

# %% mystnb={"image": {"alt": "Six by six heatmap of self-attention weights over 'the cat sat on the mat', with the largest weights on the diagonal and between the two occurrences of 'the'."}}
tokens = ["the", "cat", "sat", "on", "the", "mat"]
vocab = {w: i for i, w in enumerate(dict.fromkeys(tokens))}
x = torch.randn(len(vocab), 16)[[vocab[w] for w in tokens]].to(device)  # (seq_len, d_model) = (6, 16)
_, w_sentence = scaled_dot_product_attention(x, x, x)  # weights (6, 6)
viz.show_attention(w_sentence, x_tokens=tokens, y_tokens=tokens,
                   title="Self-attention with Q = K = V = x: the diagonal and the two 'the' stand out")

# %%
# NBVAL_CHECK_OUTPUT
print("weights:", tuple(w_sentence.shape), " the/the rows equal:", torch.allclose(w_sentence[0], w_sentence[4]))

# %% [markdown]
# ## Play with it: the scale is a temperature
#
# Replace $\sqrt{d_k}$ by any scale $s$ in $\mathrm{softmax}(Q K^\top / s)$. A small $s$ sharpens every row
# towards a one-hot choice (low *temperature*); a large $s$ flattens every row towards the uniform $1/m$. The
# paper's $s = \sqrt{d_k}$ is the value that keeps the scores at unit variance. Drag the slider and watch the
# rows; the bar chart shows one query's weights and their entropy (0 for a hard choice, $\ln m$ for uniform).
# (In a static view, such as the book, you see the default $s = \sqrt{16} = 4$.)

# %% mystnb={"image": {"alt": "Explorer picture: left, the attention weights of the six words at the paper's scale sqrt(d_k) = 4 with the first query framed; right, that query's weights as bars with their entropy."}}
widgets.temperature_explorer(query=x, key=x, tokens=tokens)

# %% [markdown]
# ## Exercises
#
# Exercise 1 adds the scale to chapter 00's scores; exercise 2 turns attention into a lookup table that you
# design by hand; exercise 3 writes the whole of attention, with a mask.

# %% [markdown]
# ### Exercise 1: scaled scores
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `attention_scores(query, key)`: `query` is `(..., q_len, d_k)`, `key` is `(..., k_len, d_k)`; return
# $Q K^\top / \sqrt{d_k}$ shaped `(..., q_len, k_len)`. $d_k$ is the width of the queries and keys: the
# **last** dimension.

# %%
def attention_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    ...  # your turn: (..., q_len, k_len)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def attention_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    d_k = query.size(-1)
    return query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., q_len, k_len)


# %%
# NBVAL_CHECK_OUTPUT
check_attention_scores(attention_scores)

# %% [markdown]
# ### Exercise 2: design a lookup
# **Difficulty** 2/3 · **Importance** 2/3 · **Time** ~15 min
#
# So far the queries and keys were given. Now choose them yourself so that attention works as an exact lookup
# table: write `retrieval_qk(targets, k_len, d_k)` returning `(Q, K)`, with `Q` of shape `(len(targets), d_k)`
# and `K` of shape `(k_len, d_k)`, such that query `i` puts **at least 99%** of its weight on key `targets[i]`.
# Then `attention(Q, K, V)[i]` is (almost exactly) `V[targets[i]]`, whatever the values `V` are. The checker
# uses $d_k \ge$ `k_len` and targets such as `[2, 0, 3, 1]` (a permutation) or `[4, 4, 0, 2, 1]` (two queries
# want the same key).
#
# Hints: give key `j` its own direction, for instance row `j` of `torch.eye(k_len, d_k)`; then row `i` of `Q`
# must point in the direction of key `targets[i]`. One key winning is not enough: after the division by
# $\sqrt{d_k}$ its score must beat the others by a margin of several units, or the softmax still spreads the
# weight. Notice that `Q` and `K` must differ here: with $Q = K$ (and keys of equal length) every token's best
# match is itself.

# %%
def retrieval_qk(targets: list[int], k_len: int, d_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    ...  # your turn: return (Q, K), Q (len(targets), d_k) and K (k_len, d_k)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def retrieval_qk(targets: list[int], k_len: int, d_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    K = torch.eye(k_len, d_k)  # (k_len, d_k): key j points along axis j
    Q = 10 * math.sqrt(d_k) * K[targets]  # (q_len, d_k): query i points along key targets[i]'s axis
    return Q, K  # after / sqrt(d_k) the right score is 10, every other 0: weight e^10 / (e^10 + k_len - 1)


# %%
# NBVAL_CHECK_OUTPUT
check_retrieval(retrieval_qk)

# %% [markdown]
# Your lookup at work: four value rows (row `j` is all `j`) and the targets `[2, 0, 3, 1]`. Each output row is
# the value row its query asked for.

# %%
# NBVAL_CHECK_OUTPUT
lookup_values = torch.arange(4.0)[:, None] * torch.ones(4, 3)  # (k_len, d_v): value row j is all j
lookup = retrieval_qk([2, 0, 3, 1], 4, 8)
if lookup is None:  # the stub returns None until you write it
    print("retrieval_qk still returns None: solve exercise 2 first")
else:
    retrieved, _ = scaled_dot_product_attention(*lookup, lookup_values)  # (4, 3)
    print(retrieved.cpu().round(decimals=2))

# %% [markdown]
# ### Exercise 3: attention, with a mask
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `my_attention(query, key, value, mask=None)` returning `(output, weights)`: output `(..., q_len, d_v)`,
# weights `(..., q_len, k_len)`. Chapter 02 is about masks, but the checker already passes one, so here is the
# rule: `mask` is boolean, broadcastable to `(..., q_len, k_len)`, and **True means "may attend"**. Give the
# blocked scores the value $-\infty$ before the softmax (`scores.masked_fill(~mask, float("-inf"))`), so that
# their weight is exactly $e^{-\infty} = 0$ and the remaining weights of each row still sum to one. (In this
# exercise every query may attend to at least one key; chapter 02 handles a query that may see nothing.)

# %%
def my_attention(query, key, value, mask=None):
    ...  # your turn: return (output, weights)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # blocked keys: weight e^-inf = 0
    weights = scores.softmax(dim=-1)  # (..., q_len, k_len), rows sum to 1
    return weights @ value, weights  # (..., q_len, d_v), (..., q_len, k_len)


# %%
# NBVAL_CHECK_OUTPUT
check_attention(my_attention, corner_cases=False)

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("01")

# %% [markdown]
# ## Summary
#
# - $\mathrm{Attention}(Q, K, V) = \mathrm{softmax}(Q K^\top / \sqrt{d_k})\, V$: scores `(q_len, k_len)`, a
#   softmax over the keys (`dim=-1`), a weighted average of the values `(q_len, d_v)`. Leading `(batch, heads)`
#   dimensions come for free with `transpose(-2, -1)` and `@`.
# - The loop, the two-matmul version, `tfm_lesson.scaled_dot_product_attention` and
#   `F.scaled_dot_product_attention` agree to within $10^{-5}$.
# - Dot products of $d_k$ unit-variance components have variance $d_k$ (the measured ratio to $d_k$ was 1 up to
#   sampling noise from $d_k = 4$ to $1024$).
#   Unscaled, the softmax saturates — largest weight → 1, gradient → 0 as $d_k$ grows; dividing by
#   $\sqrt{d_k}$ keeps both where they are at any width.
# - The scale acts as a temperature: smaller is sharper, larger is flatter.
# - The paper chose dot products over additive attention for speed (one matrix product) and added the scale to
#   remove their one weakness at large $d_k$.
# - Attention can be a hard lookup: choose the queries and keys so that one score beats the rest by a wide
#   margin. That needs $Q \ne K$, which is why chapter 03 gives queries and keys their own projections.
#
# Next, chapter 02: masks — how padding and the future are hidden from attention, and what happens to a query
# that is allowed to see nothing.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 01: Scaled dot-product attention. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
