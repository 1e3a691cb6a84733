"""Chapter 18's memory rule, enforced from outside the student's kernel when grading (tfm_lesson/course/probe.py,
tfm_lesson/checks/_probes.py): a naive softmax(Q K^T) V answer fails the tiled exercise even when its cell forges the
kernel's memory measurement, a buffer made at the cell's level counts, and honest answers keep their marks."""
from __future__ import annotations

import copy
import csv
from pathlib import Path

import nbformat
import pytest

from tfm_lesson import checks
from tfm_lesson.course import copy_chapter_answers, grading
from tfm_lesson.course.grading import exercises
from tfm_lesson.course.probe import probe_for, run_probe
from tfm_lesson.course.solution_form import strip_title

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "18_attention_that_fits.ipynb"

try:  # the probe runs in the sandbox the kernels run in; where bubblewrap cannot run, without it (still under its limit)
    from tfm_lesson.course.sandbox import SandboxUnavailable, check_sandbox

    check_sandbox()
    SANDBOX: bool | str = True
except SandboxUnavailable:
    SANDBOX = False

NAIVE_FORWARD = """\
def my_tiled_attention(query, key, value, block_size, causal=False, mask=None):
    q_len, k_len = query.size(2), key.size(2)
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        allowed = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + (k_len - q_len)
    if mask is not None:
        allowed = allowed & mask
    scores = (query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))).masked_fill(~allowed, float("-inf"))
    return torch.where(allowed.any(-1, keepdim=True), scores.softmax(-1), 0.0) @ value  # the whole matrix at once
"""

NAIVE_BACKWARD = """\
def my_flash_backward(q, k, v, out, lse, grad_out, block_size, causal=False, mask=None):
    q_len, k_len, d_k = q.size(2), k.size(2), q.size(3)
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        allowed = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + (k_len - q_len)
    if mask is not None:
        allowed = allowed & mask
    S = (q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~allowed, float("-inf"))
    sees_none = lse == float("-inf")
    P = torch.exp(S - torch.where(sees_none, 0.0, lse)[..., None]).masked_fill(sees_none[..., None], 0.0)  # stored
    dS = P * (grad_out @ v.transpose(-2, -1) - (grad_out * out).sum(-1)[..., None])
    return dS @ k / math.sqrt(d_k), dS.transpose(-2, -1) @ q / math.sqrt(d_k), P.transpose(-2, -1) @ grad_out
"""

# the kernel's memory measurement (learner_side(peak_tensor_bytes)) made to say 1 KiB, whatever the answer held
FORGE = """\
from tfm_lesson.checks import _replay
def _tiny_peak(self, fn, args, kwargs):
    if getattr(fn, "__name__", "") == "peak_tensor_bytes":
        return self._real_side(lambda *a, **k: 1024, args, kwargs)
    return self._real_side(fn, args, kwargs)
if not hasattr(_replay._Recorder, "_real_side"):  # patched once, however many cells say it
    _replay._Recorder._real_side = _replay._Recorder.side
    _replay._Recorder.side = _tiny_peak
"""

# the whole score matrix in a buffer made when the cell runs: peak_tensor_bytes counts only tensors made by the call
BUFFER = """\
_scores = torch.empty(4096 * 4096)
def my_tiled_attention(query, key, value, block_size, causal=False, mask=None):
    batch, heads, q_len, d_k = query.shape
    k_len = key.size(2)
    s = _scores[:batch * heads * q_len * k_len].view(batch, heads, q_len, k_len)
    torch.matmul(query, key.transpose(-2, -1), out=s)
    s.mul_(1 / math.sqrt(d_k))
    if causal:
        s.masked_fill_(torch.arange(k_len)[None, :] > torch.arange(q_len)[:, None] + (k_len - q_len), float("-inf"))
    if mask is not None:
        s.masked_fill_(~mask, float("-inf"))
    s.sub_(s.amax(-1, keepdim=True)).exp_().nan_to_num_(0.0)
    s.div_(s.sum(-1, keepdim=True)).nan_to_num_(0.0)
    return s @ value
"""

PRINTS = "\nprint(my_tiled_attention(*(torch.randn(1, 1, 8, 4) for _ in range(3)), 4).shape)  # a small test\n"


def _chapter():
    return nbformat.read(CHAPTER, as_version=4)


def _exercise(checker: str):
    return next(ex for ex in exercises(_chapter()) if ex.checker == checker)


def _with(nb, checker: str, source: str):
    out = copy.deepcopy(nb)
    out["cells"][_exercise(checker).answer_index]["source"] = source
    return out


def _solution(checker: str) -> str:
    return strip_title(_chapter()["cells"][_exercise(checker).solution_index]["source"])


def _grade(subs: Path, csv_path: Path) -> dict:
    grading.grade(CHAPTER, [subs], csv_path, timeout=120, jobs=2, sandbox=SANDBOX or "none", quiz=False)
    with open(csv_path, newline="") as f:
        return {(Path(r["submission"]).stem, int(r["exercise"].split()[1].rstrip(":"))): r
                for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Five submissions of chapter 18, graded once with the probe; the forged and the buffer ones once more with the
    probe switched off (the grader as it was before: the replay alone)."""
    tmp = tmp_path_factory.mktemp("ch18")
    right = copy_chapter_answers(_chapter())
    subs, alone = tmp / "subs", tmp / "replay_alone"
    subs.mkdir()
    alone.mkdir()
    forged = _with(_with(right, "check_tiled_attention", FORGE + NAIVE_FORWARD), "check_flash_backward",
                   FORGE + NAIVE_BACKWARD)
    buffer = _with(right, "check_tiled_attention", BUFFER)
    for name, nb in (("correct", right), ("naive", _with(right, "check_tiled_attention", NAIVE_FORWARD)),
                     ("forged", forged), ("buffer", buffer),
                     ("prints", _with(right, "check_tiled_attention", _solution("check_tiled_attention") + PRINTS))):
        nbformat.write(nbformat.from_dict(nb), subs / f"{name}.ipynb")
    for name, nb in (("forged", forged), ("buffer", buffer)):
        nbformat.write(nbformat.from_dict(nb), alone / f"{name}.ipynb")
    with_probe = _grade(subs, tmp / "grades.csv")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grading, "run_probe", lambda *args, **kwargs: None)
        without = _grade(alone, tmp / "alone.csv")
    return with_probe, without


TILED, BACKWARD = (_exercise(c).number for c in ("check_tiled_attention", "check_flash_backward"))


@pytest.mark.slow
def test_the_solutions_and_an_honest_answer_that_prints_keep_full_marks(graded):
    table, _ = graded
    for number in range(1, 5):
        assert table[("correct", number)]["passed"] == "True", table[("correct", number)]["message"]
    assert table[("prints", TILED)]["passed"] == "True", table[("prints", TILED)]["message"]


@pytest.mark.slow
def test_a_naive_forward_fails_not_tiled(graded):
    row = graded[0][("naive", TILED)]
    assert row["passed"] == "False" and row["message"].startswith("NOT TILED"), row["message"]
    # the kernel's own measurement said so (believed: the learner's kernel may fail an answer), so no probe was needed
    assert "at length 256" in row["message"], row["message"]


@pytest.mark.slow
def test_forging_the_kernels_measurement_passed_by_replay_alone_and_fails_now(graded):
    table, without = graded
    for number in (TILED, BACKWARD):  # before the probe: the forged peak made the naive answers pass
        assert without[("forged", number)]["passed"] == "True", without[("forged", number)]["message"]
    row = table[("forged", TILED)]
    assert row["passed"] == "False" and float(row["points"]) == 0, row
    assert row["message"].startswith("NOT TILED: under a memory budget of 16 MiB, a quarter of one (4096, 4096)")
    assert "ran out of memory" in row["message"], row["message"]
    row = table[("forged", BACKWARD)]
    assert row["passed"] == "False" and row["message"].startswith("STORED P: under a memory budget of 32 MiB"), row
    assert table[("forged", 1)]["passed"] == table[("forged", 3)]["passed"] == "True"  # the others are untouched


@pytest.mark.slow
def test_a_buffer_made_at_the_cells_level_counts(graded):
    table, without = graded
    assert without[("buffer", TILED)]["passed"] == "True"  # the kernel's measurement does not see the buffer
    row = table[("buffer", TILED)]
    assert row["passed"] == "False" and "ran out of memory" in row["message"], row["message"]


# the probe alone, without a kernel ------------------------------------------------------------------------------------
def _prelude(checker: str) -> list[str]:
    """The chapter's code the grading plan runs before the exercise's answer (earlier exercises: the solutions)."""
    chapter = _chapter()
    exs = exercises(chapter)
    found = {ex.number: [_solution(ex.checker)] for ex in exs}
    checking = grading.Checking.of(chapter, exs, 7)
    plan = grading._plan(chapter, exs, found, Path("/nonexistent"), checking, "token")
    target = _exercise(checker)
    answer = next(i for i, step in enumerate(plan) if step.kind == "answer" and step.exercise.number == target.number)
    return [step.source for step in plan[:answer] if step.kind == "chapter"]


def _probe(checker: str, answer: str, tmp_path: Path):
    ex = _exercise(checker)
    return run_probe(ex, _prelude(checker), [answer], getattr(checks, checker), workdir=tmp_path, sandbox=SANDBOX,
                     timeout=120, salt=7)


@pytest.mark.parametrize("checker, answer, words", [
    ("check_tiled_attention", NAIVE_FORWARD, "NOT TILED: under a memory budget of 16 MiB, a quarter of one (4096, "
                                             "4096) float32 score matrix"),
    ("check_flash_backward", NAIVE_BACKWARD, "STORED P: under a memory budget of 32 MiB, a quarter of one (4096, "
                                             "4096) float64 probability matrix")])
def test_the_probe_alone_finds_a_naive_answer_out_of_memory(checker, answer, words, tmp_path):
    found = _probe(checker, answer, tmp_path)
    assert found is not None and found[0].startswith(words) and "ran out of memory" in found[0], found
    assert "MiB did not fit" in found[0] and found[1] == 0.0, found
    assert _probe(checker, _solution(checker), tmp_path) is None


def _escape(attempt: str) -> str:
    """A tiled answer that first tries ``attempt`` (a way out of the probe's limit) and says when it is refused."""
    return ("import os, resource, subprocess, sys\n" + _solution("check_tiled_attention") +
            "\n_honest = my_tiled_attention\n"
            "def my_tiled_attention(*args):\n"
            "    try:\n"
            f"        {attempt}\n"
            "    except (OSError, ValueError) as exc:\n"
            "        raise RuntimeError(f'refused: {exc}')\n"
            "    return _honest(*args)\n")


@pytest.mark.parametrize("attempt", [
    "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))",
    "os.execv(sys.executable, [sys.executable, '-c', 'pass'])",  # a fresh, small program: more room, same bytes
    "subprocess.run([sys.executable, '-c', 'import torch; torch.empty(4096, 4096)'], check=True)",
    "os.fork() or os._exit(0)"])
def test_the_limit_cannot_be_raised_nor_left_by_a_new_program_or_process(attempt, tmp_path):
    found = _probe("check_tiled_attention", _escape(attempt), tmp_path)
    assert found is not None and "raised RuntimeError: refused" in found[0], found


def test_a_wrong_output_within_the_budget_fails_with_the_difference(tmp_path):
    wrong = _solution("check_tiled_attention") + "\n_right = my_tiled_attention\n" \
        "my_tiled_attention = lambda *args: _right(*args) * 1.01\n"
    found = _probe("check_tiled_attention", wrong, tmp_path)
    assert found is not None and "differs from the package's tiled code" in found[0], found


def test_only_the_packages_checkers_have_a_probe():
    ex = _exercise("check_tiled_attention")
    assert probe_for(ex, checks.check_tiled_attention) is not None
    assert probe_for(ex, lambda fn: None) is None  # a chapter's own checker of that name: no probe
    assert probe_for(_exercise("check_online_softmax"), checks.check_online_softmax) is None


def test_a_checker_with_named_checks_keeps_the_credit_of_those_before_the_probes():
    import dataclasses

    from tfm_lesson.checks._probes import PROBES
    from tfm_lesson.course.probe import _credit

    def checker(fn):
        pass

    checker.checks = {"values": 2, "memory": 1, "masks": 1}
    probe = dataclasses.replace(PROBES["check_tiled_attention"], part="memory")
    assert _credit(checker, probe) == 0.5  # "values" passed: 2 of 4
    assert _credit(checker, PROBES["check_tiled_attention"]) == 0.0  # no part named: all or nothing
    assert _credit(lambda fn: None, probe) == 0.0  # no named checks
