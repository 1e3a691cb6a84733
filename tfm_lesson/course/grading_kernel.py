"""The kernel a submission runs in, from the grader's side: its kernel spec (the memory limit, one thread, the
package on the path: :func:`kernel_spec`), a restartable client that runs one cell at a time under the time limit
(:class:`Kernel`, which keeps at most :data:`MAX_CELL_OUTPUT` of a cell's output), and what a run cell printed or
raised (:func:`cell_text`, :func:`cell_error`); one kernel tried before a class is graded (:func:`check_kernel`), and
the kernels of a class, stopped together on Ctrl-C (:class:`KernelGroup`).
The kernel process itself is :mod:`tfm_lesson.course._grade_kernel`."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from .._io import PACKAGE
from .cells import CourseError

DEFAULT_MEMORY_MB = 4096  # address space of the kernel (torch alone maps about 1 GB)
MAX_CELL_OUTPUT = 1024 * 1024  # characters of output the grader keeps of one cell; the rest is dropped, said in notes
KEPT_TAIL = 64 * 1024  # of what is dropped, the end of the printed text is kept (a check's verdict comes last)
DROPPED_KEY = "tfm_dropped_output"  # a run cell's metadata: how much of its output was dropped


def _capped_client(**kwargs: Any) -> Any:
    """An nbclient ``NotebookClient`` that keeps at most :data:`MAX_CELL_OUTPUT` of each cell's output (errors are
    always kept) and, past it, only the last :data:`KEPT_TAIL` of the printed text: an answer that prints a gigabyte
    costs the grader no memory."""
    from nbclient import NotebookClient

    class Capped(NotebookClient):
        def output(self, outs: list, msg: dict, display_id: str | None, cell_index: int) -> Any:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "error":
                return super().output(outs, msg, display_id, cell_index)
            text = content.get("text", "") if kind == "stream" else ""
            size = len(text) if kind == "stream" else len(json.dumps(content.get("data", {})))
            state = self.tfm_output.setdefault(cell_index, {"kept": 0, "dropped": 0, "tail": "", "name": "stdout"})
            room = MAX_CELL_OUTPUT - state["kept"]
            if size <= room:
                state["kept"] += size
                return super().output(outs, msg, display_id, cell_index)
            kept = None
            if kind == "stream":
                if room > 0:  # the head of the text, up to the limit
                    state["kept"] += room
                    kept = super().output(outs, {**msg, "content": {**content, "text": text[:room]}}, display_id,
                                          cell_index)
                    text = text[room:]
                state["tail"] = (state["tail"] + text[-KEPT_TAIL:])[-KEPT_TAIL:]
                state["name"] = content.get("name", "stdout")
                size = len(text)
            state["dropped"] += size
            return kept

        def _update_display_id(self, display_id: str, msg: dict) -> None:
            if len(json.dumps(msg["content"].get("data", {}))) <= MAX_CELL_OUTPUT:  # a bigger update is dropped
                super()._update_display_id(display_id, msg)

    client = Capped(**kwargs)
    client.tfm_output = {}
    return client


def _manager(container: bool) -> Any:
    """jupyter_client's kernel manager; for a container, one that hands the connection file to its user (nobody),
    who could not read it otherwise (it is written readable by its owner only)."""
    from jupyter_client import AsyncKernelManager

    if not container:
        return AsyncKernelManager

    class Handing(AsyncKernelManager):
        def write_connection_file(self, **kwargs: Any) -> None:
            super().write_connection_file(**kwargs)
            from .sandbox_container import USER

            os.chown(self.connection_file, USER, USER)

    return Handing


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

    def __init__(self, kernel_dir: Path, workdir: Path, timeout: int, sandbox: bool = False,
                 limits: Any = None, disk: Any = None):
        self.kernel_dir, self.workdir, self.timeout, self.sandbox = kernel_dir, workdir, timeout, sandbox
        self.limits, self.disk = limits, disk  # sandbox_limits.Limits and ScratchDisk: caps on the whole submission
        self.client: Any = None
        self.context: Any = None
        self.guard: Any = None
        self.engine = sandbox if sandbox in ("podman", "docker") else None  # else bubblewrap (or no sandbox)
        self.container: str | None = None  # the running container's name

    def _own_spec(self) -> Path:
        """A copy of the kernel spec whose command runs in the sandbox and the cgroups of ``self.guard``; returns
        the folder that holds it."""
        spec = json.loads((self.kernel_dir / "tfm-grade" / "kernel.json").read_text())
        argv = spec["argv"]
        if self.sandbox:
            from .sandbox import sandbox_command
            from .sandbox_container import container_command

            scratch, sockets = self.workdir / "scratch", self.workdir / "sockets"
            for folder in (scratch, sockets):
                folder.mkdir(parents=True, exist_ok=True)
            if self.engine is not None:  # a Podman or Docker container, capped by its own cgroup
                self.container = f"tfm-grade-{os.getpid()}-{secrets.token_hex(6)}"
                caps = (self.limits.processes, self.limits.memory_mb) if self.limits is not None else (0, 0)
                argv = container_command(self.engine, argv, scratch=scratch, shared=[sockets], env=spec.get("env", {}),
                                         name=self.container, root=self.workdir / "root", processes=caps[0],
                                         memory_mb=caps[1])
            else:
                if self.limits is not None:  # the sandbox's own rlimits (the kernel's flags come before its -f)
                    argv = [*argv[:-2], "--processes", str(self.limits.processes), "--file-mb",
                            str(self.limits.disk_mb), *argv[-2:]]
                argv = sandbox_command(argv, scratch=scratch, shared=[sockets], env=spec.get("env", {}))
            spec["env"] = {}
        spec["argv"] = self.guard.wrap(argv) if self.guard is not None else argv
        out = self.workdir / "spec"
        (out / "tfm-grade").mkdir(parents=True, exist_ok=True)
        (out / "tfm-grade" / "kernel.json").write_text(json.dumps(spec))
        return out

    def start(self) -> None:
        import nbformat
        from jupyter_client.kernelspec import KernelSpecManager
        if self.limits is not None:
            from .sandbox_limits import Guard

            if self.disk is not None and self.sandbox and self.disk.hit(self.limits):  # a restart after --disk
                self.disk.clear(self.workdir / "scratch")
            self.guard = Guard(self.limits, self.disk if self.sandbox else None, cgroups=self.engine is None)
        spec_dir = self._own_spec() if self.sandbox or self.guard is not None else self.kernel_dir
        km = _manager(self.engine is not None)(kernel_name="tfm-grade", kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[str(spec_dir)], ensure_native_kernel=False))
        if self.sandbox:  # Unix sockets in a folder both sides see
            km.transport = "ipc"
            km.ip = str(self.workdir / "sockets" / "kernel")
            km.connection_file = str(self.workdir / "sockets" / "connection.json")
        self.client = _capped_client(nb=nbformat.v4.new_notebook(), km=km, timeout=self.timeout, allow_errors=True,
                                     interrupt_on_timeout=False, shutdown_kernel="immediate", startup_timeout=120,
                                     resources={"metadata": {"path": str(self.workdir)}})
        # the kernel process's own warnings and connection notice: what the code prints comes over the connection
        self.context = self.client.setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.context.__enter__()
        except BaseException:
            if self.guard is not None:  # its cgroups go with the kernel that did not start
                self.guard.stop()
            raise
        if self.guard is not None:
            if self.engine is not None:  # the container's own cgroups, made by its engine
                from .sandbox_container import cgroup_folders
                from .sandbox_limits import Cgroups

                folders = cgroup_folders(self.engine, self.container)
                if folders:
                    self.guard.cgroups = Cgroups("v2" if "" in folders else "v1", folders, self.limits, owned=False)
            self.guard.start(getattr(getattr(km, "provisioner", None), "pid", None))

    def over_limit(self) -> str | None:
        """Why the kernel was killed for a cap on the whole submission (processes, memory in all, disk), else None."""
        return self.guard.reason() if self.guard is not None else None

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
        if self.guard is not None:
            self.guard.stop()
        if self.container is not None:  # gone with its kernel, or removed now with everything in it
            from .sandbox_container import remove

            remove(self.engine, self.container)
        self.client = self.context = self.guard = self.container = None

    def run(self, source: str) -> Any:
        """Run one cell; returns it with its outputs (at most :data:`MAX_CELL_OUTPUT` of them, then the end of what
        it printed; ``metadata[DROPPED_KEY]`` says how much was dropped). Raises CellTimeoutError or DeadKernelError."""
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        self.client.nb.cells.append(cell)
        index = len(self.client.nb.cells) - 1
        try:
            self.client.execute_cell(cell, index)
        finally:
            state = self.client.tfm_output.pop(index, None)
        if state and state["dropped"]:
            if state["tail"]:
                cell.outputs.append(nbformat.v4.new_output("stream", name=state["name"], text=state["tail"]))
            cell.metadata[DROPPED_KEY] = state["dropped"]
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


# before the class, and stopping it ----------------------------------------------------------------------------------
def _probe(kernel_dir: Path, timeout: int, sandbox: bool, limits: Any = None) -> str | None:
    """Why a kernel of ``kernel_dir``'s spec cannot start and import torch and the checkers; None when it can."""
    with tempfile.TemporaryDirectory(prefix="tfm-grade-probe-") as work:
        kernel = Kernel(kernel_dir, Path(work), timeout, sandbox=sandbox, limits=limits)
        try:
            kernel.start()
            return cell_error(kernel.run("import torch, tfm_lesson.checks"))
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            kernel.stop()


def check_kernel(kernel_dir: Path, timeout: int, memory_mb: int, sandbox: bool, limits: Any = None) -> None:
    """Start one kernel before the class, as each submission's will be: CourseError naming ``--memory`` when it cannot
    start under that limit (and can without), or saying why it cannot start at all. Nothing is graded then."""
    why = _probe(kernel_dir, timeout, sandbox, limits)
    if why is None:
        return
    if limits is not None and _probe(kernel_dir, timeout, sandbox) is None:
        raise CourseError(f"--processes {limits.processes} / --memory-total {limits.memory_mb} / --disk "
                          f"{limits.disk_mb}: the grading kernel cannot start and import torch under these caps "
                          f"({why}); give it more, or 0 for no cap. Nothing was graded")
    if memory_mb > 0:
        with tempfile.TemporaryDirectory(prefix="tfm-grade-nolimit-") as unlimited:
            kernel_spec(Path(unlimited), 0, timeout)
            if _probe(Path(unlimited), timeout, sandbox) is None:
                raise CourseError(f"--memory {memory_mb}: the grading kernel cannot start and import torch under "
                                  f"{memory_mb} MB ({why}); give it more (torch alone maps about 1 GB; the default is "
                                  f"{DEFAULT_MEMORY_MB}) or 0 for no limit. Nothing was graded")
    raise CourseError(f"the grading kernel cannot start ({why}); nothing was graded")


class KernelGroup:
    """The kernels of a class being graded, so that Ctrl-C or a failure ends every one of them at once; once
    stopped, no kernel starts again (the submissions in flight end quickly and are not recorded)."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.live: set[Kernel] = set()
        self.lock = threading.Lock()

    def kernel(self, *args: Any, **kwargs: Any) -> Kernel:
        whole = self

        class _Stoppable(Kernel):
            def start(self) -> None:
                if whole.stopped.is_set():
                    raise RuntimeError("the grading was stopped")
                super().start()
                with whole.lock:
                    whole.live.add(self)
                if whole.stopped.is_set():  # stopped while it started: it was not among those killed
                    self.stop()
                    raise RuntimeError("the grading was stopped")

            def stop(self) -> None:
                with whole.lock:
                    whole.live.discard(self)
                super().stop()

        return _Stoppable(*args, **kwargs)

    def stop(self) -> None:
        """Stop the class: kill every kernel's process group (a sandbox's takes everything in it along)."""
        self.stopped.set()
        with self.lock:
            pids = [getattr(getattr(k.client, "km", None), "provisioner", None) for k in self.live]
        for provisioner in pids:
            pid = getattr(provisioner, "pid", None)
            if pid:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
