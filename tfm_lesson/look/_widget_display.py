"""A widget's display data on ipywidgets 7 (Colab's) and 8: one bundle, the same on both.

ipywidgets 8 widgets display through ``_repr_mimebundle_``; ipywidgets 7 widgets have no such method and
display through ``_ipython_display_``, which IPython prefers over ``_repr_mimebundle_`` when both exist. An
object that adds a static picture to a widget's view (:class:`tfm_lesson.look.widgets.Explorer`,
:class:`tfm_lesson.course.quiz.Quiz`) builds its bundle with :func:`widget_bundle`, and a widget subclass sets
``_ipython_display_ = None`` so that IPython uses its ``_repr_mimebundle_`` on ipywidgets 7 too.
"""
from __future__ import annotations

from typing import Any

import ipywidgets

__all__ = ["IPYWIDGETS_MAJOR", "WIDGET_VIEW", "widget_bundle"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IPYWIDGETS_MAJOR = int(ipywidgets.__version__.split(".")[0])


def widget_bundle(widget: Any, **kwargs: Any) -> dict:
    """``{"text/plain": ..., WIDGET_VIEW: {...}}`` for ``widget``, on ipywidgets 7 and 8.

    On 8 this is the widget's own ``_repr_mimebundle_``; on 7 the same two entries that its
    ``_ipython_display_`` would send (view protocol 2.0, which both widget managers read), and the widget is
    told it was displayed, as ``_ipython_display_`` does.
    """
    if IPYWIDGETS_MAJOR >= 8:  # Widget's own method (a subclass may override it and call this function)
        return dict(ipywidgets.Widget._repr_mimebundle_(widget, **kwargs) or {})
    plain = repr(widget)
    data: dict = {"text/plain": plain if len(plain) <= 110 else plain[:110] + "…"}
    if widget._view_name is not None:
        data[WIDGET_VIEW] = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
        widget._handle_displayed()  # the formatter's include/exclude are not for the widget's display callbacks
    return data
