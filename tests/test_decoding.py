"""Greedy decoding and beam search: agreement, optimality against greedy, batching, translate()."""
from __future__ import annotations

import pytest
import torch

from tfm_lesson import Transformer, seed_everything
from tfm_lesson.data import Vocab
from tfm_lesson.decoding import beam_search, greedy_decode, length_penalty, sequence_log_prob, translate

BOS, EOS, PAD = 1, 2, 0


def _model(seed: int = 0, vocab: int = 13) -> Transformer:
    seed_everything(seed)
    model = Transformer(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, heads=4, d_ff=64, num_encoder_layers=2,
                        num_decoder_layers=2, dropout=0.1, max_len=64)
    with torch.no_grad():  # a sharper, less uniform random model: decisions are not all ties
        model.generator.weight.mul_(3.0)
    return model.eval()


def _src(batch: int = 5, seed: int = 1, vocab: int = 13) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, 7), generator=g)
    for i in range(batch):  # ragged: pad the tail of some rows, end each with </s>
        n = 3 + i % 5
        src[i, n:] = PAD
        src[i, n - 1] = EOS
    return src


def _strip(row: torch.Tensor) -> list[int]:
    out = []
    for t in row.tolist()[1:]:
        out.append(t)
        if t == EOS:
            break
    return [t for t in out if t != PAD]


def test_greedy_shapes_and_format():
    model, src = _model(), _src()
    out = greedy_decode(model, src, max_len=10, bos_id=BOS, eos_id=EOS)
    assert out.shape[0] == src.shape[0] and 2 <= out.shape[1] <= 11
    assert (out[:, 0] == BOS).all()
    for row in out:  # after the first </s> only padding
        ids = row.tolist()
        if EOS in ids:
            assert all(t == PAD for t in ids[ids.index(EOS) + 1:])


def test_greedy_matches_step_by_step_argmax():
    model, src = _model(), _src(batch=1)
    out = greedy_decode(model, src, max_len=8, bos_id=BOS, eos_id=EOS)
    ys = torch.tensor([[BOS]])
    with torch.no_grad():
        for _ in range(out.size(1) - 1):  # the full forward pass, no reuse of the memory
            nxt = model(src, ys)[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, nxt], dim=1)
    assert torch.equal(out, ys)


def test_beam_size_one_is_greedy():
    model, src = _model(), _src(batch=6)
    greedy = greedy_decode(model, src, max_len=12, bos_id=BOS, eos_id=EOS)
    beam = beam_search(model, src, beam_size=1, max_len=12, bos_id=BOS, eos_id=EOS)
    assert torch.equal(greedy, beam)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_finds_at_least_greedys_log_prob(seed):
    model, src = _model(seed), _src(batch=6, seed=seed + 10)
    greedy = greedy_decode(model, src, max_len=12, bos_id=BOS, eos_id=EOS)
    beam, beam_scores = beam_search(model, src, beam_size=5, max_len=12, bos_id=BOS, eos_id=EOS,
                                    length_penalty_alpha=0.0, return_scores=True)
    lp_greedy = sequence_log_prob(model, src, greedy, EOS)
    lp_beam = sequence_log_prob(model, src, beam, EOS)
    assert torch.allclose(lp_beam, beam_scores, atol=1e-4)  # the reported score is the sequence's log-prob
    assert (lp_beam >= lp_greedy - 1e-4).all()
    assert (lp_beam > lp_greedy + 1e-3).any() or seed != 0  # and it is not always the same answer


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_batch_equals_one_by_one(decode):
    model, src = _model(), _src(batch=5)

    def run(s):
        if decode == "greedy":
            return greedy_decode(model, s, max_len=10, bos_id=BOS, eos_id=EOS)
        return beam_search(model, s, beam_size=3, max_len=10, bos_id=BOS, eos_id=EOS)

    batched = [_strip(r) for r in run(src)]
    singles = []
    for row in src:
        n = int((row != PAD).sum())
        singles.append(_strip(run(row[None, :n])[0]))
    assert batched == singles


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(10, 0.0) == pytest.approx(1.0)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)


def test_translate_and_bad_input():
    vocab = Vocab(["a", "b", "c", "d", "e", "f", "g", "h", "i"])
    model = _model(vocab=len(vocab))
    out = translate(model, ["a b c", "d e"], vocab, vocab, beam_size=1)
    out_beam = translate(model, ["a b c", "d e"], vocab, vocab, beam_size=3)
    assert len(out) == len(out_beam) == 2 and all(isinstance(s, str) for s in out + out_beam)
    assert translate(model, ["a b c", "d e"], vocab, vocab, batch_size=1) == out
    with pytest.raises(TypeError, match="texts"):
        translate(model, "a b c", vocab, vocab)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, _src(), beam_size=0, max_len=5, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="src"):
        greedy_decode(model, torch.zeros(3), max_len=5, bos_id=BOS, eos_id=EOS)
