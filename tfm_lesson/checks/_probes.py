"""Rules a grader enforces from outside the learner's kernel: an exercise's *probe*.

Some checks measure how the learner's code runs, not only what it returns: chapter 18's tiled attention must never
hold a (q_len, k_len) matrix, its backward pass must not store P. In a notebook the checker measures the peak itself
(``learner_side(peak_tensor_bytes)``), and while grading that number comes from the submission's kernel, which the
learner's own cells control. So ``course grade`` also runs each such exercise once more in a process of its own
(:mod:`tfm_lesson.course.probe`): this module's trusted code builds the inputs and warms PyTorch up, then a hard
address-space limit of the process's size plus :attr:`Probe.budget` is set, and only then does the learner's answer
run, on one long input. What it returns comes back as plain data (:mod:`._wire`) and is compared here, in the
grader's process, with the package's own tiled code.

:data:`PROBES` names, for each checker that has one, how to build its probe; both sides use it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import torch
from torch import Tensor

from ._harness import close
from ._salt import mix

__all__ = ["Probe", "PROBES", "probe_inputs", "probe_reference", "warm_up", "compare"]

MiB = 2 ** 20


@dataclass(frozen=True)
class Probe:
    """One exercise's probe: the learner's function called once as ``fn(*inputs(seed))`` under ``budget`` bytes."""

    checker: str  # the package's checker it belongs to: "check_tiled_attention"
    label: str  # the verdict's first words: "NOT TILED"
    matrix: str  # what the budget is a quarter of: "score matrix"
    call: str  # how the call reads in a message
    length: int  # q_len = k_len
    dtype: torch.dtype
    inputs: Callable[[int], tuple]  # a seed -> the arguments
    reference: Callable[[tuple], Any]  # the arguments -> what the package's own code returns for them
    atol: float
    rtol: float
    part: str | None = None  # the named check (checks/_parts.py) the memory rule is, where the checker names them

    @property
    def budget(self) -> int:
        """Bytes the answer may add to the process: a quarter of one (length, length) matrix of ``dtype``."""
        return self.length * self.length * self.dtype.itemsize // 4

    def budget_words(self) -> str:
        return (f"a memory budget of {self.budget // MiB} MiB, a quarter of one ({self.length}, {self.length}) "
                f"{str(self.dtype).removeprefix('torch.')} {self.matrix}")


LENGTH, BLOCK, D = 4096, 128, 64


def _qkv(seed: int, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 1, LENGTH, D, generator=gen, dtype=dtype) for _ in range(3))


def _forward_inputs(seed: int) -> tuple:
    q, k, v = _qkv(seed, torch.float32)
    return q, k, v, BLOCK, False, None


def _forward_reference(args: tuple) -> Tensor:
    from ..flash import _forward

    q, k, v, block, causal, mask = args
    with torch.no_grad():
        return _forward(q, k, v, mask, causal, block)[0]


def _backward_inputs(seed: int) -> tuple:
    from ..flash import _forward

    q, k, v = _qkv(seed, torch.float64)
    with torch.no_grad():
        out, lse = _forward(q, k, v, None, False, BLOCK)  # what the forward pass saved
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return q, k, v, out, lse, grad_out, BLOCK, False, None


def _backward_reference(args: tuple) -> tuple[Tensor, Tensor, Tensor]:
    from ..flash import _backward

    q, k, v, out, lse, grad_out, block, causal, mask = args
    with torch.no_grad():
        return _backward(grad_out, q, k, v, out, lse, mask, causal, block)


PROBES: dict[str, Probe] = {probe.checker: probe for probe in (
    Probe("check_tiled_attention", "NOT TILED", "score matrix", f"your function(query (1, 1, {LENGTH}, {D}) float32, key, value, "
          f"block_size={BLOCK})", LENGTH, torch.float32, _forward_inputs, _forward_reference, 1e-5, 1e-4),
    Probe("check_flash_backward", "STORED P", "probability matrix", f"your backward(q (1, 1, {LENGTH}, {D}) float64, k, v, out, lse, "
          f"grad_out, block_size={BLOCK})", LENGTH, torch.float64, _backward_inputs,
          _backward_reference, 1e-8, 1e-6),
)}


def probe_inputs(probe: Probe, salt: int | None) -> tuple:
    """The probe's inputs for the grader's ``salt`` (the run's seed: inputs no submission saw)."""
    return probe.inputs(mix(1800 + len(probe.checker), salt if salt is not None else 0))


@lru_cache(maxsize=4)
def probe_reference(checker: str, salt: int | None) -> Any:
    """The package's answer to the probe's inputs, computed in the grader's process (once a class), with one thread:
    tiles this small run slower on several threads, the more so on a busy machine."""
    from ..device import cpu_threads
    from ._replay import _lock  # a replay in another thread salts torch.Generator for the whole process (_salt)

    probe = PROBES[checker]
    with _lock, cpu_threads(1):
        return probe.reference(probe_inputs(probe, salt))


def warm_up(probe: Probe, args: tuple) -> None:
    """The package's own code once on the first rows of ``args``, so that what PyTorch allocates on first use (its
    thread pool, its kernels' buffers) is there before the limit."""
    small = tuple(a[..., :2 * BLOCK, :] if isinstance(a, Tensor) and a.dim() == 4 else
                  a[..., :2 * BLOCK] if isinstance(a, Tensor) else a for a in args)
    probe.reference(small)


def compare(probe: Probe, got: Any, want: Any) -> str | None:
    """Why ``got`` (what the answer returned under the budget) is not ``want``; None when it is."""
    wants = want if isinstance(want, tuple) else (want,)
    gots = tuple(got) if isinstance(got, (tuple, list)) and isinstance(want, tuple) else (got,)
    if len(gots) != len(wants) or not all(isinstance(g, Tensor) for g in gots):
        return f"{probe.call} returned {type(got).__name__}, not what it returns in the check"
    for i, (g, w) in enumerate(zip(gots, wants)):
        if g.shape != w.shape:
            return f"{probe.call} returned shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        if not close(g.double(), w.double(), atol=probe.atol, rtol=probe.rtol):
            err = (g.double() - w.double()).abs().nan_to_num(math.inf).max().item()
            which = f"output {i + 1}" if len(wants) > 1 else "its output"
            return f"{probe.call}: {which} differs from the package's tiled code by up to {err:.3g}"
    return None
