"""A memory rule enforced from outside the submission's kernel: an exercise's probe, run by ``course grade``.

The checks of chapter 18's tiled forward and recomputing backward measure the learner's peak memory in the kernel
(``learner_side(peak_tensor_bytes)``), where the learner's cells could forge it. So, once such an exercise's check has
passed by replay, the grader runs a *probe* (:mod:`tfm_lesson.checks._probes` says which exercises have one and how it
is built): a fresh Python process in the same sandbox as the kernel (bubblewrap or the container: no network, user
nobody, no capability; the submission's caps on processes and file sizes), whose trusted code runs the chapter's code
before the exercise, builds the inputs from the run's hidden seed and warms PyTorch up, then sets a hard
``RLIMIT_AS`` of its size plus the probe's budget (a quarter of one (length, length) matrix), and only then runs the
exercise's answer cells and calls the answer once on a long input (:mod:`._probe_child`). The answer's output comes
back as plain data and is compared here with the package's own tiled code. Out of memory, a process killed or timed
out, a wrong or missing output: the exercise fails with the probe's message (for a checker with named checks, the
credit of those before the probe's ``part``).

The probe runs only the exercise's own cells among the chapter's code: a helper it calls must be defined in its cell
or the chapter's (an earlier exercise's cells are the chapter's solution there, as in the kernel, minus any extra
helper they defined).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from .. import checks
from ..checks._probes import PROBES, Probe, compare, probe_reference
from ..checks._wire import WireError, decode
from .exercises import Exercise
from .verdicts import check_call, read_trace

__all__ = ["probe_for", "run_probe"]

# one thread, one malloc arena: the allocations made after the limit are the answer's, not a new thread's
_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "1", "TFM_DEVICE": "cpu",
        "MPLBACKEND": "Agg"}


def probe_for(ex: Exercise, checker: Callable | None) -> Probe | None:
    """The probe of ``ex``, when its checker is the package's checker that has one."""
    probe = PROBES.get(ex.checker)
    return probe if probe is not None and checker is getattr(checks, ex.checker, None) else None


def _command(argv: list[str], folder: Path, sandbox: bool | str, limits: Any) -> tuple[list[str], str | None]:
    """``argv`` wrapped in the sandbox the kernels run in; and the container's name to remove after, if any."""
    env = dict(_ENV, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    if sandbox in ("podman", "docker"):
        from .sandbox_container import container_command

        name = f"tfm-probe-{os.getpid()}-{secrets.token_hex(6)}"
        caps = (limits.processes, limits.memory_mb) if limits is not None else (0, 0)
        return container_command(sandbox, argv, scratch=folder, shared=[], env=env, name=name, root=folder / "root",
                                 processes=caps[0], memory_mb=caps[1]), name
    if sandbox:
        from .sandbox import sandbox_command

        return sandbox_command(argv, scratch=folder, env=env), None
    return argv, None


def _run(probe: Probe, spec: dict, folder: Path, sandbox: bool | str, limits: Any, timeout: int) -> tuple[Any, str]:
    """Run the probe's process; (what it wrote, None) or (None, why it wrote nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = folder / "probe-spec.json", folder / f"probe-out-{secrets.token_hex(8)}.json"
    spec_path.write_text(json.dumps(spec))
    flags = (["--processes", str(limits.processes), "--file-mb", str(limits.disk_mb)]  # as the kernel: in the sandbox
             if limits is not None and sandbox in (True, "bwrap") else [])
    argv = [sys.executable, "-m", "tfm_lesson.course._probe_child", *flags, str(spec_path), str(out_path)]
    command, container = _command(argv, folder, sandbox, limits)
    env = None if sandbox else {**os.environ, **_ENV}
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout, env=env)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if container is not None:
            from .sandbox_container import remove

            remove(sandbox, container)
    try:
        found = read_trace(out_path)
    except ValueError as exc:
        return None, f"its output could not be read ({exc})"
    if found is not None:
        return found, ""
    if code is None:
        return None, f"it ran past the {timeout} s limit"
    return None, (f"its process was killed (signal {-code}), the way a process dies that goes over its memory"
                  if code < 0 else f"its process ended (exit status {code}) before it returned")


def _not_data(found: Any) -> Any:
    raise WireError("a handle: the probe's output is data only")


def _verdict(probe: Probe, found: Any, why: str, salt: int | None) -> str | None:
    """The probe's message, or None when the answer returned the right output within the budget."""
    head = f"{probe.label}: under {probe.budget_words()}, "
    if found is None:
        return head + f"{probe.call} gave no output: {why}"
    if not isinstance(found, dict):
        return head + f"{probe.call} gave no output the grader can read"
    if "error" in found:
        detail = str(found.get("detail", ""))[:1000]
        asked = re.search(r"allocate (\d+) bytes", detail)
        if asked:  # PyTorch's allocator says how much one tensor asked for, in its own long words
            detail = f"one tensor of {int(asked.group(1)) / 2 ** 20:.1f} MiB did not fit"
        if found["error"] == "memory":
            return head + (f"your exercise's cells and one call of {probe.call} ran out of memory: {detail}. Memory "
                           "made before the call counts too (a buffer made at the cell's level and reused with "
                           "out=): keep only one (block, block) tile at a time, and the running statistics")
        return head + f"{probe.call} raised {detail}"
    try:
        got = decode(found.get("out"), _not_data)
    except (WireError, Exception) as exc:
        return head + f"{probe.call} returned something that is not data ({type(exc).__name__})"
    wrong = compare(probe, got, probe_reference(probe.checker, salt))
    return None if wrong is None else head + wrong


def _credit(checker: Callable, probe: Probe) -> float:
    """For a checker with named checks, the weight of those before the probe's ``part`` over the total; else 0."""
    weights = getattr(checker, "checks", None)
    if not isinstance(weights, dict) or probe.part not in weights:
        return 0.0
    names = list(weights)
    return sum(weights[n] for n in names[:names.index(probe.part)]) / sum(weights.values())


def run_probe(ex: Exercise, prelude: list[str], answers: list[str], checker: Callable, *, workdir: Path,
              sandbox: bool | str, timeout: int, salt: int | None, limits: Any = None) -> tuple[str, float] | None:
    """Run ``ex``'s probe (when it has one): None when the answer keeps the rule, else (message, credit)."""
    probe = probe_for(ex, checker)
    if probe is None:
        return None
    spec = {"checker": probe.checker, "salt": salt, "prelude": prelude, "answers": answers,
            "expression": check_call(ex).answers[0]}
    folder = workdir / f"probe-{ex.number}-{secrets.token_hex(4)}"
    try:
        found, why = _run(probe, spec, folder, sandbox, limits, timeout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    message = _verdict(probe, found, why, salt)
    return None if message is None else (message, _credit(checker, probe))
