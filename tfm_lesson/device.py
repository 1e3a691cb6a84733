"""Device and seeds: CPU by default, CUDA when present; the same code either way."""
from __future__ import annotations

import os
import random

import torch

__all__ = ["default_device", "seed_everything"]


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
