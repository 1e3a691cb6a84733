"""Widgets display the same way on ipywidgets 7.7 (Colab's) and 8: through IPython's own display formatter.

These tests run on whichever ipywidgets is installed: ipywidgets 8 in `make test`, 7.7.1 in the Colab-like
environment of `.ci/run` (tests/test_colab.py runs this file there).
"""
from __future__ import annotations

import base64

import ipywidgets
import pytest
from IPython.core.formatters import DisplayFormatter

from tfm_lesson import quiz, widgets
from tfm_lesson.look._widget_display import IPYWIDGETS_MAJOR, WIDGET_VIEW, widget_bundle

from test_widgets import BUILDERS


def _shown(obj) -> dict:
    """What a notebook cell ending in ``obj`` would send to the front end (IPython's formatter, as a kernel uses it)."""
    data, _ = DisplayFormatter().format(obj)
    return data


def test_the_installed_ipywidgets_is_one_the_course_supports():
    assert IPYWIDGETS_MAJOR in (7, 8), ipywidgets.__version__
    assert tuple(int(p) for p in ipywidgets.__version__.split(".")[:2]) >= (7, 7)


def test_a_plain_widget_gives_a_view_of_its_own_model():
    slider = ipywidgets.IntSlider(value=3)
    data = widget_bundle(slider)
    assert data[WIDGET_VIEW]["model_id"] == slider.model_id and data[WIDGET_VIEW]["version_major"] == 2
    assert "IntSlider" in data["text/plain"]


def test_an_explorer_is_shown_as_live_view_and_static_picture():
    explorer = widgets.temperature_explorer()
    data = _shown(explorer)
    assert data.get(WIDGET_VIEW, {}).get("model_id") == explorer.model_id, sorted(data)
    assert base64.b64decode(data["image/png"]) == explorer.png
    assert data["text/plain"].startswith("<temperature_explorer")


def test_a_quiz_is_shown_as_live_view_and_static_html():
    shown = quiz.show([quiz.Question(prompt="2 + 2?", options=["3", "4"], answer=1, feedback=["no", "yes"])])
    data = _shown(shown)  # ipywidgets 7 used to fail here: 'VBox' object has no attribute '_repr_mimebundle_'
    assert data[WIDGET_VIEW]["model_id"] == shown.widget.model_id
    assert "2 + 2?" in data["text/html"] and "2 + 2?" in data["text/plain"]
    shown.answer(0, 1)
    assert "✔" in shown._feedback[0].value and "✔" not in data["text/html"]


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_explorer_goes_through_the_formatter_with_its_picture(name):
    explorer = BUILDERS[name]()
    data = _shown(explorer)
    assert data.get(WIDGET_VIEW, {}).get("model_id") == explorer.model_id, sorted(data)
    assert base64.b64decode(data["image/png"]) == explorer.png
