"""Train a Transformer from the command line, print held-out metrics as one JSON line.

    python -m tfm_lesson.train --task reverse --minutes 1          # the task's recipe (see below)
    python -m tfm_lesson.train --tsv fra.txt --minutes 20 --out runs/fra
    python -m tfm_lesson.train --resume runs/fra/model.pt          # continue a stopped run
    torchrun --nproc_per_node=2 -m tfm_lesson.train --task copy --steps 100     # DistributedDataParallel
    python -m tfm_lesson.train --task lm --minutes 2               # a GPT language model (tfm_lesson.train.lm);
    python -m tfm_lesson.train --text my_book.txt --minutes 5      # ... on your own text: OUT/lm.pt (default runs/lm)

Each task starts from its recipe, the settings measured for it (flags override them). Every flag and the
output folder are checked before training starts; a flag that only the other kind of run (translation or
language model) reads is refused. Both kinds keep the same contract. The run is saved to OUT/model.pt
(a language model: OUT/lm.pt) atomically every
--save-every steps and at the end; Ctrl-C or SIGTERM saves and stops, and --resume continues the run
exactly where it stopped. A run whose loss becomes NaN or infinite stops with exit status 3 and leaves
the last good checkpoint as it was.

Progress goes to stderr (a tqdm bar) and evaluation lines to stdout; the LAST line of stdout is the JSON
of the test split's metrics: ``exact_match``, ``bleu``, ``chrf`` (%), ``steps``, ``seconds``, ...
Translate with ``python -m tfm_lesson.train.translate OUT/model.pt "text"``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from .._io import inside_package
from .recipes import RECIPES as _RECIPES

TASKS = ("copy", "reverse", "sort", "numbers", "sentences")

# The settings each task starts from: tfm_lesson.train.recipes, flattened (the model's and the run's settings side by
# side). "steps" applies when neither --steps nor --minutes is given.
RECIPES: dict[str, dict] = {name: {**r["model"], **r["train"], "beam": r["beam"]} for name, r in _RECIPES.items()}
LM_FALLBACKS = dict(seed=0, clip=1.0, warmup=None)
RECIPE_KEYS = ("d_model", "heads", "num_layers", "d_ff", "dropout", "batch_size", "warmup", "peak_lr", "beam")
# What defines a run: a resumed run keeps these (a different value on the command line is refused).
RUN_KEYS = ("task", "tsv", "tokenizer", "lower", "max_pairs", "max_len", "seed", "d_model", "heads",
            "num_layers", "d_ff", "dropout", "batch_size", "warmup", "peak_lr", "smoothing", "clip", "amp")
DEFAULT_OUT = Path("runs/model")
SAVE_EVERY = 250  # --save-every, when not given
EVAL_LIMIT = 200  # --eval-limit, when not given


def _recipe_table() -> str:
    rows = ["recipes (--task X starts from these; flags override them):",
            "  task       d_model heads num-layers d_ff dropout batch warmup peak-lr steps beam"]
    for name, r in RECIPES.items():
        if name == "lm":
            continue
        label = "--tsv" if name == "tsv" else name
        rows.append(f"  {label:<10} {r['d_model']:>7} {r['heads']:>5} {r['num_layers']:>10} {r['d_ff']:>4} "
                    f"{r['dropout']:>7} {r['batch_size']:>5} {r['warmup']:>6} {r['peak_lr']:>7g} {r['steps']:>5} "
                    f"{r['beam']:>4}")
    rows.append("  (steps: when neither --steps nor --minutes is given; --minutes alone trains until the time is up;")
    rows.append("   copy and sort use reverse's settings, measured on reverse)")
    lm = RECIPES["lm"]
    rows.append(f"  --task lm / --text: vocab-size {lm['vocab_size']}, max-len {lm['max_len']}, "
                f"d_model {lm['d_model']}, "
                f"heads {lm['heads']}, num-layers {lm['num_layers']}, d_ff {lm['d_ff']}, batch {lm['batch_size']}, "
                f"peak-lr {lm['peak_lr']:g}, steps {lm['steps']}")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.train", description=__doc__, epilog=_recipe_table(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--task", choices=(*TASKS, "lm"),
                     help="a built-in task; lm: a GPT language model on the course's English sentences (tfm_lesson.train.lm)")
    src.add_argument("--tsv", type=Path, help="a source<TAB>target file (Tatoeba/Anki format, UTF-8)")
    src.add_argument("--text", type=Path, help="a UTF-8 text file: train a GPT language model on it (tfm_lesson.train.lm)")
    p.add_argument("--vocab-size", type=int, default=None, help="--task lm / --text: BPE vocabulary, >= 256 (default 512)")
    p.add_argument("--resume", type=Path, default=None, metavar="CHECKPOINT",
                   help="continue the run saved in CHECKPOINT (its task, data and settings; --steps is the total)")
    p.add_argument("--tokenizer", choices=("words", "chars"), default=None, help="for --tsv (default: words)")
    p.add_argument("--lower", action="store_true", default=None, help="lower-case the --tsv text")
    p.add_argument("--max-pairs", type=int, default=None, help="read at most this many --tsv pairs")
    p.add_argument("--max-len", type=int, default=None,
                   help="the most positions the model sees. Translation: default 512, longer pairs are dropped "
                   "when the data is read; --task lm / --text: also the training window (default 64)")
    p.add_argument("--d-model", type=int, default=None, help="(default: the recipe)")
    p.add_argument("--heads", type=int, default=None, help="(default: the recipe)")
    p.add_argument("--num-layers", type=int, default=None,
                   help="layers of each stack (encoder and decoder; a GPT's blocks) (default: the recipe)")
    p.add_argument("--d-ff", type=int, default=None, help="(default: the recipe)")
    p.add_argument("--dropout", type=float, default=None, help="(default: the recipe)")
    p.add_argument("--batch-size", type=int, default=None, help="per process under torchrun (default: the recipe)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps in all (default: the recipe's, "
                   "unless --minutes)")
    p.add_argument("--minutes", type=float, default=None, help="wall-clock limit for training")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: the recipe)")
    p.add_argument("--peak-lr", type=float, default=None, help="the rate at the end of warm-up (default: the recipe)")
    p.add_argument("--smoothing", type=float, default=None, help="label smoothing (default 0.1)")
    p.add_argument("--clip", type=float, default=None, help="gradient-norm clipping (default 1.0; 0: none)")
    p.add_argument("--no-amp", dest="amp", action="store_false", default=None,
                   help="on a GPU, train in float32 (no bf16/fp16 autocast)")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate on the valid split every N steps")
    p.add_argument("--eval-limit", type=int, default=None, help="valid pairs decoded at each evaluation (default 200)")
    p.add_argument("--save-every", type=int, default=None, help="save the run every N steps (default 250)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1 for small models on "
                   "the CPU, else torch's choice)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: cuda when present)")
    p.add_argument("--out", type=Path, default=None, help=f"folder for model.pt (default: {DEFAULT_OUT}; with "
                   "--resume, the checkpoint's folder)")
    p.add_argument("--overwrite", action="store_true", help="replace the run already saved in --out")
    p.add_argument("--seed", type=int, default=None, help="(default 0)")
    p.add_argument("--beam", type=int, default=None, help="beam size for the test metrics, 1 = greedy "
                   "(default: the recipe)")
    p.add_argument("--test-limit", type=int, default=None, help="score only the first N test pairs (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


# ------------------------------------------------------------------------------------------ checking flags
def _positive_int(p: argparse.ArgumentParser, flag: str, value) -> None:
    if value is not None and value < 1:
        p.error(f"{flag} must be >= 1, got {value}")


def _finite(p: argparse.ArgumentParser, flag: str, value, low: float, high: float | None = None,
            low_open: bool = False) -> None:
    if value is None:
        return
    bad = not math.isfinite(value) or value < low or (low_open and value == low) or (high is not None and value >= high)
    if bad:
        rng = f"> {low:g}" if low_open else f">= {low:g}"
        rng += f" and < {high:g}" if high is not None else ""
        p.error(f"{flag} must be a finite number {rng}, got {value}")


# ----------------------------------------------------------------------- what every trainer's command line checks
# Flags that only one kind of run reads: the other kind refuses them rather than ignore them.
LM_ONLY = {"--vocab-size": "vocab_size"}
TRANSLATION_ONLY = {"--tokenizer": "tokenizer", "--lower": "lower", "--max-pairs": "max_pairs",
                    "--smoothing": "smoothing", "--beam": "beam", "--no-amp": "amp", "--eval-limit": "eval_limit",
                    "--test-limit": "test_limit"}


def refuse_foreign(args: argparse.Namespace, p: argparse.ArgumentParser, flags: dict[str, str], kind: str) -> None:
    """A usage error for each flag of ``flags`` that was given: they belong to ``kind`` of run."""
    given = [flag for flag, key in flags.items() if getattr(args, key, None) is not None]
    if given:
        p.error(f"{', '.join(given)}: only for {kind}; this run does not read {'it' if len(given) == 1 else 'them'}")


def check_common(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """The flags every trainer reads: counts >= 1, a finite positive --minutes."""
    for flag, key in (("--eval-every", "eval_every"), ("--eval-limit", "eval_limit"), ("--save-every", "save_every"),
                      ("--threads", "threads"), ("--test-limit", "test_limit"), ("--steps", "steps")):
        _positive_int(p, flag, getattr(args, key, None))
    _finite(p, "--minutes", getattr(args, "minutes", None), 0.0, low_open=True)


def resumed_run(args: argparse.Namespace, p: argparse.ArgumentParser, read, file_name: str, run_keys: Sequence[str],
                path_keys: Sequence[str] = ()) -> dict:
    """The settings of the run ``--resume`` names (read with ``read``), once sure the command line does not
    contradict them and that ``--steps`` asks for more steps than the run has taken. Usage errors exit 2."""
    given = {k: v for k, v in vars(args).items() if v is not None}
    if args.resume.is_dir():  # a run's folder: its checkpoint
        args.resume = args.resume / file_name
    try:
        payload = read(args.resume)
    except (OSError, ValueError) as err:
        p.error(f"--resume: {err}")
    if not isinstance(payload.get("training"), dict) or "run" not in payload.get("extra", {}):
        p.error(f"--resume: {args.resume} holds a model but no run to continue (it was not saved by "
                "python -m tfm_lesson.train)")
    saved = dict(payload["extra"]["run"])
    for key in run_keys:
        if key in given and key not in path_keys and given[key] != saved.get(key):
            p.error(f"--{key.replace('_', '-')} {given[key]} differs from the run being resumed "
                    f"({saved.get(key)}); a resumed run keeps its settings")
    for key in path_keys:
        if key in given and str(given[key].resolve()) != saved.get(key):
            p.error(f"--{key} {given[key]} differs from the run being resumed ({saved.get(key)})")
    done = int(payload["training"].get("step", 0))
    if "steps" in given and given["steps"] <= done:
        p.error(f"--steps {given['steps']}: the run in {args.resume} has already taken {done} steps (--steps counts "
                f"from the run's start); give more than {done} to continue it")
    return saved


def guarded(train_run: Callable[[], object], p: argparse.ArgumentParser, path: Path, resume: Path | None,
            say: Callable[[str], None], main_process: bool = True) -> int:
    """Run ``train_run()`` under the run contract's exit statuses: 0 when it finishes; 130 (Ctrl-C) or 143
    (SIGTERM) after saving, with the command that continues the run; 3 when the loss diverged (the last good
    checkpoint kept); a clash with the resumed run is a usage error (2)."""
    from .runstate import TrainingDiverged, TrainingInterrupted

    try:
        train_run()
    except TrainingInterrupted as stop:
        say(f"stopped by {stop.signal_name} after step {stop.step}: the run is saved in {path}\n"
            f"continue it with: python -m tfm_lesson.train --resume {path}")
        return 130 if stop.signal_name == "SIGINT" else 143
    except TrainingDiverged as err:
        if main_process:
            print(f"error: {err}", file=sys.stderr, flush=True)
        return 3
    except ValueError as err:
        if not str(err).startswith("resume:"):
            raise
        p.error(f"--resume {resume}: {str(err)[len('resume: '):]}")  # other data or settings
    return 0


def resolve(args: argparse.Namespace, p: argparse.ArgumentParser) -> dict:
    """The run's settings: command line > the resumed run's > the task's recipe > defaults. Usage errors exit 2."""
    given = {k: v for k, v in vars(args).items() if v is not None}
    saved: dict = {}
    if args.resume is not None:
        from .checkpoint import read_checkpoint

        saved = resumed_run(args, p, read_checkpoint, "model.pt", RUN_KEYS, path_keys=("tsv",))
    elif args.task is None and args.tsv is None:
        p.error("give --task or --tsv (what to train on), or --resume CHECKPOINT")
    task = saved.get("task", args.task)
    recipe = RECIPES[task if task else "tsv"]
    run = {"task": task, "tsv": saved.get("tsv", str(args.tsv.resolve()) if args.tsv else None)}
    defaults = dict(tokenizer="words", lower=False, max_pairs=None, max_len=512, seed=0, smoothing=0.1, clip=1.0,
                    amp=True)
    for key in RUN_KEYS[2:]:
        run[key] = saved[key] if key in saved else given.get(key, recipe.get(key, defaults.get(key)))
    if args.resume is not None:  # the run's plan, unless told otherwise
        run["steps"] = given.get("steps", None if "minutes" in given else saved.get("steps"))
        run["minutes"] = given.get("minutes", None if "steps" in given else saved.get("minutes"))
    else:
        run["steps"] = given.get("steps", None if "minutes" in given else recipe["steps"])
        run["minutes"] = given.get("minutes")
    run["beam"] = given.get("beam", saved.get("beam", recipe["beam"]))
    if run["steps"] is None and run["minutes"] is None:
        run["steps"] = recipe["steps"]

    for flag, key in (("--d-model", "d_model"), ("--heads", "heads"), ("--num-layers", "num_layers"),
                      ("--d-ff", "d_ff"), ("--batch-size", "batch_size"), ("--warmup", "warmup"), ("--beam", "beam"),
                      ("--steps", "steps"), ("--max-pairs", "max_pairs")):
        _positive_int(p, flag, run[key])
    check_common(args, p)
    if run["d_model"] % run["heads"]:
        p.error(f"--d-model {run['d_model']} must be divisible by --heads {run['heads']} (d_k = d_model / heads)")
    if run["max_len"] < 2:
        p.error(f"--max-len must be >= 2 (a token and </s>), got {run['max_len']}")
    if run["seed"] < 0:
        p.error(f"--seed must be >= 0, got {run['seed']}")
    _finite(p, "--dropout", run["dropout"], 0.0, 1.0)
    _finite(p, "--smoothing", run["smoothing"], 0.0, 1.0)
    _finite(p, "--peak-lr", run["peak_lr"], 0.0, low_open=True)
    _finite(p, "--clip", run["clip"], 0.0)
    _finite(p, "--minutes", run["minutes"], 0.0, low_open=True)
    if args.tsv is not None and not args.tsv.is_file():
        p.error(f"--tsv {args.tsv}: no such file")
    if args.task is not None and (args.tokenizer or args.lower or args.max_pairs):
        p.error("--tokenizer, --lower and --max-pairs are for --tsv files")
    refuse_foreign(args, p, LM_ONLY, "a language model (--task lm, --text)")
    return run


def check_device(value: str | None, p: argparse.ArgumentParser) -> torch.device | None:
    """The device asked for, if this machine has it (and, under torchrun, one GPU per process)."""
    from ..device import distributed_info, distributed_plan, parse_device

    if value is None:
        return None
    try:
        device = parse_device(value)
        info = distributed_info()
        if info.enabled:
            distributed_plan(device, info.local_rank, info.local_world_size,
                             torch.cuda.device_count() if device.type == "cuda" else 0, explicit=True)
    except ValueError as err:
        p.error(f"--device: {err}")
    return device


def check_out(out: Path, resume: Path | None, overwrite: bool, p: argparse.ArgumentParser,
              file_name: str = "model.pt") -> Path:
    """OUT/``file_name``, once sure it can be written and replaces no run unasked."""
    if inside_package(out):
        p.error(f"--out {out} is inside the tfm_lesson package, whose files are shipped: write elsewhere "
                "(e.g. runs/)")
    if out.exists() and not out.is_dir():
        p.error(f"--out {out} is a file; --out names a folder (the run is saved as {out}/{file_name})")
    target = out / file_name
    if target.is_dir():
        p.error(f"--out: {target} is a folder; the run is saved as the file {target}")
    if target.exists() and not overwrite:
        continuing = resume is not None and resume.resolve() in (target.resolve(), out.resolve())
        if not continuing:
            p.error(f"--out {out} already holds a run ({target}). Continue it with --resume {target}, choose "
                    "another --out, or replace it with --overwrite")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as err:
        p.error(f"--out {out}: cannot write there ({err.strerror or err})")
    return target


# ---------------------------------------------------------------------------------------------- the data
def load_data(run: dict, p: argparse.ArgumentParser, say):
    from ..data import dedupe_by_source, from_pairs, load_task, read_tsv

    if run["task"]:
        return load_task(run["task"], seed=run["seed"])
    path = Path(run["tsv"])
    try:
        pairs, skipped = read_tsv(path, max_pairs=run["max_pairs"], return_skipped=True, warn=False)
    except (ValueError, OSError) as err:
        p.error(f"--tsv {path}: {err}" if isinstance(err, OSError) else f"--tsv: {err}")
    if skipped:
        say(f"data: skipped {skipped} blank or malformed line(s) of {path}")
    distinct = len(dedupe_by_source(pairs))
    if distinct < 3:
        p.error(f"--tsv {path}: {distinct} distinct source sentence(s) in {len(pairs)} usable pair(s); need at "
                "least 3, one each for training, validation and test")
    held = max(1, min(1000, distinct // 20))  # 5% for valid and for test, at most 1000 each
    try:
        data = from_pairs(pairs, seed=run["seed"], valid=held, test=held, tokenizer=run["tokenizer"],
                          name=path.stem, lower=run["lower"], max_len=run["max_len"])
    except ValueError as err:
        p.error(f"--tsv {path}: {err}")
    if data.info["too_long"]:
        say(f"data: dropped {data.info['too_long']} pair(s) of {path} longer than --max-len {run['max_len']} "
            "positions")
    return data


def ranks_in_sync(model: torch.nn.Module) -> bool:
    """Under DistributedDataParallel: do all ranks hold the same weights? (True when not distributed.)"""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return True
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    low, high = flat.clone(), flat.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))


# ------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Other kinds of runs (tasks that are not translation) dispatch here, before the translation run below.
    if args.task == "lm" or args.text is not None or _resumes_an_lm(args.resume):  # a decoder-only language model
        return train_language_model(args, parser)
    return train_translation(args, parser)


def _resumes_an_lm(resume: Path | None) -> bool:
    """Does ``--resume`` name a language-model run (``lm.pt``, or a folder holding one)?"""
    if resume is None:
        return False
    from .lm import read_lm

    path = resume / "lm.pt" if resume.is_dir() and not (resume / "model.pt").exists() else resume
    try:
        read_lm(path)
    except (OSError, ValueError):
        return False
    return True


def train_translation(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .loop import distributed_info, evaluate, load_checkpoint, make_model, train, update_checkpoint_extra

    run = resolve(args, parser)
    device = check_device(args.device, parser)
    if args.out is not None:
        out = args.out
    elif args.resume is not None:
        out = args.resume if args.resume.is_dir() else args.resume.parent
    else:
        out = DEFAULT_OUT
    info = distributed_info()
    main_process = info.rank == 0
    path = check_out(out, args.resume, args.overwrite, parser) if main_process else out / "model.pt"

    def say(message: str) -> None:
        if main_process:
            print(message, flush=True)

    data = load_data(run, parser, say)
    say(f"data: {data!r}")
    if args.resume is not None:
        model = load_checkpoint(args.resume, device="cpu").model  # its config; train() loads the run's state
    else:
        torch.manual_seed(run["seed"])
        model = make_model(data.src_vocab, data.tgt_vocab, d_model=run["d_model"], heads=run["heads"],
                           num_layers=run["num_layers"], d_ff=run["d_ff"], dropout=run["dropout"],
                           max_len=run["max_len"])
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: d_model={run['d_model']} heads={run['heads']} num_layers={run['num_layers']} d_ff={run['d_ff']} "
        f"parameters={n_params}")
    limits = ([f"{run['steps']} steps"] if run["steps"] else []) + ([f"{run['minutes']:g} minutes"]
                                                                    if run["minutes"] else [])
    plan = " or ".join(limits)
    say(f"training: {plan}, batch {run['batch_size']}, warmup {run['warmup']}, peak lr {run['peak_lr']:g}; "
        f"saved to {path} every {args.save_every or SAVE_EVERY} steps")
    start = time.perf_counter()
    result = None
    save_every = args.save_every or SAVE_EVERY
    histories: list[dict] = []
    status = guarded(lambda: histories.append(train(
        model, data, steps=run["steps"], minutes=run["minutes"], batch_size=run["batch_size"], warmup=run["warmup"],
        peak_lr=run["peak_lr"], smoothing=run["smoothing"], clip=run["clip"] or None, device=device,
        eval_every=args.eval_every, eval_limit=args.eval_limit or EVAL_LIMIT, seed=run["seed"], amp=run["amp"],
        progress=not args.no_progress, log=lambda msg: print(msg, flush=True),
        threads=args.threads if args.threads is not None else "auto", checkpoint=path, save_every=save_every,
        resume=args.resume, checkpoint_extra={"task": data.name, "run": run})), parser, path, args.resume, say,
        main_process)
    if status == 0:
        history = histories[0]
        seconds = time.perf_counter() - start
        in_sync = ranks_in_sync(model)
        if main_process:
            test = data.test if data.test else data.valid
            test = test[: args.test_limit] if args.test_limit else test
            metrics = evaluate(model, test, data.src_vocab, data.tgt_vocab, beam_size=run["beam"])
            update_checkpoint_extra(path, test=metrics, test_pairs=len(test), beam=run["beam"])
            print(f"checkpoint: {path}", flush=True)
            result = {"task": data.name, "split": "test" if data.test else "valid", "pairs": len(test),
                      **{k: round(v, 2) for k, v in metrics.items()}, "steps": len(history["step"]),
                      "seconds": round(seconds, 1), "beam": run["beam"], "world_size": info.world_size,
                      "ranks_in_sync": in_sync, "device": str(next(model.parameters()).device),
                      "checkpoint": str(path)}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if status == 0:
            dist.barrier()
        dist.destroy_process_group()
    if result is not None:
        print(json.dumps(result), flush=True)
    return status


# ------------------------------------------------------------------------------------------ a language model
# The settings of a --task lm / --text run that a resumed run keeps (a different value on the command line is refused).
LM_RUN_KEYS = ("task", "text", "vocab_size", "max_len", "d_model", "heads", "num_layers", "d_ff", "dropout",
               "batch_size", "peak_lr", "warmup", "clip", "seed")
LM_OUT = Path("runs/lm")


def resolve_lm(args: argparse.Namespace, p: argparse.ArgumentParser) -> dict:
    """A language-model run's settings: command line > the resumed run's > the recipe. Usage errors exit 2."""
    refuse_foreign(args, p, TRANSLATION_ONLY, "translation runs (--task copy|reverse|sort|numbers|sentences, --tsv)")
    check_common(args, p)
    from .lm import read_lm

    given = {k: v for k, v in vars(args).items() if v is not None}
    saved = resumed_run(args, p, read_lm, "lm.pt", LM_RUN_KEYS, path_keys=("text",)) if args.resume else {}
    recipe = RECIPES["lm"]
    run = {"task": "lm", "text": saved.get("text", str(args.text.resolve()) if args.text else None)}
    for key in LM_RUN_KEYS[2:]:
        run[key] = saved[key] if key in saved else given.get(key, recipe.get(key, LM_FALLBACKS.get(key)))
    if args.resume is not None:
        if "steps" in given and saved.get("steps") is not None and given["steps"] != saved["steps"]:
            p.error(f"--steps {given['steps']} differs from the run being resumed ({saved['steps']}): a language "
                    "model's learning rate (warm-up, then cosine decay) is laid out over its --steps, so a resumed "
                    "run keeps them")
        run["steps"], run["minutes"] = saved.get("steps"), given.get("minutes", saved.get("minutes"))
    else:
        run["steps"] = given.get("steps", None if "minutes" in given else recipe["steps"])
        run["minutes"] = given.get("minutes")
    if run["vocab_size"] < 256:
        p.error(f"--vocab-size must be at least 256 (the byte alphabet), got {run['vocab_size']}")
    if run["max_len"] < 2:
        p.error(f"--max-len must be >= 2 (a window of inputs and next tokens), got {run['max_len']}")
    for flag, key in (("--d-model", "d_model"), ("--heads", "heads"), ("--num-layers", "num_layers"),
                      ("--d-ff", "d_ff"), ("--batch-size", "batch_size")):
        _positive_int(p, flag, run[key])
    if run["d_model"] % run["heads"]:
        p.error(f"--d-model {run['d_model']} must be divisible by --heads {run['heads']}")
    if run["warmup"] is not None and run["warmup"] < 0:
        p.error(f"--warmup must be >= 0, got {run['warmup']}")
    if run["seed"] < 0:
        p.error(f"--seed must be >= 0, got {run['seed']}")
    _finite(p, "--dropout", run["dropout"], 0.0, 1.0)
    _finite(p, "--peak-lr", run["peak_lr"], 0.0, low_open=True)
    _finite(p, "--clip", run["clip"], 0.0)
    return run


def train_language_model(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--task lm`` / ``--text FILE`` / ``--resume OUT/lm.pt``: train a GPT under the same contract as a
    translation run, print samples and held-out perplexity; the last line of stdout is a JSON summary."""
    from ..data.corpus import load_corpus
    from ..gpt import GPT, GPTConfig
    from .lm import (complete, load_lm, perplexity, prepare_lm_data, train_lm, unigram_perplexity,
                     update_lm_extra)

    run = resolve_lm(args, parser)
    device = check_device(args.device, parser) or _default_device()
    out = args.out or (args.resume.parent if args.resume is not None else LM_OUT)
    path = check_out(out, args.resume, args.overwrite, parser, "lm.pt")
    try:
        corpus = load_corpus(path=Path(run["text"]) if run["text"] else None)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(f"--text: {exc}")
    saved = load_lm(args.resume, device="cpu") if args.resume is not None else None
    torch.manual_seed(run["seed"])
    data = prepare_lm_data(corpus, vocab_size=run["vocab_size"], tokenizer=saved.tokenizer if saved else None)
    print(f"corpus: {corpus!r}", flush=True)
    print(f"tokens: {data!r}", flush=True)
    max_len = run["max_len"]
    if data.train.numel() < max_len + 1 or data.valid.numel() < max_len + 1:
        parser.error(f"the text is too short for --max-len {max_len}: {data.train.numel()} training and "
                     f"{data.valid.numel()} validation tokens; give more text or a smaller --max-len")
    model = saved.model if saved else GPT(GPTConfig(
        vocab_size=data.vocab_size, max_len=max_len, d_model=run["d_model"], heads=run["heads"], d_ff=run["d_ff"],
        num_layers=run["num_layers"], dropout=run["dropout"]))
    print(f"model: d_model={run['d_model']} heads={run['heads']} num_layers={run['num_layers']} d_ff={run['d_ff']} "
          f"max_len={max_len} parameters={sum(p.numel() for p in model.parameters())}", flush=True)
    steps, save_every = run["steps"], args.save_every or SAVE_EVERY
    # --warmup counts steps; train_lm takes the fraction of the run (5% unless told)
    warmup = 0.05 if run["warmup"] is None or not steps else min(0.5, run["warmup"] / steps)
    plan = " or ".join(([f"{steps} steps"] if steps else []) + ([f"{run['minutes']:g} minutes"] if run["minutes"]
                                                                else []))
    print(f"training: {plan}, batch {run['batch_size']}, peak lr {run['peak_lr']:g}; saved to {path} every "
          f"{save_every} steps", flush=True)
    model.to(device)
    sample = dict(max_new_tokens=min(30, max_len - 1), seed=run["seed"])
    before = complete(model, data.tokenizer, "", temperature=1.0, **sample) if saved is None else None
    quiet = args.no_progress
    if saved is not None and quiet:  # (train_lm says it itself when it logs)
        print(f"resumed at step {saved.extra.get('steps')} from {args.resume}", flush=True)
    histories: list[dict] = []
    status = guarded(lambda: histories.append(train_lm(
        model, data, steps=steps, minutes=run["minutes"], batch_size=run["batch_size"], lr=run["peak_lr"],
        warmup=warmup, clip=run["clip"] or None, eval_every=args.eval_every or 100, device=device, seed=run["seed"],
        threads=args.threads if args.threads is not None else "auto",
        log=None if quiet else (lambda m: print(m, flush=True)), checkpoint=path, save_every=save_every,
        resume=args.resume, checkpoint_extra={"corpus": corpus.name, "run": run})), parser, path, args.resume,
        lambda m: print(m, flush=True))
    if status:
        return status
    history = histories[0]
    valid_ppl = perplexity(model, data.valid)
    baseline = unigram_perplexity(data.train, data.valid, data.vocab_size)
    after = complete(model, data.tokenizer, "", temperature=0.8, top_k=20, **sample)
    if before is not None:
        print(f"sample at step 0: {before!r}", flush=True)
    print(f"sample after training: {after!r}", flush=True)
    update_lm_extra(path, valid_perplexity=valid_ppl, unigram_perplexity=baseline)
    print(f"checkpoint: {path}", flush=True)
    print(json.dumps({"task": "lm", "corpus": corpus.name, "train_tokens": data.train.numel(),
                      "valid_tokens": data.valid.numel(), "vocab_size": data.vocab_size,
                      "valid_perplexity": round(valid_ppl, 3), "unigram_perplexity": round(baseline, 3),
                      "steps": len(history["step"]), "seconds": round(history["seconds"][-1], 1),
                      "device": str(device), "checkpoint": str(path)}), flush=True)
    return 0


def _default_device() -> torch.device:
    from ..device import default_device

    return default_device()


if __name__ == "__main__":
    sys.exit(main())
