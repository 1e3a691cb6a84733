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
# # 02 · Masks: what attention is not allowed to see
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/02_masks.ipynb)
#
# Attention lets every query look at every key. Twice in the Transformer that is wrong: a batch is padded with
# filler tokens that are not part of any sentence, and a decoder that learns to predict the next word must not
# peek at it. Both are handled the same way, by a **mask** that removes keys before the softmax. This chapter
# builds both masks and makes them broadcast to every head and every query. A last part then looks at the
# corner cases where from-scratch implementations go wrong: a query that may see *nothing*, and half-precision
# numbers; exercise 3 and chapter 03 build on it, so do not skip it.
#
# **What you will learn**
#
# - padding masks and causal masks, slow and vectorised, and how to combine them;
# - the convention: a boolean mask where **True = may attend** (as in `F.scaled_dot_product_attention`), and
#   why `nn.MultiheadAttention`'s masks mean the opposite (True = blocked);
# - broadcasting a `(batch, 1, 1, k_len)` or `(q_len, k_len)` mask to `(batch, heads, q_len, k_len)`;
# - proofs that masking works: padded keys get weight exactly 0, and changing them (or the future) changes
#   nothing;
# - why masking after the softmax and renormalising gives the same weights as masking before;
# - in a part before the exercises, which exercise 3 and chapter 03 need: what a fully masked row does with $-\infty$ (NaN, shown), how `tfm_lesson`
#   returns zeros instead, why the common fill value $-10^9$ overflows `float16` (shown), and how `nn.MultiheadAttention`'s
#   opposite convention goes wrong.

# %%
import math

import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson
import tfm_lesson as T
from tfm_lesson import causal_mask, combine_masks, padding_mask, scaled_dot_product_attention, viz, widgets
from tfm_lesson.checks import check_causal_mask, check_decoder_mask, check_masked_softmax, check_padding_mask

tfm_lesson.seed_everything(0)
device = tfm_lesson.default_device()

# %% [markdown]
# ## Intuition: two reasons to hide a key
#
# **Padding.** To run sentences of different lengths as one tensor, the short ones are filled up to the longest
# with a `<pad>` token (id 0 in this course). Pad tokens are not words: if real tokens attend to them, the
# output of a sentence depends on how long the *other* sentences in its batch are. We hide padding as a **key**:
# no query may look at it. (Padding queries still produce outputs; the training loss of chapter 10 ignores
# them.)
#
# **Causality.** A decoder is trained to predict token $t+1$ from tokens $1..t$. In training, all positions of
# the target are processed at once, so position $t$ *could* attend to position $t+1$ — the very token it must
# predict — and learn to copy it. The causal mask allows query $i$ to see keys $j \le i$ only: the past and
# itself.

# %% [markdown]
# ## The math
#
# The paper (section 3.2.3) masks "by masking out (setting to $-\infty$) all values in the input of the softmax
# which correspond to illegal connections". With a boolean mask $M$ (True = may attend):
#
# $$\tilde S_{ij} = \begin{cases} S_{ij} & M_{ij} \\ -\infty & \text{otherwise} \end{cases}, \qquad
# A_{ij} = \frac{e^{\tilde S_{ij}}}{\sum_{j'} e^{\tilde S_{ij'}}} ,$$
#
# and since $e^{-\infty} = 0$ exactly, a blocked key gets weight **exactly 0**, while the visible keys' weights
# still sum to one. Masking *after* the softmax (multiplying the weights by $M$) is not the same: the zeros are
# right but the rows no longer sum to one. Divide each row by its new sum, though, and you are back at the
# masked-before weights exactly: both are $e^{S_{ij}}$ divided by the sum of $e^{S_{ij'}}$ over the visible keys
# $j'$ (the softmax's own denominator cancels). We check this numerically below. That is exact arithmetic;
# in floating point, masking before the softmax is the cheaper way to get these weights and also the only safe
# one: after the softmax, a hidden key whose score is far above the visible ones (a padding position holding
# anything at all) takes all of the weight, the visible keys' weights underflow to exactly 0, and the
# renormalisation divides 0 by 0. The section on masking after the softmax, below, shows that too.
#
# Shapes. Scores are `(batch, heads, q_len, k_len)`. A padding mask only depends on the sentence and the key,
# so it is stored as `(batch, 1, 1, k_len)`; a causal mask only depends on the query and key positions, so it is
# `(q_len, k_len)`. Broadcasting (chapter 00: shapes align from the right, 1s repeat) stretches both to the
# scores' shape, and the decoder's mask is their logical AND, `(batch, 1, q_len, k_len)`.
#
# **Polarity.** `tfm_lesson` and `F.scaled_dot_product_attention` use True = *may attend*.
# `nn.MultiheadAttention`'s `attn_mask` and `key_padding_mask` use True = *blocked* (not allowed). Neither is
# wrong; mixing them is the classic bug (the corner cases before the exercises show it).

# %% [markdown]
# ## Build it: the padding mask
#
# A batch of 3 sentences of lengths 6, 4 and 2, padded with id 0 to length 6. The slow way: one boolean per
# token. The fast way: one comparison for the whole batch, then two inserted axes so it broadcasts over heads
# and queries.

# %%
PAD = 0
tokens = torch.tensor([[5, 9, 4, 7, 3, 8],
                       [6, 2, 9, 5, 0, 0],
                       [4, 7, 0, 0, 0, 0]], device=device)  # (batch, seq_len) = (3, 6)

slow = torch.zeros(tokens.shape, dtype=torch.bool, device=device)  # (batch, seq_len)
for b in range(tokens.size(0)):
    for j in range(tokens.size(1)):
        slow[b, j] = tokens[b, j].item() != PAD  # True: a real token, may be attended to

fast = (tokens != PAD)[:, None, None, :]  # (batch, 1, 1, seq_len)

# %%
# NBVAL_CHECK_OUTPUT
print("padding mask:", tuple(fast.shape), " slow == fast:", torch.equal(slow, fast[:, 0, 0]))
print("== tfm_lesson.padding_mask:", torch.equal(fast, padding_mask(tokens, PAD)))
print(fast[:, 0, 0].int().cpu())

# %% [markdown]
# ## Build it: the causal mask
#
# Query $i$ may see key $j$ when $j \le i$: the lower triangle of a square matrix, **diagonal included** (a
# position must see itself — without it, the first position would see nothing at all).

# %%
size = 5
slow_causal = torch.zeros(size, size, dtype=torch.bool, device=device)  # (q_len, k_len)
for i in range(size):
    for j in range(size):
        slow_causal[i, j] = j <= i

fast_causal = torch.ones(size, size, dtype=torch.bool, device=device).tril()  # (q_len, k_len)

# %%
# NBVAL_CHECK_OUTPUT
print("causal mask:", tuple(fast_causal.shape), " slow == fast:", torch.equal(slow_causal, fast_causal))
print("== tfm_lesson.causal_mask:", torch.equal(fast_causal, causal_mask(size, device=device)))
print(fast_causal.int().cpu())

# %% [markdown]
# ## Broadcasting and combining
#
# Against scores of 2 heads, both masks stretch to `(batch, heads, q_len, k_len)`. The decoder's self-attention
# needs both at once: a key is visible if it is real **and** not in the future, `padding & causal`, which
# broadcasts `(3, 1, 1, 6)` with `(6, 6)` into `(3, 1, 6, 6)`. `tfm_lesson.combine_masks` does the same and skips
# `None`s. (OR would be wrong: it lets a key through when *either* mask allows it.)

# %%
heads, seq_len = 2, tokens.size(1)
scores = torch.randn(3, heads, seq_len, seq_len).to(device)  # (batch, heads, q_len, k_len)
decoder_mask = fast & causal_mask(seq_len, device=device)  # (3, 1, 1, 6) & (6, 6) -> (3, 1, 6, 6)

# %%
# NBVAL_CHECK_OUTPUT
print("padding broadcast:", tuple(torch.broadcast_shapes(fast.shape, scores.shape)))
print("causal broadcast: ", tuple(torch.broadcast_shapes(causal_mask(seq_len).shape, scores.shape)))
print("decoder mask:", tuple(decoder_mask.shape),
      " == combine_masks:", torch.equal(decoder_mask, combine_masks(fast, causal_mask(seq_len, device=device))))

# %% [markdown]
# ## See it: three masks
#
# Light cells may be attended to, dark cells are blocked; rows are queries, columns keys (numbered by position;
# keys 4 and 5 are sentence 1's padding). Left: sentence 1's
# padding mask hides its last two keys from *every* query (a column pattern). Middle: the causal mask, a lower
# triangle. Right: their AND, the decoder's mask for sentence 1.

# %% mystnb={"image": {"alt": "Three mask pictures side by side: padding hides the last two key columns, the causal mask hides the upper triangle, and both together hide the union of the two."}}
names = ["w0", "w1", "w2", "w3", "<pad>", "<pad>"]
fig = viz.Figure(figsize=(10, 2.7), dpi=viz.DPI, layout="constrained")
axes = fig.subplots(1, 3)
positions = [str(j) for j in range(seq_len)]  # key positions; 4 and 5 are <pad> in sentence 1
viz.show_mask(fast[1, 0].expand(seq_len, seq_len), positions, names, title="padding (sentence 1)", ax=axes[0])
viz.show_mask(causal_mask(seq_len), positions, names, title="causal", ax=axes[1])
viz.show_mask(decoder_mask[1, 0], positions, names, title="padding AND causal", ax=axes[2])
fig.suptitle("True = may attend: padding hides columns, causality hides the upper triangle")
fig

# %% [markdown]
# ## Check it: masked keys get exactly zero, and changing them changes nothing
#
# Run attention with sentence masks through `tfm_lesson.scaled_dot_product_attention` and through PyTorch's
# `F.scaled_dot_product_attention` (same convention: True = may attend). Then two properties that *define* a
# correct mask:
#
# 1. every blocked key gets weight exactly 0, and every row still sums to one;
# 2. changing what is hidden — the padding tokens' vectors, or the future — does not change the outputs of the
#    real, past positions at all.

# %%
d_k = 8
x = torch.randn(3, heads, seq_len, d_k).to(device)  # (batch, heads, seq_len, d_k): queries = keys = values
out, weights = scaled_dot_product_attention(x, x, x, decoder_mask)
fused = F.scaled_dot_product_attention(x, x, x, attn_mask=decoder_mask)

x_changed = x.clone()
x_changed[:, :, -1] = 100.0  # change the last position: padding in sentences 1 and 2, the future for everyone
out_changed, _ = scaled_dot_product_attention(x_changed, x_changed, x_changed, decoder_mask)

# %%
# NBVAL_CHECK_OUTPUT
blocked = ~decoder_mask.expand_as(weights)
print("blocked keys have weight exactly 0:", bool((weights[blocked] == 0).all()))
print("rows sum to 1:", torch.allclose(weights.sum(-1), torch.ones(3, heads, seq_len, device=device)))
print("tfm_lesson == F.scaled_dot_product_attention:", torch.allclose(out, fused, atol=1e-5))
print("positions 0..4 unchanged after changing position 5:",
      torch.allclose(out[:, :, :-1], out_changed[:, :, :-1], atol=1e-6))

# %% [markdown]
# ## Masking after the softmax, then renormalising
#
# The math section claimed that multiplying the weights by the mask and dividing each row by its new sum gives
# exactly the weights of masking before the softmax. The same scores and the decoder mask as above; then one
# query whose hidden key scores far above its two visible ones:

# %%
before = scores.masked_fill(~decoder_mask, float("-inf")).softmax(dim=-1)  # (batch, heads, q_len, k_len)
after_only = scores.softmax(dim=-1) * decoder_mask  # zeros in the right places, rows no longer sum to 1
after_renormalised = after_only / after_only.sum(dim=-1, keepdim=True)

far = torch.tensor([[0.0, 1.0, 200.0]])  # (q_len=1, k_len=3): the hidden key 2 scores 200 above the others
far_mask = torch.tensor([[True, True, False]])  # key 2 is hidden
far_after = far.softmax(dim=-1) * far_mask  # exp(-200) underflows in float32: both visible weights are 0
far_before = far.masked_fill(~far_mask, float("-inf")).softmax(dim=-1)

# %%
# NBVAL_CHECK_OUTPUT
print("after the softmax, rows sum to 1:", torch.allclose(after_only.sum(-1), torch.ones(3, heads, seq_len, device=device)))
print("after, then renormalised == before:", torch.allclose(after_renormalised, before, atol=1e-6))
print("a hidden score 200 above the rest: after, then renormalised, gives NaN:",
      bool(torch.isnan(far_after / far_after.sum(dim=-1, keepdim=True)).any()),
      "| before gives NaN:", bool(torch.isnan(far_before).any()))

# %% [markdown]
# ## See it: attention under the decoder mask
#
# Sentence 1 of our batch, head 0, under the combined mask: every row is a distribution over the visible keys
# only — the lower triangle, minus the two padding columns. The padding *rows* (queries 4 and 5) still attend to
# the real tokens; their outputs are ignored later by the loss. (The vectors are random, so the weights mean
# nothing yet; the *pattern* of zeros is the point.)

# %% mystnb={"image": {"alt": "Attention heatmap under the decoder mask: every weight above the diagonal and in the padded key columns is zero, so each row spreads only over earlier real tokens."}}
viz.show_attention(weights[1, 0], x_tokens=names, y_tokens=names,
                   title="Decoder mask: weights only on the past, never on <pad>")

# %% [markdown]
# ## Play with it
#
# Slide the real length of each sentence in a padded batch, switch the causal mask on and off, and pick the
# sentence to inspect: you see the batch's padding, that sentence's full mask and the weights it produces.
# Blocked keys get exactly 0. (A static view shows the default: lengths 6 and 4, causal on.)

# %% mystnb={"image": {"alt": "Explorer picture: the padding of a two-sentence batch, the first sentence's padding-plus-causal mask, and the attention weights it allows, zero for every blocked key."}}
widgets.mask_explorer(lengths=(6, 4), causal=True)

# %% [markdown]
# ## Going deeper: three corner cases
#
# This part looks at three places where from-scratch implementations go wrong: a mask with the opposite
# convention, a query that may see nothing at all, and half-precision numbers. It is not optional: exercise 3
# below needs the second and third, and chapter 03 needs all three (it reuses exercise 3's answer and meets
# `nn.MultiheadAttention`'s convention again).

# %% [markdown]
# ### The opposite convention: `nn.MultiheadAttention`
#
# PyTorch's `nn.MultiheadAttention` takes `key_padding_mask` of shape `(batch, k_len)` with **True = ignore this
# key**. Give it our mask unchanged and it attends to the padding *only*. `tfm_lesson.torch_mask` flips the
# polarity (it is just `~mask`). We compare with `tfm_lesson.MultiHeadAttention` (chapter 03) carrying the same
# weights, via `tfm_lesson.to_torch`.

# %%
mha = tfm_lesson.MultiHeadAttention(d_model=16, heads=2).to(device).eval()
torch_mha = tfm_lesson.to_torch(mha)  # nn.MultiheadAttention(16, 2, batch_first=True), same weights
h = torch.randn(1, seq_len, 16).to(device)  # (batch, seq_len, d_model): sentence 1, 4 real tokens + 2 pads
keep = tokens[1:2] != PAD  # (batch, k_len): True = real token
ours, _ = mha(h, h, h, mask=keep[:, None, None, :])  # tfm_lesson: True = may attend
right, _ = torch_mha(h, h, h, key_padding_mask=tfm_lesson.torch_mask(keep))  # ~keep: True = blocked
wrong, wrong_w = torch_mha(h, h, h, key_padding_mask=keep)  # our mask passed as is

# %%
# NBVAL_CHECK_OUTPUT
print("with torch_mask(keep):  same as tfm_lesson:", torch.allclose(ours, right, atol=1e-5))
print("with keep passed as is: same as tfm_lesson:", torch.allclose(ours, wrong, atol=1e-5))
print("  ... weight it puts on the two <pad> keys, per query:", wrong_w[0, :, 4:].sum(-1).round(decimals=2).tolist())

# %% [markdown]
# ### Fully masked rows: $-\infty$ makes NaN
#
# Can a query have **no** visible key? Yes, and more often than you would think: in a `(batch, 1, q_len,
# k_len)` mask that also hides padding *queries*, in cross-attention over an empty source, or in a sentence that
# is all padding at the end of a data set. For such a row, every score is $-\infty$ and the softmax computes
#
# $$\frac{e^{-\infty}}{\sum_j e^{-\infty}} = \frac{0}{0} = \text{NaN}.$$
#
# NaN is contagious: the next matrix product spreads it to every feature of that position, and the loss and
# the gradients of **every** parameter become NaN — one bad row ends the training run. Watch:

# %%
row_scores = torch.randn(3, 4).to(device)  # (q_len, k_len)
row_mask = torch.tensor([[True, True, False, False],
                         [False, False, False, False],  # query 1 sees nothing
                         [True, True, True, False]], device=device)
naive = row_scores.masked_fill(~row_mask, float("-inf")).softmax(dim=-1)  # (q_len, k_len)
values = torch.randn(4, 2).to(device)  # (k_len, d_v)

# %%
# NBVAL_CHECK_OUTPUT
print("naive weights, which entries are NaN (row by row):", torch.isnan(naive).tolist())
print("naive output has NaN in row 1 only:", torch.isnan(naive @ values).any(-1).tolist())
print("and NaN * 0 is still", (torch.tensor(float("nan")) * 0).item())

# %% [markdown]
# **What should the answer be?** A query that may see nothing should receive nothing: weights all 0, output all
# 0. That is what `tfm_lesson.scaled_dot_product_attention` returns. It finds the rows with no visible key,
# `has_key = mask.any(dim=-1, keepdim=True)`, leaves those rows unmasked for the softmax (so it stays finite), and
# zeroes them afterwards. (Recent PyTorch versions make `F.scaled_dot_product_attention` return zeros for such
# rows too, on the CPU at least; a hand-written softmax never does, and older versions returned NaN.)
#
# The fill condition in the cell below, `~(mask | ~has_key)`, reads: block a key unless it is visible or its row
# has no visible key at all. Entry by entry:
#
# | `mask` (key visible) | `has_key` (row sees something) | `mask \| ~has_key` | filled with $-\infty$? |
# |---|---|---|---|
# | True | True | True | no: a visible key |
# | False | True | False | **yes**: a hidden key in an ordinary row |
# | False | False | True | no: an empty row stays finite, and is zeroed after the softmax |
#
# (`mask` True with `has_key` False cannot happen: a row with a visible key has a key.)

# %%
has_key = row_mask.any(dim=-1, keepdim=True)  # (q_len, 1)
safe = row_scores.masked_fill(~(row_mask | ~has_key), float("-inf")).softmax(dim=-1).masked_fill(~has_key, 0.0)
q1 = torch.randn(3, 8).to(device)
k1 = torch.randn(4, 8).to(device)
out_pkg, w_pkg = scaled_dot_product_attention(q1, k1, values, row_mask)

# %%
# NBVAL_CHECK_OUTPUT
print("safe weights, row 1:", safe[1].tolist(), " rows:", safe.sum(-1).round(decimals=4).tolist())
print("tfm_lesson: weights of row 1 all 0:", bool((w_pkg[1] == 0).all()), " output row 1:", out_pkg[1].tolist())
print("tfm_lesson output has NaN:", bool(torch.isnan(out_pkg).any()))

# %% [markdown]
# ### Why not $-10^9$? It overflows `float16`
#
# Some implementations fill with a large negative number such as $-10^9$ instead of $-\infty$, to dodge the NaN
# (The Annotated Transformer, for one, fills its masked scores with $-10^9$).
# Two problems. First, it does not give zeros: for a fully masked row all scores become $-10^9$, all equal, and
# the softmax returns the **uniform** distribution — the query silently averages everything, padding included.
# Second, $-10^9$ is not a `float16` number: the largest magnitude `float16` can hold is 65,504. Converting
# gives $-\infty$ (and the NaN is back), and `masked_fill` refuses outright. Mixed-precision training on a GPU
# often runs attention in `float16`, so this breaks exactly when you scale up (in `bfloat16`, a 16-bit format
# with float32's range and fewer digits, $-10^9$ fits, but the fully masked row still becomes a uniform
# average). $-\infty$ is exact in every floating-point dtype; handle the fully masked rows explicitly, as above.

# %%
as_half = torch.tensor(-1e9).half()
try:
    row_scores.half().masked_fill(~row_mask, -1e9)
    refused = "accepted"
except RuntimeError as exc:
    refused = "RuntimeError: " + str(exc).split(" without")[0]
uniform = row_scores.masked_fill(~row_mask, -1e9).softmax(dim=-1)  # float32: no error, but row 1 is uniform

# %%
# NBVAL_CHECK_OUTPUT
print("float16 max:", torch.finfo(torch.float16).max, " -1e9 as float16:", as_half.item())
print("masked_fill(-1e9) in float16:", refused)
print("float32 with -1e9, row 1:", uniform[1].tolist(), "(uniform, not zeros)")
print("tfm_lesson in float16, NaN:", bool(torch.isnan(scaled_dot_product_attention(
    q1.half(), k1.half(), values.half(), row_mask)[0]).any()))

# %% [markdown]
# ## Exercises

# %% [markdown]
# ### Exercise 1: padding mask
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `my_padding_mask(tokens, pad_id)`: `tokens` is `(batch, seq_len)` integer ids. Return a boolean mask
# shaped `(batch, 1, 1, seq_len)`, True where the token is real (may be attended to). Use the `pad_id` argument —
# the checker tries pad ids other than 0.

# %%
def my_padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    ...  # your turn: (batch, 1, 1, seq_len) booleans


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id)[:, None, None, :]  # (batch, 1, 1, k_len): hides keys, for every head and query


# %%
# NBVAL_CHECK_OUTPUT
check_padding_mask(my_padding_mask)

# %% [markdown]
# ### Exercise 2: causal mask
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `my_causal_mask(size)`, returning a `(size, size)` boolean mask in which query `i` may attend to keys
# `0..i`, itself included.

# %%
def my_causal_mask(size: int) -> torch.Tensor:
    ...  # your turn: (size, size) booleans


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_causal_mask(size: int) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool).tril()  # (q_len, k_len): j <= i


# %%
# NBVAL_CHECK_OUTPUT
check_causal_mask(my_causal_mask)

# %% [markdown]
# ### Exercise 3: a safe masked softmax
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `masked_softmax(scores, mask)`: `scores` is `(..., q_len, k_len)`, `mask` is boolean (True = may
# attend) and broadcasts to it. Return the attention weights: blocked keys get 0, each row with a visible key
# sums to 1, and a row with **no** visible key is all zeros — never NaN. It must work in `float16` and
# `bfloat16` too (so: no $-10^9$). The corner cases above explain both rules; the short version: find the rows
# with no visible key, `has_key = mask.any(dim=-1, keepdim=True)`, keep them finite for the softmax, and zero
# them after it. Chapter 03 reuses this function.

# %%
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ...  # your turn: same shape as scores


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    has_key = mask.any(dim=-1, keepdim=True)  # (..., q_len, 1): False for a fully masked row
    filled = scores.masked_fill(~(mask | ~has_key), float("-inf"))  # such rows stay finite...
    return filled.softmax(dim=-1).masked_fill(~has_key, 0.0)  # ...and are zeroed here


# %%
# NBVAL_CHECK_OUTPUT
check_masked_softmax(masked_softmax)

# %% [markdown]
# ### Exercise 4: the decoder's mask
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `my_decoder_mask(tokens, pad_id)` for a target batch `tokens` `(batch, t)`: the mask of the decoder's
# self-attention, shaped `(batch, 1, t, t)`, where query `i` may attend to key `j` when `j <= i` **and** key `j`
# is not padding. Reuse your two masks. The `my_` prefix keeps the function apart from the tensor
# `decoder_mask` built earlier in this chapter.

# %%
def my_decoder_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    ...  # your turn: (batch, 1, t, t) booleans


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def my_decoder_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    causal = my_causal_mask(tokens.size(1)).to(tokens.device)  # (t, t)
    return my_padding_mask(tokens, pad_id) & causal  # (batch, 1, 1, t) & (t, t) -> (batch, 1, t, t)


# %%
# NBVAL_CHECK_OUTPUT
check_decoder_mask(my_decoder_mask)

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("02")

# %% [markdown]
# ## Summary
#
# - A mask is boolean and **True = may attend** (as in `F.scaled_dot_product_attention` and `tfm_lesson`);
#   `nn.MultiheadAttention` uses True = blocked, so convert with `~mask` (`tfm_lesson.torch_mask`).
# - Padding masks hide keys: `(tokens != pad_id)[:, None, None, :]`, shape `(batch, 1, 1, k_len)`. Causal masks
#   hide the future: `tril()` with the diagonal, shape `(q_len, k_len)`. The decoder uses their AND,
#   `(batch, 1, q_len, k_len)`; broadcasting does the rest.
# - Masking sets scores to $-\infty$ *before* the softmax: blocked keys get exactly 0, rows still sum to one,
#   and the hidden positions cannot influence the others (we changed them and nothing moved). Masking the
#   weights after the softmax and renormalising each row gives the same weights in exact arithmetic, and NaN in
#   floating point when a hidden key's score dwarfs the visible ones: mask before.
# - (Going deeper.) A fully masked row gives $0/0$ = NaN with $-\infty$ and a silent uniform average with $-10^9$; the right
#   answer is zeros, which `tfm_lesson` returns. $-10^9$ overflows `float16` (max 65,504): use $-\infty$.
#
# Next, chapter 03 runs several attentions side by side: multi-head attention, with these masks broadcast over
# its heads.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 02: Masks: what attention is not allowed to see. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
