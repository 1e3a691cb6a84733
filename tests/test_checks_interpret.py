"""Chapter 17 checkers: each classic mistake injected, and its named message asserted."""
from __future__ import annotations

import re

import pytest
import torch

from tfm_lesson.checks import Mistake, check_alignment_error_rate, check_induction_score, check_patch_position
from tfm_lesson.look.interpret import alignment_error_rate, prefix_matching_scores


# AER ------------------------------------------------------------------------------------------------------------------
def aer_sets(a, s, p=None):
    a, s = set(a), set(s)
    p = s if p is None else set(p)
    return 1 - (len(a & s) + len(a & p)) / (len(a) + len(s))


def aer_list(a, s, p=None):  # the classic mistake: counting over the list
    p = s if p is None else p
    return 1 - (sum(x in s for x in a) + sum(x in p for x in a)) / (len(a) + len(s))


def test_aer_correct_passes(capsys):
    check_alignment_error_rate(aer_sets)
    check_alignment_error_rate(alignment_error_rate)  # the package's refuses repeats
    assert "passed" in capsys.readouterr().out


def test_aer_over_a_list_named():
    with pytest.raises(Mistake, match="counted twice: an alignment is a SET"):
        check_alignment_error_rate(aer_list)


@pytest.mark.parametrize("bug, match", [
    (lambda a, s, p=None: 1 - 2 * len(set(a) & set(s)) / (len(a) + len(s)), "used \\|A ∩ S\\| twice"),
    (lambda a, s, p=None: 1 - (len(set(a) & set(s)) + len(set(a) & set(p or s))) / (len(a) + len(p or s)),
     "not \\|A\\| \\+ \\|P\\|"),
    (lambda a, s, p=None: 1 - aer_sets(a, s, p), "that is 1 - AER"),
    (lambda a, s, p=None: None, "returned None: not written yet, or did you forget a `return`\\?"),
])
def test_aer_other_mistakes(bug, match):
    with pytest.raises(Mistake, match=match):
        check_alignment_error_rate(bug)


def aer_lists_for_references(a, s, p=None):  # a set for the prediction, the references counted as lists
    s = list(s)
    p = s if p is None else list(p)
    a = set(a)
    return 1 - (sum(link in s for link in a) + sum(link in p for link in a)) / (len(a) + len(s))


def aer_counts_over_possible(a, s, p=None):  # |A ∩ P| counted over the list of possible links
    a, s = set(a), set(s)
    p = list(s) if p is None else list(p)
    return 1 - (len(a & s) + sum(link in a for link in p)) / (len(a) + len(s))


@pytest.mark.parametrize("fn, match", [
    (aer_lists_for_references, "aer\\(\\[\\(0, 0\\)\\], \\[\\(0, 0\\), \\(0, 0\\)\\], None\\) = 0.3333333, "
                               "expected 0.0000000: a link named twice in `sure` was counted twice: .*\\|S\\| = 1, not 2"),
    (aer_counts_over_possible, "a link named twice in `possible` was counted twice: .*\\|A ∩ P\\| counts it once"),
])
def test_aer_a_link_repeated_in_the_references_named(fn, match):
    with pytest.raises(Mistake, match=match):
        check_alignment_error_rate(fn)


def test_aer_repeats_refused_pass(capsys):
    def refuses(a, s, p=None):
        for links in (a, s, p or ()):
            if len(set(links)) != len(list(links)):
                raise ValueError("a link is named twice")
        return aer_sets(a, s, p)
    check_alignment_error_rate(refuses)
    assert "✔ check_alignment_error_rate passed" in capsys.readouterr().out


def test_aer_possible_none_ignored():
    def no_default(a, s, p=None):
        return aer_sets(a, s, p if p is not None else set())  # P empty when not given

    with pytest.raises(Mistake, match="P is S"):
        check_alignment_error_rate(no_default)


# induction score ------------------------------------------------------------------------------------------------------
def test_aer_as_a_float32_tensor_passes_and_a_difference_shows_in_the_message(capsys):
    check_alignment_error_rate(lambda a, s, p=None: torch.tensor(aer_sets(a, s, p), dtype=torch.float32))
    assert "passed" in capsys.readouterr().out
    with pytest.raises(Mistake, match=r"= \d\.\d{7}, expected \d\.\d{7}") as info:
        check_alignment_error_rate(lambda a, s, p=None: aer_sets(a, s, p) + 2e-5)
    got, want = re.search(r"= (\d\.\d{7}), expected (\d\.\d{7})", str(info.value)).groups()
    assert got != want


def test_aer_possible_only_named():
    def possible_only(a, s, p=None):
        a, s = set(a), set(s)
        p = s if p is None else set(p)
        return 1 - (len(a & s) + len(a & (p - s))) / (len(a) + len(s))
    with pytest.raises(Mistake, match="the possible-but-not-sure links only"):
        check_alignment_error_rate(possible_only)


def test_induction_score_correct_passes(capsys):
    check_induction_score(prefix_matching_scores)
    assert "passed" in capsys.readouterr().out


def first_half(a, seg_len):
    q = torch.arange(1, seg_len + 1)
    return a[..., q, q + seg_len - 1].mean(-1)


def whole_diagonal(a, seg_len):
    return torch.diagonal(a, offset=-(seg_len - 1), dim1=-2, dim2=-1).mean(-1)


def copy_itself(a, seg_len):
    q = torch.arange(seg_len + 1, 2 * seg_len + 1)
    return a[..., q, q - seg_len].mean(-1)


@pytest.mark.parametrize("bug, match", [
    (first_half, "measured the FIRST half"), (whole_diagonal, "queries of the FIRST half"),
    (copy_itself, "duplicate-token head"), (lambda a, L: a[..., L + 1:, :].diagonal(dim1=-2, dim2=-1).mean(-1),
                                            "your key is t - seg_len - 1"),  # the sub-map's diagonal: t - (L + 1)
    (lambda a, n: a[..., torch.arange(n + 1, 2 * n), torch.arange(n + 1, 2 * n) - n + 1].mean(-1),
     "the last query of the repeat is missing"),
    (lambda a, n: a[..., torch.arange(n, 2 * n), torch.arange(n, 2 * n) - n + 1].mean(-1), "off by one: position 0"),
    (lambda a, n: a[..., torch.arange(n + 1, 2 * n + 1) - n + 1, torch.arange(n + 1, 2 * n + 1)].mean(-1),
     "you read attention\\[..., key, query\\]"),
])
def test_induction_score_mistakes_named(bug, match):
    with pytest.raises(Mistake, match=match):
        check_induction_score(bug)


@pytest.mark.parametrize("bug, match", [
    (lambda a, n: a[torch.arange(n + 1, 2 * n + 1), torch.arange(n + 1, 2 * n + 1) - n + 1].mean(-1),
     "You indexed the map's leading axes: attention is \\(2, 3, 9, 9\\).* axis of size 2, not one of the map's 9 "
     "positions"),
    (lambda a, n: a[..., torch.arange(n + 1, 2 * n + 2), torch.arange(n + 1, 2 * n + 2) - n + 1].mean(-1),
     "An index past the end: the map has 1 \\+ 2 seg_len positions"),
    (lambda a, n: None, "returned None: not written yet, or did you forget a `return`\\?"),
])
def test_induction_score_index_errors_and_stub_named(bug, match):
    with pytest.raises(Mistake, match=match):
        check_induction_score(bug)


def test_patch_stub_named():
    with pytest.raises(Mistake, match="returned None: not written yet, or did you forget a `return`\\?"):
        check_patch_position(lambda clean, corrupted, head, position: None)


# patch position -------------------------------------------------------------------------------------------------------
def patch_right(clean, corrupted, head, position):
    out = corrupted.clone()
    out[:, position, head] = clean[:, position, head]
    return out


def patch_previous(clean, corrupted, head, position):  # the key the head attends to, not the query
    out = corrupted.clone()
    out[:, position - 1, head] = clean[:, position - 1, head]
    return out


def patch_in_place(clean, corrupted, head, position):
    corrupted[:, position, head] = clean[:, position, head]
    return corrupted


def patch_all_positions(clean, corrupted, head, position):
    out = corrupted.clone()
    out[:, :, head] = clean[:, :, head]
    return out


def patch_all_heads(clean, corrupted, head, position):
    out = corrupted.clone()
    out[:, position] = clean[:, position]
    return out


def test_patch_correct_passes(capsys):
    check_patch_position(patch_right)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("bug, match", [
    (patch_previous, "patched position \\d+, not \\d+: patch the head where it writes"),
    (patch_in_place, "changed `corrupted` in place"), (patch_all_positions, "changed positions"),
    (patch_all_heads, "changed head\\(s\\)"), (lambda k, c, h, p: k.clone(), "whole clean run"),
    (lambda clean, corrupted, h, p: patch_right(corrupted, clean, h, p), "clean and corrupted are swapped"),
])
def test_patch_mistakes_named(bug, match):
    with pytest.raises(Mistake, match=match):
        check_patch_position(bug)


# off by one, as a learner writes it from the chapter's "t = n+1, ..., 2n" --------------------------------------------
def loop_score(a, seg_len, first, stop, key_shift, divide_by=None):
    """A learner's loop over the queries t in range(first, stop), key t + key_shift, summed then divided."""
    total = 0
    for t in range(first, stop):
        total = total + a[..., t, t + key_shift]
    return total / (divide_by if divide_by is not None else stop - first)


@pytest.mark.parametrize("bug, match", [
    (lambda a, n: loop_score(a, n, n + 1, 2 * n, 1 - n), "the last query of the repeat is missing"),
    (lambda a, n: loop_score(a, n, n + 2, 2 * n + 1, 1 - n),
     r"your queries run t = seg_len \+ 2 \.\. 2 seg_len .*both ends included"),
    (lambda a, n: loop_score(a, n, n + 1, 2 * n + 1, -n + 2), r"your key is t - seg_len \+ 2, the induction key"),
    (lambda a, n: loop_score(a, n, n + 1, 2 * n + 1, -n - 1), r"your key is t - seg_len - 1, the induction key"),
    (lambda a, n: loop_score(a, n, n + 1, 2 * n, 1 - n, divide_by=n), r"queries run t = seg_len \+ 1 \.\. 2 seg_len - 1"
                                                                      r" \(here 5 \.\. 7\); the repeated half"),
    (lambda a, n: loop_score(a, n, n + 1, 2 * n + 1, 1 - n, divide_by=n + 1), "you divided the sum of 4 weights by 5"),
    (lambda a, n: loop_score(a, n, n + 1, 2 * n + 2, 1 - n), "An index past the end: the map has 1 \\+ 2 seg_len"),
])
def test_induction_score_off_by_one_named(bug, match):
    with pytest.raises(Mistake, match=match) as info:
        check_induction_score(bug)
    assert "largest difference" not in str(info.value)


def test_induction_score_loop_right_passes(capsys):
    check_induction_score(lambda a, n: loop_score(a, n, n + 1, 2 * n + 1, 1 - n))
    assert "passed" in capsys.readouterr().out


# AER of empty alignments --------------------------------------------------------------------------------------------
def aer_guarded(zero_zero):
    """The chapter's formula with a guard for an empty sentence returning ``zero_zero``."""
    def aer(a, s, p=None):
        if not a and not s:
            return zero_zero
        return aer_sets(a, s, p)
    return aer


def aer_raises_value_error(a, s, p=None):
    if not a and not s:
        raise ValueError("AER is undefined with no predicted and no sure link")
    return aer_sets(a, s, p)


@pytest.mark.parametrize("fn", [aer_sets, aer_guarded(float("nan")), aer_raises_value_error, alignment_error_rate])
def test_aer_of_nothing_against_nothing_undefined_passes(fn, capsys):
    """0/0 is undefined: the division raising, a ValueError and nan are all right; the chapter's solution raises."""
    check_alignment_error_rate(fn)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_aer_of_nothing_against_nothing_as_a_number_named(value):
    with pytest.raises(Mistake, match=r"aer\(set\(\), set\(\), None\) = .*AER is 0/0: undefined"):
        check_alignment_error_rate(aer_guarded(value))


def test_aer_of_no_prediction_is_one():
    def empty_is_perfect(a, s, p=None):
        return 0.0 if not a else aer_sets(a, s, p)
    with pytest.raises(Mistake, match="with no predicted link .* AER = 1 - 0 / \\|S\\| = 1"):
        check_alignment_error_rate(empty_is_perfect)

    def from_precision_and_recall(a, s, p=None):  # right on every non-empty A, but divides by |A|
        a, s = set(a), set(s)
        p = s if p is None else set(p)
        precision, recall = len(a & p) / len(a), len(a & s) / len(s)
        return 1 - (precision * len(a) + recall * len(s)) / (len(a) + len(s))
    with pytest.raises(Mistake, match="raised ZeroDivisionError: with no predicted link AER is still defined"):
        check_alignment_error_rate(from_precision_and_recall)


# slips from a learner's read of chapter 17 -------------------------------------------------------------------------
def aer_one_minus_f(a, s, p=None):  # 1 - F of precision and recall: AER only when P = S
    a, s = set(a), set(s)
    p = s if p is None else set(p)
    precision, recall = len(a & p) / len(a), len(a & s) / len(s)
    return 1 - (2 * precision * recall / (precision + recall) if precision + recall else 0.0)


def patch_first_sequence(clean, corrupted, head, position):
    out = corrupted.clone()
    out[0, position, head] = clean[0, position, head]
    return out


def patch_axes_swapped(clean, corrupted, head, position):
    out = corrupted.clone()
    out[:, head, position] = clean[:, head, position]
    return out


@pytest.mark.parametrize("check, bug, match", [
    (check_alignment_error_rate, aer_one_minus_f, "that is 1 - F, the harmonic mean of precision"),
    (check_patch_position, patch_first_sequence, "left batch element\\(s\\) \\[1\\] unpatched"),
    (check_patch_position, patch_axes_swapped, "raised IndexError: .*Head outputs are \\(batch, len, heads, d_k\\)"),
    (check_induction_score, lambda a, n: a[..., torch.arange(21, 41), torch.arange(2, 22)].mean(-1),
     "Index 21 is far past this map's 9 positions \\(seg_len = 4\\): build every index from the `seg_len` argument"),
    (check_induction_score, lambda a, n: a[:, :, torch.arange(n + 1, 2 * n + 1), torch.arange(2, n + 2)].mean(-1),
     "Your index names more axes than this map has: attention is \\(4, 13, 13\\)"),
])
def test_learner_slips_named(check, bug, match):
    with pytest.raises(Mistake, match=match):
        check(bug)


# yours or the reference, downstream in the chapter --------------------------------------------------------------------
STANDS_IN = "{}: yours does not pass its check yet; the reference version stands in\n"
USED = "{}: yours passes its check; the cells below use it\n"


def test_yours_or_reference_keeps_a_passing_chapter_17_piece_and_replaces_a_failing_one(capsys):
    from tfm_lesson.checks import yours_or_reference

    assert yours_or_reference(aer_sets, "aer", say=True) is aer_sets
    assert capsys.readouterr().out == USED.format("aer")  # one line: the checker's own is not shown
    stand_in = yours_or_reference(aer_list, "aer", say=True)
    assert capsys.readouterr().out == STANDS_IN.format("aer")
    assert stand_in is not aer_list
    a, s, p = [(0, 0), (0, 0), (1, 2)], [(0, 0), (1, 1)], [(0, 0), (1, 1), (1, 2)]
    assert stand_in(a, s, p) == pytest.approx(aer_sets(a, s, p))  # the repeated link counted once
    with pytest.raises(ValueError, match="undefined"):
        stand_in([], [])

    def first_half(attention, seg_len):  # the first half's queries: a named mistake
        q = torch.arange(1, seg_len + 1)
        return attention[..., q, q + seg_len - 1].mean(-1)
    score = yours_or_reference(first_half, "induction_score")
    assert capsys.readouterr().out == STANDS_IN.format("induction_score")
    maps = torch.rand(2, 3, 9, 9, generator=torch.Generator().manual_seed(0)).softmax(-1)
    assert torch.allclose(score(maps, 4), prefix_matching_scores(maps, 4))

    def patch(clean, corrupted, head, position):
        out = corrupted.clone()
        out[:, position, head] = clean[:, position, head]
        return out
    assert yours_or_reference(patch, "patch") is patch and capsys.readouterr().out == ""  # silent unless say=True
    swapped = yours_or_reference(lambda c, x, head, position: patch(x, c, head, position), "patch")
    assert capsys.readouterr().out == STANDS_IN.format("patch")
    clean, corrupted = torch.randn(2, 5, 3, 4), torch.randn(2, 5, 3, 4)
    assert torch.equal(swapped(clean, corrupted, 1, 2), patch(clean, corrupted, 1, 2))
