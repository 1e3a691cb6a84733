"""Chapter 03's toy heads: the hand-set heads look where they should, and training finds the same maps."""
from __future__ import annotations

import pytest
import torch

from tfm_lesson.look.toy_heads import HEADS, WORDS, features, hand_set_heads, toy_batch, toy_targets, train_heads

SENTENCE = "the cat sat on the mat".split()


def _maps(mha, x):
    with torch.no_grad():
        return mha(x, x, x, need_weights=True)[1][0]  # (heads, q, k)


def test_features_are_word_then_position_one_hots() -> None:
    x = features(torch.tensor([[0, 4, 0]]))
    assert x.shape == (1, 3, 24)
    assert x.sum(-1).eq(2).all()
    assert x[0, 1, 4] == 1 and x[0, 1, len(WORDS) + 1] == 1


def test_hand_set_heads_look_at_previous_word_same_word_and_nouns() -> None:
    mha, x = hand_set_heads(SENTENCE)
    w = _maps(mha, x)
    assert torch.equal(w[0].argmax(-1), torch.tensor([0, 0, 1, 2, 3, 4]))  # previous word (0 looks at itself)
    assert w[1][0, 4] > 0.45 and w[1][4, 0] > 0.45  # the two 'the' find each other
    assert torch.allclose(w[2][:, [1, 5]].sum(-1), torch.ones(6), atol=0.05)  # every row looks at cat and mat


def test_toy_targets_match_the_hand_set_maps() -> None:
    mha, x = hand_set_heads(SENTENCE)
    ids = torch.tensor([[WORDS.index(t) for t in SENTENCE]])
    targets = toy_targets(ids)[0]
    assert torch.allclose(_maps(mha, x), targets, atol=0.05)


def test_training_learns_the_three_maps_and_keeps_the_global_rng() -> None:
    torch.manual_seed(5)
    before = torch.rand(2)
    torch.manual_seed(5)
    trained = train_heads(steps=150)
    assert torch.equal(torch.rand(2), before)
    assert len(trained.on_target) == HEADS and min(trained.on_target) > 0.9
    mha, x = hand_set_heads(SENTENCE)
    assert (_maps(trained.mha, x) - _maps(mha, x)).abs().max() < 0.1


def test_toy_batch_always_has_a_noun_and_rows_sum_to_one() -> None:
    ids, targets = toy_batch(500, 6, torch.Generator().manual_seed(1))
    assert ids.shape == (500, 6) and targets.shape == (500, HEADS, 6, 6)
    assert torch.allclose(targets.sum(-1), torch.ones(500, HEADS, 6))


def test_untrained_heads_do_not_already_look_right() -> None:
    assert max(train_heads(steps=1).on_target) < 0.7


@pytest.mark.parametrize("tokens, match", [(["the", "unicorn"], "unknown word"), (["the"] * 8, "1 to 7 words")])
def test_bad_sentences_are_named(tokens, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        hand_set_heads(tokens)


def test_bad_training_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="steps and batch"):
        train_heads(steps=0)
