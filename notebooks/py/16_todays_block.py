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
# # 16 · Today's block: RMSNorm, RoPE, SwiGLU, grouped-query attention
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/16_todays_block.ipynb)
#
# The layer you built in chapters 01–09 is the 2017 one. Open the code of a model released in the last few
# years in the Llama family (Llama 2 and 3, Mistral, SmolLM and many more built the same way) and you find the
# same skeleton (attention, then a feed-forward network, each with a residual connection and a norm), changed
# in six places. (Other families differ in details: Qwen2 keeps biases on the query, key and value projections;
# Gemma multiplies its embeddings by $\sqrt{d_{model}}$ and gates with GELU, GeGLU, instead of SwiGLU.)
#
# | part | 2017 (the paper) | GPT-2 (2019) | Llama-style (today) |
# |---|---|---|---|
# | where the norm sits | after each sub-layer (post-norm) | before each sub-layer (pre-norm) + a final norm | pre-norm + a final norm |
# | which norm | LayerNorm | LayerNorm | **RMSNorm** |
# | positions | sinusoids added to the embeddings | learned vectors added to the embeddings | **rotary** (RoPE): queries and keys rotated |
# | feed-forward | ReLU, $d_{ff} = 4 d_{model}$ | GELU | **SwiGLU**, a gated network |
# | keys and values | one head per query head | one head per query head | **grouped-query attention**: fewer key/value heads |
# | biases | in the feed-forward network and the norms (the attention projections have none) | everywhere | **none** |
#
# This chapter makes each change, one at a time, from scratch; checks each equal to a reference
# (`torch.nn.RMSNorm`, the rotary code of Hugging Face `transformers`, PyTorch's own grouped-query attention);
# and measures what it does. Then it checks *whole models* equal: a GPT-2 and a Llama built by
# `transformers` become the course's `GPT`, and give the same logits. It ends with the question every
# change raises: does it help? You measure that on chapter 14's language model, with error bars.
#
# **What you will learn**
#
# - RMSNorm: layer norm without the mean, and why dropping the mean is enough;
# - rotary position embeddings, derived from chapter 04's rotation property: rotate queries and keys, and
#   the score $q_m \cdot k_n$ depends on $m - n$ only; the two pairing conventions, and the offset a KV
#   cache needs;
# - SwiGLU, with its hidden size scaled so it has the parameters of the 2017 feed-forward network;
# - grouped-query attention and the KV-cache memory it saves, measured on real tensors;
# - to read a Hugging Face config as the options of your own model, and to prove the two equal;
# - to read an ablation honestly: which differences are larger than the noise.

# %%
import inspect
import math
import os
import sys

ON_COLAB = "google.colab" in sys.modules
if not ON_COLAB:  # every model here is built from a config: nothing needs the Hugging Face hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ipywidgets as ipw
import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.cache import KVCache
from tfm_lesson.checks import check_grouped_query_attention, check_llama_hidden, check_rms_norm_half, check_rotary
from tfm_lesson.gpt import GPT, GPTConfig
from tfm_lesson.interop import from_hf, hf_config
from tfm_lesson.modern import (GroupedQueryAttention, RMSNorm, RotaryEmbedding, SwiGLU, interleaved_to_halves,
                               kv_cache_nbytes, swiglu_hidden)
from tfm_lesson.train.ablation import (VARIANTS, format_summary, load_ablation, plot_ablation, run_ablation, summarise,
                                 unigram_baseline)

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().cpu().double() - b.detach().cpu().double()).abs().max().item()


# %% [markdown]
# ## Intuition: the same block, cheaper and steadier
#
# None of these changes alters what a layer *does*: positions still mix through attention, each position
# still goes through a small network, the residual stream still carries everything. They change how
# cheaply and how steadily it does it:
#
# - **pre-norm** keeps a clean residual path from the output to the input, so deep stacks train without
#   a careful warm-up (chapter 05 measured it);
# - **RMSNorm** does the part of layer norm that matters, the re-scaling, and skips the re-centring;
# - **RoPE** puts positions where they are used, in the query–key score, and makes that score depend on
#   the offset $m - n$ between the query's and the key's positions (how far apart they are, and in which
#   order) rather than on where they sit;
# - **SwiGLU** lets one projection of the input gate another, feature by feature, for the same parameters;
# - **grouped-query attention** shares each key/value head among several query heads, so the KV cache
#   (chapter 15) shrinks by that factor;
# - **no biases**: a small share of the parameters gone, and (as PaLM reported) steadier training of
#   large models.
#
# Each is a flag of the course's `GPTConfig`. The 2017 block and today's block are two configs of one model:

# %%
# NBVAL_CHECK_OUTPUT
paper = GPTConfig(vocab_size=1000, max_len=128, d_model=64, heads=8, d_ff=256, num_layers=2,
                  norm_first=False, positional="sinusoidal", activation="relu")
today = GPTConfig(vocab_size=1000, max_len=128, d_model=64, heads=8, d_ff=swiglu_hidden(256), num_layers=2,
                  norm="rms", positional="rope", activation="swiglu", kv_heads=2, bias=False)
print(f"2017 block: {count(GPT(paper)):,} parameters; today's block: {count(GPT(today)):,} parameters")
print(GPT(today).blocks[0])

# %% [markdown]
# ## 1. Pre-norm with a final norm
#
# Chapter 05 settled this one with measurements: with the norm *after* each sub-layer (post-norm), every
# path from the loss to the first layer passes through a layer norm per sub-layer; with the norm *before*
# it (pre-norm), $x + \mathrm{sublayer}(\mathrm{norm}(x))$, the residual path is a plain sum, and gradients
# reach the bottom of a deep stack undamped. The price: nothing ever normalises the residual stream
# itself. Its size is whatever the embeddings and the sub-layers add up to, and it grows with every block
# that adds to it. So a pre-norm model adds **one final norm** after the last block, before the output
# projection. Follow the stream through a random 8-layer pre-norm GPT (GPT-2's initialisation, which keeps the
# growth slow). Expect small numbers: that initialisation draws the embeddings with a standard deviation of
# 0.02, so the stream starts at a root mean square of a few hundredths, and a freshly initialised block adds
# little to it. The final norm (a layer norm in this model) divides each position by its own spread, the
# standard deviation of its features, so it brings the stream up to a root mean square of about 1 (times its
# gain, which starts at 1), however small or large the stream is; a little under 1 here, because the $\epsilon$
# inside its square root is no longer negligible next to a variance this small:

# %%
torch.manual_seed(0)
deep = GPT(vocab_size=1000, max_len=64, d_model=64, heads=4, d_ff=256, num_layers=8).eval()
sizes = []
hooks = [block.register_forward_hook(lambda m, i, out: sizes.append(out.pow(2).mean().sqrt().item()))
         for block in deep.blocks]
final = deep.norm.register_forward_hook(lambda m, i, out: sizes.append(out.pow(2).mean().sqrt().item()))
with torch.no_grad():
    deep(torch.randint(0, 1000, (4, 64)))
for h in hooks + [final]:
    h.remove()
print("root mean square of the residual stream after each block:", [round(s, 3) for s in sizes[:-1]])
print(f"after the final norm: {sizes[-1]:.3f}")

# %% [markdown]
# The stream grows a little with each block, and the final norm hands the output projection vectors of a
# fixed size, a root mean square of about 1, whatever the depth.

# %% [markdown]
# ## 2. RMSNorm
#
# ### The math
#
# Layer norm (chapter 05) re-centres and re-scales each position's $d$ features, then applies a gain
# $\gamma$ and a shift $\beta$:
#
# $$\mathrm{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta,\qquad
# \mu = \tfrac1d \textstyle\sum_i x_i,\quad \sigma^2 = \tfrac1d \sum_i (x_i - \mu)^2 .$$
#
# RMSNorm (Zhang & Sennrich, 2019) keeps only the re-scaling, by the root mean square, and only the gain:
#
# $$\mathrm{RMSNorm}(x) = \gamma \odot \frac{x}{\sqrt{\tfrac1d \sum_i x_i^2 + \epsilon}} .$$
#
# The two agree exactly when the mean $\mu$ is zero (then $\sigma^2$ is the mean square) *and* layer norm's
# shift $\beta$ is zero, with the same gain $\gamma$. $\epsilon$ sits *inside* the root, as in layer norm.
#
# ### Build it

# %%
def rms_norm_from_scratch(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean_square = (x ** 2).mean(dim=-1, keepdim=True)  # (..., 1): no mean subtracted
    return x / torch.sqrt(mean_square + eps) * weight  # eps inside the root


# %% [markdown]
# ### Check it
#
# Against `torch.nn.RMSNorm` (PyTorch ≥ 2.4) and the course's `tfm_lesson.modern.RMSNorm`, with a random
# gain, on activations of a typical size and on tiny ones (where $\epsilon$'s place shows):

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
reference = nn.RMSNorm(64, eps=1e-5)
with torch.no_grad():
    reference.weight.uniform_(0.5, 1.5)
ours = RMSNorm(64, eps=1e-5)
ours.load_state_dict(reference.state_dict())  # the same parameter name: weight
for scale in (3.0, 1e-3):
    x = torch.randn(4, 10, 64) * scale + scale  # a non-zero mean too
    print(f"scale {scale:g}: from scratch = torch.nn.RMSNorm: "
          f"{max_diff(rms_norm_from_scratch(x, reference.weight, 1e-5), reference(x)) <= 1e-5}, "
          f"tfm_lesson = torch.nn.RMSNorm: {max_diff(ours(x), reference(x)) <= 1e-5}")

# %% [markdown]
# ### Why dropping the mean is enough
#
# What a norm buys a deep network is that each sub-layer sees inputs of a **fixed size**, whatever size the
# residual stream has grown to. That comes from the division, and RMSNorm keeps it: multiply the input by
# any positive factor and the output does not move (unless the input is so small that $\epsilon$ counts; a
# negative factor flips the output's sign). The re-centring is a different property, invariance to adding the
# same number to every feature, and RMSNorm gives it up:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.randn(2, 5, 64)
layer_norm, rms = nn.LayerNorm(64), RMSNorm(64)
for name, norm in (("LayerNorm", layer_norm), ("RMSNorm", rms)):
    scaled = max_diff(norm(100 * x), norm(x)) < 1e-4
    shifted = max_diff(norm(x + 3), norm(x)) < 1e-4
    print(f"{name:9s}  unchanged when x is scaled by 100: {scaled}   unchanged when 3 is added to x: {shifted}")

# %% [markdown]
# Zhang & Sennrich found the re-scaling to be what matters: models trained with RMSNorm reach the quality of
# layer norm, and each norm costs one reduction over the features instead of two (the mean, then the
# variance around it). Nothing is lost for good either: the sub-layer that follows is linear, so it can learn
# to ignore the mean of its input if that helps. The mean does survive RMSNorm; it is only rescaled:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.randn(3, 64) + 2.0  # every position has a mean near 2
print("mean per position after LayerNorm:", [round(v, 3) + 0.0 for v in layer_norm(x).mean(-1).tolist()])
print("mean per position after RMSNorm:  ", [round(v, 1) for v in rms(x).mean(-1).tolist()])

# %% [markdown]
# ## 3. Rotary position embeddings (RoPE)
#
# ### Intuition: from chapter 04's rotation property
#
# Chapter 04 found that, for sinusoidal encodings, moving $k$ positions along is a *rotation*: each pair of
# features $(2i, 2i+1)$ is a point on a circle turning at its own speed $\theta_i = 10000^{-2i/d}$, and
# $PE_{pos+k} = M_k\, PE_{pos}$ with $M_k$ the same block-diagonal rotation at every position. The paper adds
# these vectors to the embeddings and leaves attention to find the relative positions among the cross-terms
# of $(x_m + PE_m) W^Q \cdot (x_n + PE_n) W^K$.
#
# Su et al. (2021) take the rotation itself and put it exactly where positions are needed: in the score.
# Rotate the query of position $m$ by $m\theta_i$ (in each of its pairs) and the key of position $n$ by
# $n\theta_i$, and let nothing else carry positions.
#
# ### The math
#
# In one pair, write $R(\alpha)$ for the $2\times2$ rotation by $\alpha$ and $\theta$ for that pair's speed.
# Rotations compose by adding angles, $R(\alpha)R(\beta) = R(\alpha + \beta)$, and the transpose of a rotation
# is the rotation back, $R(\alpha)^\top = R(-\alpha)$. So for a query pair $q$ at position $m$ and a key pair
# $k$ at position $n$:
#
# $$\big(R(m\theta)\,q\big)^\top \big(R(n\theta)\,k\big) = q^\top R(-m\theta)\,R(n\theta)\,k
#   = q^\top R\big((n - m)\theta\big)\,k .$$
#
# The score depends on the two vectors and on $n - m$, never on $m$ or $n$ alone. (The rest of the chapter writes
# the offset as $m - n$: $R((n - m)\theta)$ and $R((m - n)\theta)$ are transposes of each other, so either sign
# names the same dependence; what matters is to keep one.) A head with $d_k$ features
# has $d_k/2$ pairs, each with its own $\theta_i = b^{-2i/d_k}$; the base $b$ is 10,000 in the RoFormer paper
# and Llama 2, and models made for long contexts raise it (Llama 3 uses 500,000; configs call it
# `rope_theta`). A rotation keeps lengths, so RoPE changes no vector's norm, only the angles between them.
#
# ### Build it: slow, with explicit $2\times2$ rotations

# %%
def rope_slow(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x (seq_len, d_k): rotate pair (x[2i], x[2i+1]) at position m by the angle m * theta_i."""
    seq_len, d_k = x.shape
    out = torch.empty_like(x)
    for m in range(seq_len):
        for i in range(d_k // 2):
            angle = torch.tensor(m * base ** (-2 * i / d_k))
            rotation = torch.stack([torch.stack([angle.cos(), -angle.sin()]),
                                    torch.stack([angle.sin(), angle.cos()])])  # R(m theta_i), (2, 2)
            out[m, 2 * i: 2 * i + 2] = rotation @ x[m, 2 * i: 2 * i + 2]
    return out


# %% [markdown]
# ### See it: the score depends on $m - n$ only
#
# Take one query vector and one key vector and put them at many positions. The table shows the score
# $q_m \cdot k_n$: along each diagonal ($m - n$ fixed) it does not change; across diagonals it does.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
d_k = 8
q, k = torch.randn(d_k), torch.randn(d_k)
positions = 6
q_rot = rope_slow(q.expand(positions, d_k).clone())  # the same query at positions 0..5
k_rot = rope_slow(k.expand(positions, d_k).clone())
scores = q_rot @ k_rot.T  # (m, n)
print("q_m . k_n (rows m, columns n):")
print((scores * 100).round() / 100 + 0.0)
same_diagonal = all(torch.allclose(scores.diagonal(offset), scores.diagonal(offset)[0].expand(positions - abs(offset)),
                                   atol=1e-4) for offset in range(-positions + 1, positions))
print("constant along every diagonal m - n:", same_diagonal)
print("m - n = +2 and m - n = -2 differ:", abs(scores[2, 0] - scores[0, 2]).item() > 1e-3)
print("lengths kept:", torch.allclose(q_rot.norm(dim=-1), q.norm().expand(positions)))

# %% [markdown]
# ### Build it: vectorised, and the two conventions
#
# The loop pairs features $(x_{2i}, x_{2i+1})$: the **interleaved** convention of the RoFormer paper and of
# Meta's original Llama code. Hugging Face `transformers` (and GPT-NeoX, and most checkpoints on the Hub)
# pairs feature $i$ with feature $i + d_k/2$ instead, the **halves** convention, because it vectorises with
# one concatenation: `rotate_half(x) = cat(-x2, x1)` for the two halves $x_1, x_2$, and
#
# $$\mathrm{RoPE}(x) = x \odot \cos + \mathrm{rotate\_half}(x) \odot \sin ,$$
#
# with each angle $m\theta_i$ written at features $i$ and $i + d_k/2$ of the cos and sin tables. Pair
# $(a, b)$ becomes $(a\cos - b\sin,\; b\cos + a\sin)$, the same rotation as the loop. (You write this
# vectorised version yourself in exercise 2; below, the course's `RotaryEmbedding` runs it.) The two conventions
# rotate different pairs, so the same weights give different numbers under each; a model converted from one
# to the other must have the rows of its $W^Q$ and $W^K$ permuted (within each head), and then every score is
# unchanged. Permuting the rows of $W^Q$ permutes the features of every query it computes, so the cell below
# shows the same thing on one set of vectors: it permutes the features of `x` (as the permuted weights would),
# applies the halves convention, and gets the interleaved result, permuted the same way. Since a dot product
# does not change when both vectors are permuted alike, the scores are the same:

# %%
# NBVAL_CHECK_OUTPUT
x = torch.randn(10, 16)
halves, interleaved = RotaryEmbedding(16), RotaryEmbedding(16, interleaved=True)
print("slow loop = interleaved convention:", max_diff(rope_slow(x), interleaved(x)) < 1e-5)
print("interleaved = halves (same weights):", max_diff(interleaved(x), halves(x)) < 1e-5)
perm = interleaved_to_halves(16)
print("permutation", perm.tolist())
print("halves(x[perm]) = interleaved(x)[perm]:", max_diff(halves(x[:, perm]), interleaved(x)[:, perm]) < 1e-5)

# %% [markdown]
# ### Check it against `transformers`
#
# `transformers`' Llama computes cos and sin in `LlamaRotaryEmbedding` from `rope_theta` and the
# positions, and rotates with `apply_rotary_pos_emb`. Same queries and keys, a base of 10,000 and one of
# 500,000, and positions that start at 0 or at an offset, the position of the first token after a KV cache:

# %%
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

rope_diffs = {}
torch.manual_seed(0)
q, k = torch.randn(2, 4, 12, 16), torch.randn(2, 4, 12, 16)  # (batch, heads, seq_len, d_k)
for base in (10000.0, 500000.0):
    hf_rotary = LlamaRotaryEmbedding(LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=base))
    for offset in (0, 37):
        positions = torch.arange(offset, offset + 12)[None].expand(2, -1)
        q_hf, k_hf = apply_rotary_pos_emb(q, k, *hf_rotary(q, positions))
        ours = RotaryEmbedding(16, base=base)
        rope_diffs[base, offset] = max(max_diff(ours(q, offset), q_hf), max_diff(ours(k, offset), k_hf))
        print(f"rope_theta={base:>9,.0f}, offset {offset:2d}: largest difference {rope_diffs[base, offset]:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
print("every rotary comparison within 1e-5:", all(d <= 1e-5 for d in rope_diffs.values()))

# %% [markdown]
# ### The offset a cache needs
#
# With a KV cache, each step feeds only the new token. Its position is not 0: it is the number of positions
# already cached, `len(cache)`. The cached keys were rotated when they were computed and keep that rotation.
# The course's `GroupedQueryAttention` (next section) rotates the new queries and keys from `len(cache)`:
# one token at a time with the cache gives what the whole sequence gives at once.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
attention = GroupedQueryAttention(64, heads=4, kv_heads=4, rotary=RotaryEmbedding(16)).eval()
x = torch.randn(1, 8, 64)
with torch.no_grad():
    whole, _ = attention(x, x, x, torch.ones(8, 8, dtype=torch.bool).tril())
    cache = KVCache()
    steps = [attention(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache)[0] for t in range(8)]
print("token by token with the cache = all at once:", max_diff(torch.cat(steps, dim=1), whole) < 1e-5)
print("positions stored in the cache:", len(cache))

# %% [markdown]
# ## 4. SwiGLU
#
# ### The math
#
# The 2017 network is $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$. Shazeer (2020) tried *gated* linear
# units in its place: two projections of $x$, one of them through an activation, multiplied feature by
# feature. With the SiLU activation (chapter 06's Swish), $\mathrm{SiLU}(z) = z \cdot \mathrm{sigmoid}(z)$:
#
# $$\mathrm{FFN}_{\mathrm{SwiGLU}}(x) = \big(\mathrm{SiLU}(xW) \odot xV\big)\,W_2 .$$
#
# $xW$ is the **gate**, $xV$ the **value** (`transformers` calls $W, V, W_2$ `gate_proj`, `up_proj`,
# `down_proj`; the course `w_gate`, `w_up`, `w_down`). Three matrices where the FFN has two: to compare
# fairly, the hidden size shrinks to $\tfrac23 d_{ff}$, so that $3 \cdot d_{model} \cdot \tfrac23 d_{ff} =
# 2 \cdot d_{model} \cdot d_{ff}$. `swiglu_hidden(d_ff)` rounds $\tfrac23 d_{ff}$ to the nearest integer (and
# can round up to a multiple, `multiple_of`, as Llama's configs do; exercise 3 works out their rule).
#
# ### Build it

# %%
class SwiGLUFromScratch(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(d_model, hidden, bias=False)  # W
        self.w_up = nn.Linear(d_model, hidden, bias=False)  # V
        self.w_down = nn.Linear(hidden, d_model, bias=False)  # W_2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.w_gate(x)  # (batch, seq_len, hidden)
        return self.w_down(gate * torch.sigmoid(gate) * self.w_up(x))  # (batch, seq_len, d_model)


# %% [markdown]
# ### Check it: same parameters as the FFN, same numbers as Llama's MLP

# %%
# NBVAL_CHECK_OUTPUT
from transformers.models.llama.modeling_llama import LlamaMLP

for d_model, d_ff in ((512, 2048), (64, 384)):
    ffn = tfm_lesson.PositionwiseFeedForward(d_model, d_ff, bias=False)
    gated = SwiGLU(d_model, swiglu_hidden(d_ff))
    print(f"d_model={d_model}, d_ff={d_ff}: FFN {count(ffn):,} parameters; SwiGLU with hidden "
          f"{swiglu_hidden(d_ff)}: {count(gated):,}")

torch.manual_seed(0)
theirs = LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=256))
scratch = SwiGLUFromScratch(64, 256)
with torch.no_grad():
    scratch.w_gate.weight.copy_(theirs.gate_proj.weight)
    scratch.w_up.weight.copy_(theirs.up_proj.weight)
    scratch.w_down.weight.copy_(theirs.down_proj.weight)
x = torch.randn(2, 7, 64)
print("from scratch = transformers' LlamaMLP:", max_diff(scratch(x), theirs(x)) < 1e-5)

# %% [markdown]
# ## 5. Grouped-query attention
#
# ### Intuition
#
# Chapter 15's cache keeps, for every layer, the keys and values of every earlier token: $2 \times
# \text{layers} \times \text{heads} \times \text{length} \times d_k$ numbers per sequence. For a long
# sequence and a large batch it can outgrow the weights: for Llama-2-7B in 16-bit floats (32 layers, 32 heads,
# $d_k = 128$), one sequence of 4,096 tokens needs 2 GiB of cache ($2^{31}$ bytes, 2.1 GB), against about 13 GB
# of weights, so a batch of seven such sequences needs more memory for its cache than for the model (six need
# 12.9 GB, seven 15 GB). Grouped-query attention (Ainslie et al., 2023)
# keeps `heads` query heads but computes only `kv_heads` key/value heads; each one serves a **group** of
# `heads / kv_heads` consecutive query heads. `kv_heads = heads` is multi-head attention; `kv_heads = 1` is
# multi-query attention (Shazeer, 2019). The cache shrinks by `heads / kv_heads`.
#
# ### Build it: slow, one query head at a time
#
# Query head $h$ belongs to group $h \,//\, (\text{heads} / \text{kv\_heads})$ and uses that key/value head:

# %%
def gqa_slow(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q (batch, heads, q_len, d_k); k, v (batch, kv_heads, k_len, d_k); mask (q_len, k_len), True = may attend."""
    heads, kv_heads, d_k = q.size(1), k.size(1), q.size(-1)
    group = heads // kv_heads
    out = []
    for h in range(heads):
        kv = h // group  # the key/value head of this query head's group
        scores = q[:, h] @ k[:, kv].transpose(-2, -1) / math.sqrt(d_k)  # (batch, q_len, k_len)
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        out.append(weights @ v[:, kv])  # (batch, q_len, d_k)
    return torch.stack(out, dim=1)  # (batch, heads, q_len, d_k)


# %% [markdown]
# ### Check it against PyTorch
#
# Since version 2.5, `F.scaled_dot_product_attention` takes `enable_gqa=True` and lets 8 query heads share
# 2 key/value heads by itself. The order matters: query heads 0–3 share key/value head 0, heads 4–7 head 1.
# That is `k.repeat_interleave(4, dim=1)` (k0 k0 k0 k0 k1 k1 k1 k1), not `k.repeat(1, 4, 1, 1)` (k0 k1 k0 k1 …):

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
q, k, v = torch.randn(2, 8, 6, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
causal = torch.ones(6, 6, dtype=torch.bool).tril()
torch_gqa = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, enable_gqa=True)
print("slow loop = F.scaled_dot_product_attention(enable_gqa=True):", max_diff(gqa_slow(q, k, v, causal), torch_gqa) < 1e-5)
interleave = F.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), attn_mask=causal)
tiled = F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), attn_mask=causal)
print("repeat_interleave order matches:", max_diff(interleave, torch_gqa) < 1e-5)
print("repeat (tiled) order matches:   ", max_diff(tiled, torch_gqa) < 1e-5)

# %% [markdown]
# The course's module, `GroupedQueryAttention(d_model, heads, kv_heads, rotary=...)`, projects queries to
# `heads` heads and keys and values to `kv_heads` heads, rotates queries and keys when given a
# `RotaryEmbedding`, stores only the `kv_heads` heads in the cache, and repeats them (in the
# `repeat_interleave` order) just before the attention product.
#
# ### Measure it: the cache, on real tensors
#
# Four models that differ only in `kv_heads`: 8 query heads of $d_k = 16$, two layers. Each reads the same
# 200-token prompt into its cache; `KVCache.nbytes` counts the bytes the cache tensors really hold.

# %%
# NBVAL_CHECK_OUTPUT
prompt = torch.randint(0, 1000, (1, 200))
cache_bytes = {}
for kv_heads in (8, 4, 2, 1):
    torch.manual_seed(0)
    model = GPT(vocab_size=1000, max_len=256, d_model=128, heads=8, d_ff=swiglu_hidden(512), num_layers=2, norm="rms",
                positional="rope", activation="swiglu", kv_heads=kv_heads, bias=False).eval()
    caches = model.new_cache()
    with torch.no_grad():
        model(prompt, caches)
    cache_bytes[kv_heads] = sum(c.nbytes for c in caches)
    print(f"kv_heads={kv_heads}: cache {cache_bytes[kv_heads]:7,} bytes, keys per layer {tuple(caches[0].key.shape)}, "
          f"{cache_bytes[8] // cache_bytes[kv_heads]}x smaller than kv_heads=8; parameters {count(model):,}")

# %% [markdown]
# The saving is exactly `heads / kv_heads`, and the weights shrink too (a little: $W^K$ and $W^V$ are the
# only matrices that change). At the scale of a real model the cache is what counts. For the sizes of
# SmolLM2-135M (30 layers, 9 query heads, 3 key/value heads, $d_k = 64$) with a context of 8,192 tokens in
# bfloat16 (2 bytes per number):

# %%
# NBVAL_CHECK_OUTPUT
for kv_heads in (9, 3):
    nbytes = kv_cache_nbytes(batch=1, length=8192, num_layers=30, kv_heads=kv_heads, d_k=64, dtype=torch.bfloat16)
    mib = nbytes / 2 ** 20
    print(f"kv_heads={kv_heads}: {mib:,.0f} MiB per sequence")

# %% [markdown]
# ## 6. No biases
#
# Llama has no bias in any linear layer, and RMSNorm has no shift. Biases are a small share of the
# parameters. They are not useless, though, and the norms do not cancel them: a bias adds a different constant
# to each feature, layer norm removes only the mean of those constants across the features, and RMSNorm none
# of them (section 2 printed "unchanged when 3 is added to x: False" for RMSNorm). The reason to drop them
# is an empirical one: the PaLM authors report that removing them made the training of large models more
# stable. Counted:

# %%
# NBVAL_CHECK_OUTPUT
for bias in (True, False):
    model = GPT(vocab_size=1000, max_len=128, d_model=256, heads=8, d_ff=1024, num_layers=4, bias=bias)
    print(f"bias={bias!s:5s}: {count(model):,} parameters")

# %% [markdown]
# ## Today's block, assembled, and whole models checked equal
#
# The course's `GPT` builds each part through a small factory that reads the config: `norm="rms"` gives
# `RMSNorm`, `positional="rope"` a `RotaryEmbedding` inside the attention (and no position vectors added
# to the embeddings), `activation="swiglu"` the gated network with `d_ff` as its hidden size, `kv_heads` the
# grouped-query attention, `bias=False` no biases. That is all a Llama is. To prove it, build models with
# the library almost everyone uses, Hugging Face `transformers`, and convert them: `tfm_lesson.interop.from_hf`
# reads the Hugging Face config as `GPTConfig` options and copies every weight into the course's modules.
#
# The models are built from configs, with random weights: nothing is downloaded. A model that gives the
# same numbers as `transformers` for random weights gives them for trained weights too, since the weights
# are the only difference. The weights are drawn with a standard deviation of 0.2 instead of the usual 0.02,
# and the norm gains and biases at random too, so that the logits are of order 1 to 10 and a wrongly placed
# weight would show.
#
# **GPT-2**: pre-norm LayerNorm, learned positions, GELU with the tanh approximation, biases, tied
# embeddings. Its attention stores $W^Q, W^K, W^V$ side by side in one `Conv1D` (a linear layer whose weight
# is stored transposed), which `from_hf` splits and transposes.
#
# **Llama**: pre-norm RMSNorm, RoPE with `rope_theta`, SwiGLU with `intermediate_size` as its hidden size,
# grouped-query attention with `num_key_value_heads` key/value heads, no biases, tied or untied embeddings.
# Its names map one to one: `q_proj`, `k_proj`, `v_proj`, `o_proj` to `w_q`, `w_k`, `w_v`, `w_o`;
# `gate_proj`, `up_proj`, `down_proj` to `w_gate`, `w_up`, `w_down`; `input_layernorm` and
# `post_attention_layernorm` to `norm1` and `norm2`.
#
# Three configs of each, chosen to exercise every option: tied and untied embeddings, a hidden size that is
# not $4 d_{model}$, both GELUs, key/value heads from all of them down to one, and bases other than 10,000. The
# third Llama config also switches biases on (`attention_bias`, `mlp_bias`): Llama itself has none, but
# `transformers`' Llama code allows them, and `from_hf` must carry them over when they are there.

# %%
from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM

gpt2_configs = {
    "GPT-2, tied embeddings": dict(vocab_size=500, n_positions=64, n_embd=64, n_layer=2, n_head=4),
    "GPT-2, untied, d_ff=96": dict(vocab_size=300, n_positions=48, n_embd=48, n_layer=3, n_head=6, n_inner=96,
                                   tie_word_embeddings=False),
    "GPT-2, exact GELU, eps 1e-6": dict(vocab_size=200, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                        activation_function="gelu", layer_norm_epsilon=1e-6),
}
llama_configs = {
    "Llama, tied, kv_heads = heads": dict(vocab_size=500, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                          tie_word_embeddings=True),
    "Llama, untied, 6 heads / 2 kv, theta 5e5": dict(vocab_size=300, hidden_size=48, intermediate_size=128,
                                                     num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                                                     max_position_embeddings=64, rope_theta=500000.0),
    "Llama, 1 kv head, biases, theta 1e6": dict(vocab_size=200, hidden_size=32, intermediate_size=86,
                                                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                                                max_position_embeddings=48, rope_theta=1e6, attention_bias=True,
                                                mlp_bias=True),
}
ids = dict(bos_token_id=0, eos_token_id=None, pad_token_id=0, initializer_range=0.2)


def build_hf(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name in gpt2_configs:
        model = GPT2LMHeadModel(GPT2Config(**gpt2_configs[name], **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(**llama_configs[name], **ids))
    with torch.no_grad():  # norm gains start at 1 and biases at 0: draw them too, so a swapped norm would show
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return model.eval()


model_diffs = {}
for name in [*gpt2_configs, *llama_configs]:
    theirs = build_hf(name)
    ours = from_hf(theirs)
    tokens = torch.randint(0, theirs.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = theirs(tokens).logits, ours(tokens)
    model_diffs[name] = max_diff(got, expected)
    print(f"{name:42s} largest |logit| {expected.abs().max():5.2f}   largest difference {model_diffs[name]:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
print("all six models: the course's logits equal transformers' within 1e-4:", all(d <= 1e-4 for d in model_diffs.values()))

# %% [markdown]
# What `from_hf` read from the second Llama config (6 heads / 2 key-value heads, theta 5e5), and what it built:

# %%
# NBVAL_CHECK_OUTPUT
theirs = build_hf("Llama, untied, 6 heads / 2 kv, theta 5e5")
ours = from_hf(theirs)
print(ours.config)
print(ours.blocks[0].self_attn)
print(f"parameters: course {count(ours):,}, transformers {count(theirs):,}")

# %% [markdown]
# The same tokens out, too. Greedy generation with the cache (one token per step, the rotation offset by
# `len(cache)`) against `transformers`' own `generate`:

# %%
# NBVAL_CHECK_OUTPUT
prompt = torch.randint(0, 300, (2, 5), generator=torch.Generator().manual_seed(2))
with torch.no_grad():
    expected = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=15, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
print("same 15 new tokens as transformers (with the cache):",
      torch.equal(ours.generate(prompt, max_new_tokens=15, temperature=0.0, use_cache=True), expected))
print("same 15 new tokens as transformers (without it):   ",
      torch.equal(ours.generate(prompt, max_new_tokens=15, temperature=0.0, use_cache=False), expected))

# %% [markdown]
# ### Reading a real config
#
# A published model is a config plus weights. Here is the config of SmolLM2-135M, a small Llama, typed in
# from its published `config.json`. `hf_config` reads it as the course's options; both libraries then build the model on
# PyTorch's `meta` device, which records shapes without allocating memory, so that you can count the
# parameters of a model you have not downloaded:

# %%
# NBVAL_CHECK_OUTPUT
smol = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
                   rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
print(hf_config(smol))
with torch.device("meta"):
    ours_meta, theirs_meta = GPT(hf_config(smol)), LlamaForCausalLM(smol)
print(f"parameters: course {count(ours_meta):,}, transformers {count(theirs_meta):,}")

# %% [markdown]
# ### Optional: real pretrained weights (needs the network)
#
# Everything above used random weights. This cell is off unless you switch it on, since nothing else in the
# course downloads anything while it runs: change its first line to `RUN_PRETRAINED = True` (and, outside Colab,
# start Jupyter with `HF_HUB_OFFLINE=0`). Switched on, it downloads about 820 MB from the Hugging Face Hub, GPT-2
# (124M parameters, about 550 MB) and SmolLM2-135M (about 270 MB), converts each with `from_hf`, and lets the
# course's model continue a sentence. Switched off, or without a network, it prints one line and does nothing.

# %%
# NBVAL_CHECK_OUTPUT
RUN_PRETRAINED = False  # True downloads about 820 MB from the Hugging Face Hub
if not RUN_PRETRAINED:
    print("Skipped: the optional pretrained-weights cell is off (set RUN_PRETRAINED = True; it needs a network).")
else:
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        for repo in ("openai-community/gpt2", "HuggingFaceTB/SmolLM2-135M"):
            tokenizer = AutoTokenizer.from_pretrained(repo)
            pretrained = AutoModelForCausalLM.from_pretrained(repo).float().eval()
            learner_model = from_hf(pretrained).to(device)
            prompt = tokenizer("The Transformer is a neural network that", return_tensors="pt").input_ids.to(device)
            out = learner_model.generate(prompt, max_new_tokens=25, temperature=0.0)
            theirs_out = pretrained.generate(prompt.cpu(), max_new_tokens=25, do_sample=False,
                                             pad_token_id=tokenizer.eos_token_id)
            n = theirs_out.size(1)  # transformers stops early at an end-of-text token; compare what both wrote
            same = torch.equal(out[:, :n].cpu(), theirs_out)
            print(f"{repo}: {tokenizer.decode(out[0])!r} (same tokens as transformers: {same})")
    except Exception as exc:  # no network, a renamed model, not enough memory: say so in one line
        print(f"Skipped: could not load the pretrained weights ({type(exc).__name__}: {exc})"[:300])

# %% [markdown]
# ## Does it help? An ablation on chapter 14's language model
#
# An **ablation** changes one thing at a time and measures. Here: start from the 2017 block (post-norm,
# learned positions, ReLU, biases, multi-head attention) and add the changes one by one, in the order of
# this chapter, until you reach today's block. Every variant trains on chapter 14's corpus with the same
# budget: the same number of optimiser steps on the same batches, from the same seeds. (The same number of
# steps rather than the same seconds: on a shared CPU a time budget would mostly measure what else the
# machine was doing.) The score is the held-out loss, in nats per token, on validation text the model never
# trained on.
#
# One run proves nothing: two seeds of the *same* variant differ. So each variant trains with three seeds,
# and because the seeds are shared, the comparison that counts is the *paired* one: for each seed, the loss
# of a variant minus the loss of the variant before it. The tables give the mean of those differences and
# its 95% confidence interval (Student's t: with three seeds, 4.3 times the standard error, the spread of the
# differences divided by $\sqrt{3}$). A change is **inside the noise** when that interval contains 0: three
# seeds cannot tell whether it helps or hurts.
#
# The ablation trains its own smaller tokenizer (384 tokens, on 50,000 characters), so its losses do not
# compare with chapter 14's perplexity; they compare with each other.
#
# One departure from the paper: the 2017 block here uses *learned* position vectors, not sinusoids. Like
# GPT-2, the course's `GPT` does not multiply its embeddings by $\sqrt{d_{model}}$, so its token vectors start
# with a standard deviation of 0.02, and sinusoids of amplitude 1 added to them would drown the tokens at the
# start of training. The paper found learned positions as good as sinusoids (its table 3, row E). And like the
# course's Transformer of chapters 03–09 (and `nn.MultiheadAttention`), the 2017 block keeps biases in the
# attention projections, which the paper's equations do not have; "no biases" below removes those too.
#
# ### A tiny ablation, run here
#
# The first and the last variants only, three seeds each, 60 steps of a very small model ($d_{model} = 32$,
# a context of 64 tokens). Every run, here and in the full ablation below, is scored on the same held-out
# tokens (the first 20,000, read in windows of 64), and so is the **unigram baseline**: the loss of a model that
# ignores the context and predicts every token with its frequency in the training text.
# `unigram_baseline` computes it, the cross-entropy of those frequencies on exactly the tokens the models are
# scored on; the ablation runner stores the same figure with its table. The cell below prints it, then the
# table of the two variants. After 60 steps both have moved only a little below the baseline, and the seeds
# spread: the interval of the paired difference is wider than any in the full ablation below, which trains five
# times as many steps on batches twice as large. Whether three seeds separate the two blocks at this budget is
# what the table's last column says; at a budget this small the answer can change with the seeds. (On a GPU
# these small runs print slightly different losses, since its kernels round differently; the full ablation
# below was run on a CPU, as its settings line prints.)

# %% mystnb={"image": {"alt": "Ablation picture of two variants: left, the held-out loss of each seed with mean and standard deviation; right, the paired change of today's block with its wide 95% interval, which stays below zero."}}
from tfm_lesson.data.corpus import load_corpus
from tfm_lesson.train.lm import prepare_lm_data, train_lm

data = prepare_lm_data(load_corpus(), vocab_size=384, tokenizer_chars=50_000)
todays_block = {key: value for _, change in VARIANTS[1:] for key, value in change.items()}
tiny = run_ablation(data, seeds=(0, 1, 2), steps=60, batch_size=16, eval_tokens=20_000, log=None,
                    variants=[VARIANTS[0], ("today's block", todays_block)],
                    max_len=64, d_model=32, heads=4, d_ff=128, num_layers=2)
baseline = unigram_baseline(data, eval_tokens=20_000, max_len=64)
print(f"unigram baseline (a model that ignores the context): {baseline:.3f} nats per token")
print(format_summary(summarise(tiny)))
plot_ablation(tiny, title="the tiny ablation: 60 steps per run")

# %% [markdown]
# The cell above prints the unigram baseline, 4.638 nats per token: the score of a model that knows how
# frequent each token is and nothing else. A variant gets below it only by using the context.
#
# ### The full ablation, precomputed
#
# All seven variants, three seeds each, 300 steps of batches of 32 windows of 64 tokens, for chapter 14's
# model size (2 blocks, $d_{model} = 64$, 4 heads, $d_{ff} = 256$): 21 runs, too long for this page (they ran
# on one thread of a busy 2-core CPU; the average time per run and the warm-up are printed below). The results
# ship with the package as a small table;
# `python -m tfm_lesson.train.ablation --out my_table.json` reruns every run and writes a new table.

# %% mystnb={"image": {"alt": "Ablation picture of seven cumulative variants: left, held-out loss per seed with mean and standard deviation; right, the paired change from the row above with its 95% interval, clearly below zero for pre-norm and for RoPE, crossing zero for the others."}}
full = load_ablation()
settings = full["settings"]
seconds = sum(run["seconds"] for run in full["runs"])
print(f"{len(full['runs'])} runs: {settings['steps']} steps each, batch {settings['batch_size']}, peak learning rate "
      f"{settings['lr']:g}, seeds {settings['seeds']}; {settings['machine']}; {seconds / len(full['runs']):.0f} s "
      f"per run on average")
warmup_steps = round(inspect.signature(train_lm).parameters["warmup"].default * settings["steps"])
print(f"learning-rate warm-up: {warmup_steps} steps (train_lm's default, the same for every variant)")
print("the table's unigram baseline is the one printed above (the same held-out tokens):",
      math.isclose(settings["unigram_loss"], baseline, rel_tol=1e-9))
print(format_summary(summarise(full)))
plot_ablation(full)

# %% [markdown]
# Read the table from the top; each row adds one change to the row above it. In the right panel, an
# interval that crosses the dashed line at 0 is inside the noise.
#
# - **Pre-norm** is the largest step: −0.62 nats (95% interval ±0.06). Post-norm is known to need a long
#   learning-rate warm-up (Xiong et al., 2020); these runs warm up over the few steps the cell above prints,
#   the same for every variant, at one peak learning rate, and under those settings the post-norm block ends far
#   behind. The table tried no other learning rate and no longer warm-up, so it cannot say how much of the gap
#   a post-norm block would close with them: read −0.62 as the price of post-norm *under this schedule*.
# - **RoPE** is the second: −0.27 nats (±0.05), with fewer parameters, since the table of learned position
#   vectors goes. A plausible reason, which this ablation does not test: learned position vectors start random
#   and must each be trained, while rotations encode relative distance from the first step, which would count
#   most in a run this short. It too was measured at this one learning rate and warm-up.
# - **RMSNorm** (+0.013 ± 0.017), **SwiGLU** (+0.009 ± 0.019), **GQA** (+0.002 ± 0.036) and **no biases**
#   (+0.001 ± 0.029) are all **inside the noise**: three seeds cannot tell whether they help or hurt.
#
# Inside the noise does not mean useless. RMSNorm and bias-free layers were adopted for speed and stability
# at sizes this run cannot reach; GQA for the memory of the cache, which it halves here (measured exactly in
# section 5) at no loss this ablation can detect; SwiGLU's gains were measured on models thousands of times
# larger, trained far longer. What this scale and this schedule can say: pre-norm and rotary positions help a
# lot; the other four changes cost nothing measurable, and one of them halves the cache.

# %% [markdown]
# ## Play with it
#
# RoPE gives each pair of features its own speed $\theta_i = b^{-2i/d_k}$. The figure shows the score of a
# query with a key *equal to it* (both all ones) as the distance $m - n$ grows. The curve is the sum over all
# pairs; you do not see the pairs one by one, but they explain its shape: fast pairs oscillate, slow ones barely
# turn, and the sum tends to fall with distance. Raise the base (live, with the slider) and the slowest pairs
# turn slower still, so the score stays high over longer distances, which is why long-context models raise
# `rope_theta`. Outside a live notebook you see the default base, 10,000.

# %% mystnb={"image": {"alt": "Explorer picture: the RoPE score of two equal vectors against their distance for the chosen rope_theta and d_k, 1 at distance 0, dropping fast and then fluctuating at a lower level over 2,000 positions."}}
theta_slider = ipw.FloatLogSlider(value=10000, base=10, min=2, max=6.5, description="rope_theta",
                                  continuous_update=False, style={"description_width": "initial"})
d_k_slider = ipw.Dropdown(options=[16, 32, 64, 128], value=64, description="d_k")


def render_rope():
    d_k, base = d_k_slider.value, theta_slider.value
    rotated = RotaryEmbedding(d_k, base=base)(torch.ones(2048, d_k))  # the all-ones vector at positions 0..2047
    scores = (rotated @ rotated[0] / d_k).tolist()  # position m against position 0: distance m
    return viz.plot_lines({f"rope_theta={base:,.0f}": scores}, xlabel="distance m - n (positions)",
                          ylabel="q . k / d_k", title=f"score of two equal vectors by distance, d_k={d_k}")


widgets.Explorer("rope_explorer", {"theta": theta_slider, "d_k": d_k_slider}, render_rope)

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: RMSNorm that survives half precision
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Large models run in 16-bit floats. float16 keeps about three decimal digits and nothing above 65,504, and
# a few features of a trained model's residual stream can reach hundreds or thousands (the "massive
# activations" of Sun et al., 2024): squared, those above about 256 pass 65,504 and become `inf`. Section 2's
# `rms_norm_from_scratch` then divides by `sqrt(inf) = inf` and returns zeros.
# Try it first: run it on `torch.full((1, 4), 300.0, dtype=torch.float16)` with a float16 gain of ones.
#
# Write `rms_norm_half_safe(x, weight, eps)` for `x` of shape `(..., d_model)` in float16, bfloat16 or float32 and a
# gain `weight` `(d_model,)` of the same dtype: compute the mean of squares and the division in float32, cast the
# normalised result back to `x`'s dtype, then multiply by the gain (the order `transformers`' `LlamaRMSNorm`
# uses). The output has `x`'s dtype, since the next layer's weights are in that dtype. Write it yourself: the
# checker refuses `F.rms_norm`, `nn.RMSNorm` and the package's `rms_norm` (reusing your own
# `rms_norm_from_scratch` is fine). It tries float16 activations of about 1,000, bfloat16, float32, another eps
# and a 4-D input, and names: squares that overflow (statistics left in float16, or cast to float32 only after
# squaring), a result left in float32, a result cast to a fixed float16 instead of the input's dtype, and the
# classic RMSNorm slips (a subtracted mean, eps outside the root, a fixed eps, a forgotten gain).

# %%
def rms_norm_half_safe(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def rms_norm_half_safe(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x32 = x.float()  # before squaring: 300 ** 2 = 90,000 is above float16's largest number
    normalised = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., d_model), float32
    return weight * normalised.to(x.dtype)  # back to the input's dtype, then the gain


# %%
# NBVAL_CHECK_OUTPUT
check_rms_norm_half(rms_norm_half_safe)


# %% [markdown]
# ### Exercise 2: rotary embeddings, vectorised, with an offset
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~20 min
#
# Write `my_rope(x, offset, base)` for `x` of shape `(batch, heads, seq_len, d_k)`: rotate the vector at
# sequence index `t` by position `offset + t`, with $\theta_i = \text{base}^{-2i/d_k}$, in the **halves**
# convention of `transformers` (pair $i$ is features $i$ and $i + d_k/2$). No loops: build the angles as an
# outer product of positions and frequencies, then `x * cos + rotate_half(x) * sin`, where `cos` and `sin` have
# shape `(seq_len, d_k)` with angle $(\text{offset} + t)\,\theta_i$ written at both features $i$ and $i + d_k/2$,
# and `rotate_half(x)` is `torch.cat([-x2, x1], dim=-1)` for the halves `x1 = x[..., :d_k // 2]` and
# `x2 = x[..., d_k // 2:]` (define it yourself; it is not imported here). The checker tries
# offsets up to 40 and bases from 100 to $10^6$ and names: the interleaved convention, the two conventions
# mixed (halves pairs with an interleaved angle layout, or the reverse), a forgotten offset
# (every cached token would sit at position 0), a rotation the wrong way round, wrong frequencies, a base
# fixed at 10,000.

# %%
def my_rope(x: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_rope(x: torch.Tensor, offset: int, base: float) -> torch.Tensor:
    seq_len, d_k = x.size(-2), x.size(-1)
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float) / d_k)  # (d_k/2,)
    angles = torch.arange(offset, offset + seq_len, dtype=torch.float)[:, None] * theta  # (seq_len, d_k/2)
    angles = torch.cat([angles, angles], dim=-1)  # (seq_len, d_k): angle i at features i and i + d_k/2
    x1, x2 = x[..., : d_k // 2], x[..., d_k // 2:]
    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()


# %%
# NBVAL_CHECK_OUTPUT
check_rotary(my_rope)

# %% [markdown]
# ### Exercise 3: SwiGLU's hidden size, as Llama sizes it
# **Difficulty** 2/3 · **Importance** 2/3 · **Time** ~10 min
#
# Section 4 gave SwiGLU the parameters of the 2017 network by taking $\tfrac23$ of its $d_{ff}$. Published Llama
# configs do that and two things more, and their sizes look odd as a result: Llama 2 7B has $d_{model} = 4096$
# and `intermediate_size` 11,008. Work out the rule from these facts. The 2017 network's hidden size is
# $4 d_{model}$; Llama takes $\tfrac23$ of it, rounded down to an integer (its code uses `int()`); Llama 2 70B
# and Llama 3 8B and 70B then multiply by `ffn_dim_multiplier` (1.3; rounded down again); and the result is
# rounded to a multiple of `multiple_of` (256 in Llama 1 and in Llama 2 7B and 13B, 1,024 in Llama 3 8B, 4,096
# in the 70B models), the way that never makes the layer smaller than the budget.
#
# Write `llama_hidden(d_model, multiple_of, ffn_dim_multiplier=None)`, returning an `int`, without the package's
# `swiglu_hidden` (the checker refuses it). The checker compares your sizes with the published `intermediate_size`
# of six Llama models (Llama 1 65B: 22,016; Llama 2 7B: 11,008; 13B: 13,824; 70B: 28,672; Llama 3 8B: 14,336;
# 70B: 28,672) and six small configs, names the classic slips (no $\tfrac23$, $\tfrac23$ of $d_{model}$, $\tfrac32$
# instead of $\tfrac23$, rounding down or to the nearest multiple, no rounding, the multiplier ignored or applied
# after the rounding) and prints, for each model, SwiGLU's parameters against the 2017 network's. Before you run
# it, predict: is the 70B models' feed-forward network bigger or smaller than the 2017 budget, and by about how much?

# %%
def llama_hidden(d_model: int, multiple_of: int, ffn_dim_multiplier: float | None = None) -> int:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def llama_hidden(d_model: int, multiple_of: int, ffn_dim_multiplier: float | None = None) -> int:
    hidden = int(2 * (4 * d_model) / 3)  # three matrices of d_model x hidden = two of d_model x 4 d_model
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * -(-hidden // multiple_of)  # up to the next multiple: never below the budget


# %%
# NBVAL_CHECK_OUTPUT
check_llama_hidden(llama_hidden)

# %% [markdown]
# The answer to the prediction: without the multiplier the rounding adds a percent or so, while the models with
# `ffn_dim_multiplier` hold about a third more feed-forward parameters than the 2017 budget. The Llama 2 paper
# (appendix A.2.1) raised the feed-forward size of its grouped-query models to keep their total parameter count,
# since sharing key/value heads removes most of $W^K$ and $W^V$.


# %% [markdown]
# ### Exercise 4: grouped-query attention without a loop
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `my_gqa(q, k, v, mask)` with `q` of shape `(batch, heads, q_len, d_k)`, `k` and `v` of shape
# `(batch, kv_heads, k_len, d_k)` and a boolean `mask` `(q_len, k_len)` (True = may attend), returning
# `(batch, heads, q_len, d_k)` equal to `F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
# enable_gqa=True)`, without a loop over heads and without `enable_gqa` (write the attention yourself, as in
# chapter 01): **the checker refuses an answer with a Python loop (`for`, `while` or a comprehension), a call with
# `enable_gqa=`, or `F.scaled_dot_product_attention`, `GroupedQueryAttention` or `repeat_kv` of the package.**
# The checker names: key/value heads repeated in the wrong order, a missing or inverted mask,
# no scale or the scale of $d_{model}$, the softmax over the wrong axis.

# %%
def my_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    group = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (batch, heads, k_len, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, q_len, k_len)
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


# %%
# NBVAL_CHECK_OUTPUT
check_grouped_query_attention(my_gqa)

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("16")

# %% [markdown]
# ## Summary
#
# - **Pre-norm + a final norm**: $x + \mathrm{sublayer}(\mathrm{norm}(x))$ keeps a clean residual path; the
#   stream's scale drifts through the stack, and one norm after the last block rescales it to RMS ≈ 1.
# - **RMSNorm** $= \gamma \odot x / \sqrt{\mathrm{mean}(x^2) + \epsilon}$: layer norm's re-scaling without
#   the re-centring and without the shift; equal to `torch.nn.RMSNorm`.
# - **RoPE** rotates each query and key pair by position $\times\ \theta_i$; the score then depends on
#   $m - n$ only. Two conventions pair different features (halves in `transformers`, interleaved in the
#   RoFormer paper); with a cache, rotate new tokens from position `len(cache)`. `rope_theta` is the base.
# - **SwiGLU** $= (\mathrm{SiLU}(xW) \odot xV)W_2$ with hidden size $\tfrac23 d_{ff}$: the parameters of the
#   2017 network; SiLU goes on the gate.
# - **Grouped-query attention**: `kv_heads` key/value heads, each shared by `heads / kv_heads` consecutive
#   query heads (`repeat_interleave`, as `enable_gqa=True`); the KV cache shrinks by `heads / kv_heads`,
#   measured on the cache tensors themselves.
# - **No biases**, a small share of the parameters.
# - `from_hf` turns a `transformers` GPT-2 or Llama into the course's `GPT`: the same logits within
#   $10^{-4}$ and the same greedy tokens, so the model you built *is* the model the library runs.
# - An ablation at this scale separates few of these changes from the noise; measure with several seeds,
#   compare paired differences, and say so when a difference is inside the noise.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 16: Today's block: RMSNorm, RoPE, SwiGLU, grouped-query attention. Version
# > `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
