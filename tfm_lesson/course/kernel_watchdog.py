"""A time limit a cell cannot swallow: a watchdog that lives outside the Jupyter kernel.

A limit set inside the kernel (a ``SIGALRM`` timer, an interrupt) arrives as an exception in the learner's code, and
``while True: try: time.sleep(.1) / except BaseException: pass`` catches it and runs on. :class:`KernelWatchdog` is a
thread of the grading tool's own process (``otter run``, a test): it finds the kernel that process started, listens
to the kernel's IOPub channel, where the kernel itself announces each execution's start (``busy``) and end
(``idle``), and when one execution runs past ``seconds`` it first interrupts the kernel (``SIGINT``, as nbclient's
own timeout does: an ordinary endless loop stops there and the next cells run) and, if the kernel is still busy
``grace`` seconds later, kills the kernel's whole process group (``SIGKILL``, which no handler can catch). The tool
then sees a dead kernel (under Otter, :mod:`tfm_lesson.course.otter_rerun` runs the notebook again without that
cell). POSIX only (the signals); :mod:`psutil` (an ipykernel dependency) finds the kernel.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from queue import Empty
from typing import Callable

__all__ = ["GRACE", "KernelWatchdog"]

GRACE = 5.0  # seconds an interrupted cell has to unwind before its kernel is killed


def _say(text: str) -> None:
    print(f"tfm_lesson watchdog: {text}", file=sys.stderr, flush=True)


def _connection_file(cmdline: list[str]) -> str | None:
    """The ``-f FILE.json`` of a kernel's command line (how jupyter_client starts every kernel), else None."""
    for flag, value in zip(cmdline, cmdline[1:]):
        if flag in ("-f", "--f") and value.endswith(".json"):
            return value
    return next((a.split("=", 1)[1] for a in cmdline if a.startswith("--f=") and a.endswith(".json")), None)


def _alive(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class KernelWatchdog:
    """Watch the kernels started by process ``parent`` (default: this one) and stop any execution that runs past
    ``seconds``: ``SIGINT`` at the limit, ``SIGKILL`` to the kernel's process group ``grace`` seconds later if it
    is still busy. ``events`` lists what it did, one line each; ``say`` reports each line as it happens."""

    def __init__(self, seconds: float, grace: float = GRACE, parent: int | None = None,
                 say: Callable[[str], None] = _say):
        if not seconds > 0:
            raise ValueError(f"KernelWatchdog: seconds must be > 0, got {seconds}")
        if not grace >= 0:
            raise ValueError(f"KernelWatchdog: grace must be >= 0, got {grace}")
        self.seconds, self.grace = float(seconds), float(grace)
        self.parent = os.getpid() if parent is None else parent
        self.events: list[str] = []
        self.kills = 0  # kernels killed so far
        self._say = say
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfm_lesson-kernel-watchdog", daemon=True)

    def start(self) -> KernelWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _note(self, text: str) -> None:
        self.events.append(text)
        self._say(text)

    def _find_kernel(self, seen: set[int]):
        """A kernel (a child process started with ``-f connection.json``) of ``parent`` not watched yet."""
        import psutil

        try:
            children = psutil.Process(self.parent).children(recursive=False)
        except psutil.Error:
            return None, None
        for child in children:
            try:
                path = _connection_file(child.cmdline())
            except psutil.Error:
                continue
            if child.pid not in seen and path and Path(path).is_file():
                return child, path
        return None, None

    def _run(self) -> None:
        seen: set[int] = set()
        while not self._stop.is_set():
            kernel, path = self._find_kernel(seen)
            if kernel is None:
                self._stop.wait(0.05)
                continue
            seen.add(kernel.pid)
            try:
                self._watch(kernel, path)
            except Exception as exc:  # noqa: BLE001 - a watchdog that dies silently would let a run hang
                self._note(f"could not watch kernel {kernel.pid} ({type(exc).__name__}: {exc})")

    def _watch(self, kernel, path: str) -> None:
        """Follow one kernel's executions on its IOPub channel until it ends (or the watchdog stops)."""
        import zmq
        from jupyter_client import BlockingKernelClient

        context = zmq.Context()
        client = BlockingKernelClient(context=context)
        client.load_connection_file(path)
        client.start_channels(shell=False, iopub=True, stdin=False, hb=False, control=False)
        current, started, interrupted, done = None, 0.0, None, set()
        try:
            while not self._stop.is_set() and _alive(kernel):
                try:
                    msg = client.iopub_channel.get_msg(timeout=0.05)
                except Empty:
                    msg = None
                parent = (msg or {}).get("parent_header") or {}
                if parent.get("msg_type") == "execute_request" and parent.get("msg_id") not in done:
                    if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                        done.add(parent["msg_id"])
                        current, interrupted = (None, None) if current == parent["msg_id"] else (current, interrupted)
                    elif current != parent["msg_id"]:  # an execution began (busy, execute_input or its output)
                        current, started, interrupted = parent["msg_id"], time.monotonic(), None
                now = time.monotonic()
                if current is not None and interrupted is None and now - started > self.seconds:
                    self._note(f"a cell ran past the {self.seconds:g} s limit: interrupted (kernel {kernel.pid})")
                    os.kill(kernel.pid, signal.SIGINT)
                    interrupted = now
                elif interrupted is not None and now - interrupted > self.grace:
                    self.kills += 1
                    self._note(f"the cell went on {self.grace:g} s after the interrupt (it catches it): kernel "
                               f"{kernel.pid} killed")
                    self._kill(kernel)
                    return
        finally:
            client.stop_channels()
            context.destroy(linger=0)

    @staticmethod
    def _kill(kernel) -> None:
        """SIGKILL the kernel and everything it started (its process group when it leads one, as jupyter_client
        starts kernels; else the kernel and its descendants)."""
        import psutil

        try:
            group = os.getpgid(kernel.pid)
            if group == kernel.pid and group != os.getpgid(0):
                os.killpg(group, signal.SIGKILL)
                return
            for proc in [*kernel.children(recursive=True), kernel]:
                proc.kill()
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
