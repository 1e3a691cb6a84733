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
# # 12 · Looking inside a trained Transformer
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/12_looking_inside.ipynb)
#
# A trained model is a large table of numbers, far too many to read one by one. Attention is the easiest place
# to look: every head, in every layer, writes down how it weights each other position when it builds a
# position's output (a weight, not the whole story: what a position receives is the weight times a transformed
# value, whose size varies). This
# chapter trains a small English → French **number** translator (*three hundred and twenty-one* →
# *trois cent vingt et un*), then asks three questions of it:
#
# - **What does each head look at?** — the attention explorer, over every layer, head and kind.
# - **How focused is each head?** — the **entropy** of its attention, one number per head.
# - **Which heads does the model need?** — switch one head off and measure the damage on held-out numbers.
#
# **What you will learn**: to read attention maps of a trained model, to compute attention entropy with
# masks handled correctly (exercise 1), to switch a head off with a forward pre-hook (exercise 2), and to measure
# how two rankings agree with a rank correlation (exercise 3) — and why the answers of the three questions do
# not always agree.

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
import time

import torch

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.checks import check_heads_off, check_query_entropy, check_rank_correlation, yours_or_reference
from tfm_lesson.data import batches, load_task
from tfm_lesson.train.recipes import RECIPES
from tfm_lesson.train.loop import evaluate, make_model, train

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## A model to look at
#
# Numbers from 0 to 999,999 written in English words, with their French translation (generated with
# `num2words`; 50,000 for training, 1,000 held out for validation and 1,000 for test; as in chapter 10, the number of
# digits is drawn first, so short numbers are far more common than with uniform draws, though 0–99 stay rare:
# about 100 of 50,000). French reorders and
# merges: *ninety-seven* is *quatre-vingt-dix-sept* ("four-twenty-ten-seven"), *one thousand* is *mille*
# without the "one". The model: $d_\text{model} = 64$, 4 heads, 2 + 2 layers, trained for a fixed 400 steps
# with chapter 10's recipe for this task, `RECIPES["numbers"]` (it prints a line after each validation).

# %%
data = load_task("numbers", seed=0)
print(data)
for src, tgt in data.train[:3]:
    print(f"{src}  ->  {tgt}")

# %%
T.seed_everything(0)
recipe = RECIPES["numbers"]  # chapter 10's recipe for this task: the model's size and the training run
model = make_model(data.src_vocab, data.tgt_vocab, **recipe["model"])
start = time.perf_counter()
history = train(model, data, **recipe["train"], eval_every=200, device=device, seed=0, progress=False)
print(f"trained {recipe['train']['steps']} steps in {time.perf_counter() - start:.0f} s on {device.type}")
baseline = evaluate(model, data.test[:200], data.src_vocab, data.tgt_vocab)
print("held-out (200 test numbers):", {k: round(v, 1) for k, v in baseline.items()})

# %% [markdown]
# ## Intuition
#
# The model has $2 \times 4$ encoder self-attention heads, $2 \times 4$ masked decoder self-attention heads,
# and $2 \times 4$ cross-attention heads. A head that puts nearly all its weight on one key per query is a
# **pointer** (*"the French word I am writing now comes from that English word"*); a head that spreads its
# weight evenly **averages** (a summary of the sentence, or of the prefix written so far). Entropy measures
# where a head sits between the two. But looking busy is not the same as being needed: some heads can be
# switched off at no cost, because others carry the same information — so we measure that too.
#
# ## Play with it first
#
# Type an English number (in words, as in the data: *two hundred and five thousand, three hundred and
# twelve*), pick the kind, the layer and the head. With an empty target, the model's own greedy translation
# is used as the decoder's input.

# %% mystnb={"image": {"alt": "Explorer picture for 'three hundred and ninety-seven thousand, four hundred and eighty-one': the encoder self-attention map of layer 0, head 0 drawn large, where most queries put much of their weight on the 'thousand' and ',' columns and the last few on '</s>'; beside it the small maps of the layer's four heads; the title shows the greedy target beginning 'trois cent quatre'."}}
widgets.attention_explorer(model, data.src_vocab, data.tgt_vocab,
                           source="three hundred and ninety-seven thousand, four hundred and eighty-one")

# %% [markdown]
# ## The math: attention entropy
#
# For one query, the weights $a_1 \dots a_k$ over the $k$ visible keys form a probability distribution; its
# entropy is
# $$H = -\sum_{j=1}^{k} a_j \log a_j, \qquad 0 \le H \le \log k .$$
# $H = 0$ for a pointer (one weight is 1), $H = \log k$ for uniform weights. Because $k$ differs from
# query to query (padding; the causal mask gives the first decoder query one key and the last many), we
# report the **normalised** entropy $H / \log k$ in $[0, 1]$, averaged over the real queries of a batch of
# test sentences. Queries with a single visible key ($\log 1 = 0$) carry no information and are skipped.
#
# ## Build it
#
# First slowly: one sentence, one head, a loop over queries, visible keys read from the mask.

# %%
test_batch = next(batches(data.test[:64], data.src_vocab, data.tgt_vocab, batch_size=64, shuffle=False,
                          device=device))
with torch.no_grad(), T.record_attention(model) as record:
    model(test_batch.src, test_batch.tgt_in)  # tgt_in = tgt[:, :-1], the decoder input (shift_targets, chapter 10)
src_mask = model.make_src_mask(test_batch.src)             # (batch, 1, 1, s)
tgt_mask = model.make_tgt_mask(test_batch.tgt_in)          # (batch, 1, t, t)
real_src = test_batch.src != 0                            # (batch, s) real source queries
real_tgt = test_batch.tgt_in != 0                         # (batch, t) real target queries
# for each kind: the mask its keys saw, and which queries are real
kinds = {"encoder": (src_mask, real_src), "decoder": (tgt_mask, real_tgt), "cross": (src_mask, real_tgt)}


def entropy_loop(weights, mask, real_queries, b, head):
    """Normalised entropy of one head on sentence b, averaged over its real queries (slow and plain)."""
    values = []
    for i in range(weights.size(2)):
        if not real_queries[b, i]:
            continue
        # a padding mask has one row that stands for every query, a causal mask one row per query: min() picks
        # row i of a causal mask and the single row of a padding mask
        visible = mask[b, 0, min(i, mask.size(2) - 1)]    # (k,) which keys this query could see
        k = int(visible.sum())
        if k < 2:
            continue
        a = weights[b, head, i][visible]
        values.append(float(-(a * a.clamp_min(1e-12).log()).sum()) / math.log(k))
    return sum(values) / len(values)


w = record.get(kind="cross", layer=1)                      # (batch, heads, t, s)
print("cross-attention, layer 1, head 0, sentence 0: %.3f" % entropy_loop(w, src_mask, real_tgt, 0, 0))

# %% [markdown]
# ### Exercise 1: the entropy of every query at once
# **Difficulty** 2/3 · **Importance** 2/3 · **Time** ~15 min
#
# Write `query_entropy(weights, mask)` without a loop: `weights` is `(batch, heads, q, k)`, `mask` a boolean mask
# that broadcasts to it (True = visible: $(\text{batch}, 1, 1, k)$ for a padding mask, one row for every query,
# or $(\text{batch}, 1, q, k)$ for a causal mask, one row per query). Return `(batch, heads, q)`: each query's
# normalised entropy $H / \log k_\text{visible}$, and 0 for a query that sees fewer than two keys. Careful: the
# weights of masked keys are exactly 0, and $0 \cdot \log 0$ is NaN in floating point.

# %%
def query_entropy(weights, mask):
    ...  # your turn: (batch, heads, q)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def query_entropy(weights, mask):
    mask = mask.expand_as(weights)                                           # (batch, heads, q, k)
    k = mask.sum(-1).float()                                                 # (batch, heads, q) keys seen
    h = -(weights * weights.clamp_min(1e-12).log()).masked_fill(~mask, 0).sum(-1)  # (batch, heads, q)
    return torch.where(k >= 2, h / k.clamp_min(2).log(), torch.zeros_like(h))


# %%
# NBVAL_CHECK_OUTPUT
check_query_entropy(query_entropy)

# %% [markdown]
# A head's entropy is then the mean over the real queries of each sentence, averaged over the sentences:

# %%
entropy_of = yours_or_reference(query_entropy, "query_entropy")


def head_entropy(weights, mask, real_queries):
    """weights (batch, heads, q, k), mask broadcastable to them, real_queries (batch, q) -> (heads,)."""
    per_query = entropy_of(weights, mask)                                    # (batch, heads, q)
    seen = mask.expand_as(weights).sum(-1)                                   # (batch, heads, q) keys seen
    keep = real_queries[:, None, :] & (seen >= 2)                            # (batch, heads, q)
    per_sentence = (per_query * keep).sum(-1) / keep.sum(-1).clamp_min(1)    # (batch, heads)
    return per_sentence.mean(0)                                              # (heads,)


loops = [entropy_loop(w, src_mask, real_tgt, b, 0) for b in range(64)]

# %%
# NBVAL_CHECK_OUTPUT
print("loop == vectorised:", abs(sum(loops) / 64 - head_entropy(w, src_mask, real_tgt)[0].item()) < 1e-5)

# %% [markdown]
# ## See it: entropy per layer and head

# %% mystnb={"image": {"alt": "Table heatmap of normalised attention entropy for four heads in each of six attention blocks: the second cross-attention layer is the darkest (closest to pointers), the encoder rows the lightest."}}
entropy = {kind: torch.stack([head_entropy(record.get(kind=kind, layer=l), mask, real)
                              for l in range(2)]).cpu()           # (layers, heads)
           for kind, (mask, real) in kinds.items()}
table = torch.cat([entropy[k] for k in kinds])                     # (3 kinds x 2 layers, heads)
labels = [f"{k} L{l}" for k in kinds for l in range(2)]
viz.show_matrix(table, title="Normalised attention entropy (0 = pointer, 1 = uniform)", xlabel="head",
                ylabel="kind and layer", y_ticks=labels, x_ticks=[str(h) for h in range(4)])

# %% [markdown]
# Read the rows: which kind has the most pointer-like heads? Cross-attention heads that point are the
# "alignment" heads — the French word being written reads the English word it translates. Heads near 1
# spread their attention and act as averages.
#
# ## Switch a head off
#
# In `MultiHeadAttention` the heads' outputs are concatenated into one $(\text{batch}, \text{len},
# d_\text{model})$ tensor — head $h$ owns the features $h\,d_k \dots (h+1)\,d_k - 1$ — and then projected by
# $W^O$ (`w_o`). A **forward pre-hook** on `w_o` sees that input before the projection; zeroing head $h$'s
# slice removes exactly that head's contribution, and nothing else. The context manager below installs
# the hook and always removes it.

# %% [markdown]
# ### Exercise 2: switch heads off
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `heads_off(attention, heads)`, a context manager (decorate a generator with
# `@contextlib.contextmanager`): inside `with heads_off(mha, [0, 2]):`, the listed heads of the tfm_lesson
# `MultiHeadAttention` `mha` contribute nothing. Register a forward pre-hook on `attention.w_o`
# (`register_forward_pre_hook(fn)`; `fn(module, inputs)` returns the new inputs as a tuple) that zeroes features
# `h * d_k` to `(h + 1) * d_k - 1` of a **copy** of the input for each listed head, `yield`, and remove the hook in
# a `finally:` so that the module is restored even if the block raises.

# %%
from contextlib import contextmanager


@contextmanager
def heads_off(attention, heads):
    ...  # your turn: register the hook, yield, remove it
    yield


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
from contextlib import contextmanager


@contextmanager
def heads_off(attention, heads):
    """Inside the block, the given heads of one tfm_lesson MultiHeadAttention contribute nothing."""
    d_k = attention.d_k

    def zero_heads(module, inputs):
        (x,) = inputs                                   # (batch, len, d_model): the concatenated heads
        x = x.clone()
        for h in heads:
            x[..., h * d_k:(h + 1) * d_k] = 0.0
        return (x,)

    handle = attention.w_o.register_forward_pre_hook(zero_heads)
    try:
        yield
    finally:
        handle.remove()


# %%
# NBVAL_CHECK_OUTPUT
check_heads_off(heads_off)

# %%
ablate = yours_or_reference(heads_off, "heads_off")


def attention_module(kind, layer):
    stack = model.encoder if kind == "encoder" else model.decoder
    return stack.layers[layer].cross_attn if kind == "cross" else stack.layers[layer].self_attn

# %%
# NBVAL_CHECK_OUTPUT
# check: with head 0 switched off by the hook, the output equals W^O applied to the concatenation with head 0 zeroed
mha = attention_module("cross", 1)
x = torch.randn(2, 5, 64, device=device)
mem = torch.randn(2, 7, 64, device=device)
with torch.no_grad():
    with ablate(mha, [0]):
        hooked, _ = mha(x, mem, mem)
    # _split_heads / _merge_heads: the package module's own versions of chapter 03's split_heads / merge_heads
    q, k, v = mha._split_heads(mha.w_q(x)), mha._split_heads(mha.w_k(mem)), mha._split_heads(mha.w_v(mem))
    out, _ = T.scaled_dot_product_attention(q, k, v)          # (batch, heads, 5, d_k)
    out[:, 0] = 0.0
    by_hand = mha.w_o(mha._merge_heads(out))
    restored, _ = mha(x, mem, mem)
print("hook == zeroed head by hand:", torch.allclose(hooked, by_hand, atol=1e-5))
print("hook removed after the block:", not torch.allclose(restored, hooked, atol=1e-5))

# %% [markdown]
# Now the experiment: for each of the 24 heads, switch it off alone, translate 200 held-out numbers greedily,
# and record the drop in exact match (percentage points) from the intact model.

# %% mystnb={"image": {"alt": "Table heatmap of exact-match points lost per switched-off head, each cell labelled: two cells stand out bright, decoder L0 head 3 and cross L0 head 1, a handful more cost over 10 points, and most heads cost little or nothing."}}
start = time.perf_counter()
subset = data.test[:200]
damage = torch.zeros(6, 4)                                   # (kind x layer, head)
for row, (kind, layer) in enumerate((k, l) for k in kinds for l in range(2)):
    for head in range(4):
        with ablate(attention_module(kind, layer), [head]):
            damaged = evaluate(model, subset, data.src_vocab, data.tgt_vocab)
        damage[row, head] = baseline["exact_match"] - damaged["exact_match"]
print(f"24 ablations in {time.perf_counter() - start:.0f} s")
viz.show_matrix(damage, title="Exact-match points lost when one head is switched off", xlabel="head",
                ylabel="kind and layer", y_ticks=labels, x_ticks=[str(h) for h in range(4)])

# %% [markdown]
# And the blunt version: all four heads of one attention block off at once.

# %% mystnb={"image": {"alt": "Bar chart of exact-match points lost when a whole attention block is switched off: every decoder and cross-attention block costs almost all 100 points, the encoder blocks far fewer."}}
whole = {}
for kind, layer in ((k, l) for k in kinds for l in range(2)):
    with ablate(attention_module(kind, layer), range(4)):
        whole[f"{kind} L{layer}"] = baseline["exact_match"] - evaluate(model, subset, data.src_vocab,
                                                                       data.tgt_vocab)["exact_match"]
viz.plot_bars(whole, title="Exact-match points lost with a whole attention block off", ylabel="points lost")

# %% [markdown]
# Which single heads matter most, and how much does each block cost as a whole?

# %%
flat_entropy, flat_damage = table.flatten(), damage.flatten()
order = flat_damage.argsort(descending=True)
print(f"heads whose removal costs nothing: {(flat_damage <= 0).sum().item()} of 24; "
      f"costing more than 10 points: {(flat_damage > 10).sum().item()}")
for i in order[:3].tolist():
    print(f"  {labels[i // 4]} head {i % 4}: {flat_damage[i]:.1f} points (entropy {flat_entropy[i]:.2f})")
print("whole blocks:", {name: round(v, 1) for name, v in whole.items()})

# %% [markdown]
# ### Is a sharp head an important head?
#
# Put each head's entropy next to the damage its removal causes. Pearson's correlation coefficient $r$ measures
# how well a *straight line* fits; with 24 heads, a few of them far from the rest can make $r$ large or small by
# themselves. Spearman's rank correlation $\rho$ asks a weaker question — do the heads with lower entropy tend to
# cost more? — by correlating the **ranks** of the two lists instead of their values, so a single extreme head
# counts as one rank, not as a huge number.
#
# ### Exercise 3: rank correlation
# **Difficulty** 2/3 · **Importance** 1/3 · **Time** ~10 min
#
# Write `rank_correlation(x, y)` for two 1-D tensors of the same length: replace each value by its rank
# (1 for the smallest; tied values share the mean of their ranks), then return Pearson's correlation of the two
# rank lists as a float. (Pearson's correlation of two lists: subtract each list's mean, then divide the dot
# product of the two centred lists by the product of their norms; you may use `torch.corrcoef`.)

# %%
def rank_correlation(x, y):
    ...  # your turn: Spearman's rho, a float


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def rank_correlation(x, y):
    def ranks(v):
        v = v.double()
        r = torch.empty_like(v)
        r[v.argsort()] = torch.arange(1, len(v) + 1, dtype=torch.double)   # rank of each element
        for value in v.unique():                                              # ties share their mean rank
            r[v == value] = r[v == value].mean()
        return r

    a, b = ranks(x), ranks(y)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


# %%
# NBVAL_CHECK_OUTPUT
check_rank_correlation(rank_correlation)

# %% mystnb={"image": {"alt": "Scatter plot of 24 heads, entropy across against points lost up, one marker per block: the heads that cost the most have low to middle entropy, and most heads cost almost nothing."}}
spearman = yours_or_reference(rank_correlation, "rank_correlation")
pearson = torch.corrcoef(torch.stack([flat_entropy, flat_damage]))[0, 1].item()
rho = spearman(flat_entropy, flat_damage)
print(f"entropy against damage over 24 heads: Pearson r = {pearson:+.2f}, Spearman rho = {rho:+.2f}")
viz.plot_scatter({name: (table[row], damage[row]) for row, name in enumerate(labels)},
                 title=f"24 heads: Pearson r = {pearson:+.2f}, Spearman rho = {rho:+.2f}",
                 xlabel="normalised attention entropy of the head (0 = pointer, 1 = uniform)",
                 ylabel="exact-match points lost without it")

# %% [markdown]
# What to take from these pictures. Your numbers are the ones printed above, and they depend on the machine:
# the trained model's last digits change with the CPU's arithmetic kernels (and on a GPU, where `train` uses
# mixed precision), and the damage of each head changes with them. To see how much, the same seed was trained
# under PyTorch's three CPU kernel settings on one machine (`ATEN_CPU_CAPABILITY` = `default`, `avx2`,
# `avx512`; the stored page shows the last). The ranges below are from those three runs; another CPU or a GPU
# can fall outside them, so compare them with what your cells printed.
#
# - **A few heads are essential.** The same two heads cost the most in all three runs: head 3 of the first decoder
#   self-attention layer (57.5 to 82 points) and head 1 of the first cross-attention layer (43 to 78 points),
#   in that order in all three, though on another machine the two may swap places. Without either one many numbers
#   come out wrong: in this run the model concentrated a job in one head and built no backup (one seed shows
#   that this happens, not how often). Between 3 and 9 of the 24 heads cost nothing at all, and 5 to 7 cost
#   more than 10 points.
# - **Whole blocks hurt more than their heads one by one.** No head of the second decoder self-attention layer
#   cost more than 41 points alone in any of the three runs, yet the four together cost 95.5 to 96.5 points: the
#   heads back each other up, so only removing all of them reveals what the block does. Without the last
#   cross-attention block almost nothing comes out right (98 to 100 points); without the last *encoder*
#   self-attention block only 2.5 to 7.5 points are lost.
# - **Entropy is a hint, not a verdict.** Both correlations are negative: heads with *lower* entropy (sharper,
#   pointer-like) tend to cost *more* when removed. The rank correlation ($\rho$ from −0.56 to −0.69 over the
#   three runs; with 24 heads any $|\rho|$ above 0.53 has a two-sided p-value below 0.01) is much stronger than
#   Pearson's $r$ (−0.27 in all three): the damage is very skewed (a few heads far above the rest), and a straight
#   line fits such a cloud badly even when the order agrees. Still, the order is not a law — the second most
#   harmful head has middling entropy (about 0.5) — and 24 heads of one model are few. Claims drawn from
#   attention maps alone should be checked by an intervention like this one.
# - **A caveat on the method.** Zeroing a head feeds the layers after it an input they never met in training.
#   The damage therefore mixes two things: how much the model relies on that head, and how badly it copes with
#   an input off its usual distribution. Replacing the head's output by its average over many inputs (mean
#   ablation) stays closer to what the model knows, and can rank the heads differently.
# - **What larger studies found.** Michel et al. (2019, *Are Sixteen Heads Really Better than One?*) and Voita
#   et al. (2019, *Analyzing Multi-Head Self-Attention*) removed heads from trained translation models (and
#   BERT, in Michel et al.): most heads can go at little cost, while a few specialised ones carry much of the
#   work, the picture above at a larger scale. Clark et al. (2019, *What Does BERT Look At?*) found BERT heads
#   that follow syntactic relations. Whether attention weights *explain* a prediction is disputed: Jain and
#   Wallace (2019, *Attention is not Explanation*) showed, on models with one attention layer over a recurrent
#   encoder's states (text classification, question answering, inference; no translation), weights that can be
#   changed a lot without changing the output; Wiegreffe and Pinter (2019, *Attention is not not Explanation*)
#   answered that this depends on what one calls an explanation and how one tests it.
#
# ## Try this
#
# 1. Switch off the **two** most harmful heads together. Is the damage the sum of the two separate damages?
#    (They sit in different blocks, so nest two `with ablate(...)` statements, one per block.)
# 2. Measure damage with BLEU instead of exact match (`evaluate` returns both). Which one is the more
#    sensitive test for this task, and why?
# 3. Use the explorer on *ninety-seven*: which cross-attention head writes *quatre*, *vingt*, *dix*, *sept*
#    while looking at the single English word *ninety*/*seven*?
#
# ## Check your understanding

# %%
T.quiz.show("12")

# %% [markdown]
# ## Summary
#
# - `T.record_attention(model)` gives every map of a forward pass; the explorer shows them by kind, layer and
#   head.
# - Attention entropy, normalised by $\log k$ over the keys each query can see, places a head between
#   pointer (0) and average (1).
# - A forward pre-hook on `w_o` zeroes one head's slice of the concatenated heads: an exact, reversible
#   ablation.
# - A few heads cost nothing when switched off, many cost a little, and a few are essential; sharp attention is not the same as necessary
#   attention. A rank correlation over a few dozen heads is sturdier than Pearson's $r$, but with so few
#   points either is a hint, to be checked by intervention.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 12: Looking inside a trained Transformer. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
