"""The grader's sandbox (tfm_lesson/course/sandbox.py): what code inside it can and cannot reach."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT
from tfm_lesson.course.sandbox import SandboxUnavailable, check_sandbox, sandbox_command

try:
    check_sandbox()
    HAVE_BWRAP = True
except SandboxUnavailable as exc:
    HAVE_BWRAP, WHY = False, str(exc)

needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here (see check_sandbox)")

PROBE = textwrap.dedent("""
    import json, os, socket, subprocess, sys
    seen = {}
    def attempt(name, f):
        try:
            f()
            seen[name] = True
        except Exception:
            seen[name] = False
    attempt("secret", lambda: open(sys.argv[1]).read())
    attempt("chapter", lambda: os.listdir(sys.argv[2]))
    attempt("write_outside", lambda: open(os.path.join(sys.argv[3], "planted.txt"), "w").write("x"))
    attempt("network", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[4])), timeout=2))
    attempt("scratch", lambda: open("mine.txt", "w").write("x"))
    attempt("package", lambda: __import__("tfm_lesson"))
    seen["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    # a process that tries to outlive the grade and write after it
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(4); open(%r, 'w').write('late')" % sys.argv[5]],
                     start_new_session=True)
    print(json.dumps(seen), flush=True)
    os._exit(0)  # at once: the late process must find the sandbox gone, not a slow interpreter shutdown
""")


def probe_reaches_only_its_scratch_folder(tmp_path, command, cleanup=lambda: None) -> None:
    """Run PROBE through ``command(argv, scratch)`` (a sandbox's command line): it sees its scratch folder and the
    package, not a secret file, the chapter, the network or the grader's processes, writes nothing outside, and
    nothing it started outlives it."""
    import socket

    secret, outside, scratch = tmp_path / "grades.csv", tmp_path / "grader", tmp_path / "scratch"
    secret.write_text("student,score\n")
    outside.mkdir()
    scratch.mkdir()
    (scratch / "probe.py").write_text(PROBE)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    late = scratch / "late.txt"
    try:
        argv = [sys.executable, "probe.py", str(secret), str(ROOT / "notebooks"), str(outside),
                str(server.getsockname()[1]), str(late)]
        done = subprocess.run(command(argv, scratch), capture_output=True, text=True, timeout=120)
    finally:
        server.close()
        cleanup()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["scratch"] and seen["package"]
    assert not seen["secret"] and not seen["chapter"] and not seen["write_outside"] and not seen["network"]
    assert len(seen["processes"]) <= 3, seen["processes"]  # its own (bwrap or the container, python)
    assert list(outside.iterdir()) == []
    time.sleep(5)
    assert not late.exists(), "a process started in the sandbox outlived it"


@needs_bwrap
def test_code_in_the_sandbox_reaches_only_its_scratch_folder_and_the_package(tmp_path):
    probe_reaches_only_its_scratch_folder(tmp_path, lambda argv, scratch: sandbox_command(argv, scratch=scratch))


def test_without_bubblewrap_the_reason_and_the_way_out_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without bwrap
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*not installed.*--no-sandbox"):
        sandbox_command(["true"], scratch=tmp_path)


def test_a_bwrap_that_cannot_make_namespaces_is_refused_with_its_words(tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace.*--no-sandbox"):
        check_sandbox(bwrap=str(fake))


REMOUNT = """\
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
package = sys.argv[1]
# MS_REMOUNT | MS_BIND | MS_RDONLY off: make the read-only package folder writable (what root with CAP_SYS_ADMIN can)
rc = libc.mount(b"none", package.encode(), None, 32 | 4096 | 2 | 4, None)
caps = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")][0]
big = 0
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(2048):
            f.write(b"0" * (1 << 20))
            big += 1
except OSError:
    pass
print(json.dumps({"mount": rc, "uid": os.getuid(), "caps": caps, "package_writable": os.access(package, os.W_OK),
                  "tmp_megabytes": big}))
"""


@needs_bwrap
def test_no_right_to_remount_whoever_runs_the_grader(tmp_path):
    """Even when the grader runs as root (as in CI), the code runs as nobody with no capability: a remount of the
    read-only package is refused, and the private /tmp holds at most TMP_BYTES."""
    from tfm_lesson.course.sandbox import TMP_BYTES

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "remount.py").write_text(REMOUNT)
    argv = [sys.executable, "remount.py", str(ROOT / "tfm_lesson")]
    done = subprocess.run(sandbox_command(argv, scratch=scratch), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["mount"] == -1 and not seen["package_writable"]
    assert seen["uid"] == 65534 and int(seen["caps"], 16) == 0
    assert seen["tmp_megabytes"] <= TMP_BYTES >> 20
