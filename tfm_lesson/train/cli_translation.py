"""A translation run of ``python -m tfm_lesson.train`` (``--task copy|reverse|sort|numbers|sentences``, ``--tsv``):
its settings (:func:`resolve`), its data (:func:`load_data`), then the training under the run contract and the
test split's metrics, whose JSON is the last line of stdout (:func:`train_translation`).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from .cli_checks import (LM_ONLY, check_common, check_device, check_out, flag_finite, flag_positive_int, guarded,
                         refuse_foreign, resumed_run)
from .cli_flags import DEFAULT_OUT, EVAL_LIMIT, RECIPES, SAVE_EVERY

if TYPE_CHECKING:
    from ..data import ParallelData

# What defines a run: a resumed run keeps these (a different value on the command line is refused).
RUN_KEYS = ("task", "tsv", "tokenizer", "lower", "max_pairs", "max_len", "seed", "d_model", "heads",
            "num_layers", "d_ff", "dropout", "batch_size", "warmup", "peak_lr", "smoothing", "clip", "amp")


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
        flag_positive_int(p, flag, run[key])
    check_common(args, p)
    if run["d_model"] % run["heads"]:
        p.error(f"--d-model {run['d_model']} must be divisible by --heads {run['heads']} (d_k = d_model / heads)")
    if run["max_len"] < 2:
        p.error(f"--max-len must be >= 2 (a token and </s>), got {run['max_len']}")
    if run["seed"] < 0:
        p.error(f"--seed must be >= 0, got {run['seed']}")
    flag_finite(p, "--dropout", run["dropout"], 0.0, 1.0)
    flag_finite(p, "--smoothing", run["smoothing"], 0.0, 1.0)
    flag_finite(p, "--peak-lr", run["peak_lr"], 0.0, low_open=True)
    flag_finite(p, "--clip", run["clip"], 0.0)
    flag_finite(p, "--minutes", run["minutes"], 0.0, low_open=True)
    if args.tsv is not None and not args.tsv.is_file():
        p.error(f"--tsv {args.tsv}: no such file")
    if args.task is not None and (args.tokenizer or args.lower or args.max_pairs):
        p.error("--tokenizer, --lower and --max-pairs are for --tsv files")
    refuse_foreign(args, p, LM_ONLY, "a language model (--task lm, --text)")
    return run


def load_data(run: dict, p: argparse.ArgumentParser, say: Callable[[str], None]) -> ParallelData:
    """The run's pairs: its task's, or its ``--tsv`` file's with 5% (at most 1000) held out for validation and as
    many for test. A file that cannot give them is a usage error."""
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


def _out_folder(args: argparse.Namespace) -> Path:
    """--out, else the folder of the run being resumed, else runs/model."""
    if args.out is not None:
        return args.out
    if args.resume is not None:
        return args.resume if args.resume.is_dir() else args.resume.parent
    return DEFAULT_OUT


def _model(args: argparse.Namespace, run: dict, data: ParallelData) -> torch.nn.Module:
    """The resumed run's model (its configuration; training loads its state), or a new one of the run's size."""
    from .loop import load_checkpoint, make_model

    if args.resume is not None:
        return load_checkpoint(args.resume, device="cpu").model
    torch.manual_seed(run["seed"])
    return make_model(data.src_vocab, data.tgt_vocab, d_model=run["d_model"], heads=run["heads"],
                      num_layers=run["num_layers"], d_ff=run["d_ff"], dropout=run["dropout"], max_len=run["max_len"])


def _say_plan(say: Callable[[str], None], run: dict, model: torch.nn.Module, path: Path, save_every: int) -> None:
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: d_model={run['d_model']} heads={run['heads']} num_layers={run['num_layers']} d_ff={run['d_ff']} "
        f"parameters={n_params}")
    limits = ([f"{run['steps']} steps"] if run["steps"] else []) + ([f"{run['minutes']:g} minutes"]
                                                                    if run["minutes"] else [])
    plan = " or ".join(limits)
    say(f"training: {plan}, batch {run['batch_size']}, warmup {run['warmup']}, peak lr {run['peak_lr']:g}; "
        f"saved to {path} every {save_every} steps")


def _test_result(model: torch.nn.Module, data: ParallelData, run: dict, args: argparse.Namespace, path: Path,
                 history: dict, seconds: float, world_size: int, in_sync: bool) -> dict:
    """Score the test split (the valid one when there is none), store the metrics in the checkpoint: the summary."""
    from .loop import evaluate, update_checkpoint_extra

    test = data.test if data.test else data.valid
    test = test[: args.test_limit] if args.test_limit else test
    metrics = evaluate(model, test, data.src_vocab, data.tgt_vocab, beam_size=run["beam"])
    update_checkpoint_extra(path, test=metrics, test_pairs=len(test), beam=run["beam"])
    print(f"checkpoint: {path}", flush=True)
    return {"task": data.name, "split": "test" if data.test else "valid", "pairs": len(test),
            **{k: round(v, 2) for k, v in metrics.items()}, "steps": len(history["step"]),
            "seconds": round(seconds, 1), "beam": run["beam"], "world_size": world_size,
            "ranks_in_sync": in_sync, "device": str(next(model.parameters()).device),
            "checkpoint": str(path)}


def _end_distributed(status: int) -> None:
    """Under torchrun: wait for every rank when the run finished, then leave the process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if status == 0:
            dist.barrier()
        dist.destroy_process_group()


def train_translation(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--task X`` / ``--tsv FILE`` / ``--resume OUT/model.pt``: train an encoder-decoder Transformer under the run
    contract (:func:`~tfm_lesson.train.cli_checks.guarded`), then print the test split's metrics as JSON."""
    from .loop import distributed_info, train

    run = resolve(args, parser)
    device = check_device(args.device, parser)
    out = _out_folder(args)
    info = distributed_info()
    main_process = info.rank == 0
    path = check_out(out, args.resume, args.overwrite, parser) if main_process else out / "model.pt"

    def say(message: str) -> None:
        if main_process:
            print(message, flush=True)

    data = load_data(run, parser, say)
    say(f"data: {data!r}")
    model = _model(args, run, data)
    save_every = args.save_every or SAVE_EVERY
    _say_plan(say, run, model, path, save_every)
    start = time.perf_counter()
    result = None
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
        seconds = time.perf_counter() - start
        in_sync = ranks_in_sync(model)
        if main_process:
            result = _test_result(model, data, run, args, path, histories[0], seconds, info.world_size, in_sync)
    _end_distributed(status)
    if result is not None:
        print(json.dumps(result), flush=True)
    return status
