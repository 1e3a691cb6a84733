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
    (lambda a, s, p=None: None, "NoneType"),
])
def test_aer_other_mistakes(bug, match):
    with pytest.raises(Mistake, match=match):
        check_alignment_error_rate(bug)


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
                                            "differs from the mean"),
    (lambda a, n: a[..., torch.arange(n + 1, 2 * n), torch.arange(n + 1, 2 * n) - n + 1].mean(-1),
     "the last query of the repeat is missing"),
    (lambda a, n: a[..., torch.arange(n, 2 * n), torch.arange(n, 2 * n) - n + 1].mean(-1), "off by one: position 0"),
    (lambda a, n: a[..., torch.arange(n + 1, 2 * n + 1) - n + 1, torch.arange(n + 1, 2 * n + 1)].mean(-1),
     "you read attention\\[..., key, query\\]"),
])
def test_induction_score_mistakes_named(bug, match):
    with pytest.raises(Mistake, match=match):
        check_induction_score(bug)


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
