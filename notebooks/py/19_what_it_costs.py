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
# # 19 · What it costs, and what more buys
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/19_what_it_costs.ipynb)
#
# Before anyone trains a model, two questions come first: what will it cost, and what will a bigger one buy?
# The cost has three parts: the **parameters** (what the model holds), the **FLOPs** (the arithmetic each token
# needs, which sets the time) and the **memory** of a training step. All three follow from the model's shape by
# a few lines of arithmetic, and this chapter writes those lines and checks each against what PyTorch measures.
# The second question has an answer that is itself measured: a **scaling law**, a power law fitted to small
# runs that predicts a larger one. You will grow one on the CPU, make a prediction, and see whether it holds.
#
# **What you will learn**
# - to count the **parameters** of the 2017 Transformer and of chapter 14's GPT part by part, tied or not,
#   equal to `sum(p.numel())`;
# - the **FLOPs per token** of the forward pass and of a training step, the "6N" rule and the attention term
#   that grows with the length, checked against PyTorch's `FlopCounterMode`;
# - the **memory** of a training step: weights, gradients, Adam's two moments, and the activations kept for the
#   backward pass, as a function of batch and length, checked against what autograd keeps and the measured peak;
# - **MFU**, the fraction of a peak FLOP rate a training step achieves; here the peak is your machine's own
#   measured matrix-product rate, not a datasheet figure; and where the time goes;
# - the **recipe** language models train with: AdamW with parameter groups, warm-up and cosine decay, gradient
#   clipping, and gradient accumulation proven equal to the large batch;
# - **isoFLOP curves** (Hoffmann et al., 2022), the best model size for a budget, power laws with bootstrap
#   error bars, and a prediction checked by a run made after it.

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
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import tfm_lesson as T
from tfm_lesson import viz
from tfm_lesson.train import cost, scaling
from tfm_lesson.checks import check_flops_per_token, check_params, check_training_bytes
from tfm_lesson.data.corpus import load_corpus, random_windows
from tfm_lesson.gpt import GPT, GPTConfig
from tfm_lesson.train.lm import lm_loss, lm_rate, prepare_lm_data
from tfm_lesson.train.lm_recipe import accumulate_gradients, make_adamw, parameter_groups, recipe_step
from tfm_lesson.look.memory import peak_tensor_bytes
from tfm_lesson.model import Transformer, TransformerConfig
from tfm_lesson.train.recipes import LM_RECIPE, SCALING, recipe

T.seed_everything(0)
torch.set_num_threads(1)  # small models: one thread is faster and steadier (the course's thread rule)
print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")

# %% [markdown]
# ## Intuition
#
# A weight matrix of shape $(d_\text{in}, d_\text{out})$ is $d_\text{in} d_\text{out}$ numbers to store, and
# every token that passes through it costs one multiplication and one addition per number: **two FLOPs per
# weight per token**. So a model's parameters tell you most of its arithmetic, and its arithmetic tells you its
# time, once you know how fast your machine multiplies matrices. Training adds the backward pass, which for every
# product computes two products as large (one gradient for the input, one for the weight): three times the
# forward in all. Attention is the one place where the cost is not tied to a weight: each query meets every key
# of its window, so that part grows with the length.
#
# Memory during training holds four things: the weights, their gradients, the optimiser's state (Adam keeps two
# running averages per weight), and the **activations**, the intermediate results the forward pass keeps because
# the backward pass needs them. The first three depend on the model only; the activations grow with the batch and
# the length.
#
# What does a bigger model buy? Kaplan et al. (2020) found that a language model's loss falls as a power law of
# its size, its data and its compute, over many orders of magnitude. Hoffmann et al. (2022) asked the practical
# question: with a fixed compute budget, how large a model, trained on how many tokens? They trained many sizes at
# each of several budgets (**isoFLOP curves**: every model on one curve costs the same FLOPs), read off the best
# size of each budget, and fitted how it grows with the budget.
#
# ## The math
#
# **Parameters** of a GPT block with width $d$ (`d_model`), feed-forward width $d_\text{ff}$, biases and layer
# norms: attention's four projections $4(d^2 + d)$, the feed-forward network $2 d\, d_\text{ff} + d_\text{ff} + d$,
# two layer norms $2 \cdot 2d$. Around the $n_\text{layer}$ blocks: the token embedding $V d$, learned positions
# $n_\text{ctx} d$, a final norm $2d$, and a generator $V d$ only if it is not tied to the embedding.
# Without biases (`bias=False`, as in today's models) the linear layers lose their biases and every layer norm its
# shift, keeping only its gain ($d$ each); the generator never has a bias, tied or not.
#
# **FLOPs per token.** Let $N_\text{matmul}$ be the weights used in a product for each token: the blocks' weight
# matrices and the generator (the embedding is a look-up, not a product; a tied generator's product is still
# computed). With windows of $n_\text{ctx}$ tokens, the forward pass costs
#
# $$C_\text{forward} = 2 N_\text{matmul} + 4 n_\text{layer}\, n_\text{ctx}\, d
# \qquad\text{and a training step}\qquad C_\text{train} = 3\, C_\text{forward} \approx 6 N_\text{matmul}.$$
#
# This is the "6N" rule; in this chapter the $N$ of that rule is always $N_\text{matmul}$. The attention term
# counts $Q K^\top$ ($n_\text{ctx} d$ multiply-adds per query) and the weighted sum of the values (as many), over
# the whole $n_\text{ctx} \times n_\text{ctx}$ square, masked half included: that is what the "math" attention and
# an explicit mask compute (a causal flash kernel skips most of the masked tiles and does less). For training it
# gives $12\, n_\text{layer} n_\text{ctx} d$ per token, the term Chowdhery et al. (2022, appendix B) add to
# $6N$ for their MFU. Kaplan et al. write $C_\text{forward} \approx 2N_\text{ne} + 2 n_\text{layer} n_\text{ctx} d$
# with $N_\text{ne}$ the non-embedding parameters: their attention term, one row of their table 1 ("Attention:
# Mask"), is half of ours, as if it counted only one of the two products, or only the unmasked half of the square
# (the paper does not say which); and their $2N_\text{ne}$ leaves out the generator's product, which ours counts. Training on $D$ tokens costs
# $C \approx 6 N_\text{matmul} D$ plus the attention term.
#
# **Memory** of a float32 training step with Adam: $4 + 4 + 2 \cdot 4 = 16$ bytes per parameter (weight,
# gradient, two moments), plus the activations: for each token and layer, a few vectors of width $d$ and two of
# width $d_\text{ff}$, so activations grow like
# $\text{batch} \times n_\text{ctx} \times n_\text{layer}\,(m\,d + 2 d_\text{ff})$, with $m$ a small count of
# vectors. That holds with a fused attention kernel, as this chapter's GPT uses; the explicit path also keeps
# each layer's attention weights for the backward pass, another $\text{batch} \times h \times n_\text{ctx}^2$ per layer.
#
# **MFU**, model FLOPs utilisation (Chowdhery et al., 2022, appendix B): $\text{MFU} = \dfrac{C_\text{train}
# \times \text{tokens per step} / \text{seconds per step}}{\text{peak FLOP/s}}$. PaLM's peak is the hardware's
# theoretical one, the datasheet figure. This chapter divides by a rate it measures instead, the best rate of a
# large matrix product on the same machine: that rate is below the datasheet figure, so **MFU against the
# measured matmul peak** reads higher than PaLM's MFU would, and is not comparable with published MFUs.
#
# **Scaling laws.** Write $N_\text{all}$ for all of a model's parameters, embeddings included, as Hoffmann et al.
# count them. Their second approach fits, for each budget $C$, the loss against $\ln N_\text{all}$ with a
# parabola; its vertex is the best size $N_\text{opt}(C)$, and across budgets
#
# $$N_\text{opt}(C) = k_N\, C^{a},$$
#
# a straight line on log-log axes. They found $a \approx 0.5$: parameters and tokens should grow in equal
# proportion, about 20 tokens per parameter. Kaplan et al. had found $a \approx 0.73$, much more of the budget for
# the model; part of that gap comes from counting parameters without the embeddings, which matters most at small
# sizes (Pearce & Song, 2024). This chapter adds a second line through the loss at each vertex,
# $L(C) = k_L\, C^{-\alpha_C}$, close to Kaplan et al.'s law for the loss at the compute-efficient size (they
# found $\alpha_C \approx 0.05$); it is the line that makes a prediction of the loss.
#
# ## Build it: count
#
# `tfm_lesson.train.cost.parameter_breakdown` counts from the configuration alone. The paper's base model first
# (chapter 09 built it; a shared vocabulary of 37,000 tokens, tied generator):

# %%
# NBVAL_CHECK_OUTPUT
base = TransformerConfig()
for part, n in cost.parameter_breakdown(base).items():
    print(f"{part:>13}: {n:>11,}")
model = Transformer(base)
print("equal to sum(p.numel()):", cost.parameter_count(base) == sum(p.numel() for p in model.parameters()))
del model

# %% [markdown]
# Attention holds 72 matrices of $d \times d$ (four in each of the six encoder layers, eight in each of the six
# decoder layers, which attend twice), the twelve feed-forward networks hold more, and one shared matrix of
# 37,000 $\times$ 512 serves as source embedding, target embedding and generator. The paper's table 3 says 65 M
# for its base model; the count above is a little smaller, by more than rounding to millions explains. The paper
# does not show how it counted; a different vocabulary size is one possible cause of the gap.
#
# Now chapter 14's GPT (its recipe in `tfm_lesson.train.recipes`), tied as it trains, and untied:

# %%
# NBVAL_CHECK_OUTPUT
lm_config = GPTConfig(**recipe("lm")["model"])
for tie in (True, False):
    config = GPTConfig(**{**lm_config.to_dict(), "tie_embeddings": tie})
    parts = cost.parameter_breakdown(config)
    same = parts["total"] == sum(p.numel() for p in GPT(config).parameters())
    print(f"tie_embeddings={tie}: " + ", ".join(f"{k} {v:,}" for k, v in parts.items()) + f"; equal: {same}")
share = (cost.parameter_breakdown(lm_config)["embedding"] + cost.parameter_breakdown(lm_config)["positional"]) \
    / cost.parameter_count(lm_config)
print(f"embedding and positions: {share:.0%} of the tied model")

# %% [markdown]
# In a model this small, the embedding is a large part of everything (the cell prints the share). Kaplan et al.
# leave embeddings out of their count, $N_\text{ne}$, for exactly this reason: at their scale, the non-embedding
# count predicted the loss better. Keep this in mind for the scaling law below.
#
# ## Check it: FLOPs against PyTorch's counter
#
# `torch.utils.flop_counter.FlopCounterMode` watches every operator and adds up the FLOPs of the matrix products
# (`mm`, `addmm`, `bmm`, attention kernels it knows). On the CPU, PyTorch's fused attention kernel is not among
# those it knows, so we ask for the "math" attention, which is written with plain products:

# %%
# NBVAL_CHECK_OUTPUT
seq_len, batch = lm_config.max_len, 4
model = GPT(lm_config)
ids = torch.randint(0, lm_config.vocab_size, (5_000,))  # random token ids: counting needs no text
x, y = random_windows(ids, batch, seq_len, torch.Generator().manual_seed(0))
with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
    model(x)
forward = counter.get_total_flops()
with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
    lm_loss(model, x, y).backward()
step = counter.get_total_flops()
tokens = batch * seq_len
print(f"forward : counted {forward:,}, formula {tokens * cost.flops_per_token(lm_config, seq_len, training=False):,}")
print(f"training: counted {step:,}, formula {tokens * cost.flops_per_token(lm_config, seq_len):,}")
print(f"training / forward = {step / forward:.2f}")
print("by operator:", {str(k).replace("aten.", ""): f"{v:,}" for k, v in counter.get_flop_counts()["Global"].items()})

# %% [markdown]
# Equal, to the FLOP. The generator deserves a look: at every position it multiplies by the whole
# $(d, V)$ matrix. And the attention term's share grows with the window. The table below (per token, training)
# shows both for chapter 14's model at a few lengths (it was trained with the first one):

# %%
# NBVAL_CHECK_OUTPUT
n_matmul = cost.matmul_parameters(lm_config)
generator = lm_config.vocab_size * lm_config.d_model
print(f"N_matmul = {n_matmul:,}, of which the generator {generator:,} ({generator / n_matmul:.0%})")
print(f"{'length':>7} {'FLOPs/token':>12} {'6 N_matmul':>11} {'attention':>10}")
for n in (64, 256, 1024, 4096):
    total = cost.flops_per_token(lm_config, n)
    print(f"{n:>7} {total:>12,} {6 * n_matmul:>11,} {(total - 6 * n_matmul) / total:>10.0%}")

# %% [markdown]
# The attention term, $12 n_\text{layer}\, n_\text{ctx} d$ per token for training, overtakes $6 N_\text{matmul}$
# once the window is longer than $N_\text{matmul} / (2 n_\text{layer} d)$ tokens. For large models, where
# $N_\text{matmul}$ is in the billions, that
# takes windows of many thousands of tokens; for chapter 14's small model, a few hundred suffice.
#
# ## Check it: memory
#
# `cost.training_memory` adds the four parts. The activations are counted from what autograd keeps for the
# backward pass: per token and layer, each norm's input, output and two statistics, the packed queries, keys and
# values, the attention output, the feed-forward's hidden layer before and after its activation; then the final
# norm and the log-probabilities over the vocabulary (see `cost.activation_bytes`). You can watch autograd keep
# them: `torch.autograd.graph.saved_tensors_hooks` calls a function of yours on every tensor saved for the
# backward pass. Add up their storages, each once, the weights left out, and compare with the formula:

# %%
# NBVAL_CHECK_OUTPUT
batch = recipe("lm")["train"]["batch_size"]
model = GPT(lm_config)
x, y = random_windows(ids, batch, seq_len, torch.Generator().manual_seed(1))
x, y = x.clone(), y.clone()  # storages of their own: the windows are views into one longer tensor
weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
kept = {}  # storage address -> bytes: a tensor saved twice, or two views of one storage, count once


def pack(t):  # called on every tensor autograd saves for the backward pass
    storage = t.untyped_storage()
    if storage.data_ptr() not in weights:
        kept[storage.data_ptr()] = storage.nbytes()
    return t


with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    lm_loss(model, x, y)
print(f"autograd keeps {sum(kept.values()):,} bytes in {len(kept)} storages; "
      f"cost.activation_bytes: {cost.activation_bytes(lm_config, batch, seq_len):,}")

# %% [markdown]
# Here is the breakdown for chapter 14's training step, and the peak measured with chapter 18's tracer
# (`tfm_lesson.look.memory`): the weights and Adam's moments exist before the step, the step adds gradients and
# activations.

# %%
# NBVAL_IGNORE_OUTPUT
batch = recipe("lm")["train"]["batch_size"]
model = GPT(lm_config)
optimizer = make_adamw(model)
x, y = random_windows(ids, batch, seq_len, torch.Generator().manual_seed(1))


def training_step():
    optimizer.zero_grad(set_to_none=True)
    lm_loss(model, x, y).backward()
    optimizer.step()


training_step()  # Adam creates its two moments at the first step
persistent = sum(p.nbytes for p in model.parameters()) + sum(
    s.nbytes for state in optimizer.state.values() for s in state.values() if s.dim() > 0)
measured = persistent + peak_tensor_bytes(training_step)
formula = cost.training_memory(lm_config, batch, seq_len)
for part, n in formula.items():
    print(f"{part:>12}: {n / 2**20:7.2f} MiB")
print(f"measured: {measured / 2**20:.2f} MiB, {measured / formula['total']:.2f} x the formula")
logits = batch * seq_len * lm_config.vocab_size * 4  # bytes of one logit-sized tensor
print(f"the formula plus two logit-sized tensors: {(formula['total'] + 2 * logits) / measured:.2f} x the measured peak")

# %% [markdown]
# The formula is a sum of what lives through the step; the measured peak is the largest total at one moment,
# which also holds what only passes through. The largest of those here: when the backward pass starts, the
# gradients of the log-probabilities and of the logits, each as large as the logits, exist beside every
# activation. Add those two to the formula and it lands close to the measured peak (the last line). With a
# vocabulary of 512 and a model this narrow, the logits are a large part of everything; for a wide model the
# four-part sum is the better part of the story. Activations are what changes with batch and length:

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'batch':>6} {'length':>7} {'activations':>12} {'weights+grads+Adam':>19}")
fixed = formula["parameters"] + formula["gradients"] + formula["adam"]
for b, n in ((1, 64), (32, 64), (32, 256), (128, 256)):
    act = cost.activation_bytes(lm_config, b, n)  # the formula holds for any window; the model's is 64
    print(f"{b:>6} {n:>7} {act / 2**20:>9.2f} MiB {fixed / 2**20:>15.2f} MiB")
print(f"bytes per parameter for weights, gradients and Adam: {fixed // cost.parameter_count(lm_config)}")

# %% [markdown]
# One sequence of 64 tokens needs less than the model, its gradients and Adam together; the training batch
# itself, 32 windows of 64 tokens, already needs more than ten times as much (the second row against the last
# column), and longer windows far more. That is why large models are trained with **gradient accumulation**
# (below) and with **activation checkpointing** (keep fewer activations, recompute the rest in the backward
# pass, the same trade as FlashAttention's backward in chapter 18).
#
# ## Measure it: MFU on this machine
#
# Time a training step of chapter 14's model, and in the same cell the best rate of a $1024 \times 1024$ matrix
# product on the same device and thread count (`cost.matmul_peak(device, size=1024, dtype=dtype)`): in float32
# on a CPU; on a GPU the step runs under bf16 autocast and the peak is measured in bf16 too. (`tools/bench.py`
# records the same measurement with larger squares, in float32 only.) The ratio is the MFU against this measured
# matmul peak, not against a datasheet peak.

# %%
# NBVAL_IGNORE_OUTPUT
device = T.default_device()
amp = device.type == "cuda"
dtype = torch.bfloat16 if amp else torch.float32
model = GPT(lm_config).to(device)
optimizer = make_adamw(model)
x, y = x.to(device), y.to(device)


def timed_step():
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        loss = lm_loss(model, x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()


for _ in range(3):  # warm-up: first calls allocate and pick kernels
    timed_step()
times = []
for _ in range(10):
    start = time.perf_counter()
    timed_step()
    times.append(time.perf_counter() - start)
seconds = sorted(times)[len(times) // 2]  # the median step
peak = cost.matmul_peak(device, size=1024, dtype=dtype)
flops = cost.flops_per_token(lm_config, seq_len) * batch * seq_len
print(f"{device}, {torch.get_num_threads()} thread(s), {dtype}: a step of {batch} x {seq_len} tokens takes "
      f"{1e3 * seconds:.1f} ms")
print(f"achieved {flops / seconds / 1e9:.2f} GFLOP/s; measured matmul peak {peak / 1e9:.1f} GFLOP/s "
      f"(1024 x 1024, {dtype})")
print(f"MFU against the measured matmul peak: {cost.mfu(flops, seconds, peak):.1%} (not a datasheet peak)")

# %% [markdown]
# What keeps this MFU below 1: products too small to run at the peak rate (this model's are
# $(2048, 64) \times (64, 256)$ and the like, against the $1024 \times 1024$ squares of the peak), and the work a
# step does that is not a product at all. One CPU thread has few arithmetic units to keep busy, so even these
# products reach a fair share of its peak; a GPU has thousands, and small products leave most of them idle. Where
# does the time go? PyTorch's profiler lists the operators by their own time:

# %%
# NBVAL_IGNORE_OUTPUT
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    timed_step()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=40))

# %% [markdown]
# Read the table's first rows: the products (`mm`, `addmm`), the attention kernel and its backward, the attention
# module's guards for fully masked rows (`where`, and a `sum`: see `tfm_lesson.attention`), the GELU's backward,
# copies (e.g. `copy_`), the log-softmax of the cross-entropy over the vocabulary, AdamW's update (the
# exact rows vary from run to run). Everything that is not a product counts as time but not as model FLOPs.
# Large models on GPUs and TPUs, whose products are large enough that arithmetic dominates, reach MFUs of about a
# third to over a half against the datasheet peak: PaLM's table 3 lists about a third for Gopher (TPU v3) and
# Megatron-Turing NLG (GPUs) and 46.2% for PaLM (TPU v4) (Chowdhery et al., 2022), and Korthikanti et al. (2022)
# report 54.2% for a model of 530 billion parameters on 2,240 A100 GPUs with Megatron-LM.
#
# ## The recipe
#
# Chapter 14 trained with Adam, no weight decay, a warm-up and a cosine decay. Language models are usually trained
# with **AdamW** (Loshchilov & Hutter, 2019): the weight decay is applied to the weights directly,
# $w \leftarrow w - \eta\,(\text{Adam's step} + \lambda w)$, not added to the gradient where Adam would rescale
# it. Decay pulls weights towards zero; that suits the weight matrices. The norms' gains and shifts and the
# biases are usually left out (nanoGPT, for one, decays only tensors of two or more dimensions): decay would pull
# a gain towards zero, against the scale the loss asks for. The embeddings are a matter of choice: many
# recipes decay every matrix, embeddings included (nanoGPT decays every tensor of two or more dimensions);
# this course, like many others, leaves them out, so that the rows of rare tokens are not pulled to zero
# between their few gradients. `tfm_lesson.train.lm_recipe.parameter_groups` splits them:

# %%
# NBVAL_CHECK_OUTPUT
model = GPT(lm_config)
names = {id(p): n for n, p in model.named_parameters()}
for group in parameter_groups(model, LM_RECIPE["weight_decay"]):
    params = group["params"]
    kinds = sorted({names[id(p)].split(".")[-2] if "blocks" in names[id(p)] else names[id(p)] for p in params})
    print(f"weight_decay={group['weight_decay']}: {len(params)} tensors, {sum(p.numel() for p in params):,} "
          f"numbers; e.g. {', '.join(kinds[:6])}")
print("the recipe:", LM_RECIPE)

# %% [markdown]
# The tied generator is the embedding matrix: it appears once, in the group without decay. The learning rate
# rises linearly over the first part of the run, then follows a cosine down to a tenth of its peak
# (`tfm_lesson.train.lm.lm_rate`, chapter 14's schedule):

# %%
# NBVAL_CHECK_OUTPUT
steps = 400
rates = [lm_rate(s / steps, LM_RECIPE["peak_lr"], LM_RECIPE["warmup"], LM_RECIPE["final_fraction"])
         for s in range(steps)]
print(f"peak {max(rates):.4f} at step {rates.index(max(rates))}, last {rates[-1]:.5f}")

# %% mystnb={"image": {"alt": "Line chart of the learning rate over 400 steps: a straight climb to the peak over the first twenty steps, then a smooth cosine fall to a tenth of the peak at the end."}}
viz.plot_lines({"learning rate": rates}, title="Warm-up, then cosine decay", xlabel="step", ylabel="learning rate")

# %% [markdown]
# **Clipping**: when the gradient's global norm (all parameters together) is larger than `clip`, every gradient is
# scaled by `clip / norm`. `recipe_step` returns the norm before clipping; the next cell checks the norm after.
#
# **Gradient accumulation**: cut a batch into micro-batches, run forward and backward on each, and add the
# gradients; then one optimiser step. The mean loss over 32 rows is the sum of the four means over 8 rows, each
# times $8/32$: weight each micro-batch's loss by its share of the rows and the summed gradient *is* the large
# batch's gradient, with a quarter of the activation memory. Checked:

# %%
# NBVAL_CHECK_OUTPUT
T.seed_everything(0)
big, small = GPT(lm_config), GPT(lm_config)
small.load_state_dict(big.state_dict())
x, y = random_windows(ids, 32, seq_len, torch.Generator().manual_seed(2))
loss_big = accumulate_gradients(big, x, y)  # one batch of 32
loss_small = accumulate_gradients(small, x, y, micro_batches=4)  # four of 8, weighted 1/4 each
gap = max((a.grad - b.grad).abs().max().item() for a, b in zip(big.parameters(), small.parameters()))
scale = max(a.grad.abs().max().item() for a in big.parameters())
print(f"same loss: {abs(loss_big - loss_small) < 1e-5}; largest gradient difference below 1e-6 of the largest "
      f"gradient: {gap < 1e-6 * scale}")
optimizer = make_adamw(big)
_, norm = recipe_step(big, optimizer, x, y, lr=1e-3, clip=0.1)
after = torch.cat([p.grad.flatten() for p in big.parameters()]).norm().item()
print(f"gradient norm before clipping larger than 0.1: {norm > 0.1}; after clipping: {after:.3f}")

# %% [markdown]
# Would chapter 14 train better with this recipe? That is a question for measurements with several seeds, and
# chapter 14 keeps its own for now; the sweep below uses this one for every run.
#
# ## A scaling law on a CPU
#
# `python -m tfm_lesson.train.scaling` trains a grid of small GPTs on chapter 14's corpus (its tokenizer of 512 tokens,
# windows of 64 tokens, batches of 16): at each of three budgets $C$, a row of sizes, each trained on $C$ FLOPs
# by the formula above, to within one step (the cell prints how close), so a small model takes many steps and a
# large one few. Every run is seeded, trained
# by steps on one thread. It saves each point as it ends and continues an interrupted sweep. Its results ship
# with the course; this chapter reads them, and re-runs one point live to show that they are what the command
# produces:

# %%
# NBVAL_CHECK_OUTPUT
shipped = scaling.load_shipped()
settings = shipped["sweep"]
print("shapes (d_model, layers):", [tuple(s) for s in settings["shapes"]])
print("budgets:", ", ".join(f"{b:.0e}" for b in settings["budgets"]), "FLOPs; check run at",
      f"{settings['check_budget']:.0e}")
print(f"{len(shipped['points'])} grid runs + 1 check run; training text {shipped['train_tokens']:,} tokens")
sizes = [p["params"] for p in shipped["points"]]
print(f"sizes from {min(sizes):,} to {max(sizes):,} parameters ({max(sizes) / min(sizes):.0f} x)")
spent = [p["flops"] / p["budget"] for p in shipped["points"]]
print(f"FLOPs spent / budget: {min(spent):.4f} to {max(spent):.4f} (whole steps only)")

# %%
# NBVAL_IGNORE_OUTPUT
data = prepare_lm_data(load_corpus(), SCALING["vocab_size"])
budget, (d_model, layers) = SCALING["budgets"][0], (32, 1)
start = time.perf_counter()
live = scaling.run_point(data, budget, d_model, layers)
same = next(p for p in shipped["points"]
            if p["budget"] == budget and (p["d_model"], p["num_layers"]) == (d_model, layers))
print(f"C = {budget:.0e}, d_model {d_model}, {layers} layer(s): {live['steps']} steps in "
      f"{time.perf_counter() - start:.0f} s")
print(f"validation loss live {live['valid_loss']:.4f}, shipped {same['valid_loss']:.4f} "
      f"(difference {abs(live['valid_loss'] - same['valid_loss']):.4f})")

# %% [markdown]
# On the machine that made the sweep the two agree exactly; another CPU, another PyTorch or another
# `ATEN_CPU_CAPABILITY` rounds differently and lands a little apart (the cell prints the difference). Here are
# all the shipped runs, one row of sizes per budget, with the tokens each saw and how many times over the
# training text that is:

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'budget':>7} {'d_model':>7} {'layers':>6} {'params':>8} {'non-emb':>8} {'steps':>6} {'passes':>6} {'loss':>6}")
for p in sorted(shipped["points"], key=lambda p: (p["budget"], p["params"])):
    print(f"{p['budget']:>7.0e} {p['d_model']:>7} {p['num_layers']:>6} {p['params']:>8,} {p['non_embedding']:>8,} "
          f"{p['steps']:>6} {p['tokens'] / shipped['train_tokens']:>6.2f} {p['valid_loss']:>6.3f}")

# %% [markdown]
# ### The fit
#
# For each budget, a parabola through $(\ln N_\text{all}, \text{loss})$ and its vertex; then the two power laws
# through the vertices, and a **bootstrap**: draw each budget's points again with replacement, redo every fit, a
# thousand times, and read the 5th and 95th percentiles over the draws in which every budget still had a minimum
# inside the sizes it drew. The prediction for the larger budget was written into the results file before the
# check run started (the file records when). Its interval was not: the one written then came from an earlier
# parabola fit that accepted a vertex outside the sizes tried. The interval shown here was recomputed after the
# check run, on the same points and draws, with the rule stated above (a vertex counts only inside the sizes
# tried); the file says so and keeps the first one too.

# %%
# NBVAL_CHECK_OUTPUT
fit = scaling.fit_sweep(shipped["points"])
for c, n, l in zip(fit["budgets"], fit["n_opt"], fit["l_opt"]):
    best = min((p for p in shipped["points"] if p["budget"] == c), key=lambda p: p["valid_loss"])
    print(f"C = {c:.0e}: best size N_opt = {n:,.0f} parameters, loss at the vertex {l:.3f} "
          f"(best run: d_model {best['d_model']}, {best['num_layers']} layer(s), {best['valid_loss']:.3f})")
(k, a), (big_a, b) = fit["n_law"], fit["l_law"]
band = shipped["prediction"]["bootstrap"]
print("interval recomputed after the check run:", shipped["prediction"]["bootstrap_recomputed"]["after_check_run"])
print(f"N_opt = {k:.3g} C^{a:.3f}   (90% bootstrap of the exponent: {band['a'][0]:.3f} to {band['a'][2]:.3f})")
print(f"L     = {big_a:.3g} C^-{-b:.4f} (90% bootstrap of alpha_C: {band['alpha'][0]:.4f} to {band['alpha'][2]:.4f})")
print(f"bootstrap draws {band['draws']}, skipped {band['skipped']}: {band['skipped_few_sizes']} drew fewer than "
      f"three distinct sizes at some budget, {band['skipped_no_minimum']} had no minimum inside the sizes drawn")

# %% [markdown]
# The best size grows with the budget with an exponent (the cell prints it) near Hoffmann et al.'s one half. Its
# interval is wide: it takes in one half, and its upper end falls just short of Kaplan et al.'s $0.73$ (compare
# the printed values), so these data lean towards the first but rule out little below it. And that interval is
# only over the draws that could be fitted: many (the cell counts them by cause) drew too few distinct sizes at
# some budget or had no minimum inside the sizes drawn. With five sizes a budget and bowls this shallow, the best
# size is poorly pinned down; the loss's exponent, read off the bottoms of the bowls, much better. The loss at a
# vertex is not the best loss the budget's runs reached either: at the middle budget one run lies well below the
# parabola's vertex (the cell prints both). Each point also carries the noise of its seed, which at the smallest
# budget is about as large as the differences between the three smallest sizes (the "Play with it" cell below
# trains a point with another seed).

# %% [markdown]
# ### The prediction, and the run that checks it

# %%
# NBVAL_CHECK_OUTPUT
pred, check = shipped["prediction"], shipped["check"]
low, mid, high = pred["bootstrap"]["l_pred"]
print(f"prediction made {pred['made_at']} for C = {pred['budget']:.0e} FLOPs:")
print(f"  best size N_opt = {pred['n_opt']:,.0f} (90%: {pred['bootstrap']['n_pred'][0]:,.0f} to "
      f"{pred['bootstrap']['n_pred'][2]:,.0f}); the nearest shape of the grid: d_model {pred['shape'][0]}, "
      f"{pred['shape'][1]} layer(s)")
print(f"  loss {pred['loss']:.3f} (90%: {low:.3f} to {high:.3f})")
print(f"check run: {check['params']:,} parameters, {check['steps']} steps, loss {check['valid_loss']:.3f} -> "
      f"{'inside' if check['inside'] else 'OUTSIDE'} the interval, {check['valid_loss'] - pred['loss']:+.3f} from "
      f"the prediction")
print(f"sweep: {shipped['seconds'] / 60:.0f} min of training on one thread")

# %% mystnb={"image": {"alt": "Two panels: on the left, loss against parameters for each budget forms a shallow bowl with a fitted parabola, lower for larger budgets, minima marked; on the right, the losses at the vertices against compute follow a dashed power law extended to the larger budget, where the check run's star sits well above the prediction's error bar."}}
scaling.plot_isoflops(shipped, title="A scaling law grown on a CPU: isoFLOP curves, the fit, the prediction and its check")

# %% [markdown]
# The prediction **missed**. The check run, trained after the prediction was written down, ended well above the
# interval the bootstrap drew (the cell above prints both, and the star sits above the error bar in the right
# panel). The size the fit chose lies inside the range the grid explored, though its own interval is wide. The
# check is one run at the grid shape nearest that size, not the vertex of an isoFLOP curve at the new budget, so
# its loss is an upper bound, up to the noise of one seed (the "Play with it" cell below measures it), on the best
# loss that budget could reach; even so, it lies further above the
# prediction than the interval allows. Why? A power law is a straight line on log-log axes, and the losses at the
# three vertices do not lie on one: the fall slows down. Measure the local exponent between neighbouring
# budgets, $-\Delta \ln L / \Delta \ln C$:

# %%
# NBVAL_CHECK_OUTPUT
pairs = list(zip(fit["budgets"], fit["l_opt"])) + [(check["budget"], check["valid_loss"])]
for (c0, l0), (c1, l1) in zip(pairs, pairs[1:]):
    print(f"C {c0:.0e} -> {c1:.0e}: loss {l0:.3f} -> {l1:.3f}, local exponent {math.log(l0 / l1) / math.log(c1 / c0):.3f}")
print(f"check run: training loss {check['train_loss']:.3f}, validation loss {check['valid_loss']:.3f}, "
      f"{check['tokens'] / shipped['train_tokens']:.1f} passes over the training text")

# %% [markdown]
# The exponent shrinks at every step, and the last one, to the check run, is a fraction of the first; since the
# check run's loss is only an upper bound on that budget's best (up to seed noise), the last exponent is a lower
# bound on the local one there, to the same noise. The fitted $\alpha_C$ averages the steep early steps with the flatter later ones and so promised too
# much at the next budget; the bootstrap could not warn about it, because it only resamples the scatter of the
# points around a line and assumes the line is the right shape. The training and validation losses of the check run are close
# (the cell prints both): the model is not memorising the text. Nothing here isolates the cause; likely
# contributors are a loss that approaches the text's own entropy, which a plain power law does not know about,
# a text this small seen several times over (Muennighoff et al. (2023) found up to about four passes worth
# almost as much as fresh text; the grid's best sizes made fewer, the check run more, as the tables print),
# a learning rate, batch and seed held fixed for every size (the list below), and a best size that is itself
# uncertain, so that the check ran at a size other than the budget's best. A law measured over a factor of
# ten in compute predicted a factor of about three beyond it, and was wrong by more than its error bars: that
# is the most useful thing a first scaling law can teach.
#
# ### What differs at this scale
#
# Kaplan et al. trained models from 768 to 1.5 billion non-embedding parameters (their smallest overlap this
# sweep's), on a corpus of 23 billion tokens; Hoffmann et al. from 70 million to over 16 billion parameters, on up
# to hundreds of billions of tokens, mostly seen once. So model size is not what sets this sweep apart; it differs in
# ways that bend its law:

# %%
# NBVAL_CHECK_OUTPUT
smallest, largest = min(shipped["points"], key=lambda p: p["params"]), max(shipped["points"], key=lambda p: p["params"])
for p in (smallest, largest):
    print(f"d_model {p['d_model']:>3}, {p['num_layers']} layer(s): {1 - p['non_embedding'] / p['params']:.0%} of the "
          f"parameters are embeddings")
passes = [p["tokens"] / shipped["train_tokens"] for p in shipped["points"] + [shipped["check"]]]
for d_model, layers in ((16, 1), (32, 1), (48, 2), (64, 3)):
    config = scaling.shape_config(d_model, layers)  # tied: the embedding is also the generator
    generator = 6 * config.vocab_size * d_model  # its product, forward and backward, per token
    share = generator / cost.flops_per_token(config, 64)
    print(f"d_model {d_model:>3}, {layers} layer(s): the generator is {share:.0%} of a training step's FLOPs")
print(f"passes over the training text: from {min(passes):.2f} to {max(passes):.1f}")
print(f"tokenizer: {SCALING['vocab_size']} byte-level BPE tokens; a loss in nats per token of this tokenizer")

# %% [markdown]
# - **Embedding parameters.** In the smallest models most parameters are the embedding (the cell prints the
#   share). Tied, it is also the generator, so it costs FLOPs as well: 62% of a training step's FLOPs at
#   `d_model` 16 (the cell prints each share). Counting it or not changes both axes. With all parameters on the
#   x-axis, as here and as Hoffmann
#   et al. counted, the small end of each curve is shifted right; Kaplan et al. counted only non-embedding
#   parameters, and at small sizes that choice alone changes the fitted exponent. Re-fit with `non_embedding` in
#   place of `params` to see how much.
# - **The data repeat.** The corpus is small: the cell prints how many times over it the runs go. A second pass
#   over the same sentences teaches less than new text would, so the loss falls more slowly with compute than on
#   a stream of fresh data, and more slowly the more passes a run makes. Muennighoff et al. (2023) measured how
#   much repeated tokens are worth.
# - **The tokenizer.** A loss in nats per token depends on what a token is: 512 byte-level pieces here, tens of
#   thousands in the papers. Losses from different tokenizers cannot be compared, only their trends.
# - **A floor.** The text has an entropy no model can go below. A pure power law $k_L C^{-\alpha_C}$ falls forever;
#   Hoffmann et al.'s third approach fits $L = E + A/N_\text{all}^{\alpha} + B/D^{\beta}$, with $E$ that floor.
#   Three budgets are too few to fit $E$ reliably, which is why this chapter fits the plain power law, and why
#   it can only be trusted a short way beyond its data.
# - **One learning rate, one seed.** Every size trains with the same recipe and one seed; the papers chose
#   their rates with more care (Kaplan et al., for instance, fit the best rate as a function of the model size,
#   their appendix D). The bootstrap's interval covers the scatter of the points around the fit, not the noise
#   of a new run's seed.

# %% [markdown]
# ## Play with it
#
# Train one point of your own: pick a budget, a shape and a seed, and see where it lands against the shipped
# curve of that budget. The default trains the live point above again with another seed: how far the seed alone
# moves a point is the noise every point of the sweep carries. Larger budgets take longer (each shipped one is
# about three times the last).

# %%
# NBVAL_IGNORE_OUTPUT
budget, d_model, layers, seed = SCALING["budgets"][0], 32, 1, 1  # try seed 2, or d_model 48 and 2 layers
mine = scaling.run_point(data, budget, d_model, layers, settings={**SCALING, "seed": seed})
row = sorted((p for p in shipped["points"] if p["budget"] == budget), key=lambda p: p["params"])
print(f"yours: {mine['params']:,} parameters, {mine['steps']} steps, seed {seed}: loss {mine['valid_loss']:.3f}")
print("shipped at this budget (seed 0):", ", ".join(f"{p['params']:,}: {p['valid_loss']:.3f}" for p in row))

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: count the parameters
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `params(config)`: the number of parameters of `GPT(config)` for a `GPTConfig` with layer norms, GELU and
# learned positions, with or without biases (`config.bias`) and with a tied or untied generator
# (`config.tie_embeddings`), from the config's numbers alone. The checker compares with `sum(p.numel())` on four
# configs and names the part you missed.

# %%
def params(config):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def params(config):
    d, f, b = config.d_model, config.d_ff, config.bias
    linear = lambda n_in, n_out: n_in * n_out + (n_out if b else 0)  # weights + biases
    norm = 2 * d if b else d  # gain (+ shift)
    block = 4 * linear(d, d) + linear(d, f) + linear(f, d) + 2 * norm
    embeddings = config.vocab_size * d + config.max_len * d  # tokens and learned positions
    generator = 0 if config.tie_embeddings else config.vocab_size * d
    return embeddings + config.num_layers * block + norm + generator  # + the final norm


# %%
# NBVAL_CHECK_OUTPUT
check_params(params)

# %% [markdown]
# ### Exercise 2: FLOPs per token of a training step
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `flops_per_token(config, seq_len)`: the FLOPs of one training step (forward and backward) per token, for
# windows of `seq_len` tokens, counting matrix products only (the blocks' weight matrices, attention's two
# products over the whole square, the generator).

# %%
def flops_per_token(config, seq_len):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def flops_per_token(config, seq_len):
    d, f, layers = config.d_model, config.d_ff, config.num_layers
    n_matmul = layers * (4 * d * d + 2 * d * f) + config.vocab_size * d  # the generator's product, tied or not
    forward = 2 * n_matmul + 4 * layers * seq_len * d  # Q K^T and the weighted values, per query
    return 3 * forward  # the backward pass: two products as large as each forward one


# %%
# NBVAL_CHECK_OUTPUT
check_flops_per_token(flops_per_token)

# %% [markdown]
# ### Exercise 3: the bytes of a training step
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~5 min
#
# Write `training_bytes(config, batch, seq_len)`: the bytes a float32 training step with AdamW needs: weights,
# gradients and Adam's state for every parameter, plus the activations, which `cost.activation_bytes(config,
# batch, seq_len)` gives you. Then use it: how large a batch of 64-token windows fits in 1 GiB for chapter 14's
# model? The formula leaves out what only passes through the step; the measured peak above also held two
# tensors as large as the logits (batch $\times$ length $\times$ vocabulary numbers each), so add those too and
# see how much the answer shrinks.

# %%
def training_bytes(config, batch, seq_len):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def training_bytes(config, batch, seq_len):
    per_parameter = 4 + 4 + 2 * 4  # weight, gradient, Adam's two moments (float32)
    return per_parameter * cost.parameter_count(config) + cost.activation_bytes(config, batch, seq_len)


# %%
# NBVAL_CHECK_OUTPUT
check_training_bytes(training_bytes)
largest = max(b for b in range(1, 4096) if training_bytes(lm_config, b, 64) <= 2**30)
print(f"largest batch of 64-token windows in 1 GiB: {largest}")
logit_bytes = lambda b: 2 * b * 64 * lm_config.vocab_size * 4  # the two logit-sized tensors of the peak
largest = max(b for b in range(1, 4096) if training_bytes(lm_config, b, 64) + logit_bytes(b) <= 2**30)
print(f"with the two logit-sized tensors: {largest}")

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("19")

# %% [markdown]
# ## Summary
#
# - **Parameters** follow from the shape: $4(d^2 + d)$ for attention, $2 d\, d_\text{ff} + d_\text{ff} + d$ for
#   the feed-forward network, the norms, the embeddings, and the generator only if untied. The formula equals
#   `sum(p.numel())` for the 2017 Transformer and for the GPT.
# - **FLOPs per token**: $2 N_\text{matmul} + 4 n_\text{layer}\, n_\text{ctx} d$ forward, three times that for
#   training, the "6N" rule plus an attention term that grows with the window. A tied generator saves
#   parameters, not FLOPs. `FlopCounterMode` agrees to the FLOP.
# - **Memory**: 16 bytes per parameter for float32 weights, gradients and Adam's two moments, plus activations
#   that grow with batch $\times$ length; the formula equals what autograd keeps. The measured peak is well
#   above the sum, because the gradients of the logits and of the log-probabilities also exist at the peak;
#   with those two added, the formula and the peak agree closely (the memory cell prints both ratios).
# - **MFU against the measured matmul peak** compares a step's FLOPs per second with the machine's own measured
#   matrix-product rate, not a datasheet peak as in PaLM's MFU, so it reads higher; on one CPU thread even
#   this small model reaches a fair share of it (the cell prints the share), and the profiler shows where the
#   rest goes.
# - **The recipe**: AdamW with decay on the weight matrices (the embeddings are a choice; this course leaves
#   them out), warm-up then cosine decay, clipping of the
#   global gradient norm, and gradient accumulation that equals the large batch when each micro-batch is weighted
#   by its share.
# - **Scaling**: isoFLOP curves give each budget's best size; power laws through their minima, with bootstrap
#   intervals, predict a larger budget, and a run made afterwards checks the prediction.
#
# **References.** J. Kaplan et al., *Scaling Laws for Neural Language Models* (2020). J. Hoffmann et al.,
# *Training Compute-Optimal Large Language Models* (2022). A. Chowdhery et al., *PaLM: Scaling Language Modeling with Pathways* (2022), where MFU is defined.
# I. Loshchilov & F. Hutter, *Decoupled Weight Decay Regularization* (2019). N. Muennighoff et al., *Scaling
# Data-Constrained Language Models* (2023). T. Pearce & J. Song, *Reconciling Kaplan and Chinchilla Scaling
# Laws* (2024). V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models* (2022).

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 19: What it costs, and what more buys. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
