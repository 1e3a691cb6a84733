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

# %% [markdown]
# # 18 · Attention that fits: the online softmax and FlashAttention
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/18_attention_that_fits.ipynb)
#
# Every attention you have written in this course builds the whole matrix of scores, one number for every
# (query, key) pair: $(\text{q\_len}, \text{k\_len})$ numbers per head. (The package's `MultiHeadAttention`
# hands the work to PyTorch's `scaled_dot_product_attention` when it need not return the weights; its fused back
# ends never build that matrix, though it falls back to a plain "math" path that does, on a CPU whenever
# dropout is on, for instance. This chapter shows how a fused kernel works.) At 4,096 tokens that matrix alone is 64 MiB per head in
# float32, and a softmax over it writes another one as large. Yet the models you will use read contexts of
# hundreds of thousands of tokens. The attention kernels that run them never build that matrix. This chapter
# shows how, and proves that nothing is lost: the result is the same attention, to rounding.
#
# **What you will learn**
# - the **online softmax** (Milakov & Gimelshein, 2018): the softmax's maximum and sum computed together in one
#   pass over the row (here in blocks), the running sum **rescaled** whenever the maximum grows, then a second
#   pass that writes the outputs;
# - **tiled attention**, the forward pass of FlashAttention (Dao et al., 2022; Rabe & Staats, 2021 had shown the
#   same rescaled sums, key by key and, in their implementation, as per-chunk summaries combined at the end, with
#   extra memory that grows far more slowly than the square of the length, $O(\sqrt{n})$, and a backward pass
#   that recomputes instead of storing): blocks
#   ("tiles") of queries meet tiles of keys, with a running maximum, a running sum and an output accumulator per
#   query, normalised once at the end; causal masks with the tile's **offset** in the sequence; queries that see
#   no key;
# - the **backward pass by recomputation**: keep, besides $Q$, $K$ and $V$, only the output and one number per
#   query (the log-sum-exp),
#   rebuild each tile of probabilities when the gradient needs it; checked against autograd in float64;
# - the **memory**, measured: the explicit path's peak grows with the square of the length, the tiled one with
#   the length; and the time, honestly: a Python loop of tiles is slow on a CPU;
# - why generating text one token at a time is limited by **memory traffic**, not arithmetic: arithmetic
#   intensity and a **roofline** of your own machine, measured; what that means for the KV cache (chapter 15)
#   and grouped-query attention (chapter 16).

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

# %%
import math
import platform
import time

import torch
import torch.nn.functional as F

import tfm_lesson as T
from tfm_lesson import viz
from tfm_lesson.attention import scaled_dot_product_attention
from tfm_lesson.checks import (check_arithmetic_intensity, check_flash_backward, check_online_softmax,
                               check_tiled_attention, yours_or_reference)
from tfm_lesson.flash import attention_lse, flash_attention, online_softmax
from tfm_lesson.look.memory import peak_tensor_bytes, resident_peak_rise

T.seed_everything(0)
threads = 1  # one core: see below; set it to os.cpu_count() to measure the whole CPU
torch.set_num_threads(threads)
print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")

# %% [markdown]
# Every measurement in this chapter runs on the CPU, whatever device the other chapters use: the point is to
# watch memory and time on the machine in front of you. It runs on **one thread**. The tiled attention below makes
# many small PyTorch calls; split between several threads, each small call waits for all of them, and when another
# program keeps a core busy that wait can take longer than the work. One thread gives steadier timings, and the
# roofline measured at the end is then the roofline of one core.
#
# ## Intuition
#
# The explicit attention of chapter 01 does three things in turn: the scores $S = QK^\top/\sqrt{d_k}$, all of
# them; the softmax of each row of $S$, all of it; the weighted sum of the values. The middle step is the reason
# for the square matrix: a softmax divides by the sum over the **whole** row, and subtracts the row's maximum
# first so that $e^x$ does not overflow. Both are facts about the entire row, known only when the whole row has
# been seen.
#
# Or so it seems. Suppose you read a row in blocks and keep two numbers: the largest score so far, $m$, and the
# sum of $e^{x - m}$ so far, $d$. A new block with a larger maximum $m'$ makes every term of $d$ too large by the
# same factor $e^{m' - m}$, so one multiplication, $d \cdot e^{m - m'}$, puts the old sum on the new footing.
# At the end of the row $m$ and $d$ are exactly the maximum and the sum the softmax needs. Attention goes one
# step further: the weighted sum of the values can be carried along in the same way, rescaled by the same
# factor, and divided by $d$ once at the end. Then the scores of a row never need to exist all at once: only
# one tile of them.
#
# How big is the matrix this avoids? One head, float32:

# %%
# NBVAL_CHECK_OUTPUT
for length in (512, 4096, 32768, 131072):
    square = length * length * 4  # bytes of one (length, length) float32 matrix
    state = length * (64 + 2) * 4  # per query: 64 output numbers (d_k = 64), a maximum and a sum
    print(f"length {length:>7,}: scores {square / 2**20:>10,.0f} MiB   running state {state / 2**20:>6.2f} MiB")

# %% [markdown]
# The scores grow with the square of the length, the running state with the length. At 131,072 tokens the
# square matrix of one head takes 65,536 MiB (64 GiB), more than the memory of most GPUs, while the state of the tiled
# version takes 33 MiB.
#
# ## The math
#
# **The online softmax.** For a row $x_1, \dots, x_N$, $\mathrm{softmax}(x)_i = e^{x_i - M} / \sum_j e^{x_j - M}$
# with $M = \max_j x_j$ (subtracting $M$ changes nothing mathematically and keeps every exponent $\le 0$). Read
# the row in blocks $B_1, B_2, \dots$ and keep
#
# $$m_t = \max(m_{t-1}, \max_{j \in B_t} x_j), \qquad
#   d_t = d_{t-1}\, e^{m_{t-1} - m_t} + \sum_{j \in B_t} e^{x_j - m_t},$$
#
# starting from $m_0 = -\infty$, $d_0 = 0$. By induction $d_t = \sum_{j \text{ seen}} e^{x_j - m_t}$, so after the
# last block $m = M$ and $d$ is the softmax's denominator; a second pass writes $e^{x_i - m}/d$.
#
# **Tiled attention.** Split the queries into tiles of $B_r$ rows and the keys and values into tiles of $B_c$
# rows. For one tile of queries $Q_i$, keep per query a maximum $m$, a sum $\ell$ and an accumulator
# $A \in \mathbb{R}^{B_r \times d_v}$, all starting at $-\infty$, $0$, $0$. For each tile of keys $K_j, V_j$:
#
# $$S = Q_i K_j^\top / \sqrt{d_k}, \quad m' = \max(m, \mathrm{rowmax}(S)), \quad P = e^{S - m'}, \quad
#   \alpha = e^{m - m'},$$
# $$\ell \leftarrow \alpha\, \ell + \mathrm{rowsum}(P), \qquad A \leftarrow \alpha\, A + P V_j,
#   \qquad m \leftarrow m'.$$
#
# After the last tile, $O_i = A / \ell$ (row by row). (This order, queries outside and keys inside, with one
# division at the end, is FlashAttention-2's (Dao, 2023); the first paper kept the output normalised by the running
# sum at every step, which gives the same result with more divisions.)
#
# Masked scores are $-\infty$ and contribute $e^{-\infty} = 0$. A query that sees no key keeps $m = -\infty$, $\ell =
# 0$: its output is set to 0 (the course's rule since chapter 02), and $m' = -\infty$ is replaced by 0 in the exponents
# so that $e^{-\infty - (-\infty)}$, which is NaN, never happens. With a causal mask, query $i$ sees key $j$ when $j \le
# i$ **as positions in the sequence**: in the tile that starts at query $q_0$ and key $k_0$, row $r$ and column $c$ are
# positions $q_0 + r$ and $k_0 + c$. Tiles whose first key comes after their last query are skipped altogether.
#
# **What the backward pass keeps.** Per query, the log-sum-exp $L = m + \log \ell = \log \sum_j e^{S_j}$. With
# it any tile of probabilities comes back in one step, $P = e^{S - L}$, already normalised. With
# $dO$ the gradient of the output, softmax's backward pass is
#
# $$dV_j \mathrel{+}= P^\top dO_i, \quad dP = dO_i V_j^\top, \quad D = \mathrm{rowsum}(dO_i \circ O_i), \quad
#   dS = P \circ (dP - D), \quad dQ_i \mathrel{+}= dS\, K_j / \sqrt{d_k}, \quad
#   dK_j \mathrel{+}= dS^\top Q_i / \sqrt{d_k}.$$
#
# $dK_j$ and $dV_j$ are summed over the query tiles $i$, $dQ_i$ over the key tiles $j$: every pair of tiles adds
# its share.
#
# ($D_r = \sum_j P_{rj}\, dP_{rj}$, which equals $\sum_c dO_{rc}\, O_{rc}$ because $O = PV$: one number per query,
# from the saved output. The first FlashAttention paper saved $m$ and $\ell$; saving their combination $L$ is
# FlashAttention-2's simplification.)
#
# The $-\infty$ rule holds backwards too. A query that sees no key has $\ell = 0$, so $L = -\infty$, and
# $e^{S - L} = e^{-\infty - (-\infty)}$ is NaN for its masked scores. Replace such an $L$ by 0 in the exponent and
# set that query's row of $P$ to 0: its output was set to 0, it depends on no key, so it sends no gradient to
# $K$ and $V$ and receives none ($dQ = 0$). Nothing of size $(\text{q\_len}, \text{k\_len})$ is stored: the scores
# are computed twice, once forward and once backward. FlashAttention trades arithmetic for memory on purpose.
#
# ## Build it
#
# ### The online softmax, block by block
#
# A row of ten scores in blocks of three. Watch the maximum grow and the sum get rescaled:

# %%
# NBVAL_CHECK_OUTPUT
row = torch.tensor([1.0, 0.5, 2.0, 4.0, 3.0, 0.0, 6.0, 1.0, 5.5, 2.0])
m, d = torch.tensor(float("-inf")), torch.tensor(0.0)
for start in range(0, len(row), 3):
    block = row[start:start + 3]
    m_new = torch.maximum(m, block.max())
    d = d * torch.exp(m - m_new) + torch.exp(block - m_new).sum()  # rescale the old sum, add the block
    print(f"block {block.tolist()}: max {m.item():>4} -> {m_new.item():>4}, "
          f"old sum x {torch.exp(m - m_new).item():.4f}, sum now {d.item():.4f}")
    m = m_new
by_blocks = torch.exp(row - m) / d
print("equal to row.softmax(-1):", torch.allclose(by_blocks, row.softmax(-1), atol=1e-7))

# %% [markdown]
# The first block multiplies the empty sum by $e^{-\infty} = 0$; the second raises the maximum from 2 to 4 and
# shrinks the old sum by $e^{-2}$; the third raises it to 6. The last line compares with PyTorch's softmax.
# The package's `online_softmax(x, block_size)` does the same for tensors of any shape.
#
# ### One tile of queries against tiles of keys
#
# Now attention, for one head and one tile of queries, in the notation of the math section. The loop runs over
# tiles of keys; nothing of size $(\text{q\_len}, \text{k\_len})$ is ever formed.

# %%
q_len, k_len, d_k, block = 8, 20, 16, 6
Q, K, V = torch.randn(q_len, d_k), torch.randn(k_len, d_k), torch.randn(k_len, d_k)

m = torch.full((q_len,), float("-inf"))  # running maximum per query
l = torch.zeros(q_len)  # running sum of exp(score - m) per query
acc = torch.zeros(q_len, d_k)  # running sum of exp(score - m) * value per query
for k0 in range(0, k_len, block):  # 20 keys in tiles of 6: 6, 6, 6 and a last tile of 2
    S = Q @ K[k0:k0 + block].T / math.sqrt(d_k)  # (q_len, block): one tile of scores
    m_new = torch.maximum(m, S.max(dim=-1).values)
    P = torch.exp(S - m_new[:, None])  # (q_len, block)
    alpha = torch.exp(m - m_new)  # (q_len,): how much the old maximum was too small
    l = alpha * l + P.sum(dim=-1)
    acc = alpha[:, None] * acc + P @ V[k0:k0 + block]
    m = m_new
O_tiled = acc / l[:, None]  # normalised once, at the end

# %%
# NBVAL_CHECK_OUTPUT
O_explicit = (Q @ K.T / math.sqrt(d_k)).softmax(dim=-1) @ V  # the (8, 20) matrix, as in chapter 01
print("tiled equals explicit:", torch.allclose(O_tiled, O_explicit, atol=1e-6))
print("log-sum-exp m + log l equals torch.logsumexp:",
      torch.allclose(m + l.log(), (Q @ K.T / math.sqrt(d_k)).logsumexp(dim=-1), atol=1e-6))

# %% [markdown]
# The package's `flash_attention(query, key, value, mask=None, block_size=64, causal=False)` does this for
# every tile of queries, for $(\text{batch}, \text{heads}, \text{len}, d_k)$ tensors, with a boolean mask
# (True = may attend) and the causal rule applied per tile with its offset. Its backward pass is a
# `torch.autograd.Function` that saves the output and the log-sum-exp and recomputes tiles, as derived above.
#
# When there are fewer queries than keys, `causal=True` takes the queries to be the **last** ones of the
# sequence: query $i$ of $n_q$ sees keys $j \le i + n_k - n_q$ (the mask aligned to the bottom-right corner,
# as FlashAttention does from version 2.1). That is what a decode step needs: one new query against the $n_k$
# keys of the KV cache (chapter 15) sees all of them. Aligned to the top-left instead, it would see key 0 alone.
# PyTorch's SDPA with `is_causal=True` aligns top-left, so the two agree only when $n_q = n_k$.
#
# ## Check it
#
# Against PyTorch's `scaled_dot_product_attention` (SDPA), in float32, with no mask, a padding mask, a causal
# mask and both, for block sizes that divide the length (16) and that do not (5, 7, 100):

# %%
# NBVAL_CHECK_OUTPUT
batch, heads, length, d_k = 2, 4, 48, 32
q, k, v = (torch.randn(batch, heads, length, d_k) for _ in range(3))
padding = torch.ones(batch, 1, 1, length, dtype=torch.bool)
padding[1, ..., 40:] = False  # the second sequence has 8 padding positions
masks = {"none": None, "padding": padding, "causal": T.causal_mask(length),
         "padding and causal": padding & T.causal_mask(length)}
worst = 0.0
for name, mask in masks.items():
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for block_size in (5, 7, 16, 100):
        got = flash_attention(q, k, v, mask, block_size=block_size)
        worst = max(worst, (got - want).abs().max().item())
print("largest difference from SDPA over 16 cases below 1e-6:", worst < 1e-6)
same = torch.allclose(flash_attention(q, k, v, block_size=7, causal=True),
                      F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
print("causal=True (the rule applied tile by tile, tiles above the diagonal skipped) equals SDPA:", same)

# %% [markdown]
# A query that may see no key: the explicit path of chapter 02 returns 0 for it, and so does the tiled one, for
# every block size; no NaN anywhere.

# %%
# NBVAL_CHECK_OUTPUT
mask = T.causal_mask(length).repeat(batch, heads, 1, 1)  # (batch, heads, length, length)
mask[0, 2, 10] = False  # query 10 of head 2 of the first sequence sees nothing
explicit_out = scaled_dot_product_attention(q, k, v, mask)[0]
for block_size in (4, 7, 64):
    got = flash_attention(q, k, v, mask, block_size=block_size)
    same = torch.allclose(got, explicit_out, atol=1e-6)
    print(f"block {block_size:>2}: no NaN {not got.isnan().any().item()}, that query's output is 0 "
          f"{bool((got[0, 2, 10] == 0).all())}, equal to the explicit path {same}")
print("its log-sum-exp:", attention_lse(q, k, mask, block_size=7)[0, 2, 10].item())

# %% [markdown]
# The gradients, in float64 so that rounding cannot hide a mistake: `torch.autograd.gradcheck` compares the
# backward pass with finite differences, and the gradients are compared with the explicit path's (autograd
# through the full matrix), with a causal mask and a query that sees nothing.

# %%
# NBVAL_CHECK_OUTPUT
q64, k64, v64 = (torch.randn(1, 2, 11, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
mask64 = T.causal_mask(11).clone()
mask64[4] = False  # query 4 sees no key
print("gradcheck:", torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, mask64, block_size=3),
                                             (q64, k64, v64)))
grad_out = torch.randn(1, 2, 11, 8, dtype=torch.float64)
tiled_grads = torch.autograd.grad(flash_attention(q64, k64, v64, mask64, block_size=3), (q64, k64, v64), grad_out)
explicit_grads = torch.autograd.grad(scaled_dot_product_attention(q64, k64, v64, mask64)[0], (q64, k64, v64),
                                     grad_out)
for name, a, b in zip(("dQ", "dK", "dV"), tiled_grads, explicit_grads):
    print(f"{name} equal to the explicit path's:", torch.allclose(a, b, atol=1e-10))

# %% [markdown]
# ## See it: memory against length
#
# **How memory is measured here.** Python's `tracemalloc` does not see PyTorch's tensors, and the process's
# resident size moves with the allocator and everything else in the process. `peak_tensor_bytes(fn, ...)`
# (in `tfm_lesson.look.memory`) runs `fn` under a `TorchDispatchMode`, a hook that sees every PyTorch operator the
# function runs: each new tensor adds its bytes, a finalizer subtracts them when the tensor is freed, and the
# largest running total is the peak. Its inputs (and views of them) are not counted: the number is the memory
# the call itself needed at its worst moment. What it cannot see are buffers a fused kernel allocates and frees
# inside itself (SDPA's own tiles); for those, the cross-check after the figure reads how far this process's
# resident high-water mark rises during the call.
#
# Three contenders: the explicit path of chapter 01; the tiled `flash_attention`; and PyTorch's own
# `F.scaled_dot_product_attention`, which on a CPU runs a **fused kernel**: one compiled function that does the
# whole attention in one call, itself tile by tile. One head, $d_k = 64$, float32, under `torch.no_grad()`
# (inference), tiles of 128 for the tiled version:

# %%
# NBVAL_IGNORE_OUTPUT
lengths = [256, 512, 1024, 2048, 4096]
methods = {
    "explicit (chapter 01)": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
    "tiled (flash_attention, tiles of 128)": lambda q, k, v: flash_attention(q, k, v, block_size=128),
    "SDPA (PyTorch's fused kernel)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
}
peaks = {name: [] for name in methods}
seconds = {name: [] for name in methods}
with torch.no_grad():
    for length in lengths:
        q, k, v = (torch.randn(1, 1, length, 64) for _ in range(3))
        for name, fn in methods.items():
            peaks[name].append(peak_tensor_bytes(fn, q, k, v))
            times = []
            for _ in range(3):  # best of three: the least disturbed by other programs
                start = time.perf_counter()
                fn(q, k, v)
                times.append(time.perf_counter() - start)
            seconds[name].append(min(times))
print("peak bytes of the call (MiB)      " + "".join(f"{n:>9,}" for n in lengths))
for name in methods:
    print(f"{name:<38}" + "".join(f"{b / 2**20:9.2f}" for b in peaks[name]))
print(f"the (length, length) float32 matrix" + "".join(f"{n * n * 4 / 2**20:9.2f}" for n in lengths))
print("\nbest of 3 (ms)                   " + "".join(f"{n:>9,}" for n in lengths))
for name in methods:
    print(f"{name:<38}" + "".join(f"{1e3 * s:9.1f}" for s in seconds[name]))
tiled_over_explicit = [t / e for t, e in zip(seconds["tiled (flash_attention, tiles of 128)"],
                                             seconds["explicit (chapter 01)"])]
print(f"\ntiled time / explicit time: {tiled_over_explicit[0]:.1f} at {lengths[0]:,} tokens, "
      f"{tiled_over_explicit[-1]:.1f} at {lengths[-1]:,}")

# %% mystnb={"image": {"alt": "Log-log line chart of peak memory against sequence length from 256 to 4,096 tokens: the explicit attention climbs along the length-squared guide to over 100 MiB, while the tiled attention and PyTorch's fused SDPA stay near or below about 1 MiB, SDPA growing in proportion to the length, the tiled version more slowly at first (its tiles dominate)."}}
viz.plot_scaling(lengths, {name: [b / 2**20 for b in peaks[name]] for name in methods},
                 title="Peak memory of one attention call (one head, d_k = 64, float32)")

# %% [markdown]
# Read the table above and the figure. The explicit path's peak is twice the square matrix (the last row of the
# first table): the scores and the softmax's output exist at the same moment. It follows the dotted line of
# slope 2: doubling the length multiplies it by four. The tiled version's peak is the output, $(\text{len}, 64)$,
# plus a few tiles of $128 \times 128$: it approaches slope 1 as the output comes to dominate. SDPA's is little more than
# the output, as far as a hook above the kernel can see.
#
# The second table is the time. At short lengths the tiled version is a few times slower than the explicit one:
# its tiles are a Python loop, about two dozen small PyTorch calls per tile, each paying Python's and PyTorch's
# overhead, while the explicit path makes a handful of large calls that use the CPU's vector units well. As the
# length grows, the explicit path writes and reads square matrices far larger than the CPU's caches, so how the
# two compare at the longest lengths differs from machine to machine: the last line under the table prints the
# ratio of their times at the shortest and at the longest length on yours. SDPA, a compiled kernel that
# also works tile by tile, is usually the fastest of the three. Speed on a CPU is not what a Python
# FlashAttention is for. On a GPU the same algorithm, written as one fused kernel, keeps each tile in the chip's
# fast on-chip memory and avoids writing the square matrix to the slow main memory and reading it back: there it
# saves time as well as memory.
# (No GPU ran this notebook. SDPA picks among several implementations, its *back ends*, on a CPU as on a GPU: on
# a GPU a fused FlashAttention kernel and a plain "math" one among them. The GPU's are not measured here.)
#
# **A cross-check that sees everything.** The operating system keeps, for every process, the high-water mark of
# its resident memory: every page it touched, kernel scratch buffers included. On Linux,
# `resident_peak_rise(fn, ...)` (in `tfm_lesson.look.memory`) resets that mark, runs `fn` and reads how far the mark
# rose:

# %%
# NBVAL_IGNORE_OUTPUT
q, k, v = (torch.randn(1, 1, 4096, 64) for _ in range(3))
try:
    with torch.no_grad():
        for name, fn in methods.items():
            fn(q[..., :256, :], k[..., :256, :], v[..., :256, :])  # warm up: first calls load code and buffers
            print(f"{name:<38} resident peak rose by {resident_peak_rise(fn, q, k, v) / 2**20:7.1f} MiB")
except RuntimeError as exc:  # not Linux
    print("no cross-check on this system:", exc)

# %% [markdown]
# The cell above prints how far the resident high-water mark rose during each call at 4,096 tokens. Compare the
# explicit path's rise with the two square matrices the hook measured. The tiled version and SDPA rise by little
# or nothing: their few MiB (SDPA's kernel scratch included) fit in memory the process had already touched, since
# freed memory stays with the process for reuse. That is why the resident size is the coarse witness and the hook
# the precise one; they agree on what matters: a square matrix for the explicit path, next to nothing for the
# other two.
#
# **With gradients.** Training keeps what the backward pass needs. Autograd through the explicit path keeps the
# $(\text{len}, \text{len})$ weights; `flash_attention`, through its `torch.autograd.Function` `FlashAttention`,
# keeps the output and one log-sum-exp per query:

# %%
# NBVAL_IGNORE_OUTPUT
length = 2048
q, k, v = (torch.randn(1, 1, length, 64, requires_grad=True) for _ in range(3))


def forward_backward(fn):
    fn(q, k, v).sum().backward()


for name, fn in methods.items():
    print(f"{name:<38} forward + backward peak {peak_tensor_bytes(forward_backward, fn) / 2**20:7.2f} MiB")
print(f"the ({length}, {length}) float32 matrix: {length * length * 4 / 2**20:.0f} MiB")


# %% [markdown]
# The cell above prints the peaks of a forward and a backward pass at 2,048 tokens. Compare the explicit one with
# the square matrix printed below it: it holds several such matrices at once (the weights autograd saved, and the
# gradients of the weights and of the scores); the tiled one holds the inputs' gradients, the saved output and
# tiles.
#
# ## Decoding's real bottleneck: memory traffic
#
# Saving memory is one half of the story; the other is speed, and it hides in how data moves. A processor can
# multiply far faster than memory can feed it numbers. Whether an operation waits for arithmetic or for memory
# depends on its **arithmetic intensity**: floating-point operations (FLOPs) per byte moved to or from memory.
# A product $(m, k) \times (k, n)$ does $2mkn$ FLOPs (a multiplication and an addition for each of the $mkn$
# terms) and moves at least $(mk + kn + mn)$ numbers:
#
# $$I = \frac{2mkn}{(mk + kn + mn) \cdot \text{bytes per number}}.$$
#
# The **roofline model** (Williams, Waterman & Patterson, 2009, who call $I$ the *operational* intensity) draws what a
# machine can attain at intensity $I$: $\min(\text{peak FLOP/s},\ \text{bandwidth} \times I)$. Left of the knee, $I <
# \text{peak}/\text{bandwidth}$, the operation is **memory-bound**: it finishes when its bytes have arrived, and more
# arithmetic would be free. Right of it, it is **compute-bound**.
#
# Most of a language model's weights are matrices of about $(d_\text{model}, d_\text{model})$ or
# $(d_\text{model}, 4 d_\text{model})$; take the square ones. **Prefill**, reading a prompt of $m$
# tokens, multiplies $(m, d_\text{model})$ by each weight: with $m$ in the hundreds the intensity is tens to hundreds
# of FLOPs per byte. **Decode**, writing one token at a time with a KV cache (chapter 15), multiplies
# $(1, d_\text{model})$ by each weight: a matrix–vector product, $I \approx 2d_\text{model}^2 / (d_\text{model}^2
# \cdot 4) = 0.5$ FLOP/byte in float32, whatever $d_\text{model}$ is. Measure both on this machine.
# First the two roofs: the best FLOP/s of a large square product, and the speed of reading a large array, measured
# two ways (a sum, and a product with a single row, which reads a matrix as a decode step does); the faster of the
# two is the bandwidth roof:

# %%
# NBVAL_IGNORE_OUTPUT
def best_seconds(fn, repeat=5):
    """The best of `repeat` timed runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


A = torch.randn(1024, 1024)
peak_gflops = 2 * 1024**3 / best_seconds(lambda: A @ A) / 1e9
big = torch.randn(16384, 4096)  # 256 MiB: larger than the cache one core can use
by_sum = big.numel() * 4 / best_seconds(lambda: big.sum()) / 1e9  # read once, one number out
by_product = big.numel() * 4 / best_seconds(lambda: torch.ones(1, 16384) @ big) / 1e9  # read once, 4096 out
bandwidth_gbs = max(by_sum, by_product)
print(f"peak: {peak_gflops:.1f} GFLOP/s (1024 x 1024 products)")
print(f"reading 256 MiB: {by_sum:.1f} GB/s with .sum(), "
      f"{by_product:.1f} GB/s with a (1, 16384) x (16384, 4096) product")
print(f"knee of the roofline: {peak_gflops / bandwidth_gbs:.1f} FLOPs per byte")
del big

# %% [markdown]
# Now a stack of four weight matrices $(4096, 4096)$, 256 MiB in all (more than the CPU's caches hold, as a
# model's weights are), multiplied by $m$ tokens at once: $m = 1$ is a decode step, larger $m$ a prefill.

# %%
# NBVAL_IGNORE_OUTPUT
d_model = 4096
weights = [torch.randn(d_model, d_model) for _ in range(4)]  # 4 x 64 MiB
points = {}
print("tokens m | FLOPs per byte | GFLOP/s | ms per pass")
for m in (1, 4, 16, 64, 256):
    x = torch.randn(m, d_model)
    s = best_seconds(lambda: [x @ w for w in weights], repeat=3 if m > 16 else 5)
    flops = 4 * 2 * m * d_model * d_model
    intensity = 2 * m * d_model * d_model / ((m * d_model + d_model * d_model + m * d_model) * 4)
    points[f"m = {m}" + (" (decode)" if m == 1 else " (prefill)" if m == 256 else "")] = (intensity, flops / s / 1e9)
    print(f"{m:8} | {intensity:14.2f} | {flops / s / 1e9:7.1f} | {1e3 * s:8.1f}")
del weights

# %% mystnb={"image": {"alt": "Roofline chart of this machine on log axes: a sloping memory-bound roof meets a flat compute roof at the knee; the matrix products sit near it (a point can pass a roof, itself measured on other shapes), the decode product with one row (m = 1) far left on the sloping part and the prefill product with 256 rows far right near the flat peak."}}
viz.plot_roofline(peak_gflops, bandwidth_gbs, points, title=f"Roofline of this machine ({platform.machine()}, "
                                                           f"{torch.get_num_threads()} thread(s), float32)")

# %% [markdown]
# The cell before the figure prints the GFLOP/s for each number of tokens $m$. The decode step ($m = 1$) sits at
# the far left, near the sloping roof: it runs at the speed memory delivers the weights, a small fraction of the
# peak. (A point can land a little above a roof: each roof is itself a measurement, the bandwidth on other read
# patterns and the peak on a smaller product, and other shapes reach slightly different speeds.) As $m$ grows,
# the same bytes serve more tokens, the intensity rises in proportion, and the points climb toward the flat roof;
# the time per pass, the last column, grows far more slowly than $m$. A point can also sit well below the roof;
# the matrix library's choices for small shapes are one likely reason.
#
# This is why decoding one sequence at a time is memory-bound on every machine, GPUs included (whose knee sits at
# a much higher intensity): each generated token reads **every weight** and, for attention, **the whole KV
# cache**, to do about two FLOPs per number read. Attention at decode time is no better off than the weights: one
# query of $d_k$ numbers meets $n$ cached keys and values, about $4 n d_k$ FLOPs for $2 n d_k$ numbers read. And
# where a batch of sequences shares every weight read, each sequence has its own cache, so batching does not raise
# attention's intensity. Grouped-query attention (chapter 16) does: $g$ query heads share one key/value head, the
# same bytes serve $g$ queries, which multiplies the intensity by $g$ and divides the cache by $g$:

# %%
# NBVAL_CHECK_OUTPUT
d_k, cache_len = 128, 4096
for group in (1, 4, 8):  # query heads per key/value head; 1 = ordinary multi-head attention
    flops = group * 4 * cache_len * d_k  # scores (2 n d_k) and weighted values (2 n d_k), for each query head
    moved = 2 * cache_len * d_k * 2  # keys and values of one key/value head, float16
    print(f"{group} query head(s) per key/value head: {flops / moved:.0f} FLOP(s) per byte of cache read")

# %% [markdown]
# Measured the other way round: the cheapest decode step is the one that reads the fewest bytes. Smaller caches
# (grouped-query attention, chapter 16), fewer bytes per number (float16, 8-bit weights), and larger batches of
# sequences decoded together (each weight read then serves every sequence of the batch) all move decode to the
# right on the roofline. In prefill the weight products are compute-bound, but attention written out is not: it
# is slowed by writing and reading the $(n, n)$ scores. That traffic is what a fused FlashAttention kernel
# removes, so long prompts are where it pays off most.
#
# ## Play with it
#
# Change the length and the tile size and see the tiled version's peak memory and time move. Smaller tiles:
# less memory, more Python calls, slower. Tiles as large as the sequence: the square matrix again, one tile of
# $(\text{len}, \text{len})$, three of them at once, more than the explicit path's two.

# %%
length, block_size = 2048, 64  # try block_size 16, 256, 2048
q, k, v = (torch.randn(1, 1, length, 64) for _ in range(3))
with torch.no_grad():
    start = time.perf_counter()
    flash_attention(q, k, v, block_size=block_size)
    took = time.perf_counter() - start
    peak = peak_tensor_bytes(flash_attention, q, k, v, block_size=block_size)
print(f"length {length}, tiles of {block_size}: peak {peak / 2**20:.2f} MiB, {1e3 * took:.0f} ms "
      f"(the square matrix: {length * length * 4 / 2**20:.0f} MiB)")

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: the online softmax
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `my_online_softmax(x, block_size)`: the softmax over the last axis of `x`, reading it in blocks of
# `block_size` columns (the last block may be shorter) with a running maximum `m` and a running sum `d` per row,
# then one pass that writes `exp(x - m) / d`. A row that is all `-inf` (nothing to attend to) must give zeros,
# not NaN: where `m` is `-inf`, subtract 0 instead, in every block (a row may start with a block of `-inf`).
# Write it yourself: the checker refuses the package's `online_softmax` and `flash_attention`, and PyTorch's
# `softmax`, `log_softmax` and `logsumexp`, under any name; it also watches your function run and refuses a max or
# a sum that spans a whole row at once (only the final pass may touch the whole row).

# %%
def my_online_softmax(x, block_size):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_online_softmax(x, block_size):
    m = torch.full(x.shape[:-1], float("-inf"))  # running maximum per row
    d = torch.zeros(x.shape[:-1])  # running sum of exp(x - m) per row
    for start in range(0, x.size(-1), block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == float("-inf"), 0.0, m_new)  # a row of -inf so far: subtract 0
        d = d * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)  # rescale, then add
        m = m_new
    shift = torch.where(m == float("-inf"), 0.0, m)
    return torch.where(d[..., None] > 0, torch.exp(x - shift[..., None]) / d[..., None], 0.0)


# %%
# NBVAL_CHECK_OUTPUT
check_online_softmax(my_online_softmax)

# %% [markdown]
# Attention asks nothing more of a softmax. Use yours as the softmax of chapter 01's explicit attention, on scores
# with a causal mask and one query that sees no key, and compare with `flash_attention`. The first line the cell
# prints says whose `my_online_softmax` it uses: yours once it passes its check; until then the package's
# `online_softmax` stands in.

# %%
# NBVAL_CHECK_OUTPUT
softmax_by_blocks = yours_or_reference(my_online_softmax, "online_softmax", say=True)
q, k, v = (torch.randn(2, 4, 48, 32) for _ in range(3))
visible = T.causal_mask(48).repeat(2, 4, 1, 1)  # (batch, heads, q_len, k_len)
visible[0, 2, 10] = False  # query 10 of head 2 of the first sequence sees no key
scores = (q @ k.transpose(-2, -1) / math.sqrt(32)).masked_fill(~visible, float("-inf"))  # (2, 4, 48, 48)
out = softmax_by_blocks(scores, 16) @ v  # (2, 4, 48, 32)
print("no NaN:", not out.isnan().any().item(), "| the query that sees no key gets 0:", bool((out[0, 2, 10] == 0).all()))
print("equal to flash_attention:", torch.allclose(out, flash_attention(q, k, v, visible, block_size=16), atol=1e-6))

# %% [markdown]
# ### Exercise 2: tiled attention, with the causal offset
# **Difficulty** 3/3 · **Importance** 3/3 · **Time** ~25 min
#
# Write `my_tiled_attention(query, key, value, block_size, causal=False, mask=None)` for tensors
# $(\text{batch}, \text{heads}, \text{len}, d_k)$: tiles of `block_size` queries against tiles of `block_size`
# keys, with a running maximum, a running sum and an output accumulator per query, divided once at the end.
# With `causal=True`, query position $i$ may see key position $j \le i$, positions counted in the whole
# sequence; when there are fewer queries than keys, the queries are the sequence's last positions (query $i$ sits
# at $i + \text{k\_len} - \text{q\_len}$, as in one decoding step after a cache), the alignment the package's
# `flash_attention` uses. `mask` (boolean, True = may attend, shaped $(\text{batch}, \text{heads}, \text{q\_len},
# \text{k\_len})$) hides keys too, with or without `causal`; a query that sees no key gets 0. Write it yourself:
# the checker refuses the package's `flash_attention` and PyTorch's SDPA, and measures your function's peak
# memory with `peak_tensor_bytes` (the hook of the memory section), which must stay below one full
# $(\text{q\_len}, \text{k\_len})$ matrix.

# %%
def my_tiled_attention(query, key, value, block_size, causal=False, mask=None):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_tiled_attention(query, key, value, block_size, causal=False, mask=None):
    batch, heads, q_len, d_k = query.shape
    k_len = key.size(2)
    out = torch.zeros(batch, heads, q_len, value.size(-1))
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        m = torch.full((batch, heads, q1 - q0), float("-inf"))
        l = torch.zeros(batch, heads, q1 - q0)
        acc = torch.zeros(batch, heads, q1 - q0, value.size(-1))
        for k0 in range(0, k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            s = query[:, :, q0:q1] @ key[:, :, k0:k1].transpose(-2, -1) / math.sqrt(d_k)  # (b, h, bq, bk)
            if causal:  # positions in the whole sequence, not inside the tile; the queries are its last positions
                q_pos = torch.arange(q0, q1)[:, None] + (k_len - q_len)
                s = s.masked_fill(torch.arange(k0, k1) > q_pos, float("-inf"))
            if mask is not None:
                s = s.masked_fill(~mask[..., q0:q1, k0:k1], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = torch.where(m_new == float("-inf"), 0.0, m_new)
            p = torch.exp(s - shift[..., None])
            alpha = torch.exp(m - shift)  # rescales what was summed against the old maximum
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ value[:, :, k0:k1]
            m = m_new
        out[:, :, q0:q1] = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], 0.0)
    return out


# %%
# NBVAL_CHECK_OUTPUT
check_tiled_attention(my_tiled_attention)

# %% [markdown]
# Now measure yours as the memory section measured the package's: the peak bytes of one call, one head,
# $d_k = 64$, float32, tiles of 128, under `torch.no_grad()`, at the same lengths. The first line the cell prints
# says whose `my_tiled_attention` it measures.

# %%
tiled_by = yours_or_reference(my_tiled_attention, "tiled_attention", say=True)
who = "tiled (yours)" if tiled_by is my_tiled_attention else "tiled (the package's, standing in)"
tiled_peaks = []
with torch.no_grad():
    for length in lengths:
        q, k, v = (torch.randn(1, 1, length, 64) for _ in range(3))
        tiled_peaks.append(peak_tensor_bytes(tiled_by, q, k, v, 128))
print("peak bytes of the call (MiB)      " + "".join(f"{n:>9,}" for n in lengths))
for name, row in ((who, tiled_peaks), ("tiled (flash_attention)", peaks["tiled (flash_attention, tiles of 128)"]),
                  ("explicit (chapter 01)", peaks["explicit (chapter 01)"])):
    print(f"{name:<38}" + "".join(f"{b / 2**20:9.2f}" for b in row))
print(f"the (length, length) float32 matrix" + "".join(f"{n * n * 4 / 2**20:9.2f}" for n in lengths))

# %% [markdown]
# The first row of the table is the function the first line named. Compare it with the package's row below it and
# with the explicit path's: a function that keeps only one tile of scores at a time, as the exercise asks, grows like
# the package's, with the length, and stays far below the square matrix of the last row.

# %% [markdown]
# ### Exercise 3: arithmetic intensity
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~5 min
#
# Write `intensity(m, k, n, bytes_per_number)`: the FLOPs per byte of the product $(m, k) \times (k, n)$ that
# reads each input once and writes the output once. Then compare what your function says for a decode step
# `intensity(1, 4096, 4096, 2)` and a prefill of 512 tokens `intensity(512, 4096, 4096, 2)` in float16 with
# the knee the roofline cell printed (measured in float32, so only a rough guide): the decode step lands to its
# left, the prefill far to its right.

# %%
def intensity(m, k, n, bytes_per_number):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def intensity(m, k, n, bytes_per_number):
    flops = 2 * m * k * n  # a multiplication and an addition per term
    moved = (m * k + k * n + m * n) * bytes_per_number  # both inputs read, the output written
    return flops / moved


# %%
# NBVAL_CHECK_OUTPUT
check_arithmetic_intensity(intensity)

# %% [markdown]
# The comparison the exercise asks for, computed with your function (the first line says whose):

# %%
flops_per_byte = yours_or_reference(intensity, "intensity", say=True)
knee = peak_gflops / bandwidth_gbs  # FLOPs per byte, from the roofline cell (float32)
for what, m in (("a decode step, 1 token", 1), ("a prefill of 512 tokens", 512)):
    value = flops_per_byte(m, 4096, 4096, 2)
    print(f"{what}, float16: {value:.1f} FLOPs per byte, {'left' if value < knee else 'right'} of this "
          f"machine's knee ({knee:.1f})")

# %% [markdown]
# ### Exercise 4: the backward pass by recomputation
# **Difficulty** 3/3 · **Importance** 2/3 · **Time** ~25 min
#
# Write `my_flash_backward(q, k, v, out, lse, grad_out, block_size, causal, mask)` for float64 tensors
# $(\text{batch}, \text{heads}, \text{len}, d)$: the gradients `(grad_q, grad_k, grad_v)` of the attention whose
# output `out` and log-sum-exp `lse` (`-inf` for a query that sees no key) were saved by the forward pass,
# `grad_out` being $dO$. Follow the math section tile by tile: recompute $P = e^{S - L}$ with the mask and the causal
# rule of exercise 2 (with fewer queries than keys, query $i$ sits at position $i + \text{k\_len} - \text{q\_len}$),
# compute $D = \mathrm{rowsum}(dO \circ O)$ once, and let every pair of tiles add its share to $dQ$, $dK$ and $dV$.
# Remember the $-\infty$ rule. Write it yourself: the checker compares with autograd through the explicit attention,
# refuses autograd and the package's backward, and measures that no $(\text{q\_len}, \text{k\_len})$ matrix is held
# at once.

# %%
def my_flash_backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
    ...  # your turn: (grad_q, grad_k, grad_v)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_flash_backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
    q_len, k_len, d_k = q.size(2), k.size(2), q.size(3)
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (grad_out * out).sum(dim=-1)  # (batch, heads, q_len): rowsum(dO * O), one number per query
    sees_none = lse == float("-inf")  # a query that sees no key: P = 0, no gradient
    L = torch.where(sees_none, 0.0, lse)  # so that exp(S - L) is never exp(-inf - (-inf))
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        for k0 in range(0, k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            S = q[:, :, q0:q1] @ k[:, :, k0:k1].transpose(-2, -1) / math.sqrt(d_k)  # (b, h, bq, bk)
            if causal:  # positions in the sequence; the queries are its last q_len positions, as in exercise 2
                q_pos = torch.arange(q0, q1)[:, None] + (k_len - q_len)
                S = S.masked_fill(torch.arange(k0, k1) > q_pos, float("-inf"))
            if mask is not None:
                S = S.masked_fill(~mask[..., q0:q1, k0:k1], float("-inf"))
            P = torch.exp(S - L[:, :, q0:q1, None]).masked_fill(sees_none[:, :, q0:q1, None], 0.0)
            dO = grad_out[:, :, q0:q1]
            grad_v[:, :, k0:k1] += P.transpose(-2, -1) @ dO
            dS = P * (dO @ v[:, :, k0:k1].transpose(-2, -1) - D[:, :, q0:q1, None])
            grad_q[:, :, q0:q1] += dS @ k[:, :, k0:k1] / math.sqrt(d_k)
            grad_k[:, :, k0:k1] += dS.transpose(-2, -1) @ q[:, :, q0:q1] / math.sqrt(d_k)
    return grad_q, grad_k, grad_v


# %%
# NBVAL_CHECK_OUTPUT
check_flash_backward(my_flash_backward)

# %% [markdown]
# Put your backward pass to work. A `torch.autograd.Function` pairs a forward pass with a backward pass of your
# choosing; below, the package's tiled forward (`flash_attention`, and `attention_lse` for the log-sum-exp it
# saves) with the backward pass that the first printed line names: yours once it passes its check, else the
# package's. From then on autograd calls it like any other operation. First its gradients against the explicit
# path's, causal, with fewer queries than keys:

# %%
# NBVAL_CHECK_OUTPUT
backward_by = yours_or_reference(my_flash_backward, "flash_backward", say=True)


class TiledAttention(torch.autograd.Function):
    """flash_attention's forward pass; the backward pass by `backward_by`, from the saved output and log-sum-exp."""

    @staticmethod
    def forward(ctx, query, key, value, block_size, causal):
        out = flash_attention(query, key, value, block_size=block_size, causal=causal)
        lse = attention_lse(query, key, block_size=block_size, causal=causal)  # (batch, heads, q_len)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.block_size, ctx.causal = block_size, causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        grads = backward_by(query, key, value, out, lse, grad_out, ctx.block_size, ctx.causal, None)
        return (*grads, None, None)  # nothing for block_size and causal


q = torch.randn(1, 2, 60, 16, dtype=torch.float64, requires_grad=True)  # 60 queries: the last 60 of 100 positions
k, v = (torch.randn(1, 2, 100, 16, dtype=torch.float64, requires_grad=True) for _ in range(2))
grad_out = torch.randn(1, 2, 60, 16, dtype=torch.float64)
tiled_grads = torch.autograd.grad(TiledAttention.apply(q, k, v, 32, True), (q, k, v), grad_out)
later = torch.ones(60, 100, dtype=torch.bool).tril(diagonal=40)  # query i sees keys 0 .. i + 40
explicit_grads = torch.autograd.grad(scaled_dot_product_attention(q, k, v, later)[0], (q, k, v), grad_out)
for name, a, b in zip(("dQ", "dK", "dV"), tiled_grads, explicit_grads):
    print(f"{name} equal to the explicit path's:", torch.allclose(a, b, atol=1e-10))

# %% [markdown]
# And the memory of a forward and a backward pass at 2,048 tokens, as in the section on gradients (here in
# float64, the dtype your backward pass was checked in):

# %%
length = 2048
q, k, v = (torch.randn(1, 1, length, 64, dtype=torch.float64, requires_grad=True) for _ in range(3))
for name, fn in (("explicit (chapter 01)", methods["explicit (chapter 01)"]),
                 ("tiled, with the backward named above", lambda q, k, v: TiledAttention.apply(q, k, v, 128, False))):
    print(f"{name:<38} forward + backward peak {peak_tensor_bytes(forward_backward, fn) / 2**20:7.2f} MiB")
print(f"the ({length}, {length}) float64 matrix: {length * length * 8 / 2**20:.0f} MiB")

# %% [markdown]
# Compare the two peaks with the square matrix printed below them: the explicit path holds several such matrices at
# once, while the tiled forward pass with the backward pass named above holds the inputs' gradients, the saved
# output and log-sum-exp, and one tile at a time.

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("18")

# %% [markdown]
# ## Summary
#
# - A softmax needs the row's maximum and sum, but not all at once: the **online softmax** carries a running
#   maximum $m$ and sum $d$, and rescales $d$ by $e^{m - m'}$ whenever a block brings a larger maximum $m'$.
# - **Tiled attention** (FlashAttention's forward pass) carries, per query, $m$, $\ell$ and an output accumulator,
#   rescales both $\ell$ and the accumulator by the same factor, and divides once after the last tile. Causal
#   masks compare positions in the sequence ($q_0 + r$ against $k_0 + c$); tiles wholly above the diagonal are
#   skipped; a query that sees no key gets 0. It equals PyTorch's SDPA to float32 rounding.
# - The **backward pass** keeps the output and one log-sum-exp per query and recomputes each tile,
#   $P = e^{S - L}$: more arithmetic, no square matrix; its gradients equal autograd's in float64.
# - Measured: the explicit path's peak memory grows with the square of the length, the tiled version's with the
#   length. On a CPU a Python loop of tiles is usually slower than SDPA and not reliably faster than the
#   explicit path; on a GPU the fused kernel is faster too, because it
#   spares the slow memory the square matrix.
# - A product's **arithmetic intensity**, FLOPs per byte, places it on the machine's **roofline**. Decode
#   multiplies one token by every weight and reads the whole KV cache, about two FLOPs per number read (0.5 FLOP
#   per byte in float32, 1 in float16): memory-bound.
#   That is why the cache's size, grouped-query attention and the number of bytes per weight matter so much
#   for generation; in prefill, where the weight products are compute-bound, a fused attention kernel pays off by
#   removing the traffic of the $(n, n)$ scores.
#
# Chapter 19 asks what all this costs: parameters, FLOPs and memory counted, and what a larger model buys. To go
# further here: the FlashAttention-2 paper (Dao, 2023) for how the work is split between a GPU's cores, and PyTorch's `scaled_dot_product_attention` documentation for the back ends it
# chooses between.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 18: Attention that fits: the online softmax and FlashAttention. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
