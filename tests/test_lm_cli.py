"""The language-model command lines: ``python -m tfm_lesson.train --task lm`` / ``--text FILE`` and
``python -m tfm_lesson.generate CHECKPOINT "prompt"`` (short runs), and their usage errors (exit 2, no
traceback)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from conftest import call_main as call  # in this process (fast; the subprocess tests check the real thing)

TINY = ["--d-model", "32", "--heads", "4", "--num-layers", "1", "--d-ff", "64", "--batch-size", "8", "--max-len", "32",
        "--no-progress", "--threads", "1"]
TEXT = "".join(f"the {a} {b} sat on the {c}.\n" for a in ("small", "big", "red") for b in ("cat", "dog", "hen")
               for c in ("mat", "log", "hat", "rug")) * 5


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, cwd=cwd or ROOT,
                          env=env)


@pytest.fixture(scope="module")
def own_text_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_cli")
    (root / "mine.txt").write_text(TEXT, encoding="utf-8")
    proc = run("tfm_lesson.train", "--text", str(root / "mine.txt"), "--steps", "60", "--vocab-size", "300",
               "--out", str(root / "out"), *TINY)
    return root, proc


@pytest.mark.slow  # starts a training subprocess
def test_train_on_your_own_text(own_text_run):
    root, proc = own_text_run
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["task"] == "lm" and result["corpus"] == "mine.txt" and result["steps"] == 60
    assert result["vocab_size"] <= 300
    assert result["valid_perplexity"] < result["unigram_perplexity"]
    assert (root / "out" / "lm.pt").is_file() and result["checkpoint"].endswith("lm.pt")
    assert "sample after training" in proc.stdout


@pytest.mark.slow  # starts a training subprocess
def test_generate_continues_the_prompt(own_text_run):
    root, _ = own_text_run
    args = ("tfm_lesson.generate", str(root / "out" / "lm.pt"), "the small", "--max-new-tokens", "12")
    proc = run(*args, "--temperature", "0.8", "--top-k", "5", "--top-p", "0.9", "--samples", "2")
    assert proc.returncode == 0, proc.stderr
    samples = proc.stdout.split("-" * 40 + "\n")
    assert len(samples) == 2 and all(s.startswith("the small") for s in samples)
    greedy = run(*args, "--temperature", "0")
    assert greedy.returncode == 0 and greedy.stdout == run(*args, "--temperature", "0", "--no-cache").stdout


@pytest.mark.slow  # its fixture starts a training subprocess
@pytest.mark.parametrize("flags, words", [
    (["--top-p", "0"], "--top-p must be in (0, 1]"), (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    (["--top-k", "0"], "--top-k must be >= 1"), (["--temperature", "-1"], "--temperature must be"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["--max-new-tokens", "500"], "more than the model's context of max_len=32"),
    (["--samples", "0"], "--samples must be >= 1")])
def test_generate_usage_errors(own_text_run, flags, words, capsys):
    from tfm_lesson.train.generate import main

    root, _ = own_text_run
    code, _, err = call(main, [str(root / "out" / "lm.pt"), "the", *flags], capsys)
    assert code == 2 and words in err, err


def test_generate_rejects_a_missing_or_foreign_checkpoint(tmp_path):
    proc = run("tfm_lesson.generate", str(tmp_path / "missing.pt"), "hi")
    assert proc.returncode == 2 and "no checkpoint" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "junk.pt").write_text("junk")
    proc = run("tfm_lesson.generate", str(tmp_path / "junk.pt"), "hi")
    assert proc.returncode == 2 and "not a tfm_lesson language-model checkpoint" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flags, words", [
    (["--vocab-size", "100"], "--vocab-size must be at least 256"), (["--max-len", "1"], "--max-len must be >= 2"),
    (["--heads", "3"], "divisible by --heads"), (["--steps", "0"], "--steps must be >= 1"),
    (["--device", "nonsense"], "--device"), (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--resume", "x.pt"], "--resume: no checkpoint at"), (["--smoothing", "0.2"], "--smoothing: only for translation"),
    (["--beam", "2"], "--beam: only for translation"), (["--tokenizer", "chars"], "--tokenizer: only for translation"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--eval-every", "-1"], "--eval-every must be >= 1"), (["--peak-lr", "nan"], "--peak-lr must be a finite")])
def test_train_lm_usage_errors(tmp_path, flags, words, capsys):
    from tfm_lesson.train.cli import main

    (tmp_path / "t.txt").write_text(TEXT)
    code, _, err = call(main, ["--text", str(tmp_path / "t.txt"), *TINY, *flags, "--out", str(tmp_path)], capsys)
    assert code == 2 and words in err, err


def test_train_text_errors(tmp_path, capsys):
    from tfm_lesson.train.cli import main

    proc = run("tfm_lesson.train", "--text", str(tmp_path / "missing.txt"), *TINY)  # the real command line
    assert proc.returncode == 2 and "no such text file" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "short.txt").write_text("tiny\n")
    code, _, err = call(main, ["--text", str(tmp_path / "short.txt"), *TINY, "--out", str(tmp_path)], capsys)
    assert code == 2 and "too short" in err
    code, _, err = call(main, ["--task", "lm", "--text", str(tmp_path / "short.txt")], capsys)
    assert code == 2 and "not allowed with" in err


@pytest.mark.slow  # starts a training subprocess
def test_train_task_lm_on_the_shipped_corpus(tmp_path):
    proc = run("tfm_lesson.train", "--task", "lm", "--steps", "20", "--out", str(tmp_path), *TINY)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["corpus"] == "sentences (English)" and result["train_tokens"] > 400_000
    assert (tmp_path / "lm.pt").is_file()


@pytest.mark.slow  # starts a training subprocess
def test_an_existing_run_is_kept_unless_overwrite(own_text_run, capsys):
    from tfm_lesson.train.cli import main

    root, _ = own_text_run
    saved = (root / "out" / "lm.pt").read_bytes()
    args = ["--text", str(root / "mine.txt"), *TINY, "--steps", "3", "--out", str(root / "out")]
    code, _, err = call(main, args, capsys)
    assert code == 2 and "already holds a run" in err and "--overwrite" in err
    assert (root / "out" / "lm.pt").read_bytes() == saved
    code, out, _ = call(main, [*args, "--overwrite"], capsys)
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["steps"] == 3
