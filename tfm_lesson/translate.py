"""Translate with a checkpoint saved by ``python -m tfm_lesson.train``.

    python -m tfm_lesson.translate runs/model/model.pt "three black cats" --beam 4
    echo "twenty-one" | python -m tfm_lesson.translate runs/model/model.pt -      # one sentence per line
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfm_lesson.translate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="model.pt written by tfm_lesson.train")
    p.add_argument("text", nargs="+", help="sentences to translate, or - to read them from stdin")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty of beam search")
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    from .decoding import translate
    from .training import load_checkpoint

    model, src_vocab, tgt_vocab, _ = load_checkpoint(args.checkpoint, args.device)
    texts = [line.strip() for line in sys.stdin if line.strip()] if args.text == ["-"] else args.text
    for out in translate(model, texts, src_vocab, tgt_vocab, beam_size=args.beam, length_penalty_alpha=args.alpha):
        print(out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
