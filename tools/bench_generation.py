"""The ``generation`` section of ``tools/bench.py``, and its load generator.

Greedy generation from one :class:`tfm_lesson.GPT`, token by token, four ways timed in the same run:

- ``fast cached``: :class:`tfm_lesson.decoding.FastDecoder` (what ``GPT.generate`` uses);
- ``cached, model forward``: ``model(token, cache)`` with ``model.new_cache()`` (the chapter's cached step);
- ``uncached``: ``model(whole_sequence)`` at every step;
- ``transformers``: ``GPT2LMHeadModel`` of the same size (random weights from a config, offline) with its own
  cache, ``model(input_ids=token, past_key_values=past)`` at every step.

The runs alternate (one of each, then again); each position's time is the median over the repeats; tokens/s
at N new tokens is N over the summed medians of the first N positions. Also timed: ``GPT.generate`` against
``transformers``' ``generate`` end to end, and the profile of one cached step
(:func:`tfm_lesson.look.profile.profile_decoding`).

``LoadGenerator(n)`` starts ``n`` busy processes (each a pure-Python loop on one core, stopping itself after
``seconds``) and stops them when the ``with`` block ends: ``tools/bench.py --load 4``.
"""
from __future__ import annotations

import inspect

import os
import statistics
import subprocess
import sys
import time
from typing import Callable

import torch
from torch import Tensor, nn

from tfm_lesson.decoding import FastDecoder
from tfm_lesson.gpt import GPT, GPTConfig
from tfm_lesson.look.profile import profile_decoding

__all__ = ["LoadGenerator", "decode_times", "contenders", "hf_gpt2", "bench_generation", "generation_markdown"]

COUNTS = (32, 128, 256, 512)
_BUSY = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


class LoadGenerator:
    """``processes`` busy loops (separate Python processes), each ending itself after ``seconds`` at most and
    all stopped when the ``with`` block exits. ``info`` records what was started."""

    def __init__(self, processes: int, seconds: float = 3600.0) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ValueError(f"processes must be an int >= 1, got {processes!r}")
        if not seconds > 0:
            raise ValueError(f"seconds must be positive, got {seconds!r}")
        self.processes, self.seconds = processes, float(seconds)
        self.procs: list[subprocess.Popen] = []
        self.info: dict = {}

    def __enter__(self) -> "LoadGenerator":
        self.procs = [subprocess.Popen([sys.executable, "-c", _BUSY, str(self.seconds)], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for _ in range(self.processes)]
        self.info = dict(processes=self.processes, seconds_limit=self.seconds, pids=[p.pid for p in self.procs],
                         started=time.strftime("%H:%M:%S UTC", time.gmtime()))
        time.sleep(1.0)  # let them reach the scheduler before the first timing
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.info["stopped"] = time.strftime("%H:%M:%S UTC", time.gmtime())
        self.info["load_average_at_stop"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None

    @property
    def alive(self) -> int:
        return sum(p.poll() is None for p in self.procs)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# prefill(prompt) -> logits (batch, vocab); step(token (batch, 1), tokens so far (batch, len)) -> logits
Contender = Callable[[], tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]]


def decode_times(contender: Contender, prompt: Tensor, new_tokens: int) -> tuple[list[float], Tensor]:
    """Greedy decoding of ``new_tokens`` after ``prompt`` ``(batch, len)``, each step timed, under
    ``torch.inference_mode``. Returns the seconds of each new token (the first includes the prompt's pass) and
    the tokens ``(batch, len + new_tokens)``."""
    device = prompt.device
    batch, length = prompt.shape
    out = prompt.new_empty(batch, length + new_tokens)
    out[:, :length] = prompt
    times = []
    with torch.inference_mode():
        prefill, step = contender()
        for t in range(length, length + new_tokens):
            _sync(device)
            start = time.perf_counter()
            logits = prefill(prompt) if t == length else step(out[:, t - 1: t], out[:, :t])
            out[:, t] = logits.argmax(dim=-1)
            _sync(device)
            times.append(time.perf_counter() - start)
    return times, out


def contenders(model: nn.Module, hf: nn.Module | None, batch: int, max_len: int) -> dict[str, Contender]:
    """The ways of decoding timed side by side (``hf``: a ``transformers`` GPT-2, or ``None`` to leave it out)."""
    def fast():
        decoder = FastDecoder(model, batch, max_len)
        return decoder.prefill, lambda token, _: decoder.step(token)

    def forward():
        cache = model.new_cache(max_len)
        return lambda p: model(p, cache)[:, -1], lambda token, _: model(token, cache)[:, -1]

    def uncached():
        return lambda p: model(p)[:, -1], lambda _, seq: model(seq)[:, -1]

    def transformers_gpt2():
        # transformers 5 names the cache `cache`; 4.x (the oldest PyTorch's environment) `past_key_values`
        cache_name = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
        state = {}

        def prefill(p):
            r = hf(input_ids=p, use_cache=True)
            state["past"] = getattr(r, cache_name)
            return r.logits[:, -1]

        def step(token, _):
            r = hf(input_ids=token, use_cache=True, **{cache_name: state["past"]})  # its DynamicCache, appended
            state["past"] = getattr(r, cache_name)
            return r.logits[:, -1]
        return prefill, step

    ways = {"fast cached": fast, "cached, model forward": forward, "uncached": uncached}
    if hf is not None:
        ways["transformers"] = transformers_gpt2
    return ways


def hf_gpt2(config: GPTConfig, device: torch.device) -> tuple[nn.Module | None, str]:
    """``transformers``' GPT-2 of ``config``'s size with random weights (no download), or ``None`` and why."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        import transformers
    except ImportError as e:
        return None, f"transformers not installed ({e})"
    cfg = GPT2Config(vocab_size=config.vocab_size, n_positions=config.max_len, n_embd=config.d_model,
                     n_layer=config.num_layers, n_head=config.heads, n_inner=config.d_ff, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).to(device).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, f"transformers {transformers.__version__}, GPT2LMHeadModel, attention {cfg._attn_implementation}"


def _generate_times(model: GPT, hf: nn.Module | None, prompt: Tensor, counts: list[int], repeats: int) -> dict:
    """Median seconds of one whole ``generate`` call per N new tokens: ours and ``transformers``' (greedy)."""
    device = prompt.device
    calls = {"GPT.generate": lambda n: model.generate(prompt, n, temperature=0, threads=None)}  # the run's threads
    if hf is not None:
        mask = torch.ones_like(prompt)
        calls["transformers generate"] = lambda n: hf.generate(prompt, attention_mask=mask, max_new_tokens=n,
                                                               do_sample=False)
    seconds: dict[str, dict[int, list[float]]] = {name: {n: [] for n in counts} for name in calls}
    for name, call in calls.items():
        call(4)  # warm-up
    for _ in range(repeats):
        for n in counts:
            for name, call in calls.items():
                _sync(device)
                start = time.perf_counter()
                out = call(n)
                _sync(device)
                seconds[name][n].append(time.perf_counter() - start)
                assert out.size(1) == prompt.size(1) + n, (name, tuple(out.shape))
    return {name: {n: statistics.median(s) for n, s in per.items()} for name, per in seconds.items()}


def bench_generation(device: torch.device, quick: bool = False, repeats: int | None = None,
                     with_transformers: bool = True) -> dict:
    """Greedy generation of 512 new tokens (quick: 64) after a 16-token prompt, batch 1, from a GPT of 4 layers,
    d_model 256, 8 heads, d_ff 1024, vocabulary 1024 (quick: 2 layers, d_model 64), the ways of
    :func:`contenders` alternating; ``repeats`` runs each (quick: 1, else 3)."""
    new_tokens = 64 if quick else 512
    repeats = repeats or (1 if quick else 3)
    size = dict(d_model=64, heads=4, d_ff=256, num_layers=2) if quick else \
        dict(d_model=256, heads=8, d_ff=1024, num_layers=4)
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=1024, max_len=16 + new_tokens, **size)
    model = GPT(config).to(device).eval()
    hf, hf_note = hf_gpt2(config, device) if with_transformers else (None, "transformers left out")
    prompt = torch.randint(0, config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0)).to(device)
    ways = contenders(model, hf, 1, 16 + new_tokens)
    runs: dict[str, list[list[float]]] = {name: [] for name in ways}
    tokens = {}
    for way in ways.values():
        decode_times(way, prompt, 8)  # warm-up
    for _ in range(repeats):
        for name, way in ways.items():
            times, tokens[name] = decode_times(way, prompt, new_tokens)
            runs[name].append(times)
    per_token = {name: [statistics.median(col) for col in zip(*r)] for name, r in runs.items()}
    counts = [n for n in COUNTS if n <= new_tokens]
    tokens_per_s = {name: {n: n / sum(t[:n]) for n in counts} for name, t in per_token.items()}
    ours = [tokens[name] for name in ("fast cached", "cached, model forward", "uncached")]
    profiles = profile_decoding(model, prompt_len=16, steps=10 if quick else 30)
    whole = _generate_times(model, hf, prompt, counts, repeats)
    result = dict(config={k: getattr(config, k) for k in ("vocab_size", "d_model", "heads", "d_ff", "num_layers")},
                  batch=1, prompt=16, new_tokens=new_tokens, repeats=repeats, transformers=hf_note,
                  same_tokens=all(torch.equal(ours[0], t) for t in ours[1:]),
                  ms_per_token={name: [1e3 * x for x in t] for name, t in per_token.items()},
                  ms_at_position={name: {p: 1e3 * t[p - 1] for p in (1, 32, 128, 256, 512) if p <= new_tokens}
                                  for name, t in per_token.items()},
                  tokens_per_s=tokens_per_s,
                  speedup={n: tokens_per_s["fast cached"][n] / tokens_per_s["uncached"][n] for n in counts},
                  generate_ms_per_token={name: {n: 1e3 * s / n for n, s in per.items()} for name, per in whole.items()},
                  profile={label: dict(step_ms=p.step_ms, op_ms=p.op_ms, outside_ms=p.outside_ms, kinds=p.kinds,
                                       op_calls=p.op_calls, python_calls=p.python_calls, top_ops=p.ops[:8])
                           for label, p in profiles.items()})
    if hf is not None:
        # time per token of the fast path over transformers' (the goal: at most 1.5)
        result["time_vs_transformers"] = {n: tokens_per_s["transformers"][n] / tokens_per_s["fast cached"][n]
                                          for n in counts}
    return result


def generation_markdown(g: dict) -> list[str]:
    """The section's tables for ``bench.md``."""
    c = g["config"]
    names = list(g["tokens_per_s"])
    lines = ["## Generation: cached vs uncached, and transformers (greedy, batch 1)", "",
             f"GPT with {c['num_layers']} layers, d_model {c['d_model']}, {c['heads']} heads, d_ff {c['d_ff']}, "
             f"vocabulary {c['vocab_size']}; prompt {g['prompt']} tokens; median of {g['repeats']} runs per "
             f"position; {g['transformers']}. Same tokens from the fast cache, the model's forward with a cache "
             f"and without one: {'yes' if g['same_tokens'] else 'NO'}.", "",
             "ms per token (N tokens over the summed medians of the first N positions):", "",
             "| new tokens | " + " | ".join(names) + " | fast cached vs uncached |" +
             (" fast cached / transformers (time per token) |" if "time_vs_transformers" in g else ""),
             "|---" * (len(names) + 2 + ("time_vs_transformers" in g)) + "|"]
    for n, speed in g["speedup"].items():
        cells = " | ".join(f"{1e3 / g['tokens_per_s'][name][n]:.2f}" for name in names)
        vs = f" {g['time_vs_transformers'][n]:.2f} |" if "time_vs_transformers" in g else ""
        lines.append(f"| {n} tokens | {cells} | **{speed:.1f}x** |{vs}")
    lines += ["", "ms for the token at a position (median over the runs; the first includes the prompt):", "",
              "| position | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for p in g["ms_at_position"][names[0]]:
        lines.append(f"| token {p} | " + " | ".join(f"{g['ms_at_position'][name][p]:.2f}" for name in names) + " |")
    lines += ["", "Whole `generate` calls, ms per token:", "", "| new tokens | " +
              " | ".join(g["generate_ms_per_token"]) + " |", "|---" * (1 + len(g["generate_ms_per_token"])) + "|"]
    for n in g["speedup"]:
        lines.append(f"| {n} tokens | " + " | ".join(f"{per[n]:.2f}" for per in g["generate_ms_per_token"].values())
                     + " |")
    lines += ["", "One cached step after the prompt, `torch.profiler` (self time of the operators, ms per step):", "",
              "| | " + " | ".join(g["profile"]) + " |", "|---" * (1 + len(g["profile"])) + "|"]
    profiles = list(g["profile"].values())
    kinds = sorted({k for p in profiles for k in p["kinds"]}, key=lambda k: -max(p["kinds"].get(k, 0) for p in profiles))
    rows = [("ms per step (plain clock)", [f"{p['step_ms']:.3f}" for p in profiles])]
    rows += [(kind, [f"{p['kinds'].get(kind, 0.0):.3f}" for p in profiles]) for kind in kinds]
    rows += [("outside the operators (Python, checks)", [f"{p['outside_ms']:.3f}" for p in profiles]),
             ("operator calls from Python", [f"{p['op_calls']:.0f}" for p in profiles]),
             ("Python calls", [str(p["python_calls"]) for p in profiles])]
    lines += [f"| {title} | " + " | ".join(cells) + " |" for title, cells in rows]
    return lines + [""]
