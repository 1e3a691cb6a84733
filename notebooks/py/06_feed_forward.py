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
# # 06 · The position-wise feed-forward network
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/06_feed_forward.ipynb)
#
# Attention moves information *between* positions: each output is a weighted average of value vectors
# from the whole sequence. But an average of values is still built from those values; attention alone
# does very little *computation* on what it gathers. The last sub-layer of every layer does that computation,
# on each position separately: a small two-layer network, the **position-wise feed-forward network** (FFN,
# paper section 3.3). In an encoder layer it is the second sub-layer (after self-attention), in a decoder
# layer the third (after self-attention and cross-attention, chapter 08). It is the simplest part of the
# Transformer, yet it holds about two thirds of an encoder layer's parameters and about half of a decoder
# layer's.
#
# **What you will learn**
#
# - the formula $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$ and its shapes, with the paper's
#   $d_{\text{model}} = 512 \to d_{ff} = 2048 \to 512$ expansion;
# - to build it one position at a time, then vectorised, and prove it equal to
#   `tfm_lesson.PositionwiseFeedForward` and to the FFN inside `torch.nn.TransformerEncoderLayer`;
# - what "position-wise" means, proven two ways: permuting positions permutes outputs, and the FFN *is*
#   a convolution with kernel size 1;
# - why the activation is essential (without it the two matrices collapse into one), and ReLU vs GELU;
# - the parameter budget of one encoder layer and one decoder layer: attention vs FFN vs norms;
# - the gated feed-forward layer (SwiGLU) that most current large models use instead.

# %%
import math

import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import DecoderLayer, EncoderLayer, PositionwiseFeedForward, viz, widgets
from tfm_lesson.checks import check_feed_forward, check_gelu, check_layer_budget

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## Intuition: the same small MLP (multi-layer perceptron) at every position
#
# After attention, the vector at each position holds what that token gathered from its context. The FFN
# takes each such vector, projects it *up* into a wider space of $d_{ff}$ hidden units, keeps the positive
# part of each (ReLU), and projects back *down* to $d_{\text{model}}$. Think of the hidden units as
# $d_{ff}$ detectors, each asking "does this vector point my way?", and of $W_2$ as writing, for each
# detector that fires, its own vector back into the stream. Probing trained models, Geva et al. (2021,
# "Transformer Feed-Forward Layers Are Key-Value Memories") found units behaving just like that: the columns
# of $W_1$ as keys that match input patterns, the rows of $W_2$ as the values written out.
#
# "Position-wise" means the **same** $W_1, b_1, W_2, b_2$ are used at every position, and no position
# looks at another: mixing across positions is attention's job, computing within one is the FFN's.
#
# ## The math
#
# For one position $x \in \mathbb{R}^{1 \times d_{\text{model}}}$ (a row vector, as in the paper):
#
# $$\mathrm{FFN}(x) = \max(0,\; x W_1 + b_1)\, W_2 + b_2,\qquad
# W_1 \in \mathbb{R}^{d_{\text{model}} \times d_{ff}},\; b_1 \in \mathbb{R}^{d_{ff}},\;
# W_2 \in \mathbb{R}^{d_{ff} \times d_{\text{model}}},\; b_2 \in \mathbb{R}^{d_{\text{model}}}$$
#
# Shapes for a batch: $x$ is $(\text{batch}, \text{seq\_len}, d_{\text{model}})$, the hidden layer
# $h = \max(0, xW_1 + b_1)$ is $(\text{batch}, \text{seq\_len}, d_{ff})$, the output is
# $(\text{batch}, \text{seq\_len}, d_{\text{model}})$ again (it must be: a residual connection adds it to
# $x$). The base model uses $d_{ff} = 4\,d_{\text{model}} = 2048$.
#
# One PyTorch detail: `nn.Linear(d_in, d_out)` stores its weight as $(d_{\text{out}}, d_{\text{in}})$ and
# computes $x W^\top + b$; so `w_1.weight` is $W_1^\top$, shaped $(d_{ff}, d_{\text{model}})$.
#
# ## Build it: one position at a time

# %%
d_model, d_ff = 8, 32  # the paper's 4x expansion, small enough to print
W1 = torch.randn(d_model, d_ff).to(device) / math.sqrt(d_model)  # (d_model, d_ff)
b1 = torch.randn(d_ff).to(device) * 0.1                           # (d_ff,)
W2 = torch.randn(d_ff, d_model).to(device) / math.sqrt(d_ff)     # (d_ff, d_model)
b2 = torch.randn(d_model).to(device) * 0.1                        # (d_model,)


def ffn_loop(x: torch.Tensor) -> torch.Tensor:
    """x (batch, seq_len, d_model): apply the same MLP to each position, one by one."""
    batch, seq_len, _ = x.shape
    out = torch.empty(batch, seq_len, d_model, device=x.device)
    for b in range(batch):
        for t in range(seq_len):
            hidden = torch.clamp(x[b, t] @ W1 + b1, min=0)  # (d_ff,): max(0, x W1 + b1)
            out[b, t] = hidden @ W2 + b2                    # (d_model,)
    return out


# %% [markdown]
# ## Build it: vectorised
#
# Matrix multiplication with a $(\dots, d_{\text{model}})$ tensor on the left already applies $W_1$ to
# every position at once: the leading $(\text{batch}, \text{seq\_len})$ axes ride along.

# %%
def ffn(x: torch.Tensor) -> torch.Tensor:
    hidden = torch.relu(x @ W1 + b1)  # (batch, seq_len, d_ff)
    return hidden @ W2 + b2           # (batch, seq_len, d_model)


# %% [markdown]
# ## Check it
#
# Against the loop; against `tfm_lesson.PositionwiseFeedForward` loaded with the same numbers (remember
# the transpose: `w_1.weight` is $W_1^\top$); and against the feed-forward block inside PyTorch's own
# `nn.TransformerEncoderLayer`, whose weights `tfm_lesson.from_torch` copies into an `EncoderLayer`.

# %%
# NBVAL_CHECK_OUTPUT
x = torch.randn(2, 5, d_model).to(device)  # (batch, seq_len, d_model)
module = PositionwiseFeedForward(d_model, d_ff).to(device).eval()
with torch.no_grad():
    module.w_1.weight.copy_(W1.T)  # (d_ff, d_model)
    module.w_1.bias.copy_(b1)
    module.w_2.weight.copy_(W2.T)  # (d_model, d_ff)
    module.w_2.bias.copy_(b2)
    print("shapes: x", tuple(x.shape), "-> hidden", tuple(torch.relu(x @ W1 + b1).shape), "-> out", tuple(ffn(x).shape))
    print("loop == vectorised:                  ", torch.allclose(ffn_loop(x), ffn(x), atol=1e-5))
    print("vectorised == PositionwiseFeedForward:", torch.allclose(module(x), ffn(x), atol=1e-5))

    theirs = nn.TransformerEncoderLayer(d_model, nhead=2, dim_feedforward=d_ff, dropout=0.0,
                                        batch_first=True).to(device).eval()
    ours = tfm_lesson.from_torch(theirs)  # an EncoderLayer with theirs' weights
    torch_ffn = theirs.linear2(theirs.dropout(theirs.activation(theirs.linear1(x))))  # PyTorch's FFN block
    print("tfm_lesson FFN == nn.TransformerEncoderLayer's FFN:",
          torch.allclose(ours.feed_forward(x), torch_ffn, atol=1e-5))

# %% [markdown]
# ### Position-wise, proven twice
#
# **Permutation.** Shuffle the positions of $x$; the FFN's output is the unshuffled output, shuffled the
# same way. (Attention has this property too, chapter 04; here it holds for a stronger reason: each output
# depends on its own position only. Change position 0 and only output 0 moves.)
#
# **A 1×1 convolution.** The paper says it: "another way of describing this is as two convolutions with
# kernel size 1". A `Conv1d` with kernel size 1 slides over the sequence and applies the same
# $d_{\text{in}} \to d_{\text{out}}$ matrix at each step, seeing one position at a time. It wants
# $(\text{batch}, \text{channels}, \text{length})$, so we transpose in and out. We compare in float64:
# on a GPU, PyTorch by default lets convolutions run in the faster TF32 format, which keeps only about three
# significant digits, and the check would then fail for a reason that has nothing to do with the FFN.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    perm = torch.tensor([3, 0, 4, 1, 2], device=device)
    print("FFN(x shuffled) == FFN(x) shuffled:", torch.allclose(module(x[:, perm]), module(x)[:, perm], atol=1e-6))
    x_changed = x.clone()
    x_changed[:, 0] += 1.0  # change position 0 only
    moved = (module(x_changed) - module(x)).abs().amax(dim=(0, 2)) > 0  # (seq_len,)
    print("outputs that moved when only position 0 changed:", moved.tolist())

    # in float64: on a GPU, PyTorch lets cuDNN run float32 convolutions in TF32 (about 3 significant digits),
    # which would blur a comparison that is exact in principle; TF32 never touches float64
    module64, x64 = PositionwiseFeedForward(d_model, d_ff).to(device).double().eval(), x.double()
    module64.load_state_dict(module.state_dict())
    conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1).to(device).double()
    conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1).to(device).double()
    conv1.weight.copy_(module64.w_1.weight.unsqueeze(-1))  # (d_ff, d_model, 1)
    conv1.bias.copy_(module64.w_1.bias)
    conv2.weight.copy_(module64.w_2.weight.unsqueeze(-1))  # (d_model, d_ff, 1)
    conv2.bias.copy_(module64.w_2.bias)
    by_conv = conv2(torch.relu(conv1(x64.transpose(1, 2)))).transpose(1, 2)  # (batch, seq_len, d_model)
    print("two 1x1 convolutions == FFN:", torch.allclose(by_conv, module64(x64), atol=1e-10))

# %% [markdown]
# ## Why the activation matters
#
# Remove the $\max(0, \cdot)$ and the FFN becomes $(xW_1 + b_1)W_2 + b_2 = x\,(W_1W_2) + (b_1W_2 + b_2)$:
# **one** linear map with a $d_{\text{model}} \times d_{\text{model}}$ matrix. The expansion to $d_{ff}$
# bought nothing: the product $W_1W_2$ is just another $d_{\text{model}} \times d_{\text{model}}$ matrix
# (rank at most $d_{\text{model}}$), and a stack of attention layers and linear maps would stay a much
# poorer function class than the one with a nonlinearity in between. Let us prove the collapse
# numerically: build the collapsed matrix and compare, and test linearity,
# $f(a + b) = f(a) + f(b) - f(0)$.

# %%
# NBVAL_CHECK_OUTPUT
def ffn_without_activation(x):
    return (x @ W1 + b1) @ W2 + b2  # (batch, seq_len, d_model)


W = W1 @ W2                     # (d_model, d_model): the two matrices, collapsed
b = b1 @ W2 + b2                # (d_model,)
a, c = torch.randn(2, 5, d_model).to(device), torch.randn(2, 5, d_model).to(device)
zero = torch.zeros_like(a)
print("collapsed matrix shape:", tuple(W.shape), " rank:", torch.linalg.matrix_rank(W).item(), "<= d_model =", d_model)
print("no activation == one linear map x W + b:", torch.allclose(ffn_without_activation(x), x @ W + b, atol=1e-5))
print("no activation is linear (affine):       ",
      torch.allclose(ffn_without_activation(a + c), ffn_without_activation(a) + ffn_without_activation(c)
                     - ffn_without_activation(zero), atol=1e-5))
print("with ReLU it is not:                     ",
      torch.allclose(ffn(a + c), ffn(a) + ffn(c) - ffn(zero), atol=1e-5))

# %% [markdown]
# ### ReLU vs GELU
#
# The paper uses ReLU, $\max(0, z)$: cheap, and exactly zero for negative inputs, so for each position
# roughly half of the hidden units are silent at initialisation (a sparse code). Later models (BERT, GPT-2
# and many encoder and GPT-style models since) use **GELU** (Hendrycks and Gimpel, 2016),
# $\mathrm{GELU}(z) = z\,\Phi(z)$, with $\Phi$ the standard normal CDF:
# $z$ weighted by the probability that a standard normal variable is below it. It is smooth, close to ReLU
# for large $|z|$, slightly negative for $z < 0$ (minimum $\approx -0.17$ at $z \approx -0.75$). Its slope,
# $\Phi(z) + z\,\varphi(z)$ ($\varphi$ the standard normal density), is positive right of that minimum, negative left of it, and zero at it; far to
# the left it fades towards zero. The cell below prints it in float32 on the CPU, for a tensor of several
# values: exactly 0 from $z = -6.5$ on. That zero is not float32 running out of range: the true slope at
# $z = -10$ is about $-7.6 \times 10^{-22}$, which float32 holds easily (it goes down to about $10^{-38}$). It
# comes from the way PyTorch's vectorised float32 CPU kernel computes the slope: part of the computation works
# with numbers near 1 ($\Phi(z) = \tfrac12\big(1 + \mathrm{erf}(z/\sqrt2)\big)$ is one), where float32's steps
# are about $10^{-7}$, so slopes far smaller than that are rounded away (at $z = -6$ what is left is one such
# step, halved). The kernel takes another path for a tensor of one element, and float64 has steps of about
# $10^{-16}$: the last two lines of the cell print the slope at $z = -10$ computed those two ways, tiny but not
# zero, and close to the true value without equalling it. So the exact zero you see depends on the kernel,
# not on the float format. ReLU's slope is 0 for *every* negative input, so a unit whose pre-activation is negative for all
# inputs gets no gradient at all (a "dead" unit); GELU still passes a small gradient over the moderately
# negative range, which makes dead units rarer, not impossible. `PositionwiseFeedForward(...,
# activation="gelu")` and `nn.TransformerEncoderLayer(..., activation="gelu")` both use the exact form. Some
# well-known models do not: GPT-2's code computes the tanh approximation
# $\tfrac12 z\,\big(1 + \tanh(\sqrt{2/\pi}\,(z + 0.044715 z^3))\big)$ (PyTorch's `F.gelu(z, approximate="tanh")`),
# close to the exact form but not equal to it, which the checkers below tell apart.

# %% mystnb={"image": {"alt": "Line chart of ReLU, GELU and GELU's slope from -4 to 4: GELU follows ReLU closely but is smooth at zero and dips slightly below zero for negative inputs."}}
z = torch.linspace(-4, 4, 161)
viz.plot_lines({"ReLU: max(0, z)": F.relu(z), "GELU: z Φ(z)": F.gelu(z),
                "GELU's slope dGELU/dz": torch.vmap(torch.func.grad(F.gelu))(z)},
               x=z, title="ReLU and GELU: GELU is a smooth ReLU that dips below zero",
               xlabel="z (hidden pre-activation)",
               ylabel="value")

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    pre = x @ W1 + b1  # (batch, seq_len, d_ff): the hidden layer before its activation
    print(f"hidden units exactly zero after ReLU: {(torch.relu(pre) == 0).float().mean().item():.0%}")
    print(f"hidden units exactly zero after GELU: {(F.gelu(pre) == 0).float().mean().item():.0%}")
    lowest = F.gelu(z).argmin()
    print("GELU minimum on [-4, 4]:", round(F.gelu(z)[lowest].item(), 2), "at z =", round(z[lowest].item(), 2))
probe = torch.tensor([-12.0, -10.0, -6.5, -6.0, -3.0, -0.8, -0.7, 1.0], requires_grad=True)  # float32
F.gelu(probe).sum().backward()
for where, slope in zip(probe.tolist(), probe.grad.tolist()):
    print(f"GELU slope at z = {where:6.1f}: {slope:+.2e}")
for label, dtype, values in [("float32, one-element tensor", torch.float32, [-10.0]),
                             ("float64", torch.float64, [-10.0, -6.0])]:
    single = torch.tensor(values, dtype=dtype, requires_grad=True)
    F.gelu(single).sum().backward()
    print(f"GELU slope at z =  -10.0 in {label}: {single.grad[0].item():+.2e}")

# %% [markdown]
# ### Gated feed-forward layers (SwiGLU)
#
# Most large language models of today (PaLM, LLaMA, Mistral and their descendants) no longer use this FFN
# as it stands but a **gated** one, SwiGLU (Shazeer, 2020, "GLU Variants Improve Transformer"):
#
# $$\mathrm{FFN}_{\mathrm{SwiGLU}}(x) = \big(\mathrm{Swish}(xW) \odot xV\big)\,W_2,\qquad
# \mathrm{Swish}(z) = z\,\mathrm{sigmoid}(z),$$
#
# where $\mathrm{sigmoid}(z) = 1/(1 + e^{-z})$ is the logistic function, `torch.sigmoid`. (Papers often write
# it $\sigma$; in this course $\sigma$ is a standard deviation, as in chapter 05.) Swish is also called SiLU
# (`F.silu`). $\odot$ multiplies elementwise: one projection $xV$ is *gated* by another, $\mathrm{Swish}(xW)$, so each hidden unit is a
# product of two learned views of the input. It has three matrices instead of two, so $d_{ff}$ is usually
# shrunk (to about $\tfrac{2}{3} \cdot 4d_{\text{model}}$) to keep the parameter count. It is still
# position-wise: everything said in this chapter about shapes and mixing still holds. Chapter 16 builds it and
# compares it with the paper's FFN.
#
# ## See it: the parameter budget of one encoder layer
#
# Count what one encoder layer of the base model ($d_{\text{model}} = 512$, $h = 8$, $d_{ff} = 2048$)
# holds:
#
# - self-attention: $W^Q, W^K, W^V, W^O$, each $d_{\text{model}} \times d_{\text{model}}$ whatever the
#   number of heads (each head has $d_k = d_{\text{model}}/h$), plus biases: $4d_{\text{model}}^2 +
#   4d_{\text{model}}$;
# - FFN: $W_1, W_2$ plus $b_1, b_2$: $2\,d_{\text{model}}d_{ff} + d_{ff} + d_{\text{model}}$;
# - two layer norms: $4\,d_{\text{model}}$.
#
# We count them on a real `EncoderLayer` and check the formulas.

# %%
# NBVAL_CHECK_OUTPUT
def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


base = EncoderLayer(512, 8, 2048)
budget = {"self-attention": count(base.self_attn), "feed-forward": count(base.feed_forward),
          "layer norms": count(base.norm1) + count(base.norm2)}
for name, n in budget.items():
    print(f"{name:15s} {n:>9,}  ({n / count(base):.1%})")
print(f"{'whole layer':15s} {count(base):>9,}")
print("formulas agree:", budget == {"self-attention": 4 * 512 ** 2 + 4 * 512,
                                    "feed-forward": 2 * 512 * 2048 + 2048 + 512, "layer norms": 4 * 512})
decoder_layer = DecoderLayer(512, 8, 2048)  # self-attention, cross-attention, feed-forward, three norms
ffn_in_decoder = count(decoder_layer.feed_forward) / count(decoder_layer)
print(f"one decoder layer: {count(decoder_layer):,} parameters, the feed-forward network {ffn_in_decoder:.1%} of them")

# %% mystnb={"image": {"alt": "Bar chart of the parameters of one base encoder layer: the feed-forward network's bar is about twice the attention bar, the layer norms are tiny."}}
viz.plot_bars(budget, title="One base encoder layer: the FFN holds two thirds of the parameters",
              ylabel="parameters")

# %% [markdown]
# The figure shows the split: about 2.1 M parameters in the FFN, 1.05 M in attention, 2 048 in the
# norms. With $d_{ff} = 4d_{\text{model}}$ the FFN has $8d_{\text{model}}^2$ weights against attention's
# $4d_{\text{model}}^2$: twice as many, at any width. The same ratio holds for the work done per token
# (one multiply–add per weight). Attention has one extra cost that no parameter shows: the scores
# $QK^\top$ and the weighted sum of values cost $2\,n\,d_{\text{model}}$ multiply–adds per token for a
# sequence of length $n$, so they overtake the FFN's $8d_{\text{model}}^2$ only when
# $n > 4d_{\text{model}}$ (2048 tokens for the base model). The norms
# are negligible in count, not in effect (chapter 05).
#
# A decoder layer (chapter 08) has a second attention, cross-attention, of the same size as the first, and
# a third norm: its FFN holds the same 2.1 M parameters, but that is only half of the layer's 4.2 M (the
# budget cell above the figure prints 49.9%).
#
# ## Play with it
#
# Change $d_{\text{model}}$, the expansion $d_{ff}/d_{\text{model}}$, the number of heads and the kind of
# layer, and watch the budget: the heads menu changes nothing (head count splits $d_{\text{model}}$, it does
# not add parameters), and the expansion ratio decides the FFN's share. Outside a live notebook you see the
# default, the base model's encoder layer.

# %% mystnb={"image": {"alt": "Explorer picture: bars of the parameter count of each part of one layer for the chosen d_model and d_ff, the feed-forward part the largest."}}
widgets.budget_explorer()


# %% [markdown]
# ## Exercises
#
# ### Exercise 1: your own feed-forward module
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `MyFeedForward(d_model, d_ff, dropout=0.0, activation="relu")`, an `nn.Module` with
# `w_1 = nn.Linear(d_model, d_ff)` and `w_2 = nn.Linear(d_ff, d_model)` (these names let the checker load
# weights into it), computing $w_2(\mathrm{dropout}(\mathrm{act}(w_1(x))))$ for $x$ of shape
# $(\text{batch}, \text{seq\_len}, d_{\text{model}})$, with `activation` either `"relu"` or `"gelu"`.
# Dropout must be off in eval mode. (Where dropout goes: the paper applies it to each sub-layer's output,
# before the residual addition, which `EncoderLayer` does; PyTorch's `nn.TransformerEncoderLayer` and
# `tfm_lesson` also drop hidden units inside the FFN, and that is the dropout of this module.) The checker
# names: a missing activation, an activation after the second
# linear, the wrong activation, GELU's tanh approximation, dropout in eval mode, and mixing positions.

# %%
class MyFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        ...  # your turn: self.w_1, self.w_2, the activation, the dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)   # W1: d_model -> d_ff
        self.w_2 = nn.Linear(d_ff, d_model)   # W2: d_ff -> d_model
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]
        self.dropout = nn.Dropout(dropout)    # a module: it follows .train() / .eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.activation(self.w_1(x))  # (batch, seq_len, d_ff)
        return self.w_2(self.dropout(hidden))  # (batch, seq_len, d_model)


# %%
# NBVAL_CHECK_OUTPUT
check_feed_forward(MyFeedForward)

# %% [markdown]
# ### Exercise 2: GELU from its definition
# **Difficulty** 1/3 · **Importance** 1/3 · **Time** ~5 min
#
# Write `my_gelu(z)` $= z\,\Phi(z)$ elementwise, with $\Phi(z) = \frac12\left(1 +
# \mathrm{erf}(z/\sqrt2)\right)$ the standard normal CDF (`torch.erf` exists), without calling `F.gelu`.
# It must keep the input's dtype. The checker recognises the tanh and sigmoid approximations, a missing
# $\sqrt2$, a missing $\frac12$, and $\Phi$ alone.

# %%
def my_gelu(z: torch.Tensor) -> torch.Tensor:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_gelu(z: torch.Tensor) -> torch.Tensor:
    return z * 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))


# %%
# NBVAL_CHECK_OUTPUT
check_gelu(my_gelu)

# %% [markdown]
# ### Exercise 3: the budget with pen and paper
# **Difficulty** 2/3 · **Importance** 2/3 · **Time** ~10 min
#
# Write `layer_budget(d_model, heads, d_ff)` returning `{"attention": ..., "feed_forward": ...,
# "norms": ...}`, the parameter counts (weights and biases) of one encoder layer's self-attention,
# feed-forward network and its two layer norms, from the formulas, without building a module. The checker
# tries the base model and random sizes, and recognises forgotten biases, a forgotten $W^O$, counts that
# grow with the number of heads, and one layer norm instead of two.

# %%
def layer_budget(d_model: int, heads: int, d_ff: int) -> dict:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def layer_budget(d_model: int, heads: int, d_ff: int) -> dict:
    return {"attention": 4 * d_model * d_model + 4 * d_model,       # W^Q, W^K, W^V, W^O and their biases
            "feed_forward": 2 * d_model * d_ff + d_ff + d_model,    # W_1, W_2, b_1, b_2
            "norms": 2 * 2 * d_model}                              # two norms, gain and shift each


# %%
# NBVAL_CHECK_OUTPUT
check_layer_budget(layer_budget)

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("06")

# %% [markdown]
# ## Summary
#
# - $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$: $(\text{batch}, \text{seq\_len}, d_{\text{model}})
#   \to (\dots, d_{ff}) \to (\dots, d_{\text{model}})$, with $d_{ff} = 4d_{\text{model}}$ in the paper.
#   Proven equal to `tfm_lesson.PositionwiseFeedForward` and to the FFN inside
#   `nn.TransformerEncoderLayer`.
# - Position-wise: the same weights at every position, no mixing; permuting positions permutes outputs, and
#   it is exactly two 1×1 convolutions.
# - The activation is what makes it more than one $d_{\text{model}} \times d_{\text{model}}$ linear map;
#   ReLU (the paper) or GELU (BERT, GPT-2 and many models since; smooth, $z\,\Phi(z)$).
# - In a base encoder layer the FFN holds 2.1 M of 3.15 M parameters (two thirds), attention 1.05 M, the
#   norms 2 048; in a decoder layer, with its extra cross-attention, the same FFN is about half of 4.2 M.
# - Most current large models use a gated variant, SwiGLU, still position-wise (chapter 16).
#
# Next, chapter 07 stacks attention and the FFN, each wrapped as in chapter 05, into the encoder.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 06: The position-wise feed-forward network. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
