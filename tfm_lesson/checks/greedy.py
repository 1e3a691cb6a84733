"""Checker for chapter 10's greedy decoding (split from :mod:`.training`):

- ``check_greedy_decode(fn)``: ``fn(model, src, max_len, bos_id, eos_id)`` -> tokens ``(batch, 1 + n)``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ._harness import Mistake, call, expect, passed

__all__ = ["check_greedy_decode"]

PAD, BOS, EOS = 0, 1, 2


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
