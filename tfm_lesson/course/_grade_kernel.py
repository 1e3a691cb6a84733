"""The kernel the grader runs a submission in: an ordinary IPython kernel under a memory limit.

    python -m tfm_lesson.course._grade_kernel --memory-mb 4096 -f CONNECTION_FILE

``resource.setrlimit(RLIMIT_AS)`` caps the address space before ipykernel starts, so an answer that allocates too
much gets a ``MemoryError`` (or the kernel dies) instead of taking the machine down.
"""
from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "--memory-mb":
        megabytes = int(argv[1])
        argv = argv[2:]
        if megabytes > 0:
            import resource

            limit = megabytes * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from ipykernel import kernelapp

    sys.argv = [sys.argv[0], *argv]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main(sys.argv[1:])
