"""What both trainers' command lines check before anything trains, and how they end.

Before: each flag's range (:func:`flag_positive_int`, :func:`flag_finite`, :func:`check_common`), flags the other
kind of run reads (:func:`refuse_foreign`), the run ``--resume`` names (:func:`resumed_run`), ``--device``
(:func:`check_device`) and ``--out`` (:func:`check_out`); a wrong one is a usage error (exit status 2).
After: :func:`guarded` turns the run contract's stops into exit statuses (130, 143, 3).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Callable, Sequence

import torch

from .._io import cannot_write_in, inside_package


# ------------------------------------------------------------------------------------------ checking flags
def flag_positive_int(p: argparse.ArgumentParser, flag: str, value) -> None:
    """A usage error unless ``value`` (the setting of ``flag``) is None or >= 1."""
    if value is not None and value < 1:
        p.error(f"{flag} must be >= 1, got {value}")


def flag_finite(p: argparse.ArgumentParser, flag: str, value, low: float, high: float | None = None,
                low_open: bool = False) -> None:
    """A usage error unless ``value`` is None or a finite number in [low, high) ((low, high) with ``low_open``)."""
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
        flag_positive_int(p, flag, getattr(args, key, None))
    flag_finite(p, "--minutes", getattr(args, "minutes", None), 0.0, low_open=True)


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
    why = cannot_write_in(out)
    if why:
        p.error(f"--out {out}: cannot write there ({why})")
    return target


# ------------------------------------------------------------------------------------------ how a run ends
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
