"""Checkpoints: written atomically, tied weights stored once, ``extra`` checked at save time, clear errors for
missing, empty, truncated, corrupt, foreign and unsafe files."""
from __future__ import annotations

import io
import os
import pickle
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from tfm_lesson.data import load_task
from tfm_lesson.train.loop import (load_checkpoint, make_model, read_checkpoint, save_checkpoint,
                                 update_checkpoint_extra)


@pytest.fixture(scope="module")
def data():
    return load_task("copy", n_train=60, n_valid=5, n_test=5, min_len=3, max_len=5, vocab_size=8)


@pytest.fixture
def model(data):
    torch.manual_seed(0)
    return make_model(data.src_vocab, data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)


def _save(path, model, data, **kw):
    save_checkpoint(path, model, data.src_vocab, data.tgt_vocab, **kw)


def test_a_failed_save_leaves_the_old_checkpoint_intact(tmp_path, model, data, monkeypatch):
    path = tmp_path / "model.pt"
    _save(path, model, data, extra={"version": 1})
    before = path.read_bytes()

    def broken_save(obj, f, *a, **k):  # writes half a file, then the disk "fills up"
        f.write(b"PK\x03\x04 half a zip archive")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="No space"):
        _save(path, model, data, extra={"version": 2})
    monkeypatch.undo()
    assert path.read_bytes() == before  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]  # no temporary file left behind
    assert load_checkpoint(path, device="cpu").extra == {"version": 1}


def test_save_goes_through_a_temporary_file_and_a_rename(tmp_path, model, data, monkeypatch):
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((Path(src), Path(dst)))
        assert not Path(dst).exists()  # nothing was written to the target before the rename
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    _save(tmp_path / "run" / "model.pt", model, data)
    (src, dst), = calls
    assert dst == tmp_path / "run" / "model.pt" and src.parent == dst.parent and src.name.endswith(".tmp")
    mode = stat.S_IMODE(dst.stat().st_mode)
    assert mode & stat.S_IRUSR and mode & stat.S_IRGRP  # usual permissions, not mkstemp's private 0600


@pytest.mark.parametrize("value, where", [
    (Path("runs/x"), "extra['where']"),
    (np.float64(0.5), "extra['where']"),
    ({"nested": [1, object()]}, "extra['where']['nested'][1]"),
    (frozenset({1, 2}), "extra['where']"),
    (slice(1, 2), "extra['where']"),
    (np.zeros(2), "extra['where']"),
    ({Path("k"): 1}, "extra['where'] key PosixPath('k')"),
])
def test_extra_values_the_loader_would_refuse_are_refused_at_save(tmp_path, model, data, value, where):
    with pytest.raises(TypeError) as err:
        _save(tmp_path / "m.pt", model, data, extra={"where": value})
    assert where in str(err.value) and "weights_only" in str(err.value)
    assert not (tmp_path / "m.pt").exists()


def test_plain_extra_values_round_trip(tmp_path, model, data):
    extra = {"task": "copy", "steps": 3, "loss": 0.25, "ok": True, "none": None, "list": [1, 2.5, "a"],
             "tuple": (1, 2), "nested": {"a": {"b": [True]}}, "tensor": torch.arange(3),
             "bytes": b"raw", 3: "an int key"}
    _save(tmp_path / "m.pt", model, data, extra=extra)
    got = load_checkpoint(tmp_path / "m.pt", device="cpu").extra
    assert torch.equal(got.pop("tensor"), extra.pop("tensor")) and got == extra
    with pytest.raises(TypeError, match="extra must be a dict"):
        _save(tmp_path / "m.pt", model, data, extra=[1, 2])


def _safe_loader_takes(value) -> bool:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, weights_only=True)
    except Exception:
        return False
    return True


@pytest.mark.parametrize("value", [{1, 2}, frozenset({3}), bytearray(b"x"), 1 + 2j],
                         ids=["set", "frozenset", "bytearray", "complex"])
def test_extra_values_this_torch_may_refuse_are_refused_when_saving(tmp_path, model, data, value):
    """What torch's safe loader accepts depends on its version (torch 2.5 refuses a set or a complex number,
    2.6+ takes them): a value the installed torch would refuse on loading is refused when saving, with the
    reason; anything else loads."""
    if _safe_loader_takes(value):
        _save(tmp_path / "m.pt", model, data, extra={"v": value})
        assert load_checkpoint(tmp_path / "m.pt", device="cpu").extra == {"v": value}
    else:
        with pytest.raises(TypeError, match="load_checkpoint .* would refuse"):
            _save(tmp_path / "m.pt", model, data, extra={"v": value})
        assert not (tmp_path / "m.pt").exists()


def test_tied_weight_is_stored_once_and_loads_back_tied(tmp_path, model, data):
    assert model.src_embed.weight is model.tgt_embed.weight is model.generator.weight
    path = tmp_path / "m.pt"
    _save(path, model, data)
    raw = torch.load(path, weights_only=True)
    tied_keys = [k for k in model.state_dict() if k.endswith("embed.weight") or k == "generator.weight"]
    kept = [k for k in tied_keys if k in raw["state_dict"]]
    assert len(tied_keys) >= 2 and len(kept) == 1  # one copy of the matrix, the other keys point to it
    assert set(raw["tied"]) == set(tied_keys) - set(kept)
    loaded = load_checkpoint(path, device="cpu").model
    assert loaded.src_embed.weight is loaded.tgt_embed.weight is loaded.generator.weight
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_untied_model_keeps_its_matrices(tmp_path, model, data):
    """Only tensors that really are one are stored once: an untied model keeps its three matrices."""
    emb_bytes = model.generator.weight.numel() * 4
    path = tmp_path / "m.pt"
    _save(path, model, data)
    size_once = path.stat().st_size
    untied = make_model(data.src_vocab, data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32,
                        share_embeddings=False, tie_embeddings=False)
    _save(tmp_path / "u.pt", untied, data)
    raw = torch.load(tmp_path / "u.pt", weights_only=True)
    assert raw["tied"] == {} and {"src_embed.weight", "tgt_embed.weight", "generator.weight"} <= set(raw["state_dict"])
    assert (tmp_path / "u.pt").stat().st_size > size_once + emb_bytes  # the untied model really holds more
    loaded = load_checkpoint(tmp_path / "u.pt", device="cpu").model
    assert loaded.generator.weight is not loaded.tgt_embed.weight


def test_update_checkpoint_extra(tmp_path, model, data):
    path = tmp_path / "m.pt"
    _save(path, model, data, extra={"steps": 3})
    update_checkpoint_extra(path, test={"bleu": 12.5})
    assert load_checkpoint(path, device="cpu").extra == {"steps": 3, "test": {"bleu": 12.5}}
    with pytest.raises(TypeError, match="weights_only"):
        update_checkpoint_extra(path, where=Path("x"))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned > /dev/null",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_bad_files_get_clear_errors(tmp_path, model, data):
    good = tmp_path / "good.pt"
    _save(good, model, data)
    blob = good.read_bytes()

    with pytest.raises(FileNotFoundError, match="no checkpoint at .*missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.pt is empty"):
        load_checkpoint(empty)
    for name, content in (("truncated.pt", blob[: len(blob) // 2]), ("cut_early.pt", blob[:40]),
                          ("noise.pt", bytes(range(256)) * 8), ("text.pt", b"hello, I am a text file\n")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"{name} is not a readable checkpoint: the file is truncated or corrupt"):
            load_checkpoint(tmp_path / name)
    evil = tmp_path / "evil.pt"
    with open(evil, "wb") as fh:
        pickle.dump({"config": _Evil()}, fh)
    with pytest.raises(ValueError, match="(refused|truncated or corrupt)"):
        load_checkpoint(evil)
    evil_zip = tmp_path / "evil_zip.pt"
    torch.save({"config": _Evil(), "state_dict": {}, "src_vocab": {}, "tgt_vocab": {}}, evil_zip)
    with pytest.raises(ValueError, match="refused: it holds Python objects"):
        load_checkpoint(evil_zip)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match="not a tfm_lesson checkpoint"):
        load_checkpoint(foreign)
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match="folder without model.pt"):
        read_checkpoint(tmp_path / "folder")


def test_a_run_folder_reads_its_model_pt(tmp_path, model, data):
    _save(tmp_path / "run" / "model.pt", model, data, extra={"steps": 1})
    assert read_checkpoint(tmp_path / "run")["extra"] == {"steps": 1}


def test_bad_device_is_named(tmp_path, model, data):
    _save(tmp_path / "m.pt", model, data)
    with pytest.raises(ValueError, match="device must be cpu, cuda"):
        load_checkpoint(tmp_path / "m.pt", device="banana")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            load_checkpoint(tmp_path / "m.pt", device="cuda")


def test_in_memory_round_trip_matches_file(tmp_path, model, data):
    """What save_checkpoint writes is what torch.save writes: loadable with weights_only=True from bytes too."""
    _save(tmp_path / "m.pt", model, data)
    raw = torch.load(io.BytesIO((tmp_path / "m.pt").read_bytes()), weights_only=True)
    assert raw["format"] == "tfm_lesson/1" and raw["config"] == model.config.to_dict()


def test_a_checkpoint_saved_before_the_rename_loads(tmp_path, model, data):
    """The config once said src_vocab/tgt_vocab for the vocabulary sizes (and a GPT's config context, a run's
    settings layers and context): those are read as today's names, so an older file still loads and resumes."""
    from tfm_lesson.train.checkpoint import with_new_names

    old = {"config": {"src_vocab": 10, "tgt_vocab": 12, "max_len": 512},
           "extra": {"run": {"layers": 2, "context": 64, "d_model": 16}, "steps": 3},
           "training": {"settings": {"context": 64, "steps": 9}, "step": 3}, "src_vocab": {"itos": ["<pad>"]}}
    new = with_new_names(old)
    assert new["config"] == {"src_vocab_size": 10, "tgt_vocab_size": 12, "max_len": 512}
    assert new["extra"] == {"run": {"num_layers": 2, "max_len": 64, "d_model": 16}, "steps": 3}
    assert new["training"]["settings"] == {"max_len": 64, "steps": 9}
    assert new["src_vocab"] == {"itos": ["<pad>"]}  # the file's Vocab (a dict) keeps its name
    assert with_new_names({"config": {"vocab_size": 5, "context": 32}})["config"] == {"vocab_size": 5, "max_len": 32}
    # a whole file in the old form
    path = tmp_path / "old.pt"
    save_checkpoint(path, model, data.src_vocab, data.tgt_vocab, extra={"run": {"layers": 1}})
    payload = torch.load(path, weights_only=True)
    payload["config"] = {{"src_vocab_size": "src_vocab", "tgt_vocab_size": "tgt_vocab"}.get(k, k): v
                         for k, v in payload["config"].items()}
    torch.save(payload, path)
    loaded, _, _, extra = load_checkpoint(path, device="cpu")
    assert loaded.config == model.config and extra == {"run": {"num_layers": 1}}
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
