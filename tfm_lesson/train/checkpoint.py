"""Checkpoints: a model, its vocabularies and plain extras in one file, written atomically and read safely
(``torch.load(..., weights_only=True)``: no code from the file runs).

    save_checkpoint("reverse.pt", model, data.src_vocab, data.tgt_vocab, extra={"steps": 600})
    model, src_vocab, tgt_vocab, extra = load_checkpoint("reverse.pt")

:func:`tfm_lesson.train.loop.train` also stores the state that continues a run (``training=``).
"""
from __future__ import annotations

import io
import os
import pickle
from collections import OrderedDict
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .._io import atomic_open
from ..device import default_device, parse_device
from ..model import Transformer, TransformerConfig
from .runstate import check_same_settings

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "read_checkpoint", "update_checkpoint_extra",
           "check_plain", "check_extra", "checked_parts", "atomic_save", "full_state_dict",
           "load_run_state", "run_state", "OLD_NAMES", "with_new_names"]


class Checkpoint(NamedTuple):
    model: Transformer
    src_vocab: object
    tgt_vocab: object
    extra: dict


_PLAIN = (str, int, float, bool, type(None), bytes, bytearray, complex, torch.Size)


def check_plain(value, where: str = "extra") -> None:
    """Raise TypeError, naming the entry, for anything ``torch.load(weights_only=True)`` would refuse."""
    kind = type(value)
    if kind in _PLAIN or isinstance(value, Tensor):
        return
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            check_plain(key, f"{where} key {key!r}")
            check_plain(item, f"{where}[{key!r}]")
        return
    if kind in (list, tuple, set):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(f"{where} is a {kind.__module__}.{kind.__qualname__}, which load_checkpoint (torch.load with "
                    "weights_only=True) would refuse; store plain values instead: str, int, float, bool, None, "
                    "lists, tuples, dicts and tensors (e.g. str(path), float(x), x.tolist())")


def _round_trip(extra: dict) -> None:
    """The loader's own verdict on ``extra``: saved and read back in memory, as load_checkpoint would."""
    buffer = io.BytesIO()
    torch.save(extra, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        detail = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line or "Unsupported" in line),
                      type(err).__name__)
        raise TypeError(f"extra holds a value that load_checkpoint (torch.load with weights_only=True) would "
                        f"refuse ({detail}); store plain values instead") from None


def check_extra(extra: dict, where: str = "extra") -> None:
    """Refuse (``TypeError``, naming the entry) what the loader would refuse: every save that writes ``extra``
    checks it here, so that what is saved can always be loaded."""
    check_plain(extra, where)
    _round_trip(extra)


def checked_parts(extra: dict | None, training: dict | None) -> tuple[dict, dict | None]:
    """``extra`` and ``training`` as a save writes them (a copy of ``extra``; ``training``'s tensors on the CPU),
    once sure the loader will read them back: a ``TypeError`` names the first entry it would refuse."""
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict of plain values or None, got {type(extra).__name__}")
    extra = dict(extra or {})
    check_extra(extra)
    if training is not None:
        training = to_cpu(training)
        check_plain(training, "training")
    return extra, training


def to_cpu(value):
    """Tensors (also inside dicts, lists and tuples) detached and moved to the CPU; other values as they are."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def _dedupe_tied(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Keep one copy of each tensor that several keys share (tied embeddings), before moving to the CPU: a
    CUDA tensor copied to the CPU key by key would be stored once per key. Returns (state, {alias: key})."""
    first: dict[tuple, str] = {}
    kept: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    for key, value in state.items():
        ident = None
        if value.numel() > 0 and value.device.type != "meta":
            ident = (str(value.device), value.untyped_storage().data_ptr(), value.storage_offset(),
                     tuple(value.shape), tuple(value.stride()), value.dtype)
        if ident is not None and ident in first:
            tied[key] = first[ident]
            continue
        if ident is not None:
            first[ident] = key
        kept[key] = value.detach().cpu()
    return kept, tied


def atomic_save(payload: dict, path: str | os.PathLike) -> None:
    """``torch.save`` through :func:`tfm_lesson._io.atomic_open`: the target is always either the old complete
    file or the new complete one, never half written."""
    with atomic_open(path, "wb") as fh:
        torch.save(payload, fh)


def save_checkpoint(path: str | os.PathLike, model: nn.Module, src_vocab, tgt_vocab, extra: dict | None = None,
                    *, training: dict | None = None) -> None:
    """Save config (a dict), both vocabularies (dicts), the weights and ``extra`` (plain Python values) in one
    file that ``torch.load(..., weights_only=True)`` can read.

    The file is written atomically (a temporary file in the same folder, flushed, then renamed): a save that
    fails midway leaves the previous checkpoint intact. A weight shared by several keys (tied embeddings) is
    stored once. ``extra`` values that the loader would refuse (a ``Path``, a NumPy number, an object) are
    refused here, with the key named. ``training`` is the state :func:`train` saves to continue a run.
    """
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a tfm_lesson.Transformer, got {type(model).__name__}")
    extra, training = checked_parts(extra, training)
    state, tied = _dedupe_tied(model.state_dict())
    payload = {"format": "tfm_lesson/1", "config": model.config.to_dict(), "state_dict": state, "tied": tied,
               "src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "extra": extra}
    if training is not None:
        payload["training"] = training
    atomic_save(payload, path)


# Names that a checkpoint saved before the package's rename may still hold, per part of the file: the model's
# config (sizes were src_vocab/tgt_vocab, a GPT's positions context), the command line's run settings (depth was
# layers, a language model's positions context) and the training settings of a language model's run.
OLD_NAMES: dict[str, dict[str, str]] = {
    "config": {"src_vocab": "src_vocab_size", "tgt_vocab": "tgt_vocab_size", "context": "max_len"},
    "run": {"layers": "num_layers", "context": "max_len"},
    "settings": {"context": "max_len"},
}


def with_new_names(payload: dict) -> dict:
    """``payload`` (a checkpoint as read) with the names of :data:`OLD_NAMES` replaced by today's, in place and
    returned, so that a model or a run saved before the rename still loads and resumes."""
    def renamed(part: object, table: dict[str, str]) -> object:
        if not isinstance(part, dict):
            return part
        return {(table[key] if key in table and table[key] not in part else key): value
                for key, value in part.items()}

    payload["config"] = renamed(payload.get("config"), OLD_NAMES["config"])
    extra, training = payload.get("extra"), payload.get("training")
    if isinstance(extra, dict) and "run" in extra:
        extra["run"] = renamed(extra["run"], OLD_NAMES["run"])
    if isinstance(training, dict) and "settings" in training:
        training["settings"] = renamed(training["settings"], OLD_NAMES["settings"])
    return payload


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The raw contents of a checkpoint (a dict), read safely (``weights_only=True``), or a clear error:
    ``FileNotFoundError`` for a missing file, ``ValueError`` for an empty, truncated, corrupt or foreign one.
    A folder holding ``model.pt`` reads that file."""
    path = os.fspath(path)
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.pt")):
        path = os.path.join(path, "model.pt")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder without model.pt; give the checkpoint file")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes): not a checkpoint; a save was cut off before any byte was "
                         "written. Use an earlier checkpoint or train again")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = next((line for line in lines if "GLOBAL" in line or "Unsupported" in line),
                      lines[0] if lines else type(err).__name__)
        if "GLOBAL" in detail:  # weights_only met a class or function to call: refuse, never run it
            raise ValueError(f"{path} was refused: it holds Python objects, not only plain values and tensors, and "
                             f"loading those could run code ({detail})") from None
        raise ValueError(f"{path} is not a readable checkpoint: the file is truncated or corrupt ({detail})") from None
    except Exception as err:  # torch reports a cut-off file as RuntimeError, EOFError, OSError, ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"{path} is not a readable checkpoint: the file is truncated or corrupt "
                         f"({type(err).__name__}: {first})") from None
    needed = ("config", "state_dict", "src_vocab", "tgt_vocab")
    if not isinstance(payload, dict) or any(k not in payload for k in needed):
        raise ValueError(f"{path} is not a tfm_lesson checkpoint (expected the keys {', '.join(needed)})")
    return with_new_names(payload)


def full_state_dict(payload: dict) -> dict[str, Tensor]:
    state = dict(payload["state_dict"])
    for alias, key in payload.get("tied", {}).items():
        state[alias] = state[key]
    return state


def load_checkpoint(path: str | os.PathLike, device: torch.device | str | None = None) -> Checkpoint:
    """Rebuild ``(model, src_vocab, tgt_vocab, extra)`` from :func:`save_checkpoint`'s file, safely
    (``weights_only=True``: no code from the file runs). The model is in eval mode on ``device``.
    Errors: see :func:`read_checkpoint`."""
    from ..data import Vocab

    device = parse_device(device) if device is not None else default_device()
    payload = read_checkpoint(path)
    try:
        model = Transformer(TransformerConfig(**payload["config"]))
        model.load_state_dict(full_state_dict(payload))
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"{path} does not fit a tfm_lesson Transformer: {first}") from None
    return Checkpoint(model.to(device).eval(), Vocab.from_dict(payload["src_vocab"]),
                      Vocab.from_dict(payload["tgt_vocab"]), payload.get("extra", {}))


def update_checkpoint_extra(path: str | os.PathLike, **values) -> None:
    """Add ``values`` to a checkpoint's ``extra`` (e.g. test metrics after training), rewriting it atomically."""
    check_extra(values)
    payload = read_checkpoint(path)
    payload["extra"] = {**payload.get("extra", {}), **values}
    atomic_save(payload, path)


def run_state(payload: dict, resume, model: nn.Module, settings: dict, fingerprint: str, saver: str,
              data: str, why: str) -> dict:
    """The training state in a checkpoint's ``payload``, once sure ``model``, ``settings`` and the data
    (``fingerprint``) are the saved run's; otherwise ``ValueError("resume: ...")`` saying what differs. ``saver``,
    ``data`` and ``why`` are for the messages: what saves a plain model, what the data is, why it may differ."""
    saved = payload.get("training")
    if not isinstance(saved, dict):
        raise ValueError(f"resume: {resume} holds a model but no training state (it was saved by {saver}, not by a "
                         "trainer's checkpoint=...), so it cannot be continued")
    if payload["config"] != model.config.to_dict():
        diff = {k: (v, payload["config"].get(k)) for k, v in model.config.to_dict().items()
                if payload["config"].get(k) != v}
        raise ValueError(f"resume: the model's config differs from the run in {resume}: "
                         + ", ".join(f"{k}={a!r} here, {b!r} there" for k, (a, b) in diff.items()))
    if saved.get("data") != fingerprint:
        raise ValueError(f"resume: {data} differ from those of the run in {resume} ({why}); a run continues only "
                         "on the same data")
    check_same_settings(settings, saved["settings"], str(resume))
    return saved


def load_run_state(resume, model: nn.Module, settings: dict, fingerprint: str) -> dict:
    """Load the weights of the run saved in ``resume`` into ``model``; return its training state."""
    payload = read_checkpoint(resume)
    saved = run_state(payload, resume, model, settings, fingerprint, "save_checkpoint", "the training pairs",
                      "the file, the task's settings or the seed changed")
    model.load_state_dict(full_state_dict(payload))
    return saved
