"""The process of one probe (:mod:`tfm_lesson.course.probe`): trusted code first, then a hard memory limit, then the
learner's answer.

    python -m tfm_lesson.course._probe_child [--processes N] [--file-mb N] SPEC OUT

``SPEC`` (JSON, written by the grader): the probe's checker, the run's salt, the chapter's code that the grading plan
runs before the exercise (its definitions, earlier exercises' solutions), the exercise's answer cells and the
expression naming the answer. In order: import torch and the package, run the chapter's code, build the inputs, warm
up, then a seccomp filter refuses every new program and process from now on (threads allowed:
:mod:`._one_process`) and ``RLIMIT_AS`` (soft and hard) = the process's address space now + the probe's budget: no
later code of the process can raise it (the sandbox runs it as user nobody with no capability). Only then are the
answer cells run and the answer called once. ``OUT`` gets ``{"out": <wire data>}`` or ``{"error": kind, "detail":
text}`` (and ``"unfiltered"``: why the filter could not be set, where it could not); a process killed gives no
``OUT`` at all. Nothing here decides a verdict: the grader reads ``OUT`` as data.
"""
from __future__ import annotations

import gc
import json
import os
import resource
import sys

from ._grade_kernel import apply_limits
from ._one_process import one_process

_MEMORY_WORDS = ("can't allocate memory", "cannot allocate memory", "out of memory", "std::bad_alloc")


def address_space() -> int:
    """Bytes of address space this process maps now (``/proc/self/statm``'s first field)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _error(exc: BaseException) -> dict:
    text = f"{type(exc).__name__}: {exc}"[:2000]
    memory = isinstance(exc, MemoryError) or any(w in str(exc).lower() for w in _MEMORY_WORDS)
    return {"error": "memory" if memory else "raised", "detail": text}


def _answer(spec: dict, namespace: dict, args: tuple) -> object:
    """The answer cells run and the answer called once (under the limit)."""
    for source in spec["answers"]:
        try:
            exec(compile(source, "<your exercise cell>", "exec"), namespace)  # noqa: S102 - in the sandbox
        except MemoryError:
            raise
        except Exception as exc:  # as in the kernel, a cell that raises does not stop the rest
            if any(w in str(exc).lower() for w in _MEMORY_WORDS):
                raise
    fn = eval(spec["expression"], namespace)  # noqa: S307 - the check call's argument, in the sandbox
    return fn(*args)


def main(argv: list[str]) -> None:
    spec_path, out_path = apply_limits(argv)
    with open(spec_path) as f:
        spec = json.load(f)
    import torch

    torch.set_num_threads(1)
    from tfm_lesson.checks._probes import PROBES, probe_inputs, warm_up
    from tfm_lesson.checks._wire import encode

    probe = PROBES[spec["checker"]]
    namespace: dict = {"__name__": "__main__"}
    for source in spec["prelude"]:
        try:
            exec(compile(source, "<chapter>", "exec"), namespace)  # noqa: S102 - the instructor's chapter
        except Exception:  # a definition that needs what the chapter computes: as in the kernel, skipped
            pass
    args = probe_inputs(probe, spec["salt"])
    warm_up(probe, args)
    out = open(out_path, "w")  # opened now: writing it later needs no new file
    alone = one_process()  # no exec, no child: a fresh program would have room under the same number of bytes
    gc.collect()
    limit = address_space() + probe.budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        with torch.no_grad():
            result: dict = {"out": _answer(spec, namespace, args)}
    except BaseException as exc:  # noqa: BLE001 - the answer's failure is the probe's finding
        result = _error(exc)
    gc.collect()
    if "out" in result:
        try:
            result["out"] = encode(result["out"], lambda value: {"not data": type(value).__name__})
        except BaseException as exc:  # noqa: BLE001
            result = _error(exc)
    if alone is not None:
        result["unfiltered"] = alone
    json.dump(result, out)
    out.close()


if __name__ == "__main__":
    main(sys.argv[1:])
