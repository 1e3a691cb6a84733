"""The container sandbox (tfm_lesson/course/sandbox_container.py): in a Podman or Docker container, code reaches
what it does in bubblewrap and nothing more, and nothing it starts outlives its container. Skipped, with the
engine's reason, where the engine cannot run a container here (not installed, no daemon, not root)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from test_sandbox import PROBE
from tfm_lesson.course.sandbox import SandboxUnavailable
from tfm_lesson.course.sandbox_container import check_engine, choose, container_command, remove


def _why(engine: str) -> str | None:
    try:
        check_engine(engine)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_code_in_a_container_reaches_only_its_scratch_folder_and_the_package(tmp_path, engine):
    why = _why(engine)
    if why is not None:
        pytest.skip(why)
    secret, outside, scratch = tmp_path / "grades.csv", tmp_path / "grader", tmp_path / "scratch"
    secret.write_text("student,score\n")
    outside.mkdir()
    scratch.mkdir()
    (scratch / "probe.py").write_text(PROBE)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    late, name = scratch / "late.txt", f"tfm-grade-test-{engine}-{int(time.time())}"
    try:
        argv = [sys.executable, "probe.py", str(secret), str(ROOT / "notebooks"), str(outside),
                str(server.getsockname()[1]), str(late)]
        command = container_command(engine, argv, scratch=scratch, shared=[], env={}, name=name,
                                    root=tmp_path / "root", processes=64, memory_mb=2048)
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        server.close()
        remove(engine, name)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["scratch"] and seen["package"]
    assert not seen["secret"] and not seen["chapter"] and not seen["write_outside"] and not seen["network"]
    assert len(seen["processes"]) <= 3, seen["processes"]  # its own: not the grader's
    assert list(outside.iterdir()) == []
    time.sleep(5)
    assert not late.exists(), "a process started in the container outlived it"


def test_auto_names_every_sandbox_it_tried(tmp_path, monkeypatch):
    """Nothing to be had (a PATH without bubblewrap, Podman or Docker): each one's reason and the way out."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*podman.*docker.*--no-sandbox"):
        choose("auto")
