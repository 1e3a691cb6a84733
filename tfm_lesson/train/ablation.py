"""From the 2017 block to today's, one change at a time, on chapter 14's language model.

Each variant adds one change to the one before; every variant trains with the same seeds (the same
initialisation draw and the same batches), the same number of optimiser steps and the same learning rate,
and is scored by its held-out (validation) loss. Because the seeds are shared, the fair comparison of two
variants is the *paired* difference seed by seed; :func:`summarise` gives its mean and spread.

    python -m tfm_lesson.train.ablation                   # reruns the table: runs/modern_ablation.json

The shipped table is ``tfm_lesson/data/modern_ablation.json`` (:func:`load_ablation`); the command above
writes a new table (``--out`` elsewhere; never over the shipped one) and prints the summary. This experiment
runner sits above :mod:`tfm_lesson.modern` (the blocks) and :mod:`tfm_lesson.train.lm` (the trainer) that it uses.
"""
from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

import torch

from .._io import atomic_open, check_writable_file
from ..modern.swiglu import swiglu_hidden

__all__ = ["VARIANTS", "variant_configs", "run_ablation", "unigram_baseline", "summarise", "load_ablation", "format_summary",
           "plot_ablation", "ABLATION_FILE", "DEFAULT_OUT", "build_parser", "main"]

ABLATION_FILE = "modern_ablation.json"
DEFAULT_OUT = Path("runs") / ABLATION_FILE  # the command's default: beside the user's runs, never the package

# (name, what it changes); each variant keeps every change above it
VARIANTS: list[tuple[str, dict]] = [
    # learned positions, not the paper's sinusoids: this GPT does not scale its embeddings by sqrt(d_model)
    # (GPT-2 does not), so sinusoids of amplitude 1 would drown token embeddings of std 0.02
    ("2017 block", dict(norm_first=False, final_norm=False, positional="learned", activation="relu",
                        norm="layer", bias=True)),
    ("+ pre-norm, final norm", dict(norm_first=True, final_norm=True)),
    ("+ RMSNorm", dict(norm="rms")),
    ("+ RoPE", dict(positional="rope")),
    ("+ SwiGLU", dict(activation="swiglu")),  # d_ff becomes swiglu_hidden(d_ff): the same parameters
    ("+ GQA (kv_heads = heads / 2)", dict(kv_heads="half")),
    ("+ no biases = today's block", dict(bias=False)),
]


def variant_configs(vocab_size: int, max_len: int = 64, d_model: int = 64, heads: int = 4, d_ff: int = 256,
                    num_layers: int = 2, variants: Sequence[tuple[str, dict]] = VARIANTS) -> list[tuple[str, dict]]:
    """The cumulative :class:`~tfm_lesson.gpt.GPTConfig` keyword arguments of every variant, in order."""
    base = dict(vocab_size=vocab_size, max_len=max_len, d_model=d_model, heads=heads, d_ff=d_ff,
                num_layers=num_layers, dropout=0.0)
    out, current = [], dict(base)
    for name, change in variants:
        change = dict(change)
        if change.get("kv_heads") == "half":
            change["kv_heads"] = max(1, heads // 2)
        if change.get("activation") == "swiglu":
            change["d_ff"] = swiglu_hidden(d_ff)
        current = {**current, **change}
        out.append((name, dict(current)))
    return out


def run_ablation(data=None, seeds: Sequence[int] = (0, 1, 2), steps: int = 300, batch_size: int = 32,
                 lr: float = 3e-3, eval_tokens: int = 20_000, variants: Sequence[tuple[str, dict]] = VARIANTS,
                 log: Callable[[str], None] | None = print, only: Sequence[int] | None = None, **sizes) -> dict:
    """Train every variant with every seed; return a JSON-ready dict of settings and results.

    ``data``: an :class:`~tfm_lesson.train.lm.LMData` (default: chapter 14's corpus, a 384-token BPE vocabulary);
    ``sizes``: ``max_len``, ``d_model``, ``heads``, ``d_ff``, ``num_layers`` for :func:`variant_configs`;
    ``only``: the indices of the variants to train (default all; to split the work between processes).
    """
    from ..data.corpus import load_corpus
    from ..gpt import GPT
    from .lm import prepare_lm_data, train_lm

    if data is None:
        data = prepare_lm_data(load_corpus(), vocab_size=384, tokenizer_chars=50_000)
    configs = variant_configs(data.vocab_size, variants=variants, **sizes)
    runs = []
    for index, (name, config) in enumerate(configs):
        if only is not None and index not in only:
            continue
        for seed in seeds:
            torch.manual_seed(seed)
            model = GPT(**config)
            start = time.perf_counter()
            history = train_lm(model, data, steps=steps, batch_size=batch_size, lr=lr, eval_tokens=eval_tokens,
                               device="cpu", seed=seed, threads=1)
            seconds = time.perf_counter() - start
            runs.append(dict(variant=name, seed=seed, valid_loss=history["valid_loss"][-1],
                             train_loss=statistics.fmean(history["loss"][-20:]), steps=history["step"][-1],
                             seconds=round(seconds, 2), parameters=sum(p.numel() for p in model.parameters())))
            if log:
                log(f"{name:32s} seed {seed}: valid loss {runs[-1]['valid_loss']:.4f} "
                    f"({runs[-1]['parameters']:,} parameters, {seconds:.0f} s)")
    first = configs[0][1]
    unigram = unigram_baseline(data, eval_tokens, first["max_len"])  # the models' window
    return dict(settings=dict(seeds=list(seeds), steps=steps, batch_size=batch_size, lr=lr, eval_tokens=eval_tokens,
                              vocab_size=data.vocab_size, corpus=data.name, sizes=sizes, unigram_loss=unigram,
                              configs={name: config for name, config in configs},
                              machine=f"{platform.machine()} CPU, 1 thread, torch {torch.__version__}"),
                runs=runs)


def unigram_baseline(data, eval_tokens: int = 20_000, max_len: int = 64) -> float:
    """The held-out loss, in nats per token, of a model that ignores the context: the cross-entropy of the unigram
    distribution of ``data.train`` (token frequencies, add-one smoothing: :func:`tfm_lesson.train.lm.unigram_perplexity`)
    on exactly the tokens the trained models are scored on. :func:`tfm_lesson.train.lm.train_lm` scores the targets of
    ``eval_tokens // max_len`` consecutive windows of ``max_len`` tokens of ``data.valid``: tokens 1 to
    ``(eval_tokens // max_len) * max_len`` (token 0 is only ever an input)."""
    from .lm import unigram_perplexity

    n = (min(eval_tokens, data.valid.numel() - 1) // max_len) * max_len  # as train_lm's evaluation reads them
    if n < 1:
        raise ValueError(f"unigram_baseline: eval_tokens={eval_tokens} and {data.valid.numel()} validation tokens "
                         f"hold no window of max_len={max_len}")
    return math.log(unigram_perplexity(data.train, data.valid[1: n + 1], data.vocab_size))


# two-sided 95% quantiles of Student's t distribution, by degrees of freedom (seeds - 1)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(dof: int) -> float:
    """The half-width factor of a 95% confidence interval for a mean of ``dof + 1`` numbers (Student's t)."""
    if dof < 1:
        return float("nan")
    return _T95.get(dof) or (_T95[max(k for k in _T95 if k <= dof)] if dof < 30 else 1.96)


def summarise(results: dict) -> list[dict]:
    """Per variant: mean and standard deviation of the held-out loss over seeds, and the paired difference
    from the variant before it: its mean, standard deviation, the half-width ``ci95`` of its 95% confidence
    interval (Student's t: with 3 seeds, 4.3 standard errors), and ``inside_noise`` when that interval
    contains 0, i.e. when the seeds cannot tell whether the change helps or hurts."""
    names = list(dict.fromkeys(r["variant"] for r in results["runs"]))
    by_name = {n: {r["seed"]: r for r in results["runs"] if r["variant"] == n} for n in names}
    rows = []
    for i, name in enumerate(names):
        losses = [r["valid_loss"] for r in by_name[name].values()]
        row = dict(variant=name, mean=statistics.fmean(losses), std=statistics.stdev(losses) if len(losses) > 1 else 0.0,
                   seeds=len(losses), parameters=next(iter(by_name[name].values()))["parameters"],
                   seconds=statistics.fmean(r["seconds"] for r in by_name[name].values()))
        if i:
            before = by_name[names[i - 1]]
            diffs = [by_name[name][s]["valid_loss"] - before[s]["valid_loss"] for s in by_name[name] if s in before]
            sd = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
            ci95 = t95(len(diffs) - 1) * sd / math.sqrt(len(diffs))
            row.update(diff=statistics.fmean(diffs), diff_std=sd, ci95=ci95,
                       inside_noise=not abs(statistics.fmean(diffs)) > ci95)
        rows.append(row)
    return rows


def format_summary(rows: list[dict]) -> str:
    """The summary as a fixed-width table (losses in nats per token)."""
    lines = [f"{'variant':32s} {'params':>8s} {'held-out loss':>15s}  {'change vs row above':>20s}  inside the noise?",
             f"{'':32s} {'':>8s} {'mean ± std':>15s}  {'mean ± 95% interval':>20s}"]
    for r in rows:
        change = "" if "diff" not in r else f"{r['diff']:+.3f} ± {r['ci95']:.3f}"
        noise = "" if "diff" not in r else ("yes" if r["inside_noise"] else "no")
        lines.append(f"{r['variant']:32s} {r['parameters']:8,d} {r['mean']:7.3f} ± {r['std']:.3f}  {change:>20s}  {noise}")
    return "\n".join(lines)


def load_ablation(path: str | Path | None = None) -> dict:
    """The precomputed ablation shipped with the package (or the JSON at ``path``)."""
    if path is None:
        return json.loads(resources.files("tfm_lesson.data").joinpath(ABLATION_FILE).read_text())
    return json.loads(Path(path).read_text())


def plot_ablation(results: dict, title: str | None = None):
    """Two panels. Left: held-out loss per variant, mean ± 1 standard deviation over seeds (dots: the seeds).
    Right: the paired change from the row above with its 95% confidence interval; an interval that crosses
    the dashed zero line is inside the noise. Returns a :class:`tfm_lesson.look.viz.Figure`."""
    from ..look.viz import PALETTE, new_figure, plot_points

    rows = summarise(results)
    names = [row["variant"] for row in rows]
    by_seed = {name: {r["seed"]: r["valid_loss"] for r in results["runs"] if r["variant"] == name} for name in names}
    fig = new_figure(9.5, 0.45 * len(rows) + 1.8)
    left, right = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1.1, 1]})
    settings = results["settings"]
    unigram = settings.get("unigram_loss")
    plot_points({name: list(by_seed[name].values()) for name in names}, interval="sd", ax=left,
                xlabel="held-out loss (nats per token)",
                title=f"mean ± 1 std over {len(settings['seeds'])} seeds (dots)" +
                (f"\nunigram baseline {unigram:.2f}" if unigram is not None else ""))
    # the right panel: the paired change from the row above, with the 95% interval summarise() computes
    # (Student's t over the seeds' differences); seaborn draws that interval as given
    diffs = {name: [by_seed[name][s] - by_seed[before][s] for s in by_seed[name] if s in by_seed[before]]
             for before, name in zip(names, names[1:])}
    interval = {tuple(diffs[row["variant"]]): (row["diff"] - row["ci95"], row["diff"] + row["ci95"])
                for row in rows[1:]}
    colours = {row["variant"]: "#999999" if row["inside_noise"] else PALETTE[3] for row in rows[1:]}
    plot_points({name: diffs.get(name, [float("nan")]) for name in names}, show_values=False, zero_line=0.0,
                interval=lambda d: interval.get(tuple(d), (float("nan"), float("nan"))), colors=colours, ax=right,
                xlabel="change from the row above (95% interval)",
                title="paired change, 95% interval\ngrey: inside the noise (crosses 0)")
    fig.suptitle(title or f"{settings['steps']} steps per run; lower is better", fontsize=11)
    return fig


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.train.ablation",
                                     description="Rerun chapter 16's ablation: the 2017 block to today's.")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default 3)")
    parser.add_argument("--steps", type=int, default=300, help="optimiser steps per run (default 300)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    parser.add_argument("--first", type=int, default=len(VARIANTS),
                        help=f"only the first N variants (default all {len(VARIANTS)})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"where to write the JSON (default {DEFAULT_OUT}; never the package's shipped table)")
    parser.add_argument("--overwrite", action="store_true", help="replace the file already at --out")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Check every flag and --out, train every variant with every seed, refuse NaN results, then write."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value in (("--seeds", args.seeds), ("--steps", args.steps), ("--batch-size", args.batch_size)):
        if value < 1:
            parser.error(f"{flag} must be >= 1, got {value}")
    if not 1 <= args.first <= len(VARIANTS):
        parser.error(f"--first must be between 1 and {len(VARIANTS)}, got {args.first}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr must be a finite number > 0, got {args.lr}")
    try:
        out = check_writable_file(args.out, args.overwrite)
    except ValueError as err:
        parser.error(f"--out {err}")
    from .runstate import TrainingDiverged

    try:
        results = run_ablation(seeds=range(args.seeds), steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                               variants=VARIANTS[: args.first])
    except TrainingDiverged as err:
        print(f"error: {err}: nothing written (a smaller --lr?)", file=sys.stderr)
        return 3
    bad = [f"{r['variant']} (seed {r['seed']})" for r in results["runs"] if not math.isfinite(r["valid_loss"])]
    if bad:
        print(f"error: the held-out loss is not finite for {', '.join(bad)}: nothing written (a smaller --lr?)",
              file=sys.stderr)
        return 3
    with atomic_open(out, "w") as fh:
        fh.write(json.dumps(results, indent=1) + "\n")
    print(format_summary(summarise(results)))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
