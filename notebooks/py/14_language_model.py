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
# # 14 · A language model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/14_language_model.ipynb)
#
# Chapters 01–13 built the Transformer of 2017: an encoder reads a sentence, a decoder writes its
# translation. The models people talk about today, GPT and its relatives, keep only half of it. This chapter
# turns your decoder into a **GPT**, gives it **tokens** made by a byte-pair-encoding tokenizer whose central step you write,
# trains it on your CPU to write English sentences, and lets you **sample** from it with a slider.
#
# **What you will learn**
# - a GPT block is chapter 08's decoder layer **without cross-attention**; with a causal mask and tied
#   embeddings, a stack of them is a language model, proven equal to `tfm_lesson.GPT`;
# - **byte-level byte-pair encoding (BPE)**: count pairs, merge the most frequent, repeat; written step by step,
#   checked against `tfm_lesson.data.tokenizer.BPETokenizer` and the Hugging Face `tokenizers` library;
# - **next-token prediction**: inputs and targets shifted by one, the loss, **perplexity**, and a baseline
#   to beat;
# - a few hundred training steps on a laptop CPU, and samples before and after;
# - **sampling**: greedy, temperature, top-k and top-p (nucleus), shown on the trained model.

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
import os
import platform
from collections import Counter

import torch
from torch import nn

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.checks import check_bpe_merge, check_next_token_probs, check_next_token_windows
from tfm_lesson.data.corpus import load_corpus, random_windows
from tfm_lesson.gpt import GPT, GPTBlock, GPTConfig
from tfm_lesson.train.lm import complete, perplexity, prepare_lm_data, train_lm, unigram_perplexity
from tfm_lesson.sampling import filter_top_k, filter_top_p
from tfm_lesson.data.tokenizer import GPT2_PATTERN, BPETokenizer, hf_merges, merge_pair, pretokenize, train_hf_bpe

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## Intuition
#
# A **language model** gives, for any text so far, a probability for every possible next token. That one
# skill is enough to write: pick a next token, append it, ask again. And it is enough to learn from any text
# at all, with no labels: every position of every sentence is an exercise, "what comes next?".
#
# You have built this already. Chapter 08's decoder predicts target token $i+1$ from the target tokens up to
# $i$, and its causal mask makes sure it never peeks ahead. It also looks at the source sentence through
# cross-attention. Take the source away and that sub-layer has nothing to read: remove it, and the decoder is
# a language model. That is what GPT is (Radford et al., 2018 and 2019): a stack of decoder layers without
# cross-attention, trained to predict the next token of a large amount of text.
#
# Two more things are needed. **Tokens**: a model reads integers, so text must be cut into pieces from a fixed
# vocabulary; byte-pair encoding learns good pieces from the text itself. And **a way to choose** a next token
# from the model's probabilities, which decides whether the text is dull, varied or nonsense.

# %% [markdown]
# ## The math
#
# A text is a sequence of tokens $x_1 \dots x_n$. By the chain rule of probability,
# $$p(x_1 \dots x_n) = \prod_{t=1}^{n} p(x_t \mid x_1 \dots x_{t-1}),$$
# so a model of "the next token given the ones before" is a model of whole texts. A GPT computes all the
# factors in one pass: position $t$ reads $x_1 \dots x_t$ (the causal mask hides the rest) and outputs logits
# $z_t \in \mathbb{R}^V$ (unnormalised scores, one per token of a vocabulary of $V$ tokens), with $p(\cdot \mid x_{\le t}) = \mathrm{softmax}(z_t)$.
#
# **Training** minimises the mean cross-entropy of the true next tokens over a window of $T$ positions:
# $$\mathcal{L} = -\frac{1}{T}\sum_{t=1}^{T} \log p(x_{t+1} \mid x_{\le t}).$$
# The inputs are $x_1 \dots x_T$ and the targets the same window **shifted by one**, $x_2 \dots x_{T+1}$.
#
# **Perplexity** is $\exp(\mathcal{L})$ measured on text the model never trained on. A model that spreads its
# probability evenly over $k$ tokens has perplexity $k$, so perplexity reads as "the number of tokens the model
# hesitates between". A uniform guess over the whole vocabulary has perplexity $V$. A **unigram** model, which
# ignores the context and predicts each token with its frequency in the training text, is the baseline: a
# language model must beat it by using the context.
#
# **Sampling** picks $x_{t+1}$ from $\mathrm{softmax}(z_t / \tau)$:
# - the **temperature** $\tau$ divides the logits; $\tau < 1$ sharpens the distribution, $\tau > 1$ flattens it,
#   and $\tau \to 0$ puts all the probability on the largest logit: **greedy** decoding, $\arg\max_v z_{t,v}$;
# - **top-k** keeps only the $k$ largest logits (the others get $-\infty$) before the softmax;
# - **top-p** (nucleus sampling, Holtzman et al., 2020) keeps the smallest set of most probable tokens whose
#   probabilities add up to at least $p$: few tokens when the model is sure, many when it is not.

# %% [markdown]
# ## Build it
#
# ### From a decoder layer to a GPT block
#
# Chapter 08's `DecoderLayer` has three sub-layers; a `GPTBlock` has two. `GPTConfig` holds a GPT's settings;
# its `max_len` is the context: the most positions the model sees, prompt and generated tokens together.
# Here are the two layers' parts side by side:

# %%
# NBVAL_CHECK_OUTPUT
d_model, heads, d_ff = 64, 4, 256
config = GPTConfig(vocab_size=512, max_len=64, d_model=d_model, heads=heads, d_ff=d_ff, num_layers=2)
decoder_layer = T.DecoderLayer(d_model, heads, d_ff, dropout=0.0, norm_first=True, activation="gelu")
block = GPTBlock(config)


def parts(module):
    return {name: sum(p.numel() for p in child.parameters()) for name, child in module.named_children()}


print(f"{'DecoderLayer (chapter 08)':28s} {'parameters':>10s}    GPTBlock")
renamed = {"norm3": "norm2", "dropout3": "dropout2"}  # the feed-forward's norm and dropout move up one place
removed = {"cross_attn": "(removed: it reads the encoder memory)",  # the only part that reads the memory
           "norm2": "(removed with the cross-attention sub-layer)",  # its layer norm
           "dropout2": "(removed with the cross-attention sub-layer)"}  # its dropout
for name, count in parts(decoder_layer).items():
    print(f"  {name:26s} {count:>10,}    {removed.get(name) or renamed.get(name, name)}")
print(f"parameters: decoder layer {sum(parts(decoder_layer).values()):,}, GPT block {sum(parts(block).values()):,}")

# %% [markdown]
# What goes: the cross-attention sub-layer. Its attention `cross_attn` is the only part that reads the
# encoder memory; its layer norm `norm2` and its dropout `dropout2` do not take the memory as input (`norm2`
# prepares the sub-layer's query, `dropout2` thins its output), but they serve that sub-layer alone, so they
# go with it. What stays: masked self-attention and the feed-forward network, each with
# its residual connection (the feed-forward's norm and dropout are number 3 in the decoder layer and number 2 in
# the block, since there is one sub-layer fewer). GPT-2 uses pre-norm
# (chapter 05: the norm inside the residual branch), so we compare with a pre-norm decoder layer.
#
# A proof that nothing else changes: give the decoder layer the GPT block's weights, and silence its
# cross-attention by zeroing its output projection $W^O$. Then the decoder layer adds exactly zero for the
# memory, whatever the memory is, and it must compute what the GPT block computes.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
# the block's weights under the decoder layer's names: the block's norm2 is the decoder layer's norm3
state = {("norm3" + k[5:] if k.startswith("norm2") else k): v for k, v in block.state_dict().items()}
missing = decoder_layer.load_state_dict(state, strict=False).missing_keys
print("decoder weights not taken from the GPT block:", sorted({k.split(".")[0] for k in missing}))
with torch.no_grad():
    decoder_layer.cross_attn.w_o.weight.zero_()
    decoder_layer.cross_attn.w_o.bias.zero_()
x = torch.randn(2, 10, d_model)  # (batch, len, d_model)
memory = torch.randn(2, 7, d_model)  # any "source sentence": its contribution is now zero
causal = T.causal_mask(10)  # (len, len): position i sees 0..i
with torch.no_grad():
    same = torch.allclose(decoder_layer.eval()(x, memory, causal), block.eval()(x, causal), atol=1e-5)
print("decoder layer with silent cross-attention == GPT block:", same)

# %% [markdown]
# ### The whole GPT, from the course's parts
#
# A GPT is: token embeddings plus **learned** positional embeddings (chapter 04; GPT-2 learns them), a stack
# of blocks, a final layer norm (pre-norm needs one at the end, chapter 05), and a linear layer to vocabulary
# logits whose weight **is** the embedding matrix (tied embeddings, as in the paper's section 3.4). Unlike the
# 2017 paper, GPT-2 does not multiply the embeddings by $\sqrt{d_\text{model}}$, and its feed-forward network
# uses the GELU activation (a smooth version of ReLU, chapter 06) instead of ReLU. (GPT-2 computes GELU with a
# tanh approximation, `activation="gelu_tanh"` in `GPTConfig`; the course's GPT uses the exact formula unless told
# otherwise. The two differ by less than a thousandth, but a model loaded from GPT-2's weights must use GPT-2's,
# as chapter 16 does.) Here it is, written with the modules of chapters 03–06:

# %%
class MyGPTBlock(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + feed_forward(norm(x)). No dropout: our GPT trains without it
    (dropout=0.0 in its config), so the two compute the same numbers in training mode too."""

    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.self_attn = T.MultiHeadAttention(d_model, heads)
        self.feed_forward = T.PositionwiseFeedForward(d_model, d_ff, activation="gelu")
        self.norm1, self.norm2 = T.LayerNorm(d_model), T.LayerNorm(d_model)

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask)[0]  # masked self-attention: no memory, no cross-attention
        return x + self.feed_forward(self.norm2(x))


class MyGPT(nn.Module):
    def __init__(self, vocab_size, max_len, d_model, heads, d_ff, num_layers):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab_size, d_model)
        self.positional = T.LearnedPositionalEncoding(d_model, max_len)
        self.blocks = nn.ModuleList(MyGPTBlock(d_model, heads, d_ff) for _ in range(num_layers))
        self.norm = T.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_embed.weight  # tied: one matrix reads tokens in and writes them out

    def forward(self, idx):  # idx (batch, len) -> logits (batch, len, vocab_size)
        x = self.positional(self.tok_embed(idx))  # token + position, (batch, len, d_model)
        mask = T.causal_mask(idx.size(1), idx.device)  # (len, len)
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.norm(x))


# %% [markdown]
# Check it against `tfm_lesson.GPT`: same weights in, same logits out.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
reference = GPT(config).eval()
mine = MyGPT(512, 64, d_model, heads, d_ff, num_layers=2).eval()
print(mine.load_state_dict(reference.state_dict()))
idx = torch.randint(0, 512, (3, 20))  # (batch, len) token ids
with torch.no_grad():
    print("logits shape:", tuple(mine(idx).shape), "(batch, len, vocab_size)")
    print("MyGPT == tfm_lesson.GPT:", torch.allclose(mine(idx), reference(idx), atol=1e-5))
print("tied:", reference.lm_head.weight is reference.tok_embed.weight,
      f"({T.count_parameters(reference):,} parameters; untied would add {512 * d_model:,})")

# %% [markdown]
# The causal mask is what makes this a model of the *next* token: changing token 12 must leave the logits of
# positions 0–11 exactly as they were, since none of them may look at it.

# %%
# NBVAL_CHECK_OUTPUT
changed = idx.clone()
changed[:, 12] = (changed[:, 12] + 1) % 512
with torch.no_grad():
    a, b = reference(idx), reference(changed)
print("positions 0-11 unchanged:", torch.equal(a[:, :12], b[:, :12]))
print("positions 12-19 changed: ", bool((a[:, 12:] - b[:, 12:]).abs().amax(-1).gt(0).all()))

# %% [markdown]
# ### Tokens: byte-pair encoding, step by step
#
# A tokenizer maps text to integer ids and back. Words make a huge vocabulary and still meet unknown words;
# characters make tiny tokens and long sequences. **Byte-pair encoding** (BPE) sits in between and
# learns its pieces from the text. Sennrich et al. (2016) brought it to translation starting from characters;
# GPT-2 (Radford et al., 2019) starts from bytes instead, and so do we:
#
# 1. start from the text's UTF-8 **bytes**: 256 possible values, ids 0–255 (this is what "byte-level" means:
#    any string, in any script, with emoji, has an encoding, and nothing is ever unknown);
# 2. count every pair of neighbouring ids;
# 3. give the most frequent pair a new id, and replace every occurrence of that pair by it;
# 4. repeat until the vocabulary has the size you want.
#
# Here is that loop on a few sentences of the corpus we train on below.

# %%
corpus = load_corpus()
small = corpus.train[:400]
print(small)

# %%
# NBVAL_CHECK_OUTPUT
ids = list(small.encode("utf-8"))  # step 1: bytes
vocab = {i: bytes([i]) for i in range(256)}
for step in range(10):
    counts = Counter(zip(ids, ids[1:]))  # step 2: count neighbouring pairs
    pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))  # step 3: the most frequent (ties: smallest ids)
    new_id = 256 + step
    vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
    ids = merge_pair(ids, pair, new_id)  # replace every occurrence, left to right
    print(f"merge {step}: {vocab[pair[0]]!r:8} + {vocab[pair[1]]!r:8} -> {new_id} {vocab[new_id]!r:10} "
          f"({counts[pair]} times); {len(ids)} tokens")

# %% [markdown]
# The first merges join frequent neighbours: `s` and the space after it (plurals, verbs ending in s), `h` and
# `e`; merge 8 builds on merge 1 (`he` + space). With every merge the text gets shorter. `BPETokenizer` runs
# the same loop (it must learn exactly the same merges):

# %%
# NBVAL_CHECK_OUTPUT
whole = BPETokenizer(pattern=None).train(small, 256 + 10)
print("same merges as the loop:", [whole.vocab[256 + i] for i in range(10)] == [vocab[256 + i] for i in range(10)])

# %% [markdown]
# **Pre-tokenisation.** Left alone, merges cross word boundaries: `s ` and `he ` above glue the end of one word
# to the space before the next, and with more merges whole word pairs become tokens. GPT-2 first splits the text into chunks
# with a regular expression — a word with the space before it, a number, a run of punctuation, white space —
# and only merges inside a chunk. So a word preceded by a space gets the same tokens wherever it stands (at the
# start of a line, with a capital or after a quote it is another chunk: `The` and ` the` below), no token spans
# two words, and training and encoding
# work on the distinct chunks only, which is what makes a pure-Python BPE fast enough to train on megabytes.
# `BPETokenizer` uses GPT-2's split by default:

# %%
# NBVAL_CHECK_OUTPUT
print(pretokenize("The cat's 3 hats weren't red!  Ok?"))
text = corpus.train[:20_000]


def spans_words(token: bytes) -> bool:  # letters, a space, letters: a piece of two words
    inner = token.strip(b" ")
    return b" " in inner and inner.replace(b" ", b"").isalpha()


for pattern, label in [(None, "no split"), (GPT2_PATTERN, "GPT-2 split")]:
    learned = BPETokenizer(pattern=pattern).train(text, 400).vocab[256:]
    across = [t.decode() for t in learned if spans_words(t)]
    print(f"{label:12}: {len(across):3d} of {len(learned)} tokens span two words, e.g. {across[:4]}")

# %% [markdown]
# Now the real tokenizer: 512 tokens (256 bytes + 256 merges), trained on the first 300,000 characters of the
# training text. It also encodes both splits of the corpus (training and validation).
#
# **The corpus** is the English half of the sentence pairs shipped with this course (chapter 11 translates
# them): 50,000 sentences generated from a small lexicon with a simple grammar, one per line. They are part of
# tfm_lesson (MIT licence), realised with pyRealB, whose English lexicon is CC BY 4.0. We use them because a
# small vocabulary and a regular grammar are what a tiny model can learn in a few hundred steps on a CPU, so you can
# watch its samples turn from noise into sentences. The last 10% of the lines are held out for validation.

# %%
data = prepare_lm_data(corpus, vocab_size=512, tokenizer_chars=300_000)
tokenizer = data.tokenizer
print(corpus.licence)
print(corpus)
print(data)

# %%
# NBVAL_CHECK_OUTPUT
sentence = "The small teacher washes the famous dog."
print(tokenizer.tokens(sentence))
print(tokenizer.encode(sentence))
print(f"{len(sentence.encode('utf-8'))} bytes -> {len(tokenizer.encode(sentence))} tokens")
for text in ["Zebras can't fly 🦓", "naïve café, e\u0301, 日本語", "nul\x00byte"]:
    print(f"{text!r:32} {len(tokenizer.encode(text)):3d} tokens, round trip exact:",
          tokenizer.decode(tokenizer.encode(text)) == text)
print("the pieces of 'Zebras can't fly 🦓':", tokenizer.tokens("Zebras can't fly 🦓"))

# %% [markdown]
# Frequent words are single tokens (` small`, ` teacher`, ` famous`); less frequent ones are cut into pieces
# (` was` `he` `s`). A word the corpus never has ("Zebras") falls apart into smaller pieces, here single
# letters, and the emoji into single bytes (the last line of the cell prints the pieces; a byte that is only part
# of a character shows as `�`), and the text still comes back exactly.
#
# ### Next-token batches
#
# The whole training text is one long sequence of ids. A batch is `batch_size` windows of `max_len + 1` tokens
# at random places; each window gives inputs `x` (its first `max_len` tokens) and targets `y` (its last
# `max_len`): the same tokens, one step later.

# %%
# NBVAL_CHECK_OUTPUT
x, y = random_windows(data.train, batch_size=4, max_len=12, generator=torch.Generator().manual_seed(0))
print("x", tuple(x.shape), " y", tuple(y.shape), "(batch, max_len)")
print("y is x shifted by one:", torch.equal(x[:, 1:], y[:, :-1]))
for t in range(4):
    print(f"after {tokenizer.decode(x[0, :t + 1].tolist())!r:28} comes {tokenizer.decode([int(y[0, t])])!r}")

# %% [markdown]
# One window is `max_len` training examples at once: position $t$ sees `x[:t+1]` (the causal mask) and is
# scored on `y[t]`.
#
# ## Train it
#
# The model: 2 blocks, $d_\text{model} = 64$, 4 heads, $d_{ff} = 256$, a context of `max_len` = 64 tokens, a
# vocabulary of 512. Before training it knows nothing: its perplexity is about the vocabulary size, and its
# "text" is a string of random tokens: single bytes (some of them pieces of a multi-byte character, drawn `�`) and pieces of words. The unigram baseline is computed from token counts alone.
# (`complete(model, tokenizer, "")` samples from an empty prompt: a GPT has no `<s>` token, so `complete` starts
# it from a line break, the separator between the corpus's sentences, as if a new sentence began.)

# %%
torch.manual_seed(0)
model = GPT(config).to(device)
print(f"{T.count_parameters(model):,} parameters")
baseline = unigram_perplexity(data.train, data.valid, data.vocab_size)
print(f"held-out perplexity: untrained model {perplexity(model, data.valid):.1f}, unigram baseline {baseline:.1f}")
print("sample at step 0:", repr(complete(model, tokenizer, "", max_new_tokens=40, temperature=1.0, seed=0)))

# %% [markdown]
# `train_lm` draws random windows, minimises the cross-entropy with Adam (the paper's $\beta_1 = 0.9$,
# $\beta_2 = 0.98$),
# changes the learning rate at every step along a schedule, and clips the gradient norm at 1. The schedule has
# two parts:
#
# - **warm-up**: over the first 5% of the steps the rate rises in a straight line from 0 to its peak,
#   `lr=3e-3`. At the start Adam's estimates of the gradients' size rest on very few steps, and big steps
#   taken on them can throw the weights far off;
# - **cosine decay**: for the remaining 95% it falls from the peak to a tenth of it along half a cosine, slowly
#   at first, fastest in the middle and slowly again at the end, so the last steps are small ones that settle the
#   weights.
#
# It trains for a fixed number of optimiser steps, 250, on batches drawn from a seeded generator, with one CPU
# thread: run it twice on one machine and you get the same figures. (A time budget, "train for 45 seconds",
# would give another number of steps, and another schedule, on every machine and under every load.) The cell
# prints how long the steps took on yours.

# %%
history = train_lm(model, data, steps=250, batch_size=32, lr=3e-3, device=device, seed=0)
steps, seconds = len(history["step"]), history["seconds"][-1]
print(f"{steps} steps in {seconds:.0f} s on {device.type} ({platform.machine()}, {os.cpu_count()} CPU cores visible)")

# %% mystnb={"image": {"alt": "Line chart of the learning rate over the 250 training steps: a straight rise to 0.003 over the first steps, then a half-cosine fall to a tenth of the peak."}}
viz.plot_lines({"learning rate": history["lr"]}, x=history["step"], title="The schedule: warm-up, then cosine decay",
               xlabel="step", ylabel="learning rate")

# %% mystnb={"image": {"alt": "Line chart of the language model's next-token training loss over the training steps, falling quickly at first and then slowly."}}
viz.plot_lines({"training loss (one batch)": history["loss"]},
               x=history["step"], title="Next-token cross-entropy while training", xlabel="step", ylabel="cross-entropy")

# %%
trained = perplexity(model, data.valid)
print(f"held-out perplexity after {steps} steps: {trained:.2f}")
print(f"unigram baseline:                        {baseline:.2f}  ({baseline / trained:.0f} times higher)")
print(f"uniform guess over the vocabulary:       {data.vocab_size}")

# %% [markdown]
# The trained model's perplexity, measured on 5,000 sentences it never saw, is a small fraction of the unigram
# baseline's: it uses the context. On the machine that stored this page, every figure of the trained model that
# the chapter prints (perplexities, probabilities, samples) came out the same under PyTorch's three CPU kernel
# settings (`ATEN_CPU_CAPABILITY` set to `default`, `avx2` and `avx512`, which change how its CPU code adds
# numbers up). Another CPU can still differ, and a GPU more so: its kernels add the numbers up in another order,
# and over 250 steps small differences grow, so expect the perplexity and the samples below to differ a little
# from the ones stored here. Perplexity counts tokens, not words: tokens are pieces of words, and inside a word
# the next piece is often nearly certain, while at the start of a sentence many tokens are possible.
#
# And the samples:

# %%
for seed in range(3):
    print(repr(complete(model, tokenizer, "", max_new_tokens=50, temperature=0.8, top_k=20, seed=seed)))

# %% [markdown]
# From random tokens to sentences in 250 steps: capitals and full stops, a line break after each sentence,
# words from the lexicon, and short sentences, some of them grammatical. Not every word is real and not every
# sentence is grammatical yet; longer training fixes much of that (try it below).
#
# ## See it: how sampling chooses
#
# Take one prompt and look at the model's next-token distribution, sorted from the most probable token down.
# The temperature reshapes it: below 1 the head grows, above 1 the tail does. The figure shows only the 15 most
# probable tokens, which all lose probability at temperature 2; the cell prints how much all the other tokens
# hold together at each temperature, and that is where the probability goes.

# %% mystnb={"image": {"alt": "Line chart of the probabilities of the 15 most probable next tokens at temperatures 0.5, 1 and 2: the low temperature makes the top tokens more probable, the high one flattens the curve and lowers all 15, since the tokens off the chart gain."}}
prompt = "The small"
with torch.no_grad():
    logits = model(torch.tensor([tokenizer.encode(prompt)], device=device))[0, -1].cpu()  # (vocab,)
order = logits.argsort(descending=True)[:15]
print("most probable next tokens:", [tokenizer.decode([int(i)]) for i in order[:8]])
for t in (0.5, 1.0, 2.0):
    p_t = (logits / t).softmax(-1)
    print(f"temperature {t}: the 15 shown hold {p_t[order].sum():.2f}, the other tokens {1 - p_t[order].sum():.2f}")
viz.plot_lines({f"temperature {t}": (logits / t).softmax(-1)[order].tolist() for t in (0.5, 1.0, 2.0)},
               x=list(range(1, 16)), title=f"Next-token probabilities after {prompt!r}",
               xlabel="rank of the token (1 = most probable)", ylabel="probability")

# %% [markdown]
# Top-k and top-p cut the tail instead of reshaping it. With the same logits:

# %%
probs = logits.softmax(-1)
for name, kept_logits in [("top-k = 5", filter_top_k(logits[None], 5)[0]),
                          ("top-p = 0.5", filter_top_p(logits[None], 0.5)[0]),
                          ("top-p = 0.9", filter_top_p(logits[None], 0.9)[0])]:
    kept = torch.isfinite(kept_logits)
    print(f"{name:12} keeps {int(kept.sum()):3d} tokens, holding {probs[kept].sum():.2f} of the probability")

# %% [markdown]
# Top-k keeps a fixed number of tokens however the probability is spread; top-p keeps as many as it takes to
# reach $p$, few when the model is confident and many when it is not. Now the four ways to choose, on one
# prompt (each seeded, so you get the same text when you run it again):

# %%
for name, kwargs in [("greedy (temperature 0)", dict(temperature=0)),
                     ("temperature 0.7", dict(temperature=0.7)),
                     ("temperature 1.5", dict(temperature=1.5)),
                     ("top-k = 5", dict(temperature=1.0, top_k=5)),
                     ("top-p = 0.9", dict(temperature=1.0, top_p=0.9))]:
    print(f"{name:24}", repr(prompt + complete(model, tokenizer, prompt, max_new_tokens=30, seed=1, **kwargs)))

# %% [markdown]
# Greedy decoding always takes the likeliest token, and the same prompt always gives the same text, which
# tends to repeat itself (here the same short sentence pattern, "The ... will not ..."; with longer outputs,
# greedy text often ends in a loop). A high temperature gives the tail a chance, and with it spelling mistakes and
# invented words. Top-k and top-p cut off the tail: with a large k or a p close to 1 only the rarest tokens,
# with small settings much more (the cell comparing top-k and top-p above prints that top-k = 5 keeps only part of the
# probability). Between those extremes they keep much of the variety of sampling; a model
# trained for 250 steps still misspells with them, as the samples above show.
#
# `complete` (through `GPT.generate`) has used a cache of keys and values all along. What is cached, and why
# that can change a result, is chapter 15's subject; you can skip this check until then.
# The same text with and without that cache: `generate` reuses the
# keys and values of earlier positions instead of recomputing them, and should produce the same tokens; the
# cell checks that it does here. That is a measurement, not a guarantee: the cached path adds the same numbers
# up in another order, so the logits can differ in their last bits (chapter 15 measures by how much), and where
# two tokens are nearly tied greedy decoding can then pick the other one, more often in bfloat16 on a GPU.

# %%
# NBVAL_CHECK_OUTPUT
cached = complete(model, tokenizer, prompt, max_new_tokens=30, temperature=0, use_cache=True)
uncached = complete(model, tokenizer, prompt, max_new_tokens=30, temperature=0, use_cache=False)
print("greedy, cached == uncached:", cached == uncached)

# %% [markdown]
# ## Play with it
#
# Type a prompt and move the sliders. The bars show the model's next-token distribution (grey) and what
# temperature, top-k and top-p make of it (blue); below, the model's continuation. top-k 0 and top-p 1 mean
# "off"; temperature 0 is greedy. (In a static view, such as the book, you see the default settings.)

# %% mystnb={"image": {"alt": "Explorer picture at the default settings (temperature 1, top-k and top-p off): bars of the most probable next tokens after 'The small' as the model gives them (grey) and after temperature and filtering (blue), identical here since nothing is filtered, as the title says (all 512 tokens can be drawn); below, the prompt and a 40-token sample."}}
widgets.sampling_widget(model, tokenizer, "The small", max_new_tokens=40)

# %% [markdown]
# ## Going further: checked against Hugging Face `tokenizers`
#
# This section compares our tokenizer with a widely used library; nothing later in the chapter depends on it,
# so you can skip it on a first read.
#
# The `tokenizers` library (the tokenizer of the `transformers` ecosystem, written in Rust) has a byte-level
# BPE trainer. Trained on the same text with the same split, vocabulary size and minimum pair count (a pair
# is merged only if it occurs at least `min_frequency` times, see below), does it
# learn the same merges?

# %%
tokenizer_text = corpus.train[:300_000]
hf = train_hf_bpe(tokenizer_text, vocab_size=512)
ours = [(tokenizer.vocab[a], tokenizer.vocab[b]) for a, b in tokenizer.merges]
theirs = hf_merges(hf)

# %%
# NBVAL_CHECK_OUTPUT
first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
print("merges:", len(ours), "ours,", len(theirs), "tokenizers'")
print("identical up to merge", first, "; there: ours", ours[first], " tokenizers'", theirs[first])
before = BPETokenizer(merges=tokenizer.merges[:first])  # the tokenizer just before the two part ways
chunks = Counter(pretokenize(tokenizer_text))


def pair_count(pair: tuple[bytes, bytes]) -> int:
    """How often the two tokens stand side by side in the training text, tokenised with the first merges."""
    a, b = before.vocab.index(pair[0]), before.vocab.index(pair[1])
    total = 0
    for chunk, n in chunks.items():
        w = before.encode(chunk)
        total += n * sum(1 for p in zip(w, w[1:]) if p == (a, b))
    return total


print("how often each pair occurs at that point: ours", pair_count(ours[first]), " tokenizers'", pair_count(theirs[first]))
print("merges in only one of the two:", len(set(ours) ^ set(theirs)))
held_out = corpus.valid[:50_000]
print("tokens for 50,000 held-out characters: ours", len(tokenizer.encode(held_out)),
      " tokenizers'", len(hf.encode(held_out).ids))

# %% [markdown]
# The two agree for the first merges and then part ways, but not by much: in the end only a few merges (4 here)
# are in one list and not the other, and both cut the held-out text into the same number of tokens. At the
# merge where they first differ, both pairs are **equally frequent**: a tie, and the two break it differently. We pick the pair with the smallest ids (byte
# values). `tokenizers` picks the smallest ids in *its* numbering, which lists the 256 bytes in the order of
# the printable characters GPT-2 draws them as, with the space (drawn `Ġ`) after all the letters. Ask
# `BPETokenizer` to break ties that way, `tie_break="hf"`, and every merge is the same:

# %%
# NBVAL_CHECK_OUTPUT
hf_order = BPETokenizer().train(tokenizer_text, 512, tie_break="hf")
print("tie_break='hf': all merges equal to tokenizers':",
      [(hf_order.vocab[a], hf_order.vocab[b]) for a, b in hf_order.merges] == theirs)
print("same tokens on held-out text:",
      hf_order.tokens(held_out[:2000]) == [hf.decode([i]) for i in hf.encode(held_out[:2000]).ids])

# %% [markdown]
# Other differences you meet when you compare tokenizers:
# - **special tokens** such as `<|endoftext|>`: `tokenizers` gives them the first ids (0, 1, …), which shifts
#   every other id, and each takes a place in the vocabulary, so one merge fewer is learned. Our corpus marks the
#   end of a sentence with a line break instead, an ordinary byte;
# - **minimum frequency**: both stop when the best pair occurs fewer than `min_frequency` times (2 here);
#   `tokenizers` defaults to 0, so leaving it unset there changes the last merges;
# - **the split**: GPT-2's pattern uses Unicode classes (`\p{L}`, `\p{N}`); GPT-2's original `encoder.py` runs it
#   with the Python `regex` package, `tokenizers` with Oniguruma, a C regular-expression library, through
#   Rust bindings; we use
#   Python's `re`, which has no `\p{…}`, with the nearest classes it has; they agree on ordinary text and differ
#   on rare characters such as `²`;
# - **ids**: the same merges get different numbers (their ids count from the printable characters, ours from
#   the byte values), which is why we compare merges and tokens as byte strings.

# %% [markdown]
# ## Try this
#
# - Train for 1,000 steps instead of 250 (`steps=1000`): how far does the perplexity fall, and do the
#   samples make fewer mistakes?
# - Train on your own text: `load_corpus(path="my_text.txt")`, or from a terminal
#   `python -m tfm_lesson.train --text my_text.txt --steps 1000`, then
#   `python -m tfm_lesson.generate runs/lm/lm.pt "Once upon"`.
# - Tokenizer size: a vocabulary of 300 or 1,000 instead of 512 (this corpus has too few distinct words for
#   much more: training stops when no pair occurs twice), with the model rebuilt to match, e.g.
#   `GPTConfig(vocab_size=len(tokenizer), ...)`. Shorter tokens make longer sequences (more
#   steps of work per sentence), longer tokens make a bigger embedding table.

# %% [markdown]
# ## Exercises

# %% [markdown]
# ### Exercise 1: one merge step
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `merge(ids, pair, new_id)`: return a **new** list in which every occurrence of `pair` (the id `pair[0]`
# directly followed by `pair[1]`) is replaced by `new_id`. Scan from left to right and do not overlap:
# `merge([5, 5, 5], (5, 5), 9)` is `[9, 5]`. Do not change the list you are given.

# %%
def merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2  # both tokens of the pair are used up
        else:
            out.append(ids[i])
            i += 1
    return out


# %%
# NBVAL_CHECK_OUTPUT
check_bpe_merge(merge)

# %% [markdown]
# ### Exercise 2: the distribution to sample from
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~20 min
#
# Write `next_token_probs(logits, temperature, top_k, top_p)`: `logits` is `(batch, vocab)`; return the
# probabilities `(batch, vocab)` that the next token is drawn from. In this order: divide by the temperature;
# if `top_k` is not `None`, keep the logits at least as large as the `top_k`-th largest (ties included) and
# set the others to $-\infty$; if `top_p` is not `None`, keep the smallest set of most probable tokens whose
# probabilities (re-normalised after the steps before: the softmax over the tokens top-k kept) reach `top_p`,
# again keeping ties; then the softmax. `temperature == 0`
# means greedy: probability 1 on the argmax of each row. You may use `filter_top_k` and `filter_top_p` from
# `tfm_lesson.sampling`, or write the filters yourself (harder: that is where the classic mistakes are).

# %%
def next_token_probs(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    ...  # your turn: (batch, vocab) probabilities


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def next_token_probs(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    if temperature == 0:  # greedy: all the probability on the largest logit
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).float()
    z = logits / temperature  # first the temperature: it changes which tokens form the nucleus
    if top_k is not None and top_k < z.size(-1):
        kth = z.topk(top_k, dim=-1).values[:, -1:]  # (batch, 1): the k-th largest logit
        z = z.masked_fill(z < kth, float("-inf"))  # ties with the k-th are kept
    if top_p is not None:
        p = z.softmax(-1)
        sorted_p = p.sort(-1, descending=True).values
        needed = (sorted_p.cumsum(-1) - sorted_p) < top_p  # mass BEFORE a token < p: that token is needed
        bar = sorted_p.masked_fill(~needed, float("inf")).amin(-1, keepdim=True)  # least probable needed token
        z = z.masked_fill(p < bar, float("-inf"))
    return z.softmax(-1)  # renormalised over what is left


# %%
# NBVAL_CHECK_OUTPUT
check_next_token_probs(next_token_probs)

# %% [markdown]
# ### Exercise 3: inputs and targets
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `next_token_windows(ids, starts, max_len)`: `ids` is a 1-D tensor of token ids, `starts` a 1-D tensor of
# `batch` start positions. Return `(x, y)`, each `(batch, max_len)`: row `b` of `x` is the `max_len` tokens
# from `starts[b]` on, and row `b` of `y` the token that follows each of them.

# %%
def next_token_windows(ids: torch.Tensor, starts: torch.Tensor, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    ...  # your turn: (x, y)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def next_token_windows(ids: torch.Tensor, starts: torch.Tensor, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    window = ids[starts[:, None] + torch.arange(max_len + 1)]  # (batch, max_len + 1)
    return window[:, :-1], window[:, 1:]  # inputs, and the same tokens one step later


# %%
# NBVAL_CHECK_OUTPUT
check_next_token_windows(next_token_windows)

# %% [markdown]
# ## Check your understanding
#
# Pick an answer for each question; the feedback says why it is right or wrong.

# %%
T.quiz.show("14")

# %% [markdown]
# ## Summary
#
# - A GPT block is the decoder layer without cross-attention (and its norm and dropout): masked self-attention
#   and the feed-forward network. Token and learned position embeddings, a stack of blocks, a final norm and
#   an output layer tied to the embedding make a language model; ours, built from the course's parts, gives
#   the same logits as `tfm_lesson.GPT`.
# - Byte-level BPE starts from the 256 bytes and repeatedly merges the most frequent neighbouring pair; every
#   string round-trips exactly. Split into words first (GPT-2's regular expression), it trains fast and keeps
#   tokens inside words. It learns the same merges as Hugging Face `tokenizers` except where equally frequent
#   pairs are ordered differently; with the same tie-break, all merges agree.
# - Training is next-token prediction: targets are the inputs shifted by one, the loss is the cross-entropy, and
#   held-out perplexity $= \exp(\text{loss})$. The trained model's perplexity is far below the unigram
#   baseline's, after 250 steps on a CPU.
# - Temperature reshapes the next-token distribution (0 = greedy), top-k keeps a fixed number of tokens, top-p
#   the smallest set holding probability $p$.
#
# Next, chapter 15: generating fast, with a cache of keys and values.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 14: A language model. Version `0.1.0`, https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
