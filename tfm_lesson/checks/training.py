"""Checkers for chapter 10 (the training loop you write):

- ``check_shift_targets(fn)``: ``fn(tgt (batch, len))`` -> ``(decoder_input, labels)``, teacher forcing;
- ``check_label_smoothing_loss(fn)``: ``fn(logits (..., V), target (...), smoothing, pad_id)`` -> the mean
  label-smoothed cross-entropy over real tokens (``F.cross_entropy(..., label_smoothing=, ignore_index=)``);
- ``check_noam_rate(fn)``: ``fn(step, d_model, warmup)`` -> the paper's learning rate, steps counted from 1;
- ``check_train_step(fn)``: ``fn(model, src, tgt, optimizer, scheduler, criterion, clip)`` -> the loss (a float)
  of one step: shift, forward, loss, backward, clip, optimiser step, schedule step, gradients cleared;
- ``check_greedy_decode(fn)``: ``fn(model, src, max_len, bos_id, eos_id)`` -> tokens ``(batch, 1 + n)``.
"""
from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._harness import Mistake, call, close, expect, passed
from ._rules import forbid_keyword, forbid_names

__all__ = ["check_shift_targets", "check_label_smoothing_loss", "check_noam_rate", "check_train_step",
           "check_greedy_decode"]

PAD, BOS, EOS = 0, 1, 2


def _targets(g: torch.Generator, lengths: list[int], vocab: int = 12, pad_id: int = PAD) -> Tensor:
    """(batch, max(lengths) + 2) rows ``<s> w1 .. wn </s> <pad> ..`` with words drawn from 3..vocab-1."""
    width = max(lengths) + 2
    rows = []
    for n in lengths:
        words = torch.randint(3, vocab, (n,), generator=g).tolist()
        rows.append([BOS] + words + [EOS] + [pad_id] * (width - n - 2))
    return torch.tensor(rows)


# teacher forcing ------------------------------------------------------------------------------------------------
def check_shift_targets(fn: Callable[[Tensor], tuple[Tensor, Tensor]]) -> None:
    """``fn(tgt)`` with ``tgt (batch, len)`` = ``<s> … </s> <pad>…`` -> ``(tgt[:, :-1], tgt[:, 1:])``."""
    g = torch.Generator().manual_seed(100)
    for lengths in ([5, 3, 1], [4, 4], [2, 6, 6, 3]):
        tgt = _targets(g, lengths)
        result = call(fn, tgt.clone(), what="shift_targets(tgt)")
        expect(isinstance(result, (tuple, list)) and len(result) == 2,
               f"shift_targets should return a pair (decoder_input, labels), got {type(result).__name__}")
        dec_in, labels = result
        expect(isinstance(dec_in, Tensor) and isinstance(labels, Tensor),
               "shift_targets should return two tensors (decoder_input, labels)")
        want_in, want_out = tgt[:, :-1], tgt[:, 1:]
        if torch.equal(dec_in, want_in) and torch.equal(labels, want_out):
            continue
        if torch.equal(dec_in, labels):
            raise Mistake("labels are not shifted: they equal the decoder input, so position i is asked to predict "
                          "the very token it reads. The target leaks into the input and the loss drops to the floor "
                          "at once, yet the model learns nothing usable. decoder_input = tgt[:, :-1] (starts with "
                          "<s>), labels = tgt[:, 1:] (ends with </s>).")
        if torch.equal(dec_in, want_out) and torch.equal(labels, want_in):
            raise Mistake("shifted the wrong way: the decoder input must start with <s> (tgt[:, :-1]) and the labels "
                          "must be the next tokens (tgt[:, 1:]); you swapped them, so the model would learn to "
                          "predict the previous token, which it has already read.")
        if dec_in.shape == tgt.shape or labels.shape == tgt.shape:
            raise Mistake(f"one of your tensors has the full shape {tuple(tgt.shape)}: both must be one shorter, "
                          "(batch, len - 1) — the decoder input drops the last token, the labels drop <s>.")
        if dec_in.size(0) == tgt.size(0) - 1 or labels.size(0) == tgt.size(0) - 1:
            raise Mistake("you shifted along the batch axis (rows are sentences): slice the second axis, "
                          "tgt[:, :-1] and tgt[:, 1:]")
        raise Mistake("expected decoder_input = tgt[:, :-1] (<s> w1 … wn) and labels = tgt[:, 1:] (w1 … wn </s>)")
    passed("check_shift_targets", "decoder input tgt[:, :-1], labels tgt[:, 1:], on padded batches")


# label smoothing ------------------------------------------------------------------------------------------------
def _smoothed_variants(logits: Tensor, target: Tensor, eps: float, pad_id: int) -> dict[str, Tensor]:
    """What the classic variants and slips compute, as scalars."""
    V = logits.size(-1)
    logp = logits.float().log_softmax(-1)
    keep = (target != pad_id).float()
    nll = -logp.gather(-1, target[..., None]).squeeze(-1)
    uniform = -logp.mean(-1)
    per = (1 - eps) * nll + eps * uniform
    n_real, n_all = keep.sum(), torch.tensor(float(keep.numel()))
    out = {"pad_in_loss": per.mean(), "pad_in_mean": (per * keep).sum() / n_all, "sum": (per * keep).sum(),
           "no_smoothing": (nll * keep).sum() / n_real,
           "swapped": ((eps * nll + (1 - eps) * uniform) * keep).sum() / n_real}
    # the Annotated Transformer's target: 1 - eps on the right token, eps / (V - 2) elsewhere, 0 on padding
    q2 = torch.full_like(logp, eps / (V - 2))
    q2[..., pad_id] = 0.0
    q2.scatter_(-1, target[..., None], 1 - eps)
    q1 = torch.full_like(logp, eps / (V - 1))
    q1.scatter_(-1, target[..., None], 1 - eps)
    for name, q in (("v2", q2), ("v1", q1)):
        ce = -(q * logp).sum(-1)
        ent = -(q * q.clamp_min(1e-30).log()).sum(-1)
        out[name] = (ce * keep).sum() / n_real
        out[name + "_sum"] = (ce * keep).sum()
        out[name + "_kl"] = ((ce - ent) * keep).sum() / n_real
        out[name + "_kl_sum"] = ((ce - ent) * keep).sum()
    q0 = torch.full_like(logp, eps / V)
    q0.scatter_add_(-1, target[..., None], torch.full_like(logp[..., :1], 1 - eps))
    ent0 = -(q0 * q0.log()).sum(-1)
    out["kl"] = ((per - ent0) * keep).sum() / n_real
    return out


ANNOTATED = ("the Annotated Transformer's variant: 1 - eps on the right token and eps / (V - {k}) on every other "
             "class{pad}. PyTorch's F.cross_entropy(label_smoothing=eps), which this course follows (Szegedy et al., "
             "2016), mixes the one-hot target with the uniform distribution over ALL V classes: "
             "q = (1 - eps) * one_hot + eps / V, so the right token gets 1 - eps + eps / V and every class eps / V. "
             "Both smooth; they differ slightly in the numbers. Spread eps over all V classes: "
             "loss = (1 - eps) * nll + eps * mean over the vocabulary of (-log p).")


def _smoothing_written_yourself(fn: Callable[..., Tensor]) -> None:
    """Exercise 2's rule: neither PyTorch's label smoothing nor the package's loss does the work."""
    why = ("The checker compares with that call, so it cannot be the answer: write (1 - smoothing) times the "
           "negative log-likelihood plus smoothing times the mean of -log p over the vocabulary")
    forbid_keyword(fn, "label_smoothing", "label_smoothing_loss", why)
    forbid_names(fn, ("LabelSmoothingLoss",), "label_smoothing_loss", "That is the package's reference. " + why)


def check_label_smoothing_loss(fn: Callable[..., Tensor]) -> None:
    """``fn(logits, target, smoothing, pad_id)`` -> the mean over real tokens of the label-smoothed cross-entropy,
    equal to ``F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=smoothing,
    ignore_index=pad_id)``; logits ``(batch, len, V)`` (or ``(n, V)``), target the same shape without ``V``."""
    _smoothing_written_yourself(fn)
    g = torch.Generator().manual_seed(101)
    cases = [((3, 6, 11), 0.1, 0), ((4, 5, 9), 0.2, 3), ((10, 7), 0.1, 0), ((2, 4, 13), 0.0, 1)]
    for shape, eps, pad_id in cases:
        logits = torch.randn(shape, generator=g) * 2
        target = torch.randint(0, shape[-1], shape[:-1], generator=g)
        target[target == pad_id] = (pad_id + 1) % shape[-1]
        flat = target.view(-1)
        flat[torch.randperm(flat.numel(), generator=g)[: flat.numel() // 3]] = pad_id  # a third is padding
        what = f"label_smoothing_loss(logits {tuple(shape)}, target, smoothing={eps}, pad_id={pad_id})"
        got = call(fn, logits.clone(), target.clone(), eps, pad_id, what=what)
        if isinstance(got, (int, float)):
            got = torch.tensor(float(got))
        expect(isinstance(got, Tensor), f"{what} returned {type(got).__name__}, expected a scalar tensor")
        expect(got.numel() == 1, f"{what} returned shape {tuple(got.shape)}: return ONE number, the mean over the "
               "real (non-padding) tokens")
        got = got.reshape(()).detach().float()
        want = F.cross_entropy(logits.view(-1, shape[-1]), target.view(-1), label_smoothing=eps, ignore_index=pad_id)
        if close(got, want, atol=1e-5):
            continue
        if torch.isnan(got):
            raise Mistake(f"{what} is NaN: 0 * log(0) somewhere? Use log_softmax (never log(softmax)), and if you "
                          "zero the padding, multiply the loss by a mask rather than the log-probabilities by 0")
        v = _smoothed_variants(logits, target, eps, pad_id)
        named = [
            ("pad_in_loss", "padding counted in the loss: positions whose target is pad_id must not be scored at "
                            "all (mask them out of the sum AND the count)"),
            ("pad_in_mean", "padding counted in the mean: you left padded positions out of the sum but divided by "
                            "the number of ALL positions; divide by the number of real tokens (target != pad_id)"),
            ("sum", "summed, not averaged: divide by the number of real tokens (target != pad_id)"),
            ("no_smoothing", "smoothing is not applied: this is the plain cross-entropy; mix in "
                             "smoothing * (mean over the vocabulary of -log p)"),
            ("swapped", "the two weights are swapped: (1 - smoothing) goes with -log p[target], smoothing with the "
                        "mean of -log p over the vocabulary"),
            ("v2", "smoothing spread over V - 2 classes: " + ANNOTATED.format(k=2, pad=" except padding")),
            ("v2_sum", "smoothing spread over V - 2 classes, and summed rather than averaged: "
                       + ANNOTATED.format(k=2, pad=" except padding")),
            ("v2_kl", "KL divergence with smoothing over V - 2 classes (nn.KLDivLoss, as in the Annotated "
                      "Transformer): KL(q || p) = cross-entropy - entropy(q), a constant lower; and "
                      + ANNOTATED.format(k=2, pad=" except padding")),
            ("v2_kl_sum", "the Annotated Transformer's KLDivLoss(reduction='sum') with smoothing over V - 2 classes: "
                          "KL = cross-entropy - entropy(q), summed over tokens; " + ANNOTATED.format(k=2, pad=" except "
                                                                                                  "padding")),
            ("v1", "smoothing spread over V - 1 classes: " + ANNOTATED.format(k=1, pad="").replace(
                "the Annotated Transformer's variant", "a variant close to the Annotated Transformer's (which uses "
                "V - 2)")),
            ("v1_sum", "smoothing spread over V - 1 classes and summed: " + ANNOTATED.format(k=1, pad="")),
            ("v1_kl", "KL divergence with smoothing over V - 1 classes: " + ANNOTATED.format(k=1, pad="")),
            ("v1_kl_sum", "summed KL divergence with smoothing over V - 1 classes: " + ANNOTATED.format(k=1, pad="")),
            ("kl", "this is KL(q || p), not the cross-entropy: it is lower by the entropy of the smoothed target q, "
                   "a constant (same gradients, different number). F.cross_entropy reports the cross-entropy "
                   "-sum_v q(v) log p(v)"),
        ]
        if eps > 0:
            for key, hint in named:
                if close(got, v[key], atol=1e-5):
                    raise Mistake(hint)
        else:
            for key in ("pad_in_loss", "pad_in_mean", "sum"):
                if close(got, v[key], atol=1e-5):
                    raise Mistake(dict(named)[key])
        raise Mistake(f"{what} = {got.item():.5f}, expected {want.item():.5f} (F.cross_entropy with label_smoothing "
                      "and ignore_index): (1 - eps) * (-log p[target]) + eps * mean_v(-log p[v]), averaged over "
                      "the tokens whose target is not pad_id")
    passed("check_label_smoothing_loss", "equals F.cross_entropy(label_smoothing=, ignore_index=) on padded "
           "batches, 2-D and 3-D logits, several eps and pad ids")


# the warm-up schedule -------------------------------------------------------------------------------------------
def _noam(step: float, d_model: int, warmup: int) -> float:
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def check_noam_rate(fn: Callable[[int, int, int], float]) -> None:
    """``fn(step, d_model, warmup)`` -> ``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``, steps from 1."""
    grid = [(512, 4000, s) for s in (1, 2, 100, 3999, 4000, 4001, 20000)] + \
           [(64, 100, s) for s in (1, 50, 100, 101, 700)] + [(128, 1, s) for s in (1, 2, 10)]
    for d_model, warmup, step in grid:
        what = f"noam_rate(step={step}, d_model={d_model}, warmup={warmup})"
        try:
            got = fn(step, d_model, warmup)
        except ZeroDivisionError as exc:
            raise Mistake(f"{what} divided by zero ({exc}): steps count from 1; if you used step - 1, or if your "
                          "LambdaLR passes its index 0 straight in, the first step computes 0 ** -0.5") from exc
        except Exception as exc:
            raise Mistake(f"{what} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(got, Tensor):
            expect(got.numel() == 1, f"{what} returned a tensor of shape {tuple(got.shape)}: return one number")
            got = got.item()
        expect(isinstance(got, (int, float)), f"{what} returned {type(got).__name__}, expected a float")
        want = _noam(step, d_model, warmup)
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        if not math.isfinite(got):
            raise Mistake(f"{what} = {got}: the first step must give a finite rate (steps count from 1)")
        suspects = {
            "you count steps from 0: step 1 must give d_model^-0.5 * warmup^-1.5 (the first optimiser step is step "
            "1 of the paper); with LambdaLR, whose index starts at 0, call noam_rate(index + 1, ...)":
                _noam(step + 1, d_model, warmup),
            "the two terms of the min are swapped: it is min(step^-0.5, step * warmup^-1.5) — the decay "
            "step^-0.5 and the linear warm-up step * warmup^-1.5":
                d_model ** -0.5 * min(step * warmup ** -0.5, step ** -1.5),
            "max instead of min: the rate must be the SMALLER of the warm-up line and the decay curve (the larger "
            "one is infinite at step 0 and huge early)": d_model ** -0.5 * max(step ** -0.5, step * warmup ** -1.5),
            "the exponents are mixed up: min(step^-0.5, step * warmup^-1.5)":
                d_model ** -0.5 * min(step ** -1.5, step * warmup ** -0.5),
            "d_model^-0.5 is missing: the whole curve is scaled by 1 / sqrt(d_model)": _noam(step, 1, warmup),
            "d_model's exponent: the factor is d_model^-0.5 (1 / sqrt(d_model)), not d_model^0.5 or d_model^-1":
                d_model ** 0.5 * min(step ** -0.5, step * warmup ** -1.5),
            "d_model's exponent: the factor is d_model^-0.5, not d_model^-1":
                d_model ** -1 * min(step ** -0.5, step * warmup ** -1.5),
        }
        for hint, value in suspects.items():
            if math.isclose(got, value, rel_tol=1e-6):
                raise Mistake(hint)
        raise Mistake(f"{what} = {got:.6g}, expected {want:.6g} = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)")
    try:
        at_zero = fn(0, 512, 4000)
    except ZeroDivisionError as exc:
        raise Mistake("noam_rate(0, ...) divides by zero (0 ** -0.5). Steps count from 1; guard step 0 (e.g. "
                      "step = max(step, 1), or raise a ValueError that says so), because a LambdaLR wired to "
                      "noam_rate without + 1 would crash right here") from exc
    except ValueError:
        at_zero = None
    if isinstance(at_zero, Tensor):
        at_zero = at_zero.item()
    if at_zero is not None:
        expect(isinstance(at_zero, (int, float)) and math.isfinite(at_zero),
               f"noam_rate(0, 512, 4000) = {at_zero!r}: step 0 must not give an infinite or NaN rate (guard it, or "
               "raise a ValueError)")
    passed("check_noam_rate", "the paper's schedule, steps from 1, peak at step warmup, safe at step 0")


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
                              "carries its graph, collected step after step in a list, keeps every step's graph "
                              "alive (memory grows until the run dies)")
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


def _same(a: nn.Module, b: nn.Module, atol: float = 1e-6) -> bool:
    return all(torch.allclose(x, y, atol=atol, rtol=1e-5) for x, y in zip(a.parameters(), b.parameters()))


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
        mine, log = _run(fn, kind, None, data, clip, learner=True)
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


# greedy decoding ------------------------------------------------------------------------------------------------
def _decode_model(dropout: float) -> nn.Module:
    """A small model that ends rows at different steps: its generator is biased so that </s> wins after a few
    tokens for some sources."""
    from ..model import Transformer, TransformerConfig

    torch.manual_seed(3)
    config = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                               num_decoder_layers=1, dropout=dropout, max_len=32, share_embeddings=True,
                               tie_embeddings=False, src_pad_id=PAD, tgt_pad_id=PAD)
    model = Transformer(config)
    with torch.no_grad():
        model.generator.weight.mul_(4.0)
    return model


def _greedy(model: nn.Module, src: Tensor, max_len: int, bos: int, eos: int, axis: int = -1,
            pad_ended: bool = True) -> Tensor:
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), bos, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.generator(model.decode(ys, memory, model.make_src_mask(src))[:, -1])
        nxt = logits.argmax(dim=axis)
        if axis == 0:
            nxt = nxt[: src.size(0)] if nxt.numel() >= src.size(0) else nxt.repeat(src.size(0))[: src.size(0)]
        if pad_ended:
            nxt = nxt.masked_fill(done, PAD)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos
        if bool(done.all()):
            break
    return ys


def _pick_eos(model: nn.Module, src: Tensor, max_len: int) -> int:
    """An eos id that ends some rows early and others late, so ended rows must be padded."""
    with torch.no_grad():
        free = _greedy(model, src, max_len, BOS, eos=-1)[:, 1:]  # never stops
    best, best_spread = 2, -1
    for eos in range(3, 12):
        first = [(row == eos).nonzero()[0].item() if (row == eos).any() else max_len for row in free]
        spread = len(set(first)) + (1 if min(first) < max_len - 2 else 0)
        if spread > best_spread:
            best, best_spread = eos, spread
    return best


def check_greedy_decode(fn: Callable[..., Tensor]) -> None:
    """``fn(model, src, max_len, bos_id, eos_id)`` -> ``(batch, 1 + n)`` tokens starting with bos, the most
    probable token at each step, ended rows padded with the model's pad id, stopping when every row ended (or
    after ``max_len`` generated tokens), in eval mode."""
    from ..device import cpu_threads

    with cpu_threads(1):
        _check_greedy_decode(fn)
    passed("check_greedy_decode", "argmax per row, ended rows padded, stops when all rows ended, eval mode")


def _check_greedy_decode(fn: Callable[..., Tensor]) -> None:
    g = torch.Generator().manual_seed(5)
    src = torch.randint(3, 12, (12, 5), generator=g)  # batch = vocabulary size: argmax over the batch runs
    src[:, -1] = EOS
    src[1, 3:] = torch.tensor([EOS, PAD])
    max_len = 9
    for dropout in (0.0, 0.3):
        model = _decode_model(dropout)
        eos = _pick_eos(model, src, max_len)
        model.train()  # as after training: the learner must switch to eval mode
        with torch.no_grad():
            model.eval()
            want = _greedy(model, src, max_len, BOS, eos)
            model.train()
        what = f"greedy_decode(model, src {tuple(src.shape)}, max_len={max_len}, bos_id={BOS}, eos_id={eos})"
        torch.manual_seed(0)
        try:
            got = call(fn, model, src.clone(), max_len, BOS, eos, what=what)
        except Mistake as exc:
            if "size" in str(exc) or "dimension" in str(exc):
                raise Mistake(f"{exc}. Is the argmax over the right axis? The next tokens must be one per row, "
                              "(batch,): logits[:, -1].argmax(dim=-1)") from exc
            raise
        expect(isinstance(got, Tensor), f"{what} returned {type(got).__name__}, expected a tensor of token ids")
        got = got.detach().cpu()
        if got.shape == want.shape and torch.equal(got, want):
            continue
        expect(got.dim() == 2 and got.size(0) == src.size(0),
               f"{what} returned shape {tuple(got.shape)}, expected (batch, 1 + generated) = {tuple(want.shape)}")
        expect(bool((got[:, 0] == BOS).all()), "every row must start with bos_id")
        with torch.no_grad():
            model.eval()
            unpadded = _greedy(model, src, max_len, BOS, eos, pad_ended=False)
            longest = _greedy(model, src, max_len, BOS, -1)
            wrong_axis = _greedy(model, src, max_len, BOS, eos, axis=0)
        if got.shape == unpadded.shape and torch.equal(got, unpadded):
            raise Mistake("ended rows are not padded: after a row produced eos_id, keep writing the pad id "
                          f"({PAD}) there — the model goes on predicting words after </s>, and they must not count")
        if got.size(1) > want.size(1) and torch.equal(got[:, :want.size(1)], want):
            raise Mistake(f"the loop does not stop when every row has ended: returned {got.size(1)} columns, "
                          f"{want.size(1)} were enough. Stop as soon as every row produced eos_id")
        if got.shape == longest.shape and torch.equal(got, longest):
            raise Mistake("the loop ignores eos_id: stop a row at eos_id (pad after it) and stop the loop when every "
                          "row ended")
        if got.shape == wrong_axis.shape and torch.equal(got, wrong_axis):
            raise Mistake("argmax over the wrong axis: the logits of the last position are (batch, vocab); the next "
                          "token is logits.argmax(dim=-1), one per row")
        if dropout > 0:
            raise Mistake("dropout left on while decoding: call model.eval() before decoding (and decode under "
                          "torch.no_grad()); in training mode dropout zeroes random activations and the output "
                          "changes from run to run")
        raise Mistake(f"{what} differs from greedy decoding: at each step feed the prefix so far, take the logits of "
                      "the LAST position, append their argmax; the first differing row is "
                      f"{_first_diff(got, want)}")


def _first_diff(got: Tensor, want: Tensor) -> int:
    n = min(got.size(1), want.size(1))
    rows = (got[:, :n] != want[:, :n]).any(1).nonzero()
    return int(rows[0]) if len(rows) else 0


# the reference pieces, for a chapter whose later cells need working pieces ----------------------------------------
def _ref_shift(tgt: Tensor) -> tuple[Tensor, Tensor]:
    return tgt[:, :-1], tgt[:, 1:]


def _ref_loss(logits: Tensor, target: Tensor, smoothing: float, pad_id: int) -> Tensor:
    from ..train.loop import LabelSmoothingLoss

    return LabelSmoothingLoss(smoothing, pad_id)(logits, target)


def _ref_noam(step: int, d_model: int, warmup: int) -> float:
    from ..train.loop import noam_rate

    return noam_rate(step, d_model, warmup)


def _ref_greedy(model: nn.Module, src: Tensor, max_len: int, bos_id: int, eos_id: int) -> Tensor:
    from ..decoding import greedy_decode

    return greedy_decode(model, src, max_len, bos_id, eos_id)


_PIECES = {"shift_targets": (check_shift_targets, _ref_shift),
           "label_smoothing_loss": (check_label_smoothing_loss, _ref_loss),
           "noam_rate": (check_noam_rate, _ref_noam),
           "train_step": (check_train_step, _reference_step),
           "greedy_decode": (check_greedy_decode, _ref_greedy)}


def yours_or_reference(fn: Callable, name: str) -> Callable:
    """``fn`` when it passes its checker (silently), else the checker's reference ``name`` with a line that says
    so: a chapter built from your pieces still runs while one of them is unfinished."""
    import contextlib
    import io

    from .decoding import PIECES as decoding_pieces
    from .inside import PIECES as inside_pieces

    pieces = {**_PIECES, **decoding_pieces, **inside_pieces}
    if name not in pieces:
        raise ValueError(f"name must be one of {sorted(pieces)}, got {name!r}")
    check, reference = pieces[name]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(fn)
    except Mistake:
        print(f"{name}: yours does not pass its check yet; the reference version stands in")
        return reference
    return fn


__all__.append("yours_or_reference")
