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
# # 04 · Positional encoding
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/04_positional_encoding.ipynb)
#
# Everything built so far (attention, masks, heads) compares every token with every other token and takes
# weighted averages. Apart from the causal mask of chapter 02, which lets a query see only the keys up to its own
# position,
# nothing in those formulas mentions *where* a token sits. This chapter proves that attention without a causal
# mask (the encoder's self-attention, cross-attention) is blind to order, then builds the paper's fix (section 3.5): add to each token's vector a
# **positional encoding**, a fixed pattern of sines and cosines that depends only on the position.
#
# **What you will learn**
#
# - why attention cannot tell "dog bites man" from "man bites dog", shown numerically;
# - the sinusoidal formula, built with a loop and then vectorised, and proven equal to `tfm_lesson`;
# - why sinusoids: moving $k$ positions along is a *rotation*, the same linear map at every position;
# - learned positional encodings, the paper's alternative (table 3, row E), and what each costs;
# - the classic bug of slicing the table along the **batch** axis.

# %%
import math

import torch
from torch import nn

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import (LearnedPositionalEncoding, MultiHeadAttention, SinusoidalPositionalEncoding,
                        sinusoidal_table, viz, widgets)
from tfm_lesson.checks import (check_learned_positional_encoding, check_offset_rotation,
                               check_positional_encoding)

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## Intuition: attention sees a bag of words
#
# Shuffle the words of a sentence. Every query still meets the same keys, with the same dot products; only the
# order in which they are listed changed. Softmax and weighted sums do not care about listing order, so each
# token gets exactly the output it had before, now in its new place. In symbols, for a permutation matrix $P$
# that reorders the rows of $X$ (queries, keys and values all come from $X$ in self-attention):
#
# $$\mathrm{softmax}\!\Big(\frac{P Q (P K)^\top}{\sqrt{d_k}}\Big) P V
# = P\,\mathrm{softmax}\!\Big(\frac{Q K^\top}{\sqrt{d_k}}\Big) P^\top P V
# = P\,\mathrm{Attention}(Q, K, V)$$
#
# because the row-wise softmax commutes with reordering rows and columns, and $P^\top P = I$. The projections
# act on each row separately, so they commute with $P$ too. Attention is **permutation equivariant**: permute
# the input, and the output permutes the same way. Let us check it on a real module.

# %%
# NBVAL_CHECK_OUTPUT
d_model, heads = 16, 4
mha = MultiHeadAttention(d_model, heads).to(device).eval()
x = torch.randn(1, 5, d_model).to(device)  # (batch=1, len=5, d_model)
perm = torch.tensor([3, 0, 4, 1, 2], device=device)  # a shuffle of the 5 positions

with torch.no_grad():
    out, _ = mha(x, x, x)
    out_of_shuffled, _ = mha(x[:, perm], x[:, perm], x[:, perm])  # attention on the shuffled sequence
print("attention(shuffled x) == shuffled attention(x):", torch.allclose(out_of_shuffled, out[:, perm], atol=1e-6))

# %% [markdown]
# Now with words. Give *dog*, *bites* and *man* one vector each (a random embedding, as an untrained model
# has) and run the two sentences through the same attention. The vector computed for *dog* is identical
# whether the dog bites or is bitten: attention alone cannot know who did what.

# %%
# NBVAL_CHECK_OUTPUT
words = {"dog": 0, "bites": 1, "man": 2}
embed = nn.Embedding(3, d_model).to(device)
s1 = torch.tensor([[words[w] for w in "dog bites man".split()]], device=device)  # (1, 3)
s2 = torch.tensor([[words[w] for w in "man bites dog".split()]], device=device)  # (1, 3)

with torch.no_grad():
    e1, e2 = embed(s1), embed(s2)  # (1, 3, d_model) each
    o1, _ = mha(e1, e1, e1)
    o2, _ = mha(e2, e2, e2)
print("'dog' in both sentences gets the same vector:", torch.allclose(o1[0, 0], o2[0, 2], atol=1e-6))
print("'bites' too:", torch.allclose(o1[0, 1], o2[0, 1], atol=1e-6))

# %% [markdown]
# The paper's fix puts the position *into the vectors*, since that is all its attention sees. (Other schemes
# put it into the attention scores instead: learned terms per distance (Shaw et al., 2018; T5, Raffel et al.,
# 2020), a penalty growing with distance (ALiBi, Press et al., 2022), or a rotation of queries and keys (RoPE,
# Su et al., 2021), which chapter 16 builds.) The paper adds a
# vector $PE(pos) \in \mathbb{R}^{d_{model}}$ to the embedding of the token at position $pos$, before the first
# layer (of both the encoder and the decoder). Adding rather than concatenating keeps the width $d_{model}$;
# the model can learn to keep content and position in different directions of that space.

# %% [markdown]
# ## The math
#
# Section 3.5 of the paper:
#
# $$PE_{(pos,\,2i)} = \sin\!\big(pos / 10000^{2i/d_{model}}\big), \qquad
# PE_{(pos,\,2i+1)} = \cos\!\big(pos / 10000^{2i/d_{model}}\big)$$
#
# - $pos = 0, 1, 2, \dots$ is the position; the table has one row per position, shape `(max_len, d_model)`.
# - $i = 0 \dots d_{model}/2 - 1$ numbers the **pairs** of columns: column $2i$ holds a sine, column $2i+1$ the
#   cosine of the **same** angle. So the exponent is $2i/d_{model}$ for both columns of a pair.
# - Pair $i$ turns at the angular frequency $\omega_i = 1/10000^{2i/d_{model}}$: its wavelength $2\pi/\omega_i$
#   runs in a geometric progression from $2\pi$ (pair 0: changes at every step) to nearly $10000 \cdot 2\pi$
#   (the last pair: almost constant over any real sentence).
#
# Think of a clock with $d_{model}/2$ hands turning at different speeds: the fast hands tell neighbouring
# positions apart, the slow ones tell far-apart regions apart, and together they give every position a
# distinct reading.

# %% [markdown]
# ## Build it
#
# ### Slow and obvious: a loop over positions and pairs
#
# Literally the formula, one number at a time. In the loop, `two_i` is the paper's $2i$: the index of a pair's
# sine column. When $d_{model}$ is odd the last pair has a sine and no cosine, hence the `if`.

# %%
# NBVAL_CHECK_OUTPUT
def pe_loop(max_len, d_model):
    table = torch.zeros(max_len, d_model, dtype=torch.float64)  # (max_len, d_model)
    for pos in range(max_len):
        for two_i in range(0, d_model, 2):
            angle = pos / 10000 ** (two_i / d_model)
            table[pos, two_i] = math.sin(angle)
            if two_i + 1 < d_model:
                table[pos, two_i + 1] = math.cos(angle)
    return table


print(pe_loop(4, 6).round(decimals=3))

# %% [markdown]
# Row 0 is $(0, 1, 0, 1, \dots)$: every angle is 0. Column 0 is $\sin(pos)$, column 1 $\cos(pos)$; the later
# columns change more and more slowly down the rows.
#
# ### Vectorised: an outer product
#
# The angle is a product of a position and a frequency, so all angles at once are the outer product of the
# column of positions `(max_len, 1)` and the row of frequencies `(1, ceil(d_model/2))`. Writing
# $10000^{-2i/d_{model}} = \exp(-2i \ln(10000) / d_{model})$ avoids raising a large number to a power.
# Sines go to the even columns `0::2`, cosines to the odd columns `1::2`.

# %%
def pe_vectorised(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model/2),)  = 0, 2, 4, ...
    omega = torch.exp(-math.log(10000.0) * two_i / d_model)  # (ceil(d_model/2),)  frequencies
    angle = position * omega  # (max_len, ceil(d_model/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # odd d_model: one cosine column fewer
    return table


# %% [markdown]
# ## Check it
#
# Loop, vectorised and `tfm_lesson.sinusoidal_table` (which returns float32) must agree, for an even and an
# odd $d_{model}$. Then the module: `SinusoidalPositionalEncoding(d_model, max_len)` keeps the table as a
# non-persistent buffer (it follows `.to(device)` and has no gradient, and it is rebuilt from the formula
# rather than stored in the `state_dict`) and its `forward(x)` returns `x + PE[:seq_len]`
# for a batch-first `x` of shape `(batch, seq_len, d_model)`.

# %%
# NBVAL_CHECK_OUTPUT
for n, d in [(50, 64), (20, 7)]:
    loop, vec, ref = pe_loop(n, d), pe_vectorised(n, d), sinusoidal_table(n, d)
    print(f"max_len={n}, d_model={d}: loop == vectorised {torch.allclose(loop, vec, atol=1e-12)}, "
          f"== tfm_lesson {torch.allclose(vec, ref.double(), atol=1e-6)}")

pe = SinusoidalPositionalEncoding(d_model=16, max_len=100).to(device)
x = torch.randn(3, 10, 16).to(device)  # (batch=3, seq_len=10, d_model=16)
y = pe(x)  # (batch, seq_len, d_model)
print("module output:", tuple(y.shape), " == x + table[:10]:",
      torch.allclose(y, x + pe_vectorised(100, 16)[:10].float().to(device), atol=1e-6))
print("trainable parameters:", sum(p.numel() for p in pe.parameters()), " buffer:", tuple(pe.pe.shape))

# %% [markdown]
# ### The batch-axis bug
#
# Some well-known code is written for sequence-first input, `(seq_len, batch, d_model)`, and stores the table as
# `(max_len, 1, d_model)` so that `pe[:x.size(0)]` picks the first `seq_len` positions (PyTorch's own
# `word_language_model` example in the `pytorch/examples` repository does this). Paste that into
# batch-first code and `x.size(0)` is the **batch size**: sequence $b$ gets position $b$'s vector added to all
# of its tokens, and no token gets its own position. Nothing crashes: the shapes still broadcast.

# %%
# NBVAL_CHECK_OUTPUT
table3 = pe.pe[:, None, :]  # (max_len, 1, d_model), the seq-first layout
wrong = x + table3[: x.size(0)]  # BUG on purpose: x.size(0) is batch=3 here, not seq_len=10
print("shape:", tuple(wrong.shape), f" largest error: {(wrong - y).abs().max().item():.2f}")
print("tokens 0 and 7 of sequence 1 got the same 'position':",
      torch.allclose(wrong[1, 0] - x[1, 0], wrong[1, 7] - x[1, 7], atol=1e-6))

# %% [markdown]
# With positions added, the shuffle test from the start fails, as it should: the same tokens in another order
# are now different inputs.

# %%
# NBVAL_CHECK_OUTPUT
pe16 = SinusoidalPositionalEncoding(d_model, max_len=50).to(device)
with torch.no_grad():
    o1, _ = mha(pe16(e1), pe16(e1), pe16(e1))  # "dog bites man" + positions
    o2, _ = mha(pe16(e2), pe16(e2), pe16(e2))  # "man bites dog" + positions
print("'dog' still gets the same vector in both sentences:", torch.allclose(o1[0, 0], o2[0, 2], atol=1e-6))

# %% [markdown]
# ## Why sinusoids? Offsets are rotations
#
# The paper's reason (section 3.5): "for any fixed offset $k$, $PE_{pos+k}$ can be represented as a linear
# function of $PE_{pos}$". Take one pair with frequency $\omega$ and write $a = \omega\,pos$, $t = \omega k$.
# The angle-addition formulas give
#
# $$\begin{pmatrix} \sin(a + t) \\ \cos(a + t) \end{pmatrix}
# = \begin{pmatrix} \cos t & \sin t \\ -\sin t & \cos t \end{pmatrix}
# \begin{pmatrix} \sin a \\ \cos a \end{pmatrix}.$$
#
# The $2\times2$ matrix depends on the offset $k$ but **not on the position**: moving $k$ steps along is the same
# rotation wherever you start. Stack one such block per pair and you get one $d_{model} \times d_{model}$ matrix
# $M_k$ with $PE_{pos+k} = M_k\,PE_{pos}$ for every $pos$. A layer that wants "the token 3 to the left" can,
# in principle, learn a fixed linear map for it.
#
# **Rows and columns.** The formulas here write a position's encoding as a *column* vector with the matrix on
# its left, $M_k\,PE_{pos}$, as papers usually do. In code a position's encoding is a *row* of the table
# (shape `(max_len, d_model)`, one row per position), so the same map is applied on the right, with the
# transpose: `table @ M_k.T` gives every row $pos$ the vector $M_k\,PE_{pos}$ at once. The attention formulas
# (chapter 01, and the next section) keep the code's convention: vectors are rows, hence $QK^\top$.
#
# Let us check the claim for one pair, across 100 positions:

# %%
# NBVAL_CHECK_OUTPUT
d, k, i = 64, 5, 3  # pair i = 3: columns 6 (sin) and 7 (cos)
table = pe_vectorised(100 + k, d)  # (positions, d_model)
omega = 10000 ** (-2 * i / d)
t = omega * k
R = torch.tensor([[math.cos(t), math.sin(t)], [-math.sin(t), math.cos(t)]], dtype=torch.float64)
pair = table[:, 2 * i: 2 * i + 2]  # (positions, 2): (sin, cos) of pair i at every position
moved = pair[:100] @ R.T  # row pos: R @ PE_pair(pos)
print(f"R @ PE(pos) == PE(pos + {k}) for all 100 positions:", torch.allclose(moved, pair[k:k + 100], atol=1e-12))

# %% [markdown]
# A consequence you can see: the dot product of two positions' encodings depends only on their distance,
#
# $$PE_{pos} \cdot PE_{pos+k} = \sum_i \big(\sin a_i \sin(a_i + t_i) + \cos a_i \cos(a_i + t_i)\big)
# = \sum_i \cos(\omega_i k),$$
#
# the same for every $pos$. The matrix of all these dot products is therefore constant along each diagonal,
# and it is largest on the main diagonal and falls off with distance overall, with ripples from the faster pairs.

# %%
# NBVAL_CHECK_OUTPUT
table = pe_vectorised(64, 64)  # (64 positions, d_model=64)
similarity = table @ table.T  # (64, 64): PE(p) . PE(q)
spread = max(similarity.diagonal(k).std().item() for k in range(1, 60))
print("PE(p).PE(p+k) is the same for every p (largest std along a diagonal < 1e-9):", spread < 1e-9)
print("PE(p).PE(p) =", round(similarity[0, 0].item(), 6), "= d_model / 2 (each pair contributes sin^2 + cos^2)")

# %% [markdown]
# ## See it
#
# The table itself: positions down, dimensions across. The left columns (fast pairs) flicker from row to row;
# towards the right the waves stretch until the last columns are almost constant: 0 in the sine columns,
# 1 in the cosine columns.

# %% mystnb={"image": {"alt": "Heatmap of the 64 by 64 sinusoidal positional encoding table: stripes alternate quickly in the left columns and change ever more slowly towards the right."}}
viz.show_positional_encoding(sinusoidal_table(64, 64), title="Sinusoidal PE: fast waves on the left, slow on the right")

# %% [markdown]
# The dot products between positions: bright along the diagonal (a position is most similar to itself), fading
# with distance, and the same pattern along every diagonal, as the formula says.
#
# Attention does not use this plain dot product, though. A token's vector $x_p + PE_p$ passes through the
# projections of chapter 03 first, so the score of positions $p$ and $q$ contains the term
# $PE_p\, W^Q (W^K)^\top PE_q^\top$ (divided by $\sqrt{d_k}$; the vectors are rows), next to the terms that mix
# words and positions. The picture is the special case $W^Q (W^K)^\top = I$. Other matrices reweight or turn
# the pairs of columns; a head can, for instance, turn some pairs by the rotation $M_k$ of the previous section,
# so that its positional term is largest at $q = p + k$: *look $k$ positions away*. Because shifting is the
# same rotation at every position, one fixed pair of matrices does this for every $p$, and training can find
# it.

# %% mystnb={"image": {"alt": "Heatmap of the dot product of every pair of positional encodings: the values are constant along each diagonal, largest on the main diagonal, so they depend only on the distance."}}
viz.show_matrix(similarity, title="PE(p) · PE(q): depends only on the distance q - p",
                xlabel="position q", ylabel="position p")

# %% [markdown]
# A few columns as curves over position make the geometric spread of wavelengths visible: the wavelength of
# pair $i$ is $2\pi \cdot 10000^{2i/d_{model}}$, so with $d_{model}=64$ pair 0 repeats every 6.3 positions,
# pair 4 about every 20, pair 8 about every 63.

# %% mystnb={"image": {"alt": "Three sine curves of the positional encoding over 64 positions: column 0 oscillates fastest, column 8 slower and column 16 slowest."}}
viz.plot_lines({f"column {c} (pair {c // 2})": table[:, c] for c in (0, 8, 16)},
               title="Three sine columns of PE (d_model = 64)", xlabel="position pos", ylabel="PE(pos, column)")

# %% [markdown]
# ## Play with it
#
# Move the dimension slider to see how the wavelength grows with the column index, and the offset slider to see
# that shifting by $k$ positions is the same rotation everywhere.

# %% mystnb={"image": {"alt": "Explorer picture: the encoding table with dimension 4 framed, its wave next to the same wave shifted by 4 positions, and their dot product, a flat line because it is the same at every position."}}
widgets.positional_explorer(d_model=64, max_len=64)

# %% [markdown]
# ## Learned positional encodings
#
# The alternative is not to design the vectors at all: keep a trainable table with one row per position,
# an `nn.Embedding(max_len, d_model)`, and let gradient descent fill it. BERT and GPT-2 do this. The paper tried
# it too: in table 3, row (E), "positional embedding instead of sinusoids" reaches a perplexity of 4.92 and a
# BLEU of 25.7 (perplexity: how surprised the model is by the right next token, here a word piece, lower is better; BLEU: overlap
# with human translations, 0–100, higher is better; chapter 11 explains both) on their English→German development set (newstest2013), against 4.92 and 25.8 for the
# sinusoidal base model. The paper calls these "nearly identical results": the same perplexity and 0.1 BLEU
# apart, one model of each. They kept the
# sinusoids "because it may allow the model to extrapolate to sequence lengths longer than the ones
# encountered during training".
#
# The trade-offs, concretely:
#
# - **parameters**: the learned table has `max_len * d_model` of them; the sinusoidal one none;
# - **length**: the sinusoidal formula has a value at every position; a learned table has no row past
#   `max_len`, and rows near `max_len` are rarely trained;
# - **flexibility**: a learned table can represent any per-position pattern, a fixed one only its own.

# %%
# NBVAL_CHECK_OUTPUT
learned = LearnedPositionalEncoding(d_model=512, max_len=512)
print("learned, d_model=512, max_len=512:", sum(p.numel() for p in learned.parameters()), "parameters")
print("sinusoidal:", sum(p.numel() for p in SinusoidalPositionalEncoding(512, 512).parameters()), "parameters")
try:
    learned(torch.zeros(1, 600, 512))  # a sequence longer than the table
except ValueError as err:
    print("learned table, 600 positions:", err)
print("sinusoids for 600 positions:", tuple(sinusoidal_table(600, 512).shape))

# %% [markdown]
# (The sinusoidal module also has a `max_len`, but only as the size of a precomputed cache: build it larger
# and the values for the first positions do not change.)
#
# One more detail that belongs here: in the full model the embeddings are multiplied by $\sqrt{d_{model}}$
# before the encoding is added. Section 3.4 states the scaling and gives no reason for it. A common reading,
# not the paper's own: with embedding weights initialised small, with a standard deviation of about
# $1/\sqrt{d_{model}}$, the scaled embeddings have entries of size about 1, like the encoding's, so neither
# the token nor its position drowns the other at the start of training. That scaling lives in the embedding
# layer (chapter 09), not in the positional encoding.

# %% [markdown]
# ## Exercises

# %% [markdown]
# ### Exercise 1: the module
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `MySinusoidalPE(d_model, max_len)`, an `nn.Module` whose `forward(x)` takes batch-first
# `x (batch, seq_len, d_model)` and returns `x + PE[:seq_len]`, in `x`'s dtype. Compute the table once in
# `__init__` (use `pe_vectorised` from above) and store it with `register_buffer`, so it follows `.to(device)`
# and is not a trainable parameter. The checker uses `batch != seq_len`, float32 and float64, and an odd
# `d_model`.

# %%
class MySinusoidalPE(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        ...  # your turn

    def forward(self, x):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MySinusoidalPE(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        self.register_buffer("pe", pe_vectorised(max_len, d_model).float())  # (max_len, d_model)

    def forward(self, x):
        seq_len = x.size(1)  # batch-first: positions are along dim 1
        return x + self.pe[:seq_len].to(x.dtype)  # (batch, seq_len, d_model) + (seq_len, d_model)


# %%
# NBVAL_CHECK_OUTPUT
check_positional_encoding(MySinusoidalPE)

# %% [markdown]
# ### Exercise 2: the table without slice assignment
# **Difficulty** 2/3 · **Importance** 1/3 · **Time** ~15 min
#
# Write `table_by_stacking(max_len, d_model)` returning the `(max_len, d_model)` table, this time by building the
# sine block and the cosine block (each `(max_len, d_model/2)`) and **interleaving** them with
# `torch.stack([sin, cos], dim=-1)` followed by a reshape. Then make it work for odd `d_model` too (hint: build
# one pair too many and cut the last column). The checker tries several sizes, odd ones included, and
# recognises swapped sin/cos, a wrong exponent, and sines-then-cosines layouts.

# %%
def table_by_stacking(max_len, d_model):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def table_by_stacking(max_len, d_model):
    pairs = (d_model + 1) // 2  # one extra pair when d_model is odd
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    omega = 10000.0 ** (-2 * torch.arange(pairs, dtype=torch.float64) / d_model)  # (pairs,)
    angle = position * omega  # (max_len, pairs)
    table = torch.stack([angle.sin(), angle.cos()], dim=-1)  # (max_len, pairs, 2): (sin, cos) per pair
    return table.reshape(max_len, 2 * pairs)[:, :d_model]  # interleaved; drop the surplus cosine if d is odd


# %%
# NBVAL_CHECK_OUTPUT
check_positional_encoding(table_by_stacking)

# %% [markdown]
# ### Exercise 3: the offset matrix
# **Difficulty** 3/3 · **Importance** 1/3 · **Time** ~20 min
#
# Write `offset_rotation(k, d_model)` returning the `(d_model, d_model)` matrix $M_k$ with
# $PE_{pos+k} = M_k\,PE_{pos}$ for **every** position ($d_{model}$ even, $PE_{pos}$ a column vector). It is
# block-diagonal: pair $i$'s $2 \times 2$ block sits at rows and columns $2i, 2i+1$ and is the rotation $R(t)$
# from above with $t = \omega_i k$. The checker applies your matrix to the table and compares with the table
# shifted by $k$.

# %%
def offset_rotation(k, d_model):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def offset_rotation(k, d_model):
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        t = k * 10000 ** (-2 * i / d_model)  # the angle pair i turns by over k positions
        s, c = 2 * i, 2 * i + 1  # its sine and cosine rows/columns
        M[s, s], M[s, c] = math.cos(t), math.sin(t)  # sin(a+t) = sin a cos t + cos a sin t
        M[c, s], M[c, c] = -math.sin(t), math.cos(t)  # cos(a+t) = cos a cos t - sin a sin t
    return M


# %%
# NBVAL_CHECK_OUTPUT
check_offset_rotation(offset_rotation)

# %% [markdown]
# ### Exercise 4: a learned encoding
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~10 min
#
# Write `MyLearnedPE(d_model, max_len)` with an attribute `embedding = nn.Embedding(max_len, d_model)` (the name
# lets the checker load the reference's weights) and `forward(x) = x + embedding.weight[:seq_len]` for batch-first
# `x`. The checker compares outputs, counts parameters, and checks the gradient: after `output.sum().backward()`
# rows `0..seq_len-1` of the table must each receive the batch size, and the unused rows nothing.

# %%
class MyLearnedPE(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        ...  # your turn

    def forward(self, x):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyLearnedPE(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)  # one trainable vector per position

    def forward(self, x):
        return x + self.embedding.weight[: x.size(1)]  # (batch, seq_len, d_model) + (seq_len, d_model)


# %%
# NBVAL_CHECK_OUTPUT
check_learned_positional_encoding(MyLearnedPE)

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("04")

# %% [markdown]
# ## Summary
#
# - Attention without a causal mask is permutation equivariant: shuffle the tokens and the outputs shuffle along; "dog bites man" and
#   "man bites dog" give *dog* the same vector. Order must be put into the vectors.
# - The paper adds $PE_{(pos,2i)} = \sin(pos/10000^{2i/d_{model}})$, $PE_{(pos,2i+1)} = \cos(\cdot)$ to the
#   embeddings: pairs of columns turning at geometrically spaced frequencies. Sines in even columns, cosines in
#   odd ones, the exponent $2i/d_{model}$ shared by a pair; an odd $d_{model}$ has one sine column more.
# - Shifting by $k$ positions is a fixed block-diagonal rotation $M_k$, so $PE_{pos} \cdot PE_{pos+k}$ depends
#   only on $k$: relative position is easy to read off. Inside attention the positional term is
#   $PE_p W^Q (W^K)^\top PE_q^\top$, which a head can tune to a chosen offset.
# - Learned encodings (`LearnedPositionalEncoding`) cost `max_len * d_model` parameters and stop at `max_len`;
#   the paper found them nearly identical (table 3, row E: BLEU 25.7 against 25.8) and kept the sinusoids
#   because they might extrapolate to longer sequences.
# - On batch-first input the positions are `x.size(1)`; `pe[:x.size(0)]` silently adds the wrong vectors.
#
# Next, chapter 05 wraps attention in the residual connections and layer normalisation that let the model be
# stacked six layers deep.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 04: Positional encoding. Version `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
