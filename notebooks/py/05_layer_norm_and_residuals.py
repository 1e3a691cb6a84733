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
# # 05 · Layer norm and residual connections
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/05_layer_norm_and_residuals.ipynb)
#
# Attention (chapters 01–03) and a small feed-forward network (chapter 06) are the *sub-layers* of the
# Transformer. What turns a pile of sub-layers into something you can stack six (or sixty) deep and still
# train is the glue around each of them: a **residual connection** (He et al., 2016, introduced them for deep
# image networks) and a **layer normalisation** (Ba, Kiros and Hinton, 2016), the two works the paper cites
# for them. The paper spends one sentence on it (section 3.1):
#
# > the output of each sub-layer is $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$.
#
# **What you will learn**
#
# - what layer norm computes, exactly: mean and *biased* variance over the features of each position,
#   $\epsilon$ *inside* the square root, then a learned gain and shift;
# - to build it with loops, then vectorised, and prove it equal to `tfm_lesson.LayerNorm` and
#   `torch.nn.LayerNorm`;
# - what the two classic slips (unbiased variance, $\epsilon$ outside the root) cost, in numbers;
# - why residual connections let signals and gradients cross a deep stack;
# - **post-norm** (the paper) versus **pre-norm** (most code since): what each computes, and a residual block
#   with dropout that does either;
# - in an optional part at the end: what the two placements do to the activations and gradients of a
#   24-layer stack, and to one optimiser step.

# %%
import math

import torch
from torch import nn

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import LayerNorm, MultiHeadAttention, layer_norm, viz
from tfm_lesson.checks import check_layer_norm, check_sublayer_connection, check_sublayer_stack

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## Intuition: keep every position's vector on the same scale
#
# Each layer adds something to the vector of every position. Nothing in attention or in a linear map keeps
# the size of that vector in check: stack a few layers and the numbers drift (larger, or smaller), the next
# layer's softmax saturates or flattens, and the gradients follow. Layer norm is a thermostat applied to
# **each position on its own**: take that position's $d_{\text{model}}$ numbers, shift them to mean 0 and
# scale them to variance 1. Then give the model a learned knob per feature (a gain $\gamma$ and a shift
# $\beta$) so that normalising never removes anything the model needs: it can undo the normalisation if that
# is best.
#
# Why over the *features* and not over the batch (batch norm)? Because a position's statistics then depend
# on nothing else: not on the other sentences in the batch, not on padding, not on the batch size, and
# the same computation runs in training and at inference, one token at a time.

# %% [markdown]
# ## The math
#
# For one position, $x \in \mathbb{R}^{d_{\text{model}}}$ (a row of the $(\text{batch}, \text{seq\_len},
# d_{\text{model}})$ tensor):
#
# $$\mu = \frac{1}{d_{\text{model}}}\sum_{i=1}^{d_{\text{model}}} x_i, \qquad
# \sigma^2 = \frac{1}{d_{\text{model}}}\sum_{i=1}^{d_{\text{model}}} (x_i - \mu)^2, \qquad
# \mathrm{LayerNorm}(x)_i = \gamma_i\,\frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta_i$$
#
# Three details decide whether your numbers equal PyTorch's:
#
# 1. $\sigma^2$ divides by $d_{\text{model}}$ (the **biased**, population variance), not by
#    $d_{\text{model}} - 1$. We are not estimating the variance of a larger population; we rescale exactly
#    these numbers so that *their* variance is 1. (`torch.var` and `torch.std` are unbiased by default: a
#    trap.)
# 2. $\epsilon$ ($10^{-5}$) sits **inside** the square root. It keeps the division finite when a row is
#    constant ($\sigma^2 = 0$).
# 3. $\gamma, \beta \in \mathbb{R}^{d_{\text{model}}}$ are learned, start at $\gamma = 1$, $\beta = 0$,
#    and are shared by all positions: $2\,d_{\text{model}}$ parameters per layer norm.

# %% [markdown]
# ## Build it: the slow, obvious version
#
# Three nested loops over batch, position and feature, exactly the formula.

# %%
def layer_norm_loops(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """x (batch, seq_len, d_model) -> same shape, one position at a time."""
    batch, seq_len, d_model = x.shape
    out = torch.empty_like(x)
    for b in range(batch):
        for t in range(seq_len):
            row = x[b, t]  # (d_model,): the features of one position
            mu = sum(row[i] for i in range(d_model)) / d_model
            var = sum((row[i] - mu) ** 2 for i in range(d_model)) / d_model  # biased: / d_model
            for i in range(d_model):
                out[b, t, i] = gamma[i] * (row[i] - mu) / math.sqrt(var + eps) + beta[i]
    return out


# %% [markdown]
# ## Build it: vectorised
#
# The loops over batch and position disappear if we reduce over the last axis only and keep it
# (`keepdim=True`), so that the $(\text{batch}, \text{seq\_len}, 1)$ statistics broadcast back against
# $(\text{batch}, \text{seq\_len}, d_{\text{model}})$; $\gamma$ and $\beta$, shaped $(d_{\text{model}},)$,
# broadcast over every position.

# %%
def layer_norm_vectorised(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mu = x.mean(dim=-1, keepdim=True)                               # (batch, seq_len, 1)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)                # (batch, seq_len, 1), biased
    x_hat = (x - mu) / torch.sqrt(var + eps)                        # (batch, seq_len, d_model)
    return gamma * x_hat + beta                                     # (d_model,) broadcast over positions


# %% [markdown]
# ## Check it
#
# Against the loops, against `tfm_lesson.LayerNorm` (its `explicit=True` path is the formula above step by
# step; the default path calls PyTorch's fused kernel) and against `torch.nn.LayerNorm`. We give all of
# them the same non-trivial $\gamma$ and $\beta$, so that a forgotten gain or shift would show.

# %%
# NBVAL_CHECK_OUTPUT
batch, seq_len, d_model = 2, 3, 8
x = (torch.randn(batch, seq_len, d_model) * 3 + 1).to(device)  # (2, 3, 8)
gamma = (torch.rand(d_model) + 0.5).to(device)                  # (8,)
beta = torch.randn(d_model).to(device)                          # (8,)

ours_fused = LayerNorm(d_model).to(device)
ours_explicit = LayerNorm(d_model, explicit=True).to(device)
theirs = nn.LayerNorm(d_model).to(device)
for m in (ours_fused, ours_explicit, theirs):
    with torch.no_grad():
        m.weight.copy_(gamma)
        m.bias.copy_(beta)

y = layer_norm_vectorised(x, gamma, beta)
print("output shape:", tuple(y.shape))
slow = layer_norm_loops(x.cpu(), gamma.cpu(), beta.cpu())  # the loops run on the CPU
print("loops == vectorised:          ", torch.allclose(slow, y.cpu(), atol=1e-5))
print("== tfm_lesson.LayerNorm fused:", torch.allclose(ours_fused(x), y, atol=1e-5))
print("== tfm_lesson explicit path:  ", torch.allclose(ours_explicit(x), y, atol=1e-5))
print("== torch.nn.LayerNorm:        ", torch.allclose(theirs(x), y, atol=1e-5))
print("parameters per layer norm:", sum(p.numel() for p in theirs.parameters()), "= 2 x d_model")

# %% [markdown]
# And what normalising did: every position now has mean $\approx 0$ and (biased) standard deviation
# $\approx 1$ *before* the gain and shift, whatever its scale was before.

# %%
# NBVAL_CHECK_OUTPUT
x_hat = layer_norm_vectorised(x, torch.ones(d_model, device=device), torch.zeros(d_model, device=device))
print("per-position std before:", [f"{v:.1f}" for v in x.std(-1, unbiased=False).flatten().tolist()])
print("per-position mean after:", x_hat.mean(-1).abs().max().item() < 1e-6)
print("per-position std after: ", [f"{v:.3f}" for v in x_hat.std(-1, unbiased=False).flatten().tolist()])

# %% [markdown]
# The same with many more numbers, as a picture: 512 positions of 64 features, drawn with mean 1 and standard
# deviation 3, before and after normalising each position (no gain, no shift). Each histogram counts every
# feature value of every position; the curve over it is a smoothed version of the same counts.

# %% mystnb={"image": {"alt": "Two histograms with smoothed curves: the values before normalising spread widely around 1, while after normalising each position they form a narrow bell centred on 0 with spread 1."}}
wide = torch.randn(512, 64, generator=torch.Generator().manual_seed(0)) * 3 + 1  # (positions, d_model)
wide_hat = layer_norm_vectorised(wide, torch.ones(64), torch.zeros(64))          # (positions, d_model)
viz.plot_distributions({"before: mean 1, std 3": wide, "after normalising each position": wide_hat}, kde=True,
                       title="Every feature value of 512 positions, before and after layer norm",
                       xlabel="value of one feature")

# %% [markdown]
# ### What the two classic slips cost
#
# **Unbiased variance.** Dividing by $d_{\text{model}} - 1$ makes $\sigma$ too large by
# $\sqrt{d_{\text{model}}/(d_{\text{model}}-1)}$, so every output is shrunk by the inverse factor. For
# $d_{\text{model}} = 512$ that is $0.1\%$: small, but far above float32 round-off, so your model will not
# match a checkpoint trained with `nn.LayerNorm`. For a small $d_{\text{model}}$ it is large.
#
# **$\epsilon$ outside the root.** $\frac{x-\mu}{\sqrt{\sigma^2}+\epsilon}$ instead of
# $\frac{x-\mu}{\sqrt{\sigma^2+\epsilon}}$: for a typical $\sigma \approx 1$ the two differ by about
# $\epsilon/2 = 5\cdot10^{-6}$, invisible. But when a position's variance is small (comparable to
# $\epsilon$, e.g. a near-constant vector), the two formulas disagree completely. We measure the largest
# relative error of each slip as the input's standard deviation shrinks.

# %%
def unbiased(x, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps)


def eps_outside(x, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps)


scales = [1.0, 1e-1, 1e-2, 3e-3, 1e-3]
slips = [("unbiased variance, d_model=512", 512, unbiased), ("unbiased variance, d_model=8", 8, unbiased),
         ("eps outside the sqrt, d_model=512", 512, eps_outside)]
errors = {name: [] for name, _, _ in slips}
for s in scales:
    for name, d, wrong in slips:
        z = (torch.randn(64, d, dtype=torch.float64) * s).to(device)  # std s, drawn on the CPU
        right = layer_norm(z, None, None, 1e-5)
        errors[name].append(((wrong(z) - right).abs().max() / right.abs().max()).item())
for name, errs in errors.items():
    print(f"{name:34s}", [f"{e:.0e}" for e in errs])

# %% mystnb={"image": {"alt": "Line chart of the log relative error of three layer-norm slips as the input's standard deviation shrinks from 1 to 0.001: epsilon outside the square root goes from negligible to the largest error, while the unbiased variance stays level until the variance nears epsilon and then falls, higher for d_model = 8 than for 512."}}
viz.plot_lines({k: [math.log10(max(e, 1e-12)) for e in v] for k, v in errors.items()},
               x=[-math.log10(s) for s in scales], title="Relative error of each slip as the input's variance shrinks",
               xlabel="-log10(std of the input): 0 is std 1, 3 is std 0.001",
               ylabel="log10(max relative error)")

# %% [markdown]
# Read the figure from the left (std 1, ordinary activations) to the right (tiny variance). The unbiased
# variance costs a **constant** relative error, $1 - \sqrt{(d-1)/d}$: $10^{-3}$ for $d_{\text{model}}=512$,
# $6\%$ for $d_{\text{model}}=8$, whatever the scale, until the variance gets as small as $\epsilon$ (then
# $\epsilon$ dominates the denominator of both versions and the difference fades). $\epsilon$ outside the
# root costs almost nothing at std 1 (about $\epsilon/2$, as computed above) but grows as the variance approaches $\epsilon$: at std $10^{-3}$ ($\sigma^2 = 10^{-6}$,
# ten times smaller than $\epsilon$) the output is wrong by a factor of about 3. Tests with ordinary random
# inputs never catch this bug; the chapter's checker feeds a tiny-variance input on purpose.

# %% [markdown]
# ## Residual connections
#
# A residual connection adds the sub-layer's input back to its output: $x + \mathrm{Sublayer}(x)$, shapes
# $(\text{batch}, \text{seq\_len}, d_{\text{model}})$ on both sides (which is why every sub-layer of the
# Transformer maps $d_{\text{model}} \to d_{\text{model}}$, and why the paper fixes $d_{\text{model}} = 512$
# everywhere). Two reasons it matters:
#
# - **Forward:** a freshly initialised sub-layer is nearly noise. With the residual, a layer starts close to
#   the identity plus a perturbation, so a deep stack still passes the embeddings (and the positions added
#   to them in chapter 04) through to the top.
# - **Backward:** the derivative of $x + f(x)$ is $I + \partial f/\partial x$. The $I$ is a path on which the
#   gradient reaches every layer without being multiplied by any weight matrix.
#
# Here is the difference in a toy stack of 24 random linear maps with a tanh, with and without the
# residual: how much of the input is left at the top, and how large the gradient with respect to the input is.

# %%
torch.manual_seed(0)
toy = [nn.Linear(32, 32).to(device) for _ in range(24)]
for residual in (False, True):
    h0 = torch.randn(8, 32).to(device).requires_grad_()  # (batch, d_model), drawn on the CPU
    h = h0
    for lin in toy:
        h = h + torch.tanh(lin(h)) if residual else torch.tanh(lin(h))
    h.sum().backward()
    print(f"residual={residual!s:5}  output std {h.std().item():.2g}  input-gradient norm {h0.grad.norm().item():.2g}")

# %% [markdown]
# Without the residual the signal and the gradient die out (each tanh-linear map shrinks them: the cell
# prints an input gradient several orders of magnitude below 1); with it they survive 24 layers, and even grow
# (compare the two printed lines: a larger output std and a far larger gradient norm). The price: the residual
# stream $x$ now *accumulates* every sub-layer's output, and nothing stops it from growing. That is where the norm comes in, and where its placement matters.

# %% [markdown]
# ## Post-norm and pre-norm
#
# Two ways to combine a residual and a norm around a sub-layer $F$ (attention or feed-forward), with
# $x$ shaped $(\text{batch}, \text{seq\_len}, d_{\text{model}})$ throughout:
#
# $$\text{post-norm (the paper, section 3.1):}\quad x_{l+1} = \mathrm{LayerNorm}(x_l + F(x_l))$$
# $$\text{pre-norm (tensor2tensor's default by 2018; GPT-2 and most models since):}\quad
# x_{l+1} = x_l + F(\mathrm{LayerNorm}(x_l))$$
#
# Post-norm normalises the *sum*: the stream is reset to unit scale after every sub-layer, and the identity
# path of the residual passes through a layer norm each time. Pre-norm normalises only what goes *into* the
# sub-layer: the stream $x_l$ itself is never normalised, the identity path is clean from the top of the
# stack to the bottom, and a **final layer norm** after the last block of a pre-norm stack rescales the
# output (a post-norm stack needs none: its last block already ends with a norm).
#
# The paper also applies **dropout** (section 5.4) "to the output of each sub-layer, before it is added to the
# sub-layer input and normalized": $\mathrm{LayerNorm}(x + \mathrm{Dropout}(F(x)))$ in post-norm,
# $x + \mathrm{Dropout}(F(\mathrm{LayerNorm}(x)))$ in pre-norm. Dropout (Srivastava et al., 2014) sets a random
# fraction $p$ of the numbers to 0 during training. PyTorch's `nn.Dropout` also scales the kept ones by $1/(1-p)$
# during training, so that in evaluation mode it can simply do nothing (Srivastava et al. scaled the weights
# at test time instead; the two agree in expectation).
#
# A historical knot worth knowing: the paper's text and figure 1 say post-norm. Well-known code does otherwise:
# by 2018 the authors' own `tensor2tensor` library defaulted to normalising *first* (its base Transformer's
# hyperparameters normalise each sub-layer's input and only add after it); Wang et al. (2019) and Xiong et al.
# (2020) later studied why pre-norm trains deep stacks more easily. The
# Annotated Transformer quotes $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$ in its prose, then puts the norm
# first in its code "for code simplicity". Both placements make legitimate
# Transformers; they are not the same function. `tfm_lesson` makes the choice an option, `norm_first`, with
# the paper's post-norm as default.
#
# Here is each, written out, around the multi-head self-attention of chapter 03 as the sub-layer. Post-norm's
# output is normalised at every position; pre-norm's output is the raw stream $x$ plus the sub-layer's
# contribution, never normalised.

# %%
def post_norm(x, sublayer, norm):
    return norm(x + sublayer(x))            # LayerNorm(x + Sublayer(x))


def pre_norm(x, sublayer, norm):
    return x + sublayer(norm(x))            # x + Sublayer(LayerNorm(x))


x = (torch.randn(2, 5, 32) * 3 + 1).to(device)   # (batch, seq_len, d_model): a stream far from unit scale
attention = MultiHeadAttention(32, 4).to(device).eval()
attend = lambda t: attention(t, t, t)[0]       # self-attention as the sub-layer: (batch, seq_len, d_model)
norm = LayerNorm(32).to(device)
with torch.no_grad():
    post, pre = post_norm(x, attend, norm), pre_norm(x, attend, norm)

# %%
# NBVAL_CHECK_OUTPUT
unit = lambda t: bool((t.mean(-1).abs() < 1e-4).all() and ((t.std(-1, unbiased=False) - 1).abs() < 1e-3).all())
print("post-norm output: mean 0 and std 1 at every position:", unit(post))
print("pre-norm output:  mean 0 and std 1 at every position:", unit(pre))
print("pre-norm output - x == attention(norm(x)), the raw stream passes through:",
      torch.allclose(pre - x, attend(norm(x)), atol=1e-5))

# %% [markdown]
# ## Exercises

# %% [markdown]
# ### Exercise 1: your own `LayerNorm`
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `MyLayerNorm(d_model, eps=1e-5)`, an `nn.Module` with parameters `weight` ($\gamma$, ones) and
# `bias` ($\beta$, zeros) of shape $(d_{\text{model}},)$, whose `forward` maps $(\dots, d_{\text{model}})$
# to the same shape. Do not call `F.layer_norm` or `nn.LayerNorm`. The checker feeds tiny variances, small
# $d_{\text{model}}$, float64 and 2-D to 4-D inputs, and names the mistake it recognises.

# %%
class MyLayerNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        ...  # your turn: self.eps, self.weight, self.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyLayerNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))   # gamma
        self.bias = nn.Parameter(torch.zeros(d_model))    # beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(dim=-1, keepdim=True)                          # (..., 1)
        var = x.var(dim=-1, keepdim=True, unbiased=False)          # (..., 1), biased
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


# %%
# NBVAL_CHECK_OUTPUT
check_layer_norm(MyLayerNorm)

# %% [markdown]
# ### Exercise 2: a residual block, both placements
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `SublayerConnection(d_model, norm_first=False, dropout=0.1)`, an `nn.Module` with a layer norm named
# `norm` (over `d_model` features: `nn.LayerNorm`, `tfm_lesson.LayerNorm` or your `MyLayerNorm`) and an
# `nn.Dropout(dropout)`, whose `forward(x, sublayer)` wraps one sub-layer as the paper does:
#
# - `norm_first=False` (post-norm): `norm(x + dropout(sublayer(x)))`;
# - `norm_first=True` (pre-norm): `x + dropout(sublayer(norm(x)))`.
#
# `x` is `(batch, seq_len, d_model)` and `sublayer` maps that shape to itself; call it once. The checker runs
# your block in training mode (with the same dropout mask as its reference) and in evaluation mode, and names
# the classic slips: the norm in the wrong place, dropout after the residual, a missing residual.

# %%
class SublayerConnection(nn.Module):
    def __init__(self, d_model: int, norm_first: bool = False, dropout: float = 0.1) -> None:
        super().__init__()
        ...  # your turn: self.norm, self.dropout, self.norm_first

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class SublayerConnection(nn.Module):
    def __init__(self, d_model: int, norm_first: bool = False, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)  # switches itself off in eval mode

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))  # pre-norm: the raw x stays on the residual path
        return self.norm(x + self.dropout(sublayer(x)))  # post-norm: normalise the sum


# %%
# NBVAL_CHECK_OUTPUT
check_sublayer_connection(SublayerConnection)

# %% [markdown]
# ### Exercise 3: a stack of blocks, and its final norm
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~10 min
#
# Write `run_blocks(x, sublayers, connections, final_norm)`: apply `connections[i](x, sublayers[i])` for each
# block in order, and end with `final_norm(x)` when the stack is pre-norm (`connections[0].norm_first` is
# True), and only then. The checker builds pre-norm and post-norm stacks of 2 to 4 blocks, and names a final
# norm that is missing or extra.

# %%
def run_blocks(x, sublayers, connections, final_norm):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def run_blocks(x, sublayers, connections, final_norm):
    for sublayer, connection in zip(sublayers, connections):
        x = connection(x, sublayer)  # (batch, seq_len, d_model) all the way up
    return final_norm(x) if connections[0].norm_first else x  # pre-norm's stream was never normalised


# %%
# NBVAL_CHECK_OUTPUT
check_sublayer_stack(run_blocks)

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("05")

# %% [markdown]
# ## Summary
#
# - $\mathrm{LayerNorm}(x) = \gamma \odot (x - \mu)/\sqrt{\sigma^2 + \epsilon} + \beta$ over the **last**
#   axis of $(\text{batch}, \text{seq\_len}, d_{\text{model}})$, with the **biased** variance and $\epsilon$
#   **inside** the root; $2\,d_{\text{model}}$ parameters. Proven equal to `tfm_lesson.LayerNorm` (both
#   paths) and `nn.LayerNorm`.
# - The unbiased variance costs a constant $1-\sqrt{(d-1)/d}$ relative error; $\epsilon$ outside the root
#   costs nothing until the variance nears $\epsilon$, and then everything.
# - Residual connections keep signal and gradient alive through depth (24 tanh layers: dead without, alive
#   with).
# - Post-norm (the paper), $\mathrm{LayerNorm}(x + \mathrm{Dropout}(F(x)))$, resets the stream's scale after
#   every sub-layer. Pre-norm, $x + \mathrm{Dropout}(F(\mathrm{LayerNorm}(x)))$, normalises only the sub-layer's
#   input, keeps a clean identity path, and needs a final norm at the top of the stack. Dropout goes on the
#   sub-layer's output, before the residual sum. `tfm_lesson` chooses with `norm_first`; the default is the
#   paper's.
# - The optional part below measures what the placement does in a 24-layer stack: post-norm's gradients are
#   larger and more uneven, and one optimiser step moves a deep post-norm stack's output more, which is why
#   it is trained with a learning-rate warm-up (the learning rate starts tiny and ramps up; chapter 10).
#
# Next, chapter 06: the other sub-layer, the position-wise feed-forward network.

# %% [markdown]
# ## Going deeper (optional): deep stacks, gradients and one optimiser step
#
# Everything above is what you need for the next chapters. This part measures what the placement of the norm
# does to a deep stack. It uses two things the course builds later: the **encoder layer** of chapter 07 (a
# self-attention sub-layer and a feed-forward sub-layer, each wrapped in a residual block as above; `tfm_lesson`
# already has it) and **Adam**, the optimiser the paper trains with (chapter 10). You can come back here after
# chapter 10.
#
# ### See it: post-norm vs pre-norm, measured
#
# Claims about the two placements are easy to make; let us measure. `tfm_lesson.look.depth.encoder_stack` builds a
# stack of **24** encoder layers ($d_{\text{model}} = 32$, 4 heads, feed-forward width $d_{ff} = 64$, dropout
# off) from a fixed seed; we build one post-norm, one pre-norm (with its final norm), feed the same unit-variance input
# $(4, 16, d_{\text{model}})$, put a fixed random linear read-out on top as a stand-in loss, and record per
# layer $l$ (`tfm_lesson.look.depth.depth_statistics`):
#
# - the standard deviation of layer $l$'s output (the residual stream);
# - the norm of the gradient of the loss with respect to layer $l$'s parameters;
# - the norm of the gradient with respect to layer $l$'s output, relative to the top layer's: how the
#   learning signal changes on its way down.

# %%
from tfm_lesson.look.depth import depth_explorer, depth_statistics, encoder_stack

layers = 24
x = torch.randn(4, 16, 32, generator=torch.Generator().manual_seed(0)).to(device)  # (batch, seq_len, d_model)
stats = {name: depth_statistics(encoder_stack(layers, norm_first).to(device), x)
         for name, norm_first in (("post-norm (paper)", False), ("pre-norm", True))}
depth_axis = list(range(1, layers + 1))

# %% mystnb={"image": {"alt": "Line chart of the output's standard deviation by layer at initialisation: the pre-norm curve rises with depth while the post-norm curve stays flat at 1."}}
viz.plot_lines({k: s["activation_std"] for k, s in stats.items()}, x=depth_axis,
               title="Residual stream scale by depth at initialisation: pre-norm grows, post-norm is reset",
               xlabel="layer l", ylabel="std of layer l's output")

# %% mystnb={"image": {"alt": "Line chart of the gradient that reaches each layer's output relative to the top layer: in pre-norm it grows steadily towards the bottom layers, in post-norm it stays between about 0.8 and 1."}}
viz.plot_lines({k: s["input_gradient_norm"] for k, s in stats.items()}, x=depth_axis,
               title="Gradient reaching layer l's output, relative to the top layer",
               xlabel="layer l (1 = bottom)", ylabel="||dL/dx_l|| / ||dL/dx_L||")

# %% mystnb={"image": {"alt": "Line chart of the gradient norm of each layer's parameters at initialisation: post-norm's are larger and uneven, peaking in the middle layers, pre-norm's smaller and nearly level, both lowest at the top."}}
viz.plot_lines({k: s["gradient_norm"] for k, s in stats.items()}, x=depth_axis,
               title="Gradient norm of each layer's parameters at initialisation",
               xlabel="layer l (1 = bottom)", ylabel="||dL/dθ_l||")

# %% [markdown]
# The numbers behind the figures (rounded):

# %%
for name, s in stats.items():
    a, g, p = s["activation_std"], s["input_gradient_norm"], s["gradient_norm"]
    print(f"{name:18s} stream std  layer 1 {a[0]:.1f} -> layer {layers} {a[-1]:.1f}")
    print(f"{'':18s} grad to stream min {min(g):.1f}, max {max(g):.1f}")
    print(f"{'':18s} param grads from {min(p):.2f} to {max(p):.2f}: spread (max/min) {max(p) / min(p):.1f}")
ratio = [p / q for p, q in zip(stats["post-norm (paper)"]["gradient_norm"], stats["pre-norm"]["gradient_norm"])]
print(f"post-norm / pre-norm parameter gradients, layer by layer: from {min(ratio):.1f} to {max(ratio):.1f}")

# %% [markdown]
# **What the figures show.**
#
# 1. *Scale.* In post-norm every layer ends with a layer norm, so every layer's output has std 1: the
#    stream is reset each time. In pre-norm the stream is the running sum of all sub-layer outputs and
#    grows steadily with depth (the cell above prints its std at the first and the last of the 24 layers). That growth is harmless
#    because every sub-layer reads a normalised copy, and the final norm rescales the output; but it means
#    each later layer changes the stream *relatively* less.
# 2. *The learning signal on the way down.* In pre-norm the gradient reaching a layer's output is the top's
#    carried down the clean identity path, plus one term for every branch above it
#    ($\partial x_L/\partial x_l = I + \dots$). Such terms could in principle cancel part of it ($I + J$ can
#    shrink a vector), but here they add up: the gradient grows toward the bottom (the cell prints its largest
#    value relative to the top's; the figure shows it at the bottom layer). In post-norm it must pass through
#    the Jacobian of a layer norm (the matrix of its partial derivatives) twice per layer, which projects out
#    the direction of the mean and rescales by $1/\sigma$; here it dips a little below the top's on the way
#    down (the printed minimum) and is back at about the top's at the bottom layer (the printed maximum), with
#    no growth like pre-norm's. Mild here, because our sub-layers start small compared with the stream, but
#    nothing in post-norm protects the path the way pre-norm's identity does.
# 3. *Parameter gradients.* Post-norm's are larger, at every layer (the last printed line gives the range of
#    the ratio), and more uneven across depth (compare the two printed spreads, max/min over the layers).
#    Pre-norm's are smaller and flatter: the final norm divides by the grown stream scale, and each layer's
#    branch is one of many added terms.
#
# ### One optimiser step
#
# Gradients at initialisation are half of the story; what an update *does* is the other half. Adam's very
# first step is $-\text{lr}\cdot g/(|g|+\epsilon)$, almost exactly $-\text{lr}\cdot\mathrm{sign}(g)$, for every parameter (its moment estimates are
# then $g$ and $g^2$), whatever the gradient's size; we check that claim against `torch.optim.Adam` once,
# then take that step ($\text{lr} = 10^{-3}$, no warm-up) on the same read-out loss, for stacks of 2 to 16
# layers, and measure
# how much the stack's output moved: $\lVert y_{\text{after}} - y_{\text{before}}\rVert /
# \lVert y_{\text{before}}\rVert$.

# %%
def run_stack(stack, h):
    for layer in stack.layers:
        h = layer(h)                                   # (batch, seq_len, d_model)
    return h if stack.norm is None else stack.norm(h)


def adam_first_step(stack, lr: float) -> None:
    """Adam's first update, lr * m / (sqrt(v) + eps) with m = g, v = g^2 (after bias correction):
    lr * g / (|g| + eps), which is lr * sign(g) wherever |g| >> eps = 1e-8."""
    params = list(stack.parameters())
    grads = torch.autograd.grad((run_stack(stack, x_step) * readout).mean(), params)  # a random read-out loss
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.sub_(lr * g / (g.abs() + 1e-8))


def output_change_after_one_step(num_layers: int, norm_first: bool, lr: float) -> float:
    stack = encoder_stack(num_layers, norm_first).to(device)
    with torch.no_grad():
        before = run_stack(stack, x_step)
    adam_first_step(stack, lr)
    with torch.no_grad():
        after = run_stack(stack, x_step)
    return ((after - before).norm() / before.norm()).item()


x_step = x[:2]                                                                  # (2, 16, d_model): half the batch
readout = torch.randn(x_step.shape, generator=torch.Generator().manual_seed(1)).to(device)  # (2, 16, d_model)

# %%
# NBVAL_CHECK_OUTPUT
# first, the claim about Adam, on a 2-layer stack: torch.optim.Adam's first step == our sign step
a, b = encoder_stack(2, False).to(device), encoder_stack(2, False).to(device)
opt = torch.optim.Adam(a.parameters(), lr=1e-3)
(run_stack(a, x_step) * readout).mean().backward()
opt.step()
adam_first_step(b, 1e-3)
print("torch.optim.Adam's first step == lr * g / (|g| + eps):",
      all(torch.allclose(p, q, atol=1e-7) for p, q in zip(a.parameters(), b.parameters())))

# %%
depths = [2, 4, 8, 16]
change = {name: [output_change_after_one_step(n, norm_first, 1e-3) for n in depths]
          for name, norm_first in (("post-norm (paper)", False), ("pre-norm", True))}

# %% mystnb={"image": {"alt": "Line chart of how much one Adam step changes the output for 2 to 16 layers: the change grows with depth for both placements, faster for post-norm than for pre-norm."}}
viz.plot_lines(change, x=depths, title="How far ONE Adam step (lr 1e-3, no warm-up) moves the output",
               xlabel="number of layers L", ylabel="relative change of the output")

# %%
for name, values in change.items():
    print(f"{name:18s}", "  ".join(f"L={n}: {v:.2f}" for n, v in zip(depths, values)))

# %% [markdown]
# With two layers the placements behave alike. With depth, one step moves the post-norm stack's output
# more and more: at 16 layers a single step of size $10^{-3}$ changes a large fraction of it, clearly more than
# for pre-norm (the printed values at L=16). An optimiser whose every step rewrites the function it is
# optimising is not following a gradient any more; that is the instability. With a warm-up, the first step is 4000
# times smaller, and for small steps the change shrinks in proportion (try
# `output_change_after_one_step(16, False, 1e-3 / 4000)`): the output barely moves while Adam's statistics
# settle.

# %% [markdown]
# **Why this means warm-up for post-norm.** Adam's step is about the learning rate per parameter
# whatever the gradient's size, so what decides stability is how much the *output* moves when every
# parameter moves by that much. In post-norm each layer's update changes a stream that is renormalised
# right after, so nothing dilutes it, and the changes compound through the depth (Liu et al. 2020,
# "Understanding the Difficulty of Training Transformers", call it the *amplification effect*): that is
# the one-step figure. A warm-up (the paper's $\text{lrate} = d_{\text{model}}^{-0.5} \cdot
# \min(\text{step}^{-0.5}, \text{step}\cdot\text{warmup}^{-1.5})$ with 4000 warm-up steps, built in
# chapter 10) keeps the first steps tiny while Adam's second-moment estimates, which start from a single
# noisy gradient, settle (the argument of Liu et al., 2020, *On the Variance of the Adaptive Learning Rate and
# Beyond*). In pre-norm each update is one more term added to a large, unnormalised stream;
# the output is less sensitive, gradients are smaller and more even, and deep pre-norm stacks train without
# warm-up (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture", who also show that
# post-norm's gradients near the output do not shrink with depth while pre-norm's do).
#
# The price of pre-norm: later layers' contributions shrink relative to the growing stream, and when post-norm does
# train (as the paper's 6-layer model does, with warm-up) it often ends slightly better (Liu et al., 2020,
# *Understanding the Difficulty of Training Transformers*, report this for translation; the evidence is mixed:
# Nguyen and Salazar, 2019, *Transformers without Tears*, found pre-norm better in low-resource translation). Hence the
# common practice: pre-norm for deep stacks and simple recipes, post-norm with warm-up when following the
# paper.

# %% [markdown]
# **Honest scale.** All of this was measured on small stacks ($d_{\text{model}} = 32$), at initialisation
# and after one step, in seconds on a CPU. The differences are moderate here (the ratios of parameter
# gradients and the one-step changes printed above) and grow with depth, as the figures show. Full training
# runs with and without warm-up belong to chapter 10.
#
# ### Play with it
#
# Drag the depth and switch the placement: the two panels are the activation-scale and parameter-gradient
# figures above, recomputed for a fresh stack. Try 2 layers (the streams' scales nearly agree; post-norm's
# parameter gradients are already somewhat larger) and 24 (the stream growth and the gradient gap widen). Outside a live notebook you see the starting picture: 8
# layers, both placements.

# %% mystnb={"image": {"alt": "Explorer picture for 8 layers: left, the output's standard deviation per layer, growing for pre-norm and fixed at 1 for post-norm; right, each layer's parameter gradient norm on a log scale, post-norm's above pre-norm's and both falling towards the top."}}
depth_explorer(max_layers=24, num_layers=8)

# %% [markdown]
# ### Exercise 4 (explore, no checker): how deep before it shows?
# **Difficulty** 2/3 · **Importance** 1/3 · **Time** ~15 min
#
# Use `depth_statistics(encoder_stack(L, norm_first), x)` for $L = 2, 6, 12, 24$ and both placements and
# plot, against $L$, the ratio of post-norm's to pre-norm's gradient norm at the top layer
# (`s['gradient_norm'][-1]`, the top layer's parameter-gradient norm). Then try
# $d_{\text{model}} = 64$ (`encoder_stack(L, norm_first, d_model=64, d_ff=128)`, with a matching `x`).
# Does the gap grow with depth? With width?

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 05: Layer norm and residual connections. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
