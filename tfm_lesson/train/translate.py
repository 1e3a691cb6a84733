"""Translate with a checkpoint saved by ``python -m tfm_lesson.train``.

    python -m tfm_lesson.train.translate runs/model/model.pt "three black cats" --beam 4
    echo "twenty-one" | python -m tfm_lesson.train.translate runs/model/model.pt -      # one sentence per line
"""
from __future__ import annotations

import argparse
import math
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.train.translate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="model.pt written by tfm_lesson.train")
    p.add_argument("text", nargs="+", help="sentences to translate, or - to read them from stdin")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty of beam search")
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    if args.beam < 1:
        p.error(f"--beam must be >= 1 (1 = greedy), got {args.beam}")
    if not (math.isfinite(args.alpha) and args.alpha >= 0):
        p.error(f"--alpha must be a finite number >= 0, got {args.alpha}")
    from ..decoding import translate
    from .checkpoint import load_checkpoint
    from ..device import parse_device

    try:
        device = parse_device(args.device) if args.device is not None else None
    except ValueError as err:
        p.error(f"--device: {err}")
    try:
        model, src_vocab, tgt_vocab, _ = load_checkpoint(args.checkpoint, device)
    except (OSError, ValueError) as err:
        p.error(f"checkpoint: {err}")
    texts = [line.strip() for line in sys.stdin if line.strip()] if args.text == ["-"] else args.text
    if not texts:
        return 0
    for out in translate(model, texts, src_vocab, tgt_vocab, beam_size=args.beam, length_penalty_alpha=args.alpha):
        print(out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
