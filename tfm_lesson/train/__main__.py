"""``python -m tfm_lesson.train``: see :mod:`tfm_lesson.train.cli`."""
import sys

from .cli import main

sys.exit(main())
