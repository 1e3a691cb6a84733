"""The run contract every trainer of the course keeps (translation: :mod:`tfm_lesson.train.loop`, language model:
:mod:`tfm_lesson.train.lm`): nothing is lost.

- saves are atomic, every ``save_every`` steps and at the end;
- Ctrl-C or SIGTERM finishes the step, saves and raises :class:`TrainingInterrupted`;
- a resumed run continues with the same random state, so it equals the uninterrupted run, and refuses
  settings that differ from the saved run's;
- a NaN or infinite loss (or weight) stops the run with :class:`TrainingDiverged` before the bad step, and the
  last good checkpoint is never written over.

:class:`GuardedRun` is that loop; a trainer supplies one step, an evaluation and a save.
"""
from __future__ import annotations

import math
import random
import signal
import threading
import time
from abc import ABC, abstractmethod
from typing import Callable

import torch
from torch import nn

__all__ = ["TrainingDiverged", "TrainingInterrupted", "StopRequests", "rng_state", "set_rng_state",
           "first_bad_parameter", "check_same_settings", "GuardedRun"]


class TrainingDiverged(RuntimeError):
    """The loss (or a weight) became NaN or infinite: the trainer stopped and saved nothing."""

    def __init__(self, message: str, step: int, loss: float, lr: float, checkpoint: str | None) -> None:
        super().__init__(message)
        self.step, self.loss, self.lr, self.checkpoint = step, loss, lr, checkpoint


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM reached a trainer: it finished the step, saved, and stopped."""

    def __init__(self, message: str, step: int, checkpoint: str, signal_name: str) -> None:
        super().__init__(message)
        self.step, self.checkpoint, self.signal_name = step, checkpoint, signal_name

    def __str__(self) -> str:
        return str(self.args[0])


class StopRequests:
    """While active (main thread only), SIGINT and SIGTERM set ``self.signal`` instead of killing the run, so
    the loop can finish its step and save. A second Ctrl-C raises ``KeyboardInterrupt`` at once."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.signal, self._previous = enabled, None, {}

    def __enter__(self) -> "StopRequests":
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):  # not allowed here (an embedded interpreter): keep the default
                    pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt("a second Ctrl-C: stopped at once, without saving this step")
        self.signal = signum

    def __exit__(self, *exc) -> bool:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        return False


def rng_state() -> dict:
    """Every random generator a run draws from (dropout: torch's), as plain values and tensors."""
    version, internal, gauss = random.getstate()
    state: dict = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [str(kind), torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    return state


def set_rng_state(state: dict) -> None:
    """Put back what :func:`rng_state` saved."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        try:
            import numpy as np

            kind, keys, pos, has_gauss, cached = state["numpy"]
            np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))
        except ImportError:
            pass


def first_bad_parameter(model: nn.Module) -> str | None:
    """The name of the first parameter holding a NaN or an infinity, or ``None``."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):
            return name
    return None


def check_same_settings(settings: dict, saved: dict, where: str) -> None:
    """``ValueError("resume: ...")`` naming the first setting that differs from the saved run's."""
    for name, value in settings.items():
        theirs = saved.get(name)
        same = (math.isclose(value, theirs, rel_tol=1e-9) if isinstance(value, float) and isinstance(theirs, float)
                else value == theirs)
        if not same:
            raise ValueError(f"resume: {name}={value!r} differs from the run in {where} ({name}={theirs!r}); "
                             "continue it with the same settings")


class GuardedRun(ABC):
    """The loop of a trainer that keeps the run contract. A subclass sets ``model``, ``optimizer``, ``history``
    (with lists ``step`` and ``loss``), ``step`` (steps already taken), ``path`` (the checkpoint file or
    ``None``), ``saved_step`` (the step that file holds, or ``None``) and implements:

    - ``take_step(check)``: one optimiser step; it calls ``check(loss_value)`` after the forward pass and
      before ``backward`` (that raises :class:`TrainingDiverged` on a non-finite loss) and returns the loss;
    - ``evaluate(step)``: score the held-out data (and log it);
    - ``write(step)``: save the whole run to ``path``;
    - ``peak_lr()``: the schedule's largest rate, for the divergence message;
    - ``last_evaluated()``: the step of the last evaluation, or ``None``.

    ``agree(*flags)`` makes every process take the same decision (under DDP); ``main`` is the process
    that saves."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    history: dict
    step: int
    path: str | None
    saved_step: int | None
    main: bool = True
    precision_hint: str = ""
    resume_hint: str = "resume={path!r}"

    def agree(self, *flags: bool) -> list[bool]:
        return list(flags)

    def diverged(self, step: int, loss: float, what: str) -> TrainingDiverged:
        finite = [(s, v) for s, v in zip(self.history["step"], self.history["loss"]) if math.isfinite(v)]
        last = f" The last finite loss was {finite[-1][1]:.4g} at step {finite[-1][0]}." if finite else ""
        lr = self.optimizer.param_groups[0]["lr"]
        kept = (f" The last good checkpoint, {self.path} (step {self.saved_step}), is kept as it was."
                if self.saved_step is not None else " Nothing was saved.")
        message = (f"training diverged at step {step}: {what}.{last} The learning rate was {lr:.3g} (peak "
                   f"{self.peak_lr():.3g}). Likely causes: a learning rate too high (lower peak_lr / --peak-lr, or a "
                   f"longer warmup), no gradient clipping (clip / --clip){self.precision_hint}.{kept}")
        return TrainingDiverged(message, step, loss, lr, self.path if self.saved_step is not None else None)

    def check_loss(self, loss_value: float) -> None:
        (bad,) = self.agree(not math.isfinite(loss_value))
        if bad:
            raise self.diverged(self.step + 1, loss_value, f"the loss is {loss_value}")

    def save(self, step: int) -> None:
        if not (self.main and self.path) or self.saved_step == step:
            return
        bad = first_bad_parameter(self.model)
        if bad is not None:
            loss = self.history["loss"][-1] if self.history["loss"] else math.nan
            raise self.diverged(step, loss, f"the weight {bad} is no longer finite")
        self.write(step)
        self.saved_step = step

    def run(self, steps: int | None, minutes: float | None, eval_every: int | None, save_every: int | None,
            on_step: Callable[[], None] | None = None) -> None:
        """Step until ``steps`` in all or ``minutes`` from now; evaluate and save on the way and at the end."""
        deadline = time.perf_counter() + 60.0 * minutes if minutes is not None else math.inf
        with StopRequests(enabled=self.path is not None) as stop:
            while True:
                out_of_time, stop_asked = self.agree(time.perf_counter() >= deadline, stop.signal is not None)
                if stop_asked:
                    self.save(self.step)
                    name = signal.Signals(stop.signal).name if stop.signal is not None else "a signal on another rank"
                    raise TrainingInterrupted(f"training stopped by {name} after step {self.step}; the run is saved "
                                              f"in {self.path}: continue it with "
                                              + self.resume_hint.format(path=self.path), self.step, self.path, name)
                if (steps is not None and self.step >= steps) or out_of_time:
                    break
                self.take_step(self.check_loss)
                self.step += 1
                if on_step is not None:
                    on_step()
                if eval_every and self.step % eval_every == 0:
                    self.evaluate(self.step)
                if save_every and self.step % save_every == 0:
                    self.save(self.step)
            if self.step and self.last_evaluated() != self.step:
                self.evaluate(self.step)
            self.finish()
            self.save(self.step)

    @abstractmethod
    def last_evaluated(self) -> int | None:
        """See the class docstring."""

    def finish(self) -> None:
        """Called once after the last step and evaluation, before the final save."""

    @abstractmethod
    def take_step(self, check: Callable[[float], None]) -> float:
        """See the class docstring."""

    @abstractmethod
    def evaluate(self, step: int) -> None:
        """See the class docstring."""

    @abstractmethod
    def write(self, step: int) -> None:
        """See the class docstring."""

    @abstractmethod
    def peak_lr(self) -> float:
        """See the class docstring."""
