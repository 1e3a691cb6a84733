"""Where a run computes: the device (CPU by default, CUDA when present), seeds, CPU threads, mixed precision
and the process group of ``torchrun`` (DistributedDataParallel). The same code on every machine."""
from __future__ import annotations

import functools
import inspect
import os
import random
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, NamedTuple

import torch
from torch import nn

__all__ = ["default_device", "seed_everything", "parse_device", "cpu_threads", "auto_threads", "threads_for",
           "follows_thread_rule",
           "SMALL_MODEL", "amp_dtype", "DistributedInfo", "distributed_info", "distributed_plan", "is_main_process",
           "setup_distributed"]


def default_device() -> torch.device:
    """``cuda`` when a GPU is visible (and ``TFM_DEVICE`` does not say otherwise), else ``cpu``."""
    wanted = os.environ.get("TFM_DEVICE")
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0, deterministic: bool = False) -> None:
    """Seed Python, NumPy (if installed) and torch (CPU and every CUDA device) so runs reproduce.

    On the CPU that is enough. On a GPU some kernels (cuBLAS reductions, cuDNN's algorithm search, scatter-adds)
    are not bit-reproducible by default; ``deterministic=True`` also asks PyTorch for deterministic algorithms
    (``torch.use_deterministic_algorithms``: an operation without one then raises instead of varying),
    turns off cuDNN's benchmark search, and sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (read by cuBLAS when it
    starts: call this before the first matrix product on the GPU). Slower; ``False`` leaves those settings as
    they are.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional for the package itself
        pass
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


@contextmanager
def cpu_threads(threads: int | None):
    """Run the block with ``torch.set_num_threads(threads)`` (``None``: unchanged), then restore the count.

    Small models multiply small matrices, where intra-op parallelism gains nothing and costs a great deal on
    a busy CPU: measured on a shared 2-core machine, a training step of a 0.17 M-parameter model took 0.04 s
    with one thread and 0.08-0.6 s with two. The course's trainers and decoders therefore follow :func:`auto_threads`
    (one thread on the CPU under :data:`SMALL_MODEL` parameters) unless told otherwise (``threads=``).
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


# The one thread rule: below this many parameters a model on the CPU trains and decodes with one thread.
SMALL_MODEL = 5_000_000


def auto_threads(model: nn.Module, device: torch.device, threads: int | None | str = "auto") -> int | None:
    """The thread count for :func:`cpu_threads`: ``threads`` itself unless it is ``"auto"``; then one thread for a
    model under :data:`SMALL_MODEL` parameters on the CPU, else ``None`` (torch's own choice)."""
    if threads != "auto":
        return threads
    if torch.device(device).type != "cpu":
        return None
    small = sum(p.numel() for p in model.parameters()) < SMALL_MODEL
    return 1 if small else None


def threads_for(model: nn.Module, device: torch.device, threads: int | None | str = "auto"):
    """``cpu_threads(auto_threads(model, device, threads))``: the block runs with the thread rule's count."""
    return cpu_threads(auto_threads(model, device, threads))


def follows_thread_rule(fn: Callable) -> Callable:
    """Decorate ``fn(model, ...)`` so that it runs under :func:`threads_for` on the model's device: it gains a
    keyword argument ``threads`` (default ``"auto"``: one thread for a small model on the CPU; ``None``: torch's
    count; a number: that count). Decoders use it, so that a decoded result does not depend on the machine's
    thread count, as the trainers' results do not."""

    @functools.wraps(fn)
    def wrapper(model: nn.Module, *args: Any, threads: int | None | str = "auto", **kwargs: Any) -> Any:
        first = next(model.parameters(), None) if isinstance(model, nn.Module) else None
        device = first.device if first is not None else torch.device("cpu")
        with threads_for(model, device, threads):
            return fn(model, *args, **kwargs)

    signature = inspect.signature(fn)
    extra = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY, default="auto",
                              annotation="int | None | str")
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])
    return wrapper


# --------------------------------------------------------------------------------------------- distributed
class DistributedInfo(NamedTuple):
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def distributed_info() -> DistributedInfo:
    """Rank and world size from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``: the processes on this machine)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    return DistributedInfo(rank, world, int(os.environ.get("LOCAL_RANK", str(rank))),
                           int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))


def is_main_process() -> bool:
    """True on rank 0 (or when not distributed): the process that prints and saves."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def parse_device(value: torch.device | str) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` -> a ``torch.device`` that exists on this machine, or a
    ``ValueError`` that says why not (no CUDA GPU, no GPU with that number, an unknown name)."""
    try:
        device = value if isinstance(value, torch.device) else torch.device(str(value))
    except (RuntimeError, ValueError):
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {value!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(value)!r}: this machine has no CUDA GPU that PyTorch can use "
                             "(torch.cuda.is_available() is False); use cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {str(value)!r}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"device {str(value)!r}: Apple's MPS is not available here; use cpu")
    elif device.type != "cpu":
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {value!r}")
    return device


def distributed_plan(device: torch.device, local_rank: int, local_world_size: int, cuda_count: int,
                     explicit: bool) -> tuple[str, torch.device, str | None]:
    """``(backend, device, note)`` for one process under torchrun. On the CPU: gloo. On CUDA: nccl with one GPU
    per process (``cuda:local_rank``) when the machine has a GPU for each of its processes; otherwise a GPU
    that was asked for (``explicit``) is refused with a ``ValueError``, and a default one falls back to gloo
    on the CPU, with a ``note`` saying so (every process takes the same decision)."""
    if device.type != "cuda":
        return "gloo", device, None
    if local_world_size <= cuda_count:
        return "nccl", torch.device("cuda", local_rank), None
    why = (f"torchrun started {local_world_size} processes on this machine, which has {cuda_count} CUDA GPU(s); "
           "DistributedDataParallel on GPUs needs one GPU per process")
    if explicit:
        raise ValueError(f"{why}: use --nproc_per_node={max(cuda_count, 1)} or fewer, or --device cpu")
    return "gloo", torch.device("cpu"), f"{why}: training on the CPU with gloo instead"


def setup_distributed(device: torch.device, explicit: bool = True,
                       log: Callable[[str], None] | None = None) -> tuple[DistributedInfo, torch.device]:
    """Join the process group torchrun prepared: gloo on CPU, nccl on GPU (one GPU per local rank)."""
    import torch.distributed as dist

    info = distributed_info()
    if not info.enabled:
        return info, device
    cuda_count = torch.cuda.device_count() if device.type == "cuda" else 0
    backend, device, note = distributed_plan(device, info.local_rank, info.local_world_size, cuda_count, explicit)
    if note and info.rank == 0:
        (log or print)(note)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return info, device



def amp_dtype(device: torch.device | str, amp: bool = True) -> torch.dtype | None:
    """The dtype :func:`train` runs the forward pass in under autocast: ``None`` on the CPU or with
    ``amp=False``; ``bfloat16`` on a GPU of compute capability 8.0 or more (Ampere, Hopper and later, which
    compute in bf16 natively); ``float16``, with a ``GradScaler``, on older GPUs (T4: 7.5, V100: 7.0).

    ``torch.cuda.is_bf16_supported()`` is not the test: it answers True on a T4 or V100 too, where bf16 is
    emulated and slower than float32.
    """
    device = torch.device(device)
    if not amp or device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return torch.bfloat16 if (major, minor) >= (8, 0) else torch.float16


def _autocast(device: torch.device, amp: bool):
    """``(context, dtype)``: autocast in :func:`amp_dtype`'s dtype, or a no-op context and ``None``."""
    dtype = amp_dtype(device, amp)
    if dtype is None:
        return nullcontext(), None
    return torch.autocast("cuda", dtype=dtype), dtype

