"""A time limit on the learner's code: :func:`time_limit` stops it with a :class:`Mistake` that suggests an
endless loop, even when the code swallows the timeout with a bare ``except:``. :data:`TIME_LIMIT` is the default.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ._mistake import Mistake, _is_learners

__all__ = ["time_limit", "TIME_LIMIT"]

#: Seconds the learner's code may run in one call before a checker stops it (``TFM_CHECK_TIME_LIMIT`` overrides).
TIME_LIMIT: float = float(os.environ.get("TFM_CHECK_TIME_LIMIT", "30"))

#: Seconds between the kicks that follow the deadline (a learner's bare ``except:`` may swallow the first one).
_KICK_EVERY = 0.02
_WITH_OPS = frozenset({"SETUP_WITH", "BEFORE_WITH", "WITH_EXCEPT_START", "SETUP_ASYNC_WITH", "BEFORE_ASYNC_WITH"})
_CONTEXTLIB = contextmanager.__code__.co_filename
_HARNESS_FILES = frozenset({__file__, _CONTEXTLIB, str(Path(__file__).with_name("_harness.py"))})
#: The harness's bookkeeping around the learner's code: the deadline never interrupts it.
_BOOKKEEPING = frozenset({"time_limit", "_stop", "stop", "start", "arm", "_ring", "_watch", "_trace", "_trace_new",
                          "_trace_line", "_profile", "_kickable", "__init__", "_set_async_exc", "_learners_code",
                          "_with_lines", "_on_stack", "_mechanism", "_drain_async_exc", "_checkpoint",
                          "_caught_again_here"})


class _OutOfTime(BaseException):
    """Raised inside the learner's code when its time is up (a BaseException, so `except Exception:` in the learner's
    code cannot swallow it). Made in the thread it is raised in (by the signal handler, the tracer, or CPython for
    the watchdog's asynchronous exception), so creating one re-arms the limit's tracer in that thread."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        limit = getattr(_active, "limit", None)
        if limit is not None:
            limit.arm(sys._getframe(1), in_flight=True)


_active = threading.local()
_learners_cache: dict[str, bool] = {}
_with_lines_cache: dict[Any, frozenset[int]] = {}


def _learners_code(filename: str) -> bool:
    """:func:`_is_learners`, remembered per file (the tracer asks once per line)."""
    known = _learners_cache.get(filename)
    if known is None:
        known = _learners_cache[filename] = _is_learners(filename) and filename not in _HARNESS_FILES
    return known


def _with_lines(code: Any) -> frozenset[int]:
    """The lines of ``code`` that enter or leave a ``with`` block: the tracer never raises there, so the learner's
    context managers (``torch.no_grad()``, open files) always get their ``__exit__``."""
    lines = _with_lines_cache.get(code)
    if lines is None:
        import dis

        starts = {start: line for start, _, line in code.co_lines()}
        found, line = set(), None
        for ins in dis.get_instructions(code):
            line = starts.get(ins.offset, line)
            if ins.opname in _WITH_OPS and line is not None:
                found.add(line)
        lines = _with_lines_cache[code] = frozenset(found)
    return lines


def _caught_again_here(code: Any, offset: int) -> bool:
    """Whether an exception raised at ``offset`` (the start of a handler) is caught by another ``except`` /
    ``finally`` of the same frame (nested ``try`` blocks): then :meth:`_Limit._trace_line`, which CPython switches
    off when it raises, leaves an asynchronous exception pending as well, delivered at the frame's next call or
    backward jump, after that enclosing handler has begun. Never when a ``with`` block would get it first (its
    ``__exit__`` must run). CPython 3.10 has no exception table: there, whenever the code holds no ``with``."""
    import dis

    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None:
        return not _with_lines(code)
    entries = parse(code)
    for _ in range(len(entries)):
        target = next((e.target for e in entries if e.start <= offset <= e.end), None)
        if target is None:
            return False
        following = [ins.opname for ins in dis.get_instructions(code) if ins.offset >= target][:3]
        if following[:1] == ["PUSH_EXC_INFO"]:
            return "WITH_EXCEPT_START" not in following
        offset = target  # the cleanup of the handler we leave (COPY, POP_EXCEPT, RERAISE): where does it go?
    return False


def _timeout_message(what: str, seconds: float) -> str:
    return (f"{what} did not return within {seconds:g} s: an endless loop? Look for a `while` whose condition never "
            "becomes false, or a loop that grows the list it walks over")


def _set_async_exc(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


class _Drained(BaseException):
    """Delivered on purpose by :func:`_drain_async_exc`, and caught there."""


def _checkpoint() -> None:
    for _ in range(2):  # a call and a backward jump: CPython delivers pending asynchronous exceptions at both
        pass


def _drain_async_exc() -> None:
    """Leave no asynchronous exception pending in this thread.

    ``PyThreadState_SetAsyncExc(id, NULL)`` is not enough: it empties the slot but (CPython 3.10-3.11) sets the
    interpreter's "asynchronous exception pending" flag, which only a delivered exception resets. With the flag
    stuck, every function call re-checks it, and on 3.11 a traced ``RESUME`` re-checks it forever: the thread
    spins at the entry of the next function it calls (a SIGALRM handler then re-enters itself there, once per
    signal). So replace whatever is pending by :class:`_Drained` and let it be delivered here."""
    for _ in range(3):
        try:
            _set_async_exc(threading.get_ident(), _Drained)
            _checkpoint()
            _checkpoint()
        except _Drained:
            return
        except _OutOfTime:  # one was still pending: delivered now, so try again
            continue


class _Limit:
    """One running time limit: the deadline (a signal or a watchdog thread), then, once it has passed, a tracer
    that raises :class:`_OutOfTime` again on the first line of every handler of the learner's code that catches
    it (a bare ``except:`` or ``except BaseException:``), until the exception reaches the checker.

    CPython switches a trace function off when it raises; a profile function (which never raises) switches it
    back on each time a frame is left, so an exception escaping a handler is raised again in the caller's
    handler too, at any depth of recursion. Kicks every ``_KICK_EVERY`` seconds after the deadline cover
    handlers nested in one frame and sleeps. Only frames of the learner's code newer than the ``with`` statement
    are traced or raised in: never the checker's, the harness's, the libraries' or the caller's own frame."""

    def __init__(self, seconds: float, how: str, owner: Any) -> None:
        self.seconds, self.how, self.owner = seconds, how, owner
        self.thread = threading.get_ident()
        self.lock = threading.Lock()
        self.expired = self.done = self.left = self.installed = self.in_ring = False
        self.touched: dict[Any, Any] = {}  # frame -> its f_trace before ours
        self.in_flight: set[Any] = set()  # frames an exception is passing through since the deadline
        self.previous_trace = self.previous_profile = None
        self.previous_handler: Any = None
        self.previous_timer = (0.0, 0.0)
        self.stop_event = threading.Event()
        self.urgent = False
        self.watchdog: threading.Thread | None = None
        self.started = 0.0
        # bound once: CPython hands back these very objects from sys.gettrace() / sys.getprofile() / f_trace
        self._trace_new, self._trace_line, self._profile = self._trace_new, self._trace_line, self._profile

    # starting and stopping ------------------------------------------------------------------------------------
    def start(self) -> None:
        self.started = time.monotonic()
        if self.how == "alarm":
            self.previous_handler = signal.signal(signal.SIGALRM, self._ring)
            self.previous_timer = signal.getitimer(signal.ITIMER_REAL)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)  # one-shot: _ring sets the next kick when it ends
        else:
            self.watchdog = threading.Thread(target=self._watch, name="tfm-time-limit", daemon=True)
            self.watchdog.start()

    def stop(self) -> None:
        """Idempotent; safe to call again if a late kick interrupts it (:func:`_stop` does)."""
        self.done = True  # first: no ring, tracer or profile function acts from here on
        if self.how == "alarm":
            signal.setitimer(signal.ITIMER_REAL, 0)
        with self.lock:  # the watchdog fires under the lock: after this, it never fires again
            self.done = True
        self.stop_event.set()
        if threading.get_ident() == self.thread:
            _drain_async_exc()  # no exception may stay pending for the code that runs after us
        self.stop_event.set()
        if self.how == "alarm" and self.previous_handler is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            remaining, interval = self.previous_timer
            if remaining > 0:  # someone else's timer was running: let it go on where it was
                left = max(remaining - (time.monotonic() - self.started), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, interval)
            signal.signal(signal.SIGALRM, self.previous_handler)
            self.previous_handler = None
        if self.installed and threading.get_ident() == self.thread:
            sys.settrace(self.previous_trace)
            sys.setprofile(self.previous_profile)
            self.installed = False
        for frame, trace in self.touched.items():
            frame.f_trace = trace
        self.touched.clear()
        self.in_flight.clear()
        if self.watchdog is not None and self.watchdog is not threading.current_thread():
            self.watchdog.join(1.0)

    # the deadline ------------------------------------------------------------------------------------------------
    def _ring(self, signum: int, frame: Any) -> None:
        """SIGALRM handler (main thread): the deadline, then a kick every ``_KICK_EVERY`` seconds."""
        if self.done or self.in_ring or frame is None:
            return
        self.in_ring = True
        try:
            first = not self.expired
            self.expired = True
            if not self.left:
                self.arm(frame)
            kick = not self.left and self._kickable(frame, first)
        finally:
            self.in_ring = False
            if not self.done:  # the next kick, counted from now: a ring never arrives while one runs
                signal.setitimer(signal.ITIMER_REAL, _KICK_EVERY)
        if kick:
            raise _OutOfTime

    @staticmethod
    def _kickable(frame: Any, first: bool) -> bool:
        """The deadline interrupts whatever runs but the harness's own bookkeeping (and contextlib's); the kicks
        after it only the learner's own lines, so a library's cleanup is never cut short."""
        if frame is None:
            return False
        code = frame.f_code
        if first:
            bookkeeping = code.co_filename == __file__ and code.co_name in _BOOKKEEPING
            return code.co_filename != _CONTEXTLIB and not bookkeeping
        return _learners_code(code.co_filename)

    def _watch(self) -> None:
        """The watchdog thread: the deadline, then a kick every ``_KICK_EVERY`` s while the learner's code runs."""
        if self.stop_event.wait(self.seconds):
            return
        first = True
        while True:
            with self.lock:
                if self.done:
                    return
                self.expired = True
                urgent, self.urgent = self.urgent, False
                if not self.left and (urgent or self._kickable(sys._current_frames().get(self.thread), first)):
                    _set_async_exc(self.thread, _OutOfTime)
                    first = False
            self.stop_event.wait(_KICK_EVERY)  # set by stop() and by _kick_soon()
            self.stop_event.clear()

    # the tracer --------------------------------------------------------------------------------------------------
    def arm(self, frame: Any, in_flight: bool = False) -> None:
        """In the limited thread, after the deadline: trace the learner's frames from ``frame`` out to the ``with``."""
        if self.done or not self.expired or threading.get_ident() != self.thread:
            return
        if not self.installed:
            self.previous_trace, self.previous_profile = sys.gettrace(), sys.getprofile()
            self.installed = True
        if sys.gettrace() is not self._trace_new:
            sys.settrace(self._trace_new)
        if sys.getprofile() is not self._profile:
            sys.setprofile(self._profile)
        while frame is not None:  # out to the frame that holds the `with`, included (its body may be the loop)
            if _learners_code(frame.f_code.co_filename):
                self._trace(frame)
                if in_flight:
                    self.in_flight.add(frame)
                    in_flight = False
            if frame is self.owner:
                break
            frame = frame.f_back

    def _trace(self, frame: Any) -> None:
        if frame.f_trace is not self._trace_line:
            self.touched.setdefault(frame, frame.f_trace)
            frame.f_trace = self._trace_line
        frame.f_trace_lines = True

    def _trace_new(self, frame: Any, event: str, arg: Any) -> Any:
        """sys.settrace's function: the learner's new frames get the line tracer."""
        if self.done or not _learners_code(frame.f_code.co_filename):
            return None
        return self._trace_line

    def _trace_line(self, frame: Any, event: str, arg: Any) -> Any:
        """A frame's tracer: after an exception passed, the first line that runs (a handler's) raises again."""
        if self.done or self.left:
            return None
        if event == "exception":
            self.in_flight.add(frame)
        elif event == "return":
            self.in_flight.discard(frame)
        elif event == "line" and frame in self.in_flight and frame.f_lineno not in _with_lines(frame.f_code):
            self.in_flight.discard(frame)
            if _caught_again_here(frame.f_code, frame.f_lasti):
                self._kick_soon()
            raise _OutOfTime  # CPython now switches this tracer off; _profile switches it on again
        return self._trace_line

    def _kick_soon(self) -> None:
        """The next kick now rather than in ``_KICK_EVERY`` s: an enclosing handler of the same frame is about to
        swallow the exception the tracer raises (the tracer is off by then; a kick turns it on again)."""
        if self.how == "alarm":
            signal.setitimer(signal.ITIMER_REAL, 1e-4)
        else:
            self.urgent = True
            self.stop_event.set()

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        """sys.setprofile's function: never raises, so CPython keeps it on; it puts the tracer back on (after the
        tracer raised) when a frame is left or a function is called."""
        if self.done:
            return
        if event in ("call", "return") and frame.f_back is self.owner:  # the checker calls, or gets back, the code
            with self.lock:
                self.left = event == "return"
                if self.left and self.how == "thread":  # nothing raised late may reach the checker's own code
                    _drain_async_exc()
            return
        if self.left:
            return
        if sys.gettrace() is not self._trace_new:
            sys.settrace(self._trace_new)
        where = frame.f_back if event in ("return", "exception") else frame  # where the exception goes next
        if (where is not None and where.f_trace is not self._trace_line and _learners_code(where.f_code.co_filename)
                and _on_stack(self.owner, where)):
            self._trace(where)


def _mechanism(prefer: str | None = None) -> str:
    """``"alarm"`` in the main thread on Unix when no other timer is running (a pytest-timeout alarm, say),
    ``"thread"`` on CPython otherwise, ``"none"`` where neither works."""
    if prefer is not None:
        return prefer
    if (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)):
        return "alarm"
    if sys.implementation.name == "cpython":
        return "thread"
    return "none"


def _on_stack(frame: Any, here: Any = None) -> bool:
    """Whether ``frame`` is ``here`` or one of its callers (default: the caller's stack)."""
    here = sys._getframe(1) if here is None else here
    while here is not None:
        if here is frame:
            return True
        here = here.f_back
    return False


def _stop(limit: _Limit) -> None:
    """Stop ``limit`` even if an exception pending from its last kick arrives meanwhile."""
    while True:
        try:
            limit.stop()
            break
        except _OutOfTime:
            pass


@contextmanager
def time_limit(seconds: float | None = None, what: str = "your code", mechanism: str | None = None) -> Iterator[None]:
    """Stop the code in the ``with`` block after ``seconds`` (default :data:`TIME_LIMIT`) with a :class:`Mistake`
    that suggests an endless loop. Nested limits: the outermost one rules. ``seconds <= 0`` turns the limit off.

    Two mechanisms (``mechanism``, chosen by default as :func:`_mechanism` says):

    * ``"alarm"``: SIGALRM, main thread on Unix. It interrupts pure-Python loops and sleeps alike (``time.sleep``
      and most blocking calls return early when a signal arrives).
    * ``"thread"``: a watchdog thread raises in this thread (CPython's ``PyThreadState_SetAsyncExc``): any thread,
      any OS, but only between Python bytecodes. A long C call (``time.sleep(100)``, one huge matrix product,
      a blocking read) runs to its end first, since nothing can interrupt it from another thread; a loop of
      such calls stops after the call that is running.

    Code that swallows the timeout (``except:``, ``except BaseException:``, in a loop, around a sleep, in a handler
    that loops, in functions that call each other, in recursion, inside a ``with`` block) is stopped too, within
    milliseconds of the deadline: after it, a tracer raises again on the first line of each of the learner's
    handlers that catches it (CPython switches a trace function off when it raises; a profile function switches
    it on again whenever a frame is left or entered), and the deadline is repeated every ``_KICK_EVERY`` seconds.
    The learner's ``with`` blocks still get their ``__exit__``; the checker's, the harness's and the libraries'
    frames are never traced or raised in (except by the deadline itself, as before). Limits, honestly:

    * two swallowing ``try`` blocks nested in *one* function, around a loop, may not be stopped: the outer handler
      swallows what the inner one re-raises while the tracer is off, and the next kick (at once) has to land in
      the right place. Measured: from milliseconds to 4 s with the alarm, and with the watchdog thread either
      milliseconds or never, depending on the Python version and on how the loop is laid out;
    * CPython 3.10 handles signals and other threads at a loop's backward jump only when the next instruction is
      not the start of a ``try``: ``while True: try: x += 1 / except: pass`` (no call in the body) is never
      interrupted there, by either mechanism (3.11 and later are fine);
    * the ``"thread"`` mechanism cannot cut a C call short (above).

    When the block ends, SIGALRM's handler, the interval timer, ``sys.gettrace()`` / ``sys.getprofile()`` (a
    debugger's or coverage's) are as they were, and no asynchronous exception is left pending. If the deadline
    passed, the block ends with the :class:`Mistake` even when the learner's code swallowed the timeout and
    returned."""
    seconds = TIME_LIMIT if seconds is None else seconds
    outer: _Limit | None = getattr(_active, "limit", None)
    if outer is not None and not outer.done and not _on_stack(outer.owner):
        _stop(outer)  # a limit whose block was left without its cleanup (a kick arriving just as it ended)
        _active.limit = outer = None
    how = _mechanism(mechanism)
    if seconds <= 0 or how == "none" or (outer is not None and not outer.done):
        yield
        return
    owner = sys._getframe(1)
    while owner is not None and owner.f_code.co_filename == _CONTEXTLIB:
        owner = owner.f_back  # contextlib's __enter__, then the frame that holds the `with`
    limit = _Limit(seconds, how, owner)
    _active.limit = limit
    caught: BaseException | None = None
    try:
        try:
            limit.start()
            yield
        except GeneratorExit:
            raise
        except BaseException as exc:
            if not (isinstance(exc, _OutOfTime) or limit.expired):
                raise
            caught = exc  # the timeout, or what the learner's handler turned it into
    finally:
        _stop(limit)
        if getattr(_active, "limit", None) is limit:
            _active.limit = None
    if caught is not None or limit.expired:
        raise Mistake(_timeout_message(what, seconds)) from caught
