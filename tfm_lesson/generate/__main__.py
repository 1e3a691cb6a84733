"""``python -m tfm_lesson.generate``: see :mod:`tfm_lesson.generate.sample_text`."""
import sys

from .sample_text import main

sys.exit(main())
