"""``python -m tfm_lesson.course``: see :func:`tfm_lesson.course.main`."""
import sys

from . import main

sys.exit(main())
