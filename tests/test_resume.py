"""A run is never thrown away: periodic saves, Ctrl-C/SIGTERM save and stop, a resumed run equals an
uninterrupted one, a diverged run stops and keeps the last good checkpoint. Also the GPU and DDP decisions
(bf16 only where native, one GPU per process, each rank builds only its own batches), tested on the CPU."""
from __future__ import annotations

import math
import signal

import pytest
import torch

import tfm_lesson.data.batching as batching
from tfm_lesson.data import load_task
from tfm_lesson.data.batching import BatchStream as _BatchStream
from tfm_lesson.train.loop import (TrainingDiverged, TrainingInterrupted, amp_dtype, distributed_plan,
                                 load_checkpoint, make_model, read_checkpoint, save_checkpoint, train)

QUIET = dict(progress=False, log=lambda msg: None, device="cpu")


@pytest.fixture(scope="module")
def data():
    # 100 training pairs in batches of 16: 7 batches an epoch, so 12 steps cross an epoch boundary
    return load_task("copy", n_train=100, n_valid=8, n_test=8, min_len=3, max_len=6, vocab_size=8)


def _model(data, dropout=0.1):
    torch.manual_seed(0)
    return make_model(data.src_vocab, data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32, dropout=dropout)


SETTINGS = dict(batch_size=16, warmup=4, peak_lr=3e-3, seed=3, eval_every=4, eval_limit=4)


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), f"{name} differs by {(p - q).abs().max().item():.3g}"


@pytest.fixture(scope="module")
def uninterrupted(data):
    model = _model(data)
    history = train(model, data, steps=12, **SETTINGS, **QUIET)
    return model, history


def test_resumed_run_equals_the_uninterrupted_run(tmp_path, data, uninterrupted):
    reference, ref_history = uninterrupted
    path = tmp_path / "run" / "model.pt"
    first = _model(data)
    train(first, data, steps=5, checkpoint=path, **SETTINGS, **QUIET)  # stops mid-epoch, mid-schedule
    assert read_checkpoint(path)["training"]["step"] == 5
    resumed = _model(data)  # fresh weights: everything must come from the file
    history = train(resumed, data, steps=12, checkpoint=path, resume=path, **SETTINGS, **QUIET)
    _same_params(resumed, reference)  # bit for bit: weights, Adam moments, schedule, data order, dropout
    assert history["loss"] == ref_history["loss"] and history["lr"] == ref_history["lr"]
    assert history["step"] == list(range(1, 13)) and history["tokens"] == ref_history["tokens"]
    assert read_checkpoint(path)["training"]["step"] == 12


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_and_stops_then_resume_finishes_the_same_run(tmp_path, data, uninterrupted, signum):
    reference, ref_history = uninterrupted
    path = tmp_path / "model.pt"

    def press_ctrl_c(step, history):  # called after the evaluation at step 4 (eval_every=4)
        if step == 4:
            signal.raise_signal(signum)

    before = signal.getsignal(signum)
    with pytest.raises(TrainingInterrupted) as stop:
        train(_model(data), data, steps=12, checkpoint=path, callback=press_ctrl_c, **SETTINGS, **QUIET)
    assert signal.getsignal(signum) is before  # the handler is put back
    assert stop.value.step == 4 and stop.value.checkpoint == str(path)
    assert str(path) in str(stop.value) and "resume" in str(stop.value)
    assert stop.value.signal_name == signal.Signals(signum).name
    assert isinstance(stop.value, KeyboardInterrupt)
    assert load_checkpoint(path, device="cpu").extra["steps"] == 4  # a normal checkpoint: translate with it
    resumed = _model(data)
    history = train(resumed, data, steps=12, checkpoint=path, resume=path, **SETTINGS, **QUIET)
    _same_params(resumed, reference)
    assert history["loss"] == ref_history["loss"]
    assert history["valid_step"] == ref_history["valid_step"] == [4, 8, 12]
    assert history["valid_loss"] == pytest.approx(ref_history["valid_loss"], abs=1e-6)


def test_periodic_saves(tmp_path, data, monkeypatch):
    import tfm_lesson.train.loop as training

    saved = []
    real = training.save_checkpoint
    monkeypatch.setattr(training, "save_checkpoint",
                        lambda path, *a, training=None, **k: (saved.append(training["step"]),
                                                              real(path, *a, training=training, **k)))
    train(_model(data), data, steps=7, checkpoint=tmp_path / "m.pt", save_every=3, **dict(SETTINGS, eval_every=None),
          **QUIET)
    assert saved == [3, 6, 7]  # every 3 steps, and the end
    with pytest.raises(ValueError, match="save_every needs checkpoint"):
        train(_model(data), data, steps=1, save_every=3, **QUIET)


def test_resume_refuses_another_run(tmp_path, data):
    path = tmp_path / "m.pt"
    train(_model(data), data, steps=2, checkpoint=path, **SETTINGS, **QUIET)
    with pytest.raises(ValueError, match="batch_size=8 differs"):
        train(_model(data), data, steps=4, resume=path, **dict(SETTINGS, batch_size=8), **QUIET)
    other = load_task("copy", n_train=100, n_valid=8, n_test=8, min_len=3, max_len=6, vocab_size=8, seed=1)
    with pytest.raises(ValueError, match="training pairs differ"):
        train(_model(other), other, steps=4, resume=path, **SETTINGS, **QUIET)
    bigger = make_model(data.src_vocab, data.tgt_vocab, d_model=32, heads=2, num_layers=1, d_ff=32)
    with pytest.raises(ValueError, match="config differs.*d_model=32 here, 16 there"):
        train(bigger, data, steps=4, resume=path, **SETTINGS, **QUIET)
    plain = tmp_path / "plain.pt"
    save_checkpoint(plain, _model(data), data.src_vocab, data.tgt_vocab)
    with pytest.raises(ValueError, match="no training state"):
        train(_model(data), data, steps=4, resume=plain, **SETTINGS, **QUIET)


def test_divergence_stops_and_saves_nothing(tmp_path, data):
    path = tmp_path / "m.pt"
    model = _model(data, dropout=0.0)
    with pytest.raises(TrainingDiverged) as err:
        train(model, data, steps=50, peak_lr=1e9, warmup=1, clip=None, batch_size=16, checkpoint=path, save_every=1,
              **QUIET)
    message = str(err.value)
    assert "diverged" in message and "learning rate" in message and "clip" in message
    assert not math.isfinite(err.value.loss) or "no longer finite" in message
    if path.exists():  # a step saved before the blow-up holds finite weights only
        for value in read_checkpoint(path)["state_dict"].values():
            assert torch.isfinite(value).all()


def test_divergence_keeps_the_last_good_checkpoint(tmp_path, data):
    path = tmp_path / "m.pt"
    seen = {}

    def poison(step, history):  # after step 3 (and its save at step 2), a weight turns NaN
        if step == 3:
            seen["bytes"] = path.read_bytes()
            with torch.no_grad():
                model.generator.weight[0, 0] = float("nan")

    model = _model(data, dropout=0.0)
    with pytest.raises(TrainingDiverged) as err:
        train(model, data, steps=10, checkpoint=path, save_every=2, callback=poison,
              **dict(SETTINGS, eval_every=3), **QUIET)
    assert err.value.step == 4 and err.value.checkpoint == str(path)
    assert f"{path} (step 2), is kept" in str(err.value)
    assert path.read_bytes() == seen["bytes"]  # never replaced by the NaN weights
    assert read_checkpoint(path)["training"]["step"] == 2


def test_pairs_too_long_for_the_model_are_refused_before_training(data):
    model = make_model(data.src_vocab, data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32, max_len=5)
    with pytest.raises(ValueError, match=r"pair\(s\) need more than the model's max_len=5"):
        train(model, data, steps=1, **QUIET)


# ------------------------------------------------------------------------------------ GPU and DDP decisions
@pytest.mark.parametrize("capability, expected", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                                  ((8, 0), torch.bfloat16), ((8, 6), torch.bfloat16),
                                                  ((9, 0), torch.bfloat16)])
def test_bf16_only_where_the_gpu_computes_it_natively(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # True on a T4 too (emulated)
    assert amp_dtype("cuda") is expected
    assert amp_dtype("cuda", amp=False) is None
    assert amp_dtype("cpu") is None


def test_distributed_plan():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert distributed_plan(cpu, 1, 2, 0, explicit=True) == ("gloo", cpu, None)
    assert distributed_plan(cuda, 1, 2, 2, explicit=True) == ("nccl", torch.device("cuda", 1), None)
    assert distributed_plan(cuda, 0, 1, 1, explicit=False) == ("nccl", torch.device("cuda", 0), None)
    with pytest.raises(ValueError, match="2 processes on this machine, which has 1 CUDA GPU.*--nproc_per_node=1"):
        distributed_plan(cuda, 1, 2, 1, explicit=True)
    backend, device, note = distributed_plan(cuda, 1, 2, 1, explicit=False)  # cuda only by default: fall back
    assert (backend, device) == ("gloo", cpu) and "on the CPU with gloo" in note


def test_each_rank_builds_only_its_batches_and_ranks_partition_the_stream(data, monkeypatch):
    built = []
    real = batching.make_batch
    monkeypatch.setattr(batching, "make_batch", lambda pairs, *a, **k: (built.append(len(pairs)), real(pairs, *a, **k))[1])

    def take(rank, world, n):
        built.clear()
        stream = _BatchStream(data.train, data.src_vocab, data.tgt_vocab, 16, 0, "cpu", rank, world)
        out = [tuple(map(tuple, next(stream).src.tolist())) for _ in range(n)]
        return out, len(built)

    single, _ = take(0, 1, 21)  # three epochs of 7 batches
    rank0, built0 = take(0, 2, 7)
    rank1, built1 = take(1, 2, 7)
    assert built0 == 7 and built1 == 7  # each rank encoded only what it trains on
    # in each epoch rank 0 takes batches 0, 2, 4, 6 and rank 1 takes 1, 3, 5 (epochs start at index 0, 7, 14)
    assert rank0 == [single[i] for i in (0, 2, 4, 6, 7, 9, 11)]
    assert rank1 == [single[i] for i in (1, 3, 5, 8, 10, 12, 15)]
    assert sorted(rank0[:4] + rank1[:3]) == sorted(single[:7])  # together: the whole epoch, once


def test_stream_position_resumes_the_same_batches(data):
    stream = _BatchStream(data.train, data.src_vocab, data.tgt_vocab, 16, 5, "cpu")
    first = [next(stream).src.tolist() for _ in range(10)]
    again = _BatchStream(data.train, data.src_vocab, data.tgt_vocab, 16, 5, "cpu")
    [next(again) for _ in range(4)]
    state = again.state()
    later = _BatchStream(data.train, data.src_vocab, data.tgt_vocab, 16, 5, "cpu", **state)
    assert [next(later).src.tolist() for _ in range(6)] == first[4:]


_DDP_SCRIPT = r'''
import json, os, sys
import tfm_lesson.data.batching as batching
from tfm_lesson.data import load_task
from tfm_lesson.train.loop import make_model, train

built = []
real = batching.make_batch
def spy(pairs, *a, **k):
    built.append([src for src, _ in pairs])
    return real(pairs, *a, **k)
batching.make_batch = spy
data = load_task("copy", n_train=100, n_valid=8, n_test=8, min_len=3, max_len=6, vocab_size=8)
model = make_model(data.src_vocab, data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)
train(model, data, steps=5, batch_size=16, seed=3, device="cpu", progress=False, log=lambda m: None,
      eval_every=None, eval_limit=1)
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as fh:
    json.dump(built, fh)
'''


@pytest.mark.slow
def test_under_torchrun_ranks_build_disjoint_shares_of_one_stream(tmp_path, data):
    """Two gloo processes on the CPU, 5 steps each: each built only its own 5 training batches, and they are
    its share of the single-process stream (the valid split's batches, built on rank 0, are left out)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import tfm_lesson

    script = tmp_path / "ddp_batches.py"
    script.write_text(_DDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TFM_DEVICE": "cpu"}
    root = str(Path(tfm_lesson.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    stream = _BatchStream(data.train, data.src_vocab, data.tgt_vocab, 16, 3, "cpu")
    single = [[data.src_vocab.decode(row.tolist()) for row in next(stream).src] for _ in range(11)]
    train_sources = {s for s, _ in data.train}
    shares = []
    for rank in (0, 1):
        built = json.loads((tmp_path / f"rank{rank}.json").read_text())
        shares.append([b for b in built if set(b) <= train_sources])  # leave out the valid split's batches
    assert len(shares[0]) == len(shares[1]) == 5
    norm = lambda batch: [data.src_vocab.normalize(s) for s in batch]  # noqa: E731
    # 7 batches an epoch: rank 0 takes batches 0, 2, 4, 6 of each epoch, rank 1 takes 1, 3, 5
    assert [norm(b) for b in shares[0]] == [single[i] for i in (0, 2, 4, 6, 7)]
    assert [norm(b) for b in shares[1]] == [single[i] for i in (1, 3, 5, 8, 10)]
