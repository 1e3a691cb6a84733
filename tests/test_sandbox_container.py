"""The container sandbox (tfm_lesson/course/sandbox_container.py): in a Podman or Docker container, code reaches
what it does in bubblewrap and nothing more, and nothing it starts outlives its container. Skipped, with the
engine's reason, where the engine cannot run a container here (not installed, no daemon, not root)."""
from __future__ import annotations

import time

import pytest

from test_sandbox import probe_reaches_only_its_scratch_folder
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
    name = f"tfm-grade-test-{engine}-{int(time.time())}"
    probe_reaches_only_its_scratch_folder(
        tmp_path, lambda argv, scratch: container_command(engine, argv, scratch=scratch, shared=[], env={}, name=name,
                                                          root=tmp_path / "root", processes=64, memory_mb=2048),
        cleanup=lambda: remove(engine, name))


def test_auto_names_every_sandbox_it_tried(tmp_path, monkeypatch):
    """Nothing to be had (a PATH without bubblewrap, Podman or Docker): each one's reason and the way out."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*podman.*docker.*--no-sandbox"):
        choose("auto")
