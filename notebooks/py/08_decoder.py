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
# # 08 · The decoder
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/08_decoder.ipynb)
#
# The encoder of chapter 07 turns the source sentence into a **memory** $m$: one $d_\text{model}$-vector per
# source token. The **decoder** writes the target sentence from it, one token after the other. Its layers
# (paper, section 3.1) look like the encoder's with one sub-layer more, and with a mask that hides the future.
#
# **What you will learn**
# - masked self-attention: why the decoder must not see later target tokens, and the mask that enforces it
#   (causal *and* padding, shape $(\text{batch}, 1, t, t)$);
# - cross-attention: queries from the decoder, keys and values from the memory, weights shaped $(t, s)$;
# - one decoder layer and the stack, proven equal to `nn.TransformerDecoderLayer` / `nn.TransformerDecoder`;
# - a proof that the decoder cannot see the future, and the cross-attention map of source against target.

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
import torch
from torch import nn

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.checks import check_decoder, check_decoder_layer, check_target_mask
from tfm_lesson.data import Vocab, pad_sequences

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## Intuition
#
# At translation time the decoder produces the target left to right: given the source and the target words
# so far, predict the next one. Training does all positions **at once**: the decoder receives the whole
# reference target shifted right by one (`<s> le chat` to predict `le chat </s>`; *teacher forcing*,
# chapter 10), and position $i$ predicts token $i+1$. That is only honest if position $i$ cannot look at
# tokens $i+1, i+2, \dots$ — otherwise it would copy the answer. The **causal mask** removes those keys.
#
# Each decoder layer has three sub-layers, each with residual, dropout and norm as in the encoder:
#
# 1. **masked self-attention** — target positions talk to *earlier* target positions;
# 2. **cross-attention** (the paper's "encoder-decoder attention") — each target position *asks the source*:
#    its query comes from the decoder, the keys and values come from the memory. This is the only road from
#    the source to the output;
# 3. **feed-forward** — each position computes on its own.
#
# ## The math
#
# Target states $x \in \mathbb{R}^{t \times d_\text{model}}$, memory $m \in \mathbb{R}^{s \times d_\text{model}}$
# (post-norm, as in the paper):
#
# $$\begin{aligned}
# z_1 &= \mathrm{LayerNorm}_1\big(x + \mathrm{Dropout}(\mathrm{MultiHead}(x, x, x;\ M_\text{tgt}))\big) && (t, d_\text{model})\\
# z_2 &= \mathrm{LayerNorm}_2\big(z_1 + \mathrm{Dropout}(\mathrm{MultiHead}(z_1, m, m;\ M_\text{src}))\big) && (t, d_\text{model})\\
# y &= \mathrm{LayerNorm}_3\big(z_2 + \mathrm{Dropout}(\mathrm{FFN}(z_2))\big) && (t, d_\text{model})
# \end{aligned}$$
#
# In cross-attention $Q = z_1 W^Q$ is $(t, d_k)$ per head while $K = m W^K$ and $V = m W^V$ are $(s, d_k)$, so
# the weights $\mathrm{softmax}(QK^\top/\sqrt{d_k})$ are $(t, s)$ — one row per target position, one column per
# source token — and the output is $(t, d_k)$ per head, $(t, d_\text{model})$ after $W^O$: the shape of the
# decoder's stream, whatever the source length.
#
# That is the paper's **post-norm** layer: each norm sees the *sum* of a sub-layer's input and output. The
# **pre-norm** layer (`norm_first=True`) normalises the input of each branch instead and leaves the sum alone:
#
# $$\begin{aligned}
# z_1 &= x + \mathrm{Dropout}\big(\mathrm{MultiHead}(\tilde x, \tilde x, \tilde x;\ M_\text{tgt})\big),
#   & \tilde x &= \mathrm{LayerNorm}_1(x)\\
# z_2 &= z_1 + \mathrm{Dropout}\big(\mathrm{MultiHead}(\tilde z_1, m, m;\ M_\text{src})\big),
#   & \tilde z_1 &= \mathrm{LayerNorm}_2(z_1)\\
# y &= z_2 + \mathrm{Dropout}\big(\mathrm{FFN}(\tilde z_2)\big), & \tilde z_2 &= \mathrm{LayerNorm}_3(z_2)
# \end{aligned}$$
#
# Two details matter. In cross-attention only the query $\tilde z_1$ goes through $\mathrm{LayerNorm}_2$; the
# memory $m$ enters as it is (the encoder has already normalised it). And the stream $y$ leaves the layer
# unnormalised, so a pre-norm *stack* ends with one more LayerNorm after its last layer; that final norm
# belongs to the stack (`T.Decoder`'s `norm`), not to the layers.
#
# The masks (True = may attend):
#
# $$M_\text{tgt}[b, i, j] = (j \le i) \wedge (\text{tgt}_{b, j} \ne \text{pad}) \quad (\text{batch}, 1, t, t),
# \qquad M_\text{src}[b, j] = (\text{src}_{b, j} \ne \text{pad}) \quad (\text{batch}, 1, 1, s).$$

# %% [markdown]
# ## Build it
#
# ### The target mask
#
# `T.causal_mask(t)` is the lower triangle $(t, t)$; `T.padding_mask(tgt, pad_id)` is $(\text{batch}, 1, 1, t)$;
# `&` broadcasts them to $(\text{batch}, 1, t, t)$ (`T.combine_masks` does the same, and skips `None`s).

# %%
# NBVAL_CHECK_OUTPUT
tgt = torch.tensor([[1, 5, 6, 7, 2],
                    [1, 8, 2, 0, 0]], device=device)  # (batch=2, t=5); pad id 0
causal = T.causal_mask(tgt.size(1), device)           # (t, t)
padding = T.padding_mask(tgt, pad_id=0)                # (batch, 1, 1, t)
tgt_mask = padding & causal                            # (batch, 1, t, t)
print("causal", tuple(causal.shape), "& padding", tuple(padding.shape), "->", tuple(tgt_mask.shape))
print(tgt_mask[1, 0].int().cpu())  # printed from the CPU: the same text on any device

# %% mystnb={"image": {"alt": "Mask picture of a five-token target: the visible cells form the lower triangle and the two padded key columns are blocked."}}
viz.show_mask(tgt_mask[1, 0], x_tokens=["<s>", "w1", "</s>", "<pad>", "<pad>"],
              y_tokens=["<s>", "w1", "</s>", "<pad>", "<pad>"],
              title="Target mask of the 2nd sentence: lower triangle, padded keys removed")

# %% [markdown]
# Row $i$ lists what position $i$ may read: itself and the positions before it, never a padded one. The
# padded *rows* (queries) still see the real tokens, so no row is empty and no NaN appears.
#
# ### One layer, step by step
#
# As in chapter 07, the parts come from tfm_lesson and we write the forward pass out, with shapes. A source
# of $s = 7$ tokens, a target of $t = 5$: different lengths, so a shape mistake cannot hide.

# %%
d_model, heads, d_ff = 32, 4, 64
layer = T.DecoderLayer(d_model, heads, d_ff, dropout=0.1).to(device).eval()  # holds the parts we use by hand

src = torch.tensor([[4, 5, 6, 7, 8, 9, 2],
                    [4, 9, 2, 0, 0, 0, 0]], device=device)  # (batch, s=7)
memory = torch.randn(2, src.size(1), d_model).to(device)  # stands in for the encoder's output (drawn on the CPU)
memory_mask = T.padding_mask(src, pad_id=0)              # (batch, 1, 1, s)
x = torch.randn(2, tgt.size(1), d_model).to(device)       # target states (batch, t, d_model)


def decoder_layer_by_hand(x, memory, tgt_mask, memory_mask, show=False):
    say = print if show else (lambda *a: None)
    say("x (target)                 ", tuple(x.shape), "   memory", tuple(memory.shape))
    a = layer.self_attn(x, x, x, tgt_mask)[0]                         # masked self-attention
    z1 = layer.norm1(x + layer.dropout1(a))
    say("z1 = LN1(x + SelfAttn)     ", tuple(z1.shape))
    c, w = layer.cross_attn(z1, memory, memory, memory_mask, need_weights=True)  # Q: decoder; K, V: memory
    say("cross weights (b,h,t,s)    ", tuple(w.shape))
    z2 = layer.norm2(z1 + layer.dropout2(c))
    say("z2 = LN2(z1 + CrossAttn)   ", tuple(z2.shape))
    y = layer.norm3(z2 + layer.dropout3(layer.feed_forward(z2)))
    say("y = LN3(z2 + FFN)          ", tuple(y.shape))
    return y


y = decoder_layer_by_hand(x, memory, tgt_mask, memory_mask, show=True)

# %%
# NBVAL_CHECK_OUTPUT
print("by hand == tfm_lesson.DecoderLayer:", torch.allclose(y, layer(x, memory, tgt_mask, memory_mask), atol=1e-6))

# %% [markdown]
# ### The slow way and the parallel way
#
# The slow, obvious decoder is the one used at translation time: to get the state of position $i$, run the
# layer on the prefix $x_{0..i}$ alone — no causal mask needed, the future simply is not there — and keep the
# last row. The parallel way runs all $t$ positions in one call with the causal mask. If the mask is right,
# the two agree at every position: this is why a Transformer trains on a whole sentence per step yet
# translates token by token.

# %%
# NBVAL_CHECK_OUTPUT
slow = torch.stack([layer(x[:, : i + 1], memory, None, memory_mask)[:, i] for i in range(x.size(1))], dim=1)
fast = layer(x, memory, causal, memory_mask)  # (batch, t, d_model)
print("prefix by prefix == one pass with the causal mask:", torch.allclose(slow, fast, atol=1e-5))

# %% [markdown]
# ### The decoder cannot see the future
#
# The same fact as an experiment: change the **last** target token and look at the outputs of the earlier
# positions. With the causal mask they do not move; without it, every position changes.

# %%
# NBVAL_CHECK_OUTPUT
x_changed = x.clone()
x_changed[:, -1] = torch.randn(2, d_model).to(device)  # a different last target token
with_mask = layer(x_changed, memory, causal, memory_mask)
without = layer(x_changed, memory, None, memory_mask)
print("causal: earlier positions unchanged:   ", torch.allclose(with_mask[:, :-1], fast[:, :-1], atol=1e-6))
print("no mask: earlier positions unchanged:  ",
      torch.allclose(without[:, :-1], layer(x, memory, None, memory_mask)[:, :-1], atol=1e-6))

# %% [markdown]
# ### The stack
#
# `T.Decoder` runs $N$ independent decoder layers; **every layer attends to the same memory**, the encoder's
# final output (not to the output of the encoder layer of the same depth).

# %%
# NBVAL_CHECK_OUTPUT
decoder = T.Decoder(d_model, heads, d_ff, num_layers=3).to(device).eval()
h = x
for i, dec_layer in enumerate(decoder.layers):
    h = dec_layer(h, memory, tgt_mask, memory_mask)  # same memory each time
    print(f"after layer {i}:", tuple(h.shape))
print("loop == Decoder:", torch.allclose(h, decoder(x, memory, tgt_mask, memory_mask)))
print("parameters per decoder layer:", T.count_parameters(decoder.layers[0]),
      " per encoder layer:", T.count_parameters(T.EncoderLayer(d_model, heads, d_ff)))

# %% [markdown]
# A decoder layer has one attention block and one norm more than an encoder layer:
# $4 d_\text{model}^2 + 4 d_\text{model} + 2 d_\text{model} = 4{,}288$ parameters more at $d_\text{model}=32$.
#
# ## Check it against PyTorch
#
# A `nn.TransformerDecoderLayer` instance, called as `layer(x, memory, tgt_mask=..., memory_mask=...,
# tgt_key_padding_mask=..., memory_key_padding_mask=...)`, splits the masks differently and uses the opposite polarity (True = blocked):
#
# | ours (True = may attend) | torch (True = blocked) |
# |---|---|
# | causal part of `tgt_mask` $(t, t)$ | `tgt_mask = T.torch_mask(causal)` |
# | padding part of `tgt_mask` | `tgt_key_padding_mask = ~(tgt != pad)`, $(\text{batch}, t)$ |
# | `memory_mask` $(\text{batch}, 1, 1, s)$ | `memory_key_padding_mask`, $(\text{batch}, s)$ |
#
# As in chapter 07 we switch torch's eval fast path off so that both sides run the documented math.

# %%
# NBVAL_CHECK_OUTPUT
torch.backends.mha.set_fastpath_enabled(False)
torch_mask_args = dict(tgt_mask=T.torch_mask(causal), tgt_key_padding_mask=tgt == 0,
                       memory_key_padding_mask=src == 0)
for norm_first in (False, True):
    theirs = nn.TransformerDecoderLayer(d_model, heads, d_ff, batch_first=True, norm_first=norm_first)
    theirs = theirs.to(device).eval()
    ours = T.from_torch(theirs)
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours = ours(x_ours, memory, tgt_mask, memory_mask)
    out_theirs = theirs(x_theirs, memory, **torch_mask_args)
    out_ours.pow(2).sum().backward()
    out_theirs.pow(2).sum().backward()
    print(f"norm_first={norm_first}: outputs equal {torch.allclose(out_ours, out_theirs, atol=1e-5)}, "
          f"input gradients equal {torch.allclose(x_ours.grad, x_theirs.grad, atol=1e-4)}")

# %% [markdown]
# And the stack. Which stacks end with a final LayerNorm? In the paper's design (post-norm) none does: every
# layer already ends with a norm, so the stack's output is normalised. A final norm is needed only by a
# pre-norm stack, whose stream leaves the last layer unnormalised; that is what `T.Decoder` does by default
# (`norm` exists only when `norm_first`). PyTorch differs: `nn.TransformerDecoder` takes an optional `norm`,
# and `nn.Transformer` *always* passes one, post-norm or not, an extra LayerNorm on top of the paper's design.
# `from_torch` keeps whatever the torch module has: a final norm becomes `final_norm=True`, so the converted
# stack computes exactly what torch's does.

# %%
# NBVAL_CHECK_OUTPUT
torch_decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(d_model, heads, d_ff, batch_first=True),
                                      num_layers=3, norm=nn.LayerNorm(d_model)).to(device).eval()
ours = T.from_torch(torch_decoder)
with torch.no_grad():
    same = torch.allclose(ours(x, memory, tgt_mask, memory_mask), torch_decoder(x, memory, **torch_mask_args), atol=1e-5)
print(type(ours).__name__, "final norm:", ours.norm is not None, " equal to nn.TransformerDecoder:", same)
torch.backends.mha.set_fastpath_enabled(True)  # back to torch's default

# %% [markdown]
# ## See it: the cross-attention map
#
# A small untrained `T.Transformer` over a tiny vocabulary: encode a source, decode a target, and record every
# attention map with `T.record_attention`. The model returns **logits**, one raw score per vocabulary token at
# each target position, shaped $(\text{batch}, t, \text{vocab})$: a softmax over the last axis would turn them
# into next-token probabilities (chapter 09 builds this last step, the generator). The cross-attention weights of a layer are
# $(\text{batch}, h, t, s)$: **target tokens on the y axis, source tokens on the x axis**. After training on
# translation (chapter 11) such a map becomes an alignment: each target word looks at the source word it
# translates.

# %%
vocab = Vocab("the cat sat on mat a dog ran le chat est assis sur tapis un chien".split())
T.seed_everything(0)
model = T.Transformer(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=32, heads=4, d_ff=64,
                      num_encoder_layers=2, num_decoder_layers=2, max_len=64).to(device).eval()
source, target = "the cat sat on the mat", "le chat est assis sur le tapis"
src_ids = torch.tensor([vocab.encode(source)], device=device)                  # (1, s): ... </s>
tgt_ids = torch.tensor([vocab.encode(target, bos=True, eos=False)], device=device)  # (1, t): <s> ...
src_tokens = vocab.tokenize(source) + ["</s>"]
tgt_tokens = ["<s>"] + vocab.tokenize(target)
with torch.no_grad(), T.record_attention(model) as record:
    logits = model(src_ids, tgt_ids)  # (1, t, vocab)
cross = record.get(kind="cross", layer=0)  # (batch, heads, t, s)
print("logits", tuple(logits.shape), " cross-attention", tuple(cross.shape))
mean_map = cross[0].mean(0)  # (t, s): the mean of the heads, drawn below
print(f"mean of the heads: weights from {mean_map.min():.2f} to {mean_map.max():.2f} "
      f"(uniform over the {cross.size(-1)} source tokens: {1 / cross.size(-1):.2f}); "
      f"single heads reach {cross.max():.2f}")

# %% mystnb={"image": {"alt": "Heatmap of untrained cross-attention averaged over heads: each target token spreads its weight fairly evenly over the source tokens."}}
viz.show_attention(cross[0].mean(0), x_tokens=src_tokens, y_tokens=tgt_tokens, xlabel="source (memory)",
                   ylabel="target (decoder)", title="Cross-attention, layer 0, mean of heads (untrained)")

# %% [markdown]
# Every row sums to 1 over the source: each target position distributes its attention over the $s = 7$
# source tokens. Untrained and averaged over the heads, the rows are blurry (the cell before the figure prints
# the smallest and the largest weight, on either side of the uniform value it prints beside them); single
# heads are more peaked (the last value it prints), as in chapter 07, but their peaks are accidents of the random
# weights. There is no alignment yet — the diagonal-ish pattern a
# trained model shows for "le chat" ↔ "the cat" has to be learned. Compare with the decoder's
# *self*-attention of the same pass: its upper triangle is exactly zero, the causal mask at work.

# %% mystnb={"image": {"alt": "Row of decoder self-attention heatmaps, one per head: every weight above the diagonal is zero, so each token attends only to itself and earlier tokens."}}
viz.show_heads(record.get(kind="decoder", layer=0)[0], x_tokens=tgt_tokens, y_tokens=tgt_tokens,
               title="Decoder self-attention, layer 0: nothing above the diagonal")

# %% [markdown]
# ## Play with it
#
# The explorer starts on **cross**-attention: type a source and a target (words of the small vocabulary;
# others become `<unk>`), then pick a layer and a head, or switch the kind to the encoder's or the decoder's
# self-attention. Leave the target empty and the (untrained, so meaningless) model's own output is used, picking the likeliest token at each step (greedy decoding, chapter 10).
# Outside a live notebook you see the starting state as a static figure.

# %% mystnb={"image": {"alt": "Explorer picture on cross-attention: one head's map between target and source tokens drawn large, and the small maps of all heads of that layer."}}
explorer = widgets.attention_explorer(model, vocab, vocab, source=source, target=target)
explorer.controls["kind"].value = "cross"  # start on cross-attention
explorer

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: the decoder's self-attention mask
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `target_mask(tgt, pad_id)`: `tgt` is $(\text{batch}, t)$ token ids; return a **boolean** mask, True =
# may attend, broadcastable to $(\text{batch}, 1, t, t)$, in which query $i$ sees key $j$ only if $j \le i$
# and token $j$ is not padding. Use only comparisons, `torch.ones(t, t, dtype=torch.bool,
# device=tgt.device).tril()` and `&`. Both arguments of that `torch.ones` matter: `&` combines boolean tensors
# only (`torch.ones` gives floats by default), and a mask built on the CPU cannot meet a `tgt` that lives on a
# GPU. The checker also runs your function on a `tgt` placed on another device to make sure.

# %%
def target_mask(tgt, pad_id):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def target_mask(tgt, pad_id):
    t = tgt.size(1)
    causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).tril()  # (t, t): j <= i
    keys = (tgt != pad_id)[:, None, None, :]  # (batch, 1, 1, t): real keys
    return keys & causal  # (batch, 1, t, t)


# %%
# NBVAL_CHECK_OUTPUT
check_target_mask(target_mask)

# %% [markdown]
# ### Exercise 2: your own decoder layer
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~20 min
#
# Write `MyDecoderLayer(d_model, heads, d_ff, dropout=0.1, norm_first=False)` from tfm_lesson's parts:
# two `T.MultiHeadAttention(d_model, heads, dropout)` called `self_attn` and `cross_attn` (the third argument
# drops out attention weights, one of the sites in chapter 07's table), a
# `T.PositionwiseFeedForward(d_model, d_ff, dropout)` called `feed_forward`, three `T.LayerNorm(d_model)`
# called `norm1`, `norm2`, `norm3` (the checker loads tfm_lesson's weights by these names), and three
# `nn.Dropout(dropout)` for the sub-layers' outputs (dropout has no weights: name them as you like). Then
# `forward(self, x, memory, tgt_mask=None, memory_mask=None)`: masked self-attention, cross-attention
# (which argument is the query?), feed-forward; post-norm unless `norm_first` (the two sets of equations
# above). `T.MultiHeadAttention` returns `(output, weights)`: take `[0]`. The checker uses a source longer
# than the target, changes future target positions, compares gradients, and names the classic slips (masks
# swapped, a missing residual, the memory normalised in pre-norm, ...).

# %%
class MyDecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        ...  # your turn

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyDecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = T.MultiHeadAttention(d_model, heads, dropout)
        self.cross_attn = T.MultiHeadAttention(d_model, heads, dropout)
        self.feed_forward = T.PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (T.LayerNorm(d_model) for _ in range(3))
        self.drop1, self.drop2, self.drop3 = (nn.Dropout(dropout) for _ in range(3))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):  # x (b, t, d), memory (b, s, d)
        self_attend = lambda h: self.drop1(self.self_attn(h, h, h, tgt_mask)[0])
        cross_attend = lambda h: self.drop2(self.cross_attn(h, memory, memory, memory_mask)[0])  # (b, t, d)
        transform = lambda h: self.drop3(self.feed_forward(h))
        if self.norm_first:
            x = x + self_attend(self.norm1(x))
            x = x + cross_attend(self.norm2(x))
            return x + transform(self.norm3(x))
        x = self.norm1(x + self_attend(x))
        x = self.norm2(x + cross_attend(x))
        return self.norm3(x + transform(x))


# %%
# NBVAL_CHECK_OUTPUT
check_decoder_layer(MyDecoderLayer)

# %% [markdown]
# ### Exercise 3: the decoder stack
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `MyDecoder(d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False)` with `layers`, an
# `nn.ModuleList` of `num_layers` independent `T.DecoderLayer(d_model, heads, d_ff, dropout, norm_first)`
# (pass `dropout` and `norm_first` to every layer), and `norm`: a final `T.LayerNorm(d_model)` when
# `norm_first`, else `None` (the paper's post-norm stack has none, as explained above);
# `forward(self, x, memory, tgt_mask=None, memory_mask=None)` feeds each layer the previous layer's output
# and the *same* memory and masks.

# %%
class MyDecoder(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__()
        ...  # your turn

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class MyDecoder(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_layers, dropout=0.1, norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(
            T.DecoderLayer(d_model, heads, d_ff, dropout, norm_first) for _ in range(num_layers))
        self.norm = T.LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)  # (batch, t, d_model)
        return x if self.norm is None else self.norm(x)


# %%
# NBVAL_CHECK_OUTPUT
check_decoder(MyDecoder)

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("08")

# %% [markdown]
# ## Summary
#
# - A decoder layer is masked self-attention, cross-attention and feed-forward, each wrapped as in the
#   encoder; its stream keeps the shape $(\text{batch}, t, d_\text{model})$ whatever the source length $s$.
# - The target mask is causal *and* padding, $(\text{batch}, 1, t, t)$; thanks to it, one parallel pass equals
#   decoding prefix by prefix, and a later target token cannot change an earlier output.
# - In cross-attention the queries come from the decoder and the keys and values from the memory; its
#   weights are $(t, s)$: the map from target tokens to source tokens.
# - `T.DecoderLayer`/`T.Decoder` equal `nn.TransformerDecoderLayer`/`nn.TransformerDecoder` in outputs and
#   gradients once masks are converted to torch's polarity and layout.
#
# Next, chapter 09 puts embeddings, positional encoding, encoder, decoder and generator together.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 08: The decoder. Version `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
