"""Train a Transformer from the command line, print held-out metrics as one JSON line.

    python -m tfm_lesson.train --task reverse --steps 800
    python -m tfm_lesson.train --tsv fra.txt --minutes 20 --d-model 256 --layers 3 --out runs/fra
    torchrun --nproc_per_node=2 -m tfm_lesson.train --task copy --steps 100     # DistributedDataParallel

Progress goes to stderr (a tqdm bar) and evaluation lines to stdout; the LAST line of stdout is the JSON
of the test split's metrics: ``exact_match``, ``bleu``, ``chrf`` (%), ``steps``, ``seconds``, ...
The checkpoint is ``OUT/model.pt``; translate with ``python -m tfm_lesson.translate OUT/model.pt "text"``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", choices=("copy", "reverse", "sort", "numbers", "sentences"), help="a built-in task")
    src.add_argument("--tsv", type=Path, help="a source<TAB>target file (Tatoeba/Anki format)")
    p.add_argument("--tokenizer", choices=("words", "chars"), default="words", help="for --tsv (default: words)")
    p.add_argument("--lower", action="store_true", help="lower-case the --tsv text")
    p.add_argument("--max-pairs", type=int, default=None, help="read at most this many --tsv pairs")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers (each)")
    p.add_argument("--d-ff", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=64, help="per process under torchrun")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps (default 1000 unless --minutes)")
    p.add_argument("--minutes", type=float, default=None, help="wall-clock limit")
    p.add_argument("--warmup", type=int, default=400)
    p.add_argument("--peak-lr", type=float, default=None, help="the rate at the end of warm-up "
                   "(default: the paper's formula)")
    p.add_argument("--smoothing", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--eval-limit", type=int, default=200, help="valid pairs decoded at each evaluation")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice; "
                   "1 is often fastest for small models on a busy machine)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when present)")
    p.add_argument("--out", type=Path, default=Path("runs/model"), help="directory for model.pt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--beam", type=int, default=1, help="beam size for the test metrics (1 = greedy)")
    p.add_argument("--test-limit", type=int, default=None, help="score only this many test pairs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def load_data(args: argparse.Namespace):
    from .data import from_pairs, load_task, read_tsv

    if args.task:
        return load_task(args.task, seed=args.seed)
    if not args.tsv.is_file():
        raise SystemExit(f"--tsv: no such file: {args.tsv}")
    pairs = read_tsv(args.tsv, max_pairs=args.max_pairs)
    if len(pairs) < 3:
        raise SystemExit(f"--tsv: {args.tsv} holds {len(pairs)} usable pairs; need at least 3")
    n = len(pairs)
    held = max(1, min(1000, n // 20))  # 5% for valid and for test, at most 1000 each
    return from_pairs(pairs, seed=args.seed, valid=held, test=held, tokenizer=args.tokenizer,
                      name=args.tsv.stem, lower=args.lower)


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .training import distributed_info, evaluate, make_model, save_checkpoint, train

    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    steps = args.steps if args.steps is not None or args.minutes is not None else 1000
    rank = distributed_info().rank
    main_process = rank == 0
    data = load_data(args)
    if main_process:
        print(f"data: {data!r}", flush=True)
    torch.manual_seed(args.seed)
    model = make_model(data.src_vocab, data.tgt_vocab, d_model=args.d_model, heads=args.heads, layers=args.layers,
                       d_ff=args.d_ff, dropout=args.dropout)
    if main_process:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"model: d_model={args.d_model} heads={args.heads} layers={args.layers} d_ff={args.d_ff} "
              f"parameters={n_params}", flush=True)
    start = time.perf_counter()
    history = train(model, data, steps=steps, minutes=args.minutes, batch_size=args.batch_size, warmup=args.warmup,
                    peak_lr=args.peak_lr, smoothing=args.smoothing, device=args.device, eval_every=args.eval_every,
                    eval_limit=args.eval_limit, seed=args.seed, progress=not args.no_progress,
                    log=lambda msg: print(msg, flush=True))
    seconds = time.perf_counter() - start
    in_sync = ranks_in_sync(model)
    result = None
    if main_process:
        test = data.test if data.test else data.valid
        test = test[: args.test_limit] if args.test_limit else test
        metrics = evaluate(model, test, data.src_vocab, data.tgt_vocab, beam_size=args.beam)
        path = args.out / "model.pt"
        save_checkpoint(path, model, data.src_vocab, data.tgt_vocab,
                        extra={"task": data.name, "steps": len(history["step"]), "seconds": seconds,
                               "test": metrics, "args": {k: str(v) for k, v in vars(args).items()}})
        print(f"checkpoint: {path}", flush=True)
        result = {"task": data.name, "split": "test" if data.test else "valid", "pairs": len(test),
                  **{k: round(v, 2) for k, v in metrics.items()}, "steps": len(history["step"]),
                  "seconds": round(seconds, 1), "beam": args.beam,
                  "world_size": distributed_info().world_size, "ranks_in_sync": in_sync, "device": str(next(model.parameters()).device),
                  "checkpoint": str(path)}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    if result is not None:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
