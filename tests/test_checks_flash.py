"""Chapter 18 checkers: a right answer passes; each classic mistake, written the way a learner would write it, fails
with its own hint."""
from __future__ import annotations

import functools
import math
import sys

import pytest
import torch

from tfm_lesson.checks import Mistake, check_arithmetic_intensity, check_online_softmax, check_tiled_attention
from tfm_lesson.flash import attention_lse, flash_attention, online_softmax


# the online softmax -------------------------------------------------------------------------------------------------
def learner_softmax(x, block_size, *, rescale=True, per_block=False, guard=True, guard_end_only=False,
                    inverted=False, update=True, drop_last=False):
    if per_block:  # each block's exp(x - max) over that block's own sum
        blocks = [x[..., s:s + block_size] for s in range(0, x.size(-1), block_size)]
        exps = [torch.exp(b - b.max(dim=-1, keepdim=True).values) for b in blocks]
        return torch.cat([e / e.sum(dim=-1, keepdim=True) for e in exps], dim=-1)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    d = torch.zeros(x.shape[:-1], dtype=x.dtype)
    stop = x.size(-1) - block_size + 1 if drop_last else x.size(-1)
    for s in range(0, stop, block_size):
        block = x[..., s:s + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        shift = torch.where(m_new == float("-inf"), 0.0, m_new) if guard and not guard_end_only else m_new
        factor = torch.exp(shift - m) if inverted else torch.exp(m - shift)
        d = (d * factor if rescale else d) + torch.exp(block - shift[..., None]).sum(-1)
        if update:
            m = m_new
    shift = torch.where(m == float("-inf"), 0.0, m) if guard else m
    out = torch.exp(x - shift[..., None]) / d[..., None]
    return torch.where(d[..., None] > 0, out, 0.0) if guard else out


def test_online_softmax_right_answers_pass(capsys):
    check_online_softmax(learner_softmax)
    check_online_softmax(lambda x, b: learner_softmax(x.double(), b).to(x.dtype))  # computed in float64
    assert capsys.readouterr().out.count("✔ check_online_softmax passed") == 2


@pytest.mark.parametrize("kwargs, hint", [
    (dict(rescale=False), "the running sum is not rescaled when the maximum grows"),
    (dict(per_block=True), "each block is normalised by its own sum"),
    (dict(guard=False), "first block is all -inf .* came out NaN or zero: .* INSIDE the loop"),
    (dict(guard_end_only=True), "first block is all -inf .* came out NaN or zero: .* INSIDE the loop"),
    (dict(inverted=True), "the rescale factor is upside down"),
    (dict(update=False), "the running maximum never moves: after each block set m = m_new"),
    (dict(drop_last=True), "the last, shorter block is dropped"),
])
def test_online_softmax_mistakes(kwargs, hint):
    with pytest.raises(Mistake, match=hint):
        check_online_softmax(lambda x, b: learner_softmax(x, b, **kwargs))


def test_online_softmax_stub_and_shape():
    with pytest.raises(Mistake, match="returned None"):
        check_online_softmax(lambda x, b: None)
    with pytest.raises(Mistake, match="expected"):
        check_online_softmax(lambda x, b: torch.exp(x).sum(-1))


from torch.nn.functional import softmax as softmax_renamed  # noqa: E402 - an answer that renames PyTorch's softmax


@pytest.mark.parametrize("answer, used", [
    (lambda x, b: torch.nan_to_num(x.softmax(-1)), "softmax`"),
    (lambda x, b: torch.softmax(x, dim=-1), "softmax`"),
    (lambda x, b: torch.exp(torch.log_softmax(x, -1)), "log_softmax`"),
    (lambda x, b: torch.nan_to_num(torch.exp(x - x.logsumexp(-1, keepdim=True))), "logsumexp`"),
    (lambda x, b: torch.nan_to_num(softmax_renamed(x, -1)), "PyTorch's `F.softmax` \\(as `softmax_renamed`\\)"),
])
def test_online_softmax_by_pytorch_is_refused(answer, used):
    with pytest.raises(Mistake, match=f"WRITE IT YOURSELF: your online softmax uses .*{used}") as info:
        check_online_softmax(answer)
    assert "the package's `" not in str(info.value)


def whole_row(x, block_size):  # right numbers, no blocks: the row's max and sum at once
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - torch.where(m == float("-inf"), 0.0, m))
    d = e.sum(dim=-1, keepdim=True)
    return torch.where(d > 0, e / d, 0.0)


def two_passes(x, block_size):  # the maximum block by block, then the sum over the whole row
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    for s in range(0, x.size(-1), block_size):
        m = torch.maximum(m, x[..., s:s + block_size].amax(dim=-1))
    e = torch.exp(x - torch.where(m == float("-inf"), 0.0, m)[..., None])
    d = e.sum(dim=-1, keepdim=True)
    return torch.where(d > 0, e / d, 0.0)


@pytest.mark.parametrize("answer", [whole_row, two_passes])
def test_online_softmax_without_blocks_is_named(answer):
    with pytest.raises(Mistake, match="NOT BLOCKED: on rows of 20 with block_size=4 your function computed a max or a "
                                      "sum over 20 numbers at once"):
        check_online_softmax(answer)


def test_online_softmax_blocks_viewed_at_once_pass(capsys):
    """Blocks taken with a view, each reduced over its own block_size columns: blocked, though not in a loop."""
    def viewed(x, block_size):
        if x.size(-1) % block_size:
            return learner_softmax(x, block_size)
        blocks = x.unflatten(-1, (-1, block_size))  # (..., blocks, block_size)
        m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
        d = torch.zeros(x.shape[:-1], dtype=x.dtype)
        for i, m_block in enumerate(blocks.amax(dim=-1).unbind(-1)):
            m_new = torch.maximum(m, m_block)
            shift = torch.where(m_new == float("-inf"), 0.0, m_new)
            d = d * torch.exp(m - shift) + torch.exp(blocks[..., i, :] - shift[..., None]).sum(-1)
            m = m_new
        shift = torch.where(m == float("-inf"), 0.0, m)
        return torch.where(d[..., None] > 0, torch.exp(x - shift[..., None]) / d[..., None], 0.0)
    check_online_softmax(viewed)
    assert "✔ check_online_softmax passed" in capsys.readouterr().out


def _from_the_chapter(name: str):
    """Chapter 18's own solution of ``name``, imported from a file (its source readable, as a learner's is)."""
    import importlib.util
    import tempfile
    from pathlib import Path

    import nbformat

    from tfm_lesson.course.exercises import exercises
    from tfm_lesson.course.solution_form import strip_title

    chapter = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / "18_attention_that_fits.ipynb",
                            as_version=4)
    source = next(strip_title(chapter.cells[ex.solution_index].source) for ex in exercises(chapter)
                  if f"def {name}(" in chapter.cells[ex.solution_index].source)
    path = Path(tempfile.mkdtemp()) / "chapter18_solution.py"
    path.write_text("import math\n\nimport torch\n\n\n" + source)
    spec = importlib.util.spec_from_file_location("chapter18_solution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


chapter_solution = _from_the_chapter("my_online_softmax")


def _final_pass(x, m, d):  # the one pass that may touch the whole row
    shift = torch.where(m == float("-inf"), 0.0, m)
    return torch.where(d[..., None] > 0, (x - shift[..., None]).exp() / d[..., None], 0.0)


def _block_update(block, m, d):  # a learner's helper, handed one block
    m_new = torch.maximum(m, block.max(dim=-1).values)
    shift = torch.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, d * torch.exp(m - shift) + torch.sum(torch.exp(block - shift.unsqueeze(-1)), dim=-1)


def by_split(x, block_size):
    m, d = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype), torch.zeros(x.shape[:-1], dtype=x.dtype)
    for block in x.split(block_size, dim=-1):
        m, d = _block_update(block, m, d)
    return _final_pass(x, m, d)


def by_chunk(x, block_size):
    y = x.double()
    m, d = torch.full(x.shape[:-1], float("-inf"), dtype=y.dtype), torch.zeros(x.shape[:-1], dtype=y.dtype)
    for block in torch.chunk(y, math.ceil(x.size(-1) / block_size), dim=-1):
        m, d = _block_update(block, m, d)
    return _final_pass(y, m, d).to(x.dtype)


def by_unfold(x, block_size):
    pad = -x.size(-1) % block_size
    padded = torch.nn.functional.pad(x, (0, pad), value=float("-inf"))
    blocks = padded.unfold(-1, block_size, block_size)  # (..., blocks, block_size)
    m, d = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype), torch.zeros(x.shape[:-1], dtype=x.dtype)
    for i in range(blocks.size(-2)):
        m, d = _block_update(blocks[..., i, :], m, d)
    return _final_pass(x, m, d)


@pytest.mark.parametrize("answer", [chapter_solution, by_split, by_chunk, by_unfold])
def test_online_softmax_blocked_styles_pass(answer, capsys):
    """A loop over slices, split, chunk, unfold, a helper handed one block: each max and sum covers one block."""
    check_online_softmax(answer)
    assert "✔ check_online_softmax passed" in capsys.readouterr().out


def max_then_sum(x, block_size):
    m = x.max(-1).values
    shift = torch.where(m == float("-inf"), 0.0, m)[..., None]
    d = (x - shift).exp().sum(-1, keepdim=True)
    return torch.where(d > 0, (x - shift).exp() / d, 0.0)


def through_an_alias(x, block_size):
    y = x * 1.0
    m = torch.amax(y, dim=-1, keepdim=True)
    e = torch.exp(y - torch.where(m == float("-inf"), 0.0, m))
    d = torch.sum(e, dim=-1, keepdim=True)
    return torch.where(d > 0, e / d, 0.0)


def _row_stats(t):  # a learner's helper, handed the whole row
    m = t.amax(dim=-1, keepdim=True)
    m = torch.where(m == float("-inf"), 0.0, m)
    return m, torch.exp(t - m).sum(dim=-1, keepdim=True)


def with_a_helper(x, block_size):
    m, d = _row_stats(x)
    return torch.where(d > 0, torch.exp(x - m) / d, 0.0)


@pytest.mark.parametrize("answer", [whole_row, two_passes, max_then_sum, through_an_alias, with_a_helper])
def test_a_whole_row_reduction_is_seen_in_the_code(answer):
    """What the grader decides by (the watch runs in the learner's kernel): read from the code, a reduction of x, or
    of what is computed from all of x, through the learner's own helpers too."""
    from tfm_lesson.checks._rules_rows import whole_row_reduction

    code, place = whole_row_reduction(answer)
    assert "line" in place and ("max" in code or "sum" in code), (code, place)
    with pytest.raises(Mistake, match="NOT BLOCKED"):
        check_online_softmax(answer)


@pytest.mark.parametrize("answer", [chapter_solution, by_split, by_chunk, by_unfold, learner_softmax])
def test_blocked_code_has_no_whole_row_reduction(answer):
    from tfm_lesson.checks._rules_rows import whole_row_reduction

    assert whole_row_reduction(answer) is None


def _other_axes(x, block_size):  # reductions over another axis, and elementwise max: not a row
    return x.sum(0) + x.amax(dim=-2, keepdim=True).sum() + torch.max(x, x * 2) + x.max(x.exp())


def _matmul(x, block_size):
    return x.exp() @ torch.ones(x.size(-1), 1)


def _nested(x, block_size):
    def total(t):
        return t.sum(-1)
    return total(x.clone())


def _axis_computed(x, block_size):
    last = x.dim() - 1
    return torch.sum(torch.where(x > 0, x, 0.0), dim=last)


def _in_a_loop(x, block_size):
    acc = torch.zeros(x.shape[:-1])
    for row in x:  # each item is still a whole row
        acc = acc + row.float().amax()
    return acc


def _rebound(x, block_size):
    y = x.exp()
    y = y[..., :block_size]  # from here a block, no more a row
    return y.sum(-1)


@pytest.mark.parametrize("answer, found", [
    (_other_axes, None), (_rebound, None), (_matmul, "x.exp() @ torch.ones"), (_nested, "t.sum(-1)"),
    (_axis_computed, "torch.sum(torch.where"), (_in_a_loop, "row.float().amax()"),
    (lambda x, b: (x - x.amax(-1, keepdim=True)).exp(), "x.amax(-1, keepdim=True)"),
])
def test_what_counts_as_a_whole_row_reduction(answer, found):
    from tfm_lesson.checks._rules_rows import whole_row_reduction

    got = whole_row_reduction(answer)
    assert (got is None) if found is None else (got is not None and got[0].startswith(found)), got


# tiled attention ----------------------------------------------------------------------------------------------------
def learner_tiled(q, k, v, block_size, causal=False, mask=None, *, rescale_sum=True, rescale_acc=True,
                  per_tile=False, local_causal=False, guard=True, guard_end_only=False, inverted=False, update=True,
                  drop_last=False, scale=True, strict=False, skip="none", mask_with_causal=True, top_left=False,
                  flipped=False):
    q_len, k_len = q.size(2), k.size(2)
    offset = 0 if top_left else k_len - q_len  # the queries are the sequence's last positions
    offset = -offset if flipped else offset
    out = torch.zeros(*q.shape[:3], v.size(-1))
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        m = torch.full(q.shape[:2] + (q1 - q0,), float("-inf"))
        l = torch.zeros(q.shape[:2] + (q1 - q0,))
        acc = torch.zeros(*q.shape[:2], q1 - q0, v.size(-1))
        for k0 in range(0, k_len - block_size + 1 if drop_last else k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            if causal and skip == "right" and k0 > q1 - 1 + offset:  # the whole tile lies above the diagonal
                break
            if causal and skip == "diagonal" and k0 >= q0 + offset:  # the slip: the diagonal tile goes too
                break
            s = q[:, :, q0:q1] @ k[:, :, k0:k1].transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
            if causal:
                if local_causal:  # the classic slip: row and column inside the tile
                    visible = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).tril()
                elif strict:
                    visible = torch.arange(k0, k1)[None, :] < torch.arange(q0, q1)[:, None] + offset
                else:
                    visible = torch.arange(k0, k1)[None, :] <= torch.arange(q0, q1)[:, None] + offset
                s = s.masked_fill(~visible, float("-inf"))
            if mask is not None and (mask_with_causal or not causal):
                s = s.masked_fill(~mask[..., q0:q1, k0:k1], float("-inf"))
            if per_tile:
                acc = acc + s.softmax(-1).nan_to_num() @ v[:, :, k0:k1]
                continue
            m_new = torch.maximum(m, s.max(-1).values)
            shift = torch.where(m_new == float("-inf"), 0.0, m_new) if guard and not guard_end_only else m_new
            p = torch.exp(s - shift[..., None])
            alpha = torch.exp(shift - m) if inverted else torch.exp(m - shift)
            l = (alpha * l if rescale_sum else l) + p.sum(-1)
            acc = (alpha[..., None] * acc if rescale_acc else acc) + p @ v[:, :, k0:k1]
            if update:
                m = m_new
        if per_tile:
            out[:, :, q0:q1] = acc
        elif guard:
            out[:, :, q0:q1] = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], 0.0)
        else:
            out[:, :, q0:q1] = acc / l[..., None]
    return out


def test_tiled_attention_right_answers_pass(capsys):
    check_tiled_attention(learner_tiled)
    check_tiled_attention(lambda *a: learner_tiled(*a, skip="right"))  # skipping the tiles above the diagonal
    assert capsys.readouterr().out.count("✔ check_tiled_attention passed") == 2


@pytest.mark.parametrize("kwargs, hint", [
    (dict(rescale_sum=False, rescale_acc=False), "the running sum and the output accumulator are not rescaled"),
    (dict(rescale_acc=False), "the running sum is rescaled but the output accumulator is not"),
    (dict(rescale_sum=False), "the output accumulator is rescaled but the running sum is not"),
    (dict(per_tile=True), "normalised by that tile's own sum"),
    (dict(local_causal=True), "the causal mask uses the row and column inside the tile"),
    (dict(guard=False), "first key tile is all masked .* came out NaN or zero: .* INSIDE the loop"),
    (dict(guard_end_only=True), "first key tile is all masked .* came out NaN or zero: .* INSIDE the loop"),
    (dict(inverted=True), "the rescale factor is upside down"),
    (dict(update=False), "the running maximum never moves"),
    (dict(drop_last=True), "the last, shorter block is dropped"),
    (dict(scale=False), "the scores are not divided by sqrt\\(d_k\\)"),
    (dict(strict=True), "the causal mask hides the diagonal"),
    (dict(skip="diagonal"), "the causal skip drops the diagonal tile"),
    (dict(skip="right", local_causal=True), "the tiles above the diagonal are skipped correctly, but"),
    (dict(mask_with_causal=False), "with causal=True your function ignores `mask`"),
    (dict(top_left=True), "fewer queries than keys your causal mask lines up at the top-left"),
    (dict(flipped=True), "your causal offset has the wrong sign, so the queries see no key at all and come out 0"),
    (dict(flipped=True, skip="right"), "your causal offset has the wrong sign"),
])
def test_tiled_attention_mistakes(kwargs, hint):
    with pytest.raises(Mistake, match=hint):
        check_tiled_attention(lambda *a: learner_tiled(*a, **kwargs))


def test_tiled_attention_ignoring_the_mask_is_caught():
    with pytest.raises(Mistake, match="your function ignores `mask`: masked keys still get weight"):
        check_tiled_attention(lambda q, k, v, b, causal=False, mask=None: learner_tiled(q, k, v, b, causal))


def explicit(q, k, v, block_size, causal=False, mask=None):  # right numbers, the whole (q_len, k_len) matrix
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    allowed = torch.ones(s.shape[-2:], dtype=torch.bool)
    allowed = allowed.tril(diagonal=k.size(2) - q.size(2)) if causal else allowed  # the queries: the last positions
    allowed = allowed & mask if mask is not None else allowed
    w = s.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num()
    return w @ v


def test_the_explicit_full_matrix_is_not_tiled():
    with pytest.raises(Mistake, match=r"NOT TILED: at length 256 with block_size=32 .* KiB at their peak"):
        check_tiled_attention(explicit)


from tfm_lesson.flash import flash_attention as fa  # noqa: E402 - an answer that renames the package's function


def test_the_packages_implementation_is_refused_under_any_name():
    import functools

    import tfm_lesson as T
    import torch.nn.functional as F

    this_module = sys.modules[__name__]
    answers = [
        lambda q, k, v, b, causal=False, mask=None: flash_attention(q, k, v, mask, b, causal),
        lambda q, k, v, b, causal=False, mask=None: fa(q, k, v, mask, b, causal),
        lambda q, k, v, b, causal=False, mask=None: T.flash_attention(q, k, v, mask, b, causal),
        lambda q, k, v, b, causal=False, mask=None, f=fa: f(q, k, v, mask, b, causal),
        functools.partial(fa),
        lambda q, k, v, b, causal=False, mask=None: this_module.fa(q, k, v, mask, b, causal),  # an attribute alias
        lambda q, k, v, b, causal=False, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                                  is_causal=causal),
    ]
    for answer in answers:
        with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
            check_tiled_attention(answer)
    for answer in (online_softmax, lambda x, b: online_softmax(x, b), lambda x, b: x.logsumexp(-1)):
        with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
            check_online_softmax(answer)


from torch.nn.functional import scaled_dot_product_attention as sdpa  # noqa: E402 - PyTorch's SDPA, renamed


def test_sdpa_renamed_is_refused_as_pytorchs():
    with pytest.raises(Mistake, match="uses PyTorch's `F.scaled_dot_product_attention` \\(as `sdpa`\\)") as info:
        check_tiled_attention(lambda q, k, v, b, causal=False, mask=None: sdpa(q, k, v, attn_mask=mask))
    assert "the package's `" not in str(info.value)


# arithmetic intensity -----------------------------------------------------------------------------------------------
def intensity(m, k, n, size, *, two=2, output=True, bits=False, per_byte=True, upside_down=False):
    flops = two * m * k * n
    moved = (m * k + k * n + (m * n if output else 0)) * (size if per_byte else 1) * (8 if bits else 1)
    return moved / flops if upside_down else flops / moved


def test_arithmetic_intensity_right_answer_passes(capsys):
    check_arithmetic_intensity(intensity)
    assert "✔ check_arithmetic_intensity passed" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    (dict(two=1), "FLOPs counted as m\\*k\\*n"),
    (dict(output=False), "the output is not counted"),
    (dict(bits=True), "bits, not bytes"),
    (dict(per_byte=False), "bytes_per_number is missing"),
    (dict(upside_down=True), "upside down"),
])
def test_arithmetic_intensity_mistakes(kwargs, hint):
    with pytest.raises(Mistake, match=hint):
        check_arithmetic_intensity(lambda *a: intensity(*a, **kwargs))


# the backward pass --------------------------------------------------------------------------------------------------
from tfm_lesson.checks import check_flash_backward  # noqa: E402


def learner_backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None, *, use_d=True, scale=True,
                     guard=True, offset=True):
    d_k, q_len, k_len = q.size(-1), q.size(2), k.size(2)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    big_d = (grad_out * out).sum(-1) if use_d else torch.zeros_like(lse)  # (batch, heads, q_len)
    none = lse == float("-inf")
    safe = torch.where(none, 0.0, lse) if guard else lse
    factor = 1 / math.sqrt(d_k) if scale else 1.0
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        for k0 in range(0, k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            s = q[:, :, q0:q1] @ k[:, :, k0:k1].transpose(-2, -1) / math.sqrt(d_k)
            if causal:  # the queries are the sequence's last q_len positions (no offset: its first ones)
                q_pos = torch.arange(q0, q1)[:, None] + (k_len - q_len if offset else 0)
                s = s.masked_fill(torch.arange(k0, k1)[None, :] > q_pos, float("-inf"))
            if mask is not None:
                s = s.masked_fill(~mask[..., q0:q1, k0:k1], float("-inf"))
            p = torch.exp(s - safe[:, :, q0:q1, None])
            if guard:
                p = p.masked_fill(none[:, :, q0:q1, None], 0.0)
            dv[:, :, k0:k1] += p.transpose(-2, -1) @ grad_out[:, :, q0:q1]
            ds = p * (grad_out[:, :, q0:q1] @ v[:, :, k0:k1].transpose(-2, -1) - big_d[:, :, q0:q1, None])
            dq[:, :, q0:q1] += ds @ k[:, :, k0:k1] * factor
            dk[:, :, k0:k1] += ds.transpose(-2, -1) @ q[:, :, q0:q1] * factor
    return dq, dk, dv


def explicit_backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
    return learner_backward(q, k, v, out, lse, grad_out, max(q.size(2), k.size(2)), causal, mask)  # one huge tile


def autograd_backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    s = leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.size(-1))
    o = s.softmax(-1) @ leaves[2]
    return torch.autograd.grad(o, leaves, grad_out)


def test_backward_right_answer_passes(capsys):
    check_flash_backward(learner_backward)
    assert "✔ check_flash_backward passed" in capsys.readouterr().out


@pytest.mark.parametrize("fn, hint", [
    (lambda *a: learner_backward(*a, use_d=False), "dV is right but dQ and dK are not: .* D = rowsum\\(dO \\* O\\)"),
    (lambda *a: learner_backward(*a, scale=False), "dQ and dK are sqrt\\(d_k\\) times too large"),
    (lambda *a: learner_backward(*a, guard=False), "NaN for a query that sees no key: its lse is -inf"),
    (lambda *a: learner_backward(*a, offset=False), "with fewer queries than keys your recomputed P's causal rule "
                                                    "lines up at the top-left: .* i \\+ k_len - q_len"),
    (explicit_backward, "STORED P: at length 256 with block_size=32"),
    (autograd_backward, "WRITE IT YOURSELF: .* `autograd`"),
    (lambda *a: None, "did you forget a `return`"),
])
def test_backward_mistakes_named(fn, hint):
    with pytest.raises(Mistake, match=hint):
        check_flash_backward(fn)


def test_backward_the_packages_is_refused():
    from tfm_lesson.flash import _backward

    with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
        check_flash_backward(lambda q, k, v, o, l, g, b, c=False, m=None: _backward(g, q, k, v, o, l, m, c, b))


def backward_with_slip(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None, *, slip=""):
    """The chapter's backward written from its formulas, tile by tile, with one slip a learner makes (``slip``)."""
    d_k, q_len, k_len = q.size(-1), q.size(2), k.size(2)
    grad_q, grad_k = torch.zeros_like(q), torch.zeros_like(k)
    grad_v = torch.zeros_like(q if slip == "grad_v like q" else v)
    D = grad_out.sum(-1) if slip == "D = rowsum(dO)" else (grad_out * out).sum(-1)
    sees_none = lse == float("-inf")
    L = torch.where(sees_none, 0.0, lse)
    for q0 in range(0, q_len, block_size):
        q1 = min(q0 + block_size, q_len)
        for k0 in range(0, k_len, block_size):
            k1 = min(k0 + block_size, k_len)
            S = q[:, :, q0:q1] @ k[:, :, k0:k1].transpose(-2, -1) / math.sqrt(d_k)
            if causal and slip != "no causal in the recompute":
                q_pos = torch.arange(q0, q1)[:, None] + (0 if slip == "no offset" else k_len - q_len)
                S = S.masked_fill(torch.arange(k0, k1) > q_pos, float("-inf"))
            if mask is not None and slip != "no mask in the recompute":
                S = S.masked_fill(~mask[..., q0:q1, k0:k1], float("-inf"))
            P = torch.exp(S - L[:, :, q0:q1, None]).masked_fill(sees_none[:, :, q0:q1, None], 0.0)
            dO = grad_out[:, :, q0:q1]
            if slip == "dV = P dO":
                grad_v[:, :, k0:k1] += P @ dO  # P not transposed
            else:
                grad_v[:, :, k0:k1] += P.transpose(-2, -1) @ dO
            dS = P * (dO @ v[:, :, k0:k1].transpose(-2, -1) - D[:, :, q0:q1, None])
            grad_q[:, :, q0:q1] += dS @ k[:, :, k0:k1] / math.sqrt(d_k)
            if slip == "no 1/sqrt(d_k) in dK":
                grad_k[:, :, k0:k1] += dS.transpose(-2, -1) @ q[:, :, q0:q1]
            else:
                grad_k[:, :, k0:k1] += dS.transpose(-2, -1) @ q[:, :, q0:q1] / math.sqrt(d_k)
    return grad_q, grad_k, grad_v


@pytest.mark.parametrize("slip, hint", [
    ("no 1/sqrt(d_k) in dK", "dQ is right but dK is sqrt\\(d_k\\) times too large"),
    ("D = rowsum(dO)", "you took D = rowsum\\(dO\\), the row sums of grad_out alone"),
    ("no mask in the recompute", "your recomputed P ignores `mask`"),
    ("no causal in the recompute", "your recomputed P ignores the causal rule"),
    ("no offset", "lines up at the top-left: the queries are the sequence's LAST positions"),
    ("dV = P dO", "the shapes of a tile product do not fit \\(in `grad_v`\\): dV's tile is \\(block_k, d\\)"),
])
def test_backward_slips_written_from_the_formulas_named(slip, hint):
    with pytest.raises(Mistake, match=hint) as info:
        check_flash_backward(functools.partial(backward_with_slip, slip=slip))
    assert "differs from autograd" not in str(info.value)


def test_backward_without_slip_passes(capsys):
    check_flash_backward(functools.partial(backward_with_slip, slip=""))
    assert "✔ check_flash_backward passed" in capsys.readouterr().out


def test_backward_a_wrong_product_in_an_unnamed_variable_lists_every_tile_shape():
    def backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
        grads = list(backward_with_slip(q, k, v, out, lse, grad_out, block_size, causal, mask))
        p = torch.ones(q.size(2), k.size(2) - 1)
        return grads[0], grads[1], grads[2] + (p @ grad_out[0, 0])[:1]  # (q_len, k_len - 1) @ (q_len, d): no fit
    with pytest.raises(Mistake, match="the shapes of a tile product do not fit: dV's tile .*; dK's tile .*; dQ's"):
        check_flash_backward(backward)


def test_backward_grad_v_allocated_like_q_named():
    """zeros_like(q) for grad_v: with fewer queries than keys the last key tile does not fit (a RuntimeError)."""
    def backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
        return backward_with_slip(q, k, v, out, lse, grad_out, block_size, causal, mask, slip="grad_v like q")
    with pytest.raises(Mistake, match="in `grad_v`.*grad_v itself is shaped like v"):
        check_flash_backward(backward)


def test_backward_returning_dv_transposed_named():
    def backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
        dq, dk, dv = backward_with_slip(q, k, v, out, lse, grad_out, block_size, causal, mask)
        return dq, dk, dv.transpose(-2, -1)  # dV^T = dO^T P, kept as (d, k_len)
    with pytest.raises(Mistake, match="grad_v has shape .*: dV's tile is \\(block_k, d\\), one row per key"):
        check_flash_backward(backward)


# yours or the reference, downstream in the chapter --------------------------------------------------------------------
def test_yours_or_reference_keeps_a_passing_chapter_18_piece_and_replaces_a_failing_one(capsys):
    from tfm_lesson.checks import yours_or_reference

    assert yours_or_reference(learner_backward, "flash_backward", say=True) is learner_backward
    assert capsys.readouterr().out == "flash_backward: yours passes its check; the cells below use it\n"
    unscaled = functools.partial(learner_backward, scale=False)
    stand_in = yours_or_reference(unscaled, "flash_backward", say=True)
    assert capsys.readouterr().out == ("flash_backward: yours does not pass its check yet; the reference version "
                                       "stands in\n")  # one line: not the checker's message
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, block_size=3, causal=True)
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    want = torch.autograd.grad(out, leaves, grad_out)
    lse = attention_lse(q, k, block_size=3, causal=True)
    for got, w in zip(stand_in(q, k, v, out.detach(), lse, grad_out, 3, True, None), want):
        assert torch.allclose(got, w, atol=1e-10)

    assert yours_or_reference(learner_softmax, "online_softmax") is learner_softmax
    assert capsys.readouterr().out == ""  # silent unless say=True
    softmax = yours_or_reference(functools.partial(learner_softmax, rescale=False), "online_softmax")
    assert "online_softmax: yours does not pass" in capsys.readouterr().out
    x = torch.randn(3, 10, generator=g).masked_fill(torch.arange(10) < 4, float("-inf"))
    x[1] = float("-inf")
    assert torch.allclose(softmax(x, 3), torch.where(x.isinf().all(-1, keepdim=True), 0.0, x.softmax(-1)))

    tiled = yours_or_reference(lambda q, k, v, block_size, causal=False, mask=None: None, "tiled_attention")
    assert "tiled_attention: yours does not pass" in capsys.readouterr().out
    q, k, v = (torch.randn(2, 2, 9, 8, generator=g) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    assert torch.allclose(tiled(q, k, v, 4, causal=True), sdpa(q, k, v, is_causal=True),
                          atol=1e-6)
    assert yours_or_reference(lambda *a: None, "intensity")(1, 4096, 4096, 2) == pytest.approx(
        2 * 4096 * 4096 / ((4096 + 4096 * 4096 + 4096) * 2))


def _naive(q, k, v, *rest):
    return torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1) @ v


def _in_a_thread(*args):
    import threading

    box = []
    worker = threading.Thread(target=lambda: box.append(_naive(*args)))
    worker.start()
    worker.join()
    return box[0]


def test_side_doors_around_the_watch_are_refused_by_name():
    """A hostile class passed naive answers run in a thread, in NumPy, with PyTorch's modes off, or through
    torch.func.vjp: chapter 18's checkers refuse those names in the code (read by the grader from the code it
    extracted, so a kernel cannot answer for it)."""
    import numpy  # noqa: F401 - named by the answers below
    from tfm_lesson.checks import check_flash_backward, check_online_softmax, check_tiled_attention

    def in_numpy(x, block_size):
        import numpy as np

        a = x.numpy()
        e = np.exp(a - a.max(-1, keepdims=True))
        return torch.from_numpy(e / e.sum(-1, keepdims=True))

    def modes_off(q, k, v, block_size, causal=False, mask=None):
        from torch._C import DisableTorchFunction

        with DisableTorchFunction():
            return torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1) @ v

    def by_vjp(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
        f = lambda a, b, c: torch.softmax(a @ b.transpose(-2, -1) / a.size(-1) ** 0.5, -1) @ c  # noqa: E731
        return torch.func.vjp(f, q, k, v)[1](grad_out)

    for checker, answer in ((check_online_softmax, in_numpy), (check_tiled_attention, modes_off),
                            (check_tiled_attention, _in_a_thread), (check_flash_backward, by_vjp)):
        with pytest.raises(Mistake, match="WRITE IT YOURSELF"):
            checker(answer)
