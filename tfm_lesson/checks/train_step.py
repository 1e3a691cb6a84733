"""Checker for chapter 10's training step (split from :mod:`.training`):

- ``check_train_step(fn)``: ``fn(model, src, tgt, optimizer, scheduler, criterion, clip)`` -> the loss (a float)
  of one step: shift, forward, loss, backward, clip, optimiser step, schedule step, gradients cleared.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from ._harness import Mistake, call, expect, learner_side, passed

__all__ = ["check_train_step"]

PAD, BOS, EOS = 0, 1, 2


def _targets(g: torch.Generator, lengths: list[int], vocab: int = 12, pad_id: int = PAD) -> Tensor:
    """(batch, max(lengths) + 2) rows ``<s> w1 .. wn </s> <pad> ..`` with words drawn from 3..vocab-1."""
    width = max(lengths) + 2
    rows = []
    for n in lengths:
        words = torch.randint(3, vocab, (n,), generator=g).tolist()
        rows.append([BOS] + words + [EOS] + [pad_id] * (width - n - 2))
    return torch.tensor(rows)


# one training step ----------------------------------------------------------------------------------------------
def _tiny_model(seed: int) -> nn.Module:
    from ..model import Transformer, TransformerConfig

    torch.manual_seed(seed)
    config = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                               num_decoder_layers=1, dropout=0.0, max_len=32, share_embeddings=True,
                               tie_embeddings=True, src_pad_id=PAD, tgt_pad_id=PAD)
    return Transformer(config)


def _batches(seed: int, n: int) -> list[tuple[Tensor, Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(1, 7, (4,), generator=g).tolist()
        src = _targets(g, lengths)[:, 1:]  # w1 .. wn </s> <pad> ..
        tgt = _targets(g, [max(1, n_ - 1) for n_ in lengths])
        out.append((src, tgt))
    return out


def _reference_step(model, src, tgt, optimizer, scheduler, criterion, clip, bug: str = "") -> float:
    """The loop's order: shift, forward, loss, backward, clip, step, schedule, clear — or one classic slip."""
    if bug == "no_shift":
        dec_in, labels = tgt[:, :-1], tgt[:, :-1]
    elif bug == "wrong_shift":
        dec_in, labels = tgt[:, 1:], tgt[:, :-1]
    else:
        dec_in, labels = tgt[:, :-1], tgt[:, 1:]
    loss = criterion(model(src, dec_in), labels)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    if bug == "sched_before":
        scheduler.step()
    optimizer.step()
    if bug != "sched_before":
        scheduler.step()
    if bug != "no_zero":
        optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _setup(model: nn.Module, kind: str):
    from ..train.loop import LabelSmoothingLoss, warmup_schedule

    if kind == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
        scheduler = warmup_schedule(optimizer, d_model=16, warmup=3, factor=2.0)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        scheduler = warmup_schedule(optimizer, d_model=16, warmup=3, factor=0.5)
    return optimizer, scheduler, LabelSmoothingLoss(0.1, PAD)


def _grad_norm(model: nn.Module) -> float:
    grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
    return float(torch.cat(grads).norm()) if grads else 0.0


def _run(step_fn, kind: str, bug: str | None, data, clip: float, learner: bool):
    model = _tiny_model(7).train()
    optimizer, scheduler, criterion = _setup(model, kind)
    log = {"norms": [], "epochs": [], "losses": [], "sched_calls": 0, "opt_calls": 0, "grads_left": []}
    if learner:  # spy on the optimiser and the schedule
        inner_sched = scheduler.step

        def spy_step(opt, args, kwargs):
            log["opt_calls"] += 1
            log["norms"].append(_grad_norm(model))

        def spy_sched(*a, **k):
            log["sched_calls"] += 1
            return inner_sched(*a, **k)

        optimizer.register_step_pre_hook(spy_step)
        scheduler.step = spy_sched
    for i, (src, tgt) in enumerate(data):
        if learner:
            what = "train_step(model, src, tgt, optimizer, scheduler, criterion, clip)"
            before = (log["opt_calls"], log["sched_calls"])
            loss = call(step_fn, model, src.clone(), tgt.clone(), optimizer, scheduler, criterion, clip, what=what)
            if isinstance(loss, Tensor):
                raise Mistake("train_step returned a tensor: return loss.item(), a Python float. A tensor that still "
                              "carries its graph, collected step after step in a list, keeps each step's autograd "
                              "graph alive (backward freed its activations, not its nodes), so memory creeps up "
                              "over a long run; and a running sum of such losses would chain every step's graph")
            expect(isinstance(loss, (int, float)), f"train_step returned {type(loss).__name__}, expected the loss "
                   "as a float (loss.item())")
            expect(log["opt_calls"] - before[0] == 1, f"train_step called optimizer.step() "
                   f"{log['opt_calls'] - before[0]} times in one step; call it exactly once")
            if log["sched_calls"] == before[1]:
                raise Mistake("the schedule is not stepped: call scheduler.step() once per step, after "
                              "optimizer.step(); without it the learning rate stays at its step-1 value (tiny: "
                              "warm-up never ends)")
            expect(log["sched_calls"] - before[1] == 1, "scheduler.step() was called more than once in one step")
            log["grads_left"].append(_grad_norm(model))
        else:
            loss = _reference_step(model, src, tgt, optimizer, scheduler, criterion, clip, bug or "")
        log["losses"].append(float(loss))
    return model, log


def _same(a: list[Tensor] | nn.Module, b: nn.Module, atol: float = 1e-6) -> bool:
    mine = list(a.parameters()) if isinstance(a, nn.Module) else a
    return all(torch.allclose(x, y, atol=atol, rtol=1e-5) for x, y in zip(mine, b.parameters()))


def _learner_run(step_fn: Callable, kind: str, data: list, clip: float) -> tuple[list[Tensor], dict]:
    """Three of the learner's steps, with the spies on the optimiser and the schedule: the parameters after them and
    the log (the spies are called from the learner's code, so this runs where it lives:
    :func:`._replay.learner_side`)."""
    model, log = _run(step_fn, kind, None, data, clip, learner=True)
    return [p.detach().clone() for p in model.parameters()], log


def check_train_step(fn: Callable[..., float]) -> None:
    """``fn(model, src, tgt, optimizer, scheduler, criterion, clip)`` -> the step's loss (float). Three steps on a
    small Transformer, once with SGD + momentum and once with Adam; the parameters after each run must equal
    those of the reference order: shift, forward, loss, backward, clip, optimiser step, schedule step, clear."""
    from ..device import cpu_threads

    with cpu_threads(1):  # tiny matrices: one thread is fastest, and the sums come out the same every run
        _check_train_step(fn)
    passed("check_train_step", "three steps with SGD and with Adam give the reference parameters and losses")


def _check_train_step(fn: Callable[..., float]) -> None:
    data = _batches(11, 3)
    clip = 0.05  # far below the gradients' norm: clipping changes every step
    for kind in ("sgd", "adam"):
        mine, log = learner_side(_learner_run)(fn, kind, data, clip)
        ref, ref_log = _run(None, kind, "", data, clip, learner=False)
        if _same(mine, ref) and all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
                                    for a, b in zip(log["losses"], ref_log["losses"])):
            continue
        if log["norms"] and max(log["norms"]) == 0.0:
            raise Mistake("the optimiser saw no gradient: gradients were cleared between backward() and "
                          "optimizer.step(). Clear them after the step (or before backward), never in between")
        if log["norms"] and max(log["norms"]) > clip * 1.0001:
            raise Mistake(f"optimizer.step() used gradients of norm {max(log['norms']):.3g} > clip = {clip}: they "
                          "were not clipped in time: clipping after the optimiser step (or not at all) changes "
                          "nothing; call torch.nn.utils.clip_grad_norm_(model.parameters(), clip) between "
                          "loss.backward() and optimizer.step()")
        for bug, hint in (
                ("no_shift", "labels not shifted: the decoder reads the very tokens it must predict (a leak). "
                             "Use your shift_targets: decoder input tgt[:, :-1], labels tgt[:, 1:]"),
                ("wrong_shift", "shifted the wrong way: decoder input tgt[:, :-1], labels tgt[:, 1:]"),
                ("no_zero", "gradients are never cleared: backward() ADDS to .grad, so every step uses the sum of "
                            "all gradients so far. Call optimizer.zero_grad() once per step (after the step, or "
                            "before backward)"),
                ("sched_before", "scheduler.step() comes before optimizer.step(): every step uses the next step's "
                                 "rate. Step the optimiser first, then the schedule"),
        ):
            buggy, _ = _run(None, kind, bug, data, clip, learner=False)
            if _same(mine, buggy):
                raise Mistake(hint)
        if not all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) for a, b in zip(log["losses"], ref_log["losses"])):
            raise Mistake(f"the losses returned ({', '.join(f'{x:.4f}' for x in log['losses'])}) differ from the "
                          f"reference ({', '.join(f'{x:.4f}' for x in ref_log['losses'])}): return the loss of this "
                          "batch, computed by criterion(model(src, decoder_input), labels)")
        raise Mistake("after three steps your parameters differ from the reference's. The order is: shift, forward, "
                      "loss, backward, clip, optimizer.step(), scheduler.step(), zero the gradients")
