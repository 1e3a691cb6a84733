"""Argument validation shared by the modules (not to be confused with tfm_lesson.checks, the exercise checkers):
clear errors that name the argument and what was expected."""
from __future__ import annotations

import torch
from torch import Tensor


def check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_probability(value: object, name: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {value!r}")
    return float(value)


def site_probability(value: object, name: str, default: float) -> float:
    """A dropout site's own probability ``value``, or ``default`` (the shared ``dropout``) when it is None."""
    return float(default) if value is None else check_probability(value, name)


def check_features(x: object, name: str, d_model: int, dims: str = "(batch, seq_len, d_model)") -> Tensor:
    """``x`` must be a floating tensor shaped ``dims`` whose last size is ``d_model``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor shaped {dims}, got {type(x).__name__}")
    ndim = dims.count(",") + 1
    if x.dim() != ndim:
        raise ValueError(f"{name} must be shaped {dims}, got shape {tuple(x.shape)}")
    if x.size(-1) != d_model:
        raise ValueError(f"{name} has {x.size(-1)} features in its last dimension, expected d_model={d_model}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype} (embed token ids first)")
    return x


def check_tokens(tokens: object, name: str, vocab_size: int) -> Tensor:
    """``tokens`` must be ``(batch, seq_len)`` integer ids in ``[0, vocab_size)``.

    One ``torch.aminmax`` and one copy to the host per call: call it once per batch, not in every layer.
    """
    if not isinstance(tokens, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids shaped (batch, seq_len), got {type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must be shaped (batch, seq_len), got shape {tuple(tokens.shape)}")
    if tokens.dtype not in (torch.long, torch.int32):
        raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}: token ids must be an integer "
                        f"tensor (torch.long, or torch.int32) that an embedding can index; convert with {name}.long()")
    if tokens.numel():
        lo, hi = torch.stack(torch.aminmax(tokens)).tolist()  # one reduction, one device-to-host copy
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size})")
    return tokens


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: no device argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def check_dtype(x: Tensor, name: str, weight: Tensor, module: str) -> Tensor:
    """``x`` must have the floating dtype of ``module``'s weights (inside ``torch.autocast`` torch casts for us)."""
    if x.dtype != weight.dtype and not _autocast_on(x.device.type):
        raise TypeError(
            f"{name} has dtype {x.dtype} but {module}'s weights are {weight.dtype}: convert one to the other "
            f"(`{name}.to({weight.dtype})`, or `module.to({x.dtype})`), or run under torch.autocast")
    return x


def renamed_keywords(**renamed: str):
    """Decorate a function or class so that an old keyword spelling (``renamed[old] = new``) raises a
    ``TypeError`` naming the new one, instead of Python's bare "unexpected keyword argument"."""
    import functools

    def wrap(obj):
        target = obj.__init__ if isinstance(obj, type) else obj
        label = obj.__name__

        @functools.wraps(target)
        def checked(*args, **kwargs):
            for old, new in renamed.items():
                if old in kwargs:
                    raise TypeError(f"{label}() got the keyword {old}=, which is now called {new}=: "
                                    f"write {new}={kwargs[old]!r}")
            return target(*args, **kwargs)

        if isinstance(obj, type):
            obj.__init__ = checked
            return obj
        return checked

    return wrap
