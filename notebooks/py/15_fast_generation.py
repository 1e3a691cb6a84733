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
# # 15 · Fast generation: the KV cache
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/tfm-lesson/tfm_lesson/blob/v0.1.0/notebooks/15_fast_generation.ipynb)
#
# A language model writes one token at a time. The decoding of chapters 10–13 ran the model over the **whole**
# sequence again for every new token in the decoders you wrote yourself there (`greedy_decode_yours` in
# chapter 10, the slow beam search of chapter 11): the prompt and every token generated before. (The package's
# `greedy_decode`, `beam_search` and `translate`, which those chapters also called, and chapter 14's `generate`
# already used a cache, unexplained until now.) This chapter shows that almost all of that
# work is a repetition, keeps the part that can be kept — the **keys and values** of the earlier
# positions — and measures what it buys.
#
# **What you will learn**
# - why decoding recomputes, and why it does not need to: with a causal mask, the outputs at earlier
#   positions never change when a token is appended (chapter 08's prefix demo, again);
# - the **KV cache**: each self-attention layer keeps its keys and values and appends one position per
#   step; cross-attention computes the memory's keys and values **once**;
# - a check that cached and uncached generation give the **same tokens** here (greedy, sampling, beam search,
#   decoder-only and encoder-decoder), and why in general they can differ where two tokens are nearly tied;
# - the time per generated token against its position, with and without the cache,
#   tokens per second, and the cache's memory: $2 \times \text{layers} \times \text{batch} \times \text{heads} \times
#   d_k \times \text{length} \times \text{bytes}$, checked against the real tensors.

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
import statistics
import time

import matplotlib.pyplot as plt
import torch

import tfm_lesson as T
from tfm_lesson.cache import CrossAttentionCache, KVCache, cache_nbytes, causal_mask_with_offset
from tfm_lesson.checks import (check_cache_memory, check_cached_attention, check_cross_attention_step,
                               check_forward_with_cache)
from tfm_lesson.decoding import beam_search, greedy_decode

T.seed_everything(0)
device = T.default_device()
print("running on", device.type)

# %% [markdown]
# ## Intuition
#
# To write token $t+1$, the model needs the logits at position $t$ only. Without a cache, each step runs
# every layer over positions $0 .. t$ and throws away all logits but the last. The step that writes the
# 100th token computes 100 positions; writing $n$ tokens computes about $n^2/2$ of them.
#
# Most of that is repeated work. In a causal model position $i$ only looks at positions $\le i$, so
# appending a token cannot change anything computed for the earlier positions: their hidden states, their
# keys, their values stay exactly what they were. Chapter 08 proved it for one decoder layer; here it is
# again for a whole GPT (chapter 14's model, with random weights: the argument does not depend on
# training).

# %%
cfg = T.GPTConfig(vocab_size=256, max_len=528, d_model=64, heads=4, d_ff=256, num_layers=2)
gpt = T.GPT(cfg).to(device).eval()
tokens = torch.randint(0, cfg.vocab_size, (1, 12)).to(device)  # drawn on the CPU, then moved

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    longer = gpt(tokens).cpu()  # (1, 12, vocab): all 12 positions
    shorter = gpt(tokens[:, :8]).cpu()  # (1, 8, vocab): the first 8 only
print("logits at positions 0..7 unchanged by tokens 8..11:", torch.allclose(longer[:, :8], shorter, atol=1e-5))

# %% [markdown]
# What is needed for the new position is attention's view of the past: its query meets the **keys** of every
# earlier position and mixes their **values**. Those keys and values are what the cache keeps. Queries of old
# positions are never needed again (nobody asks from an old position any more), and neither are the old
# hidden states: everything a new token needs from the past reaches it through keys and values.
#
# ## The math
#
# In one head of one layer, at step $t$ the new position has the row $x_t$. Its query, key and value are
# $q_t = x_t W^Q$, $k_t = x_t W^K$, $v_t = x_t W^V$, each $(1, d_k)$. The cache holds
# $K_{<t}$ and $V_{<t}$, each $(t, d_k)$. One step:
#
# $$K_{\le t} = \begin{bmatrix} K_{<t} \\ k_t \end{bmatrix}, \qquad
#   V_{\le t} = \begin{bmatrix} V_{<t} \\ v_t \end{bmatrix}, \qquad
#   o_t = \mathrm{softmax}\!\left(\frac{q_t K_{\le t}^\top}{\sqrt{d_k}}\right) V_{\le t}$$
#
# — exactly row $t$ of causal attention over the whole prefix, since the causal mask lets row $t$ see keys
# $0..t$ and nothing else. The new keys are appended along the **length** axis, dimension 2 of
# $(\text{batch}, \text{heads}, \text{length}, d_k)$. No mask is needed for a single new token (it may see
# every cached position). Several new tokens at once (the prompt) need the causal mask **shifted by the
# cache length** $c$: new query $i$ is position $c + i$ and sees keys $0 .. c+i$.
#
# Positions need the same shift: the learned or sinusoidal encoding of the new token is the one of position
# $c$, the number of tokens already cached, not of position 0.
#
# Per step the work through the layers drops from $t$ positions to one. Per new token and layer, the matrix
# products cost a constant $4d_\text{model}^2 + 2\,d_\text{model} d_{ff}$ multiply-adds (the four projections
# and the feed-forward network); attention over the cache costs about $2\,t\,d_\text{model}$ (the scores and the
# weighted sum over $t$ cached positions, all heads together) and grows with $t$. For the small model of this
# chapter ($d_\text{model} = 64$, $d_{ff} = 256$) the two are equal at $t = 384$, so at the longest lengths
# below attention is the larger part; for wide models ($d_\text{model}$ in the thousands) it stays the smaller
# part until contexts of several thousand tokens. (On a GPU what grows is mostly the memory traffic of reading
# the cache.) The price is memory:
#
# $$\text{bytes} = 2 \times \text{layers} \times \text{batch} \times \text{heads} \times d_k \times
#   \text{length} \times \text{bytes per number}$$
#
# (2: keys and values). In an **encoder-decoder**, cross-attention's keys and values come from the memory
# $m$: $K = m W^K$, $V = m W^V$, shape $(s, d_k)$. The memory does not change while decoding, so they are
# computed once, at the first step, and reused at every later one.
#
# ## Build it
#
# ### One attention step with a cache, by hand
#
# Feed six positions one at a time, keep the keys and values in two growing tensors, and compare with
# chapter 03's multi-head attention run once over all six with the causal mask.

# %%
mha = T.MultiHeadAttention(d_model=16, heads=4).to(device).eval()
x = torch.randn(2, 6, 16).to(device)  # (batch, length, d_model)


def split(t):  # (batch, length, d_model) -> (batch, heads, length, d_k)
    return t.view(t.size(0), t.size(1), mha.heads, mha.d_k).transpose(1, 2)


with torch.no_grad():
    full = mha(x, x, x, T.causal_mask(6, device))[0]  # (2, 6, 16): all positions in one pass
    k_cache = torch.empty(2, mha.heads, 0, mha.d_k, device=device)  # (batch, heads, 0, d_k): nothing yet
    v_cache = torch.empty(2, mha.heads, 0, mha.d_k, device=device)
    outputs = []
    for t in range(6):
        x_t = x[:, t: t + 1]  # (2, 1, 16): the new position only
        q, k, v = split(mha.w_q(x_t)), split(mha.w_k(x_t)), split(mha.w_v(x_t))  # each (2, 4, 1, 4)
        k_cache = torch.cat([k_cache, k], dim=2)  # (2, 4, t + 1, 4): appended along the length axis
        v_cache = torch.cat([v_cache, v], dim=2)
        weights = (q @ k_cache.transpose(-2, -1) / math.sqrt(mha.d_k)).softmax(dim=-1)  # (2, 4, 1, t + 1)
        o = weights @ v_cache  # (2, 4, 1, 4)
        outputs.append(mha.w_o(o.transpose(1, 2).reshape(2, 1, 16)))  # merge the heads, project
    by_step = torch.cat(outputs, dim=1)  # (2, 6, 16)

# %%
# NBVAL_CHECK_OUTPUT
print("cache shape after 6 steps:", tuple(k_cache.shape))
print("step by step with a cache == one causal pass:", torch.allclose(by_step.cpu(), full.cpu(), atol=1e-5))

# %% [markdown]
# ### The package's cache
#
# `T.KVCache` does the same for one attention layer: `update(k_new, v_new)` appends and returns every key and
# value so far, `len(cache)` is the number of positions stored (the offset of the next one). Instead of a
# `torch.cat` per step, which copies the whole cache into a new tensor every time, it writes the new positions
# into a buffer and doubles the buffer when it is full. The first update sizes the buffer to what it is given,
# or to `max_len` positions if the cache was made with `KVCache(max_len)` (reserved in advance, as
# `GPT.generate` does); the printout below shows the doubling. `T.MultiHeadAttention` takes it as
# `cache=`. (Its printout says `kv_heads`: the heads that keys and values have, equal to `heads` here; chapter 16
# makes them fewer.)

# %%
# NBVAL_CHECK_OUTPUT
cache = KVCache()
with torch.no_grad():
    steps = [mha(x[:, t: t + 1], x[:, t: t + 1], x[:, t: t + 1], cache=cache)[0] for t in range(6)]
print(cache)
print("T.MultiHeadAttention with a KVCache == one causal pass:",
      torch.allclose(torch.cat(steps, dim=1).cpu(), full.cpu(), atol=1e-5))

# %% [markdown]
# ### A GPT with a cache
#
# `GPT.new_cache()` makes one `KVCache` per block. `gpt(new_tokens, cache)` feeds only the new tokens: their
# positions start at `len(cache[0])`, the causal mask is shifted by it, and each block appends to its own cache.
# A prompt of 5 tokens, then one token at a time, then a chunk of 3:

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    whole = gpt(tokens).cpu()  # (1, 12, vocab)
    cache = gpt.new_cache()
    pieces = [gpt(tokens[:, :5], cache)]
    pieces += [gpt(tokens[:, t: t + 1], cache) for t in range(5, 9)]
    pieces.append(gpt(tokens[:, 9:], cache))
    pieced = torch.cat(pieces, dim=1).cpu()
print("positions cached:", [len(c) for c in cache])
print("prompt + single tokens + chunk == one pass:", torch.allclose(pieced, whole, atol=1e-5))

# %% [markdown]
# The results agree to float32 rounding, not always bit for bit: the cached path multiplies the same
# numbers in a different grouping. `GPT.generate(..., use_cache=True)` is the default; `use_cache=False`
# runs the whole sequence at every step.

# %% [markdown]
# ## Check it
#
# ### The same tokens, with and without the cache
#
# Greedy decoding, and sampling with the same random generator, give identical tokens either way:

# %%
# NBVAL_CHECK_OUTPUT
prompt = torch.randint(0, cfg.vocab_size, (3, 5)).to(device)
for sampling in (dict(temperature=0.0), dict(temperature=1.0, top_k=20), dict(temperature=0.8, top_p=0.9)):
    cached, uncached = (gpt.generate(prompt, 40, use_cache=use, generator=torch.Generator(device).manual_seed(1),
                                     **sampling).cpu() for use in (True, False))
    print(f"{str(sampling):42} same 40 tokens in all 3 rows:", torch.equal(cached, uncached))

# %% [markdown]
# ### Cross-attention: keys and values of the memory, once
#
# In the encoder-decoder of chapters 09–11, each decoder layer gets a `DecoderCache`: a `KVCache` for its
# self-attention and a `CrossAttentionCache` that holds the memory's keys and values after the first step.
# `greedy_decode`, `beam_search` and `translate` use them unless told `use_cache=False`. A random model and a
# batch of four sources:

# %%
seq2seq = T.Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=32, heads=4, d_ff=64, num_encoder_layers=2,
                        num_decoder_layers=2, max_len=64, share_embeddings=False, tie_embeddings=False).to(device)
with torch.no_grad():
    seq2seq.generator.weight.normal_(0, 1.0)  # sharper, more varied predictions from a random model
src = torch.randint(3, 20, (4, 9)).to(device)

cross_calls = []  # one entry each time cross-attention projects the memory into keys
hooks = [layer.cross_attn.w_k.register_forward_hook(lambda *args: cross_calls.append(1))
         for layer in seq2seq.decoder.layers]
counts = {}
for use in (True, False):
    cross_calls.clear()
    out = greedy_decode(seq2seq, src, max_len=15, bos_id=1, eos_id=2, use_cache=use)
    counts[use] = len(cross_calls)
for h in hooks:
    h.remove()
print(f"{out.size(1) - 1} tokens per row; cross-attention key projections per layer: "
      f"cached {counts[True] // 2}, uncached {counts[False] // 2}")

# %%
# NBVAL_CHECK_OUTPUT
same_greedy = torch.equal(greedy_decode(seq2seq, src, 15, 1, 2).cpu(),
                          greedy_decode(seq2seq, src, 15, 1, 2, use_cache=False).cpu())
same_beam = torch.equal(beam_search(seq2seq, src, 4, 15, 1, 2).cpu(),
                        beam_search(seq2seq, src, 4, 15, 1, 2, use_cache=False).cpu())
print("greedy: same tokens with and without the cache:", same_greedy)
print("beam search (4 beams): same tokens with and without the cache:", same_beam)

# %% [markdown]
# Beam search needs one more step: after each step every beam continues one of the previous beams (its
# *parent*), so each layer's self-attention cache is reordered to follow: `cache.reorder(parent)` keeps rows
# `parent` of the batch. The cross-attention caches need no reordering: a beam's parent is a beam of the same
# sentence, whose memory is the same.
#
# ## See it: time per token, with and without the cache
#
# Generate 512 tokens after a 16-token prompt, greedily, and time each step. Without the cache the step
# that writes token $t$ runs over $16 + t$ positions; with it, over one.

# %%
# NBVAL_IGNORE_OUTPUT
def time_per_token(model, prompt, new_tokens, use_cache):
    """Seconds for each generated token (the first includes the prompt), and the tokens."""
    times, out = [], prompt
    cache = model.new_cache() if use_cache else None
    with torch.no_grad():
        for t in range(new_tokens):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            if use_cache:
                logits = model(prompt if t == 0 else out[:, -1:], cache)[:, -1]  # only what the cache has not seen
            else:
                logits = model(out)[:, -1]  # everything, again
            out = torch.cat([out, logits.argmax(dim=-1, keepdim=True)], dim=1)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return times, out


prompt = torch.randint(0, cfg.vocab_size, (1, 16)).to(device)
time_per_token(gpt, prompt, 8, True)  # warm-up
fast, fast_tokens = time_per_token(gpt, prompt, 512, use_cache=True)
slow, slow_tokens = time_per_token(gpt, prompt, 512, use_cache=False)
print("same 512 tokens:", torch.equal(fast_tokens, slow_tokens))


def smooth(times, width=15):
    """Running median in ms: a single slow step (another program, the garbage collector) does not count."""
    return [1e3 * statistics.median(times[max(0, i - width // 2): i + width // 2 + 1]) for i in range(len(times))]


fast_ms, slow_ms = smooth(fast), smooth(slow)
print(f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, device {device.type}; "
      f"whole runs: cached {sum(fast):.1f} s, uncached {sum(slow):.1f} s")
print("\nnew tokens | cached tok/s | uncached tok/s | cached / uncached")
for n in (32, 128, 512):
    cached_rate, uncached_rate = 1e3 * n / sum(fast_ms[:n]), 1e3 * n / sum(slow_ms[:n])
    print(f"{n:10} | {cached_rate:12.0f} | {uncached_rate:14.0f} | {cached_rate / uncached_rate:5.1f}x")

# %% mystnb={"image": {"alt": "Line chart of milliseconds per generated token over 512 tokens, measured while other programs ran on the same machine: without the cache the time climbs with the length, broken by tall spikes where those programs slowed the run; with the KV cache it stays near the bottom, apart from three plateaus caused by the same disturbances."}}
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(range(1, 513), slow_ms, label="without cache: the whole sequence each step")
ax.plot(range(1, 513), fast_ms, label="with KV cache: one token each step")
ax.set(xlabel="generated token", ylabel="ms per token (running median)", ylim=(0, None),
       title=f"GPT, {cfg.num_layers} layers, d_model {cfg.d_model}, prompt 16 tokens, {device.type}")
ax.legend()
plt.show()

# %% [markdown]
# Read the figure from left to right. Without the cache the time per token grows with the position: each
# step redoes every earlier position, so the line rises roughly in proportion to the length. With the cache
# it stays far lower: one position per step through the layers, plus attention over the cached keys. That
# attention grows with the length too (see "The math": for this small model it ends up the larger part of the
# arithmetic), but for a model this small each step's time is mostly the fixed cost of calling every
# operation, so the cached line rises little, if at all, on this scale. The table above turns the same step times into tokens per second (N
# tokens over the summed step times of the first N); compare its last column at 32 and at 512 tokens, as the
# cell prints them: the uncached cost per token grows faster, so the gap widens the further you generate. The
# timings are the ones of the machine that ran this notebook (printed above the table). Other programs running
# at the same time make single steps jump, so the table and the figure use the running median of 15 steps
# (the "whole runs" times above the table include every jump); a median removes single jumps, not a
# disturbance that lasts many steps. If your figure shows a plateau or a cliff that the trend does not
# explain, run the cell again when the machine is quiet. The figure stored on this page has several: it was
# measured while other programs ran on the same machine, which is also why its table's cached rate falls at 128
# and 512 tokens (the plateaus of the cached line fall inside those first 128 and 512 steps), and why its cached
# "whole runs" time is many times what the rate printed by the last timing cell of "Where the milliseconds went"
# gives for the same 512 tokens with the same cache.
#
# At the very first token both paths do the same work (the whole prompt). The figure's first point is a running
# median over the first steps, not the first token alone, so the two lines already start apart.
#
# ### The cache's memory, checked against the tensors
#
# After those 512 tokens, each of the two blocks holds keys and values for $16 + 511$ positions (the last
# token generated was never fed back). The cell below grows a cache the way `time_per_token` did (the prompt at
# once, then one token per step), and a second one with that length reserved up front, as `GPT.generate` does.
# The formula gives the **filled** part, which `cache_nbytes` and the `key`/`value` views count; the buffer
# behind a cache grown by doubling can be larger (up to twice the filled part), and `untyped_storage()` shows
# what was really allocated:

# %%
# NBVAL_CHECK_OUTPUT
grown = gpt.new_cache()                                      # as time_per_token grew it
reserved = gpt.new_cache(max_len=fast_tokens.size(1) - 1)    # the length reserved up front
with torch.no_grad():
    for cache in (grown, reserved):
        gpt(fast_tokens[:, :16], cache)                      # the prompt at once
        for t in range(16, fast_tokens.size(1) - 1):         # then the 511 tokens fed back, one per step
            gpt(fast_tokens[:, t: t + 1], cache)
length = len(grown[0])
formula = 2 * cfg.num_layers * 1 * cfg.heads * cfg.d_k * length * 4  # keys and values, batch 1, float32
filled = sum(c.key.numel() * c.key.element_size() + c.value.numel() * c.value.element_size() for c in grown)
print(f"length {length}: formula {formula:,} bytes, filled part {filled:,} bytes, cache_nbytes {cache_nbytes(grown):,}")
print("key tensor of one block:", tuple(grown[0].key.shape), grown[0].key.dtype)
for name, caches in [("grown one token at a time", grown), ("reserved up front", reserved)]:
    allocated = sum(c.key.untyped_storage().nbytes() + c.value.untyped_storage().nbytes() for c in caches)
    print(f"{name:26}: {caches[0]}, {allocated:,} bytes allocated")

# %% [markdown]
# Tiny here. The same formula for GPT-2 small (12 layers, 12 heads, $d_k = 64$) at its full context of 1024
# positions in float32:

# %%
# NBVAL_CHECK_OUTPUT
gpt2_bytes = 2 * 12 * 12 * 64 * 1024 * 4
print(f"GPT-2 small, one sequence of 1024 tokens: {gpt2_bytes:,} bytes = {gpt2_bytes / 2**20:.0f} MiB")
print(f"a batch of 32 such sequences: {32 * gpt2_bytes / 2**30:.2f} GiB")

# %% [markdown]
# 72 MiB per sequence, 2.25 GiB for a batch of 32: for large models and long contexts the cache, not the
# weights, limits how many sequences run at once. This is why newer models share keys and values between
# heads (grouped-query attention, chapter 16): fewer key/value heads, a proportionally smaller cache.
#
# ## Play with it
#
# Change the model and see how the two curves move: a wider model (`d_model=256`) makes every uncached step
# heavier, so the ratio grows; a longer prompt raises the uncached line from the first token on. Keep
# `max_len` at least prompt + new tokens.

# %%
play_cfg = T.GPTConfig(vocab_size=256, max_len=16 + 128, d_model=64, heads=4, d_ff=256, num_layers=2)
play = T.GPT(play_cfg).to(device).eval()
play_prompt = torch.randint(0, play_cfg.vocab_size, (1, 16)).to(device)
a, _ = time_per_token(play, play_prompt, 128, use_cache=True)
b, _ = time_per_token(play, play_prompt, 128, use_cache=False)
print(f"128 tokens: cached {1e3 * 128 / sum(smooth(a)):.0f} tok/s, uncached {1e3 * 128 / sum(smooth(b)):.0f} tok/s "
      "(from the running medians, as in the table)")

# %% [markdown]
# ## Where the milliseconds went
#
# "The math" counted the arithmetic of one cached step: for this chapter's model, at the early steps profiled
# below, 120,000 to 130,000 multiply-adds per token (two layers of $4d_\text{model}^2 + 2\,d_\text{model} d_{ff}$,
# attention over a few dozen cached positions, and the output layer's $d_\text{model} \times V$), which a
# laptop core does in well under a millisecond. Compare that with the
# cached times per token the table above printed: most of a cached step is not arithmetic. To see what it is,
# `torch.profiler` records every **operator** a step calls (an operator is one call into torch's C++ library:
# a matrix product, an addition, a copy, a reshaping view) and how long each one ran on its own, its *self*
# time. Adding up the self times of all operators and subtracting them from the step's time leaves the time
# spent *outside* the operators: Python running the modules, argument checks, torch deciding which kernel to
# call.
#
# `profile_decoding` from `tfm_lesson.look.profile` profiles one cached step of a GPT, after a 16-token
# prompt, three ways:
#
# - **torch.cat cache**: `gpt(token, cache)` with a cache that appends with `torch.cat`, as you did by hand at
#   the start of "Build it";
# - **KVCache**: `gpt(token, cache)` with the package's cache, written in place into a reserved buffer (the
#   one used all through this chapter);
# - **FastDecoder**: `tfm_lesson.decoding.FastDecoder`, the path `GPT.generate` takes. It runs the same
#   arithmetic on the same weights, but does once, when it is built, what the model's forward does at every
#   token: it concatenates each layer's $W^Q, W^K, W^V$ into one matrix (the fused projection that
#   `MultiHeadAttention` builds anew at every call), reserves the whole cache, and checks its arguments. A
#   step then builds no mask (one new query may see every cached key), checks nothing and runs under
#   `torch.inference_mode` (no bookkeeping for gradients).
#
# Each printed figure is the median over 20 steps, in milliseconds per step; the last two rows count the
# operators called from Python and all Python calls in one step.

# %%
# NBVAL_IGNORE_OUTPUT
from tfm_lesson.look.profile import compare_profiles, profile_decoding

profiles = profile_decoding(gpt, prompt_len=16, steps=20)
print(compare_profiles(profiles))

# %% [markdown]
# Read the columns from left to right. The two rows at the bottom do not depend on the machine: the
# `torch.cat cache` and `KVCache` columns make about the same number of operator calls and hundreds of Python
# calls per step; `FastDecoder` makes fewer operator calls and far fewer Python calls. The first row is the
# step's time on your machine. In the rows below it, the arithmetic (matrix products, attention) is about the
# same in every column, as it should be: it did not change. What `FastDecoder` removed is in the other rows:
# copies, the views and element-wise work around the products, the guards, and the time outside the operators.
# (The profiler adds a little to every operator it records, so for a step with few Python calls the "outside"
# row can read 0; other programs running at the same time move every time row.)
#
# Which operators were called, and how often, in one step of each (the count is per step):

# %%
# NBVAL_CHECK_OUTPUT
for label, p in profiles.items():
    calls = {name.removeprefix("aten::"): round(n) for name, n, _ in p.ops}
    print(f"{label:15}: torch.cat {calls.get('cat', 0)}, matrix products {calls.get('addmm', 0) + calls.get('mm', 0)}")

# %% [markdown]
# The `torch.cat cache` copies each layer's whole cache into a new tensor at every step (two `torch.cat` per
# layer: keys and values) and, like `KVCache`, concatenates $W^Q, W^K, W^V$ and their biases (two more per
# layer) for the fused projection. (The one more in each of those two columns
# comes from the check of the token ids, which stacks the smallest and the largest id into one tensor:
# `torch.stack` calls `torch.cat`.) `FastDecoder` calls `torch.cat` not once. All three make the same matrix
# products: one fused Q/K/V product, the output projection and two feed-forward products per layer, plus the
# output layer.
#
# The operators that took the most time in one step, with the package's cache and with `FastDecoder`:

# %%
# NBVAL_IGNORE_OUTPUT
print(profiles["KVCache"].table(top=8))
print()
print(profiles["FastDecoder"].table(top=8))

# %% [markdown]
# Finally the whole generation: `gpt.generate` (the `FastDecoder` path) against `time_per_token` from "See it"
# with the cache, the same 512 tokens after the same prompt. `generate`, like the package's other decoders, runs
# a model this small on one CPU thread (the thread rule of chapter 11), so the cell runs `time_per_token` under
# the same rule, `T.device.threads_for`, and times the two one after the other.

# %%
# NBVAL_IGNORE_OUTPUT
with T.device.threads_for(gpt, device):
    loop_times, loop_tokens = time_per_token(gpt, prompt, 512, use_cache=True)
start = time.perf_counter()
generated = gpt.generate(prompt, 512, temperature=0)
fast_path = time.perf_counter() - start
print("generate: the same 512 tokens as time_per_token:", torch.equal(generated, loop_tokens))
print(f"tokens per second: generate (FastDecoder) {512 / fast_path:.0f}, gpt(token, cache) {512 / sum(loop_times):.0f}"
      f" ({sum(loop_times) / fast_path:.1f}x)")

# %% [markdown]
# The cache removed the repeated arithmetic. What is left of a cached step of a model this small is largely
# overhead paid once per token, and the profile above shows how much of it there is on your machine; building
# the step so that each of those costs is paid once per generation removes most of it, without changing a single
# number the model computes. The lesson carries over to any small model or small batch: when a step's
# arithmetic is small, count its operator calls and its Python calls before you look at the arithmetic.

# %% [markdown]
# ## Exercises
#
# ### Exercise 1: one attention step with a cache
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `attend_with_cache(q, k_new, v_new, k_cache, v_cache)`. All five are shaped
# $(\text{batch}, \text{heads}, \text{length}, d_k)$: `q`, `k_new`, `v_new` hold the new positions (one, or
# several for a prompt), `k_cache`, `v_cache` the earlier ones (possibly none). Return
# `(out, k_all, v_all)`: the keys and values with the new ones appended, and the attention of the new queries
# over all of them, with the causal mask shifted by the cache length (`causal_mask_with_offset(new_len,
# cached_len)` builds it: True = may attend).

# %%
def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def attend_with_cache(q, k_new, v_new, k_cache, v_cache):
    k_all = torch.cat([k_cache, k_new], dim=2)  # (batch, heads, cached + new, d_k)
    v_all = torch.cat([v_cache, v_new], dim=2)
    mask = causal_mask_with_offset(q.size(2), k_cache.size(2), q.device)  # (new, cached + new)
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, new, cached + new)
    out = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v_all  # (batch, heads, new, d_k)
    return out, k_all, v_all


# %%
# NBVAL_CHECK_OUTPUT
check_cached_attention(attend_with_cache)

# %% [markdown]
# ### Exercise 2: the cache's memory
# **Difficulty** 1/3 · **Importance** 2/3 · **Time** ~5 min
#
# Write `cache_bytes(num_layers, heads, d_k, length, batch, dtype)`: the bytes of a self-attention KV cache.
# `torch.empty((), dtype=dtype).element_size()` gives the bytes of one number.

# %%
def cache_bytes(num_layers, heads, d_k, length, batch, dtype):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def cache_bytes(num_layers, heads, d_k, length, batch, dtype):
    per_number = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * batch * heads * d_k * length * per_number  # 2: keys and values


# %%
# NBVAL_CHECK_OUTPUT
check_cache_memory(cache_bytes)

# %% [markdown]
# ### Exercise 3: a GPT forward pass that uses the cache
# **Difficulty** 2/3 · **Importance** 3/3 · **Time** ~15 min
#
# Write `forward_with_cache(model, new_idx, caches)` for a `T.GPT` from its parts, without calling
# `model(...)`: the token embedding `model.tok_embed`, the positions `model.positional(x, offset)` (an offset of
# `offset` starts the positions there), the blocks `model.blocks` called as `block(x, mask, cache)`, the final
# norm `model.norm` and the head `model.lm_head`. `new_idx` holds only the new tokens; `caches` is
# `model.new_cache()`, one per block, holding what came before. Return the logits
# $(\text{batch}, \text{new\_len}, \text{vocab})$.

# %%
def forward_with_cache(model, new_idx, caches):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def forward_with_cache(model, new_idx, caches):
    offset = len(caches[0])  # positions already cached = the position of the first new token
    x = model.positional(model.tok_embed(new_idx), offset)  # (batch, new_len, d_model)
    mask = None if new_idx.size(1) == 1 else causal_mask_with_offset(new_idx.size(1), offset, new_idx.device)
    for block, cache in zip(model.blocks, caches):  # each block its own cache
        x = block(x, mask, cache)
    return model.lm_head(model.norm(x))  # (batch, new_len, vocab)


# %%
# NBVAL_CHECK_OUTPUT
check_forward_with_cache(forward_with_cache)

# %% [markdown]
# ### Exercise 4: cross-attention keys, once
# **Difficulty** 2/3 · **Importance** 2/3 · **Time** ~10 min
#
# Write `cross_attend_step(mha, x_new, memory, store)`: the cross-attention output
# $(\text{batch}, \text{new\_len}, d_\text{model})$ of the new target positions `x_new` over `memory`, for a
# `T.MultiHeadAttention` `mha`. `store` is a dict, empty at the first step and the same dict at every later
# step of one sequence: keep the memory's keys and values there so that `mha.w_k` and `mha.w_v` run once.
# (`torch.nn.functional.scaled_dot_product_attention(q, k, v)` attends; split and merge the heads as in the
# first cell of "Build it".)

# %%
def cross_attend_step(mha, x_new, memory, store):
    ...  # your turn


# %% tags=["solution"]
#@title Reference solution — open it after your own attempt
def cross_attend_step(mha, x_new, memory, store):
    def heads(t):  # (batch, length, d_model) -> (batch, heads, length, d_k)
        return t.view(t.size(0), t.size(1), mha.heads, mha.d_k).transpose(1, 2)

    if "k" not in store:  # the first step: project the memory once
        store["k"], store["v"] = heads(mha.w_k(memory)), heads(mha.w_v(memory))
    q = heads(mha.w_q(x_new))  # (batch, heads, new_len, d_k)
    out = torch.nn.functional.scaled_dot_product_attention(q, store["k"], store["v"])  # (batch, heads, new_len, d_k)
    return mha.w_o(out.transpose(1, 2).reshape(x_new.size(0), x_new.size(1), mha.d_model))


# %%
# NBVAL_CHECK_OUTPUT
check_cross_attention_step(cross_attend_step)

# %% [markdown]
# ## Check your understanding

# %%
T.quiz.show("15")

# %% [markdown]
# ## Summary
#
# - Without a cache, generating $n$ tokens runs the model over about $n^2/2$ positions, although a causal
#   model's earlier positions never change when a token is appended.
# - The KV cache keeps each self-attention layer's keys and values, $(\text{batch}, \text{heads},
#   \text{length}, d_k)$, and appends the new positions along the length axis; each step then feeds only the
#   new token, at position `len(cache)`, with the causal mask shifted by the cache length when several new
#   tokens come at once.
# - Cross-attention's keys and values come from the memory, which does not change: computed once, reused at
#   every step. Beam search reorders the self-attention caches to follow each beam's parent.
# - Cached and uncached generation gave the same tokens in this chapter's checks (greedy, sampling with the same
#   generator, beam search; decoder-only and encoder-decoder): the logits agree to float32 rounding, so where
#   two tokens are nearly tied the two paths can in general pick different ones.
# - The time per token grows far more slowly with the cache than without it (attention over the cache still
#   grows with the length); the filled cache costs $2 \times \text{layers} \times \text{batch} \times \text{heads} \times d_k \times \text{length}
#   \times \text{bytes}$ of memory, which for large models and long contexts becomes the limit.
# - A small model's cached step is mostly overhead: operator calls, Python, checks, copies. `torch.profiler` shows
#   where it goes; `FastDecoder` (what `GPT.generate` uses) does the checks and the weight concatenation once and
#   writes the cache in place, the same tokens with fewer calls per step.
#
# Next, chapter 16 brings the block up to date: RMSNorm, rotary positions, SwiGLU and grouped-query attention,
# which shrinks this cache.

# %% [markdown]
# ## Licence and how to cite
#
# The text and figures of this chapter are licensed under Creative Commons Attribution
# ([CC BY](https://creativecommons.org/licenses/by/4.0/)), its code and the `tfm_lesson` package under the MIT
# licence ([LICENSE](https://github.com/tfm-lesson/tfm_lesson/blob/v0.1.0/LICENSE)). You may copy, change and
# share them, in a course of your own too, as long as you name the source, for example:
#
# > The tfm_lesson authors (2026). *tfm_lesson: the Transformer of "Attention Is All You Need", built step by
# > step in PyTorch*, chapter 15: Fast generation: the KV cache. Version `0.1.0`,
# > https://github.com/tfm-lesson/tfm_lesson
#
# The file `CITATION.cff` in the repository gives the same reference in a form reference managers read.
