"""The ablation runner moved out of this package of building blocks: ``python -m tfm_lesson.train.ablation``."""
import sys

print("the ablation moved: run python -m tfm_lesson.train.ablation (see python -m tfm_lesson.train.ablation --help)",
      file=sys.stderr)
sys.exit(2)
