"""Named checks with weights (tfm_lesson/checks/_parts.py): the credit of a checker that gets part of the way, in a
notebook and where the grader replays it."""
from __future__ import annotations

import inspect
import json

import pytest
import torch

from tfm_lesson.checks import Mistake, heads, make_checker, named_checks, part, parts
from tfm_lesson.checks import _replay
from tfm_lesson.checks._parts import scored

# the checkers themselves (TFM_CHECKS_VIA_REPLAY=1 puts a record-and-replay wrapper in front of them)
check_split_heads, check_merge_heads = (inspect.unwrap(c) for c in (heads.check_split_heads, heads.check_merge_heads))


@named_checks({"shape": 1, "values": 2, "masked positions": 1})
def check_toy(answer: int) -> None:
    with parts(check_toy):
        if answer < 1:
            raise Mistake("wrong shape")
        part("values")
        if answer < 2:
            raise Mistake("wrong values")
        part("masked positions")
        if answer < 3:
            raise Mistake("masked positions differ")


@pytest.mark.parametrize("answer, fraction, summary", [
    (0, 0.0, "0 of 3 checks passed; failed: shape"),
    (1, 0.25, "1 of 3 checks passed: shape; failed: values"),
    (2, 0.75, "2 of 3 checks passed: shape, values; failed: masked positions"),
])
def test_the_credit_is_the_weight_of_the_checks_before_the_failing_one(answer, fraction, summary):
    error, tally = scored(check_toy, answer)
    assert isinstance(error, Mistake) and tally.fraction == fraction and tally.summary() == summary
    assert summary in "\n".join(error._render_traceback_())  # the notebook shows it under the message
    assert str(error) in ("wrong shape", "wrong values", "masked positions differ")  # the message stays as it was


def test_a_passing_checker_and_one_without_named_checks():
    error, tally = scored(check_toy, 3)
    assert error is None and tally.fraction == 1.0 and tally.failed is None

    def check_plain(x):
        raise Mistake("no")

    error, tally = scored(check_plain, 0)
    assert isinstance(error, Mistake) and tally is None


def test_checks_run_in_the_order_they_are_named():
    def check_backwards(_):
        with parts({"a": 1, "b": 1}):
            part("b")
            part("a")

    error, _ = scored(check_backwards, 0)
    assert isinstance(error, ValueError) and "in the order they are named" in str(error)
    with pytest.raises(ValueError, match="weight"):
        named_checks({"a": 0})
    with pytest.raises(RuntimeError, match="outside"):
        part("a")


def test_a_checker_inside_another_keeps_the_outer_ones_credit():
    def check_outer(answer):
        with parts({"first": 1, "inner": 1}):
            part("inner")
            check_toy(answer)

    _, tally = scored(check_outer, 1)
    assert tally.names == ("first", "inner") and tally.fraction == 0.5


def _split_no_dtype(x, heads):
    b, n, d = x.shape
    return x.view(b, n, heads, d // heads).transpose(1, 2).float()  # float32 for a float64 input


def _split_no_transpose(x, heads):
    b, n, d = x.shape
    return x.reshape(b, heads, n, d // heads)


def test_split_heads_named_checks():
    assert check_split_heads.checks == {"shape": 1, "dtype": 1, "values": 2}
    assert scored(check_split_heads, _split_no_dtype)[1].fraction == 0.25
    assert scored(check_split_heads, _split_no_transpose)[1].fraction == 0.5
    error, tally = scored(check_merge_heads, lambda x: x.transpose(1, 2).reshape(x.size(0), x.size(2), -1))
    assert error is None and tally.fraction == 1.0


def test_the_grader_computes_the_credit_when_it_replays(tmp_path):
    """The record only carries the answer's outputs: the tally is the replayed checker's, in the grader."""
    path = str(tmp_path / "trace.json")
    _replay.record(check_split_heads, [_split_no_transpose], {}, path)
    trace = json.loads(open(path).read())
    passed, message, fraction, tally = _replay.replay_scored(check_split_heads, trace, {})
    assert not passed and fraction == 0.5 and tally.failed == "values" and "without the transpose" in message
    trace["record"] = "passed"  # what the kernel says of its own run changes nothing
    assert _replay.replay_scored(check_split_heads, trace, {})[2] == 0.5
    trace["entries"] = trace["entries"][:1]  # a record cut short does not replay: 0
    assert _replay.replay_scored(check_split_heads, trace, {})[2] == 0.0


def test_make_checker_weights_each_case():
    check_double = make_checker("double", inputs=lambda g: [(torch.tensor([1.0]),), (torch.tensor([-2.0]),),
                                                            (torch.tensor([0.5, 3.0]),)],
                                reference=lambda x: 2 * x, weights=[1, 1, 2])
    assert check_double.checks == {"case 1": 1, "case 2": 1, "case 3": 2}
    error, tally = scored(check_double, lambda x: 2 * x.abs())
    assert isinstance(error, Mistake) and tally.fraction == 0.25 and tally.failed == "case 2"
    assert "case 2 of 3" in str(error)
    plain = make_checker("double", inputs=lambda g: [(torch.tensor([1.0]),)], reference=lambda x: 2 * x)
    assert not hasattr(plain, "checks") and scored(plain, lambda x: x)[1] is None
    wrong = make_checker("double", inputs=lambda g: [(torch.tensor([1.0]),)], reference=lambda x: 2 * x,
                         weights=[1, 1])
    assert "one weight per case" in str(scored(wrong, lambda x: 2 * x)[0])


def test_a_finalizer_during_the_replay_cannot_break_its_source_rules(tmp_path):
    """A finalizer that parses source (asyncio's "Task exception was never retrieved" formats a traceback, left by a
    kernel the grader restarted) run by the garbage collector inside the source rules' own ast.parse broke CPython
    3.11's AST conversion ("SystemError: AST constructor recursion depth mismatch"): no collection while replaying."""
    import ast
    import gc

    from tfm_lesson.checks import check_multi_head_attention as _mha
    from tfm_lesson.checks._rules_static import CELL_SEPARATOR

    direct = inspect.unwrap(_mha)
    source = "import torch\nfrom torch import nn\n" + "\n".join(f"x{i} = [{i}, ({i}, {i})]" for i in range(300)) + \
        "\nclass Mine(nn.Module):\n    pass\n"

    running = [True]

    class Parses:
        """Garbage in a cycle whose finalizer parses source and leaves the same garbage again: there is one for
        every collection, as long as ``running``."""

        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            if running[0]:
                ast.parse("a = (1, [2, {3: (4, 5)}])\n" * 20)
                Parses()

    def replay_with_garbage():
        path = str(tmp_path / "t.json")
        _replay.record(direct, [torch.nn.Module], {}, path)
        trace = json.loads(open(path).read())
        before = gc.get_threshold()
        running[0] = True
        gc.set_threshold(50)
        try:
            Parses()
            return _replay.replay_scored(direct, trace, {}, CELL_SEPARATOR.join([source]), ["Mine"])
        finally:
            running[0] = False
            gc.set_threshold(*before)
            gc.collect()

    passed, message, *_ = replay_with_garbage()  # (on Python 3.11.7 without no_collection: that SystemError)
    assert not passed and "SystemError" not in message and "Module(16, 4)" in message, message
