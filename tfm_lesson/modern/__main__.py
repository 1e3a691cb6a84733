"""``python -m tfm_lesson.modern ablation``: rerun chapter 16's precomputed ablation."""
import sys

from .ablation import main

sys.exit(main())
