"""Keep a process to itself: no new program (``execve``) and no new process (``fork``, ``clone`` without
``CLONE_THREAD``) from now on, threads allowed. Used by the probe (:mod:`._probe_child`) after its memory limit:
``RLIMIT_AS`` is a number of bytes, not a share of what the process had, so a fresh small program (``exec``) or a
child would have room a whole Python with PyTorch does not leave. A seccomp filter (Linux 3.5 and later, x86-64 and
AArch64) cannot be lifted by the code that runs after it, nor by anything it starts.
"""
from __future__ import annotations

import ctypes
import platform

_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_X32_BIT = 0x40000000
# machine: (audit arch, clone, fork, vfork, execve, execveat, clone3)
_SYSCALLS = {"x86_64": (0xC000003E, 56, 57, 58, 59, 322, 435), "aarch64": (0xC00000B7, 220, None, None, 221, 281, 435)}
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF: ld [k]; jeq/jge/jset #k; ret #k


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _program(machine: str) -> list[tuple[int, str | None, str | None, int]]:
    """The filter as (code, label if true, label if false, k); a ``ret`` line is named by its third field."""
    arch, clone, fork, vfork, execve, execveat, clone3 = _SYSCALLS[machine]
    lines = [(_LD, None, None, 4), (_JEQ, None, "deny", arch), (_LD, None, None, 0)]  # the arch, then the call
    if machine == "x86_64":
        lines.append((_JGE, "deny", None, _X32_BIT))  # x32 calls: another numbering, refused whole
    lines.append((_JEQ, "nosys", None, clone3))  # clone3's flags are in memory: ENOSYS, and glibc falls back to clone
    lines += [(_JEQ, "deny", None, nr) for nr in (execve, execveat, fork, vfork) if nr is not None]
    lines += [(_JEQ, None, "allow", clone), (_LD, None, None, 16), (_JSET, "allow", "deny", _CLONE_THREAD)]
    return lines


def _assemble(machine: str) -> list[_Filter]:
    lines = _program(machine)
    ends = {"allow": len(lines), "deny": len(lines) + 1, "nosys": len(lines) + 2}
    out = [_Filter(code, ends[t] - i - 1 if t else 0, ends[f] - i - 1 if f else 0, k)
           for i, (code, t, f, k) in enumerate(lines)]
    return out + [_Filter(_RET, 0, 0, _ALLOW), _Filter(_RET, 0, 0, _ERRNO | _EPERM), _Filter(_RET, 0, 0, _ERRNO | _ENOSYS)]


def one_process() -> str | None:
    """Install the filter on this process (and all it may still start: nothing but threads). None once done, else why
    it could not be (another machine, no seccomp)."""
    machine = platform.machine().lower().replace("arm64", "aarch64").replace("amd64", "x86_64")
    if machine not in _SYSCALLS:
        return f"no filter for a {machine} machine"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as exc:
        return f"no C library to call ({exc})"
    filters = _assemble(machine)
    array = (_Filter * len(filters))(*filters)
    program = _Program(len(filters), ctypes.cast(array, ctypes.POINTER(_Filter)))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: what seccomp asks of a process without privilege
        return f"PR_SET_NO_NEW_PRIVS refused (errno {ctypes.get_errno()})"
    if libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"seccomp refused (errno {ctypes.get_errno()})"
    return None
