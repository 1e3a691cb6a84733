"""Chapter 10 checkers: the reference passes; every classic training-loop mistake fails with its own hint."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfm_lesson.checks import (Mistake, check_greedy_decode, check_label_smoothing_loss, check_noam_rate,
                               check_shift_targets, check_train_step)
from tfm_lesson.decoding import greedy_decode
from tfm_lesson.train.loop import noam_rate
from conftest import passes as _passes, raises_mistake as _raises  # noqa: E402


# --- shift_targets ------------------------------------------------------------------------------------------------
def test_shift_reference_passes(capsys) -> None:
    _passes(check_shift_targets, lambda t: (t[:, :-1], t[:, 1:]), capsys)


@pytest.mark.parametrize("fn, hint", [
    (lambda t: (t[:, :-1], t[:, :-1]), "labels are not shifted"),
    (lambda t: (t, t), "labels are not shifted"),
    (lambda t: (t[:, 1:], t[:, :-1]), "shifted the wrong way"),
    (lambda t: (t[:-1], t[1:]), "along the batch axis"),
    (lambda t: (t, t[:, 1:]), "full shape"),
    (lambda t: t[:, :-1], "should return a pair"),
])
def test_shift_mistakes(fn, hint) -> None:
    _raises(check_shift_targets, fn, hint)


# --- label smoothing ----------------------------------------------------------------------------------------------
def _ls(logits, target, smoothing, pad_id, *, pad_in_loss=False, pad_in_mean=False, total=False, classes=None,
        kl=False, swapped=False, plain=False):
    V = logits.size(-1)
    logp = logits.log_softmax(-1)
    keep = (target != pad_id).float()
    if classes is not None:  # smoothing over V - 1 or V - 2 classes
        q = torch.full_like(logp, smoothing / (V - classes))
        if classes == 2:
            q[..., pad_id] = 0.0
        q.scatter_(-1, target[..., None], 1 - smoothing)
        per = -(q * logp).sum(-1)
        if kl:
            per = per + (q * q.clamp_min(1e-30).log()).sum(-1)
    else:
        nll = -logp.gather(-1, target[..., None]).squeeze(-1)
        a, b = (smoothing, 1 - smoothing) if swapped else (1 - smoothing, smoothing)
        per = nll if plain else a * nll + b * (-logp.mean(-1))
        if kl:
            q = torch.full_like(logp, smoothing / V).scatter_add(-1, target[..., None],
                                                                 torch.full_like(logp[..., :1], 1 - smoothing))
            per = per + (q * q.log()).sum(-1)
    if pad_in_loss:
        return per.mean()
    if total:
        return (per * keep).sum()
    return (per * keep).sum() / (keep.numel() if pad_in_mean else keep.sum())


def test_label_smoothing_reference_passes(capsys) -> None:
    _passes(check_label_smoothing_loss, _ls, capsys)
    with pytest.raises(Mistake, match="WRITE IT YOURSELF"):  # the exercise's rule: not PyTorch's own smoothing
        check_label_smoothing_loss(lambda lg, t, e, p: F.cross_entropy(
            lg.reshape(-1, lg.size(-1)), t.reshape(-1), label_smoothing=e, ignore_index=p))


@pytest.mark.parametrize("kw, hint", [
    (dict(pad_in_loss=True), "padding counted in the loss"),
    (dict(pad_in_mean=True), "padding counted in the mean"),
    (dict(total=True), "summed, not averaged"),
    (dict(classes=2), "the Annotated Transformer's variant"),
    (dict(classes=2), "over ALL V classes"),
    (dict(classes=1), "V - 1 classes"),
    (dict(classes=1), "tensor2tensor"),
    (dict(classes=1, kl=True), "the loss tensor2tensor reports"),
    (dict(classes=2, kl=True), "KL divergence with smoothing over V - 2 classes"),
    (dict(kl=True), "this is KL(q || p), not the cross-entropy"),
    (dict(swapped=True), "the two weights are swapped"),
    (dict(plain=True), "smoothing is not applied"),
])
def test_label_smoothing_mistakes(kw, hint) -> None:
    _raises(check_label_smoothing_loss, lambda lg, t, e, p: _ls(lg, t, e, p, **kw), hint)


def test_label_smoothing_hardcoded_pad_and_nan() -> None:
    _raises(check_label_smoothing_loss, lambda lg, t, e, p: _ls(lg, t, e, 0), "expected")
    _raises(check_label_smoothing_loss, lambda lg, t, e, p: lg.softmax(-1).log().sum() * float("nan"), "NaN")


# --- noam_rate -----------------------------------------------------------------------------------------------------
def test_noam_reference_passes(capsys) -> None:
    _passes(check_noam_rate, noam_rate, capsys)

    def strict(step, d_model, warmup):
        if step < 1:
            raise ValueError("step counts from 1")
        return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    _passes(check_noam_rate, strict, capsys)


@pytest.mark.parametrize("fn, hint", [
    (lambda s, d, w: d ** -0.5 * min(s ** -0.5, s * w ** -1.5), "divides by zero"),
    (lambda s, d, w: d ** -0.5 * min((s - 1) ** -0.5, (s - 1) * w ** -1.5) if s > 1 else 1 / (s - 1),
     "divided by zero"),
    (lambda s, d, w: noam_rate(s + 1, d, w), "you count steps from 0"),
    (lambda s, d, w: d ** -0.5 * min(s * w ** -0.5, s ** -1.5) if s else 0.0, "the two terms of the min are swapped"),
    (lambda s, d, w: d ** -0.5 * max(s ** -0.5, s * w ** -1.5) if s else 0.0, "max instead of min"),
    (lambda s, d, w: min(s ** -0.5, s * w ** -1.5) if s else 0.0, "d_model^-0.5 is missing"),
])
def test_noam_mistakes(fn, hint) -> None:
    _raises(check_noam_rate, fn, hint)


# --- train_step ----------------------------------------------------------------------------------------------------
def _step(model, src, tgt, optimizer, scheduler, criterion, clip, *, bug=""):
    dec_in, labels = {"no_shift": (tgt[:, :-1], tgt[:, :-1]), "wrong_shift": (tgt[:, 1:], tgt[:, :-1])}.get(
        bug, (tgt[:, :-1], tgt[:, 1:]))
    if bug == "zero_first":
        optimizer.zero_grad()
    loss = criterion(model(src, dec_in), labels)
    loss.backward()
    if bug == "zero_between":
        optimizer.zero_grad()
    if bug not in ("clip_after", "no_clip"):
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    if bug == "sched_before":
        scheduler.step()
    optimizer.step()
    if bug == "clip_after":
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    if bug not in ("no_schedule", "sched_before"):
        scheduler.step()
    if bug not in ("no_zero", "zero_first"):
        optimizer.zero_grad(set_to_none=True)
    return loss if bug == "tensor" else loss.item()


def test_train_step_reference_passes(capsys) -> None:
    _passes(check_train_step, _step, capsys)
    _passes(check_train_step, lambda *a: _step(*a, bug="zero_first"), capsys)  # clearing first is as good


@pytest.mark.parametrize("bug, hint", [
    ("no_zero", "gradients are never cleared"),
    ("clip_after", "clipping after the optimiser step"),
    ("no_clip", "were not clipped in time"),
    ("no_schedule", "the schedule is not stepped"),
    ("sched_before", "scheduler.step() comes before optimizer.step()"),
    ("no_shift", "labels not shifted"),
    ("wrong_shift", "shifted the wrong way"),
    ("zero_between", "the optimiser saw no gradient"),
    ("tensor", "return loss.item()"),
])
def test_train_step_mistakes(bug, hint) -> None:
    _raises(check_train_step, lambda *a: _step(*a, bug=bug), hint)


# --- greedy_decode -------------------------------------------------------------------------------------------------
def _greedy(model, src, max_len, bos_id, eos_id, *, bug=""):
    if bug != "train_mode":
        model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.generator(model.decode(ys, memory, model.make_src_mask(src))[:, -1])  # (batch, vocab)
            nxt = logits.argmax(dim=0 if bug == "axis" else -1)
            if bug != "no_pad":
                nxt = nxt.masked_fill(done, model.config.tgt_pad_id)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == eos_id
            if bug != "no_stop" and bool(done.all()):
                break
    return ys


def test_greedy_reference_passes(capsys) -> None:
    _passes(check_greedy_decode, greedy_decode, capsys)
    _passes(check_greedy_decode, _greedy, capsys)


@pytest.mark.parametrize("bug, hint", [
    ("train_mode", "dropout left on while decoding"),
    ("no_pad", "ended rows are not padded"),
    ("axis", "argmax over the wrong axis"),
    ("no_stop", "does not stop when every row has ended"),
])
def test_greedy_mistakes(bug, hint) -> None:
    _raises(check_greedy_decode, lambda *a: _greedy(*a, bug=bug), hint)


def test_greedy_argmax_over_positions_is_named() -> None:
    def over_positions(model, src, max_len, bos_id, eos_id):
        model.eval()
        ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
        for _ in range(max_len):
            nxt = model(src, ys).argmax(dim=1)  # (batch, vocab): over the positions
            ys = torch.cat([ys, nxt], dim=1)
        return ys
    _raises(check_greedy_decode, over_positions, "")


# --- the chapter's loop, built from the pieces, equals tfm_lesson.train.loop.train -----------------------------------
def test_loop_from_the_pieces_gives_trains_losses():
    import copy
    import dataclasses

    from tfm_lesson.data import batches, load_task
    from tfm_lesson.device import seed_everything
    from tfm_lesson.train.loop import cpu_threads, make_model, train

    def label_smoothing_loss(logits, target, smoothing, pad_id):  # the chapter's solution
        log_p = logits.float().log_softmax(dim=-1)
        nll = -log_p.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1)
        real = target != pad_id
        loss = ((1 - smoothing) * nll + smoothing * -log_p.mean(dim=-1)) * real
        return loss.sum() / real.sum().clamp(min=1)

    def noam(step, d_model, warmup):
        step = max(step, 1)
        return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)

    data = load_task("reverse", seed=0, n_train=3000, n_valid=10, n_test=10)
    seed_everything(0)
    model_a = make_model(data.src_vocab, data.tgt_vocab, d_model=32, heads=4, num_layers=2, d_ff=64, dropout=0.0)
    model_b = copy.deepcopy(model_a)
    theirs = train(model_a, dataclasses.replace(data, valid=[]), steps=20, batch_size=64, warmup=10, peak_lr=3e-3,
                   device="cpu", seed=0, amp=False, progress=False)

    seed_everything(0)
    model_b.train()
    d_model, warmup, pad_id = 32, 10, data.tgt_vocab.pad_id
    factor = 3e-3 / noam(warmup, d_model, warmup)
    optimizer = torch.optim.Adam(model_b.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: factor * noam(i + 1, d_model, warmup))
    losses = []
    with cpu_threads(1):
        for batch in batches(data.train, data.src_vocab, data.tgt_vocab, 64, shuffle=True, seed=0):
            losses.append(_step(model_b, batch.src, batch.tgt, optimizer, scheduler,
                                lambda lg, y: label_smoothing_loss(lg, y, 0.1, pad_id), 1.0))
            if len(losses) == 20:
                break
    assert len(theirs["loss"]) == 20
    assert max(abs(a - b) for a, b in zip(theirs["loss"], losses)) < 1e-6
    assert theirs["loss"][0] > theirs["loss"][-1]


def test_yours_or_reference_keeps_a_passing_piece_and_replaces_a_failing_one(capsys):
    from tfm_lesson.checks import yours_or_reference

    def shift(t):
        return t[:, :-1], t[:, 1:]
    assert yours_or_reference(shift, "shift_targets") is shift
    assert capsys.readouterr().out == ""  # silent when yours passes
    assert yours_or_reference(shift, "shift_targets", say=True) is shift
    assert capsys.readouterr().out == "shift_targets: yours passes its check; the cells below use it\n"
    stand_in = yours_or_reference(lambda t: None, "shift_targets")
    assert "does not pass its check yet" in capsys.readouterr().out
    tgt = torch.tensor([[1, 5, 2, 0]])
    assert [x.tolist() for x in stand_in(tgt)] == [[[1, 5, 2]], [[5, 2, 0]]]
    for name in ("label_smoothing_loss", "noam_rate", "greedy_decode", "query_entropy", "heads_off",
                 "rank_correlation", "induction_score", "patch", "aer", "online_softmax", "tiled_attention",
                 "intensity", "flash_backward"):  # every chapter's pieces, each declared by its checks module
        assert callable(yours_or_reference(lambda *a: None, name))
    with pytest.raises(ValueError, match="name must be one of"):
        yours_or_reference(shift, "nope")


@pytest.mark.parametrize("check", [check_shift_targets, check_label_smoothing_loss, check_noam_rate,
                                   check_train_step, check_greedy_decode])
def test_an_empty_stub_gets_a_mistake_not_a_crash(check):
    with pytest.raises(Mistake):
        check(lambda *args: None)
