"""Sample text from a language model trained with ``python -m tfm_lesson.train --task lm`` (or ``--text``).

    python -m tfm_lesson.generate runs/lm/lm.pt "The small cat" --max-new-tokens 40 --temperature 0.8 --top-k 20
    python -m tfm_lesson.generate runs/lm/lm.pt "" --temperature 0        # greedy, from a fresh line

Prints the prompt followed by what the model writes (``--samples N``: N samples, separated by a line of
dashes). ``--temperature 0`` is greedy; ``--top-k K`` keeps the K most probable tokens, ``--top-p P`` the
most probable tokens whose probabilities add up to P. Bad arguments end with a usage message and exit
status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="OUT/lm.pt written by python -m tfm_lesson.train --task lm")
    p.add_argument("prompt", nargs="?", default="", help="the text to continue (default: a fresh line)")
    p.add_argument("--max-new-tokens", type=int, default=60, help="tokens to add (default 60)")
    p.add_argument("--temperature", type=float, default=1.0, help=">= 0; 0 is greedy (default 1.0)")
    p.add_argument("--top-k", type=int, default=None, help="keep the K most probable tokens (K >= 1)")
    p.add_argument("--top-p", type=float, default=None, help="keep the most probable tokens up to mass P, 0 < P <= 1")
    p.add_argument("--samples", type=int, default=1, help="how many samples (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole prefix at every step")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when present)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not args.temperature >= 0 or args.temperature == float("inf"):
        parser.error(f"--temperature must be a finite number >= 0 (0 = greedy), got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        parser.error(f"--top-k must be >= 1, got {args.top_k}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        parser.error(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    if not args.checkpoint.is_file():
        parser.error(f"no checkpoint at {args.checkpoint} (train one with python -m tfm_lesson.train --task lm)")

    if args.device is not None:
        import torch

        try:
            torch.empty(0, device=args.device)
        except (RuntimeError, AssertionError, ValueError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            parser.error(f"--device {args.device} is not available here ({why}); "
                         "use --device cpu, or leave it out to take a GPU when there is one")

    from .lm import complete, load_lm

    try:
        model, tokenizer, _ = load_lm(args.checkpoint, device=args.device)
    except (ValueError, RuntimeError) as exc:
        parser.error(str(exc))
    try:
        prompt_len = len(tokenizer.encode(args.prompt or "\n"))
    except ValueError as exc:
        parser.error(f"prompt: {exc}")
    max_len = model.config.max_len
    if prompt_len >= max_len:
        parser.error(f"the prompt is {prompt_len} tokens but the model sees at most {max_len} positions (prompt and "
                     f"new tokens together): shorten the prompt to at most {max_len - 1} tokens")
    if prompt_len + args.max_new_tokens > max_len:
        parser.error(f"the prompt is {prompt_len} tokens; with --max-new-tokens {args.max_new_tokens} that is "
                     f"{prompt_len + args.max_new_tokens}, more than the model's context of max_len={max_len}: "
                     f"shorten the prompt or ask for at most {max(0, max_len - prompt_len)} new tokens")
    for i in range(args.samples):
        if i:
            print("-" * 40)
        text = complete(model, tokenizer, args.prompt, args.max_new_tokens, temperature=args.temperature,
                        top_k=args.top_k, top_p=args.top_p, seed=args.seed + i, use_cache=not args.no_cache)
        print(args.prompt + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
