"""``python -m tfm_lesson.data``: regenerate the shipped sentence pairs (``sentences.tsv.gz``)."""
from __future__ import annotations

import time

from .sentences import SHIPPED_SIZE, write_shipped

start = time.perf_counter()
out = write_shipped()
took = time.perf_counter() - start
print(f"wrote {SHIPPED_SIZE} pairs to {out} ({out.stat().st_size / 1e6:.2f} MB) in {took:.1f} s "
      f"({SHIPPED_SIZE / took:.0f} pairs/s)")
