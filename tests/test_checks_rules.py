"""Rules beyond outputs (tfm_lesson/checks/_rules.py): a "write it yourself" exercise refuses an answer that hands
the work to the package's reference or to the function the exercise forbids, with a named message; the learner's own
code and helpers pass."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson as T
from tfm_lesson.checks import (Mistake, check_grouped_query_attention, check_label_smoothing_loss,
                               check_multi_head_attention)
from tfm_lesson.checks._rules import forbid_loops, forbid_names, learner_code


# chapter 03, exercise 3 ---------------------------------------------------------------------------------------------
class Subclassed(T.MultiHeadAttention):
    pass


class Wrapped(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.inner = T.MultiHeadAttention(d_model, heads)
        self.w_q, self.w_k, self.w_v, self.w_o = self.inner.w_q, self.inner.w_k, self.inner.w_v, self.inner.w_o

    def forward(self, query, key, value, mask=None):
        return self.inner(query, key, value, mask)


def _sdpa_heads(module, query, key, value, mask):
    b = query.size(0)
    q, k, v = (w(x).view(b, -1, module.heads, module.d_k).transpose(1, 2)
               for w, x in ((module.w_q, query), (module.w_k, key), (module.w_v, value)))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class ThroughSDPA(nn.Module):  # the forbidden call sits in a helper of the learner's: followed
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        out = _sdpa_heads(self, query, key, value, mask)
        return self.w_o(out.transpose(1, 2).reshape(query.size(0), -1, self.heads * self.d_k))


@pytest.mark.parametrize("cls, used", [(Subclassed, "derives from tfm_lesson"), (Wrapped, "`MultiHeadAttention`"),
                                       (ThroughSDPA, "`scaled_dot_product_attention` in `_sdpa_heads`")])
def test_mha_written_by_the_package_is_refused(cls, used):
    with pytest.raises(Mistake, match="WRITE IT YOURSELF") as caught:
        check_multi_head_attention(cls)
    assert used in str(caught.value)


# chapter 10, exercise 2 ---------------------------------------------------------------------------------------------
def smoothing_by_pytorch(logits, target, smoothing, pad_id):
    return F.cross_entropy(logits.flatten(0, -2), target.flatten(), label_smoothing=smoothing, ignore_index=pad_id)


def smoothing_by_the_package(logits, target, smoothing, pad_id):
    from tfm_lesson.train.loop import LabelSmoothingLoss
    return LabelSmoothingLoss(smoothing, pad_id)(logits, target)


def smoothing_with_plain_cross_entropy(logits, target, smoothing, pad_id):
    """Allowed: F.cross_entropy without label_smoothing is the plain negative log-likelihood."""
    flat, tgt = logits.float().flatten(0, -2), target.flatten()
    real = tgt != pad_id
    nll = F.cross_entropy(flat, tgt, reduction="none")
    uniform = -flat.log_softmax(-1).mean(-1)
    return (((1 - smoothing) * nll + smoothing * uniform) * real).sum() / real.sum().clamp(min=1)


@pytest.mark.parametrize("fn, used", [(smoothing_by_pytorch, "cross_entropy(..., label_smoothing=...)"),
                                      (smoothing_by_the_package, "`LabelSmoothingLoss`")])
def test_label_smoothing_by_pytorch_or_the_package_is_refused(fn, used):
    with pytest.raises(Mistake, match="WRITE IT YOURSELF") as caught:
        check_label_smoothing_loss(fn)
    assert used in str(caught.value)


def test_label_smoothing_with_plain_cross_entropy_passes(capsys):
    check_label_smoothing_loss(smoothing_with_plain_cross_entropy)
    assert "passed" in capsys.readouterr().out


# chapter 16, exercise 4 ---------------------------------------------------------------------------------------------
def gqa_loop(q, k, v, mask):
    group = q.size(1) // k.size(1)
    outs = []
    for h in range(q.size(1)):  # one head at a time: right numbers, the loop the exercise forbids
        scores = q[:, h] @ k[:, h // group].transpose(-2, -1) / math.sqrt(q.size(-1))
        outs.append(scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v[:, h // group])
    return torch.stack(outs, dim=1)


def gqa_enable(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def gqa_comprehension(q, k, v, mask):
    group = q.size(1) // k.size(1)
    k = torch.stack([k[:, h // group] for h in range(q.size(1))], dim=1)
    v = torch.stack([v[:, h // group] for h in range(q.size(1))], dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("fn, hint", [(gqa_loop, "NO LOOP: your my_gqa has a `for` loop"),
                                      (gqa_comprehension, "NO LOOP: your my_gqa has a comprehension"),
                                      (gqa_enable, "WRITE IT YOURSELF")])
def test_gqa_loop_or_enable_gqa_is_refused(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_grouped_query_attention(fn)


def test_the_learners_own_names_are_not_the_packages():
    """A learner's function that happens to share a forbidden name is theirs: not flagged."""
    def scaled_dot_product_attention(q, k, v):
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v

    def answer(q, k, v):
        return scaled_dot_product_attention(q, k, v)

    g = {"scaled_dot_product_attention": scaled_dot_product_attention}
    mine = type(answer)(answer.__code__, g, "answer", None, answer.__closure__)
    mine.__module__ = "__main__"
    forbid_names(mine, ("scaled_dot_product_attention",), "answer", "")  # resolves to the learner's own: no Mistake
    with pytest.raises(Mistake):
        forbid_names(answer, ("scaled_dot_product_attention",), "answer", "")


def test_code_without_source_is_not_judged():
    """Built-ins and code whose source cannot be read are skipped rather than guessed at."""
    assert learner_code(len) == []
    forbid_loops(eval("lambda x: [i for i in x]"), "answer", "")  # no source file: nothing to read


# an import inside the answer's own body is read too --------------------------------------------------------------------
def online_softmax_imported_inside(x, block_size):
    from tfm_lesson.flash import online_softmax as helper
    return helper(x, block_size)


def tiled_attention_imported_inside(query, key, value, block_size, causal=False, mask=None):
    from tfm_lesson.flash import flash_attention as fa
    return fa(query, key, value, mask, block_size=block_size, causal=causal)


def test_the_package_imported_inside_the_function_is_refused():
    from tfm_lesson.checks import check_online_softmax, check_tiled_attention

    with pytest.raises(Mistake, match="WRITE IT YOURSELF.*online_softmax"):
        check_online_softmax(online_softmax_imported_inside)
    with pytest.raises(Mistake, match="WRITE IT YOURSELF.*flash_attention"):
        check_tiled_attention(tiled_attention_imported_inside)
