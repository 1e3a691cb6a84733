"""Caps on a whole submission, not only on each of its processes: how many processes (and threads) it runs at once,
the memory of all of them together, and the disk it writes.

* **cgroups**, where the grader may create them (root, or a user given a delegated subtree): a pids and a memory
  cgroup per kernel, made under the cgroup the grader itself runs in (cgroup v1, one folder per controller; or v2,
  one folder), the kernel moved into them before it starts (:meth:`Cgroups.wrap`), and removed when it ends. The
  kernel sees ``fork`` fail past ``--processes`` and the machine's out-of-memory killer past ``--memory-total``;
  either counts as hitting the cap (``pids.events``, ``oom_kill``), and the grader then kills everything in them.
* otherwise **rlimits**: inside the sandbox the kernel sets ``RLIMIT_NPROC`` itself, once its user namespace exists,
  so that it counts only the sandbox's own processes (set before, it would count every process of the grader's
  user); it binds only a grader that is not root (root's processes are never refused). Total memory then has no cap
  but each process's (``--memory``).
* the **disk**: where the grader may mount (root), the submission's working folder is a tmpfs of ``--disk`` MB
  (its scratch folder and its kernel's socket folder, the only places outside ``/tmp`` it can write), which also
  counts in its memory; otherwise each file is capped (``RLIMIT_FSIZE``) and the folder's size is watched.

:class:`Guard` holds these for one kernel; a thread of the grader checks them every :data:`POLL` seconds and kills
the kernel at once when one is hit, with the reason that :func:`tfm_lesson.course.grading` gives its exercise.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
POLL = 0.25  # seconds between two looks at the caps while a kernel runs
DEFAULT_PROCESSES = 256  # processes and threads at once (an idle kernel with PyTorch runs about 20)
DEFAULT_MEMORY_TOTAL_MB = 4096
DEFAULT_DISK_MB = 1024


@dataclass(frozen=True)
class Limits:
    """What one submission may use in all; 0 leaves that one without a cap."""

    processes: int = DEFAULT_PROCESSES  # processes and threads running at once
    memory_mb: int = DEFAULT_MEMORY_TOTAL_MB  # memory of all its processes together, its /tmp and scratch included
    disk_mb: int = DEFAULT_DISK_MB  # what it writes outside /tmp (its scratch folder)

    def __post_init__(self) -> None:
        for name in ("processes", "memory_mb", "disk_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"Limits.{name} must be >= 0 (0: no cap), got {getattr(self, name)}")

    def process_reason(self) -> str:
        return (f"the notebook started more than {self.processes} processes and threads at once (the grader's "
                "limit, --processes); its kernel was killed and restarted")

    def memory_reason(self) -> str:
        return (f"the notebook used more than {self.memory_mb} MB of memory in all (its processes together, its "
                "/tmp and its files; the grader's limit, --memory-total); its kernel was killed and restarted")

    def disk_reason(self) -> str:
        return (f"the notebook wrote more than {self.disk_mb} MB of files (the grader's limit, --disk); its kernel "
                "was killed, its files removed, and it was restarted")


# cgroups ------------------------------------------------------------------------------------------------------------
def _own_cgroups(root: Path = CGROUP_ROOT, proc: Path = Path("/proc/self/cgroup")
                 ) -> tuple[str, dict[str, Path]] | None:
    """``("v1", {"pids": folder, "memory": folder})`` or ``("v2", {"": folder})``: where this process's cgroups
    are (``proc``: its ``/proc/PID/cgroup``); None where neither the pids nor the memory controller can be found."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    found: dict[str, Path] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            if name in ("pids", "memory") and (root / name).is_dir():
                found[name] = root / name / path.lstrip("/")
    if len(found) == 2:
        return "v1", found
    unified = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    if unified is not None and (root / "cgroup.controllers").is_file():
        return "v2", {"": root / unified.lstrip("/")}
    return None


class CgroupUnavailable(RuntimeError):
    """No cgroup can be made here; the message says why."""


class Cgroups:
    """The cgroups of one kernel: made by :meth:`make`, entered by the kernel's command (:meth:`wrap`), checked
    (:meth:`hit`), emptied (:meth:`kill`) and removed (:meth:`remove`)."""

    def __init__(self, version: str, folders: dict[str, Path], limits: Limits, owned: bool = True):
        self.version, self.folders, self.limits = version, folders, limits
        self.owned = owned  # made here, so removed here (a container's are its engine's)

    @classmethod
    def make(cls, limits: Limits, root: Path = CGROUP_ROOT, proc: Path = Path("/proc/self/cgroup")) -> "Cgroups":
        where = _own_cgroups(root, proc)
        if where is None:
            raise CgroupUnavailable("no pids and memory cgroup controllers here")
        version, parents = where
        name = f"tfm-grade-{os.getpid()}-{secrets.token_hex(4)}"
        made: dict[str, Path] = {}
        try:
            if version == "v2":
                parent = parents[""]
                wanted = {"pids", "memory"} - set((parent / "cgroup.subtree_control").read_text().split())
                if wanted:  # refused where the grader's own cgroup holds processes (cgroup v2's "no internal ...")
                    (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))
            for key, parent in parents.items():
                (parent / name).mkdir()
                made[key] = parent / name
            group = cls(version, made, limits)
            group._set_limits()
            return group
        except OSError as exc:
            cls(version, made, limits).remove()
            raise CgroupUnavailable(f"cannot make a cgroup under {next(iter(parents.values()))} ({exc})") from None

    def _folder(self, controller: str) -> Path:
        return self.folders["" if self.version == "v2" else controller]

    def _set_limits(self) -> None:
        processes, memory = self.limits.processes, self.limits.memory_mb * 2 ** 20
        if self.version == "v2":
            if processes:
                (self._folder("pids") / "pids.max").write_text(str(processes))
            if memory:
                (self._folder("memory") / "memory.max").write_text(str(memory))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                    (self._folder("memory") / "memory.swap.max").write_text("0")
            return
        if processes:
            (self._folder("pids") / "pids.max").write_text(str(processes))
        if memory:
            (self._folder("memory") / "memory.limit_in_bytes").write_text(str(memory))
            with contextlib.suppress(OSError):  # swap counted too, where the kernel accounts it
                (self._folder("memory") / "memory.memsw.limit_in_bytes").write_text(str(memory))

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside these cgroups: a shell writes its own process id into each, then becomes it."""
        procs = sorted({str(folder / "cgroup.procs") for folder in self.folders.values()})
        join = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
        return ["/bin/sh", "-c", join, "tfm-cgroup", str(len(procs)), *procs, *argv]

    @staticmethod
    def _count(path: Path, key: str) -> int:
        """The number after ``key`` in a flat keyed file (pids.events, memory.events, memory.oom_control)."""
        with contextlib.suppress(OSError, ValueError):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
        return 0

    def hit(self) -> str | None:
        """The reason when a cap was hit since these cgroups were made (a fork refused, a process killed for
        memory), else None."""
        if self.limits.processes and self._count(self._folder("pids") / "pids.events", "max"):
            return self.limits.process_reason()
        if self.limits.memory_mb:
            events = "memory.events" if self.version == "v2" else "memory.oom_control"
            if self._count(self._folder("memory") / events, "oom_kill"):
                return self.limits.memory_reason()
        return None

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders.values():
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return found

    def kill(self) -> None:
        """SIGKILL everything in the cgroups, again until none is left (a fork bomb may fork while it dies)."""
        if self.version == "v2":
            with contextlib.suppress(OSError):
                (self.folders[""] / "cgroup.kill").write_text("1")
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the cgroups (a cgroup goes once its last process is reaped)."""
        self.kill()
        for folder in self.folders.values() if self.owned else ():
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


# the disk -----------------------------------------------------------------------------------------------------------
class ScratchDisk:
    """A submission's working folder under ``disk_mb``: a tmpfs of that size mounted on it where the grader may
    mount (:attr:`mounted`), else the folder as it is, its size summed when :meth:`hit` is asked."""

    def __init__(self, folder: Path, disk_mb: int):
        self.folder, self.disk_mb, self.mounted = Path(folder), disk_mb, False

    @classmethod
    def mount(cls, folder: Path, disk_mb: int) -> "ScratchDisk":
        disk = cls(folder, disk_mb)
        if disk_mb and os.geteuid() == 0 and shutil.which("mount"):
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={disk_mb}m,mode=0700,nosuid,nodev",
                                   "tfm-grade", str(folder)], capture_output=True, timeout=30)
            disk.mounted = done.returncode == 0
        return disk

    def used(self) -> int:
        """Bytes written in the folder (the tmpfs's, or the sum of its files' blocks)."""
        if self.mounted:
            st = os.statvfs(self.folder)
            return (st.f_blocks - st.f_bfree) * st.f_frsize
        total, todo = 0, [str(self.folder)]
        while todo:
            with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.path)
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
        return total

    def hit(self, limits: Limits) -> str | None:
        """The reason when the folder is full (within 1 MB of the cap), else None."""
        if self.disk_mb and self.used() >= (self.disk_mb - 1) * 2 ** 20:
            return limits.disk_reason()
        return None

    def clear(self, folder: Path) -> None:
        """Remove what the submission wrote in ``folder`` (its scratch), keeping the folder: a restarted kernel
        starts with room again."""
        for entry in list(folder.iterdir()):
            with contextlib.suppress(OSError):
                if entry.is_dir() and not entry.is_symlink():
                    subprocess.run(["rm", "-rf", "--one-file-system", str(entry)], capture_output=True, timeout=300)
                else:
                    entry.unlink()

    def close(self) -> None:
        """Unmount the tmpfs (lazily if something still holds it): what was in it is gone."""
        if self.mounted:
            done = subprocess.run(["umount", str(self.folder)], capture_output=True, timeout=60)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.folder)], capture_output=True, timeout=60)
            self.mounted = False


# one kernel's guard -------------------------------------------------------------------------------------------------
class Guard:
    """The caps of one kernel while it runs: its cgroups (None where none could be made: :attr:`why_not` says why),
    the submission's disk, and a thread that looks at them every :data:`POLL` seconds and, at the first cap hit,
    kills the kernel and keeps the reason (:meth:`reason`)."""

    def __init__(self, limits: Limits, disk: ScratchDisk | None = None, root: Path = CGROUP_ROOT,
                 cgroups: bool = True):
        self.limits, self.disk = limits, disk
        self.cgroups: Cgroups | None = None  # (a container's are set once it runs)
        self.why_not = ""
        if cgroups and (limits.processes or limits.memory_mb):
            try:
                self.cgroups = Cgroups.make(limits, root)
            except CgroupUnavailable as exc:
                self.why_not = str(exc)
        self._found: str | None = None
        self._pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tfm_lesson-grade-caps", daemon=True)

    def wrap(self, argv: list[str]) -> list[str]:
        return self.cgroups.wrap(argv) if self.cgroups is not None else argv

    def start(self, pid: int | None) -> None:
        """Watch the kernel whose first process is ``pid`` (its process group is killed where no cgroup is)."""
        self._pid = pid
        self._thread.start()

    def _look(self) -> str | None:
        reason = self.cgroups.hit() if self.cgroups is not None else self._counted()
        return reason or (self.disk.hit(self.limits) if self.disk is not None else None)

    def _counted(self) -> str | None:
        """Without cgroups: the processes and threads under the kernel, counted (the rlimit refuses the rest)."""
        import psutil

        if not self.limits.processes or self._pid is None:
            return None
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(self._pid)
            count = 0
            for proc in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    count += proc.num_threads()
            if count >= self.limits.processes:
                return self.limits.process_reason()
        return None

    def _watch(self) -> None:
        while not self._stop.wait(POLL):
            if self.reason() is not None:
                return

    def reason(self) -> str | None:
        """Why the kernel was killed for a cap (killing it now if one was just hit), else None."""
        if self._found is None:
            found = self._look()
            if found is not None:
                self._found = found
                self.kill()
        return self._found

    def kill(self) -> None:
        if self.cgroups is not None:
            self.cgroups.kill()
        elif self._pid:
            with contextlib.suppress(OSError):
                os.killpg(self._pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop watching; kill what is left in the cgroups and remove them."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.cgroups is not None:
            self.cgroups.remove()


def describe(limits: Limits, sandbox: bool, root: Path = CGROUP_ROOT) -> str:
    """One line for the console: each cap and what enforces it here (a cgroup is made and removed to find out)."""
    guard = Guard(limits, None, root)
    guard.stop()
    parts = []
    if limits.processes:
        how = "cgroup" if guard.cgroups else ("RLIMIT_NPROC in the sandbox, not binding a grader run as root"
                                               if sandbox else "NOT CAPPED without the sandbox or cgroups")
        parts.append(f"{limits.processes} processes and threads ({how})")
    if limits.memory_mb:
        parts.append(f"{limits.memory_mb} MB of memory in all ("
                     + ("cgroup" if guard.cgroups else "NOT CAPPED: only --memory per process") + ")")
    if limits.disk_mb:
        mountable = os.geteuid() == 0 and shutil.which("mount")
        parts.append(f"{limits.disk_mb} MB of files (" + ("a tmpfs" if mountable else
                                                         "each file capped, the folder watched") + ")")
    why = f"; no cgroup: {guard.why_not}" if guard.why_not else ""
    return "each submission may use at most " + (", ".join(parts) or "anything (no cap)") + why

