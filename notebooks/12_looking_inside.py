# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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
# A trained model is a few hundred thousand numbers. Attention is the one place where it shows its work:
# every head, in every layer, writes down how much each position reads from each other position. This
# chapter trains a small English → French **number** translator (*three hundred and twenty-one* →
# *trois cent vingt et un*), then asks three questions of it:
#
# - **What does each head look at?** — the attention explorer, over every layer, head and kind.
# - **How focused is each head?** — the **entropy** of its attention, one number per head.
# - **Which heads does the model need?** — switch one head off and measure the damage on held-out numbers.
#
# **What you will learn**: to read attention maps of a trained model, to compute attention entropy with
# masks handled correctly, and to ablate a head with a forward pre-hook — and why the answers of the three
# questions do not always agree.

# %%
# Set-up: installs tfm_lesson when it is missing (Colab, a fresh environment). Locally it does nothing.
import importlib.util, subprocess, sys
if importlib.util.find_spec("tfm_lesson") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                           "tfm-lesson @ git+https://github.com/tfm-lesson/tfm_lesson@main"])

# %%
import math
import time

import torch

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.data import batches, load_task
from tfm_lesson.training import evaluate, make_model, train

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## A model to look at
#
# Numbers from 0 to 999,999 written in English words, with their French translation (generated with
# `num2words`; 50,000 for training, 1,000 held out for validation and 1,000 for test). French reorders and
# merges: *ninety-seven* is *quatre-vingt-dix-sept* ("four-twenty-ten-seven"), *one thousand* is *mille*
# without the "one". The model: $d_\text{model} = 64$, 4 heads, 2 + 2 layers, trained for a fixed 400 steps
# as in chapter 10.

# %%
data = load_task("numbers", seed=0)
print(data)
for src, tgt in data.train[:3]:
    print(f"{src}  ->  {tgt}")

# %%
T.seed_everything(0)
model = make_model(data.src_vocab, data.tgt_vocab, d_model=64, heads=4, layers=2, d_ff=128, dropout=0.0)
start = time.perf_counter()
history = train(model, data, steps=400, batch_size=128, warmup=100, peak_lr=3e-3, eval_every=200,
                device=device, seed=0)
print(f"trained 400 steps in {time.perf_counter() - start:.0f} s on {device.type}")
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

# %%
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
    model(test_batch.src, test_batch.tgt_in)
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
# Then vectorised: every sentence, head and query at once, shapes in the comments. The mask broadcasts from
# $(\text{batch}, 1, 1|t, k)$ to the weights' $(\text{batch}, \text{heads}, q, k)$.

# %%
def head_entropy(weights, mask, real_queries):
    """weights (batch, heads, q, k), mask broadcastable to them, real_queries (batch, q) -> (heads,)."""
    mask = mask.expand_as(weights)                                           # (batch, heads, q, k)
    k = mask.sum(-1).float()                                                 # (batch, heads, q) keys seen
    h = -(weights * weights.clamp_min(1e-12).log()).masked_fill(~mask, 0).sum(-1)  # (batch, heads, q)
    keep = real_queries[:, None, :] & (k >= 2)                               # (batch, heads, q)
    normalised = (h / k.clamp_min(2).log()).masked_fill(~keep, 0)
    per_sentence = normalised.sum(-1) / keep.sum(-1).clamp_min(1)            # (batch, heads)
    return per_sentence.mean(0)                                              # (heads,)


loops = [entropy_loop(w, src_mask, real_tgt, b, 0) for b in range(64)]

# %%
# NBVAL_CHECK_OUTPUT
print("loop == vectorised:", abs(sum(loops) / 64 - head_entropy(w, src_mask, real_tgt)[0].item()) < 1e-5)

# %% [markdown]
# ## See it: entropy per layer and head

# %%
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

# %%
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
    with heads_off(mha, [0]):
        hooked, _ = mha(x, mem, mem)
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

# %%
start = time.perf_counter()
subset = data.test[:200]
damage = torch.zeros(6, 4)                                   # (kind x layer, head)
for row, (kind, layer) in enumerate((k, l) for k in kinds for l in range(2)):
    for head in range(4):
        with heads_off(attention_module(kind, layer), [head]):
            damaged = evaluate(model, subset, data.src_vocab, data.tgt_vocab)
        damage[row, head] = baseline["exact_match"] - damaged["exact_match"]
print(f"24 ablations in {time.perf_counter() - start:.0f} s")
viz.show_matrix(damage, title="Exact-match points lost when one head is switched off", xlabel="head",
                ylabel="kind and layer", y_ticks=labels, x_ticks=[str(h) for h in range(4)])

# %% [markdown]
# And the blunt version: all four heads of one attention block off at once.

# %%
whole = {}
for kind, layer in ((k, l) for k in kinds for l in range(2)):
    with heads_off(attention_module(kind, layer), range(4)):
        whole[f"{kind} L{layer}"] = baseline["exact_match"] - evaluate(model, subset, data.src_vocab,
                                                                       data.tgt_vocab)["exact_match"]
viz.plot_bars(whole, title="Exact-match points lost with a whole attention block off", ylabel="points lost")

# %%
flat_entropy, flat_damage = table.flatten(), damage.flatten()
corr = torch.corrcoef(torch.stack([flat_entropy, flat_damage]))[0, 1].item()
print(f"correlation between a head's entropy and the damage of removing it: {corr:+.2f}")
print(f"heads whose removal costs nothing: {(flat_damage <= 0).sum().item()} of 24; "
      f"costing more than 10 points: {(flat_damage > 10).sum().item()}")
print("most harmful single head:", labels[int(flat_damage.argmax()) // 4], "head", int(flat_damage.argmax()) % 4,
      f"({flat_damage.max():.1f} points)")

# %% [markdown]
# What to take from the three pictures (the figures stored with this chapter come from one run on a
# 2-core CPU; on that run 12 of the 24 heads cost nothing when removed, most others a point or two, and 4 cost
# more than 10 points):
#
# - **Most single heads can go.** Multi-head attention is redundant: when one head is silenced, the others —
#   and the residual stream that bypasses every attention block — carry what it carried.
# - **A few heads are essential.** In the stored run, one head of the first decoder self-attention layer
#   costs about 85 points: without it the decoder loses track of where it is in the French output, and a
#   cross-attention head of the last layer costs about half. The model concentrated a job in one head and
#   built no backup — small models trained briefly often do.
# - **Whole blocks hurt far more than their heads one by one.** In the stored run each head of the second
#   decoder self-attention layer costs at most a point alone, yet the four together cost over 90 points: the heads
#   back each other up, so only removing all of them reveals what the block does. Without the last
#   cross-attention layer the decoder no longer reads the source properly and nothing comes out right;
#   without the last *encoder* self-attention layer almost nothing is lost.
# - **Entropy is a hint, not a verdict.** The correlation printed above is measured, not assumed: a sharp head
#   is easy to interpret, but it is not necessarily the one the model cannot do without. Claims drawn from
#   attention maps alone should be checked by an intervention like this one.
#
# ## Try this
#
# 1. Switch off the **two** most harmful heads together. Is the damage the sum of the two separate damages?
# 2. Measure damage with BLEU instead of exact match (`evaluate` returns both). Which one is the more
#    sensitive test for this task, and why?
# 3. Use the explorer on *ninety-seven*: which cross-attention head writes *quatre*, *vingt*, *dix*, *sept*
#    while looking at the single English word *ninety*/*seven*?
#
# ## Summary
#
# - `T.record_attention(model)` gives every map of a forward pass; the explorer shows them by kind, layer and
#   head.
# - Attention entropy, normalised by $\log k$ over the keys each query can see, places a head between
#   pointer (0) and average (1).
# - A forward pre-hook on `w_o` zeroes one head's slice of the concatenated heads: an exact, reversible
#   ablation.
# - Most single heads are redundant, a few are essential; sharp attention is not the same as necessary
#   attention.
