"""The sandbox where bubblewrap is missing: each kernel in a Podman or Docker container made of the machine's own
files, no image pulled (``grade --sandbox podman|docker``, or ``auto``: bubblewrap, else Podman, else Docker).

The container's root is an empty skeleton (the merged-``/usr`` links and mount points, :func:`skeleton`), read-only;
on it the system folders, Python and its packages and this package are mounted read-only, the kernel's scratch and
socket folders read-write, and ``/tmp`` as a private tmpfs: what bubblewrap shows (:mod:`.sandbox`). It has no
network, no capability, cannot gain any (``no-new-privileges``), runs as user ``nobody`` (65534: the grader gives it
the two folders and the connection file), its processes and memory capped by the container's own cgroup
(``--pids-limit``, ``--memory``; :class:`tfm_lesson.course.sandbox_limits.Guard` reads their counters), and it is
removed (``rm -f``) when the kernel stops, whatever killed it.

Run as root only: a grader that is not root is refused here (rootless Podman and a Docker group were not tested).
Docker needs its daemon running (``dockerd``); the skeleton is imported once as the image :data:`IMAGE`.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from .sandbox import _SYSTEM, TMP_BYTES, SandboxUnavailable, _package_root, _python_roots, _variables

ENGINES = ("podman", "docker")
IMAGE = "tfm-grade-skeleton:1"  # Docker only: the skeleton, imported from a tar made here (nothing is pulled)
USER = 65534


def skeleton(folder: Path) -> Path:
    """An empty root for a container: ``bin``, ``lib``... linked into ``usr`` as on the machine, and the folders
    the mounts go on."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("usr", "etc", "proc", "dev", "sys", "tmp", "run", "var"):
        (folder / name).mkdir(exist_ok=True)
    for name in _SYSTEM:
        path, inside = Path(name), folder / name.lstrip("/")
        if path.is_symlink() and not inside.is_symlink():
            inside.symlink_to(os.readlink(path))
    return folder


def _image_tar() -> bytes:
    """The skeleton as a tar, for ``docker import``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("usr", "etc", "proc", "dev", "sys", "tmp", "run", "var"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in _SYSTEM:
            if Path(name).is_symlink():
                info = tarfile.TarInfo(name.lstrip("/"))
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name)
                tar.addfile(info)
    return buffer.getvalue()


def _engine(engine: str) -> list[str]:
    """The engine's command: Podman with runc where it has it (crun refuses a machine with cgroup v1 and v2 mounted
    side by side), Docker as it is."""
    found = shutil.which(engine)
    if found is None:
        raise SandboxUnavailable(f"{engine} is not installed")
    if engine == "podman" and shutil.which("runc"):
        return [found, "--runtime", "runc"]
    return [found]


def container_command(engine: str, argv: list[str], *, scratch: Path, shared: list[Path], env: dict[str, str],
                      name: str, root: Path, processes: int = 0, memory_mb: int = 0) -> list[str]:
    """``argv`` run in a new container ``name`` of ``engine`` (see the module's docstring); ``root``: where the
    skeleton goes (Podman); ``processes`` and ``memory_mb``: the container's caps (0: none)."""
    import resource

    scratch = Path(scratch).resolve()
    args = [*_engine(engine), "run", "--rm", "-i", "--name", name, "--network", "none", "--read-only",
            "--cap-drop", "all", "--security-opt", "no-new-privileges", "--user", f"{USER}:{USER}",
            "--tmpfs", f"/tmp:rw,size={TMP_BYTES},mode=1777,nosuid,nodev", "--workdir", str(scratch)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the engines' default is more than a grader may give
    args += ["--ulimit", f"nofile={min(soft, 4096)}:{min(hard, 4096)}"]
    if engine == "podman":
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        cap = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096
        args += ["--ulimit", f"nproc={cap}:{cap}"]
    if processes:
        args += ["--pids-limit", str(processes)]
    if memory_mb:
        args += ["--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m"]
    for folder in _SYSTEM:
        if Path(folder).is_dir() and not Path(folder).is_symlink():
            args += ["-v", f"{folder}:{folder}:ro"]
    shown: list[Path] = []
    for path in _python_roots() + [_package_root()]:
        if not any(path.is_relative_to(s) for s in shown) and not any(path.is_relative_to(f) for f in _SYSTEM):
            args += ["-v", f"{path}:{path}:ro"]
            shown.append(path)
    for folder in [*shared, scratch]:
        folder = Path(folder).resolve()
        os.chown(folder, USER, USER)
        args += ["-v", f"{folder}:{folder}:rw"]
    for key, value in sorted(_variables(scratch, env).items()):
        args += ["-e", f"{key}={value}"]
    args += ["--rootfs", str(skeleton(root))] if engine == "podman" else [IMAGE]
    program = argv[0]
    if os.sep in program:
        program = str(Path(program).parent.resolve() / Path(program).name)
    return [*args, program, *argv[1:]]


def remove(engine: str, name: str) -> None:
    """Remove the container ``name`` and everything in it, at once; nothing when it is gone already."""
    try:
        subprocess.run([*_engine(engine), "rm", "-f", "-t", "0", name], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired, SandboxUnavailable):
        pass


def cgroup_folders(engine: str, name: str, root: Path = Path("/sys/fs/cgroup")) -> dict[str, Path]:
    """The pids and memory cgroup folders of the running container ``name`` (from its first process's
    ``/proc/PID/cgroup``), keyed as :class:`tfm_lesson.course.sandbox_limits.Cgroups` keys them; empty if not found."""
    done = subprocess.run([*_engine(engine), "inspect", "-f", "{{.State.Pid}}", name], capture_output=True, text=True,
                          timeout=60)
    try:
        lines = Path(f"/proc/{int(done.stdout.strip())}/cgroup").read_text().splitlines()
    except (ValueError, OSError):
        return {}
    found: dict[str, Path] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in ("pids", "memory"):
                found[controller] = root / controller / path.lstrip("/")
        if controllers == "" and (root / "cgroup.controllers").is_file():
            found.setdefault("", root / path.lstrip("/"))
    return found


def check_engine(engine: str) -> None:
    """Run ``true`` in a container of ``engine`` once; :class:`SandboxUnavailable` with the engine's own words."""
    import tempfile

    if os.geteuid() != 0:
        raise SandboxUnavailable(f"{engine}: the grader runs submissions in containers only when run as root")
    try:
        if engine == "docker":
            info = subprocess.run([*_engine(engine), "info"], capture_output=True, text=True, timeout=60)
            if info.returncode != 0:
                why = (info.stderr.strip().splitlines() or ["no message"])[-1]
                raise SandboxUnavailable(f"docker: its daemon does not answer ({why}); start it (dockerd)")
            known = subprocess.run([*_engine(engine), "image", "inspect", IMAGE], capture_output=True, timeout=60)
            if known.returncode != 0:
                subprocess.run([*_engine(engine), "import", "-", IMAGE], input=_image_tar(), capture_output=True,
                               timeout=120, check=True)
        with tempfile.TemporaryDirectory(prefix="tfm-container-check-") as work:
            scratch = Path(work) / "scratch"
            scratch.mkdir()
            name = f"tfm-grade-check-{os.getpid()}"
            command = container_command(engine, ["/bin/true"], scratch=scratch, shared=[], env={}, name=name,
                                        root=Path(work) / "root")
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            remove(engine, name)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"{engine} could not run ({exc})") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SandboxUnavailable(f"{engine} cannot run a container here ({why})")


def choose(sandbox: str | bool) -> str:
    """The sandbox to grade in: ``"bwrap"``, ``"podman"`` or ``"docker"`` as asked, each tried once here; ``"auto"``
    (or True) the first of them that runs. :class:`SandboxUnavailable` with every one's reason where none does."""
    from .sandbox import check_sandbox

    wanted = ["bwrap", *ENGINES] if sandbox in (True, "auto") else [sandbox]
    reasons = []
    for engine in wanted:
        try:
            check_sandbox() if engine == "bwrap" else check_engine(engine)
            return engine
        except SandboxUnavailable as exc:
            reasons.append(str(exc))
    raise SandboxUnavailable("; ".join(reasons) + ("" if len(wanted) == 1 else
                             "; so no sandbox (bubblewrap, Podman or Docker) can run here: install one, or pass "
                             "--no-sandbox to run student code with your own user's rights"))


def choose_or_say(sandbox: bool | str) -> bool | str:
    """The sandbox to grade in (:func:`choose`), CourseError where none can run;
    without one (--no-sandbox), say so first and return False."""
    if sandbox and sandbox != "none":
        try:
            engine = choose(sandbox)
        except SandboxUnavailable as exc:
            from .cells import CourseError

            raise CourseError(str(exc)) from None
        if engine != "bwrap":
            print(f"each submission runs in a {engine} container (bubblewrap is not used)", flush=True)
        return engine
    print("WITHOUT A SANDBOX (--no-sandbox): student code runs with your own rights and can read and change "
          "your files; every feedback page says so", flush=True)
    return False
