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


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy (if installed) and torch (CPU and CUDA) so runs reproduce."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # numpy is optional for the package itself
        pass
