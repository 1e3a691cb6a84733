"""Benchmarks: tfm_lesson side by side with torch.nn, in one run, so the ratios hold on a noisy machine.
Repository tooling (it runs the chapters of a checkout), so it lives in tools/, outside the learner's package.

    python tools/bench.py                       # everything (minutes to tens of minutes on a laptop CPU)
    python tools/bench.py --quick --out /tmp/b  # a smoke test: under a minute
    python tools/bench.py --sections attention,step --device cuda   # on a GPU: bf16 autocast

Writes ``bench.md`` (Markdown tables) and ``bench.json`` (every figure, plus the machine) into ``--out``.

Sections:

- ``attention``: multi-head self-attention with a padding mask at the course's shapes, forward (no grad) and
  forward+backward: tfm_lesson's explicit path (weights), its fast path, ``nn.MultiheadAttention`` (same
  weights, via ``to_torch``) and ``F.scaled_dot_product_attention`` alone on already projected q, k, v (the
  kernel floor, no projections).
- ``step``: one training step (embeddings, model, generator, loss, backward, Adam) of
  :class:`tfm_lesson.Transformer` against ``nn.Transformer`` wrapped in the *same* embeddings, positional
  encoding and generator; tokens/s, achieved FLOP/s (see :func:`training_flops`) and its fraction of a
  float32 square matmul timed in the same interleaved turns (the peak under the same load).
- ``chapters``: each ``notebooks/NN_*.ipynb`` executed in a fresh kernel (nbclient, nothing written back):
  wall time and the kernel's peak resident memory.
- ``targets``: time for :func:`tfm_lesson.train.loop.train` to reach the course's training targets.
- ``generation``: greedy generation from one :class:`tfm_lesson.GPT`: the fast cache (``FastDecoder``, what
  ``GPT.generate`` uses), the model's forward with a cache, no cache, and ``transformers``' GPT-2 of the same
  size with its own cache, side by side: ms per token at 32, 128, 256 and 512 new tokens, whole ``generate``
  calls, and the ``torch.profiler`` table of one cached step (``tools/bench_generation.py``).

``--load N`` starts N busy processes for the whole run (each stops itself after ``--load-seconds``; all are
stopped at the end) and says so in the report: the figures under a known load, beside those of a quiet run.

Contenders are interleaved (A B C D A B C D ...) and medians reported: a burst of load from another process
hits every contender alike, so the ratios stay meaningful even when the absolute times do not.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parent.parent  # the checkout: its notebooks/ and, for a script run, its package
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tfm_lesson.train import cost  # noqa: E402
from tfm_lesson.attention import MultiHeadAttention  # noqa: E402
from tfm_lesson.interop import to_torch  # noqa: E402
from tfm_lesson.masks import padding_mask  # noqa: E402
from tfm_lesson.train.recipes import RECIPES  # noqa: E402
from tfm_lesson.model import Transformer, TransformerConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/: the generation section's module
from bench_generation import LoadGenerator, bench_generation, decode_times, generation_markdown  # noqa: E402

__all__ = ["interleaved", "machine_info", "matmul_peak", "training_flops", "bench_attention", "bench_step",
           "bench_chapters", "bench_targets", "decode_times", "bench_generation", "LoadGenerator", "write_report",
           "main"]

SECTIONS = ("attention", "step", "chapters", "targets", "generation")


# ------------------------------------------------------------------------------------------------ timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(contenders: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                device: torch.device | str = "cpu") -> dict[str, float]:
    """Median seconds per call of each contender, timed in turns (A B C A B C ...) after ``warmup`` turns."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats!r}")
    device = torch.device(device)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for turn in range(warmup + repeats):
        for name, fn in contenders.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            if turn >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def machine_info(device: torch.device) -> dict:
    """CPU model, cores, torch version and threads, device (and GPU name when on CUDA)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = dict(cpu=cpu, cores=os.cpu_count(), torch=torch.__version__, threads=torch.get_num_threads(),
                device=str(device), python=platform.python_version(), platform=platform.platform(),
                load_average=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def matmul_peak(device: torch.device, size: int = 2048, repeats: int = 5) -> float:
    """Best float32 FLOP/s of a ``size x size`` matmul on ``device`` (2 size^3 FLOPs per product): the package's
    :func:`tfm_lesson.train.cost.matmul_peak`, the one measurement of the peak (chapter 19's MFU against the
    measured matmul peak uses it too, at a smaller size)."""
    return cost.matmul_peak(device, size, repeats)


def _autocast(device: torch.device, amp: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16) if amp else nullcontext()


# ----------------------------------------------------------------------------------------------- attention
def attention_shapes(quick: bool) -> list[tuple[int, int, int, int]]:
    """(batch, heads, d_model, length) at the course's shapes; a small subset when ``quick``."""
    if quick:
        return [(32, 4, 128, 16), (32, 8, 512, 64)]
    return [(32, h, d, n) for d in (128, 512) for h in (4, 8) for n in (16, 64, 256)]


def bench_attention(device: torch.device, quick: bool = False, repeats: int | None = None,
                    amp: bool = False) -> list[dict]:
    """One row per (shape, pass): median milliseconds of each contender and the ratios."""
    rows = []
    repeats = repeats or (2 if quick else 7)
    for batch, heads, d_model, length in attention_shapes(quick):
        torch.manual_seed(0)
        ours = MultiHeadAttention(d_model, heads).to(device)
        theirs = to_torch(ours)
        lengths = torch.randint(length // 2, length + 1, (batch,), device=device)
        tokens = (torch.arange(length, device=device)[None] < lengths[:, None]).long()  # 1 = real, 0 = pad
        mask = padding_mask(tokens, 0)  # (batch, 1, 1, length), True = may attend
        key_padding = ~mask[:, 0, 0]  # (batch, length), nn's polarity: True = padding
        x = torch.randn(batch, length, d_model, device=device)
        d_k = d_model // heads
        q, k, v = (torch.randn(batch, heads, length, d_k, device=device) for _ in range(3))
        for kind in ("forward", "forward+backward"):
            backward = kind != "forward"
            xg = x.clone().requires_grad_(backward)
            qkv = [t.clone().requires_grad_(backward) for t in (q, k, v)]
            for m in (ours, theirs):
                m.train(backward)  # forward alone is inference: eval mode, no grad (torch may take its fast path)

            def run(fn):
                def call():
                    with (nullcontext() if backward else torch.no_grad()), _autocast(device, amp):
                        out = fn()
                    if backward:
                        out.float().sum().backward()
                return call

            contenders = {
                "explicit": run(lambda: ours(xg, xg, xg, mask, need_weights=True)[0]),
                "fast": run(lambda: ours(xg, xg, xg, mask)[0]),
                "nn.MultiheadAttention": run(lambda: theirs(xg, xg, xg, key_padding_mask=key_padding,
                                                           need_weights=False)[0]),
                "sdpa": run(lambda: F.scaled_dot_product_attention(*qkv, attn_mask=mask)),
            }
            t = interleaved(contenders, repeats, warmup=1, device=device)
            ms = {name: 1e3 * s for name, s in t.items()}
            rows.append(dict(batch=batch, heads=heads, d_model=d_model, length=length, pass_=kind, ms=ms,
                             fast_vs_nn=ms["fast"] / ms["nn.MultiheadAttention"],
                             explicit_vs_nn=ms["explicit"] / ms["nn.MultiheadAttention"],
                             fast_vs_sdpa=ms["fast"] / ms["sdpa"], explicit_vs_sdpa=ms["explicit"] / ms["sdpa"],
                             nn_vs_sdpa=ms["nn.MultiheadAttention"] / ms["sdpa"]))
    return rows


# ----------------------------------------------------------------------------------------------- training step
STEP_CONFIGS = {
    # d_model 128, 4 heads, 2 + 2 layers, d_ff 512, batch 64, length 20; a shared 1,000-token vocabulary
    "small": dict(config=dict(d_model=128, heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=512,
                              src_vocab_size=1000, tgt_vocab_size=1000), batch=64, length=20),
    # the paper's base model (table 3) with its shared, tied 37,000-token vocabulary; batch 8, length 32
    "base": dict(config=dict(), batch=8, length=32),
    # only for --quick: a few seconds
    "tiny": dict(config=dict(d_model=64, heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=128,
                             src_vocab_size=200, tgt_vocab_size=200), batch=16, length=12),
}


# timed turns per model when --repeats is not given: a small step is cheap, and 5 turns of it proved too few on
# a loaded machine (one run gave 1.14, two runs of 21 turns 0.97)
STEP_REPEATS = {"small": 21, "base": 5}


def training_flops(config: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> int:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward; 2 FLOPs per multiply-add).

    Multiply-adds of the forward pass, per sequence (d = d_model, f = d_ff, S = src_len, T = tgt_len,
    V = tgt_vocab_size):
    - each encoder layer: ``S (4 d^2 + 2 d f)`` (Q, K, V, O projections; FFN) ``+ 2 S^2 d`` (Q K^T and A V);
    - each decoder layer: ``T (4 d^2 + 2 d^2 + 2 d f)`` (self-attention projections; cross-attention Q and O;
      FFN) ``+ S 2 d^2`` (cross-attention K and V on the memory) ``+ 2 T^2 d + 2 T S d`` (the two attentions,
      full squares: the kernels compute masked entries too);
    - the generator: ``T d V``.
    Embedding look-ups, layer norms, softmax and the optimiser are not matmuls and are not counted.
    """
    return batch * cost.transformer_flops(config, src_len, tgt_len)  # the formula lives in tfm_lesson.train.cost


class TorchTransformer(nn.Module):
    """``nn.Transformer`` inside tfm_lesson's embeddings, positional encoding and generator (taken from
    ``shell``, a :class:`Transformer`): the two models differ only in their stacks."""

    def __init__(self, shell: Transformer) -> None:
        super().__init__()
        self.shell = shell
        self.core = to_torch(shell)  # the stacks, same weights
        del shell.encoder, shell.decoder  # only the embeddings, positional encoding and generator are used

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        s, c = self.shell, self.shell.config
        src_pad, tgt_pad = src == c.src_pad_id, tgt == c.tgt_pad_id  # nn's polarity: True = padding
        x = s._embed(src, s.src_embed, "src", c.src_vocab_size)
        y = s._embed(tgt, s.tgt_embed, "tgt", c.tgt_vocab_size)
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).triu(1)  # True = blocked
        h = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                      memory_key_padding_mask=src_pad)
        return s.generator(h)  # (batch, tgt_len, tgt_vocab_size)


def _step_models(name: str, device: torch.device) -> tuple[Transformer, TorchTransformer, dict]:
    spec = STEP_CONFIGS[name]
    # final_norm=True: nn.Transformer always ends each stack with a LayerNorm; give ours the same computation
    torch.manual_seed(0)
    ours = Transformer(TransformerConfig(final_norm=True, **spec["config"])).to(device)
    shell = Transformer(ours.config).to(device)
    shell.load_state_dict(ours.state_dict())
    theirs = TorchTransformer(shell).to(device)
    return ours, theirs, spec


def _batch(spec: dict, vocab: int, device: torch.device, seed: int = 0) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch, length = spec["batch"], spec["length"]
    src = torch.randint(4, vocab, (batch, length), generator=g)
    tgt = torch.randint(4, vocab, (batch, length + 1), generator=g)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
    src[torch.arange(length)[None] >= lengths[:, None]] = 0  # padding at the end of the shorter rows
    tgt[:, 1:][torch.arange(length)[None] >= lengths[:, None]] = 0
    return src.to(device), tgt.to(device)


def _loss(model: nn.Module, src: Tensor, tgt: Tensor, amp: bool, device: torch.device) -> Tensor:
    with _autocast(device, amp):
        logits = model(src, tgt[:, :-1])  # teacher forcing
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=0,
                           label_smoothing=0.1)


def bench_step(device: torch.device, quick: bool = False, repeats: int | None = None, amp: bool = False,
               configs: list[str] | None = None, peak_size: int = 2048) -> list[dict]:
    """One row per config: ms per step of each model, the ratio, tokens/s, FLOP/s, and its fraction of the
    float32 matmul rate (a ``peak_size`` square matmul timed as a third contender in the same turns, so the
    load that slows the steps slows the peak alike)."""
    configs = configs or (["tiny"] if quick else ["small", "base"])
    rows = []
    for name in configs:
        turns = repeats or (2 if quick else STEP_REPEATS.get(name, 5))
        ours, theirs, spec = _step_models(name, device)
        src, tgt = _batch(spec, ours.config.src_vocab_size, device)
        # the same computation: losses agree with dropout off (torch's inference fast path off as well)
        ours.eval(), theirs.eval()
        fastpath = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        with torch.no_grad():
            loss_gap = abs(_loss(ours, src, tgt, False, device).item() - _loss(theirs, src, tgt, False, device).item())
        torch.backends.mha.set_fastpath_enabled(fastpath)
        ours.train(), theirs.train()
        optimizers = {id(m): torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
                      for m in (ours, theirs)}

        def step(model):
            def call():
                opt = optimizers[id(model)]
                loss = _loss(model, src, tgt, amp, device)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            return call

        a = torch.randn(peak_size, peak_size, device=device)
        contenders = {"tfm_lesson.Transformer": step(ours), "nn.Transformer": step(theirs),
                      "matmul": lambda: a @ a}  # the peak, timed in the same turns, under the same load
        t = interleaved(contenders, turns, warmup=1, device=device)
        matmul = 2 * peak_size ** 3 / t.pop("matmul")
        flops = training_flops(ours.config, spec["batch"], spec["length"], spec["length"])
        tokens = int((src != 0).sum() + (tgt[:, 1:] != 0).sum())
        row = dict(config=name, batch=spec["batch"], length=spec["length"], vocab=ours.config.tgt_vocab_size,
                   d_model=ours.config.d_model, parameters=sum(p.numel() for p in ours.parameters()),
                   flops_per_step=flops, tokens_per_step=tokens, loss_gap=loss_gap,
                   repeats=turns, ms={k: 1e3 * v for k, v in t.items()},
                   ratio=t["tfm_lesson.Transformer"] / t["nn.Transformer"])
        row["tokens_per_s"] = {k: tokens / v for k, v in t.items()}
        row["flop_per_s"] = {k: flops / v for k, v in t.items()}
        row["matmul_flop_per_s"] = matmul  # float32 peak_size^2 matmul, median of the same turns
        row["fraction_of_peak"] = {k: flops / v / matmul for k, v in t.items()}
        rows.append(row)
        del ours, theirs, optimizers
    return rows


# ----------------------------------------------------------------------------------------------- chapters
_RUN_NOTEBOOK = r"""
import json, resource, sys, time
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
start = time.perf_counter()
error = None
try:
    NotebookClient(nb, timeout=int(sys.argv[2]), kernel_name="python3",
                   resources={"metadata": {"path": sys.argv[3]}}).execute()
except Exception as exc:
    text = [line.strip() for line in str(exc).splitlines() if line.strip().strip("-")]
    error = f"{type(exc).__name__}: {' / '.join(text[:2])}"[:300]
seconds = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the kernel, our only child; KiB on Linux
print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_kib / 1024, "error": error}))
"""


def bench_chapters(notebooks: list[Path], timeout: int = 600) -> list[dict]:
    """Execute each notebook in a fresh kernel (in a child process, nothing written back): time, peak RSS."""
    rows = []
    for path in notebooks:
        proc = subprocess.run([sys.executable, "-c", _RUN_NOTEBOOK, str(path), str(timeout), str(path.parent)],
                              capture_output=True, text=True, timeout=timeout + 120)
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            result = dict(seconds=None, peak_rss_mb=None, error=(proc.stderr.strip().splitlines() or ["?"])[-1][:300])
        rows.append(dict(chapter=path.stem, **result))
    return rows


# ----------------------------------------------------------------------------------------------- targets
# The training issue's targets on a 2-core CPU, with the chapters' recipes (chapter 10 for reverse and numbers).
TARGETS = {
    task: dict(metric=metric, goal=goal, budget_s=budget, model=dict(RECIPES[task]["model"]),
               train={k: v for k, v in RECIPES[task]["train"].items() if k != "steps"}, eval_every=every)
    for task, metric, goal, budget, every in (("reverse", "exact_match", 99.0, 60, 50),
                                              ("numbers", "exact_match", 99.0, 120, 50),
                                              ("sentences", "bleu", 70.0, 180, 100))
}


class _Reached(Exception):
    pass


def bench_targets(device: torch.device, tasks: list[str] | None = None, slack: float = 2.0) -> list[dict]:
    """Train each task until its validation metric reaches the goal (checked every ``eval_every`` steps on 200
    valid pairs, greedy) or ``slack`` x its budget has passed. Time counts the whole ``train`` call, the
    periodic validation included (so it overstates pure training time a little)."""
    from tfm_lesson.data import load_task
    from tfm_lesson.train.loop import evaluate, make_model, train

    rows = []
    for task in tasks or list(TARGETS):
        spec = TARGETS[task]
        data = load_task(task, seed=0)
        torch.manual_seed(0)
        model = make_model(data.src_vocab, data.tgt_vocab, **spec["model"])
        seen: list[tuple[int, float, float]] = []
        start = time.perf_counter()

        def callback(step: int, history: dict) -> None:
            value = history[f"valid_{spec['metric']}"][-1]
            seen.append((step, time.perf_counter() - start, value))
            if value >= spec["goal"]:
                raise _Reached

        try:
            train(model, data, minutes=slack * spec["budget_s"] / 60, eval_every=spec["eval_every"], eval_limit=200,
                  callback=callback, device=device, seed=0, progress=False, log=lambda _m: None, **spec["train"])
        except _Reached:
            pass
        total = time.perf_counter() - start
        reached = bool(seen) and seen[-1][2] >= spec["goal"]
        model.eval()
        test = evaluate(model, data.test, data.src_vocab, data.tgt_vocab, limit=1000)
        rows.append(dict(task=task, metric=spec["metric"], goal=spec["goal"], budget_s=spec["budget_s"],
                         reached=reached, seconds_to_target=seen[-1][1] if reached else None,
                         steps=seen[-1][0] if seen else 0, seconds=total,
                         best_valid=max((v for *_, v in seen), default=None),
                         test_at_stop={k: test[k] for k in ("exact_match", "bleu", "chrf")},
                         curve=[dict(step=s, seconds=t, value=v) for s, t, v in seen]))
    return rows


# ----------------------------------------------------------------------------------------------- report
def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def write_report(result: dict, out: Path) -> tuple[Path, Path]:
    """``bench.json`` (everything) and ``bench.md`` (tables) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    m = result["machine"]
    lines = ["# tfm_lesson benchmarks", "",
             f"- machine: {m['cpu']}, {m['cores']} cores{', GPU ' + m['gpu'] if 'gpu' in m else ''}",
             f"- torch {m['torch']}, {m['threads']} threads, device `{m['device']}`"
             f"{', bf16 autocast' if result['amp'] else ', float32'}; Python {m['python']}",
             f"- run: {m['date']}, load average at start {m['load_average']}, "
             f"mode {'quick' if result['quick'] else 'full'}; medians of interleaved runs"]
    if "load_average_end" in m:
        lines.append(f"- load average at the end {m['load_average_end']}")
    if "load_generator" in result:
        lg = result["load_generator"]
        lines.append(f"- **load generator: this run started {lg['processes']} busy processes** (pure-Python loops) "
                     f"at {lg['started']} and stopped them at {lg.get('stopped', '?')}; load average when they were "
                     f"stopped: {lg.get('load_average_at_stop')}")
    lines.append("")
    if "matmul_peak_flops" in result:
        lines += [f"Float32 square matmul, timed alone after the steps (best of 5): "
                  f"{result['matmul_peak_flops'] / 1e9:.1f} GFLOP/s.", ""]
    if "attention" in result:
        lines += ["## Multi-head self-attention (padding mask)", "",
                  "| batch | heads | d_model | len | pass | explicit ms | fast ms | nn.MHA ms | SDPA ms "
                  "| fast / nn | explicit / nn | fast / SDPA | nn / SDPA |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["attention"]:
            ms = r["ms"]
            lines.append(f"| {r['batch']} | {r['heads']} | {r['d_model']} | {r['length']} | {r['pass_']} | "
                         f"{ms['explicit']:.2f} | {ms['fast']:.2f} | {ms['nn.MultiheadAttention']:.2f} | "
                         f"{ms['sdpa']:.2f} | {r['fast_vs_nn']:.2f} | {r['explicit_vs_nn']:.2f} | "
                         f"{r['fast_vs_sdpa']:.1f} | {r['nn_vs_sdpa']:.1f} |")
        lines.append("")
    if "step" in result:
        lines += ["## Training step (embeddings, model, generator, loss, Adam)", "",
                  "| config | batch x len | vocab | params | ours ms | nn ms | ours / nn | ours tok/s | nn tok/s "
                  "| ours GFLOP/s | nn GFLOP/s | matmul GFLOP/s | ours % peak | nn % peak | loss gap |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["step"]:
            ms, tps, fps = r["ms"], r["tokens_per_s"], r["flop_per_s"]
            frac = r.get("fraction_of_peak", {})
            o, n = "tfm_lesson.Transformer", "nn.Transformer"
            lines.append(f"| {r['config']} | {r['batch']} x {r['length']} | {r['vocab']} | "
                         f"{r['parameters'] / 1e6:.1f} M | "
                         f"{ms[o]:.0f} | {ms[n]:.0f} | {r['ratio']:.2f} | {tps[o]:.0f} | {tps[n]:.0f} | "
                         f"{fps[o] / 1e9:.1f} | {fps[n] / 1e9:.1f} | {r['matmul_flop_per_s'] / 1e9:.1f} | "
                         f"{_f(frac.get(o), '{:.0%}')} | "
                         f"{_f(frac.get(n), '{:.0%}')} | {r['loss_gap']:.1e} |")
        lines += ["", "FLOPs: matmul FLOPs counted analytically (`tools/bench.py: training_flops`), "
                  "forward x 3 for forward + backward. % peak: achieved FLOP/s over the matmul rate measured "
                  "in the same interleaved turns (median).", ""]
    if "chapters" in result:
        lines += ["## Chapters (fresh kernel each)", "", "| chapter | seconds | peak RSS (MB) | error |",
                  "|---|---|---|---|"]
        for r in result["chapters"]:
            lines.append(f"| {r['chapter']} | {_f(r['seconds'], '{:.1f}')} | {_f(r['peak_rss_mb'], '{:.0f}')} | "
                         f"{r['error'] or ''} |")
        lines.append("")
    if "targets" in result:
        lines += ["## Time to the training targets", "",
                  "| task | target | budget | reached | seconds to target | steps | best valid | test at stop |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in result["targets"]:
            test = r["test_at_stop"]
            lines.append(f"| {r['task']} | {r['metric']} >= {r['goal']:g} | {r['budget_s']} s | "
                         f"{'yes' if r['reached'] else 'no'} | {_f(r['seconds_to_target'], '{:.0f}')} | {r['steps']} | "
                         f"{_f(r['best_valid'], '{:.1f}')} | "
                         f"exact {test['exact_match']:.1f}, BLEU {test['bleu']:.1f} |")
        lines.append("")
    if "generation" in result:
        lines += generation_markdown(result["generation"])
    for note in result.get("notes", []):
        lines.append(f"- {note}")
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    return out / "bench.md", out / "bench.json"


# ----------------------------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python tools/bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny repeat counts and a subset of shapes (< 1 min)")
    p.add_argument("--out", type=Path, default=Path("artifacts/bench"), help="directory for bench.md and bench.json")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when present")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed turns per contender (default: attention 7, step small 21 / base 5; quick 2)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--amp", choices=("auto", "on", "off"), default="auto",
                   help="bf16 autocast: auto = on for cuda, off for cpu")
    p.add_argument("--load", type=int, default=0,
                   help="start N busy processes for the whole run (a known load); stopped at the end")
    p.add_argument("--load-seconds", type=float, default=3600.0,
                   help="each load process stops itself after this many seconds (default 3600)")
    p.add_argument("--no-transformers", action="store_true", help="generation: leave transformers' GPT-2 out")
    p.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="where NN_*.ipynb live")
    return p


def _run_sections(args: argparse.Namespace, sections: list[str], device: torch.device, amp: bool, result: dict,
                  say: Callable[[str], None]) -> None:
    started = time.perf_counter()
    if "attention" in sections:
        say("attention ...")
        result["attention"] = bench_attention(device, args.quick, args.repeats, amp)
    if "step" in sections:
        size = 1024 if args.quick else 2048
        say("training step ...")
        result["step"] = bench_step(device, args.quick, args.repeats, amp, peak_size=size)
        result["matmul_peak_flops"] = matmul_peak(device, size)  # alone, best of 5: for the record
    write_report(result, args.out)  # after every section, so a long run that is stopped keeps what it measured
    if "chapters" in sections:
        if args.quick:
            result["notes"].append("chapters: skipped in --quick")
        else:
            notebooks = sorted(args.notebooks.glob("[0-9][0-9]_*.ipynb"))
            say(f"chapters ({len(notebooks)}) ...")
            result["chapters"] = bench_chapters(notebooks)
            write_report(result, args.out)
    if "targets" in sections:
        if args.quick:
            result["notes"].append("targets: skipped in --quick")
        else:
            say("training targets ...")
            result["targets"] = bench_targets(device)
    if "generation" in sections:
        say("generation with and without the KV cache ...")
        result["generation"] = bench_generation(device, args.quick, args.repeats,
                                                with_transformers=not args.no_transformers)
    result["sections_seconds"] = time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"--sections: unknown {sorted(unknown)}; choose from {','.join(SECTIONS)}")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is visible")
    if args.threads:
        torch.set_num_threads(args.threads)
    amp = args.amp == "on" or (args.amp == "auto" and device.type == "cuda")
    result: dict = dict(machine=machine_info(device), quick=args.quick, amp=amp, sections=sections, notes=[])
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    started = time.perf_counter()
    if args.load < 0:
        raise SystemExit(f"--load must be >= 0, got {args.load}")
    load = LoadGenerator(args.load, args.load_seconds) if args.load else nullcontext()
    with load:
        if args.load:
            result["load_generator"] = load.info
            say(f"load generator: {args.load} busy processes started (pids {load.info['pids']}), each stopping "
                f"itself after {args.load_seconds:.0f} s; stopped at the end of the run")
        _run_sections(args, sections, device, amp, result, say)
    if args.load:
        result["load_generator"] = load.info
        say(f"load generator stopped at {load.info['stopped']}")
    result["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    result["seconds"] = time.perf_counter() - started
    md, js = write_report(result, args.out)
    say(f"wrote {md} and {js} in {result['seconds']:.0f} s")
    return result


if __name__ == "__main__":
    main()
