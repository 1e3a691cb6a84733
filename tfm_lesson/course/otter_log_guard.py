"""Otter-Grader's log server, kept from hanging a grading run on a stray local connection.

While Otter grades a notebook it listens on a local TCP port for the grading kernel's own log records (read in
otter-grader 7.0.0): ``grade_notebook`` always starts the server (otter/execute/__init__.py, line 85:
``start_server()``; no configuration key turns it off) and the kernel's first cell sends Otter's records there
(otter/execute/preprocessor.py, line 30: ``logging.send_logs(host, port)``, a ``logging.handlers.SocketHandler``:
each record a 4-byte big-endian length, then the pickle of the record's dict, in one ``sendall``). The server's
handler (otter/execute/logging.py, lines 36-53, ``LogRecordStreamHandler.handle``) takes any local connection, reads
4 bytes as a length and waits for that many bytes, in a thread the process waits for before it exits (lines 96-108:
``socketserver.ThreadingTCPServer``, non-daemon threads). A stray client (a ZMQ socket reconnecting to a port it once
used: its greeting ``ff 00 00 00 ...`` reads as a length of 4278190074 bytes) so keeps ``otter run``, or an
autograder on Gradescope, from ever ending; once that client closes, the handler loops on empty reads.

The records are Otter's diagnostics (``otter -v run`` shows them, filtered by level in the grading process); grades
do not depend on them (grading from a student's log reads the ``.OTTER_LOG`` file instead). :func:`guard` keeps
them and drops what is not one: a length over :data:`MAX_RECORD`, a body that does not follow its length within
:data:`BODY_SECONDS`, bytes that are not a pickled dict naming no class; and makes the server's threads daemons, so
a connection that stays silent cannot hold the process at its exit.
"""
from __future__ import annotations

import io
import logging
import pickle
import socket
import struct
import sys

__all__ = ["BODY_SECONDS", "MAX_RECORD", "guard"]

MAX_RECORD = 1 << 20  # bytes: a pickled record's dict is hundreds of bytes, a traceback in its message a few KB
BODY_SECONDS = 10.0  # a record's bytes come right after its length (the sender's single sendall)


def _say(text: str) -> None:
    print(f"tfm_lesson log guard: {text}", file=sys.stderr, flush=True)


def _read(conn: socket.socket, size: int) -> bytes | None:
    """Exactly ``size`` bytes from ``conn``, or None when the peer closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 16))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class _RecordOnly(pickle.Unpickler):
    """A SocketHandler's record is a dict of strings and numbers: a pickle that names a class is not one."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"names {module}.{name}")


def _record(body: bytes) -> dict | None:
    try:
        obj = _RecordOnly(io.BytesIO(body)).load()
    except Exception:  # noqa: BLE001 - whatever the bytes are, they are no log record
        return None
    return obj if isinstance(obj, dict) else None


def _guarded_handle(self) -> None:
    """``LogRecordStreamHandler.handle`` with limits: log each record the connection sends; drop the connection at
    the first thing that is not a record."""
    conn = self.connection

    def drop(why: str) -> None:
        _say(f"Otter's log server dropped a local connection from {self.client_address}: {why}")

    while True:
        try:
            head = _read(conn, 4)  # no time limit: the kernel's handler stays quiet while a cell trains
        except OSError:  # the peer reset the connection
            return
        if head is None:
            return
        size = struct.unpack(">L", head)[0]
        if not 0 < size <= MAX_RECORD:
            return drop(f"a record length of {size} bytes (at most {MAX_RECORD})")
        conn.settimeout(BODY_SECONDS)
        try:
            body = _read(conn, size)
        except TimeoutError:
            return drop(f"the record's {size} bytes did not come within {BODY_SECONDS:g} s")
        except OSError:
            return
        finally:
            conn.settimeout(None)
        if body is None:
            return
        record = _record(body)
        if record is None:
            return drop(f"{size} bytes that are not a pickled log record")
        self.handle_log_record(logging.makeLogRecord(record))


def guard() -> bool:
    """Put the limits into this process's Otter (its log server's handler and threads); True if they are in, False
    where Otter is not installed or its log server is not the one described above (then nothing is changed)."""
    try:
        from otter.execute import logging as served
    except ImportError:
        return False
    handler = getattr(served, "LogRecordStreamHandler", None)
    server = getattr(served, "LogRecordSocketReceiver", None)
    if handler is None or server is None or not hasattr(handler, "handle_log_record"):
        _say("Otter's log server is not the one this guard knows (otter-grader 7.0.0): left as it is")
        return False
    handler.handle = _guarded_handle
    server.daemon_threads = True
    return True
