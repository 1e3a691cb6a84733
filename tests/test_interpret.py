"""tfm_lesson.look.interpret: alignment error rate, alignments from attention, induction scores, ablation, patching."""
from __future__ import annotations

import math

import pytest
import torch

from tfm_lesson.attention import MultiHeadAttention
from tfm_lesson.look.interpret import (AttentionOnly, ablate_head, alignment_error_rate, as_links, attention_modules,
                                  corpus_alignment_error_rate, cross_attention_maps, extract_alignment,
                                  head_alignment_error_rates, head_outputs, induction_scores, monotonic_alignment,
                                  patch_head, prefix_matching_scores, previous_token_scores, repeated_half_loss,
                                  repeated_tokens, spearman)


# -- AER ---------------------------------------------------------------------------------------------------------------
def test_aer_worked_example_by_hand():
    sure = {(0, 0), (1, 2)}
    possible = sure | {(1, 1), (2, 1)}
    predicted = {(0, 0), (1, 1), (2, 2)}
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2: AER = 1 - 3/5
    assert alignment_error_rate(predicted, sure, possible) == pytest.approx(0.4)
    assert alignment_error_rate(sure, sure, possible) == 0.0
    assert alignment_error_rate(possible, sure, possible) == pytest.approx(1 - (2 + 4) / (4 + 2))
    assert alignment_error_rate({(5, 5)}, sure) == 1.0
    assert alignment_error_rate(predicted, sure) == pytest.approx(1 - (1 + 1) / (3 + 2))  # P defaults to S


def test_aer_lists_ok_duplicates_refused():
    sure = [(0, 0), (1, 1)]
    assert alignment_error_rate([(0, 0), (1, 1)], sure) == 0.0
    with pytest.raises(ValueError, match="more than once"):
        alignment_error_rate([(0, 0), (0, 0), (1, 1)], sure)
    with pytest.raises(ValueError, match="more than once"):
        alignment_error_rate({(0, 0)}, [(1, 1), (1, 1)])


@pytest.mark.parametrize("bad, match", [
    ("01", "set of"), (torch.zeros(2, 2), "set of"), (5, "set of"), ([(0, -1)], "non-negative"),
    ([(0, 1, 2)], "pairs"), ([(0.0, 1)], "non-negative ints"), ([(True, 1)], "non-negative ints")])
def test_aer_bad_links(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        alignment_error_rate(bad, {(0, 0)})


def test_aer_sure_not_in_possible_and_empty():
    with pytest.raises(ValueError, match="subset of possible"):
        alignment_error_rate({(0, 0)}, {(0, 0), (1, 1)}, {(0, 0)})
    with pytest.raises(ValueError, match="undefined"):
        alignment_error_rate(set(), set())
    assert as_links([(1, 2)], "x") == frozenset({(1, 2)})


def test_corpus_aer_sums_counts_not_rates():
    s1 = ({(0, 0)}, {(0, 0)}, None)           # perfect: counts 1, 1, 1, 1
    s2 = ({(0, 1), (1, 0), (2, 2)}, {(0, 0)}, None)  # counts 0, 0, 3, 1
    rate = corpus_alignment_error_rate([s1, s2])
    assert rate == pytest.approx(1 - 2 / 6)
    assert rate != pytest.approx((0 + 1) / 2)
    with pytest.raises(ValueError, match="empty"):
        corpus_alignment_error_rate([])


def test_extract_alignment_argmax_threshold_and_eos():
    w = torch.tensor([[0.7, 0.2, 0.1],
                      [0.1, 0.3, 0.6],   # argmax on the last key (</s>): no link when source_len=2
                      [0.4, 0.5, 0.1]])
    assert extract_alignment(w) == {(0, 0), (1, 2), (2, 1)}
    assert extract_alignment(w, source_len=2) == {(0, 0), (2, 1)}
    assert extract_alignment(w, "threshold", 0.4, source_len=2) == {(0, 0), (2, 0), (2, 1)}
    with pytest.raises(ValueError, match="target_len, k_len"):
        extract_alignment(w[None])
    with pytest.raises(ValueError, match="method"):
        extract_alignment(w, "max")
    with pytest.raises(ValueError, match="source_len"):
        extract_alignment(w, source_len=4)
    with pytest.raises(ValueError, match="threshold"):
        extract_alignment(w, "threshold", 0.0)


def test_monotonic_alignment():
    assert monotonic_alignment(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert monotonic_alignment(4, 2) == {(0, 0), (1, 0), (2, 1), (3, 1)}
    assert monotonic_alignment(2, 6) == {(0, 1), (1, 4)}
    with pytest.raises(ValueError, match="source_len"):
        monotonic_alignment(3, 0)


# -- the translation model's heads -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def aligned_data():
    from tfm_lesson.data import Vocab
    from tfm_lesson.data.alignments import generate_aligned
    from tfm_lesson.train.loop import make_model

    pairs = generate_aligned(12, seed=3)
    src_vocab = Vocab.build([p.en for p in pairs])
    tgt_vocab = Vocab.build([p.fr for p in pairs])
    torch.manual_seed(0)
    model = make_model(src_vocab, tgt_vocab, d_model=32, heads=2, num_layers=2, d_ff=64, dropout=0.0)
    return model, pairs, src_vocab, tgt_vocab


def test_head_aer_shape_range_and_agrees_with_one_head_by_hand(aligned_data):
    model, pairs, src_vocab, tgt_vocab = aligned_data
    rates = head_alignment_error_rates(model, pairs, src_vocab, tgt_vocab)
    assert rates.shape == (2, 2) and bool(((rates >= 0) & (rates <= 1)).all())
    items = []
    for p in pairs:
        src, tgt = src_vocab.encode(p.en), tgt_vocab.encode(p.fr, bos=True)
        maps = cross_attention_maps(model, src, tgt)
        links = extract_alignment(maps[1, 0, 1:len(tgt) - 1], source_len=len(src) - 1)
        items.append((links, p.sure, p.possible))
    shifted = head_alignment_error_rates(model, pairs, src_vocab, tgt_vocab, shift=1)
    assert shifted[1, 0].item() == pytest.approx(corpus_alignment_error_rate(items))
    with pytest.raises(ValueError, match="shift"):
        head_alignment_error_rates(model, pairs, src_vocab, tgt_vocab, shift=2)


def test_head_aer_perfect_for_a_model_that_attends_to_gold(aligned_data, monkeypatch):
    """A fake model whose every head attends to the sure link of each target word scores AER 0."""
    model, pairs, src_vocab, tgt_vocab = aligned_data
    import tfm_lesson.look.interpret as I

    def gold_maps(_model, source, target, device=None):
        pair = gold_maps.pair
        w = torch.zeros(2, 2, len(target) - 1, len(source))
        w[..., -1] = 1.0  # default: parked on </s>
        for f, e in pair.sure:
            w[:, :, f, :] = 0
            w[:, :, f, e] = 1.0
        return w

    perfect = [p for p in pairs if len({f for f, _ in p.sure}) == len(p.sure)]  # one sure link per word
    total = []
    for p in perfect:
        gold_maps.pair = p
        monkeypatch.setattr(I, "cross_attention_maps", gold_maps)
        total.append(I.head_alignment_error_rates(model, [p], src_vocab, tgt_vocab))
    assert perfect and all(bool((t == 0).all()) for t in total)


# -- attention-only model, scores, interventions -----------------------------------------------------------------------
def test_repeated_tokens_and_losses():
    g = torch.Generator().manual_seed(0)
    x = repeated_tokens(3, 5, 10, g)
    assert x.shape == (3, 11) and bool((x[:, 0] == 0).all())
    assert torch.equal(x[:, 1:6], x[:, 6:]) and int(x[:, 1:].min()) >= 1 and int(x.max()) < 10
    # a perfect copier: logits = one-hot of the true next token in the second half
    logits = torch.zeros(3, 11, 10)
    logits[:, :-1].scatter_(2, x[:, 1:, None], 50.0)
    assert repeated_half_loss(logits, x, 5).item() < 1e-6
    assert repeated_half_loss(torch.zeros(3, 11, 10), x, 5, "first").item() == pytest.approx(math.log(10))
    with pytest.raises(ValueError, match="half"):
        repeated_half_loss(logits, x, 5, "both")
    with pytest.raises(ValueError, match="1 \\+ 2 \\* seg_len"):
        repeated_half_loss(logits, x, 4)
    with pytest.raises(ValueError, match="vocab_size"):
        repeated_tokens(2, 3, 2)


def _ideal_maps(seg_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = 1 + 2 * seg_len
    prev = torch.zeros(n, n)
    prev[0, 0] = 1
    prev[torch.arange(1, n), torch.arange(0, n - 1)] = 1
    induct = torch.eye(n)
    for t in range(seg_len + 1, n):
        induct[t] = 0
        induct[t, t - seg_len + 1] = 1
    return prev, induct


def test_scores_on_ideal_maps():
    prev, induct = _ideal_maps(4)
    assert previous_token_scores(prev).item() == 1.0
    assert prefix_matching_scores(induct, 4).item() == 1.0
    assert prefix_matching_scores(prev, 4).item() == 0.0
    both = torch.stack([prev, induct])[None]  # (1, 2, L, L)
    assert prefix_matching_scores(both, 4).tolist() == [[0.0, 1.0]]
    with pytest.raises(ValueError, match="1 \\+ 2 \\* seg_len"):
        prefix_matching_scores(induct, 3)
    with pytest.raises(ValueError, match="seq_len, seq_len"):
        previous_token_scores(torch.zeros(3, 4))


def test_attention_only_model_shapes_and_errors():
    torch.manual_seed(0)
    m = AttentionOnly(12, d_model=16, heads=2, num_layers=2, max_len=11)
    x = repeated_tokens(2, 5, 12)
    assert m(x).shape == (2, 11, 12)
    assert [n for n, _ in attention_modules(m)] == ["layers.0.attn", "layers.1.attn"]
    with pytest.raises(ValueError, match="max_len"):
        m(repeated_tokens(1, 6, 12))
    with pytest.raises(ValueError, match="ids in"):
        m(torch.full((1, 3), 12))
    with pytest.raises(ValueError, match="integer tensor"):
        m(torch.zeros(1, 3))
    s = induction_scores(m, seg_len=5, batch=4)
    assert s["prefix_matching"].shape == (2, 2) and s["previous_token"].shape == (2, 2)
    # causality: the score of a random model is well below 1
    assert float(s["prefix_matching"].max()) < 0.9


def test_induction_heads_form_in_a_short_run():
    from tfm_lesson.train.loop import cpu_threads

    with cpu_threads(1):  # one thread: fast for this size, and restored afterwards
        _grow_induction_heads()


def _grow_induction_heads():
    torch.manual_seed(0)
    m = AttentionOnly(32, d_model=32, heads=2, num_layers=2, max_len=25)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for step in range(600):
        seg = int(torch.randint(4, 13, (1,), generator=g))
        x = repeated_tokens(32, seg, 32, g)
        loss = torch.nn.functional.cross_entropy(m(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    s = induction_scores(m, seg_len=10, batch=16)
    x = repeated_tokens(16, 10, 32, torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = m(x)
    assert repeated_half_loss(logits, x, 10).item() < 1.0 < repeated_half_loss(logits, x, 10, "first").item()
    assert float(s["prefix_matching"][1].max()) > 0.5  # an induction head in layer 1
    assert float(s["previous_token"][0].max()) > 0.3  # a previous-token head in layer 0


def test_ablation_and_patching_by_hand():
    torch.manual_seed(0)
    m = AttentionOnly(10, d_model=8, heads=2, num_layers=2, max_len=7).eval()
    clean = repeated_tokens(2, 3, 10, torch.Generator().manual_seed(0))
    corrupted = repeated_tokens(2, 3, 10, torch.Generator().manual_seed(1))
    with torch.no_grad():
        base_clean, base_corr = m(clean), m(corrupted)
    outs = head_outputs(m, clean, 1)
    assert outs.shape == (2, 7, 2, 4)
    # patching a head with its own output changes nothing; patching it from another input changes its position
    assert torch.allclose(patch_head(m, corrupted, corrupted, 1, 0), base_corr, atol=1e-6)
    patched = patch_head(m, clean, corrupted, 1, 0, positions=[5])
    assert not torch.allclose(patched[:, 5], base_corr[:, 5])
    # layer 1 is the last layer: positions other than 5 are untouched (causal, nothing mixes later)
    assert torch.allclose(patched[:, :5], base_corr[:, :5], atol=1e-6)
    assert torch.allclose(patched[:, 6:], base_corr[:, 6:], atol=1e-6)
    both = head_outputs(m, clean, 1)
    zero = ablate_head(m, clean, 1, 0, mode="zero")
    assert not torch.allclose(zero, base_clean)
    # by hand: zero head 0's slice of the input to w_o
    module = attention_modules(m)[1][1]
    handle = module.w_o.register_forward_pre_hook(lambda mod, a: (a[0].index_fill(-1, torch.arange(4), 0.0),))
    with torch.no_grad():
        by_hand = m(clean)
    handle.remove()
    assert torch.allclose(zero, by_hand, atol=1e-6)
    assert both.shape == outs.shape
    mean = ablate_head(m, clean, 0, 1, mode="mean")
    assert mean.shape == base_clean.shape and not torch.allclose(mean, base_clean)
    with torch.no_grad():
        assert torch.allclose(m(clean), base_clean)  # hooks removed


def test_patching_with_a_patch_function_of_ones_own():
    """``patch=`` does the replacing one position at a time (chapter 17's exercise); one-position patches of the last
    layer add up to patching them all at once, since nothing after it mixes positions."""
    torch.manual_seed(0)
    m = AttentionOnly(10, d_model=8, heads=2, num_layers=2, max_len=7).eval()
    clean = repeated_tokens(2, 3, 10, torch.Generator().manual_seed(0))
    corrupted = repeated_tokens(2, 3, 10, torch.Generator().manual_seed(1))
    calls = []

    def copy_slice(c, x, head, position):
        calls.append(position)
        out = x.clone()
        out[:, position, head] = c[:, position, head]
        return out

    for positions in ([5], [4, 6], None):
        calls.clear()
        assert torch.equal(patch_head(m, clean, corrupted, 1, 1, positions=positions, patch=copy_slice),
                           patch_head(m, clean, corrupted, 1, 1, positions=positions))
        assert calls == (positions or list(range(7)))
    with torch.no_grad():
        base = m(corrupted)
    one_at_a_time = sum(patch_head(m, clean, corrupted, 1, 0, positions=[p], patch=copy_slice) - base
                        for p in range(7))
    assert torch.allclose(one_at_a_time, patch_head(m, clean, corrupted, 1, 0) - base, atol=1e-5)
    with pytest.raises(ValueError, match="patch must return a tensor shaped like"):
        patch_head(m, clean, corrupted, 1, 0, patch=lambda c, x, head, position: None)
    with pytest.raises(ValueError, match="patch must be a function"):
        patch_head(m, clean, corrupted, 1, 0, patch="copy")


@pytest.mark.parametrize("kwargs, match", [
    (dict(layer=2, head=0), "layer must be"), (dict(layer="nope", head=0), "not an attention module"),
    (dict(layer=0, head=2), "head must be"), (dict(layer=0, head=0, positions=[9]), "positions")])
def test_intervention_errors(kwargs, match):
    m = AttentionOnly(10, d_model=8, heads=2, num_layers=2, max_len=7)
    x = repeated_tokens(1, 3, 10)
    with pytest.raises(ValueError, match=match):
        patch_head(m, x, x, **kwargs)
    with pytest.raises(ValueError, match="same shapes"):
        patch_head(m, x, repeated_tokens(1, 2, 10), 0, 0)
    with pytest.raises(ValueError, match="mode"):
        ablate_head(m, x, 0, 0, mode="max")


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)  # ranks, not values
    # ties get mean ranks: x ranks (1.5, 1.5, 3), y ranks (1, 2, 3) -> Pearson of ranks
    rx, ry = torch.tensor([1.5, 1.5, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    rx, ry = rx - rx.mean(), ry - ry.mean()
    assert spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(float((rx * ry).sum() / (rx.norm() * ry.norm())))
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="constant"):
        spearman([1, 1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        spearman([1, float("nan")], [1, 2])


def test_modules_found_in_a_plain_mha():
    mha = MultiHeadAttention(8, 2)
    assert attention_modules(torch.nn.Sequential(mha))[0][1] is mha
    with pytest.raises(ValueError, match="no tfm_lesson MultiHeadAttention"):
        attention_modules(torch.nn.Linear(2, 2))


def test_spearman_p_value_exact_for_few_heads():
    from tfm_lesson.look.interpret import spearman_p_value

    assert spearman_p_value([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(2 / 24)  # the order and its reverse
    x = list(range(8))
    # the two-sided 5% critical value of Spearman's rho at n = 8 is 0.738 (tables): p just below 0.05 there
    # rho 0.76 and 0.71, on either side of the critical value
    assert spearman_p_value(x, [0, 2, 1, 4, 7, 3, 6, 5]) < 0.05 < spearman_p_value(x, [0, 1, 2, 4, 7, 6, 3, 5])
    assert spearman_p_value(x, x[::-1]) == spearman_p_value(x, x)  # two-sided


def test_spearman_p_value_sampled_for_many_heads_and_checked():
    from tfm_lesson.look.interpret import spearman, spearman_p_value

    gen = torch.Generator().manual_seed(0)
    x = torch.arange(24.0)
    y = x + 9 * torch.randn(24, generator=gen)
    p = spearman_p_value(x, y, samples=20_000)
    # an independent estimate: spearman itself over 2,000 shuffles of y
    rho = abs(spearman(x, y))
    hits = sum(abs(spearman(x, y[torch.randperm(24, generator=gen)])) >= rho - 1e-12 for _ in range(2000))
    assert 0 < p < 0.2 and p == pytest.approx(hits / 2000, abs=0.03)
    assert spearman_p_value(x, y, samples=20_000) == p  # seeded
    with pytest.raises(ValueError, match="samples"):
        spearman_p_value(x, y, samples=0)
    with pytest.raises(ValueError, match="same length"):
        spearman_p_value([1, 2, 3], [1, 2])
