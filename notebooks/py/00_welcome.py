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
# # 00 · Welcome: how this course works, and the shapes of attention
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/00_welcome.ipynb)
#
# Over the next chapters you will build the Transformer of *Attention Is All You Need* (Vaswani et al., 2017)
# one piece at a time, in PyTorch, and prove every piece equal to PyTorch's own. This first chapter does two
# things: it shows you how to work with the course, and it drills the one skill everything else rests on —
# **reading and moving tensor shapes**. The core of attention is two matrix products with a softmax between
# them (you will write all three in this chapter's exercises); a common kind of bug in a from-scratch
# Transformer (chapter 13 collects the classic ones) is a tensor that has the right numbers on the wrong axis.
#
# **What you will learn**
#
# - how to run a chapter (JupyterLab or Colab), how exercises and their checkers work, where the solutions are;
# - the words the course uses (token, query, key, value, head, mask) and why the paper chose attention over
#   recurrent networks;
# - the shapes attention lives in: `(batch, seq_len, d_model)` for a batch of sentences, and
#   `(batch, heads, q_len, k_len)` for attention weights (every one of these words is defined just below);
# - batched matrix products, `transpose(-2, -1)` versus `.T`, broadcasting from the right, `view` versus `reshape`;
# - choosing a device and fixing seeds, so the same code runs on a laptop CPU and a Colab GPU, and a run repeats
#   its numbers on one machine;
# - a **shape tracer** that runs a model once and lists what goes in and out of every part of it.

# %% [markdown]
# ## The words this course uses
#
# You will meet these words from the first page on; each gets its own chapter later.
#
# - **Token**: a word or a piece of a word. The model never sees text, only one vector of `d_model` numbers per
#   token (`d_model = 512` in the paper).
# - **Attention** lets every token look at the other tokens and take in a mix of them. The token that is
#   looking supplies a **query** vector ("what am I looking for?"); every token it may look at supplies a
#   **key** ("what do I offer?") and a **value** ("what I hand over if I am chosen"). A query's score with a
#   key is their dot product; high scores give high weights, and the query receives the weighted average of
#   the values. `q_len` is the number of queries and `k_len` the number of keys; `d_k` is the length of one
#   query or key vector.
# - A **head** is one such attention computation. The Transformer runs several heads side by side on the same
#   tokens (8 in the paper), each with its own smaller queries, keys and values, so that each can look for
#   something different (chapter 03).
# - A **mask** is a table of True/False that says which keys each query may look at. Sentences in a batch have
#   different lengths, so the short ones are filled up with a filler token, *padding*; a **padding mask**
#   hides those fillers. A **causal mask** hides the tokens that come later in the sentence (chapter 02).

# %% [markdown]
# ## How to use the course
#
# **Where to run it.** Each chapter is a Jupyter notebook. Locally, start `jupyter lab` in the repository and open
# `notebooks/`; on Google Colab, open the chapter from its "Open in Colab" link. The first code cell of every
# chapter installs the `tfm_lesson` package when it is missing (on Colab) and does nothing otherwise: run it
# first. No data set or model is downloaded after that: every data set in the course ships with the package or
# is generated on your machine, and every model is trained in the chapter that uses it. One optional cell of
# chapter 16 can download pretrained weights if you switch it on.
#
# **Running cells.** Run cells from top to bottom with <kbd>Shift</kbd>+<kbd>Enter</kbd>. A chapter is written
# to be run in order: later cells use names defined earlier. If you get lost (or edit a cell and things stop
# making sense), start again from a fresh kernel and run everything: *Kernel → Restart Kernel and Run All Cells*
# in JupyterLab, *Runtime → Restart session and run all* in Colab. That is exactly how the course is tested, so
# it always works from a fresh start. (Run all also runs the solution cells under the exercises, so a checker
# then tests the reference solution, not your answer: to check your own code, run the cells one by one and skip
# the folded solution cells.) Sentences, heads and positions are numbered from 0, as in Python. Most chapters run in under a minute on a laptop CPU.
# Chapters 10 to 14, 16, 17 and 19 train models and chapter 18 times attention; they take longer, up to about two
# minutes each on a quiet CPU (chapters 13, 16 and 19 train only small models and finish within a minute).

# %% [markdown]
# ### Exercises, checkers and quizzes
#
# Each chapter ends with at least three exercises. Each is labelled with its difficulty (1 to 3), its
# importance (3/3: later chapters build on it) and the time it usually takes, so you can choose. An exercise
# has
#
# 1. a text cell stating the task, with the shapes of the inputs and of what to return;
# 2. a code cell with a *stub*: the function is already named and its body is `...`, your turn to fill it in;
# 3. a cell marked **solution** with a reference answer, folded so that you see it only when you choose to. In
#    JupyterLab it shows as a thin bar with three dots: click the bar (or the blue line at the cell's left) to
#    open it. In Colab it shows as a form titled "Reference solution — open it after your own attempt": click
#    **Show code** under the title (or double-click the title) to open it. If you want to try first, skip it
#    (instructors hand out copies without these cells), and note that running it *replaces* your function by
#    the solution;
# 4. a cell that calls a **checker** from `tfm_lesson.checks` on your function.
#
# A checker runs your code on random inputs — several shapes, with and without leading `(batch, heads)`
# dimensions, several dtypes — and compares it with the package's reference. When it passes, it prints one
# line starting with ✔. When it fails, it raises an error (a `Mistake`) whose message names the **symptom** and
# the likely **mistake**: "your columns sum to one, not your rows: softmax over the wrong axis". Read the
# message; it is written to be the hint a teaching assistant would give you.
#
# After the exercises, **Check your understanding** asks a few multiple-choice questions about the ideas that
# are most often misunderstood; every answer you pick explains itself.

# %% [markdown]
# ### The package
#
# Each component lives exactly once, in `tfm_lesson`. A chapter derives it slowly in front of
# you, proves the package's version gives the same numbers as yours and as PyTorch's, and from then on simply
# imports it. So chapter 07 builds an encoder out of the attention you understood in chapter 01, not out of a
# mystery.

# %%
import math

import torch

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import viz
from tfm_lesson.checks import check_pairwise_scores, check_row_softmax, check_weighted_sum
from tfm_lesson.look.shapes import trace_shapes

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## Device and seeds
#
# `tfm_lesson.default_device()` returns `cuda` when a GPU is visible and `cpu` otherwise (set the environment
# variable `TFM_DEVICE=cpu` to force the CPU). Every chapter creates its tensors and models and then moves them
# with `.to(device)`, so the same notebook runs on both. The printed device below depends on your machine, and
# so, slightly, do the results of training:
#
# `tfm_lesson.seed_everything(0)` seeds Python's `random`, NumPy and PyTorch (CPU and GPU). Random
# initialisations, random inputs and dropout masks (dropout, chapter 05, switches off random entries during
# training) then come out the same every time you restart the kernel, so on a CPU a chapter run twice prints
# the same numbers. On a GPU that holds only with `seed_everything(0, deterministic=True)`: by default some GPU
# kernels (the low-level routines that do the arithmetic) add numbers up in an order that changes from run to
# run. Every training in the course runs a fixed number of steps, seeded, and on a CPU on one thread. Another
# machine can still print other figures: other processors and library versions add numbers up in other
# orders, the last bits differ, and over hundreds of training steps such differences grow into another loss in
# the second or third decimal, another score by a few points, or another word in a sample. A GPU differs more
# (other kernels, and mixed precision, the 16-bit arithmetic of chapter 10, in chapters 10 to 12 and 17). The
# text says, next to such figures, that they are the stored run's. Where a conclusion depends on such a figure
# (which head matters most, whether a correlation is significant), the chapter says how far it moved when the
# same seed ran under PyTorch's other CPU kernels, and compares your printed value with that range.

# %%
print("device:", device)
tfm_lesson.seed_everything(0)
a = torch.randn(3)
tfm_lesson.seed_everything(0)
b = torch.randn(3)

# %%
# NBVAL_CHECK_OUTPUT
print("same numbers after re-seeding:", torch.equal(a, b))

# %% [markdown]
# ## Intuition: a sentence is a matrix
#
# A Transformer never sees words. It sees one vector per token: a sentence of `seq_len` tokens is a matrix of
# shape `(seq_len, d_model)`, one row per token, `d_model` numbers per row (the paper uses $d_{model} = 512$; we
# use tiny sizes so you can print everything). Sentences are processed in batches, so the model's input is a
# 3-D tensor `(batch, seq_len, d_model)`.
#
# Attention asks, for every token, "which other tokens are relevant to me?". It answers with a **score** for
# every pair of tokens — a `(seq_len, seq_len)` table per sentence — turns each row of scores into weights that
# sum to one, and replaces each token by a weighted average of the others. Three tensor moves, then:
#
# 1. **pairwise scores**: every row of one matrix dotted with every row of another, a matrix product;
# 2. **a softmax along each row**, so that each token's weights are positive and sum to one;
# 3. **a weighted sum** of rows, another matrix product.
#
# The exercises at the end of this chapter are exactly these three moves.

# %% [markdown]
# ## Why attention, and not a recurrent network
#
# Before 2017 the best translation systems were built from **recurrent** networks (RNNs, LSTMs): they read a
# sentence one token at a time and carry a single state vector from each token to the next. Section 4 of the
# paper compares one self-attention layer (every token attends to every token of the same sentence) with one
# recurrent layer and one convolutional layer on three costs. With `n` tokens of `d` numbers each, its
# table 1 says:
#
# | layer | operations per layer | steps that must run one after another | longest path between two tokens |
# |---|---|---|---|
# | self-attention | $O(n^2 \cdot d)$ | $O(1)$ | $O(1)$ |
# | recurrent | $O(n \cdot d^2)$ | $O(n)$ | $O(n)$ |
# | convolutional, kernel width $k$ | $O(k \cdot n \cdot d^2)$ | $O(1)$ | $O(\log_k n)$ |
#
# In our words, the argument runs like this:
#
# - **Steps one after another.** A recurrent layer cannot start on token 5 before it has finished token 4, so
#   a sentence of `n` tokens costs `n` steps in a row. Attention computes all `n × n` scores with one matrix
#   product, which a GPU does in parallel. That is what made training faster.
# - **Path length.** For token 1 to influence token 50, a recurrent network must carry the information through
#   49 state updates, and it tends to fade on the way. In attention every token looks at every other token directly:
#   one step. Short paths make long-range relations (a verb and its distant subject) easier to learn.
# - **Work per layer.** Attention does about $n^2 d$ multiplications, a recurrent layer about $n d^2$. So
#   attention is cheaper whenever a sentence has fewer tokens than each vector has numbers ($n < d$), which is
#   the usual case in translation (sentences of tens of tokens, $d = 512$). For very long inputs the $n^2$
#   grows fast; the paper mentions restricting each token to a neighbourhood as a remedy.

# %% [markdown]
# ## The math
#
# Write the queries as rows of $Q \in \mathbb{R}^{n \times d_k}$ and the keys as rows of
# $K \in \mathbb{R}^{m \times d_k}$. The score of query $i$ with key $j$ is the dot product
#
# $$s_{ij} = q_i \cdot k_j = \sum_{c=1}^{d_k} Q_{ic} K_{jc}, \qquad\text{i.e.}\qquad S = Q K^\top \in \mathbb{R}^{n \times m}.$$
#
# The transpose is what makes the shapes meet: $(n, d_k) \times (d_k, m) \to (n, m)$. The row softmax is
# $\mathrm{softmax}(s_i)_j = e^{s_{ij}} / \sum_{j'} e^{s_{ij'}}$, and the weighted sum of value rows
# $V \in \mathbb{R}^{m \times d_v}$ is the product $A V \in \mathbb{R}^{n \times d_v}$ with $A$ the weights.
#
# With a batch, and later with several heads, every tensor simply gains **leading dimensions**:
# `(batch, heads, n, d_k)`. PyTorch's `@` (`torch.matmul`) treats all dimensions but the last two as a batch
# of independent matrices, so one line of code covers every case — provided we transpose only the last two
# axes.

# %% [markdown]
# ## Build it: the slow way, then the matrix way
#
# Six tokens of "the cat sat on the mat", each a random vector of $d_k = 4$ numbers, scaled to length 1 so that
# no single long vector dominates the picture. (Random vectors carry no meaning, but the word *the* appears
# twice and both occurrences get the same vector, so we know one thing the scores must show.)

# %%
tokens = ["the", "cat", "sat", "on", "the", "mat"]
vocab = {w: i for i, w in enumerate(dict.fromkeys(tokens))}  # the=0, cat=1, sat=2, on=3, mat=4
table = torch.randn(len(vocab), 4)  # one vector per distinct word: (vocab, d_k)
table = table / table.norm(dim=-1, keepdim=True)  # length 1: a token's score with itself is exactly 1
x = table[[vocab[w] for w in tokens]].to(device)  # (seq_len, d_k) = (6, 4)

# %%
# NBVAL_CHECK_OUTPUT
print("x:", tuple(x.shape), "  rows 0 and 4 (both 'the') equal:", torch.equal(x[0], x[4]))

# %% [markdown]
# The obvious version: two loops, one dot product per pair. It is slow (Python runs $n \cdot m$ iterations) but
# impossible to misread.

# %%
n = x.size(0)
loop_scores = torch.zeros(n, n, device=device)  # (q_len, k_len)
for i in range(n):  # query i
    for j in range(n):  # key j
        loop_scores[i, j] = (x[i] * x[j]).sum()  # a scalar: q_i . k_j

matmul_scores = x @ x.transpose(-2, -1)  # (6, 4) @ (4, 6) -> (6, 6)

# %%
# NBVAL_CHECK_OUTPUT
print("scores:", tuple(matmul_scores.shape), " loop == matmul:", torch.allclose(loop_scores, matmul_scores, atol=1e-6))
print("einsum agrees:", torch.allclose(torch.einsum("qd,kd->qk", x, x), matmul_scores, atol=1e-6))

# %% [markdown]
# ## See it: the score table
#
# Row $i$ of the picture is query $i$, column $j$ is key $j$. Three things to look at. The diagonal is 1: each
# unit vector dotted with itself. The table is symmetric, because here queries and keys are the same vectors
# ($q_i \cdot k_j = k_j \cdot q_i$). And the two *the* rows are identical, with a 1 where *the* meets the other
# *the*: a token cannot tell two occurrences of the same word apart — nothing in $x$ says *where* a
# token is. Chapter 04 (positional encoding) fixes exactly that.

# %% mystnb={"image": {"alt": "Heatmap of the pairwise dot products of six word vectors, blue for negative and red for positive, in which the two rows of 'the' are identical."}}
viz.show_matrix(matmul_scores, title="Pairwise dot products x xᵀ: both 'the' rows are identical",
                xlabel="key", ylabel="query", x_ticks=tokens, y_ticks=tokens, center=0)

# %% [markdown]
# ## Leading dimensions: batches and heads
#
# A batch of 2 sentences, each split into 3 heads of $d_k = 4$: the queries are `(batch, heads, q_len, d_k)`.
# `@` multiplies the last two dimensions and treats `(2, 3)` as a batch of 6 independent matrices.
# `transpose(-2, -1)` swaps only the last two axes, so it is right for any number of leading dimensions.
#
# `.T` is a trap: on a 2-D matrix it is the transpose, but on a 4-D tensor it reverses **all** axes
# (PyTorch warns that this use is deprecated), turning `(2, 3, 7, 4)` into `(4, 7, 3, 2)`. Use
# `transpose(-2, -1)` (or its short form `.mT`) in attention code.

# %%
q = torch.randn(2, 3, 5, 4, device=device)  # (batch, heads, q_len, d_k)
k = torch.randn(2, 3, 7, 4, device=device)  # (batch, heads, k_len, d_k)
scores = q @ k.transpose(-2, -1)  # (batch, heads, q_len, k_len)
one = q[1, 2] @ k[1, 2].transpose(-2, -1)  # sentence 1, head 2 on its own: (q_len, k_len)

# %%
# NBVAL_CHECK_OUTPUT
print("scores:", tuple(scores.shape),
      " same as one (sentence, head) at a time:", torch.allclose(scores[1, 2], one, atol=1e-6))
print("k.mT:", tuple(k.mT.shape), "  k.permute(3, 2, 1, 0), what k.T would give:", tuple(k.permute(3, 2, 1, 0).shape))

# %% [markdown]
# ## Broadcasting: shapes are aligned from the right
#
# When two tensors of different shapes meet in an elementwise operation, PyTorch lines their shapes up **from
# the right**; each pair of sizes must be equal, or one of them must be 1 (that axis is then repeated), and a
# missing axis counts as 1. This is how one mask serves every head and every query in chapter 02: a padding mask
# shaped `(batch, 1, 1, k_len)` meets scores shaped `(batch, heads, q_len, k_len)`:
#
# ```
# scores  (2, 3, 5, 7)
# mask    (2, 1, 1, 7)   -> repeated over heads (3) and queries (5)
# result  (2, 3, 5, 7)
# ```
#
# And the classic mistake: a `(batch, k_len)` mask aligned from the right is read as `(q_len, k_len)` — the
# batch axis lands on the queries. With `batch=2, q_len=5` it fails loudly; with `batch == q_len` it would run
# silently and be wrong. `None` in an index inserts an axis of size 1 where you need it.

# %%
keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3], device=device)  # (batch, k_len): sentence 1 has 3 pads
masked = scores.masked_fill(~keep[:, None, None, :], float("-inf"))  # (2, 1, 1, 7) broadcasts to (2, 3, 5, 7)
try:
    scores.masked_fill(~keep, float("-inf"))  # (2, 7) is read as (q_len, k_len) = (2, 7) against q_len = 5
    wrong = "ran (silently wrong)"
except RuntimeError:
    wrong = "RuntimeError: (2, 7) does not broadcast against (2, 3, 5, 7)"

# %%
# NBVAL_CHECK_OUTPUT
print("keep[:, None, None, :]:", tuple(keep[:, None, None, :].shape), "-> masked:", tuple(masked.shape))
print("-inf in sentence 1, every head, every query:", bool(torch.isinf(masked[1, :, :, 4:]).all()))
print("the (batch, k_len) mask:", wrong)

# %% [markdown]
# ## `view` versus `reshape`
#
# Multi-head attention (chapter 03) cuts `d_model` into `heads` pieces of `d_k` and later glues them back. Both
# are reshapes, and PyTorch has two functions for it:
#
# - `view` never copies: it reinterprets the same memory with a new shape, so it only works when the elements
#   are laid out in memory in the order the new shape needs (a *contiguous* tensor, roughly);
# - `reshape` returns a view when it can and a copy when it must.
#
# After a `transpose` the memory order no longer matches the logical order, so `view` refuses. That refusal is
# useful: it tells you a copy is needed. The real danger is different — calling `view`/`reshape` to go from
# `(batch, heads, len, d_k)` back to `(batch, len, d_model)` *without* transposing first runs fine and mixes
# up tokens and heads. Chapter 03 measures that bug.

# %%
h = torch.arange(2 * 5 * 8, device=device).reshape(2, 5, 8).float()  # (batch, seq_len, d_model) = (2, 5, 8)
split = h.view(2, 5, 2, 4).transpose(1, 2)  # (batch, heads, seq_len, d_k) = (2, 2, 5, 4)
try:
    split.view(2, 5, 8)
    view_result = "view worked"
except RuntimeError:
    view_result = "view refused: not contiguous after transpose"
merged = split.transpose(1, 2).reshape(2, 5, 8)  # back to (batch, seq_len, d_model): a copy
wrong_merge = split.reshape(2, 5, 8)  # no transpose: runs, but scrambles tokens and heads

# %%
# NBVAL_CHECK_OUTPUT
print("split:", tuple(split.shape), " contiguous:", split.is_contiguous(), "|", view_result)
print("transpose then reshape gives h back:", torch.equal(merged, h))
print("reshape without the transpose gives h back:", torch.equal(wrong_merge, h))

# %% [markdown]
# ## Play with it: the shape tracer
#
# `tfm_lesson.look.shapes.trace_shapes(model, *inputs, max_depth=2)` runs one forward pass with hooks on every
# submodule and lists, in the order they ran, each submodule's name, class, and the shapes that went in and came
# out (integer tensors show their dtype, masks show `bool`). Below: a tiny Transformer translating a batch of 2
# sentences of 7 source tokens into 5 target tokens. It has two halves: an **encoder** that reads the source
# sentence, and a **decoder** that writes the translation while looking at the encoder's output; an
# **embedding** table turns token ids into vectors at the bottom, and a final linear layer, the **generator**,
# turns vectors back into scores for every word of the vocabulary at the top. You can already read the whole
# story of the course in the shapes: token ids `(2, 7)` become vectors `(2, 7, 16)`, the encoder keeps that
# shape through every layer, the
# masks are `(2, 1, 1, 7)` for padding and `(2, 1, 5, 5)` for the decoder's mask (causal combined with padding), and the generator turns
# each target position into one score per vocabulary entry, `(2, 5, 20)`. (`src_embed` runs twice: source and
# target share one embedding table, as in the paper; chapter 09 explains.)
#
# Change `max_depth` (0 shows only the model, 3 the attention and feed-forward blocks inside each layer, 4 the
# linear layers inside attention; self-attention computes Q, K and V in one fused product, so of its four
# only `w_o` appears, while cross-attention lists all four), the batch size or the
# lengths, and run the cell again. In Jupyter the last expression shows as a table; `print(trace)` gives text.

# %%
tiny = tfm_lesson.Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32,
                              num_encoder_layers=2, num_decoder_layers=2).to(device).eval()
src = torch.randint(4, 20, (2, 7), device=device)  # (batch, src_len) token ids
tgt = torch.randint(4, 20, (2, 5), device=device)  # (batch, tgt_len)
trace = trace_shapes(tiny, src, tgt, max_depth=2)
trace

# %%
# NBVAL_CHECK_OUTPUT
print(trace)

# %% [markdown]
# ## Exercises
#
# The three tensor moves of attention, each as a function that must work for any number of leading
# dimensions. Write your code in the stub cell, run it, then run the checker cell.

# %% [markdown]
# ### Exercise 1: pairwise scores
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `pairwise_scores(query, key)`: `query` is `(..., q_len, d)`, `key` is `(..., k_len, d)`; return the
# `(..., q_len, k_len)` tensor whose entry `[..., i, j]` is the dot product of query row `i` with key row `j`.
# No scaling yet (that is chapter 01). Hint: one matrix product and the right transpose.

# %%
def pairwise_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    ...  # your turn: return a (..., q_len, k_len) tensor


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def pairwise_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    return query @ key.transpose(-2, -1)  # (..., q_len, d) @ (..., d, k_len) -> (..., q_len, k_len)


# %%
# NBVAL_CHECK_OUTPUT
check_pairwise_scores(pairwise_scores)

# %% [markdown]
# ### Exercise 2: a row softmax, from `exp`
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `row_softmax(scores)` for `scores` of shape `(..., q_len, k_len)`: exponentiate and divide each row by
# its sum, so every query's row is positive and sums to one. It must survive large scores: `exp(1000)` is `inf`
# in floating point, and `inf / inf` is NaN. Use the fact that subtracting a constant from a whole row does not
# change its softmax ($e^{s_j - c} / \sum_{j'} e^{s_{j'} - c} = e^{s_j} / \sum_{j'} e^{s_{j'}}$): subtract the
# row's maximum first, so the largest exponent is $e^0 = 1$. (`torch.softmax` would pass, but write it from
# `exp` once — it is the only way to see why it is safe.)

# %%
def row_softmax(scores: torch.Tensor) -> torch.Tensor:
    ...  # your turn: same shape as scores, each row sums to one


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def row_softmax(scores: torch.Tensor) -> torch.Tensor:
    shifted = scores - scores.max(dim=-1, keepdim=True).values  # (..., q_len, k_len), each row's max is now 0
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)  # (..., q_len, 1) broadcasts over the keys


# %%
# NBVAL_CHECK_OUTPUT
check_row_softmax(row_softmax)

# %% [markdown]
# ### Exercise 3: the weighted sum
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `weighted_sum(weights, values)`: `weights` is `(..., q_len, k_len)` (each row sums to one), `values` is
# `(..., k_len, d_v)`. Return `(..., q_len, d_v)`, where row `i` is $\sum_j$ `weights[..., i, j] * values[..., j, :]`,
# a weighted average of the value rows.

# %%
def weighted_sum(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    ...  # your turn: return a (..., q_len, d_v) tensor


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def weighted_sum(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return weights @ values  # (..., q_len, k_len) @ (..., k_len, d_v) -> (..., q_len, d_v)


# %%
# NBVAL_CHECK_OUTPUT
check_weighted_sum(weighted_sum)

# %% [markdown]
# Put together, your three functions already are attention (without the scaling you will add in chapter 01):
# every token of our sentence becomes a weighted average of all tokens.

# %%
mixed = weighted_sum(row_softmax(pairwise_scores(x, x)), x)  # (6, 6) weights @ (6, 4) -> (6, 4)

# %%
# NBVAL_CHECK_OUTPUT
if mixed is None:  # the stubs return None until you write them
    print("your functions still return None: solve exercises 1 to 3 first")
else:
    print("mixed:", tuple(mixed.shape), " both 'the' still identical:", torch.allclose(mixed[0], mixed[4]))

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("00")

# %% [markdown]
# ## Summary
#
# - The Transformer's data are tensors `(batch, seq_len, d_model)`; attention weights are
#   `(batch, heads, q_len, k_len)`. Write the shape next to every line you write; the course does.
# - Scores are $Q K^\top$: `query @ key.transpose(-2, -1)`. `@` batches over leading dimensions; `.T` reverses
#   all of them and is wrong beyond 2-D.
# - Broadcasting aligns shapes from the right; `None` inserts the size-1 axes a mask needs, `(batch, 1, 1, k_len)`.
# - `view` needs contiguous memory and refuses after a `transpose`; `reshape` copies when needed. Neither can
#   save you from merging heads without the transpose.
# - Attention replaced recurrence because it computes every position at once and connects any two tokens in
#   one step; its cost grows with the square of the sentence length.
# - `default_device()` and `seed_everything(0)` make the same notebook run on CPU or GPU, and repeat its numbers
#   on one machine (another machine may print slightly different trained figures).
# - `trace_shapes` shows every submodule's input and output shapes — use it whenever a model surprises you.
#
# Next, chapter 01 turns these three moves into scaled dot-product attention and measures why the scores are
# divided by $\sqrt{d_k}$.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 00: Welcome: how this course works, and the shapes of attention. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
