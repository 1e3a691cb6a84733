"""Verdicts computed outside the learner's code (tfm_lesson/checks/_replay.py, _wire.py, _replay_state.py, and the
grader's side, tfm_lesson/course/verdicts.py): values on the wire, records that are forged or broken, the source
rules read from text, and (slow) every checker test of the suite run through record and replay."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tfm_lesson import checks
from tfm_lesson.checks import _replay
from tfm_lesson.checks._replay_state import snapshot_globals
from tfm_lesson.checks._rules_static import CELL_SEPARATOR
from tfm_lesson.checks._wire import WireError, decode, encode

ROOT = Path(__file__).resolve().parent.parent


def _no(obj):
    raise WireError("not data")


@pytest.mark.parametrize("value", [
    None, True, 3, -2 ** 60, 1.5, float("inf"), "text", (1, [2.0, "x"]), {"a": 1, 2: None},
    torch.Size([2, 3]), torch.float16, torch.device("cpu"),
])
def test_plain_values_travel_unchanged(value):
    assert decode(json.loads(json.dumps(encode(value, _no))), _no) == value


def test_tensors_travel_with_dtype_shape_bytes_and_gradient():
    for t in (torch.randn(2, 3), torch.tensor(1.5, dtype=torch.float64), torch.ones(0, 4),
              torch.tensor([True, False]), torch.arange(6, dtype=torch.int64).view(2, 3).t()):
        back = decode(json.loads(json.dumps(encode(t, _no))), _no)
        assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t)
    p = nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    back = decode(json.loads(json.dumps(encode(p, _no))), _no)
    assert isinstance(back, nn.Parameter) and torch.equal(back.grad, torch.ones(3))
    nan = decode(encode(torch.tensor([math.nan]), _no), _no)
    assert torch.isnan(nan).all()


@pytest.mark.parametrize("data, why", [
    ({"T": {"dtype": "float32", "shape": [4], "data": "AAAA"}}, "do not fill its shape"),
    ({"T": {"dtype": "object", "shape": [1], "data": ""}}, "dtype or shape"),
    ({"ref": "os:system"}, "not a name"),
    ({"ref": "builtins:exec"}, "not a name"),
    ({"ref": "torch:load"}, "not a name"),
    ({"ref": "tfm_lesson.course.grading:grade"}, "not a name"),
    ({"pickle": "gASV"}, "not"),
    ([1, 2], "not a value"),
])
def test_what_is_not_a_value_is_refused(data, why):
    with pytest.raises((WireError, ValueError, AttributeError, ModuleNotFoundError), match=why):
        decode(data, _no)


def _square(x):
    return x * x


def _record(checker, answers, tmp_path, **kwargs):
    path = tmp_path / "trace.json"
    _replay.record(checker, answers, kwargs, str(path))
    return json.loads(path.read_text())


def test_a_right_answer_replays_to_a_pass_and_a_wrong_one_to_its_named_mistake(tmp_path):
    def pairwise_scores(q, k):
        return q @ k.transpose(-2, -1)

    def transposed(q, k):
        return k @ q.transpose(-2, -1)

    ok, message = _replay.replay(checks.check_pairwise_scores,
                                 _record(checks.check_pairwise_scores, [pairwise_scores], tmp_path), {})
    assert ok and "check_pairwise_scores passed" in message
    ok, message = _replay.replay(checks.check_pairwise_scores,
                                 _record(checks.check_pairwise_scores, [transposed], tmp_path), {})
    with pytest.raises(checks.Mistake) as direct:
        checks.check_pairwise_scores(transposed)
    assert not ok and message == str(direct.value)


def test_forged_or_broken_records_fail_with_the_reason_and_never_crash(tmp_path):
    def pairwise_scores(q, k):
        return q @ k.transpose(-2, -1)

    good = _record(checks.check_pairwise_scores, [pairwise_scores], tmp_path)
    empty = dict(good, entries=[])
    other = dict(good, checker="check_row_softmax")
    truncated = dict(good, entries=good["entries"][:1])
    swapped = dict(good, entries=[dict(e, out={"T": dict(e["out"]["T"], data="")}) if "out" in e and
                                  isinstance(e["out"], dict) and "T" in e["out"] else e for e in good["entries"]])
    padded = dict(good, entries=good["entries"] + [{"op": "call", "h": 0, "in": "x"}])
    for forged, why in ((empty, "more"), (other, "not this check's"), (truncated, "more"),
                        (swapped, "could not replay"), (padded, "ended after"), ("nonsense", "not this check's"),
                        (dict(good, version=2), "not this check's")):
        ok, message = _replay.replay(checks.check_pairwise_scores, forged, {})
        assert not ok and why in message, (why, message)


def test_the_replay_leaves_the_graders_random_state_as_it_was(tmp_path):
    def pairwise_scores(q, k):
        torch.randn(3)  # the learner's code draws too
        return q @ k.transpose(-2, -1)

    trace = _record(checks.check_pairwise_scores, [pairwise_scores], tmp_path)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    assert _replay.replay(checks.check_pairwise_scores, trace, {})[0]
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.get_default_dtype() == dtype and torch.get_num_threads() == threads


def test_an_answer_that_changes_its_input_in_place_is_named_after_the_replay(tmp_path):
    def scaled_in_place(q, k):
        q.mul_(1.0)
        q[..., 0] += 1  # the caller's tensor, changed
        return q @ k.transpose(-2, -1)

    ok, message = _replay.replay(checks.check_pairwise_scores,
                                 _record(checks.check_pairwise_scores, [scaled_in_place], tmp_path), {})
    assert not ok and "in place" in message


def test_source_rules_read_the_extracted_code_not_the_kernel(tmp_path):
    from tfm_lesson.flash import flash_attention

    def my_tiled_attention(q, k, v, block_size, causal=False, mask=None):
        return flash_attention(q, k, v, mask, block_size, causal)

    trace = _record(checks.check_tiled_attention, [my_tiled_attention], tmp_path)
    code = CELL_SEPARATOR.join(["from tfm_lesson.flash import flash_attention as fa",
                                "def my_tiled_attention(q, k, v, block_size, causal=False, mask=None):\n"
                                "    return fa(q, k, v, mask, block_size, causal)"])
    ok, message = _replay.replay(checks.check_tiled_attention, trace, {}, code, ["my_tiled_attention"])
    assert not ok and "WRITE IT YOURSELF" in message and "flash_attention" in message


def test_a_record_that_is_a_link_a_pipe_or_too_big_is_not_read(tmp_path, monkeypatch):
    from tfm_lesson.course import verdicts

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"version": 1}))
    link = tmp_path / "trace.json"
    link.symlink_to(secret)
    with pytest.raises(ValueError, match="not a regular file"):
        verdicts.read_trace(link)
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)  # a named pipe would block a reader for ever
    with pytest.raises(ValueError, match="not a regular file"):
        verdicts.read_trace(pipe)
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 100 + "0]")
    monkeypatch.setattr(verdicts, "TRACE_LIMIT", 50)
    with pytest.raises(ValueError, match="over"):
        verdicts.read_trace(big)
    assert verdicts.read_trace(tmp_path / "missing.json") is None


def test_the_start_state_is_data():
    start = snapshot_globals()
    assert json.loads(json.dumps(start)) == start


@pytest.mark.slow
def test_every_checker_test_gives_the_same_verdict_when_replayed():
    """All of tests/test_checks_*.py and test_common_mistakes.py, each checker call recorded and replayed
    (tests/replay_roundtrip.py): every right answer passes and every wrong one gets its named message."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_checks_*.py"))
    out = subprocess.run([sys.executable, "-m", "pytest", *files, "tests/test_common_mistakes.py", "-q",
                          "-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow and not notebook_only"],
                         cwd=ROOT, env={**os.environ, "TFM_CHECKS_VIA_REPLAY": "1"}, capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_graders_salt_gives_inputs_no_answer_could_learn(tmp_path):
    """An answer that learnt by heart the outputs for the notebook's inputs passes in the notebook and fails when
    the grader salts the checker's seeds (tfm_lesson/checks/_salt.py); a record made under another salt is refused."""
    from tfm_lesson.checks._salt import mix, salted

    learnt: dict = {}

    def learning(q, k):
        out = q @ k.transpose(-2, -1)
        learnt[(tuple(q.shape), q.dtype)] = out
        return out

    checks.check_pairwise_scores(learning)  # the notebook's inputs, their outputs kept

    def by_heart(q, k):
        return learnt[(tuple(q.shape), q.dtype)].clone()

    checks.check_pairwise_scores(by_heart)  # in the notebook it passes
    ok, _ = _replay.replay(checks.check_pairwise_scores,
                           _record(checks.check_pairwise_scores, [by_heart], tmp_path, ), {}, salt=None)
    assert ok
    path = tmp_path / "salted.json"
    _replay.record(checks.check_pairwise_scores, [by_heart], {}, str(path), salt=2024)
    ok, message = _replay.replay(checks.check_pairwise_scores, json.loads(path.read_text()), {}, salt=2024)
    assert not ok, message
    ok, message = _replay.replay(checks.check_pairwise_scores, json.loads(path.read_text()), {}, salt=2025)
    assert not ok and "could not replay" in message
    assert mix(0, 1) == mix(0, 1) != mix(0, 2) and mix(0, 1) >= 0
    with salted(5):
        a = torch.Generator().manual_seed(3)
        b = torch.Generator().manual_seed(3)
        assert torch.equal(torch.randn(4, generator=a), torch.randn(4, generator=b))  # same seed, same draws


def test_a_linked_submission_is_refused_and_a_deep_scratch_folder_is_removed(tmp_path):
    """Red-team findings: a submission that is a link to the chapter scored full marks, and 3000 nested folders
    left in the scratch folder crashed the whole class (``shutil.rmtree`` recursing too deep)."""
    from tfm_lesson.course import grading
    from tfm_lesson.course.cells import CourseError
    from tfm_lesson.course.submission import read_submission

    link = tmp_path / "mine.ipynb"
    link.symlink_to(ROOT / "notebooks" / "03_multi_head_attention.ipynb")
    with pytest.raises(CourseError, match="symbolic link"):
        read_submission(link)
    deep = tmp_path / "work"
    fd = os.open(tmp_path, os.O_RDONLY)
    os.mkdir("work", dir_fd=fd)
    for _ in range(3000):
        inner = os.open("work" if _ == 0 else "d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        os.mkdir("d", dir_fd=inner)
        fd = inner
    os.close(fd)
    grading._remove(str(deep))
    assert not deep.exists()


def _forge_learner_side(monkeypatch, answer):
    """The kernel's recorder patched (as student code could patch it) so that every ``learner_side`` result it
    records is ``answer``, whatever the checker's own code would have computed there."""
    real = _replay._Recorder.side
    monkeypatch.setattr(_replay._Recorder, "side",
                        lambda self, fn, args, kwargs: real(self, lambda *a, **k: answer, args, kwargs))


def test_a_forged_learner_side_does_not_tie_an_untied_generator(tmp_path, monkeypatch):
    """Weight tying is read from the record's identities among the checker's own modules, in the grader: facts that
    the kernel claims (same Parameter, one gradient) are not asked of it."""
    def tie_weights(embedding, generator):
        pass  # nothing tied

    _forge_learner_side(monkeypatch, {"touched": True, "returned": True, "same": True, "shape": [11, 8],
                                      "storage": True, "close": True, "counted": 88, "gradient": True})
    ok, message = _replay.replay(checks.check_tie_weights, _record(checks.check_tie_weights, [tie_weights], tmp_path),
                                 {})
    assert not ok and "not written yet" in message, message


_NAIVE_SOFTMAX = {
    "two passes": "def my_online_softmax(x, block_size):\n"
                  "    m = x.max(dim=-1, keepdim=True).values\n"
                  "    e = (x - torch.where(m == float('-inf'), 0.0, m)).exp()\n"
                  "    d = e.sum(dim=-1, keepdim=True)\n"
                  "    return torch.where(d > 0, e / d, 0.0)\n",
    "an alias": "def my_online_softmax(x, block_size):\n"
                "    y = x * 1.0\n"
                "    m = torch.where(torch.amax(y, -1, keepdim=True) == float('-inf'), 0.0, torch.amax(y, -1, True))\n"
                "    d = torch.sum((y - m).exp(), dim=-1, keepdim=True)\n"
                "    return torch.where(d > 0, (y - m).exp() / d, 0.0)\n",
    "a helper": "def stats(t):\n"
                "    m = t.float().amax(-1, keepdim=True)\n"
                "    m = torch.where(m == float('-inf'), 0.0, m)\n"
                "    return m, (t - m).exp().sum(-1, keepdim=True)\n" + CELL_SEPARATOR +
                "def my_online_softmax(x, block_size):\n"
                "    m, d = stats(x)\n"
                "    return torch.where(d > 0, (x - m).exp() / d, 0.0).to(x.dtype)\n",
}
_BLOCKED_SOFTMAX = {
    "chapter 18's solution": "def my_online_softmax(x, block_size):\n"
        "    m = torch.full(x.shape[:-1], float('-inf'))\n"
        "    d = torch.zeros(x.shape[:-1])\n"
        "    for start in range(0, x.size(-1), block_size):\n"
        "        block = x[..., start:start + block_size]\n"
        "        m_new = torch.maximum(m, block.amax(dim=-1))\n"
        "        shift = torch.where(m_new == float('-inf'), 0.0, m_new)\n"
        "        d = d * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)\n"
        "        m = m_new\n"
        "    shift = torch.where(m == float('-inf'), 0.0, m)\n"
        "    return torch.where(d[..., None] > 0, torch.exp(x - shift[..., None]) / d[..., None], 0.0)\n",
    "split and a helper": "def step(block, m, d):\n"
        "    m_new = torch.max(m, torch.max(block, dim=-1).values)\n"
        "    shift = torch.where(m_new == float('-inf'), 0.0, m_new)\n"
        "    return m_new, d * (m - shift).exp() + (block - shift[..., None]).exp().sum(-1)\n" + CELL_SEPARATOR +
        "def my_online_softmax(x, block_size):\n"
        "    m = torch.full(x.shape[:-1], float('-inf'), dtype=x.dtype)\n"
        "    d = torch.zeros_like(m)\n"
        "    for block in x.split(block_size, -1):\n"
        "        m, d = step(block, m, d)\n"
        "    shift = torch.where(m == float('-inf'), 0.0, m)[..., None]\n"
        "    return torch.where(d[..., None] > 0, (x - shift).exp() / d[..., None], 0.0)\n",
}


@pytest.mark.parametrize("style", [*_NAIVE_SOFTMAX, *_BLOCKED_SOFTMAX])
def test_a_forged_learner_side_does_not_block_a_whole_row_softmax(style, tmp_path, monkeypatch):
    """The online softmax's "no reduction spans a whole row" is read from the extracted code in the grader: a
    kernel whose watch reports a narrow reduction does not pass a whole-row softmax (through a helper of the same
    answer too), and blocked code passes."""
    code = "import torch\n" + CELL_SEPARATOR + {**_NAIVE_SOFTMAX, **_BLOCKED_SOFTMAX}[style]
    namespace: dict = {}
    for cell in code.split(CELL_SEPARATOR):
        exec(compile(cell, f"<cell {style}>", "exec"), namespace)
    _forge_learner_side(monkeypatch, 3)
    trace = _record(checks.check_online_softmax, [namespace["my_online_softmax"]], tmp_path)
    ok, message = _replay.replay(checks.check_online_softmax, trace, {}, code, ["my_online_softmax"])
    if style in _NAIVE_SOFTMAX:
        assert not ok and message.startswith("NOT BLOCKED: your function computes `") and "line" in message, message
    else:
        assert ok, message


def test_identity_among_the_checkers_modules_travels_as_data(tmp_path):
    """The record says which known tensor each slot of the checker's modules holds, or whose storage it shares; the
    replay makes the grader's own modules alias and share alike."""
    def tie_weights(embedding, generator):
        generator.weight = embedding.weight

    def on_the_same_storage(embedding, generator):
        generator.weight.data = embedding.weight.data

    def handed_back_transposed(embedding, generator):
        generator.weight = nn.Parameter(embedding.weight.t())

    states = {}
    for answer in (tie_weights, on_the_same_storage, handed_back_transposed):
        trace = _record(checks.check_tie_weights, [answer], tmp_path)
        call = next(e for e in trace["entries"] if e["op"] == "call")
        states[answer.__name__] = {i: s["ties"] for i, s in call["state"]}
    assert states["tie_weights"] == {1: [["weight", 0, None, True]]}  # the generator holds the embedding's weight
    assert states["on_the_same_storage"] == {1: [["weight", 1, [0, [11, 8], [8, 1], 0], True]]}
    assert states["handed_back_transposed"] == {1: [["weight", None, [0, [8, 11], [1, 8], 0], True]]}
    trace = _record(checks.check_tie_weights, [tie_weights], tmp_path)
    call = next(e for e in trace["entries"] if e["op"] == "call")
    for forged, why in (([["weight", 7, None, True]], "never handed over"),
                        ([["weight", None, [0, [99, 8], [8, 1], 0], True]], "does not fit"),
                        ([["weight", 0, None]], "must be")):
        call["state"] = [[1, dict(call["state"][0][1], ties=forged)]]
        ok, message = _replay.replay(checks.check_tie_weights, trace, {})
        assert not ok and why in message, (why, message)
