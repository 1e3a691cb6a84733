"""Explorers: drag a slider, type a sentence, and watch attention change (ipywidgets 7.7 and 8).

Each function returns an :class:`Explorer`, an ``ipywidgets.VBox`` of controls above a picture. Every
picture is a :mod:`tfm_lesson.look.viz` figure rendered to PNG into an ``ipywidgets.Image``: no matplotlib
widget backend, no JavaScript beyond ipywidgets' own, no CDN.

Where no widget frontend runs (nbval, the book, GitHub, a notebook opened without its kernel) the
explorer shows a static PNG of its state when it was displayed (its default state): its mimebundle holds
``image/png`` and ``text/plain`` next to the widget view. A frontend that knows widgets picks the live
view; JupyterLab 4 / Notebook 7 with ipywidgets 8 fall back to the PNG when the widget model is gone.

The book shows the PNG too (``book/_config.yml``; ``tools/book.py`` builds it). JupyterLab 4 with
jupyterlab_widgets 3 does *not* fall back by itself: a stored widget view whose model is gone shows an empty
output, never the PNG, so chapters are stored without their widget views
(:func:`tfm_lesson.course.strip_widget_views`, run by ``python -m tfm_lesson.course execute``).

One module per chapter topic, each built on ``explorer`` (the :class:`Explorer` and the helpers they share):
``weights`` (01 scale, 02 masks), ``heads`` (03 one head, 17 a head's scores), ``positions`` (04),
``budget`` (06), ``transformer`` (07, 08, 12: every map of a Transformer), ``translation`` (11),
``next_token`` (14: sampling). The waits (``BUILD_WAIT``, ``SHOW_WAIT``) are read in ``explorer``: set them there.
"""
from __future__ import annotations

from .._widget_display import WIDGET_VIEW
from .budget import budget_explorer
from .explorer import TEXT_LIMIT, Explorer
from .heads import head_explorer, head_scores_explorer
from .next_token import sampling_widget
from .positions import positional_explorer
from .transformer import attention_explorer
from .translation import translate_widget
from .weights import mask_explorer, temperature_explorer

__all__ = [
    "Explorer", "temperature_explorer", "mask_explorer", "head_explorer", "positional_explorer",
    "attention_explorer", "translate_widget", "sampling_widget", "WIDGET_VIEW",
    "budget_explorer", "head_scores_explorer", "TEXT_LIMIT",
]
