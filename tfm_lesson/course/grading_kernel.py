"""The kernel a submission runs in, from the grader's side: its kernel spec (the memory limit, one thread, the
package on the path: :func:`kernel_spec`), a restartable client that runs one cell at a time under the time limit
(:class:`Kernel`), and what a run cell printed or raised (:func:`cell_text`, :func:`cell_error`).
The kernel process itself is :mod:`tfm_lesson.course._grade_kernel`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .._io import PACKAGE


def cell_text(cell: Any) -> str:
    """What a run cell printed (its stream outputs, joined)."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
    return "".join(out)


def cell_error(cell: Any) -> str | None:
    """``"Name: value"`` of the exception a run cell raised; None when it raised none."""
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            return f"{o.get('ename')}: {o.get('evalue')}"
    return None


class Kernel:
    """A kernel for one submission, restartable; runs cells one at a time under the time limit. With ``sandbox``,
    the kernel runs inside :mod:`tfm_lesson.course.sandbox` (its scratch folder and the folder of its connection's
    sockets are under ``workdir``; it talks over Unix sockets, since it has no network)."""

    def __init__(self, kernel_dir: Path, workdir: Path, timeout: int, sandbox: bool = False):
        self.kernel_dir, self.workdir, self.timeout, self.sandbox = kernel_dir, workdir, timeout, sandbox
        self.client: Any = None
        self.context: Any = None

    def _sandboxed_spec(self) -> Path:
        """A copy of the kernel spec whose command runs in the sandbox; returns the folder that holds it."""
        from .sandbox import sandbox_command

        spec = json.loads((self.kernel_dir / "tfm-grade" / "kernel.json").read_text())
        scratch, sockets = self.workdir / "scratch", self.workdir / "sockets"
        for folder in (scratch, sockets):
            folder.mkdir(parents=True, exist_ok=True)
        spec["argv"] = sandbox_command(spec["argv"], scratch=scratch, shared=[sockets], env=spec.get("env", {}))
        spec["env"] = {}
        out = self.workdir / "spec"
        (out / "tfm-grade").mkdir(parents=True, exist_ok=True)
        (out / "tfm-grade" / "kernel.json").write_text(json.dumps(spec))
        return out

    def start(self) -> None:
        import nbformat
        from jupyter_client import AsyncKernelManager
        from jupyter_client.kernelspec import KernelSpecManager
        from nbclient import NotebookClient

        spec_dir = self._sandboxed_spec() if self.sandbox else self.kernel_dir
        km = AsyncKernelManager(kernel_name="tfm-grade", kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[str(spec_dir)], ensure_native_kernel=False))
        if self.sandbox:  # Unix sockets in a folder both sides see
            km.transport = "ipc"
            km.ip = str(self.workdir / "sockets" / "kernel")
            km.connection_file = str(self.workdir / "sockets" / "connection.json")
        self.client = NotebookClient(nbformat.v4.new_notebook(), km=km, timeout=self.timeout, allow_errors=True,
                                     interrupt_on_timeout=False, shutdown_kernel="immediate", startup_timeout=120,
                                     resources={"metadata": {"path": str(self.workdir)}})
        # the kernel process's own warnings and connection notice: what the code prints comes over the connection
        self.context = self.client.setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.context.__enter__()

    def stop(self) -> None:
        if self.context is not None:
            try:
                self.context.__exit__(None, None, None)
            except Exception:  # a kernel that is already gone
                pass
            try:
                if self.client.km is not None and self.client.km.has_kernel:
                    from jupyter_core.utils import run_sync

                    run_sync(self.client.km.shutdown_kernel)(now=True)
            except Exception:
                pass
        self.client = self.context = None

    def run(self, source: str) -> Any:
        """Run one cell; returns it with its outputs. Raises CellTimeoutError or DeadKernelError."""
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        self.client.nb.cells.append(cell)
        self.client.execute_cell(cell, len(self.client.nb.cells) - 1)
        return cell


def kernel_spec(directory: Path, memory_mb: int, timeout: int) -> None:
    """Write the ``tfm-grade`` kernel spec into ``directory``: the kernel process under ``memory_mb`` MB (0: no
    limit), the checkers' own time limit a little under ``timeout``, the package importable."""
    spec = directory / "tfm-grade"
    spec.mkdir(parents=True, exist_ok=True)
    env = {"TFM_CHECK_TIME_LIMIT": str(max(1, timeout - 5)), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "MPLBACKEND": "Agg", "TFM_DEVICE": os.environ.get("TFM_DEVICE", "cpu"),
           "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent),  # the folder holding this tfm_lesson
                                          *filter(None, [os.environ.get("PYTHONPATH", "")])])}
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "tfm_lesson.course._grade_kernel", "--memory-mb", str(memory_mb),
                 "-f", "{connection_file}"],
        "display_name": "tfm_lesson grader", "language": "python", "env": env}))
