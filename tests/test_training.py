"""Training: label smoothing against torch, the warm-up formula, the optimiser, the loop, checkpoints."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfm_lesson import seed_everything
from tfm_lesson.data import load_task
from tfm_lesson.train.loop import (LabelSmoothingLoss, NoamSchedule, evaluate, load_checkpoint, make_model,
                                 make_optimizer, noam_rate, save_checkpoint, train, warmup_schedule)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_equals_torch(smoothing):
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11, requires_grad=True)
    target = torch.randint(0, 11, (3, 7))
    target[0, 4:] = 0  # padding
    target[2, 1] = 0
    ours = LabelSmoothingLoss(smoothing, pad_id=0)(logits, target)
    theirs = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), label_smoothing=smoothing, ignore_index=0)
    assert torch.allclose(ours, theirs, atol=1e-6)
    g_ours, = torch.autograd.grad(ours, logits)
    g_theirs, = torch.autograd.grad(theirs, logits)
    assert torch.allclose(g_ours, g_theirs, atol=1e-7)
    assert (g_ours[0, 4:] == 0).all()  # padding positions get no gradient


def test_label_smoothing_by_hand():
    # vocab 4, target 2, uniform logits: every class has p = 1/4, so the loss is log 4 whatever the smoothing
    loss = LabelSmoothingLoss(0.1, pad_id=0)(torch.zeros(1, 4), torch.tensor([2]))
    assert loss.item() == pytest.approx(math.log(4))
    # confident and right: loss = 0.9 * (-log p_t) + 0.1 * mean(-log p)
    logits = torch.tensor([[0.0, 0.0, 5.0, 0.0]])
    logp = logits.log_softmax(-1)[0]
    want = 0.9 * -logp[2] + 0.1 * -logp.mean()
    assert LabelSmoothingLoss(0.1)(logits, torch.tensor([2])).item() == pytest.approx(want.item(), rel=1e-6)
    with pytest.raises(ValueError, match="smoothing"):
        LabelSmoothingLoss(1.0)
    with pytest.raises(ValueError, match="logits"):
        LabelSmoothingLoss()(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


def test_noam_formula():
    d_model, warmup = 512, 4000
    for step in (1, 10, 1000, 3999, 4000, 4001, 100_000):
        want = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert noam_rate(step, d_model, warmup) == pytest.approx(want)
    assert noam_rate(4000, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)  # the peak
    assert noam_rate(100, 512, 4000) == pytest.approx(100 / 4000 * noam_rate(4000, 512, 4000))  # linear warm-up
    assert NoamSchedule(512, 4000, factor=2.0)(0) == pytest.approx(2 * noam_rate(1, 512, 4000))
    with pytest.raises(ValueError, match="warmup"):
        NoamSchedule(512, 0)


def test_optimizer_and_schedule_drive_the_rate():
    model = torch.nn.Linear(3, 3)
    opt = make_optimizer(model)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    sched = warmup_schedule(opt, d_model=64, warmup=10)
    seen = []
    for _ in range(30):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([noam_rate(i + 1, 64, 10) for i in range(30)])
    assert max(seen) == pytest.approx(noam_rate(10, 64, 10)) and seen.index(max(seen)) == 9


@pytest.fixture(scope="module")
def copy_data():
    return load_task("copy", n_train=600, n_valid=40, n_test=40, min_len=3, max_len=6, vocab_size=8)


def test_train_learns_and_history(copy_data):
    model = make_model(copy_data.src_vocab, copy_data.tgt_vocab, d_model=32, heads=2, num_layers=1, d_ff=64,
                       dropout=0.0)
    seen = []
    history = train(model, copy_data, steps=60, batch_size=32, warmup=20, peak_lr=3e-3, eval_every=30, device="cpu",
                    progress=False, callback=lambda step, h: seen.append(step), log=lambda msg: None)
    assert history["step"] == list(range(1, 61)) and len(history["loss"]) == len(history["lr"]) == 60
    assert history["valid_step"] == [30, 60] == seen
    assert sum(history["loss"][-10:]) / 10 < 0.7 * sum(history["loss"][:10]) / 10  # it learns
    assert history["lr"][:3] == pytest.approx([3e-3 * i / 20 for i in (1, 2, 3)])  # linear warm-up to the peak
    assert max(history["lr"]) == pytest.approx(3e-3) and history["lr"].index(max(history["lr"])) == 19
    assert all(0 <= v <= 100 for v in history["valid_exact_match"] + history["valid_bleu"])
    assert not model.training


def test_train_is_reproducible(copy_data):
    losses = []
    for _ in range(2):
        seed_everything(0)
        model = make_model(copy_data.src_vocab, copy_data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)
        losses.append(train(model, copy_data, steps=5, batch_size=16, progress=False, log=lambda m: None)["loss"])
    assert losses[0] == losses[1]


def test_train_bad_arguments(copy_data):
    model = make_model(copy_data.src_vocab, copy_data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)
    with pytest.raises(ValueError, match="steps"):
        train(model, copy_data)
    with pytest.raises(ValueError, match="minutes"):
        train(model, copy_data, minutes=-1)
    with pytest.raises(ValueError, match="batch_size"):
        train(model, copy_data, steps=1, batch_size=0)


def test_minutes_limit_stops(copy_data):
    model = make_model(copy_data.src_vocab, copy_data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)
    history = train(model, copy_data, minutes=0.02, batch_size=16, progress=False, log=lambda m: None)
    assert 1 <= len(history["step"]) and history["seconds"] < 30


def test_checkpoint_round_trip(tmp_path, copy_data):
    model = make_model(copy_data.src_vocab, copy_data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)
    path = tmp_path / "sub" / "model.pt"
    save_checkpoint(path, model, copy_data.src_vocab, copy_data.tgt_vocab, extra={"steps": 3, "note": "hi"})
    raw = torch.load(path, weights_only=True)  # nothing but plain data and tensors inside
    assert set(raw) >= {"config", "state_dict", "src_vocab", "tgt_vocab", "extra"}
    loaded, src_vocab, tgt_vocab, extra = load_checkpoint(path, device="cpu")
    assert src_vocab == copy_data.src_vocab and tgt_vocab == copy_data.tgt_vocab and extra["steps"] == 3
    assert loaded.config == model.config
    assert loaded.generator.weight is loaded.tgt_embed.weight  # tying survives
    src = torch.tensor([[4, 5, 6, 2]])
    tgt = torch.tensor([[1, 4, 5]])
    model.eval()
    assert torch.equal(model(src, tgt), loaded(src, tgt))
    with pytest.raises(TypeError, match="Transformer"):
        save_checkpoint(tmp_path / "x.pt", torch.nn.Linear(2, 2), src_vocab, tgt_vocab)


def test_evaluate_perfect_when_model_is_identity(copy_data):
    class Echo(torch.nn.Module):  # not a model: check that evaluate scores exactly what translate returns
        pass

    pairs = copy_data.test[:5]
    import tfm_lesson.decoding as decoding

    original = decoding.translate
    try:
        decoding.translate = lambda model, texts, *a, **k: [copy_data.tgt_vocab.normalize(t) for t in texts]
        out = evaluate(Echo(), pairs, copy_data.src_vocab, copy_data.tgt_vocab)
    finally:
        decoding.translate = original
    assert out == pytest.approx({"exact_match": 100.0, "bleu": 100.0, "chrf": 100.0})


def test_cpu_threads_restores_and_train_leaves_threads_alone(copy_data):
    from tfm_lesson.train.loop import cpu_threads

    before = torch.get_num_threads()
    with cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    model = make_model(copy_data.src_vocab, copy_data.tgt_vocab, d_model=16, heads=2, num_layers=1, d_ff=32)
    train(model, copy_data, steps=2, batch_size=8, progress=False, log=lambda m: None, device="cpu")
    assert torch.get_num_threads() == before


def test_fused_adam_only_on_cuda_unless_asked():
    from tfm_lesson.train.loop import make_optimizer

    model = torch.nn.Linear(4, 3)
    assert not make_optimizer(model).defaults["fused"]  # CPU: the usual update, the chapters' numbers
    fused = make_optimizer(model, fused=True)  # asked for: PyTorch's fused kernel (CPU support since torch 2.4)
    plain = make_optimizer(torch.nn.Linear(4, 3), fused=False)
    assert fused.defaults["fused"] and not plain.defaults["fused"]
