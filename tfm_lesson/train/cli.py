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
import sys

from .cli_checks import (LM_ONLY, TRANSLATION_ONLY, check_common, check_device, check_out, guarded, refuse_foreign,
                         resumed_run)
from .cli_flags import DEFAULT_OUT, EVAL_LIMIT, LM_FALLBACKS, RECIPE_KEYS, RECIPES, SAVE_EVERY, TASKS, make_parser
from .cli_lm import LM_OUT, LM_RUN_KEYS, resolve_lm, resumes_an_lm, train_language_model
from .cli_translation import RUN_KEYS, load_data, ranks_in_sync, resolve, train_translation

# The command line in parts: its flags (cli_flags), the checks both kinds of run make and their exit statuses
# (cli_checks), a translation run (cli_translation), a language-model run (cli_lm). Their names stay importable here.
__all__ = ["main", "build_parser", "resolve", "resolve_lm", "train_translation", "train_language_model", "TASKS",
           "RECIPES", "RECIPE_KEYS", "RUN_KEYS", "LM_RUN_KEYS", "LM_FALLBACKS", "LM_ONLY", "TRANSLATION_ONLY",
           "DEFAULT_OUT", "LM_OUT", "SAVE_EVERY", "EVAL_LIMIT", "refuse_foreign", "check_common", "resumed_run",
           "guarded", "check_device", "check_out", "load_data", "ranks_in_sync"]


def build_parser() -> argparse.ArgumentParser:
    """Both trainers' flags; ``--help`` shows this module's text and the recipes' table."""
    return make_parser(__doc__)


def main(argv: list[str] | None = None) -> int:
    """Train what the flags ask for; the exit status: 0 done, 2 a usage error, 3 the loss diverged, 130 / 143
    stopped by Ctrl-C / SIGTERM (the run saved)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # Other kinds of runs (tasks that are not translation) dispatch here, before the translation run below.
    if args.task == "lm" or args.text is not None or resumes_an_lm(args.resume):  # a decoder-only language model
        return train_language_model(args, parser)
    return train_translation(args, parser)


if __name__ == "__main__":
    sys.exit(main())
