"""One stopped cell costs one question under Otter too: run the notebook again without the cell that killed its kernel.

Otter computes a submission's results inside the student's kernel (a cell it appends pickles them) and lets
nbconvert's ``DeadKernelError`` through, so a kernel that died (the time limit's watchdog killed a cell that caught
the interrupt, or the cell took the kernel down) left ``otter run`` without any result. :func:`install`, called by
the exported assignment's plugin in Otter's own grading process, wraps nbconvert's
``ExecutePreprocessor.preprocess`` (what ``otter.execute.grade_notebook`` runs): when the kernel dies while cell *i*
runs, the notebook is run again from the start, in a fresh kernel, with cell *i* replaced by one that raises
``TimeoutError`` (or ``RuntimeError``) saying why. The questions that needed that cell fail with the reason, every
other question is graded as usual, and Otter's result cell runs at the end. At most :data:`MAX_RERUNS` cells are
replaced; after that the dead kernel's error goes through as before.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

__all__ = ["MAX_RERUNS", "install", "replaced", "stopped_cell"]

MAX_RERUNS = 3  # cells replaced in one submission before the run is given up (each re-run starts from the top)
_MARK = "_tfm_rerun"


def stopped_cell(seconds: float | None) -> str:
    """The source that stands in for a cell whose kernel died: ``seconds`` when the time limit's watchdog killed it."""
    if seconds is not None:
        return (f"raise TimeoutError('this cell ran past the {seconds:g} s time limit and went on after the "
                "interrupt, so its kernel was stopped; the notebook was run again without it')")
    return ("raise RuntimeError('the kernel died while this cell ran (out of memory, or a crash); the notebook was "
            "run again without it')")


def install(killed_by_limit: Callable[[], bool], seconds: float) -> None:
    """Wrap ``ExecutePreprocessor.preprocess`` once per process. ``killed_by_limit()`` says whether the time limit's
    watchdog killed a kernel since it was last asked (the replaced cell then says "time limit")."""
    from nbconvert.preprocessors import ExecutePreprocessor

    _state.update(killed_by_limit=killed_by_limit, seconds=seconds, replaced=[])
    if getattr(ExecutePreprocessor.preprocess, _MARK, False):
        return
    ExecutePreprocessor.preprocess = _rerunning(ExecutePreprocessor.preprocess)
    ExecutePreprocessor.preprocess_cell = _tracking(ExecutePreprocessor.preprocess_cell)


_state: dict[str, Any] = {"killed_by_limit": lambda: False, "seconds": None, "replaced": []}


def replaced() -> list[str]:
    """What was replaced since :func:`install`, a line each (the plugin's report prints them)."""
    return list(_state["replaced"])


def _tracking(original: Callable) -> Callable:
    def preprocess_cell(self: Any, cell: Any, resources: Any, index: int) -> Any:
        self._tfm_running = index  # the cell the kernel is running, read when it dies
        return original(self, cell, resources, index)
    return preprocess_cell


def _rerunning(original: Callable) -> Callable:
    def preprocess(self: Any, nb: Any, resources: Any = None, km: Any = None) -> Any:
        from nbclient.exceptions import DeadKernelError

        pristine = copy.deepcopy(nb)
        for attempt in range(MAX_RERUNS + 1):
            self._tfm_running = None
            try:
                return original(self, nb, resources, km)
            except DeadKernelError:
                index = self._tfm_running
                if attempt == MAX_RERUNS or km is not None or index is None:
                    raise
                limit = _state["seconds"] if _state["killed_by_limit"]() else None
                first = next(iter(str(pristine.cells[index].source).strip().splitlines()), "")
                _state["replaced"].append(f"cell {index} ({first[:60]!r}) replaced by one that raises "
                                          f"{'TimeoutError' if limit is not None else 'RuntimeError'}; the "
                                          "notebook ran again from the top")
                pristine.cells[index].source = stopped_cell(limit)
                pristine.cells[index].outputs = []
                nb = copy.deepcopy(pristine)
        raise AssertionError("unreachable")  # the loop returns or raises
    setattr(preprocess, _MARK, True)
    return preprocess
