"""Checkers for chapter 10 (the training loop you write):

- ``check_shift_targets(fn)``: ``fn(tgt (batch, len))`` -> ``(decoder_input, labels)``, teacher forcing;
- ``check_label_smoothing_loss(fn)``: ``fn(logits (..., V), target (...), smoothing, pad_id)`` -> the mean
  label-smoothed cross-entropy over real tokens (``F.cross_entropy(..., label_smoothing=, ignore_index=)``);
- ``check_noam_rate(fn)``: ``fn(step, d_model, warmup)`` -> the paper's learning rate, steps counted from 1;
- ``check_train_step(fn)``: ``fn(model, src, tgt, optimizer, scheduler, criterion, clip)`` -> the loss (a float)
  of one step: shift, forward, loss, backward, clip, optimiser step, schedule step, gradients cleared;
- ``check_greedy_decode(fn)``: ``fn(model, src, max_len, bos_id, eos_id)`` -> tokens ``(batch, 1 + n)``.

The training step lives in :mod:`.train_step`, greedy decoding in :mod:`.greedy`; ``yours_or_reference`` here hands
out every chapter's pieces: a checks module declares its own as ``PIECES = {name: (checker, reference)}``.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._harness import Mistake, call, close, expect, passed
from ._rules import forbid_keyword, forbid_names
from .greedy import check_greedy_decode
from .train_step import _reference_step, _targets, check_train_step

__all__ = ["check_shift_targets", "check_label_smoothing_loss", "check_noam_rate"]

PAD, BOS, EOS = 0, 1, 2


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


ANNOTATED = ("{who}: 1 - eps on the right token and eps / (V - {k}) on every other "
             "class{pad}. PyTorch's F.cross_entropy(label_smoothing=eps), which this course follows (Szegedy et al., "
             "2016), mixes the one-hot target with the uniform distribution over ALL V classes: "
             "q = (1 - eps) * one_hot + eps / V, so the right token gets 1 - eps + eps / V and every class eps / V. "
             "Both smooth; they differ slightly in the numbers. Spread eps over all V classes: "
             "loss = (1 - eps) * nll + eps * mean over the vocabulary of (-log p).")

AT = "the Annotated Transformer's variant"
T2T = "the variant of the paper's own code, tensor2tensor (its smoothing_cross_entropy)"


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
            ("v2", "smoothing spread over V - 2 classes: " + ANNOTATED.format(who=AT, k=2, pad=" except padding")),
            ("v2_sum", "smoothing spread over V - 2 classes, and summed rather than averaged: "
                       + ANNOTATED.format(who=AT, k=2, pad=" except padding")),
            ("v2_kl", "KL divergence with smoothing over V - 2 classes (nn.KLDivLoss, as in the Annotated "
                      "Transformer): KL(q || p) = cross-entropy - entropy(q), a constant lower; and "
                      + ANNOTATED.format(who=AT, k=2, pad=" except padding")),
            ("v2_kl_sum", "the Annotated Transformer's KLDivLoss(reduction='sum') with smoothing over V - 2 classes: "
                          "KL = cross-entropy - entropy(q), summed over tokens; "
                          + ANNOTATED.format(who=AT, k=2, pad=" except padding")),
            ("v1", "smoothing spread over V - 1 classes: " + ANNOTATED.format(who=T2T, k=1, pad="")),
            ("v1_sum", "smoothing spread over V - 1 classes and summed: " + ANNOTATED.format(who=T2T, k=1, pad="")),
            ("v1_kl", "KL divergence with smoothing over V - 1 classes, which is the loss tensor2tensor reports (its "
                      "cross-entropy minus entropy(q), a constant lower): " + ANNOTATED.format(who=T2T, k=1, pad="")),
            ("v1_kl_sum", "summed KL divergence with smoothing over V - 1 classes: "
                          + ANNOTATED.format(who=T2T, k=1, pad="")),
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


PIECES = {"shift_targets": (check_shift_targets, _ref_shift),
          "label_smoothing_loss": (check_label_smoothing_loss, _ref_loss),
          "noam_rate": (check_noam_rate, _ref_noam),
          "train_step": (check_train_step, _reference_step),
          "greedy_decode": (check_greedy_decode, _ref_greedy)}


def _all_pieces() -> dict[str, tuple[Callable, Callable]]:
    """Every piece a checks module declares in its ``PIECES``: ``{name: (checker, reference)}``."""
    import importlib
    import pkgutil

    package = importlib.import_module(__package__)
    pieces: dict[str, tuple[Callable, Callable]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        for name, piece in getattr(importlib.import_module(f"{__package__}.{info.name}"), "PIECES", {}).items():
            if name in pieces:
                raise RuntimeError(f"two checks modules declare the piece {name!r}")
            pieces[name] = piece
    return pieces


def yours_or_reference(fn: Callable, name: str, say: bool = False) -> Callable:
    """``fn`` when it passes its checker, else the checker's reference ``name`` with a line that says so: a chapter
    built from your pieces still runs while one of them is unfinished. ``say=True``: a line when yours is used too,
    so that the chapter can point at it. The checker's own lines are not shown."""
    import contextlib
    import io

    pieces = _all_pieces()
    if name not in pieces:
        raise ValueError(f"name must be one of {sorted(pieces)}, got {name!r}")
    check, reference = pieces[name]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(fn)
    except Mistake:
        print(f"{name}: yours does not pass its check yet; the reference version stands in")
        return reference
    if say:
        print(f"{name}: yours passes its check; the cells below use it")
    return fn


__all__.append("yours_or_reference")
