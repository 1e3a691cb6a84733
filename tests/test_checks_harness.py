"""The checkers' shared harness: a Mistake shows its message and the learner's frames only, the learner's code runs
under a time limit, and device slips become hints."""
from __future__ import annotations

import re
import signal
import sys
import threading
import time

import pytest
import torch

from tfm_lesson.checks import Mistake, check_encoder_layer
from tfm_lesson.checks._harness import (call, check_device_placement, explain_exception, run_on_device, time_limit)

#: Every test of the time limit has a guard of its own: a regression fails (pytest-timeout's thread method ends the
#: run with every thread's stack) instead of hanging CI. The thread method leaves SIGALRM free for the harness.
guard = pytest.mark.timeout(60, method="thread")

import tfm_lesson as T

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def endless() -> None:
    while True:
        pass


@guard
# the time limit ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["alarm", "thread"])
def test_an_endless_loop_is_stopped_with_a_hint(mechanism: str) -> None:
    start = time.perf_counter()
    with pytest.raises(Mistake, match=r"your f did not return within 0.5 s: an endless loop\?"):
        with time_limit(0.5, what="your f", mechanism=mechanism):
            endless()
    assert time.perf_counter() - start < 5


@guard
def test_call_stops_an_endless_function_and_except_exception_cannot_swallow_it() -> None:
    def stubborn() -> None:
        while True:
            try:
                endless()
            except Exception:  # a learner's catch-all must not hide the limit
                pass

    with pytest.raises(Mistake, match="did not return within 0.5 s"):
        call(stubborn, what="your function", limit=0.5)


@guard
def test_the_alarm_interrupts_a_sleep_too() -> None:
    with pytest.raises(Mistake, match="within 0.3 s"):
        call(time.sleep, 30, what="your function", limit=0.3)


@guard
@pytest.mark.parametrize("mechanism", ["alarm", "thread"])
def test_code_that_returns_in_time_is_untouched(mechanism: str) -> None:
    with time_limit(0.3, mechanism=mechanism):
        value = sum(range(1000))
    time.sleep(0.5)  # no stray exception arrives after the block
    assert value == 499500
    assert call(lambda a, b=1: a + b, 2, b=3, limit=0.3) == 5


@guard
def test_the_limit_works_outside_the_main_thread() -> None:
    caught: list[BaseException] = []

    def worker() -> None:
        try:
            call(endless, what="your loop", limit=0.4)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            caught.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], Mistake) and "within 0.4 s" in str(caught[0])


@guard
def test_nested_limits_keep_the_outer_one() -> None:
    with pytest.raises(Mistake, match="within 0.4 s"):
        with time_limit(0.4, what="outer"):
            call(endless, what="inner", limit=100)


@guard
def test_a_limit_of_zero_turns_it_off() -> None:
    with time_limit(0):
        time.sleep(0.05)


# learner code that swallows the timeout ------------------------------------------------------------------------------
def bare_except_loop() -> None:
    x = 0
    while True:
        try:
            x += 1
        except:  # noqa: E722 - the learner's catch-all is what is tested
            pass


def base_exception_loop() -> None:
    while True:
        try:
            sum(range(100))
        except BaseException:
            pass


def sleep_in_a_loop(seconds: float) -> None:
    while True:
        try:
            time.sleep(seconds)
        except:  # noqa: E722
            pass


def swallowing_callee() -> None:
    while True:
        try:
            while True:
                pass
        except:  # noqa: E722
            pass


def nested_across_calls() -> None:
    while True:
        try:
            swallowing_callee()
        except:  # noqa: E722
            pass


def handler_that_loops() -> None:
    try:
        endless()
    except:  # noqa: E722
        n = 0
        while True:
            try:
                n += 1
            except:  # noqa: E722
                pass


def recursion(depth: int = 0) -> None:
    while True:
        try:
            if depth < 50:
                recursion(depth + 1)
        except:  # noqa: E722
            pass


def no_grad_loop() -> None:
    while True:
        with torch.no_grad():
            try:
                time.sleep(0.001)
            except:  # noqa: E722
                pass


#: CPython 3.10 handles signals, other threads and asynchronous exceptions at a loop's backward jump only when the
#: next instruction does not open a ``try``: a loop whose whole body is ``try: x += 1`` (no call inside) gives
#: nothing a chance to run, not even a thread waiting for the GIL (3.11 fixed this). So that one is 3.11+.
BEFORE_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="CPython 3.10 never interrupts `try: x += 1` loops")

SWALLOWERS = {
    "bare except in a loop": bare_except_loop,
    "except BaseException": base_exception_loop,
    "sleep in a loop": None,  # (alarm: a 100 s sleep; thread: short sleeps, see the docstring of time_limit)
    "nested across calls": nested_across_calls,
    "a handler that loops": handler_that_loops,
    "recursion": recursion,
    "inside torch.no_grad()": no_grad_loop,
}


def harness_state() -> tuple:
    return sys.gettrace(), sys.getprofile(), signal.getsignal(signal.SIGALRM), torch.is_grad_enabled()


@guard
@pytest.mark.parametrize("mechanism", ["alarm", "thread"])
@pytest.mark.parametrize("pattern", [pytest.param(p, marks=BEFORE_311) if SWALLOWERS[p] is bare_except_loop else p
                                     for p in SWALLOWERS])
def test_code_that_swallows_the_timeout_is_stopped(pattern: str, mechanism: str) -> None:
    fn = SWALLOWERS[pattern] or (lambda: sleep_in_a_loop(100 if mechanism == "alarm" else 0.05))
    before = harness_state()
    start = time.perf_counter()
    with pytest.raises(Mistake, match=r"your loop did not return within 0.3 s: an endless loop\?"):
        with time_limit(0.3, what="your loop", mechanism=mechanism):
            fn()
    assert time.perf_counter() - start < 0.3 + 1.5  # about a second after the deadline at most, even loaded
    assert harness_state() == before  # tracer, profiler, SIGALRM handler, grad mode: as they were
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    time.sleep(0.1)  # no kick and no pending exception arrives after the block
    sum(i for i in range(10000))


@guard
@pytest.mark.parametrize("fn", [nested_across_calls, recursion, handler_that_loops,
                                pytest.param(bare_except_loop, marks=BEFORE_311)], ids=lambda f: f.__name__)
def test_swallowing_code_is_stopped_outside_the_main_thread_too(fn) -> None:
    caught: list[BaseException] = []

    def worker() -> None:  # the watchdog mechanism: the only one outside the main thread
        try:
            call(fn, what="your loop", limit=0.3)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            caught.append(exc)
        caught.append(sys.gettrace() or sys.getprofile())  # the worker's own trace/profile: off again

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(caught[0], Mistake) and "within 0.3 s" in str(caught[0]) and caught[1] is None


@guard
def test_call_stops_a_bare_except_too() -> None:
    with pytest.raises(Mistake, match="your function did not return within 0.3 s"):
        call(nested_across_calls, what="your function", limit=0.3)


@guard
@pytest.mark.parametrize("mechanism", ["alarm", "thread"])
def test_a_debuggers_trace_function_is_given_back(mechanism: str) -> None:
    seen: list[str] = []

    def tracer(frame, event, arg):
        seen.append(event)
        return None

    def profiler(frame, event, arg):
        return None

    sys.settrace(tracer)
    sys.setprofile(profiler)
    try:
        with pytest.raises(Mistake):
            with time_limit(0.3, mechanism=mechanism):
                nested_across_calls()
        assert sys.gettrace() is tracer and sys.getprofile() is profiler
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    assert seen  # it kept working before the deadline


@guard
@pytest.mark.parametrize("mechanism", ["alarm", "thread"])
def test_code_that_swallows_the_timeout_and_returns_still_gets_the_mistake(mechanism: str) -> None:
    def gives_up_late() -> int:
        try:
            endless()
        except:  # noqa: E722
            return 42

    with pytest.raises(Mistake, match="within 0.3 s"):
        with time_limit(0.3, mechanism=mechanism):
            gives_up_late()


@guard
def test_an_alarm_after_the_thread_mechanism_does_not_hang() -> None:
    # the hang of the first attempt: clearing the watchdog's exception with SetAsyncExc(id, NULL) left CPython's
    # "asynchronous exception pending" flag set; with a tracer on, 3.11 then spun at every function entry
    for _ in range(3):
        with pytest.raises(Mistake):
            with time_limit(0.2, mechanism="thread"):
                nested_across_calls()
        with pytest.raises(Mistake, match="within 0.2 s"):
            call(time.sleep, 30, what="your function", limit=0.2)
    sys.settrace(lambda *a: None)  # a tracer on, calls in a loop: nothing pending may be delivered or spin
    try:
        assert sum(abs(-i) for i in range(20000)) > 0
    finally:
        sys.settrace(None)


@guard
def test_a_stale_limit_left_by_an_interrupted_exit_is_cleaned_up() -> None:
    from tfm_lesson.checks import _time_limit

    def leave_a_limit_behind():  # its `with` is never left: as if a kick had cut the exit short
        cm = time_limit(5, mechanism="alarm")
        cm.__enter__()
        return cm

    cm = leave_a_limit_behind()
    stale = _time_limit._active.limit
    assert stale is not None and not stale.done
    with time_limit(0.2):  # the stale limit's frame is gone: it is stopped, and this limit works
        time.sleep(0.01)
    assert stale.done and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    cm.gen.close()


# how a Mistake shows itself -----------------------------------------------------------------------------------------
class TupleAsTensor(T.EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, mask))  # forgot [0]
        return self.norm2(x + self.feed_forward(x))


def test_plain_python_gets_an_assertion_error_with_the_message() -> None:
    with pytest.raises(AssertionError) as info:
        check_encoder_layer(TupleAsTensor)
    assert isinstance(info.value, Mistake)
    assert str(info.value).startswith("your EncoderLayer raised TypeError")
    assert "`[0]`" in str(info.value)


@pytest.mark.notebook_only  # how a Mistake shows itself in a notebook: its traceback
def test_the_rendered_traceback_shows_the_message_first_and_only_the_learners_frames() -> None:
    with pytest.raises(Mistake) as info:
        check_encoder_layer(TupleAsTensor)
    lines = [ANSI.sub("", line) for line in info.value._render_traceback_()]
    assert lines[0].startswith("Mistake: your EncoderLayer raised TypeError")
    text = "\n".join(lines)
    assert "x = self.norm1(x + self.self_attn(x, x, x, mask))" in text  # the learner's own line
    assert "in forward" in text and "in test_the_rendered_traceback" in text
    for inside in ("checks/_harness.py", "checks/_time_limit.py", "checks/_mistake.py", "checks/layers.py",
                   "torch/nn/modules", "diagnose(", "_run("):
        assert inside not in text, inside


@guard
def test_an_endless_loop_is_shown_where_it_loops() -> None:
    with pytest.raises(Mistake) as info:
        call(endless, what="your f", limit=0.3)
    text = ANSI.sub("", "\n".join(info.value._render_traceback_()))
    assert "in endless" in text and "while True:" in text
    assert "checks/_harness.py" not in text and "checks/_time_limit.py" not in text


@pytest.mark.slow
def test_jupyter_shows_the_message_and_the_learners_cells() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        "import tfm_lesson as T\nfrom tfm_lesson.checks import check_encoder_layer",
        "class L(T.EncoderLayer):\n    def forward(self, x, mask=None):\n"
        "        x = self.norm1(x + self.self_attn(x, x, x, mask))\n        return self.norm2(x + self.feed_forward(x))",
        "check_encoder_layer(L)",
    )]
    nbclient.NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    (error,) = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    lines = [ANSI.sub("", line) for line in error.traceback]
    assert lines[0].startswith("Mistake: your EncoderLayer raised TypeError"), lines
    text = "\n".join(lines)
    assert "Cell In[2], line 3, in forward" in text and "check_encoder_layer(L)" in text, text
    assert "_harness" not in text and "layers.py" not in text and len(lines) <= 10, text


# exceptions that become hints ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("error, hint", [
    (RuntimeError("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"),
     "build your mask on `tokens.device`"),
    (RuntimeError("Expected all tensors to be on the same device, but got mask is on cpu, different from other "
                  "tensors on cuda:0 (when checking argument in method wrapper_CUDA__masked_fill)"), "tokens.device"),
    (RuntimeError("\"bitwise_and_cpu\" not implemented for 'Float'"), "build the triangle as a boolean tensor"),
    (TypeError("unsupported operand type(s) for +: 'Tensor' and 'tuple'"), "`[0]`"),
    (AttributeError("'tuple' object has no attribute 'shape'"), "(output, weights)"),
])
def test_common_exceptions_get_a_hint(error: Exception, hint: str) -> None:
    assert hint in (explain_exception(error) or "")


def test_float_triangle_and_the_real_pytorch_error() -> None:
    def float_triangle(tgt: torch.Tensor) -> torch.Tensor:
        return (tgt != 0)[:, None, :] & torch.ones(tgt.size(1), tgt.size(1)).tril()

    with pytest.raises(Mistake, match="build the triangle as a boolean tensor"):
        call(float_triangle, torch.tensor([[1, 2, 0]]), what="your mask function")


def test_other_exceptions_keep_their_text() -> None:
    with pytest.raises(Mistake, match="your function raised ValueError: nope"):
        call(lambda: (_ for _ in ()).throw(ValueError("nope")), what="your function")
    assert explain_exception(ValueError("nope")) is None


# the chapter's device -----------------------------------------------------------------------------------------------
def test_run_on_device_returns_cpu_tensors_and_copies_modules() -> None:
    layer = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    got = run_on_device(lambda m, t: (m(t), t.sum()), layer, x, what="your layer")
    assert all(t.device.type == "cpu" for t in got)
    assert torch.allclose(got[0], layer(x))


def test_run_on_device_turns_a_device_mismatch_into_a_hint() -> None:
    # the meta device stands in for a GPU: a tensor built without device= lands on the CPU and the two clash
    def mask(tokens: torch.Tensor) -> torch.Tensor:
        return (tokens != 0)[:, None, :] & torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool).tril()

    with pytest.raises(Mistake, match="build your mask on `tokens.device`"):
        run_on_device(mask, torch.tensor([[1, 2, 0]]), what="your mask function", device="meta")


def causal_without_device(tokens: torch.Tensor) -> torch.Tensor:
    return torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool).tril()


def causal_with_device(tokens: torch.Tensor) -> torch.Tensor:
    return torch.ones(tokens.size(1), tokens.size(1), dtype=torch.bool, device=tokens.device).tril()


def test_a_tensor_built_without_device_is_caught_with_or_without_a_gpu() -> None:
    tokens = torch.tensor([[3, 4, 0]])
    where = "cuda" if torch.cuda.is_available() else "meta"  # the GPU when there is one, else shapes only
    expected = f"returns a tensor on cpu when `tokens` is on {where}: build new tensors on `tokens.device`"
    with pytest.raises(Mistake, match=expected):
        check_device_placement(causal_without_device, tokens, what="your causal mask")
    check_device_placement(causal_with_device, tokens, what="your causal mask")


def test_device_placement_draws_no_conclusion_from_what_meta_cannot_do() -> None:
    def reads_values(tokens: torch.Tensor) -> torch.Tensor:
        n = int(tokens.max())  # a value: impossible on the meta device, fine on a GPU
        return torch.ones(n, n, device=tokens.device)

    check_device_placement(reads_values, torch.tensor([[3, 4, 0]]), what="your function")


@guard
def test_every_checker_of_chapters_06_to_09_stops_an_endless_loop(monkeypatch) -> None:
    from tfm_lesson.checks import _time_limit
    from tfm_lesson.checks import (check_feed_forward, check_gelu, check_generator, check_layer_budget,
                                   check_load_encoder_layer, check_parameter_count, check_target_mask,
                                   check_tie_weights)

    monkeypatch.setattr(_time_limit, "TIME_LIMIT", 0.3)

    def loops(*args, **kwargs):
        endless()

    for checker in (check_gelu, check_layer_budget, check_load_encoder_layer, check_parameter_count,
                    check_target_mask, check_tie_weights):
        with pytest.raises(Mistake, match="did not return within 0.3 s"):
            checker(loops)

    class LoopingFFN(torch.nn.Module):
        def __init__(self, d_model, d_ff, **kwargs):
            super().__init__()
            self.w_1, self.w_2 = torch.nn.Linear(d_model, d_ff), torch.nn.Linear(d_ff, d_model)

        def forward(self, x):
            endless()

    class LoopingGenerator(torch.nn.Module):
        def __init__(self, d_model, vocab_size):
            super().__init__()
            self.proj = torch.nn.Linear(d_model, vocab_size)

        def forward(self, x):
            endless()

    for checker, cls in ((check_feed_forward, LoopingFFN), (check_generator, LoopingGenerator)):
        with pytest.raises(Mistake, match="did not return within 0.3 s"):
            checker(cls)
    with pytest.raises(Mistake, match="did not return within 0.3 s"):
        check_encoder_layer(type("LoopingLayer", (T.EncoderLayer,), {"forward": lambda self, x, mask=None: endless()}))


def test_check_on_device_compares_on_the_cpu_and_names_device_slips() -> None:
    from tfm_lesson.checks._harness import check_on_device

    layer = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    check_on_device(layer, x, expected=layer(x), what="your layer", device="cpu")
    with pytest.raises(Mistake, match="different numbers on cpu"):
        check_on_device(layer, x, expected=layer(x) + 1, what="your layer", device="cpu")

    class FixedDevice(torch.nn.Module):  # builds a tensor without device=: fine on the CPU, a crash on a GPU
        def forward(self, x):
            return x + torch.ones(x.shape[-1])

    if torch.cuda.is_available():  # the chapter's device is the GPU: the slip shows there
        with pytest.raises(Mistake, match="mixes tensors on two devices"):
            check_on_device(FixedDevice(), x, expected=x + 1, what="your module")
    else:  # a CPU-only machine: nothing to do
        check_on_device(FixedDevice(), x, expected=x + 1, what="your module")
    with pytest.raises(Mistake, match="mixes tensors on two devices"):
        check_on_device(FixedDevice(), x, expected=x + 1, what="your module", device="meta")
    check_on_device(layer, x, expected=layer(x), what="your layer", device="meta")  # shapes only on meta
