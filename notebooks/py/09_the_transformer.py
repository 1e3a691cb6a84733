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
# # 09 · The Transformer
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/09_the_transformer.ipynb)
#
# Every part is built and proven: attention (01–03), positional encoding (04), norm and residuals (05),
# feed-forward (06), encoder (07), decoder (08). This chapter adds the last pieces — token embeddings, their
# $\sqrt{d_\text{model}}$ scale, weight sharing, the generator, initialisation, masks from pad ids — and
# assembles the model of figure 1 of the paper.
#
# **What you will learn**
# - a reason to multiply embeddings by $\sqrt{d_\text{model}}$ (the paper states the factor, not why), measured
#   against the positional encoding;
# - how one matrix serves as source embedding, target embedding and generator (paper, section 3.4);
# - the generator: a linear layer and a (log-)softmax over the vocabulary;
# - `T.TransformerConfig` / `T.Transformer`, one forward pass followed shape by shape;
# - the base model's parameter count, against the paper's 65 million (table 3), by counting and by formula.

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

import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.checks import check_generator, check_parameter_count, check_scaled_embedding, check_tie_weights
from tfm_lesson.data import Vocab, pad_sequences
from tfm_lesson.look.shapes import trace_shapes

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## Intuition
#
# Follow one sentence pair through figure 1 of the paper:
#
# 1. **source ids** $(\text{batch}, s)$ → look up a learned vector per token → scale by $\sqrt{d_\text{model}}$ →
#    add the positional encoding → dropout → **encoder** → memory $(\text{batch}, s, d_\text{model})$;
# 2. **target ids** (shifted right, starting with `<s>`) $(\text{batch}, t)$ → the same embedding steps →
#    **decoder**, attending to the memory → $(\text{batch}, t, d_\text{model})$;
# 3. **generator**: a linear map to the vocabulary and a softmax → a distribution over the next token at
#    every target position, $(\text{batch}, t, V)$.
#
# Only steps 1 and 3 are new. They add many parameters, though: a vocabulary of 37,000 tokens at
# $d_\text{model} = 512$ is a $37{,}000 \times 512$ matrix, 19 million numbers (30% of the base model even
# when shared). The paper uses one matrix for all three roles, following Press & Wolf (2017), who found that
# tying the input and output embeddings improves language models and saves parameters.
#
# ## The math (paper, sections 3.4 and 3.5)
#
# With an embedding matrix $E \in \mathbb{R}^{V \times d_\text{model}}$ and the sinusoidal table
# $PE \in \mathbb{R}^{\text{max\_len} \times d_\text{model}}$, the input of each stack at position $i$ is
#
# $$x_i = \sqrt{d_\text{model}}\; E_{\text{id}_i} + PE_i, \qquad x \in \mathbb{R}^{n \times d_\text{model}}.$$
#
# "In our model, we share the same weight matrix between the two embedding layers and the pre-softmax linear
# transformation … In the embedding layers, we multiply those weights by $\sqrt{d_\text{model}}$." The
# generator is that pre-softmax linear transformation with the same $E$:
#
# $$P(y_{i+1} \mid y_{\le i}, \text{source}) = \mathrm{softmax}\big(h_i E^\top\big), \qquad h \in \mathbb{R}^{t \times d_\text{model}},\ hE^\top \in \mathbb{R}^{t \times V}.$$

# %% [markdown]
# ## Build it
#
# ### Why $\sqrt{d_\text{model}}$: compare the scales
#
# The paper gives no reason for the factor (section 3.4 only states it) and does not say how it initialises the
# embeddings. One reading, from tensor2tensor (the authors' code), whose initialisation the package follows:
# `T.Transformer.reset_parameters` draws $E$ from $\mathcal{N}(0, 1/d_\text{model})$, so a token's vector has
# norm about 1. The positional encoding is made of sines and cosines: each entry has root-mean-square
# $1/\sqrt{2}$, so each position's vector has norm $\sqrt{d_\text{model}/2} = 16$ at $d_\text{model} = 512$.
# Added as they are, the position would drown the word, 16 to 1. Multiplied by $\sqrt{d_\text{model}}$, each
# embedding entry has standard deviation 1 and the vector norm $\sqrt{512} \approx 22.6$: the same order as
# the position, so the sum carries both. (With PyTorch's default $\mathcal{N}(0, 1)$ initialisation of
# `nn.Embedding` the scale would instead *blow up* the word, to norm $512$: scale and init go together.)

# %%
# NBVAL_CHECK_OUTPUT
d_model, vocab_size = 512, 1000
T.seed_everything(0)
E = torch.randn(vocab_size, d_model) * d_model ** -0.5  # N(0, 1/d_model), as reset_parameters draws it
pe = T.sinusoidal_table(100, d_model)                   # (100 positions, d_model)
scales = {
    "embedding": E.norm(dim=1).mean().item(),
    "embedding x sqrt(d)": (E * math.sqrt(d_model)).norm(dim=1).mean().item(),
    "positional": pe.norm(dim=1).mean().item(),
}
for name, value in scales.items():
    print(f"{name:20s} mean vector norm {value:5.1f}")

# %% mystnb={"image": {"alt": "Bar chart of the mean vector norm of raw embeddings, embeddings scaled by sqrt(d_model) and positional encodings: the raw embeddings are tiny beside the encodings, the scaled ones of the same size."}}
viz.plot_bars({k: round(v, 1) for k, v in scales.items()}, ylabel="mean norm of a position's vector",
              title="d_model = 512: scaled embeddings match the positional encoding's size")

# %% [markdown]
# ### Shared embeddings and the tied generator
#
# `nn.Embedding(V, d_model).weight` is $(V, d_\text{model})$, and so is `nn.Linear(d_model, V).weight` (a
# linear layer stores $(\text{out}, \text{in})$). Tying is therefore one assignment of the **same Parameter
# object** — not a copy: one tensor, one gradient that sums both uses, counted once.

# %%
# NBVAL_CHECK_OUTPUT
V, d = 12, 8
embedding = nn.Embedding(V, d)
generator = nn.Linear(d, V, bias=False)
generator.weight = embedding.weight  # tie: the very same Parameter
both = nn.ModuleDict({"embedding": embedding, "generator": generator})
print("same object:", generator.weight is embedding.weight, " parameters counted:", T.count_parameters(both), "=", V * d)
h = torch.randn(1, 3, d)  # decoder states (batch, t, d)
print("generator(h) == h @ E^T:", torch.allclose(generator(h), h @ embedding.weight.T))

# %% [markdown]
# A vector of the decoder is thus scored against every token's embedding by a dot product: the next token is
# the one whose (input) embedding best matches the decoder's state. Sharing the source and target embedding
# as well requires one joint vocabulary — the paper uses byte-pair encoding (word pieces, chapter 14) over English and German together;
# `T.TransformerConfig(share_embeddings=True)` checks that `src_vocab_size == tgt_vocab_size`.
#
# ### The generator: logits, softmax, log-softmax
#
# The paper's generator ends in a softmax. In code the softmax is usually left to the loss: the generator of
# `T.Transformer` returns **logits** $hE^\top$ (the raw scores before the softmax), and `F.cross_entropy` (the
# training loss of chapter 10: the average of $-\log p$ of the right token) applies log-softmax itself, in one
# numerically stable step. A stand-alone generator that returns probabilities should return their *logarithm*
# (`log_softmax`): it never underflows to $\log 0 = -\infty$ the way `softmax(...).log()` does for unlikely
# tokens.

# %%
# NBVAL_CHECK_OUTPUT
logits = torch.tensor([[0.0, 5.0, 120.0]])  # one position, three tokens; one score is very large
print("softmax().log():", logits.softmax(-1).log().tolist())
print("log_softmax():  ", logits.log_softmax(-1).tolist())
target = torch.tensor([2])
print("cross_entropy(logits) == nll_loss(log_softmax):",
      torch.allclose(F.cross_entropy(logits, target), F.nll_loss(logits.log_softmax(-1), target)))

# %% [markdown]
# ### Initialisation
#
# `reset_parameters` uses Xavier-uniform (Glorot and Bengio, 2010) for every weight matrix of the two stacks,
# as tensor2tensor does: for a layer with
# $n_\text{in}$ inputs and $n_\text{out}$ outputs it draws from $U(-a, a)$ with
# $a = \sqrt{6 / (n_\text{in} + n_\text{out})}$, so the variance is $2/(n_\text{in} + n_\text{out})$ and, for a
# square $W^Q$, the output of a layer has the variance of its input. Biases start at zero; embeddings at
# $\mathcal{N}(0, 1/d_\text{model})$, which the $\sqrt{d_\text{model}}$ scale turns into unit variance. Layer-norm
# gains and shifts are one-dimensional, so Xavier skips them: they stay 1 and 0.

# %%
# NBVAL_CHECK_OUTPUT
T.seed_everything(0)
small = T.Transformer(src_vocab_size=100, tgt_vocab_size=100, d_model=64, heads=4, d_ff=128, num_encoder_layers=1,
                      num_decoder_layers=1)
layer0 = small.encoder.layers[0]
print("std(W^Q) * sqrt((64 + 64) / 2):  ", round(layer0.self_attn.w_q.weight.std().item() * math.sqrt(64), 1))
print("std(W_1) * sqrt((64 + 128) / 2): ", round(layer0.feed_forward.w_1.weight.std().item() * math.sqrt(96), 1))
print("std(E) * sqrt(d_model):          ", round(small.src_embed.weight.std().item() * math.sqrt(64), 1))
print("linear biases all zero:          ", all(bool((m.bias == 0).all()) for m in small.modules()
                                               if isinstance(m, nn.Linear) and m.bias is not None))
print("layer-norm gains all one:        ", bool((layer0.norm1.weight == 1).all()))
del small

# %% [markdown]
# ### Masks from pad ids
#
# The model builds its masks from the ids: `make_src_mask(src)` is the padding mask $(\text{batch}, 1, 1, s)$,
# used by the encoder's self-attention and by the decoder's cross-attention; `make_tgt_mask(tgt)` is padding
# and causal, $(\text{batch}, 1, t, t)$ (chapter 08).
#
# ### The whole forward pass, by hand
#
# A small configuration keeps everything fast: the shapes are what matter.

# %%
vocab = Vocab("the cat sat on mat a dog ran le chat est assis sur tapis un chien a couru".split())
config = T.TransformerConfig(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=32, heads=4, d_ff=64,
                             num_encoder_layers=2, num_decoder_layers=2, max_len=64)
T.seed_everything(0)
model = T.Transformer(config).to(device).eval()
print(config)

src = pad_sequences([vocab.encode("the cat sat on the mat"), vocab.encode("a dog ran")], vocab.pad_id, device)
tgt = pad_sequences([vocab.encode("le chat est assis sur le tapis", bos=True, eos=False),
                     vocab.encode("un chien a couru", bos=True, eos=False)], vocab.pad_id, device)
print("src", tuple(src.shape), " tgt", tuple(tgt.shape))


# %%
def forward_by_hand(model, src, tgt, show=False):
    say = print if show else (lambda *a: None)
    c = model.config
    src_mask = model.make_src_mask(src)                                  # (batch, 1, 1, s)
    tgt_mask = model.make_tgt_mask(tgt)                                  # (batch, 1, t, t)
    say("src_mask", tuple(src_mask.shape), " tgt_mask", tuple(tgt_mask.shape))
    x = model.src_embed(src) * math.sqrt(c.d_model)                      # (batch, s, d_model)
    x = model.dropout(model.positional(x))                               # + PE[:s]
    memory = model.encoder(x, src_mask)                                  # (batch, s, d_model)
    say("memory  ", tuple(memory.shape))
    y = model.dropout(model.positional(model.tgt_embed(tgt) * math.sqrt(c.d_model)))  # (batch, t, d_model)
    h = model.decoder(y, memory, tgt_mask, src_mask)                     # (batch, t, d_model)
    say("decoder ", tuple(h.shape))
    logits = model.generator(h)                                          # (batch, t, V) = h @ E^T
    say("logits  ", tuple(logits.shape))
    return logits


logits = forward_by_hand(model, src, tgt, show=True)

# %%
# NBVAL_CHECK_OUTPUT
print("by hand == model(src, tgt):", torch.allclose(logits, model(src, tgt), atol=1e-6))
print("one matrix, three roles:", model.src_embed.weight is model.tgt_embed.weight is model.generator.weight)
log_probs = model(src, tgt).log_softmax(-1)  # (batch, t, V)
print("each position's distribution sums to 1:",
      torch.allclose(log_probs.exp().sum(-1).cpu(), torch.ones(tgt.shape)))  # compared on the CPU

# %% [markdown]
# ## Check it
#
# The stacks equal `nn.Transformer` (chapters 07–08 proved the layers); `T.to_torch(model)` gives the
# `nn.Transformer` of the two stacks — torch has no embeddings or generator, so we feed it our embedded inputs
# and apply our generator to its output. `nn.Transformer` always ends each stack with a LayerNorm, so we build
# the model with `final_norm=True` for this comparison, and switch torch's eval fast path off as before.

# %%
# NBVAL_CHECK_OUTPUT
torch.backends.mha.set_fastpath_enabled(False)
T.seed_everything(1)
ours = T.Transformer(config, final_norm=True).to(device).eval()
theirs = T.to_torch(ours).eval()
with torch.no_grad():
    emb = lambda ids, table: ours.positional(table(ids) * math.sqrt(config.d_model))  # (batch, len, d_model)
    hidden = theirs(emb(src, ours.src_embed), emb(tgt, ours.tgt_embed),
                    tgt_mask=T.torch_mask(T.causal_mask(tgt.size(1), device)),
                    src_key_padding_mask=src == vocab.pad_id, tgt_key_padding_mask=tgt == vocab.pad_id,
                    memory_key_padding_mask=src == vocab.pad_id)
    same = torch.allclose(ours.generator(hidden), ours(src, tgt), atol=1e-5)
torch.backends.mha.set_fastpath_enabled(True)
print(type(theirs).__name__, "+ our embeddings and generator == T.Transformer:", same)

# %% [markdown]
# And the two properties the masks promise, on the whole model: padding in the source changes nothing, and
# a later target token does not change earlier predictions.

# %%
# NBVAL_CHECK_OUTPUT
src2 = src.clone()
src2[1, 4:] = vocab.encode("cat cat", eos=False)[0]  # real tokens where sentence 1 was padded ...
src2_mask = model.make_src_mask(src)                 # ... but still masked as padding
print("source padding invisible:",
      torch.allclose(model(src, tgt)[1], model(src2, tgt, src_mask=src2_mask)[1], atol=1e-5))
tgt2 = tgt.clone()
tgt2[0, -1] = vocab.encode("chien", eos=False)[0]
print("future target invisible: ", torch.allclose(model(src, tgt)[0, :-1], model(src, tgt2)[0, :-1], atol=1e-5))

# %% [markdown]
# ## See it: one forward pass, module by module
#
# `tfm_lesson.look.shapes.trace_shapes` runs the model once with hooks on every sub-module down to `max_depth` and
# lists what went in and came out. Read it top to bottom: it is figure 1 of the paper as a table.

# %%
# NBVAL_CHECK_OUTPUT
trace = trace_shapes(model, src, tgt, max_depth=2)
print(trace)

# %% [markdown]
# Things to notice: `src_embed` is called twice (as `tgt_embed` it is the same module); `positional` and
# `dropout` are called twice too, once per stack; every encoder layer maps $(2, 7, 32) \to (2, 7, 32)$ and
# every decoder layer takes $(2, 8, 32)$ and the memory $(2, 7, 32)$; the generator alone changes the last
# dimension, from $d_\text{model} = 32$ to $V = 21$; the masks travel as booleans.
#
# ## The base model: 65 million parameters?
#
# Table 3 of the paper lists the base model ($N = 6$, $d_\text{model} = 512$, $d_{ff} = 2048$, $h = 8$) at
# $65 \times 10^6$ parameters. `T.TransformerConfig()` defaults to exactly that model with a shared vocabulary
# of 37,000 tokens (the paper's "about 37000" byte-pair tokens for English–German). Building it needs about
# 250 MB of memory (63 million float32 numbers of 4 bytes each); we count and let it go.

# %%
# NBVAL_CHECK_OUTPUT
base = T.Transformer()  # the base model, untrained
table = T.parameter_table(base)
total = T.count_parameters(base)
del base
for name, n in table.items():
    print(f"{name:10s} {n:>12,}")
print(f"paper: 65,000,000   ours: {total:,}   difference: {100 * (total - 65e6) / 65e6:+.1f} %")

# %% mystnb={"image": {"alt": "Bar chart of the base model's parameters: the shared embedding, the encoder, the decoder (the largest part) and the total."}}
viz.plot_bars({"embedding (shared, = generator)": table["src_embed"], "encoder (6 layers)": table["encoder"],
               "decoder (6 layers)": table["decoder"], "total": table["total"]},
              ylabel="parameters", title="Base model: the shared embedding is almost a third of 63.1M")

# %% [markdown]
# ### The count by formula
#
# Every piece follows from the shapes (with biases; $d = d_\text{model}$):
#
# | piece | formula | base model |
# |---|---|---|
# | multi-head attention | $4d^2 + 4d$ ($W^Q, W^K, W^V, W^O$ and biases) | 1,050,624 |
# | feed-forward | $2 d\, d_{ff} + d_{ff} + d$ | 2,099,712 |
# | layer norm | $2d$ | 1,024 |
# | encoder layer | attention + FFN + 2 norms | 3,152,384 |
# | decoder layer | 2 attentions + FFN + 3 norms | 4,204,032 |
# | shared embedding = generator | $V d$ | 18,944,000 |
#
# so the total is $6 \cdot 3{,}152{,}384 + 6 \cdot 4{,}204{,}032 + 37{,}000 \cdot 512 = 63{,}082{,}496$.

# %%
# NBVAL_CHECK_OUTPUT
d, d_ff, N, V = 512, 2048, 6, 37000
attention = 4 * d * d + 4 * d
ffn = 2 * d * d_ff + d_ff + d
norm = 2 * d
encoder_layer = attention + ffn + 2 * norm
decoder_layer = 2 * attention + ffn + 3 * norm
formula = N * encoder_layer + N * decoder_layer + V * d
print(f"formula: {formula:,}   counted: {total:,}   equal: {formula == total}")
print(f"without sharing or tying: {formula + 2 * V * d:,}")

# %% [markdown]
# Our 63.1M is 3 % under the paper's 65M. The paper rounds and does not give its exact vocabulary size:
# 1.9M parameters are $1.9\text{M} / 512 \approx 3{,}700$ vocabulary rows, so a vocabulary nearer 40,700
# tokens would give 65.0M. What the count does settle: without sharing and tying, the model would have
# 101M parameters — so the paper's 65M includes the three-way shared embedding of section 3.4. The
# embedding matrix alone is 30 % of the model; the decoder, with its extra attention per layer, is 40 %.
#
# ## Play with it
#
# The assembled model, its every attention map on sentences you type. Change `config` above (more layers,
# more heads, `norm_first=True`), re-run, and see the maps and the trace change. Outside a live notebook the
# figure shows the default state.

# %% mystnb={"image": {"alt": "Explorer picture of the small untrained model: one encoder attention map of 'the cat sat on the mat' drawn large, with the small maps of all heads of that layer."}}
widgets.attention_explorer(model, vocab, vocab, source="the cat sat on the mat", target="le chat est assis")

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: scaled embeddings
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~5 min
#
# Write `Embeddings(vocab_size, d_model)` (`vocab_size`: the vocabulary size, an int such as `len(vocab)`), an
# `nn.Module` holding one `nn.Embedding` called `embedding`, whose `forward(tokens)` maps ids
# $(\text{batch}, n)$ to $(\text{batch}, n, d_\text{model})$ vectors multiplied by $\sqrt{d_\text{model}}$.
#
# A warning before you use it anywhere: `nn.Embedding` starts its weights from $\mathcal{N}(0, 1)$, so this
# module, as the exercise asks for it, outputs entries of size about $\sqrt{d_\text{model}}$ (about 23 at
# $d_\text{model} = 512$), which drown the positional encoding's entries of size 1. The scaling is meant for
# small initial weights: `tfm_lesson.Transformer` initialises its embedding with a standard deviation of
# $1/\sqrt{d_\text{model}}$, so that the scaled vectors start with entries of size about 1.

# %%
class Embeddings(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        ...  # your turn

    def forward(self, tokens):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class Embeddings(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):  # (batch, n) -> (batch, n, d_model)
        return self.embedding(tokens) * self.scale


# %%
# NBVAL_CHECK_OUTPUT
check_scaled_embedding(Embeddings)

# %% [markdown]
# ### Exercise 2: the generator
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~5 min
#
# Write `Generator(d_model, vocab_size)` with one `nn.Linear(d_model, vocab_size)` called `proj`; `forward(x)`
# maps decoder states $(\text{batch}, t, d_\text{model})$ to **log**-probabilities $(\text{batch}, t, V)$
# over the vocabulary ($V$ = `vocab_size`). This is the paper's generator as The Annotated Transformer writes
# it, with a bias and a log-softmax. `tfm_lesson.Transformer`'s differs on both counts: its `generator` is a
# `nn.Linear` without bias whose weight is tied to the embedding (exercise 3), and it returns **logits**; the
# softmax (or log-softmax) is left to the loss and to decoding, which take logits. The two give the same
# predictions: log-softmax only subtracts the same number from every logit of a position.

# %%
class Generator(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        ...  # your turn

    def forward(self, x):
        ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
class Generator(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x):  # (batch, t, d_model) -> (batch, t, vocab_size)
        return self.proj(x).log_softmax(dim=-1)


# %%
# NBVAL_CHECK_OUTPUT
check_generator(Generator)

# %% [markdown]
# ### Exercise 3: tie the weights
# **Difficulty** 2/3 · **Importance** 2/3 · **Time** ~10 min
#
# Write `tie_weights(embedding, generator)`: `embedding` is an `nn.Embedding(vocab_size, d_model)`,
# `generator` an `nn.Linear(d_model, vocab_size, bias=False)`. Afterwards the generator must use the
# embedding's weight — shared, so that training updates one matrix, not a copy.

# %%
def tie_weights(embedding, generator):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def tie_weights(embedding, generator):
    generator.weight = embedding.weight  # the same Parameter object, shapes (V, d_model) both


# %%
# NBVAL_CHECK_OUTPUT
check_tie_weights(tie_weights)

# %% [markdown]
# ### Exercise 4: the parameter count by formula
# **Difficulty** 3/3 · **Importance** 2/3 · **Time** ~25 min
#
# Write `count_by_formula(c)` for a `T.TransformerConfig` `c` (sinusoidal positions, biases, post-norm, no
# final norm) that returns the exact number of parameters of `T.Transformer(c)` — without building it. Use
# `c.d_model`, `c.d_ff`, `c.num_encoder_layers`, `c.num_decoder_layers`, `c.src_vocab_size`, `c.tgt_vocab_size` (the
# vocabulary sizes, ints), and
# mind `c.share_embeddings` (one matrix for source and target) and `c.tie_embeddings` (generator = target
# embedding; an untied generator has no bias).

# %%
def count_by_formula(c):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def count_by_formula(c):
    d, f = c.d_model, c.d_ff
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * f + f + d
    encoder = c.num_encoder_layers * (attention + ffn + 2 * 2 * d)
    decoder = c.num_decoder_layers * (2 * attention + ffn + 3 * 2 * d)
    embeddings = c.src_vocab_size * d + (0 if c.share_embeddings else c.tgt_vocab_size * d)
    generator = 0 if c.tie_embeddings else c.tgt_vocab_size * d
    return encoder + decoder + embeddings + generator


# %%
# NBVAL_CHECK_OUTPUT
check_parameter_count(count_by_formula)

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("09")

# %% [markdown]
# ## Summary
#
# - Input of each stack: $\sqrt{d_\text{model}}\,E_\text{id} + PE$. With $E \sim \mathcal{N}(0, 1/d_\text{model})$
#   the scale gives the word vector the size of the positional vector (norm 22.6 vs 16 at $d_\text{model}=512$),
#   instead of 1 vs 16.
# - One matrix $E$ $(V, d_\text{model})$ is the source embedding, the target embedding and the generator
#   ($hE^\top$, then softmax); tying means the same Parameter object, not a copy.
# - The generator returns logits in `T.Transformer`; take `log_softmax` for probabilities — never
#   `softmax().log()`.
# - One forward pass: ids $(\text{batch}, s)$, $(\text{batch}, t)$ → memory $(\text{batch}, s, d_\text{model})$ →
#   decoder states $(\text{batch}, t, d_\text{model})$ → logits $(\text{batch}, t, V)$.
# - The base model has 63,082,496 parameters with 37,000 shared tokens, 3 % under the paper's rounded 65M; 30 %
#   of them are the shared embedding.
#
# Next, chapter 10 trains this model on toy tasks.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 09: The Transformer. Version `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
