"""The kernel the grader runs a submission in: an ordinary IPython kernel under a memory limit.

    python -m tfm_lesson.course._grade_kernel --memory-mb 4096 [--processes 256] [--file-mb 1024] -f CONNECTION_FILE

``resource.setrlimit(RLIMIT_AS)`` caps the address space before ipykernel starts, so an answer that allocates too
much gets a ``MemoryError`` (or the kernel dies) instead of taking the machine down. In the sandbox, the grader
adds ``--processes`` (``RLIMIT_NPROC``: set here, once the sandbox's user namespace exists, it counts only the
sandbox's processes; root's are never refused, so a grader run as root relies on its cgroup) and ``--file-mb``
(``RLIMIT_FSIZE``: no file bigger; Python ignores ``SIGXFSZ``, so a write past it fails with an ``OSError``).
"""
from __future__ import annotations

import sys

_LIMITS = {"--memory-mb": ("RLIMIT_AS", 2 ** 20), "--processes": ("RLIMIT_NPROC", 1),
           "--file-mb": ("RLIMIT_FSIZE", 2 ** 20)}


def apply_limits(argv: list[str]) -> list[str]:
    """Set the rlimits the leading flags of ``argv`` ask for (0: none); returns the rest (the kernel's own)."""
    import resource

    while len(argv) >= 2 and argv[0] in _LIMITS:
        name, unit = _LIMITS[argv[0]]
        amount = int(argv[1]) * unit
        argv = argv[2:]
        if amount > 0:
            resource.setrlimit(getattr(resource, name), (amount, amount))
    return argv


def main(argv: list[str]) -> None:
    argv = apply_limits(argv)
    from ipykernel import kernelapp

    sys.argv = [sys.argv[0], *argv]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main(sys.argv[1:])
