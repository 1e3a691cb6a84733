"""The grader's sandbox: each submission's kernel runs inside its own bubblewrap (``bwrap``) container.

What the code inside sees: the system read-only (``/usr``, ``/etc``, the libraries), Python and the installed
packages read-only, this package read-only, the folder its kernel talks through, and a private scratch folder as its
working directory and ``HOME``; ``/tmp`` is empty and private. It does not see the instructor's chapter, the other
submissions, the grades, the grader's working folder or any other file of the machine. It runs in new namespaces
(processes, network, IPC, hostname, user) as user ``nobody`` with every capability dropped, whoever runs the
grader (root included): no network at all, no mount, and ``/proc`` shows only its own processes, so the grader's
command line and folders are out of reach. Its ``/tmp`` holds at most :data:`TMP_BYTES`. When the kernel ends, everything it started ends with it (the
first process of a process namespace takes every other one down when it exits), so nothing outlives the grade.

What it does not do: limit CPU time (the grader's per-cell time limit does), the disk its scratch folder takes,
the number of processes, or the memory of all its processes together (``--memory`` limits each one's address
space; :mod:`tfm_lesson.course.sandbox_limits` caps the three on the whole submission); nor hide the Python and
package versions.
Linux only; :func:`sandbox_command` says why when it cannot be used.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")


TMP_BYTES = 512 * 1024 * 1024  # the sandbox's private /tmp holds at most this much (it lives in the machine's memory)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here; the message says which and what to do."""


def _python_roots() -> list[Path]:
    """Where the running Python and its packages live: every such folder is shown read-only."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix),
             Path(os.path.realpath(sys.executable)).parent.parent}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(Path(sysconfig.get_paths()[key]))
    for entry in sys.path:  # site-packages of a --user install, a .pth-added folder
        if entry and "site-packages" in entry and Path(entry).is_dir():
            roots.add(Path(entry))
    return sorted({r.resolve() for r in roots if r.exists()}, key=lambda p: len(p.parts))


def _package_root() -> Path:
    return Path(__file__).resolve().parent.parent  # .../tfm_lesson


def _variables(scratch: Path, env: dict[str, str] | None) -> dict[str, str]:
    """The sandbox's whole environment: ``env`` and a few settings the course reads, nothing else of the caller's."""
    variables = {"HOME": str(scratch), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                 "PYTHONPATH": str(_package_root().parent), "MPLCONFIGDIR": str(scratch / ".matplotlib"),
                 "TMPDIR": "/tmp"}
    for key in ("TFM_CHECK_TIME_LIMIT", "TFM_DEVICE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MPLBACKEND",
                "PYTHONHASHSEED", "HF_HUB_OFFLINE"):
        if key in os.environ:
            variables[key] = os.environ[key]
    variables.update(env or {})
    return variables


def sandbox_command(argv: list[str], *, scratch: Path, shared: list[Path] = (), env: dict[str, str] | None = None,
                    bwrap: str | None = None) -> list[str]:
    """``argv`` wrapped so that it runs in the sandbox, with ``scratch`` (read-write) as its working folder and
    ``HOME``, each folder of ``shared`` read-write at its own path (the kernel's connection folder), and nothing of the
    caller's environment but ``env`` and a few settings the course reads. Raises :class:`SandboxUnavailable` where
    bubblewrap is missing."""
    bwrap = bwrap or shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed, so submissions cannot be graded in a sandbox: install it "
            "(Debian/Ubuntu: apt-get install bubblewrap; `make setup` does on Linux), or pass --no-sandbox to run "
            "student code with your own user's rights (every report then says so)")
    # as user nobody with no capability at all, whoever runs the grader: even a grader run as root hands the student
    # no right to remount the read-only folders or to change a file of the machine (a mount is refused)
    args = [bwrap, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session", "--clearenv", "--proc", "/proc", "--dev", "/dev",
            "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    for folder in _SYSTEM:
        if Path(folder).exists():
            args += ["--ro-bind", folder, folder] if not Path(folder).is_symlink() else \
                ["--symlink", os.readlink(folder), folder]
    shown: list[Path] = []
    for root in _python_roots() + [_package_root()]:
        if not any(root.is_relative_to(s) for s in shown) and not any(root.is_relative_to(f) for f in _SYSTEM):
            args += ["--ro-bind", str(root), str(root)]
            shown.append(root)
    for folder in [*shared, scratch]:
        folder = Path(folder).resolve()
        args += ["--bind", str(folder), str(folder)]
    scratch = Path(scratch).resolve()
    for key, value in sorted(_variables(scratch, env).items()):
        args += ["--setenv", key, value]
    program = argv[0]
    if os.sep in program:  # its folder as the sandbox shows it (a symbolic link to a venv is not bound; the venv is),
        program = str(Path(program).parent.resolve() / Path(program).name)  # the name kept: a venv's python stays it
    return [*args, "--chdir", str(scratch), "--", program, *argv[1:]]


def check_sandbox(bwrap: str | None = None) -> None:
    """Run ``true`` in the sandbox once; :class:`SandboxUnavailable` with bubblewrap's own words if it cannot."""
    import tempfile

    try:
        with tempfile.TemporaryDirectory(prefix="tfm-sandbox-check-") as scratch:  # not the grader's own /tmp
            command = sandbox_command(["/bin/true"], scratch=Path(scratch), bwrap=bwrap)
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap could not run ({exc}); pass --no-sandbox to grade without it") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox here ({why}); on a system that forbids unprivileged user "
            "namespaces, allow them (sysctl kernel.unprivileged_userns_clone=1) or pass --no-sandbox")
