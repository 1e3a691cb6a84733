"""A language-model run of ``python -m tfm_lesson.train`` (``--task lm``, ``--text FILE``, ``--resume OUT/lm.pt``):
its settings (:func:`resolve_lm`), then a GPT trained under the same run contract as a translation run, samples
before and after, and held-out perplexity, whose JSON is the last line of stdout (:func:`train_language_model`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .cli_checks import (TRANSLATION_ONLY, check_common, check_device, check_out, flag_finite, flag_positive_int,
                         guarded, refuse_foreign, resumed_run)
from .cli_flags import LM_FALLBACKS, RECIPES, SAVE_EVERY

if TYPE_CHECKING:
    from ..data.corpus import Corpus
    from ..gpt import GPT
    from .lm import LMCheckpoint, LMData

# The settings of a --task lm / --text run that a resumed run keeps (a different value on the command line is refused).
LM_RUN_KEYS = ("task", "text", "vocab_size", "max_len", "d_model", "heads", "num_layers", "d_ff", "dropout",
               "batch_size", "peak_lr", "warmup", "clip", "seed")
LM_OUT = Path("runs/lm")


def resumes_an_lm(resume: Path | None) -> bool:
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
        flag_positive_int(p, flag, run[key])
    if run["d_model"] % run["heads"]:
        p.error(f"--d-model {run['d_model']} must be divisible by --heads {run['heads']}")
    if run["warmup"] is not None and run["warmup"] < 0:
        p.error(f"--warmup must be >= 0, got {run['warmup']}")
    if run["seed"] < 0:
        p.error(f"--seed must be >= 0, got {run['seed']}")
    flag_finite(p, "--dropout", run["dropout"], 0.0, 1.0)
    flag_finite(p, "--peak-lr", run["peak_lr"], 0.0, low_open=True)
    flag_finite(p, "--clip", run["clip"], 0.0)
    return run


def _lm_data(run: dict, resume: Path | None,
             parser: argparse.ArgumentParser) -> tuple[Corpus, LMCheckpoint | None, LMData]:
    """The text (a usage error when it cannot be read, or is too short for ``--max-len``), the run being resumed
    if any, and the text as tokens (with the resumed run's tokenizer, else one trained here)."""
    from ..data.corpus import load_corpus
    from .lm import load_lm, prepare_lm_data

    try:
        corpus = load_corpus(path=Path(run["text"]) if run["text"] else None)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(f"--text: {exc}")
    saved = load_lm(resume, device="cpu") if resume is not None else None
    torch.manual_seed(run["seed"])
    data = prepare_lm_data(corpus, vocab_size=run["vocab_size"], tokenizer=saved.tokenizer if saved else None)
    print(f"corpus: {corpus!r}", flush=True)
    print(f"tokens: {data!r}", flush=True)
    max_len = run["max_len"]
    if data.train.numel() < max_len + 1 or data.valid.numel() < max_len + 1:
        parser.error(f"the text is too short for --max-len {max_len}: {data.train.numel()} training and "
                     f"{data.valid.numel()} validation tokens; give more text or a smaller --max-len")
    return corpus, saved, data


def _summary(model: GPT, data: LMData, corpus: Corpus, path: Path, device: torch.device, history: dict,
             before: str | None, sample: dict) -> dict:
    """After training: held-out perplexity beside the unigram baseline (stored in the checkpoint) and the samples
    before and after, printed; returns the JSON summary."""
    from .lm import complete, perplexity, unigram_perplexity, update_lm_extra

    valid_ppl = perplexity(model, data.valid)
    baseline = unigram_perplexity(data.train, data.valid, data.vocab_size)
    after = complete(model, data.tokenizer, "", temperature=0.8, top_k=20, **sample)
    if before is not None:
        print(f"sample at step 0: {before!r}", flush=True)
    print(f"sample after training: {after!r}", flush=True)
    update_lm_extra(path, valid_perplexity=valid_ppl, unigram_perplexity=baseline)
    print(f"checkpoint: {path}", flush=True)
    return {"task": "lm", "corpus": corpus.name, "train_tokens": data.train.numel(),
            "valid_tokens": data.valid.numel(), "vocab_size": data.vocab_size,
            "valid_perplexity": round(valid_ppl, 3), "unigram_perplexity": round(baseline, 3),
            "steps": len(history["step"]), "seconds": round(history["seconds"][-1], 1),
            "device": str(device), "checkpoint": str(path)}


def train_language_model(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--task lm`` / ``--text FILE`` / ``--resume OUT/lm.pt``: train a GPT under the same contract as a
    translation run, print samples and held-out perplexity; the last line of stdout is a JSON summary."""
    from ..gpt import GPT, GPTConfig
    from .lm import complete, train_lm

    run = resolve_lm(args, parser)
    device = check_device(args.device, parser) or _default_device()
    out = args.out or (args.resume.parent if args.resume is not None else LM_OUT)
    path = check_out(out, args.resume, args.overwrite, parser, "lm.pt")
    corpus, saved, data = _lm_data(run, args.resume, parser)
    max_len = run["max_len"]
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
    print(json.dumps(_summary(model, data, corpus, path, device, histories[0], before, sample)), flush=True)
    return 0


def _default_device() -> torch.device:
    from ..device import default_device

    return default_device()
