"""The command lines: train on a task and on a TSV file, translate with the checkpoint, torchrun with 2 processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tfm_lesson
from tfm_lesson.train import main as train_main
from tfm_lesson.training import load_checkpoint
from tfm_lesson.translate import main as translate_main

TINY = ["--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--batch-size", "16",
        "--eval-limit", "10", "--test-limit", "20", "--threads", "1", "--no-progress"]


def _run(args: list[str], cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "TFM_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    root = str(Path(tfm_lesson.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def _last_json(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.strip()]
    return json.loads(lines[-1])


def test_train_copy_then_translate(tmp_path):
    out = tmp_path / "copy"
    proc = _run(["-m", "tfm_lesson.train", "--task", "copy", "--steps", "8", "--out", str(out), *TINY], tmp_path)
    result = _last_json(proc.stdout)
    assert result["task"] == "copy" and result["steps"] == 8 and result["pairs"] == 20
    assert {"exact_match", "bleu", "chrf", "seconds"} <= set(result)
    assert all(0 <= result[k] <= 100 for k in ("exact_match", "bleu", "chrf"))
    assert "step 8: valid loss" in proc.stdout  # progress reported
    assert (out / "model.pt").is_file()
    model, src_vocab, tgt_vocab, extra = load_checkpoint(out / "model.pt", device="cpu")
    assert extra["steps"] == 8 and len(src_vocab) == model.config.src_vocab
    tr = _run(["-m", "tfm_lesson.translate", str(out / "model.pt"), "1 2 3", "4 5 6 7", "--beam", "2"], tmp_path)
    assert len(tr.stdout.splitlines()) == 2  # one line per sentence (an untrained model may print empty ones)


def test_train_on_a_tsv_file(tmp_path, capsys):  # in-process: main(argv) is the same code path
    colours = ["red", "blue", "green", "black", "white"]
    french = {"red": "rouge", "blue": "bleu", "green": "vert", "black": "noir", "white": "blanc"}
    things = {"cat": "le chat", "dog": "le chien", "car": "la voiture", "house": "la maison"}
    lines = [f"the {c} {t}\t{things[t]} {french[c]}\tCC-BY 2.0 (France) Attribution: tatoeba.org"
             for c in colours for t in things]
    lines += ["", "no tab on this line"]
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "tsv"
    i = TINY.index("--threads")
    args = TINY[:i] + TINY[i + 2:]  # leave this process's thread count alone
    assert train_main(["--tsv", str(path), "--steps", "6", "--device", "cpu", "--out", str(out), *args]) == 0
    result = _last_json(capsys.readouterr().out)
    assert result["task"] == "pairs" and result["steps"] == 6 and result["pairs"] == 1
    _, src_vocab, tgt_vocab, _ = load_checkpoint(out / "model.pt", device="cpu")
    assert "chat" in tgt_vocab and "cat" in src_vocab and "chat" not in src_vocab
    assert translate_main([str(out / "model.pt"), "the red cat", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit, match="no such file"):
        train_main(["--tsv", str(tmp_path / "missing.tsv")])
    with pytest.raises(SystemExit) as exc:
        train_main(["--task", "nope"])
    assert exc.value.code == 2 and "--task" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        train_main(["--steps", "3"])  # neither --task nor --tsv
    assert exc.value.code == 2


@pytest.mark.slow
def test_torchrun_two_processes_ddp(tmp_path):
    out = tmp_path / "ddp"
    proc = _run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "tfm_lesson.train",
                 "--task", "copy", "--steps", "6", "--device", "cpu", "--out", str(out), *TINY], tmp_path, timeout=240)
    result = _last_json(proc.stdout)
    assert result["world_size"] == 2 and result["steps"] == 6
    assert result["ranks_in_sync"] is True  # DDP averaged the gradients: both ranks hold the same weights
    assert proc.stdout.count("checkpoint:") == 1  # only rank 0 reports and saves
    assert (out / "model.pt").is_file()
