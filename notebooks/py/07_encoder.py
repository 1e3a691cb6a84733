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
# # 07 · The encoder
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/07_encoder.ipynb)
#
# Chapters 01–06 built the parts: attention, masks, multi-head attention, positional encoding, layer norm
# with residuals, and the position-wise feed-forward network. This chapter assembles them into the
# **encoder** of "Attention Is All You Need" (section 3.1): one layer, then a stack of $N = 6$ identical layers.
#
# **What you will learn**
# - how one encoder layer wires self-attention and feed-forward, each inside a residual connection, with
#   dropout and layer norm — post-norm as in the paper, pre-norm as an option (`norm_first`);
# - why a padded batch gives the same numbers as encoding each sentence alone (up to float rounding);
# - how to prove the layer and the stack equal to `torch.nn.TransformerEncoderLayer` / `nn.TransformerEncoder`,
#   and why PyTorch's *fast path* has to be switched off to compare padded positions;
# - what the attention maps of an untrained encoder look like, layer by layer.

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
import warnings

import torch
from torch import nn

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.checks import check_encoder, check_encoder_layer, check_load_encoder_layer

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## Intuition
#
# The encoder reads the whole source sentence at once and rewrites every token's vector so that it carries
# context: after the encoder, the vector for "bank" in "the river bank" differs from the one in "the bank
# account". Each layer does this in two moves:
#
# 1. **communicate** — *self-attention*: every position gathers information from every other position of the
#    same sentence (queries, keys and values all come from the same sequence);
# 2. **compute** — the *feed-forward network*: every position, on its own, transforms what it gathered.
#
# Both moves only *add* a correction to a running vector, the **residual stream** $x$: a sub-layer computes
# $\mathrm{Sublayer}(x)$ and the layer keeps $x + \mathrm{Sublayer}(x)$. Because of that sum, a layer that has
# nothing useful to say can output almost zero and leave $x$ intact, and gradients reach early layers through
# the identity path. Layer norm keeps the size of the stream in check.
#
# ## The math (paper, sections 3.1 and 5.4)
#
# Input $x \in \mathbb{R}^{n \times d_\text{model}}$ for a sentence of $n$ tokens (a batch adds a leading
# dimension). The paper writes each sub-layer's output as
#
# $$\mathrm{LayerNorm}\big(x + \mathrm{Dropout}(\mathrm{Sublayer}(x))\big)$$
#
# ("we apply dropout to the output of each sub-layer, before it is added to the sub-layer input and
# normalized"). One encoder layer is therefore
#
# $$\begin{aligned}
# z &= \mathrm{LayerNorm}_1\big(x + \mathrm{Dropout}(\mathrm{MultiHead}(x, x, x))\big) && (n, d_\text{model})\\
# y &= \mathrm{LayerNorm}_2\big(z + \mathrm{Dropout}(\mathrm{FFN}(z))\big) && (n, d_\text{model})
# \end{aligned}$$
#
# **Where dropout goes.** Section 5.4 of the paper names two places, both at the rate $P_{drop} = 0.1$ in the
# base model: the output of each sub-layer, before the residual sum (the $\mathrm{Dropout}$ above), and the sums
# of the embeddings and the positional encodings at the bottom of both stacks (chapter 09). Implementations add
# two more. Dropout on the **attention weights** (after the softmax, before they average the values) and on the
# feed-forward's **hidden units** (after the ReLU) are not in the paper; the authors' own code, tensor2tensor,
# has both as `attention_dropout` and `relu_dropout` (0 in its first base settings, 0.1 from
# `transformer_base_v2`), and `nn.TransformerEncoderLayer` drops out at all three places of a layer with its
# one `dropout`. tfm_lesson names each site:
#
# | site | paper, section 5.4 | setting in tfm_lesson | default |
# |---|---|---|---|
# | each sub-layer's output, before $x + \cdot$ | yes | `dropout` (`dropout1`, `dropout2` in a layer) | 0.1 |
# | embeddings + positions (chapter 09) | yes | `TransformerConfig(embedding_dropout=...)` | `dropout` |
# | attention weights | no | `attention_dropout` (`MultiHeadAttention(d_model, heads, dropout)`) | `dropout` |
# | feed-forward hidden units | no | `activation_dropout` (`PositionwiseFeedForward(d_model, d_ff, dropout)`) | `dropout` |
#
# A setting left at `None` takes the value of `dropout`, as `nn.TransformerEncoderLayer` does; the paper's
# model is `attention_dropout=0.0, activation_dropout=0.0`. `EncoderLayer`, `Encoder`, `DecoderLayer`,
# `Decoder` and `TransformerConfig` all take these names. Dropout only acts in training mode (`.train()`);
# in `.eval()` every site passes its input through unchanged, which is why the comparisons below call `.eval()`.
#
# This is **post-norm**: the norm comes *after* the sum. Later code moved the norm inside the branch (the
# authors' own tensor2tensor by 2018; Xiong et al., 2020, analysed why it helps; chapter 05), **pre-norm**:
# $x + \mathrm{Dropout}(\mathrm{Sublayer}(\mathrm{LayerNorm}(x)))$,
# which trains more stably in deep stacks and needs one extra LayerNorm after the last layer, because the
# stream itself is otherwise never normalised. tfm_lesson has both: `norm_first=False` (the paper, the default)
# and `norm_first=True`.
#
# Every layer keeps the shape $(n, d_\text{model})$, which is what lets us stack $N$ of them:
# $\mathrm{Encoder}(x) = \mathrm{Layer}_N(\cdots \mathrm{Layer}_1(x))$. The output is called the **memory**:
# the decoder will attend to it (chapter 08).

# %% [markdown]
# ## Build it
#
# ### One layer, step by step
#
# We take the parts from tfm_lesson (the chapters that built them proved them right) and write the forward
# pass out, printing the shape after every step. The base model has $d_\text{model}=512$, $h=8$,
# $d_{ff}=2048$; we use a small layer so that everything runs in a blink: $d_\text{model}=32$, $h=4$,
# $d_{ff}=64$.

# %%
d_model, heads, d_ff = 32, 4, 64
self_attn = T.MultiHeadAttention(d_model, heads).to(device)   # W^Q, W^K, W^V, W^O
feed_forward = T.PositionwiseFeedForward(d_model, d_ff).to(device)  # W_1, W_2
norm1, norm2 = T.LayerNorm(d_model).to(device), T.LayerNorm(d_model).to(device)
dropout = nn.Dropout(0.1)


def encoder_layer_by_hand(x, mask=None, show=False):
    """Post-norm encoder layer written out. x: (batch, n, d_model)."""
    say = print if show else (lambda *a: None)
    say("x                          ", tuple(x.shape))
    attended = self_attn(x, x, x, mask)[0]          # queries, keys, values: all x; [0]: (output, weights)
    say("MultiHead(x, x, x)         ", tuple(attended.shape))
    z = norm1(x + dropout(attended))                # residual, then norm (post-norm)
    say("z = LN1(x + Dropout(.))    ", tuple(z.shape))
    transformed = feed_forward(z)                   # the same MLP at every position
    say("FFN(z)                     ", tuple(transformed.shape))
    y = norm2(z + dropout(transformed))
    say("y = LN2(z + Dropout(.))    ", tuple(y.shape))
    return y


for m in (self_attn, feed_forward, norm1, norm2, dropout):
    m.eval()  # no dropout while we compare numbers
x = torch.randn(2, 5, d_model).to(device)  # (batch=2, n=5, d_model), drawn on the CPU, also on a GPU machine
y = encoder_layer_by_hand(x, show=True)

# %% [markdown]
# Nothing in the layer changes the shape: $(2, 5, 32)$ in, $(2, 5, 32)$ out. The only place where
# positions exchange information is `self_attn`; `feed_forward` and the norms act on each position's vector
# separately.
#
# `tfm_lesson.EncoderLayer` is this function as a module, with the same sub-module names (`self_attn`,
# `feed_forward`, `norm1`, `norm2`). Load our four parts' weights into it and compare:

# %%
# NBVAL_CHECK_OUTPUT
layer = T.EncoderLayer(d_model, heads, d_ff, dropout=0.1).to(device).eval()
layer.self_attn.load_state_dict(self_attn.state_dict())
layer.feed_forward.load_state_dict(feed_forward.state_dict())
layer.norm1.load_state_dict(norm1.state_dict())
layer.norm2.load_state_dict(norm2.state_dict())
print("by hand == tfm_lesson.EncoderLayer:", torch.allclose(encoder_layer_by_hand(x), layer(x), atol=1e-6))

# %% [markdown]
# ### Padding: the slow way and the batched way
#
# Sentences have different lengths. The *slow, obvious* way to encode three sentences is one at a time, each
# at its own length, with no mask at all. The *batched* way pads them to a common length with a `<pad>` id
# and hides the padded **keys** with the mask $(\text{batch}, 1, 1, n)$ of chapter 02, so no real token ever
# attends to padding. If the mask does its job, the two ways agree on every real position — that is the
# whole contract of padding.

# %%
lengths = [5, 3, 4]
n = max(lengths)
sentences = [torch.randn(length, d_model).to(device) for length in lengths]

# slow: one sentence at a time, no padding, no mask
one_by_one = [layer(s[None])[0] for s in sentences]  # each (length, d_model)

# batched: pad with zeros to n, mask the padded keys
batch = torch.zeros(len(lengths), n, d_model, device=device)  # (batch, n, d_model)
for i, s in enumerate(sentences):
    batch[i, : len(s)] = s
ids = torch.tensor([[7] * length + [0] * (n - length) for length in lengths], device=device)  # (batch, n), pad id 0
src_mask = T.padding_mask(ids, pad_id=0)  # (batch, 1, 1, n): True = real token
print("mask shape:", tuple(src_mask.shape))
batched = layer(batch, src_mask)  # (batch, n, d_model)

# %%
# NBVAL_CHECK_OUTPUT
for i, length in enumerate(lengths):
    same = torch.allclose(batched[i, :length], one_by_one[i], atol=1e-5)
    print(f"sentence {i} (length {length}): batched == alone: {same}")

# %% [markdown]
# And the same statement as an experiment: change what sits at a padded position and nothing real moves.
# Without the mask, it would.

# %%
# NBVAL_CHECK_OUTPUT
changed = batch.clone()
changed[1, 3:] = 100 * torch.randn(n - 3, d_model).to(device)  # garbage where sentence 1 is padded
real = slice(0, 3)
print("with the mask, real positions unchanged:   ",
      torch.allclose(layer(changed, src_mask)[1, real], batched[1, real], atol=1e-5))
print("without the mask, real positions unchanged:",
      torch.allclose(layer(changed)[1, real], layer(batch)[1, real], atol=1e-5))

# %% [markdown]
# (The padded positions' *own* outputs are not meaningful — they are queries too, and still get computed —
# and nothing downstream reads them: the decoder's cross-attention masks them as keys, chapter 08.)
#
# ### The stack
#
# `tfm_lesson.Encoder` holds $N$ independent copies of the layer in an `nn.ModuleList` — *independent*: each
# layer has its own weights — and runs them one after the other, passing the same mask to each. With
# `norm_first=True` it appends the final LayerNorm that pre-norm needs; the paper's post-norm stack has none,
# since every layer already ends with a norm.

# %%
# NBVAL_CHECK_OUTPUT
encoder = T.Encoder(d_model, heads, d_ff, num_layers=3).to(device).eval()
h = batch
for i, enc_layer in enumerate(encoder.layers):
    h = enc_layer(h, src_mask)
    print(f"after layer {i}:", tuple(h.shape))
print("loop == Encoder:", torch.allclose(h, encoder(batch, src_mask)))
print("final norm (post-norm):", encoder.norm)
print("final norm (pre-norm): ", T.Encoder(d_model, heads, d_ff, 3, norm_first=True).norm)
print("parameters per layer:", T.count_parameters(encoder.layers[0]), " stack:", T.count_parameters(encoder))

# %% [markdown]
# ## Check it against PyTorch
#
# `torch.nn.TransformerEncoderLayer` implements the same layer. `tfm_lesson.from_torch` builds the matching
# tfm_lesson module and copies the weights across (torch stores $W^Q, W^K, W^V$ stacked in one
# `in_proj_weight`; we keep them apart, as the paper names them). Two differences in convention need care:
#
# - **mask polarity**: torch's `src_key_padding_mask` is `True` where a key is *blocked*, ours is `True`
#   where a key *may be attended*: pass `~mask` reduced to `(batch, n)`, which `T.torch_mask(src_mask)[:, 0, 0, :]`
#   gives;
# - **the final norm**: `nn.TransformerEncoder(layer, N, norm=...)` takes an optional final LayerNorm, and
#   `nn.Transformer` always gives it one, even in post-norm; `from_torch` sets `final_norm=True` when it is
#   there.
#
# There is a third, subtler one. In eval mode, without gradients, torch takes a **fast path**: a fused C++
# kernel for the whole layer, and — when a padding mask is given to `nn.TransformerEncoder` — it packs the
# batch into a *nested tensor* that drops the padded positions altogether and returns zeros there. Same
# math on real tokens, different numbers on padded ones, and a different kernel. To compare the documented
# computation position by position we switch it off with `torch.backends.mha.set_fastpath_enabled(False)`.
# First, what the fast path does:

# %%
# NBVAL_CHECK_OUTPUT
torch_layer = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.1, batch_first=True)
torch_encoder = nn.TransformerEncoder(torch_layer, num_layers=3, norm=nn.LayerNorm(d_model)).to(device).eval()
ours = T.from_torch(torch_encoder).eval()
print(type(ours).__name__, "with final norm:", ours.norm is not None)

key_padding = T.torch_mask(src_mask)[:, 0, 0, :]  # (batch, n): True = blocked, torch's polarity
with torch.no_grad(), warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch warns that nested tensors are a prototype
    fast = torch_encoder(batch, src_key_padding_mask=key_padding)
    mine = ours(batch, src_mask)
print("fast path, real positions equal: ", torch.allclose(fast[1, :3], mine[1, :3], atol=1e-5))
print("fast path, padded positions zero:", bool((fast[1, 3:] == 0).all()))

# %% [markdown]
# With the fast path off, torch runs the Python-level math, and every position matches, outputs *and*
# gradients:

# %%
# NBVAL_CHECK_OUTPUT
torch.backends.mha.set_fastpath_enabled(False)
x_theirs = batch.clone().requires_grad_()
x_ours = batch.clone().requires_grad_()
theirs_out = torch_encoder(x_theirs, src_key_padding_mask=key_padding)
ours_out = ours(x_ours, src_mask)
print("Encoder == nn.TransformerEncoder:", torch.allclose(ours_out, theirs_out, atol=1e-5))
theirs_out.pow(2).sum().backward()
ours_out.pow(2).sum().backward()
print("input gradients equal:           ", torch.allclose(x_ours.grad, x_theirs.grad, atol=1e-4))
err = (ours_out - theirs_out).abs().max().item()
print("largest difference below 1e-5:   ", err < 1e-5)

# %% [markdown]
# The same for a single layer, post-norm and pre-norm, and back the other way with `T.to_torch`:

# %%
# NBVAL_CHECK_OUTPUT
for norm_first in (False, True):
    theirs = nn.TransformerEncoderLayer(d_model, heads, d_ff, batch_first=True, norm_first=norm_first).to(device).eval()
    mine = T.from_torch(theirs)
    back = T.to_torch(mine).eval()
    with torch.no_grad():
        a = mine(batch, src_mask)
        b = theirs(batch, src_key_padding_mask=key_padding)
        c = back(batch, src_key_padding_mask=key_padding)
    print(f"norm_first={norm_first}: from_torch equal: {torch.allclose(a, b, atol=1e-5)}, "
          f"to_torch equal: {torch.allclose(a, c, atol=1e-5)}")
torch.backends.mha.set_fastpath_enabled(True)  # back to torch's default

# %% [markdown]
# ## See it: attention in every layer of an (untrained) encoder
#
# To look at real tokens we need a vocabulary and embeddings. `tfm_lesson.data.Vocab` maps words to ids
# (ids 0–3 are `<pad>`, `<s>`, `</s>`, `<unk>`), and a small `tfm_lesson.Transformer` supplies embeddings and
# positional encodings in front of its encoder (chapter 09 takes it apart). `T.record_attention` records the
# softmax weights of every attention module during one forward pass, shaped
# $(\text{batch}, h, n_q, n_k)$ per module.

# %%
from tfm_lesson.data import Vocab, pad_sequences

words = "the cat sat on mat dog ran to a red ball".split()
vocab = Vocab(words)
print(len(vocab), "tokens:", vocab.itos)

T.seed_everything(0)
model = T.Transformer(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=32, heads=4, d_ff=64,
                      num_encoder_layers=3, num_decoder_layers=3, dropout=0.1, max_len=64).to(device).eval()

sentences = ["the cat sat on the mat", "a dog ran"]  # the second is padded to the first's length
src = pad_sequences([vocab.encode(s) for s in sentences], vocab.pad_id, device)  # (batch=2, n=7)
tokens = [vocab.itos[i] for i in src[1].tolist()]
print(tuple(src.shape), tokens)

with torch.no_grad(), T.record_attention(model) as record:
    memory = model.encode(src)  # (batch, n, d_model)
maps = torch.stack([record.get(kind="encoder", layer=i)[1] for i in record.layers("encoder")])
print("maps:", tuple(maps.shape), "= (layers, heads, query, key)")

# %% mystnb={"image": {"alt": "Grid of attention heatmaps, three layers by four heads, of an untrained encoder: every head spreads weight over the four real tokens and gives the three padded key columns none."}}
viz.show_heads(maps, x_tokens=tokens, y_tokens=tokens,
               title="Untrained encoder, 'a dog ran </s>' + padding: padded keys get no weight")

# %%
real = int((src[1] != vocab.pad_id).sum())  # real tokens of 'a dog ran </s>'
peak = maps[:, :, :real, :real].amax(-1)  # (layers, heads, real queries): each row's largest weight
for layer in range(peak.size(0)):
    print(f"layer {layer}: largest weight per row: mean {peak[layer].mean():.2f}, highest {peak[layer].max():.2f} "
          f"(uniform over the {real} real keys would be {1 / real:.2f})")

# %% [markdown]
# What to look at:
#
# - the last three **columns** (keys `<pad>`) are empty in every layer and head: the mask at work;
# - the **rows** of the padded queries are not empty — padded positions still attend to the real tokens;
#   nobody reads their outputs;
# - untrained does not mean uniform: the embeddings (scaled to unit variance, chapter 09) pass through random
#   projections, which give scores of order one, and softmax exaggerates their differences. The cell above
#   prints each row's largest weight: in layer 0 its mean is well above the uniform value printed beside it
#   (one weight in four, over the four real keys), and the highest row puts nearly all of its weight on a
#   single key. Deeper layers, whose inputs are already mixtures of several tokens, are flatter (lower printed
#   means), yet still far from uniform. None of these patterns means anything yet; training (chapter 10) turns
#   them into specialised heads, as chapter 12 shows.

# %% [markdown]
# ## Play with it
#
# Type a source sentence (words of the vocabulary above; others become `<unk>`), pick a layer and a head.
# Outside a live notebook you see the default state as a static figure.

# %% mystnb={"image": {"alt": "Explorer picture: one encoder self-attention map of the typed sentence drawn large, and the small maps of all heads of that layer with the chosen head framed."}}
widgets.attention_explorer(model, vocab, vocab, source="the red ball ran to the cat", target="a dog sat")

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: your own encoder layer
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~20 min
#
# Write `MyEncoderLayer(d_model, heads, d_ff, dropout=0.1, norm_first=False)` from `T.MultiHeadAttention`,
# `T.PositionwiseFeedForward`, `T.LayerNorm` and `nn.Dropout`, with the attribute names `self_attn`,
# `feed_forward`, `norm1`, `norm2` (the checker loads tfm_lesson's weights by these names).
# `forward(self, x, mask=None)`: post-norm when `norm_first` is false, pre-norm otherwise. Pitfalls the checker
# recognises: `if mask:` on a tensor, a mask that never reaches `self_attn`, attention's `(output, weights)`
# used as a tensor (take `[0]`), a missing residual, norms in the wrong place, and a residual taken from a copy
# of `x` (outputs fine, gradients wrong).

# %%
class MyEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        ...  # your turn

    def forward(self, x, mask=None):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = T.MultiHeadAttention(d_model, heads, dropout)
        self.feed_forward = T.PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = T.LayerNorm(d_model), T.LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):  # x: (batch, n, d_model)
        attend = lambda h: self.dropout1(self.self_attn(h, h, h, mask)[0])
        transform = lambda h: self.dropout2(self.feed_forward(h))
        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + transform(self.norm2(x))
        x = self.norm1(x + attend(x))
        return self.norm2(x + transform(x))


# %%
# NBVAL_CHECK_OUTPUT
check_encoder_layer(MyEncoderLayer)

# %% [markdown]
# ### Exercise 2: the stack
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `MyEncoder(d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False)` with an `nn.ModuleList`
# called `layers` of `num_layers` **independent** `T.EncoderLayer`s and an attribute `norm`: a final
# `T.LayerNorm` when `norm_first`, else `None`. `forward(self, x, mask=None)` runs the layers in order, each
# on the previous one's output, with the same mask; pass `dropout` and `norm_first` on to every layer.
# (A classic slip: `[layer] * num_layers` repeats *one* layer, so all of them share weights.)

# %%
class MyEncoder(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__()
        ...  # your turn

    def forward(self, x, mask=None):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyEncoder(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(
            T.EncoderLayer(d_model, heads, d_ff, dropout, norm_first) for _ in range(num_layers))
        self.norm = T.LayerNorm(d_model) if norm_first else None

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)  # (batch, n, d_model) all the way
        return x if self.norm is None else self.norm(x)


# %%
# NBVAL_CHECK_OUTPUT
check_encoder(MyEncoder)

# %% [markdown]
# ### Exercise 3: load PyTorch's weights yourself
# **Difficulty** 3/3 · **Importance** 2/3 · **Time** ~20 min
#
# `T.from_torch` did the copying for us. Write `load_encoder_layer(ours, theirs)` that copies the weights of
# `theirs`, an `nn.TransformerEncoderLayer`, into `ours`, a `T.EncoderLayer` of the same sizes, in place.
# Look at `theirs.self_attn.in_proj_weight` (shape $(3 d_\text{model}, d_\text{model})$: which rows are
# $W^Q$?) and `theirs.self_attn.in_proj_bias` (split in three the same way), `theirs.self_attn.out_proj`, `theirs.linear1`, `theirs.linear2`, `theirs.norm1`, `theirs.norm2`,
# and remember that writing into a parameter needs `torch.no_grad()`.

# %%
def load_encoder_layer(ours, theirs):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def load_encoder_layer(ours, theirs):
    d = ours.self_attn.d_model
    w, b = theirs.self_attn.in_proj_weight, theirs.self_attn.in_proj_bias  # (3 d, d), (3 d,)
    pairs = [(ours.self_attn.w_q.weight, w[:d]), (ours.self_attn.w_k.weight, w[d:2 * d]),
             (ours.self_attn.w_v.weight, w[2 * d:]), (ours.self_attn.w_q.bias, b[:d]),
             (ours.self_attn.w_k.bias, b[d:2 * d]), (ours.self_attn.w_v.bias, b[2 * d:]),
             (ours.self_attn.w_o.weight, theirs.self_attn.out_proj.weight),
             (ours.self_attn.w_o.bias, theirs.self_attn.out_proj.bias)]
    for mine, lin in ((ours.feed_forward.w_1, theirs.linear1), (ours.feed_forward.w_2, theirs.linear2)):
        pairs += [(mine.weight, lin.weight), (mine.bias, lin.bias)]
    for mine, norm in ((ours.norm1, theirs.norm1), (ours.norm2, theirs.norm2)):
        pairs += [(mine.weight, norm.weight), (mine.bias, norm.bias)]
    with torch.no_grad():
        for target, source in pairs:
            target.copy_(source)


# %%
# NBVAL_CHECK_OUTPUT
check_load_encoder_layer(load_encoder_layer)

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("07")

# %% [markdown]
# ## Summary
#
# - An encoder layer is self-attention then feed-forward, each as $x + \mathrm{Dropout}(\mathrm{Sublayer}(\cdot))$
#   with a LayerNorm after the sum (post-norm, the paper) or at the branch's entrance (pre-norm, which needs
#   a final norm on the stack). Every step keeps the shape $(\text{batch}, n, d_\text{model})$.
# - Self-attention is the only place where positions talk; with the padding mask a padded batch gives the
#   same numbers on real tokens as encoding each sentence alone.
# - `tfm_lesson.EncoderLayer`/`Encoder` equal `nn.TransformerEncoderLayer`/`nn.TransformerEncoder` in outputs
#   and gradients, given the mask in torch's polarity (`T.torch_mask`), the optional final norm
#   (`final_norm`), and torch's eval fast path switched off.
# - Untrained attention is not uniform (random projections already make some rows peaked), but its patterns
#   mean nothing yet; padded keys get exactly zero.
#
# Next, chapter 08: the decoder, which adds a causal mask and attends to this encoder's memory.


# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 07: The encoder. Version `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
