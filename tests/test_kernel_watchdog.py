"""The time limit from outside the kernel (tfm_lesson/course/kernel_watchdog.py), in a real kernel run by nbclient
as Otter runs a submission: an endless loop is interrupted at the limit and the next cells run; a loop that catches
the interrupt (`except BaseException: pass`) has its kernel killed `grace` seconds later, so the run ends."""
from __future__ import annotations

import time

import nbformat
import pytest

from tfm_lesson.course.export import OtterCellTimeLimit
from tfm_lesson.course.kernel_watchdog import KernelWatchdog, _connection_file

LOOP = "while True:\n    pass\n"
SWALLOW = "import time\nwhile True:\n    try:\n        time.sleep(.1)\n    except BaseException:\n        pass\n"


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="seconds must be > 0"):
        KernelWatchdog(0)
    with pytest.raises(ValueError, match="grace must be >= 0"):
        KernelWatchdog(1, grace=-1)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        OtterCellTimeLimit("", {}, {"seconds": 0})
    assert OtterCellTimeLimit("", {}, {}).seconds == 600  # the default
    assert _connection_file(["python", "-m", "ipykernel_launcher", "-f", "/run/kernel-1.json"]) == "/run/kernel-1.json"
    assert _connection_file(["python", "script.py"]) is None


def _run(body: str, seconds: float, grace: float):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in ("x = 1", body, "print('after', x)")])
    plugin = OtterCellTimeLimit("", {}, {"seconds": seconds, "grace": grace})
    assert plugin.before_execution(nb) is nb  # the submission runs as it is: nothing added inside the kernel
    start = time.monotonic()
    try:
        NotebookClient(nb, timeout=None, allow_errors=True, kernel_name="python3").execute()
        error = None
    except Exception as exc:  # noqa: BLE001 - the test looks at which
        error = exc
    finally:
        plugin.after_grading(None)
    return nb, error, time.monotonic() - start, plugin


@pytest.mark.slow
def test_an_endless_loop_is_interrupted_and_the_next_cells_run():
    nb, error, took, plugin = _run(LOOP, seconds=2, grace=30)
    assert error is None
    assert nb.cells[1].outputs[0]["ename"] == "KeyboardInterrupt"
    assert [o.get("text") for o in nb.cells[2].outputs] == ["after 1\n"]
    assert len(plugin.watchdog.events) == 1 and "past the 2 s limit: interrupted" in plugin.watchdog.events[0]
    assert "past the 2 s limit" in plugin.generate_report()


@pytest.mark.slow
@pytest.mark.timeout(300)  # without the watchdog this test would never end
def test_a_loop_that_swallows_the_interrupt_has_its_kernel_killed():
    """Without the watchdog this run never ends (nbclient has no limit here, as in `otter run`)."""
    from nbclient.exceptions import DeadKernelError

    nb, error, took, plugin = _run(SWALLOW, seconds=2, grace=2)
    assert isinstance(error, DeadKernelError)
    events = plugin.watchdog.events
    assert len(events) == 2 and "interrupted" in events[0] and "killed" in events[1], events
    assert took < 60, took  # 2 s + 2 s after the kernel's start; a generous bound for a loaded machine
    assert not nb.cells[2].outputs  # the cell after the loop never ran


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_under_otters_executor_the_killed_cell_costs_itself_and_the_rest_runs():
    """Otter runs a submission with nbconvert's ExecutePreprocessor (otter.execute.grade_notebook); the plugin wraps
    it (tfm_lesson/course/otter_rerun.py): after the kill, the notebook runs again with the looping cell replaced by
    one that raises TimeoutError, so the cells after it run and Otter's result cell would too."""
    from nbconvert.preprocessors import ExecutePreprocessor

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in ("x = 1", SWALLOW, "print('after', x)")])
    plugin = OtterCellTimeLimit("", {}, {"seconds": 2, "grace": 1})
    plugin.before_execution(nb)
    try:
        done, _ = ExecutePreprocessor(timeout=None, allow_errors=True, kernel_name="python3").preprocess(nb)
    finally:
        plugin.after_grading(None)
    report = plugin.generate_report()
    assert "killed" in report and "cell 1 ('import time') replaced by one that raises TimeoutError" in report, report
    assert done.cells[1].outputs[0]["ename"] == "TimeoutError"
    assert "ran past the 2 s time limit" in done.cells[1].outputs[0]["evalue"]
    assert [o.get("text") for o in done.cells[2].outputs] == ["after 1\n"]
    assert done.cells[0].source == "x = 1" and "while True" not in done.cells[1].source
