"""The guard on Otter-Grader's log server (tfm_lesson/course/otter_log_guard.py), which the exported Otter plugin puts
into `otter run`'s process: Otter's real log records still arrive, a stray local client is dropped, and a silent one
cannot hold the process at its exit; and, in a real `otter run` of an exported chapter, a client that sends a ZMQ
greeting to Otter's log server and keeps its connection open no longer hangs the run.

Read against otter-grader 7.0.0 (`pip show otter-grader`): otter/execute/logging.py (the server and its handler),
otter/execute/__init__.py line 85 (``grade_notebook`` starts it), otter/execute/preprocessor.py line 30 (the kernel
sends its records there). Without the guard, test_a_zmq_greeting_does_not_hang_otter_run's `otter run` printed its
scores and then never ended (killed at the time limit), and test_a_silent_client_does_not_hold_the_exit's process
waited for ever at its exit."""
from __future__ import annotations

import json
import logging
import logging.handlers
import pickle
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections import OrderedDict

import nbformat
import pytest

pytest.importorskip("otter")

from tfm_lesson.course.otter_log_guard import MAX_RECORD, guard  # noqa: E402

GREETING = b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f"  # a ZMTP 3 greeting's first bytes: a length of 0xff000000


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def server():
    """Otter's own log server, guarded, and what its logger ``tfm_lesson_test.guard`` receives."""
    from otter import logging as otter_logging
    from otter.execute.logging import start_server

    assert guard()
    kept = _Kept()
    otter_logging.get_logger("tfm_lesson_test.guard").addHandler(kept)
    (host, port), stop = start_server()
    yield (host, port), kept
    stop()
    otter_logging.get_logger("tfm_lesson_test.guard").removeHandler(kept)


def _send_record(address, message: str) -> None:
    """A WARNING record sent as the grading kernel sends Otter's: through a logging SocketHandler."""
    sender = logging.handlers.SocketHandler(*address)
    record = logging.LogRecord("tfm_lesson_test.guard", logging.WARNING, __file__, 1, message, None, None)
    sender.handle(record)
    sender.close()


def _arrives(kept: _Kept, message: str, seconds: float = 10) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if message in kept.messages:
            return True
        time.sleep(0.02)
    return False


def _dropped(client: socket.socket, seconds: float = 10) -> bool:
    """Whether the server closes ``client``'s connection within ``seconds``."""
    client.settimeout(seconds)
    try:
        return client.recv(1) == b""
    except TimeoutError:
        return False


def test_real_records_still_arrive(server):
    address, kept = server
    _send_record(address, "a record through the guarded server")
    _send_record(address, "x" * 100_000)  # a long message (a traceback) is still a record
    assert _arrives(kept, "a record through the guarded server") and _arrives(kept, "x" * 100_000)


def test_a_zmq_greeting_is_dropped_and_the_server_goes_on(server, capfd):
    address, kept = server
    with socket.create_connection(address) as client:
        client.sendall(GREETING)  # then waits, connection open, for the other side's greeting
        assert _dropped(client)
    assert "a record length of 4278190080 bytes" in capfd.readouterr().err
    _send_record(address, "after the stray client")
    assert _arrives(kept, "after the stray client")


@pytest.mark.parametrize("payload", [
    struct.pack(">L", MAX_RECORD + 1),  # a length over the limit
    struct.pack(">L", 4) + b"\x00\x01\x02\x03",  # 4 bytes that are no pickle
    (lambda body: struct.pack(">L", len(body)) + body)(pickle.dumps(OrderedDict(msg="names a class"), 1)),
    (lambda body: struct.pack(">L", len(body)) + body)(pickle.dumps(["a list, not a record's dict"], 1)),
], ids=["too-long", "not-a-pickle", "names-a-class", "not-a-dict"])
def test_what_is_no_record_is_dropped_unlogged(server, payload):
    address, kept = server
    with socket.create_connection(address) as client:
        client.sendall(payload)
        assert _dropped(client)
    assert kept.messages == []


def test_a_body_that_does_not_come_is_dropped(server, monkeypatch):
    import tfm_lesson.course.otter_log_guard as guarded

    monkeypatch.setattr(guarded, "BODY_SECONDS", 0.5)
    address, _ = server
    with socket.create_connection(address) as client:
        client.sendall(struct.pack(">L", 200) + b"}")  # a record's length, then one byte of it, then nothing
        assert _dropped(client)


SILENT = textwrap.dedent("""\
    import socket, time
    from tfm_lesson.course.otter_log_guard import guard
    assert guard()
    from otter.execute.logging import start_server
    (host, port), stop = start_server()
    client = socket.create_connection((host, port))  # connects, sends nothing, stays open
    time.sleep(2.5)  # the server's loop (a select of 1 s) accepts it
    stop()
    print("stopped", flush=True)
""")


def test_a_silent_client_does_not_hold_the_exit():
    """A connection that sends nothing keeps its handler thread waiting: a daemon thread, the process still ends."""
    run = subprocess.run([sys.executable, "-c", SILENT], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "stopped" in run.stdout, run.stdout + run.stderr


def _listening(pid: int) -> set[tuple[str, int]]:
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


@pytest.mark.slow
def test_a_zmq_greeting_does_not_hang_otter_run(tmp_path):
    """Chapter 03 exported for Otter; while `otter run` grades its solution, a client connects to every port that
    `otter run`'s process listens on (Otter's log server picks a free one: otter/execute/logging.py, port 0), sends
    a ZMQ greeting and keeps the connection open. The run ends with its normal results, the guard reports the drop,
    and `-v` still shows the kernel's own records (Notebook.check's "Running check", sent through the log server)."""
    from test_export import _env, _exercises_only, _tool, otter_assigned

    pytest.importorskip("psutil")
    nbformat.write(_exercises_only(), tmp_path / "ch.ipynb")
    dist, autograder = otter_assigned(tmp_path / "ch.ipynb", tmp_path / "otter", 120)
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.Popen([str(_tool("otter")), "run", "-v", "-a", str(autograder), "-o", str(out),
                            str(dist / "autograder" / "ch.ipynb")], cwd=tmp_path, env=_env(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    clients: dict[tuple[str, int], socket.socket] = {}
    dropped = set()
    try:
        end = time.monotonic() + 420
        while run.poll() is None and time.monotonic() < end:
            for address in _listening(run.pid) - set(clients):
                clients[address] = socket.create_connection(address, timeout=5)
                clients[address].sendall(GREETING)
                clients[address].setblocking(False)
            for address, client in clients.items():
                try:
                    if client.recv(1) == b"":
                        dropped.add(address)
                except (BlockingIOError, ConnectionError):
                    pass
            time.sleep(0.02)
        assert run.poll() is not None, f"otter run still running after 420 s, connected to {sorted(clients)}"
        text = run.communicate()[0]
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        for client in clients.values():
            client.close()
    assert clients, "the log server was never seen listening while `otter run` graded"
    assert run.returncode == 0, text[-3000:]
    assert dropped == set(clients), (clients, dropped)
    assert "Otter's log server dropped a local connection" in text and "4278190080 bytes" in text, text[-3000:]
    assert "Running check for question: ex1" in text, text[-3000:]
    tests = {t["name"]: t for t in json.loads((out / "results.json").read_text())["tests"]}
    assert [tests[f"ex{n}"]["score"] for n in (1, 2, 3)] == [3, 3, 3]
