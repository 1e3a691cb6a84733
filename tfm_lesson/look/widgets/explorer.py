"""The :class:`Explorer`: controls above a picture that re-renders on every change, in a background thread when a
control moves in the browser, with a static PNG for where no widget frontend runs; and the small helpers every
explorer shares (a slider, typed text cut and escaped, a matrix from a tensor or an array)."""
from __future__ import annotations

import base64
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import ipywidgets as widgets
import numpy as np
import torch
from torch import Tensor

from .. import viz
from .._widget_display import widget_bundle

__all__ = ["Explorer", "TEXT_LIMIT"]

HIGHLIGHT = viz.HIGHLIGHT  # Okabe-Ito orange: frames the selected row / head / dimension
TEXT_LIMIT = 300  # characters of typed text an explorer reads; the rest is cut, with a note
BUILD_WAIT = 5.0  # seconds building an explorer waits for its first picture (then it draws in the background)
SHOW_WAIT = 30.0  # seconds showing or reading a picture still being drawn waits for it
SENTENCE = ["the", "cat", "sat", "on", "the", "mat"]


class Explorer(widgets.VBox):
    """Controls above a figure; every change of a control re-renders the figure.

    ``controls``: name -> widget (each observed on ``value``); ``render()`` returns a
    :class:`matplotlib.figure.Figure` for the current values. ``png`` is the picture now shown;
    ``figure`` the Figure it came from; ``error`` the message of a failed render (shown in red), else "".
    """

    def __init__(self, name: str, controls: dict[str, widgets.Widget], render: Callable[[], "viz.Figure"],
                 note: str = "") -> None:
        super().__init__()
        self.name = name
        self.controls = controls
        self._render = render
        self._held = 0
        self._figure = None
        self._error = ""
        self._render_lock = threading.Lock()  # one render at a time; the latest values win
        self._state_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._dirty = False
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.status = widgets.HTML("")
        bar = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        children = [bar, self.image, self.status]
        if note:
            children.insert(0, widgets.HTML(f"<small>{note}</small>"))
        self.children = children
        self.add_class("tfm-explorer")
        self.add_class(f"tfm-{name.replace('_', '-')}")
        self.image.add_class("tfm-explorer-figure")
        for label, control in controls.items():  # stable CSS hooks, e.g. .tfm-control-head (browser tests use them)
            control.add_class("tfm-control-" + "".join(c if c.isalnum() else "-" for c in label))
            control.observe(self._changed, names="value")
        self._refresh_in_background()  # a slow render never blocks building the explorer
        if not self.wait(BUILD_WAIT):
            self.status.value = "<i>drawing… (the first picture takes a while; it appears here when ready)</i>"

    @contextmanager
    def hold(self, refresh: bool = True) -> Iterator[None]:
        """Change several controls at once and render once, at the end (or not at all: ``refresh=False``)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if refresh and not self._held:
            self.refresh()

    def _changed(self, change: dict) -> None:
        if self._held:
            return
        if getattr(change.get("owner"), "_property_lock", None):  # moved in the browser: keep the kernel free
            self._refresh_in_background()
        else:  # set from code: the picture is current when the line returns
            self.refresh()

    def _refresh_in_background(self) -> None:
        """Render in a worker thread; changes arriving meanwhile are merged into one more render."""
        with self._state_lock:
            if self._worker is not None and self._worker.is_alive():
                self._dirty = True
                return
            self._dirty = False
            self._worker = threading.Thread(target=self._work, name=f"{self.name}-render", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            self.refresh()
            with self._state_lock:
                if not self._dirty:
                    return
                self._dirty = False

    def wait(self, timeout: float | None = SHOW_WAIT) -> bool:
        """Wait (at most ``timeout`` seconds) for a picture being drawn in the background; True when done."""
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def refresh(self) -> None:
        """Render the figure for the current control values (errors are shown, not raised)."""
        with self._render_lock:
            self._refresh()

    def _refresh(self) -> None:
        try:
            with viz.course_style():  # the course's look for the whole picture, not only viz's panels
                fig = self._render()
            self.image.value = viz.figure_png(fig)
            self._figure, self._error = fig, ""
            self.status.value = ""
        except Exception as exc:  # a half-typed sentence must not kill the widget
            self._error = f"{type(exc).__name__}: {exc}"
            self.status.value = f"<span style='color:#D55E00'>{_escape(self._error)}</span>"

    @property
    def png(self) -> bytes:
        self.wait()
        return bytes(self.image.value)

    @property
    def figure(self):
        """The Figure now shown (after a render still running in the background, if any)."""
        self.wait()
        return self._figure

    @property
    def error(self) -> str:
        self.wait()
        return self._error

    _ipython_display_ = None  # ipywidgets 7: display through _repr_mimebundle_ below (with the picture), as on 8

    def _repr_mimebundle_(self, **kwargs) -> dict:
        self.wait()  # the static picture, when it comes in time
        data = widget_bundle(self, **kwargs)
        data["text/plain"] = f"<{self.name}: interactive in a notebook with a live kernel; static picture elsewhere>"
        if self.image.value:
            data["image/png"] = base64.b64encode(self.png).decode("ascii")
        return data


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str) -> str:
    """Typed text for matplotlib, drawn as text: ``$`` would start math ("$5 and $6" -> "5and6")."""
    return str(text).replace("$", r"\$")


def _cut(text: str, limit: int = TEXT_LIMIT) -> tuple[str, str]:
    """``text`` cut to ``limit`` characters, and a note saying so ("" when nothing was cut)."""
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"only the first {limit:,} of {len(text):,} characters are used"


def _slider(description: str, value: int, low: int, high: int) -> widgets.IntSlider:
    return widgets.IntSlider(value=value, min=low, max=high, step=1, description=description,
                             continuous_update=False, style={"description_width": "initial"})


def _matrix(x: object, name: str, expected: str) -> Tensor:
    """A ``(len, d)`` float tensor from a tensor/array, leading size-1 dimensions dropped."""
    t = x.detach() if isinstance(x, Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float32))
    while t.dim() > 2 and t.size(0) == 1:
        t = t[0]
    if t.dim() != 2 or t.numel() == 0:
        raise ValueError(f"{name} must be shaped {expected}, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must hold floating-point numbers, got dtype {t.dtype}")
    return t.to("cpu", torch.float32)
