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
# # 17 · What the heads learned
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/17_what_the_heads_learned.ipynb)
#
# Chapters 11 and 12 drew attention maps and read them by eye: "this head looks like an alignment", "that head
# seems to matter". This chapter replaces the eye with numbers, in two places where the truth is known:
#
# - **Translation.** Our English → French pairs are generated, so the generator knows which English word each
#   French word comes from: a *gold alignment*. The **alignment error rate** (AER) of each cross-attention head
#   against it says, with one number per head, which heads align words and how well.
# - **Copying.** A two-layer model trained on sequences that repeat themselves grows **induction heads**: a head
#   that finds the earlier copy of the current token and predicts what came after it. You will watch them form
#   during training, find them with scores, and then *test* them: switch a head off (ablation) and transplant
#   its output from one run into another (activation patching).
#
# Last, the question behind both: when attention points somewhere, does the model *use* what it points at?
#
# **What you will learn**: the previous-token and prefix-matching scores that point at candidate induction heads
# (you write the second in exercise 1; Olsson et al. also require a *copying* score, whether the head's output
# raises the logit of the token it attends to, which this chapter leaves to ablation and patching instead); ablation and activation patching, and where to patch (exercise 2); gold alignments and the
# alignment error rate of Och & Ney (2003), with its sure and possible links (exercise 3); how to read an
# alignment off a head; and how far attention weights agree with the effect of an intervention (a rank
# correlation).
#
# This chapter trains two small models on the CPU; their cells print how long they took. Read chapters 11
# (translation) and 12 (ablation with a hook on `w_o`) first.

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
import time

import torch
import torch.nn.functional as F

import tfm_lesson as T
from tfm_lesson import viz, widgets
from tfm_lesson.checks import (check_alignment_error_rate, check_induction_score, check_patch_position,
                               yours_or_reference)
from tfm_lesson.data import load_task
from tfm_lesson.data.alignments import generate_aligned
from tfm_lesson.look.interpret import (AttentionOnly, ablate_head, corpus_alignment_error_rate, cross_attention_maps,
                                  extract_alignment, head_alignment_error_rates, induction_scores,
                                  monotonic_alignment, patch_head, repeated_half_loss, repeated_tokens, spearman,
                                  spearman_p_value)
from tfm_lesson.train.recipes import RECIPES
from tfm_lesson.train.loop import make_model, train

torch.set_num_threads(1)  # small models: one thread is fastest, and the runs repeat exactly
T.seed_everything(0)
device = torch.device("cpu")  # both models are small; on one thread a run repeats exactly on this machine
print(f"running on {device.type} ({platform.machine()}, {os.cpu_count()} cores, torch threads "
      f"{torch.get_num_threads()})")

# %% [markdown]
# ## Intuition
#
# An attention map is a claim: "to compute this position, I read mostly from there". Two things can be asked
# of the claim.
#
# 1. **Is it right?** Where the right answer is known, compare. In translation the right answer is the word
#    alignment: *voitures* comes from *cars*, *rouges* from *red*. A head whose argmax points from each French
#    word to its English source is an aligner, and an error rate over its links measures how good.
# 2. **Is it used?** A head can look at the right place and still not matter, because another head does the
#    same job or because the layers after it ignore what it writes. Only an intervention answers that: remove
#    the head's output, or replace it with its output from another input, and measure what changes.
#
# Part one asks both questions of induction heads, where the answer is clean; part two asks them of the chapter
# 11 translation model.
#
# ## Part one: induction heads
#
# ### The data: a segment, then the same segment again
#
# Each sequence is `<s>` (id 0), a segment of random tokens, then the same segment again. The first half cannot
# be predicted at all: every token is drawn uniformly. The second half can be predicted perfectly (all but its
# first token, which nothing announces), but only by a model that *looks back*: to predict the token after `A`
# in the repeat, find the earlier `A` and copy the token that followed it.

# %%
# NBVAL_CHECK_OUTPUT
VOCAB, SEG = 64, 20                                # 63 random tokens + <s>; the segment length used for scoring
g = torch.Generator().manual_seed(0)
example = repeated_tokens(1, 8, VOCAB, g)[0]
print("one sequence with an 8-token segment:", example.tolist())
print("first half  (positions 1..8): ", example[1:9].tolist())
print("second half (positions 9..16):", example[9:].tolist())

# %% [markdown]
# ### The math: two scores read off attention
#
# Write $a_{t,s}$ for the weight a head puts, at query position $t$, on key position $s$ (causal: $s \le t$). For
# sequences of $L = 1 + 2n$ positions ($n$ the segment length, position 0 holding `<s>`):
#
# - **previous-token score**: $\frac{1}{L-1}\sum_{t=1}^{L-1} a_{t,t-1}$, the mean weight on the key just before
#   the query. A head that scores near 1 copies each token's predecessor into its position.
# - **prefix-matching score** (Olsson et al., 2022): over the queries of the repeated half, $t = n+1, \dots, 2n$,
#   the mean of $a_{t,\,t-n+1}$. Position $t - n$ holds the earlier copy of token $t$; position $t-n+1$ holds
#   the token that followed it, which is the next token to predict. An induction head attends there.
#
# No single layer can compute the second pattern from the tokens alone: the key at $t-n+1$ must announce "the
# token before me was the one you hold", and only a head in an earlier layer can write the previous token into
# that position. Elhage et al. (2021) call this **K-composition**: a previous-token head in layer 0 builds the
# keys that an induction head in layer 1 matches against. Olsson et al. (2022) found induction heads in every
# model of two layers or more that they studied, forming in one sudden **phase change** during training.
#
# ### Build it: a two-layer attention-only model
#
# `AttentionOnly` is a decoder-only Transformer with the feed-forward blocks removed: token and learned position
# embeddings, two blocks of `x = x + MultiHeadAttention(LayerNorm(x))` with a causal mask, four heads each, and a
# final LayerNorm before a linear read-out. With no feed-forward blocks, everything the model computes between
# positions goes through the eight heads.
#
# It trains on sequences whose segment length changes from batch to batch (6 to 20 tokens). With one fixed
# length, a single head could solve the task by position alone ("attend $n-1$ positions back"); with varying
# lengths it has to match tokens.

# %%
T.seed_everything(0)
toy = AttentionOnly(VOCAB, d_model=64, heads=4, num_layers=2, max_len=1 + 2 * SEG)
print(toy)
print("parameters:", T.count_parameters(toy))
before = induction_scores(toy, seg_len=SEG, batch=64, seed=1)  # scores of the untrained model, for later

# %% [markdown]
# Train by a fixed number of steps (800, batches of 32, Adam at $3 \cdot 10^{-3}$). Every 20 steps the loop
# records the loss on each half of one fixed probe batch of 20-token segments, and the best prefix-matching
# score of a layer-1 head and the best previous-token score of a layer-0 head.

# %%
STEPS, LOG_EVERY = 800, 20
opt = torch.optim.Adam(toy.parameters(), lr=3e-3)
data_gen = torch.Generator().manual_seed(1)
probe = repeated_tokens(64, SEG, VOCAB, torch.Generator().manual_seed(2))  # the same probe batch every time
log = {"step": [], "loss, first half": [], "loss, repeated half": [], "prefix matching (best layer-1 head)": [],
       "previous token (best layer-0 head)": []}
start = time.perf_counter()
for step in range(1, STEPS + 1):
    seg_len = int(torch.randint(6, SEG + 1, (1,), generator=data_gen))
    x = repeated_tokens(32, seg_len, VOCAB, data_gen)
    logits = toy(x)                                                       # (batch, len, vocab)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % LOG_EVERY == 0 or step == 1:
        toy.eval()
        with torch.no_grad():
            probe_logits = toy(probe)
        scores = induction_scores(toy, seg_len=SEG, batch=64, seed=1)
        toy.train()
        log["step"].append(step)
        log["loss, first half"].append(repeated_half_loss(probe_logits, probe, SEG, "first").item())
        log["loss, repeated half"].append(repeated_half_loss(probe_logits, probe, SEG).item())
        log["prefix matching (best layer-1 head)"].append(scores["prefix_matching"][1].max().item())
        log["previous token (best layer-0 head)"].append(scores["previous_token"][0].max().item())
toy.eval()
toy_seconds = time.perf_counter() - start
print(f"trained {STEPS} steps in {toy_seconds:.0f} s on {device.type}")
print(f"final loss: first half {log['loss, first half'][-1]:.2f}, repeated half {log['loss, repeated half'][-1]:.2f} "
      f"(log {VOCAB - 1} = {torch.log(torch.tensor(VOCAB - 1.0)):.2f} is the loss of a uniform guess)")

# %% [markdown]
# ### See it: the phase change

# %% mystnb={"image": {"alt": "Line chart of the loss on each half of repeated-token sequences over the training steps: both start near the same value; the first half stays near it and ends a little above it, while the repeated half drops sharply partway through training to well below it."}}
steps = log["step"]
viz.plot_lines({k: log[k] for k in ("loss, first half", "loss, repeated half")}, x=steps,
               title="Loss on each half of repeated sequences", ylabel="cross-entropy (nats)")

# %% mystnb={"image": {"alt": "Line chart of two scores over the training steps: the best layer-1 head's prefix-matching score and the best layer-0 head's previous-token score stay near zero, then rise together at the steps where the repeated half's loss drops."}}
viz.plot_lines({k: log[k] for k in ("prefix matching (best layer-1 head)", "previous token (best layer-0 head)")},
               x=steps, title="Induction scores during training", ylabel="mean attention weight")

# %%
half_gap = [s for s, a, b in zip(steps, log["loss, first half"], log["loss, repeated half"]) if b < a / 2]
print(f"the repeated half's loss first falls below half of the first half's at step {half_gap[0]}"
      if half_gap else "the repeated half's loss never fell below half of the first half's")

# %% [markdown]
# Read the two figures together. The loss on the first half never falls below the uniform guess's: those
# tokens are random, and nothing can be learnt about them. (Once the model copies, it even rises above it:
# compare the first half's final loss with the uniform guess, both printed by the training cell. The model now
# bets on tokens it has already seen, a bad bet in a random first half.) The loss on
# the repeated half falls only slowly for hundreds of steps, then steeply (the cell above prints the step where
# it crosses half of the first half's loss). The two scores rise at the same moment: the previous-token head
# and the induction head form *together*, as the K-composition argument predicts, since neither is any use
# without the other. That sudden drop is the phase change of Olsson et al., in miniature.
#
# ### Name the heads

# %%
after = induction_scores(toy, seg_len=SEG, batch=64, seed=1)
for name, scores in (("before training", before), ("after training", after)):
    print(f"{name}:")
    for key in ("previous_token", "prefix_matching"):
        rows = "  ".join(f"layer {l}: " + " ".join(f"{v:.2f}" for v in scores[key][l].tolist())
                         for l in range(scores[key].size(0)))
        print(f"  {key:16s} {rows}")
prev_head = int(after["previous_token"][0].argmax())
ind_head = int(after["prefix_matching"][1].argmax())
print(f"previous-token head: layer 0, head {prev_head} (score {after['previous_token'][0, prev_head]:.2f})")
print(f"induction head:      layer 1, head {ind_head} (score {after['prefix_matching'][1, ind_head]:.2f})")

# %% [markdown]
# Before training every score is small: a random head spreads its weight over the keys it can see. After
# training, compare the rows of the table above. In layer 0 one head's previous-token score stands out; in
# layer 1, look at how many heads score high on prefix matching: the cell names the highest, but it may not be
# alone. Here are the two named heads' maps on one probe sequence, each row a query. The previous-token head
# draws the diagonal just below the main one in the first half, where its output is needed (the keys an
# induction head matches are there); in the second half it looks elsewhere. The induction head, in the second
# half, draws a line $n - 1$ positions back, one step after the earlier copy.

# %% mystnb={"image": {"alt": "Two attention heatmaps over one repeated-token sequence: the previous-token head of layer 0 lights the cells just below the diagonal, and the induction head of layer 1 lights, in the repeated half, a line offset back by one less than the segment's length."}}
with torch.no_grad(), T.record_attention(toy) as record:
    toy(probe[:1])
fig = viz.Figure(figsize=(10, 4.4), dpi=viz.DPI, layout="constrained")
for ax, layer, head, what in zip(fig.subplots(1, 2), (0, 1), (prev_head, ind_head), ("previous token", "induction")):
    viz.show_attention(record.get(layer=layer)[0, head], title=f"layer {layer}, head {head} ({what})", ax=ax)
fig

# %% [markdown]
# ### Exercise 1: the prefix-matching (induction) score
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `induction_score(attention, seg_len)`: `attention` is `(..., 1 + 2 seg_len, 1 + 2 seg_len)` over `<s>`,
# a segment and its repeat; return `(...)`, the mean over the queries $t$ of the **repeated** half
# ($t = n+1, \dots, 2n$, with $n$ = `seg_len`) of `attention[..., t, t - n + 1]`.

# %%
def induction_score(attention, seg_len):
    ...  # your turn: (...)


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def induction_score(attention, seg_len):
    queries = torch.arange(seg_len + 1, 2 * seg_len + 1)           # the repeated half
    return attention[..., queries, queries - seg_len + 1].mean(-1)  # one key after the earlier copy


# %%
# NBVAL_CHECK_OUTPUT
check_induction_score(induction_score)

# %% [markdown]
# Now score the trained model with your function: every head of both layers, on the 64 sequences that
# `induction_scores` drew for the table above (seed 1). The first line the cell prints says whose `induction_score`
# it uses: yours once it passes its check; until then the package's stands in. The comparison of scores with
# interventions at the end of the chapter uses the scores it computes here.

# %%
# NBVAL_CHECK_OUTPUT
score_of = yours_or_reference(induction_score, "induction_score", say=True)
tokens = repeated_tokens(64, SEG, VOCAB, torch.Generator().manual_seed(1))  # the batch induction_scores drew
with torch.no_grad(), T.record_attention(toy) as seen:
    toy(tokens)
prefix_scores = torch.stack([score_of(seen.get(layer=l), SEG).mean(0) for l in range(2)])  # (layers, heads)
print("equal to the prefix-matching rows of the table above:",
      torch.allclose(prefix_scores, after["prefix_matching"], atol=1e-5))

# %% [markdown]
# ### Confirm by ablation
#
# Scores say where a head looks. To see whether the model *needs* it, replace each head's output by its mean
# over the batch and the positions (mean ablation: the head still writes something ordinary, but nothing that depends on the
# input) and measure the loss on the repeated half. `ablate_head` does it with a forward pre-hook on `w_o`, as
# in chapter 12.

# %%
with torch.no_grad():
    base_loss = repeated_half_loss(toy(probe), probe, SEG).item()
ablation = torch.zeros(2, 4)                                         # (layers, heads) loss rise
for layer in range(2):
    for head in range(4):
        ablation[layer, head] = repeated_half_loss(ablate_head(toy, probe, layer, head), probe, SEG).item() - base_loss
print(f"loss on the repeated half: {base_loss:.3f} with every head")
for layer in range(2):
    rises = "  ".join(f"{v:+.2f}" for v in ablation[layer].tolist())
    print(f"  rise when one head of layer {layer} is ablated: {rises}")
worst = divmod(int(ablation.argmax()), 4)
print(f"the largest rise: layer {worst[0]}, head {worst[1]}; named above: layer 0 head {prev_head}, "
      f"layer 1 head {ind_head}")

# %% [markdown]
# The cell above prints one rise per head; compare the two named heads with the rest. The previous-token head
# is the one the model cannot do without: every induction head in layer 1 reads the keys it builds, so
# removing it breaks them all at once. Removing the named induction head costs much less, and so does removing
# any other layer-1 head: where several heads score high on prefix matching, they back each other up, and
# no single one is indispensable. The scores named the right heads; the ablation says which of them is a
# single point of failure.
#
# ### Confirm by activation patching
#
# Ablation removes; **activation patching** transplants. Run the model on a **clean** input (a segment and its
# repeat) and on a **corrupted** one (the same second half, after a different random first half: nothing to
# copy). Then run the corrupted input again, but with one head's output replaced, at some positions, by that
# head's output on the clean input. If the loss on the repeated half falls back toward the clean loss, that
# head at those positions carries the information that makes copying work. The measure is the fraction of the
# gap restored: $(L_\text{corrupted} - L_\text{patched}) / (L_\text{corrupted} - L_\text{clean})$.
#
# Where to patch matters. A head writes its output at its **query** position, and that output is what the next
# layer and the read-out see there. The induction head predicts token $t+1$ from position $t$, so it is patched
# at the repeated half's query positions $t = n+1, \dots, 2n$ — not at the keys it attends to.

# %%
clean = probe
corrupted = clean.clone()
corrupted[:, 1:SEG + 1] = repeated_tokens(64, SEG, VOCAB, torch.Generator().manual_seed(3))[:, 1:SEG + 1]
with torch.no_grad():
    loss_clean = repeated_half_loss(toy(clean), clean, SEG).item()
    loss_corrupted = repeated_half_loss(toy(corrupted), corrupted, SEG).item()
repeat_queries = list(range(SEG + 1, 2 * SEG + 1))                  # where the induction head writes
first_half_keys = list(range(2, SEG + 2))                           # where it reads (t - SEG + 1)


def restored(logits):
    patched = repeated_half_loss(logits, corrupted, SEG).item()
    return (loss_corrupted - patched) / (loss_corrupted - loss_clean)


print(f"loss on the repeated half: clean {loss_clean:.2f}, corrupted {loss_corrupted:.2f}")
patching = torch.zeros(2, 4)
for layer in range(2):
    for head in range(4):
        patching[layer, head] = restored(patch_head(toy, clean, corrupted, layer, head, positions=repeat_queries))
    print(f"  layer {layer}, gap restored by patching one head at the repeat's queries: "
          + "  ".join(f"{v:.2f}" for v in patching[layer].tolist()))
wrong = restored(patch_head(toy, clean, corrupted, 1, ind_head, positions=first_half_keys))
print(f"induction head (layer 1, head {ind_head}) patched at the repeat's queries: {patching[1, ind_head]:.2f} "
      f"of the gap; at the keys it reads instead: {wrong:.2f}")

# %% [markdown]
# The cell above prints, for each head, how much of the gap patching it alone restores. The layer-1 heads
# restore a real share each, the named induction head among the most: its clean output carries the token to
# copy, which nothing else in the corrupted run knows. Patched at the positions it *reads* from, the same head
# restores next to nothing (the last line), and the reason is structural. Layer 1 is the model's last layer, so a
# head's output at position $s$ reaches only the logits at $s$: nothing after it can carry it elsewhere. The
# positions it reads from, $2, \dots, n+1$ (with $n$ = `SEG`), predict tokens that the loss on the repeated half
# does not count, except the last of them, $n+1$, which is also the repeat's first query. The little that the last
# line shows comes from that one position. The layer-0 heads restore
# almost nothing when patched at the repeat's queries: the previous-token head's work is read at the *keys* in
# the first half, and even there its clean output would only point the induction heads at positions whose
# corrupted tokens are the wrong ones to copy. Patching answers a narrower question than ablation: not "is this
# head needed?" but "does this head, here, carry the difference between the two inputs?"
#
# ### Exercise 2: patch one head at one position
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~10 min
#
# `patch_head` edits the heads' outputs just before `w_o`, shaped `(batch, len, heads, d_k)`. Write
# `patch(clean, corrupted, head, position)`, with its arguments in `patch_head`'s order (the clean run first), that
# returns a **new** tensor equal to `corrupted` except at `[:, position, head]`, which comes from `clean`. Leave
# both inputs unchanged: the corrupted activations are needed again for the next head.

# %%
def patch(clean, corrupted, head, position):
    ...  # your turn: a patched copy of corrupted


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def patch(clean, corrupted, head, position):
    out = corrupted.clone()                                          # (batch, len, heads, d_k)
    out[:, position, head] = clean[:, position, head]               # the query position, one head
    return out


# %%
# NBVAL_CHECK_OUTPUT
check_patch_position(patch)

# %% [markdown]
# Now patch with your function. Given `patch=`, `patch_head` hands the replacing to it, once per position, with
# the clean run's and the corrupted run's head outputs; the first line the cell prints says whose `patch` it is.
# Patch the induction head at **one** query position at a time, every position of the sequence in turn, and
# measure the share of the gap that each one restores.

# %% mystnb={"image": {"alt": "Line chart of the share of the gap restored when the induction head is patched at one query position at a time: zero over the whole first half and at the last position, a small positive share at each of the repeat's other queries."}}
patch_fn = yours_or_reference(patch, "patch", say=True)
positions = list(range(1 + 2 * SEG))
one_position = torch.tensor([restored(patch_head(toy, clean, corrupted, 1, ind_head, positions=[t], patch=patch_fn))
                             for t in positions])                   # (positions,) share of the gap restored
elsewhere = [t for t in positions if t not in repeat_queries]
print(f"largest share at a position outside the repeat's queries: {one_position[elsewhere].abs().max():.3f}")
print(f"the shares of the repeat's queries add up to {one_position[repeat_queries].sum():.3f}; "
      f"patched at all of them at once (above): {patching[1, ind_head]:.3f}")
viz.plot_lines({f"layer 1, head {ind_head}, patched at one position": one_position.tolist()}, x=positions,
               title="Share of the gap restored by one position of the induction head", xlabel="query position",
               ylabel="share of the gap restored")

# %% [markdown]
# The two printed lines make the argument above visible: a head of the last layer reaches only the logits of its
# own position. Outside the repeat's queries a one-position patch restores nothing, since those positions'
# predictions are not in the loss (nor is the prediction of the last position, $2n$, which has no next token). For
# the same reason the one-position shares add up to the share of patching all of the repeat's queries at once: in
# the last layer, patches at different positions cannot interact. The curve shows how the copying is shared among
# the repeat's queries, each carrying a small part of it.

# %% [markdown]
# ## Part two: do cross-attention heads align words?
#
# ### Gold alignments
#
# `generate_aligned(n, seed)` produces the same pairs as the generator of chapter 11 (`generate_sentences`),
# each with its alignment. The generator knows the clause it realised, so it knows which words belong
# together: determiner with determiner, noun with noun, each adjective with itself wherever French puts it.
# Links come in two kinds, as in Och & Ney's annotation (2003):
#
# - **sure** ($S$): a word that translates a word (*voitures* — *cars*, *pas* — *not*);
# - **possible** ($P \supseteq S$): words that only translate *together*. *did not arrive* — *ne sont pas
#   arrivées*: no single French word translates *did*, so every pair of the two verb groups is possible,
#   with the lexical verbs sure and, of the negation, only *pas* — *not* (*ne* is only possible).
#
# A French word with no English counterpart (*des* before a bare English plural) has no link. Each link is a
# pair (target index, source index), counted in the tokens of the chapter 11 vocabularies.

# %%
# NBVAL_CHECK_OUTPUT
shown = generate_aligned(4, seed=1)[3]
print(shown.en, "->", shown.fr)
for f, token in enumerate(shown.fr_tokens):
    sure = [shown.en_tokens[e] for g_, e in sorted(shown.sure) if g_ == f]
    maybe = [shown.en_tokens[e] for g_, e in sorted(shown.possible - shown.sure) if g_ == f]
    print(f"  {f:2d} {token:12s} sure: {', '.join(sure) or '-':18s} possible: {', '.join(maybe) or '-'}")

# %% [markdown]
# ### The math: alignment error rate
#
# For a predicted alignment $A$ (a set of links), sure links $S$ and possible links $P \supseteq S$ (Och & Ney,
# 2003):
#
# $$\text{precision} = \frac{|A \cap P|}{|A|}, \qquad \text{recall} = \frac{|A \cap S|}{|S|}, \qquad
# \text{AER} = 1 - \frac{|A \cap S| + |A \cap P|}{|A| + |S|}.$$
#
# A predicted link is not wrong if it is possible; a sure link must be found. AER is 0 for a perfect alignment
# and 1 when nothing matches. Over a corpus, the four counts are summed over the sentences before the ratio is
# taken. $A$, $S$ and $P$ are **sets**: a link named twice is one link.
#
# ### Exercise 3: the alignment error rate
# **Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min
#
# Write `aer(predicted, sure, possible=None)` for one sentence; with `possible=None`, $P = S$. The inputs may be
# lists, and any of the three may name a link twice: count such a link once, or refuse the input with a
# `ValueError` (the package's `alignment_error_rate` raises one); the checker accepts either.

# %%
def aer(predicted, sure, possible=None):
    ...  # your turn: a float in [0, 1]


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def aer(predicted, sure, possible=None):
    a, s = set(predicted), set(sure)                                 # sets: a repeated link counts once
    p = s if possible is None else set(possible) | s
    return 1 - (len(a & s) + len(a & p)) / (len(a) + len(s))


# %%
# NBVAL_CHECK_OUTPUT
check_alignment_error_rate(aer)

# %% [markdown]
# ### The model: chapter 11's translator
#
# The same recipe as chapter 11, `RECIPES["sentences"]`: $d_\text{model} = 128$, 4 heads, 2 + 2 layers,
# $d_\text{ff} = 256$, dropout 0.1, 500 steps of 64 pairs, warm-up 200 steps to a peak rate of 0.002, label
# smoothing 0.1 (the validation set is scored once, at the end, instead of at regular steps as in chapter 11).

# %%
data = load_task("sentences", seed=0)
T.seed_everything(0)
recipe = RECIPES["sentences"]  # chapter 11's recipe: the model's size and the training run
model = make_model(data.src_vocab, data.tgt_vocab, **recipe["model"])
start = time.perf_counter()
history = train(model, data, **recipe["train"], eval_every=None, device=device, seed=0, progress=False, threads=1)
model.eval()
print(f"trained {recipe['train']['steps']} steps in {time.perf_counter() - start:.0f} s on {device.type}; "
      f"last training loss {history['loss'][-1]:.2f}")

# %% [markdown]
# Gold alignments for 200 sentences the model has not trained on: generated with another seed, any that also
# occur in the training set dropped.

# %%
train_en = {en for en, _ in data.train}
gold = [p for p in generate_aligned(300, seed=1) if p.en not in train_en][:200]
print(len(gold), "test sentences with gold alignments,",
      sum(len(p.sure) for p in gold), "sure links,", sum(len(p.possible) for p in gold), "possible links")

# %% [markdown]
# ### Read an alignment off a head
#
# For each French word, take the English word its row attends to most (`extract_alignment(..., "argmax")`);
# attention parked on the source's `</s>` counts as "no link". Which row belongs to a French word needs a
# decision. Under teacher forcing the decoder's input is `<s> y_1 … y_n`; the query at position $j$ **predicts**
# $y_{j+1}$, while $y_{j+1}$ is the decoder's **input** one position later. `shift=0` reads word $y_{j+1}$ from
# the row that predicts it, `shift=1` from the row that reads it. Both are used: Chen et al. (2020) found the
# second better on real data and larger models. The chapter measures both.

# %%
aer_predict = head_alignment_error_rates(model, gold, data.src_vocab, data.tgt_vocab, shift=0)  # (layers, heads)
aer_read = head_alignment_error_rates(model, gold, data.src_vocab, data.tgt_vocab, shift=1)
mono = corpus_alignment_error_rate([(monotonic_alignment(len(p.fr_tokens), len(p.en_tokens)), p.sure, p.possible)
                                    for p in gold])
for name, table in (("row that predicts the word (shift=0)", aer_predict),
                    ("row that reads the word (shift=1)", aer_read)):
    print(f"AER per cross-attention head, {name}:")
    for layer in range(table.size(0)):
        print(f"  decoder layer {layer}: " + "  ".join(f"{v:.3f}" for v in table[layer].tolist()))
print(f"monotonic baseline (French word t -> English word at the same relative position): AER {mono:.3f}")
both = torch.stack([aer_predict, aer_read])                         # (shift, layers, heads)
best_shift, best_layer, best_head = (int(i) for i in torch.unravel_index(both.argmin(), both.shape))
best_aer = both[best_shift, best_layer, best_head].item()
layers = aer_predict.size(0)
which = "last" if best_layer == layers - 1 else "penultimate" if best_layer == layers - 2 else "first"
print(f"best head: decoder layer {best_layer} (the {which} "
      f"of {layers}), head {best_head}, shift={best_shift}: AER {best_aer:.3f}, "
      f"{'better' if best_aer < mono else 'not better'} than the monotonic baseline")

# %% [markdown]
# The cell above prints two tables, a baseline and a verdict. Read them in this order:
#
# - **The baseline.** The monotonic alignment links the $t$-th French word to the English word at the same
#   relative position. English and French share most of their word order, so it is not a weak baseline; what
#   it misses is mostly the crossing of adjectives, the split negation *ne … pas*, and the drift that comes
#   from the two sentences having different lengths.
# - **The two conventions.** Compare the two tables head by head. In this model the choice of row matters as
#   much as the choice of head: read from the row that predicts a word, a head can be an excellent aligner and
#   the same head, read one row later, a poor one. The decoder looks at the English word it is about to
#   translate, not at the one it has just written.
# - **The layers.** Within one table, compare the rows of layer 0 and layer 1 with each other and with the
#   baseline: whether a layer's heads beat the baseline says whether that layer aligns at all.
#
# Garg et al. (2019) measured the same thing on six-layer Transformers trained on real German–English,
# Romanian–English and English–French data, reading each layer's alignment from the mean of its heads. They
# found the **penultimate** layer the best aligner (the last layer worse), with alignment error rates well above
# those of statistical word aligners such as GIZA++. Our decoder has two layers, so "penultimate" is layer 0;
# the verdict line says which layer wins here, and in the stored run it is not the penultimate one. A plausible
# reason, not a tested one: with two layers, the first decoder layer's queries have been through only one round
# of the target's self-attention, and the last layer is the only one left to do the aligning. One small model on
# a tiny, regular language is one data point, not a replication.
#
# ### See it: the best head against the gold alignment

# %% mystnb={"image": {"alt": "Heatmap of one cross-attention head on one sentence, French words against English words, with gold links framed: the brightest cell of almost every row lies in a solid sure-link frame, adjective and noun reordering included, and the negation falls inside the dashed possible links."}}
def crossings(pair):
    """How many pairs of sure links cross (the word order changes between the languages)."""
    links = sorted(pair.sure)
    return sum(1 for i, (f1, e1) in enumerate(links) for f2, e2 in links[i + 1:] if f1 < f2 and e1 > e2)


sample = max(gold[:40], key=lambda p: (crossings(p), len(p.possible - p.sure) > 0, -len(p.fr_tokens)))
src_ids, tgt_ids = data.src_vocab.encode(sample.en), data.tgt_vocab.encode(sample.fr, bos=True)
maps = cross_attention_maps(model, src_ids, tgt_ids)               # (layers, heads, n_fr + 1, n_en + 1)
rows = maps[best_layer, best_head, best_shift:best_shift + len(sample.fr_tokens)]  # one row per French word
predicted = extract_alignment(rows, source_len=len(sample.en_tokens))
print(sample.en, "->", sample.fr)
viz.show_alignment(rows, sample.sure, sample.possible, x_tokens=list(sample.en_tokens) + ["</s>"],
                   y_tokens=list(sample.fr_tokens), title=f"Decoder layer {best_layer}, head {best_head} "
                   f"(shift={best_shift}), gold links framed", xlabel="English (key)", ylabel="French word")

# %% [markdown]
# Solid frames are sure gold links, dashed ones possible. A good aligner puts its brightest cell of each row
# inside a frame; the crossing of English adjective–noun order into French noun–adjective order shows as
# frames that leave the diagonal and swap places, and a verb group as a block of dashed frames.
#
# Score this sentence with your `aer`: the head's alignment drawn above, and the monotonic baseline on the same
# sentence. The first line the cell prints says whose `aer` it uses (yours once it passes its check, else the
# package's).

# %%
aer_of = yours_or_reference(aer, "aer", say=True)
straight = monotonic_alignment(len(sample.fr_tokens), len(sample.en_tokens))
print(f"this sentence: AER {aer_of(predicted, sample.sure, sample.possible):.3f} for decoder layer {best_layer}, "
      f"head {best_head}; {aer_of(straight, sample.sure, sample.possible):.3f} for the monotonic baseline")

# %% [markdown]
# ## Is attention an explanation?
#
# Both parts measured two things about the same heads: what the attention points at (a score read off the maps)
# and what happens when the head is removed (an intervention). If attention explained the model's behaviour, the
# two would rank the heads alike. Whether attention explains a model is debated. The first two papers below
# studied attention over *input tokens*, not heads: Jain & Wallace compared it with other measures of each
# token's importance, and Wiegreffe & Pinter tested what it carries (against uniform weights, the spread over
# random seeds, a diagnostic model and adversarial weights). Of the last two, Michel et al. removed heads without
# asking where they attend, while Voita et al. came closest to this chapter's question: they named encoder heads
# by where they attend and found those heads among the most important. Here every head is ranked both ways, and
# the two rankings are compared with one number.
#
# - Jain & Wallace (2019), *Attention is not Explanation*, found that the attention weights of recurrent models
#   for text classification, question answering and inference often disagree with gradient and leave-one-out
#   measures of importance, and that very different attention distributions can give the same prediction.
# - Wiegreffe & Pinter (2019), *Attention is not not Explanation*, answered that this depends on what
#   "explanation" means: attention can be one plausible account among several, and their tests show it often
#   carries real information, though it is not the unique faithful one.
# - Michel et al. (2019), *Are Sixteen Heads Really Better than One?*, removed a large fraction of the heads of
#   trained Transformers at test time with little loss (some layers down to a single head); Voita et al. (2019),
#   *Analyzing Multi-Head Self-Attention*, recognised a few specialised encoder heads by their attention
#   (positional, syntactic, rare-word), found them the most important by layer-wise relevance propagation and the
#   last to be pruned, and pruned most of the rest.
#   Many heads look busy in their maps and are not needed.
#
# Here are both comparisons. For each translation head: how well it aligns ($1 - \text{AER}$, the row
# convention that won above) against how much the loss on the 200 test sentences rises when the head is
# mean-ablated. For each head of the copying model: its prefix-matching score, read with the `induction_score` that
# the line after exercise 1 named, against the ablation rise measured above. Spearman's rank correlation $\rho$ (the
# Pearson correlation of the ranks) is $+1$ when the two orders agree, $-1$ when they are reversed.

# %%
def test_batch(pairs):
    src = T.data.encode_batch([p.en for p in pairs], data.src_vocab)
    tgt = T.data.pad_sequences([data.tgt_vocab.encode(p.fr, bos=True) for p in pairs], data.tgt_vocab.pad_id)
    return src, tgt


def translation_loss(logits, tgt):
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=data.tgt_vocab.pad_id).item()


src, tgt = test_batch(gold)
with torch.no_grad():
    full_loss = translation_loss(model(src, tgt[:, :-1]), tgt)
cross = [i for i, (name, _) in enumerate(T.interpret.attention_modules(model)) if "cross_attn" in name]
rise = torch.zeros(layers, 4)
for layer, index in enumerate(cross):
    for head in range(4):
        rise[layer, head] = translation_loss(ablate_head(model, (src, tgt[:, :-1]), index, head), tgt) - full_loss
aligns = 1 - both[best_shift]
print(f"test loss {full_loss:.3f}; rise when one cross-attention head is mean-ablated:")
for layer in range(layers):
    print(f"  decoder layer {layer}: " + "  ".join(f"{v:+.3f}" for v in rise[layer].tolist()))
rho_translation = spearman(aligns.flatten(), rise.flatten())
rho_copying = spearman(prefix_scores.flatten(), ablation.flatten())  # the scores read with score_of (exercise 1)
p_translation = spearman_p_value(aligns.flatten(), rise.flatten())  # exact: all 8! pairings of the heads
p_copying = spearman_p_value(prefix_scores.flatten(), ablation.flatten())
print(f"Spearman rho, translation heads (1 - AER vs loss rise): {rho_translation:+.2f} (p = {p_translation:.2f})")
print(f"Spearman rho, copying-model heads (prefix matching vs loss rise): {rho_copying:+.2f} (p = {p_copying:.2f})")

# %% mystnb={"image": {"alt": "Two scatter plots with one point per head, attention score across and loss rise when ablated up, each titled with its rank correlation: for the translation model the four heads of the last layer align far better and each costs more when removed than any head of the first layer; for the copying model the previous-token head costs by far the most although its prefix-matching score is near zero."}}
fig = viz.Figure(figsize=(9, 3.4), dpi=viz.DPI, layout="constrained")
for ax, xs, ys, title, xlabel in zip(
        fig.subplots(1, 2),
        (aligns.flatten(), prefix_scores.flatten()), (rise.flatten(), ablation.flatten()),
        (f"translation heads, rho = {rho_translation:+.2f}", f"copying-model heads, rho = {rho_copying:+.2f}"),
        ("1 - AER (how well the map aligns)", "prefix-matching score")):
    xs, ys = xs.tolist(), ys.tolist()
    for layer in (0, 1):
        ax.scatter(xs[4 * layer:4 * layer + 4], ys[4 * layer:4 * layer + 4], color=viz.PALETTE[layer],
                   label=f"layer {layer}")
    ax.legend(fontsize=viz.FONT - 1, loc="center")
    x_span, y_span = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    groups: list[list[int]] = []  # heads whose points nearly coincide share one label, listed left to right
    for k in sorted(range(len(xs)), key=xs.__getitem__):
        near = [g for g in groups if any(abs(xs[k] - xs[j]) < 0.08 * x_span and abs(ys[k] - ys[j]) < 0.08 * y_span
                                         for j in g)]
        (near[0].append(k) if near else groups.append([k]))
    for g in groups:
        right = xs[g[0]] > min(xs) + x_span / 2  # near the right edge, the label runs leftwards
        anchor = (max(xs[j] for j in g) if right else min(xs[j] for j in g), max(ys[j] for j in g))
        ax.annotate(", ".join(f"{j // 4}.{j % 4}" for j in g), anchor, fontsize=viz.FONT - 1,
                    xytext=(-3 if right else 3, 5), textcoords="offset points", ha="right" if right else "left")
    ax.set_title(title, fontsize=viz.FONT + 1)
    ax.set_xlabel(xlabel, fontsize=viz.FONT)
    ax.set_ylabel("loss rise when ablated", fontsize=viz.FONT)
fig

# %% [markdown]
# Each point is a head, labelled layer.head (heads whose points nearly coincide share one label, listed left to
# right). The cell above the figure prints both rank correlations, each
# with its **p-value**: the share of all $8! = 40{,}320$ ways of pairing the eight scores with the eight loss
# rises at random that give a $\rho$ at least as far from 0. A small p-value says a ranking this alike is rare
# by chance alone; with eight heads, $|\rho|$ must reach about 0.74 for $p$ to fall below 0.05.
#
# Read the translation model's $\rho$ with that in mind; yours is printed above. This model was also trained
# from the same seed three times on one machine, each time with PyTorch's CPU code for a different family of
# vector instructions (chosen by the environment variable `ATEN_CPU_CAPABILITY`: `default`, `avx2`, `avx512`).
# They add numbers in different orders, so the last digits of every sum differ and the runs drift apart a
# little. Those three runs gave $\rho$ = +0.57 twice (p = 0.15) and +0.79 once (p = 0.03): the sign held, the
# significance did not. What held in all three runs is coarser: the four heads of the last decoder layer align
# far better than the four of the first (their AER 0.04 to 0.16, the first layer's 0.40 to 0.57) and each costs
# more to remove. Eight heads of one model cannot say whether alignment and importance go together *within* a
# layer; more heads, more seeds or more models would be needed. The copying model's $\rho$ printed the same
# digits under all three settings. Three things to see:
#
# - **Even for the heads that matter, the scale is small.** Look at the loss rise of the best aligners next to the test loss
#   printed above (plain cross-entropy; the training and validation losses of the training cell include label
#   smoothing, which keeps them far higher even for a good model). Removing any one of them raises the test loss
#   by a fraction of itself, nowhere near the level of an untrained model: each head aligns, and none is needed
#   alone, because its neighbours align too. (Voita et al. and Michel et al. pruned the decoder's self-attention
#   and encoder-decoder attention heads as well as the encoder's, and both found encoder-decoder attention *more*
#   dependent on having several heads than self-attention (Voita et al.; Michel et al., on machine
#   translation), but by pruning many heads at once; removing one head at a time, as here, does not test that.)
# - **One score sees one pattern.** In the copying model, the previous-token head named above (in layer 0) is the
#   costliest to remove, yet its prefix-matching score is as low as that of heads that do nothing: its job is
#   another pattern, which this attention score was not built to see. A ranking by one attention score would
#   have called it unimportant.
# - **Attention is evidence about reading, not about use.** Attention tells you where a head reads; only an
#   intervention tells you what the model needs. Use the maps to form hypotheses, and interventions to test
#   them.
#
# ## Play with it
#
# Pick a model, a layer and a head: the map (with the gold links for the translation model), the head's scores,
# and the grid of its first score over every head, the chosen one framed.

# %% mystnb={"image": {"alt": "The head explorer's static picture: the selected head's attention map with gold links framed, and beside it a grid of every head's score, the selected head outlined."}}
toy_maps = torch.stack([record.get(layer=l)[0] for l in range(2)])  # (layers, heads, L, L), the probe sequence
views = {
    "translation (cross-attention)": dict(
        maps=maps[:, :, best_shift:best_shift + len(sample.fr_tokens)],
        scores={"AER": both[best_shift], "loss rise when ablated": rise},
        x_tokens=list(sample.en_tokens) + ["</s>"], y_tokens=list(sample.fr_tokens),
        sure=sample.sure, possible=sample.possible, xlabel="English (key)", ylabel="French word"),
    "copying (self-attention)": dict(
        maps=toy_maps, scores={"prefix matching": after["prefix_matching"],
                               "previous token": after["previous_token"], "loss rise when ablated": ablation}),
}
widgets.head_scores_explorer(views, layer=best_layer, head=best_head)

# %% [markdown]
# ## Try this
#
# 1. Train the copying model with one fixed segment length (add `seg_len = SEG` right after the line of the
#    training loop that draws the length). Does a previous-token
#    head still form? What does the best layer-1 head attend to, and does the ablation table change?
# 2. Score alignments with `extract_alignment(..., "threshold", 0.3)` instead of the argmax. Which heads gain,
#    and why does a head that spreads its weight over a verb group benefit?
# 3. Average the four heads of each decoder layer before extracting the alignment, as chapter 11's maps did.
#    Is the mean of a layer a better aligner than its best head?
# 4. Patch the previous-token head and the induction head *together*. Is the restored fraction more than the
#    sum of the two alone? (`patch_head` patches one head per call. For two, register a forward pre-hook on each
#    layer's `w_o` (`toy.layers[layer]["attn"].w_o`) that views its input as `(batch, len, heads, d_k)` and, at
#    the repeat's queries, puts in the head's clean output from `T.interpret.head_outputs(toy, clean, layer)`,
#    as `patch_head` does for one head.)
#
# ## Check your understanding

# %%
T.quiz.show("17")

# %% [markdown]
# ## Summary
#
# - Generated data comes with the truth: `generate_aligned` gives every pair its gold alignment, sure and
#   possible links as sets of (target, source) pairs.
# - Och & Ney's AER, $1 - (|A \cap S| + |A \cap P|) / (|A| + |S|)$, scores a head's alignment; sums over a
#   corpus are taken before the ratio, and an alignment is a set.
# - Heads of one model differ widely as aligners; compare them with a monotonic baseline, and say which row
#   of the decoder you read.
# - A two-layer attention-only model learns to copy repeated segments through a previous-token head in layer 0
#   and an induction head in layer 1, formed together in a sudden drop of the loss.
# - Attention scores point at candidate heads; ablation and activation patching (at the query position the head
#   writes to) test them.
# - Attention weights and intervention effects need not rank heads alike: attention is evidence about where a
#   head reads, not an explanation of what the model needs.
#
# **References**: F. J. Och and H. Ney, *A Systematic Comparison of Various Statistical Alignment Models*,
# Computational Linguistics, 2003. S. Garg et al., *Jointly Learning to Align and Translate with Transformer
# Models*, EMNLP 2019. N. Elhage et al., *A Mathematical Framework for Transformer Circuits*, 2021.
# C. Olsson et al., *In-context Learning and Induction Heads*, 2022. Y. Chen et al., *Accurate Word Alignment
# Induction from Neural Machine Translation*, EMNLP 2020. S. Jain and B. C. Wallace, *Attention is
# not Explanation*, NAACL 2019. S. Wiegreffe and Y. Pinter, *Attention is not not Explanation*, EMNLP 2019.
# P. Michel, O. Levy and G. Neubig, *Are Sixteen Heads Really Better than One?*, NeurIPS 2019. E. Voita et al.,
# *Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned*,
# ACL 2019.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 17: What the heads learned. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
