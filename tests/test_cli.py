"""The command lines: train on a task and on a TSV file, translate with the checkpoint, torchrun with 2 processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tfm_lesson
from tfm_lesson.train.cli import main as train_main
from tfm_lesson.train.loop import load_checkpoint
from tfm_lesson.train.translate import main as translate_main

TINY = ["--d-model", "32", "--heads", "2", "--num-layers", "1", "--d-ff", "64", "--batch-size", "16",
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


@pytest.mark.slow  # starts a training subprocess
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
    assert extra["steps"] == 8 and len(src_vocab) == model.config.src_vocab_size
    tr = _run(["-m", "tfm_lesson.train.translate", str(out / "model.pt"), "1 2 3", "4 5 6 7", "--beam", "2"], tmp_path)
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
    with pytest.raises(SystemExit) as exc:
        train_main(["--tsv", str(tmp_path / "missing.tsv")])
    assert exc.value.code == 2 and "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        train_main(["--task", "nope"])
    assert exc.value.code == 2 and "--task" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        train_main(["--steps", "3"])  # neither --task nor --tsv
    assert exc.value.code == 2 and "give --task or --tsv" in capsys.readouterr().err


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if training starts: every check must come before it."""
    import tfm_lesson.train.loop as training

    def refuse(*args, **kwargs):
        raise AssertionError("training started although the command line was wrong")

    monkeypatch.setattr(training, "train", refuse)


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        train_main(argv)
    captured = capsys.readouterr()
    assert exc.value.code == 2, captured
    assert "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("flags, message", [
    (["--beam", "0"], "--beam must be >= 1, got 0"),
    (["--test-limit", "0"], "--test-limit must be >= 1, got 0"),
    (["--test-limit", "-1"], "--test-limit must be >= 1, got -1"),
    (["--seed", "-1"], "--seed must be >= 0, got -1"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--minutes", "0"], "--minutes must be a finite number > 0"),
    (["--minutes", "nan"], "--minutes must be a finite number > 0"),
    (["--peak-lr", "0"], "--peak-lr must be a finite number > 0"),
    (["--peak-lr", "inf"], "--peak-lr must be a finite number > 0"),
    (["--dropout", "1"], "--dropout must be a finite number >= 0 and < 1"),
    (["--smoothing", "-0.1"], "--smoothing must be a finite number >= 0 and < 1"),
    (["--clip", "-1"], "--clip must be a finite number >= 0"),
    (["--d-model", "30", "--heads", "4"], "--d-model 30 must be divisible by --heads 4"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--save-every", "0"], "--save-every must be >= 1"),
    (["--eval-every", "-5"], "--eval-every must be >= 1"),
    (["--max-len", "1"], "--max-len must be >= 2"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--device", "banana"], "--device: device must be cpu, cuda"),
    (["--device", "cuda:7"], "--device: device 'cuda:7'"),
    (["--tokenizer", "chars"], "--tokenizer, --lower and --max-pairs are for --tsv files"),
])
def test_every_flag_is_checked_before_training(tmp_path, capsys, no_training, flags, message):
    err = _usage_error(["--task", "copy", "--out", str(tmp_path / "run"), *flags], capsys)
    assert message in err
    assert not (tmp_path / "run" / "model.pt").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_usage_error(tmp_path, capsys, no_training):
    err = _usage_error(["--task", "copy", "--device", "cuda", "--out", str(tmp_path / "r")], capsys)
    assert "no CUDA GPU" in err and "use cpu" in err


def test_out_is_checked_before_training(tmp_path, capsys, no_training):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("my notes\n")
    assert "is a file; --out names a folder" in _usage_error(["--task", "copy", "--out", str(a_file)], capsys)
    assert a_file.read_text() == "my notes\n"
    err = _usage_error(["--task", "copy", "--out", str(a_file / "sub")], capsys)  # a folder inside a file
    assert f"--out {a_file / 'sub'}: cannot write there" in err
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.pt").write_bytes(b"a learner's earlier run")
    err = _usage_error(["--task", "copy", "--out", str(run)], capsys)
    assert "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert (run / "model.pt").read_bytes() == b"a learner's earlier run"


def test_unwritable_out_is_a_usage_error(tmp_path, capsys, no_training, monkeypatch):
    import tempfile

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)  # root ignores chmod: simulate the refusal
    err = _usage_error(["--task", "copy", "--out", str(tmp_path / "ro")], capsys)
    assert "cannot write there (Permission denied)" in err


def test_resume_flag_errors(tmp_path, capsys, no_training):
    err = _usage_error(["--resume", str(tmp_path / "nothing.pt")], capsys)
    assert "--resume: no checkpoint at" in err
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert "is empty" in _usage_error(["--resume", str(empty)], capsys)


def test_tsv_data_errors_name_the_file(tmp_path, capsys, no_training):
    latin = tmp_path / "latin1.tsv"
    latin.write_bytes("the cat\tle chat\nthe tree\tl'arbre \xe9t\xe9\n".encode("latin-1"))
    err = _usage_error(["--tsv", str(latin), "--out", str(tmp_path / "r")], capsys)
    assert f"{latin} is not UTF-8 text: line 2" in err and "UnicodeDecodeError" not in err
    few = tmp_path / "few.tsv"
    few.write_text("a\tb\na\tc\nd\te\n", encoding="utf-8")
    err = _usage_error(["--tsv", str(few), "--out", str(tmp_path / "r")], capsys)
    assert f"--tsv {few}: 2 distinct source sentence(s) in 3 usable pair(s); need at least 3" in err


def test_over_long_tsv_pairs_are_dropped_at_load(tmp_path, capsys):
    lines = [f"w{i} w{i + 1}\tm{i} m{i + 1}" for i in range(30)]
    lines.insert(7, " ".join(f"x{i}" for i in range(40)) + "\tshort")  # too long for --max-len 16
    path = tmp_path / "long.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    args = ["--tsv", str(path), "--max-len", "16", "--steps", "2", "--device", "cpu", "--out", str(out),
            "--d-model", "16", "--heads", "2", "--num-layers", "1", "--d-ff", "32", "--batch-size", "8",
            "--no-progress"]
    assert train_main(args) == 0
    stdout = capsys.readouterr().out
    assert f"data: dropped 1 pair(s) of {path} longer than --max-len 16 positions" in stdout
    assert load_checkpoint(out / "model.pt", device="cpu").model.config.max_len == 16


def test_recipes_are_the_defaults_and_flags_override(tmp_path):
    from tfm_lesson.train.cli import RECIPES, build_parser, resolve

    parser = build_parser()
    run = resolve(parser.parse_args(["--task", "reverse"]), parser)
    recipe = RECIPES["reverse"]
    for key in ("d_model", "heads", "num_layers", "d_ff", "dropout", "batch_size", "warmup", "peak_lr", "steps",
                "beam"):
        assert run[key] == recipe[key], key
    run = resolve(parser.parse_args(["--task", "reverse", "--d-model", "32", "--minutes", "1"]), parser)
    assert run["d_model"] == 32 and run["minutes"] == 1 and run["steps"] is None  # --minutes alone: time decides
    assert run["warmup"] == recipe["warmup"]
    run = resolve(parser.parse_args(["--task", "sentences"]), parser)
    assert run["d_model"] == RECIPES["sentences"]["d_model"] and run["beam"] == RECIPES["sentences"]["beam"]
    text = parser.format_help()
    assert "recipes" in text
    for task in ("copy", "reverse", "sort", "numbers", "sentences", "--tsv"):
        assert any(line.split()[:1] == [task] for line in text.splitlines()), task


def test_diverged_run_exits_3_and_saves_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    status = train_main(["--task", "copy", "--peak-lr", "1e9", "--warmup", "1", "--clip", "0", "--steps", "40",
                         "--save-every", "1000", "--device", "cpu", "--out", str(out), *TINY])
    err = capsys.readouterr().err
    assert status == 3 and "training diverged at step" in err and "learning rate" in err
    assert not (out / "model.pt").exists()  # no checkpoint full of NaN


def test_overwrite_and_resume_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["--task", "copy", "--device", "cpu", "--out", str(out), *TINY]
    assert train_main([*base, "--steps", "3"]) == 0
    first = _last_json(capsys.readouterr().out)
    assert first["steps"] == 3
    # continue the same run to 5 steps: its settings come from the checkpoint
    assert train_main(["--resume", str(out / "model.pt"), "--steps", "5", "--no-progress", "--test-limit", "5"]) == 0
    stdout = capsys.readouterr().out
    assert "resumed at step 3" in stdout and _last_json(stdout)["steps"] == 5
    assert load_checkpoint(out / "model.pt", device="cpu").extra["steps"] == 5
    err = _usage_error(["--resume", str(out / "model.pt"), "--d-model", "64"], capsys)
    assert "--d-model 64 differs from the run being resumed (32)" in err
    assert train_main([*base, "--steps", "2", "--overwrite"]) == 0  # a new run, asked for
    assert load_checkpoint(out / "model.pt", device="cpu").extra["steps"] == 2


@pytest.mark.slow  # (SIGTERM, Ctrl-C and resume: tests/test_run_contract.py, for both trainers)
def test_torchrun_two_processes_ddp(tmp_path):
    out = tmp_path / "ddp"
    proc = _run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "tfm_lesson.train",
                 "--task", "copy", "--steps", "6", "--device", "cpu", "--out", str(out), *TINY], tmp_path, timeout=240)
    result = _last_json(proc.stdout)
    assert result["world_size"] == 2 and result["steps"] == 6
    assert result["ranks_in_sync"] is True  # DDP averaged the gradients: both ranks hold the same weights
    assert proc.stdout.count("checkpoint:") == 1  # only rank 0 reports and saves
    assert (out / "model.pt").is_file()


def test_translate_flags_and_checkpoint_are_checked(tmp_path, capsys):
    for argv, message in (([str(tmp_path / "none.pt"), "x"], "checkpoint: no checkpoint at"),
                          ([str(tmp_path / "none.pt"), "x", "--beam", "0"], "--beam must be >= 1"),
                          ([str(tmp_path / "none.pt"), "x", "--alpha", "nan"], "--alpha must be a finite number"),
                          ([str(tmp_path / "none.pt"), "x", "--device", "banana"], "--device: device must be")):
        with pytest.raises(SystemExit) as exc:
            translate_main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and "Traceback" not in err
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04")
    with pytest.raises(SystemExit) as exc:
        translate_main([str(tmp_path / "cut.pt"), "x"])
    assert exc.value.code == 2 and "truncated or corrupt" in capsys.readouterr().err


def test_resume_after_the_tsv_file_changed_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"w{i} w{i + 1}\tm{i} m{i + 1}\n" for i in range(30)), encoding="utf-8")
    out = tmp_path / "run"
    small = ["--d-model", "16", "--heads", "2", "--num-layers", "1", "--d-ff", "32", "--batch-size", "8",
             "--no-progress", "--test-limit", "2", "--eval-limit", "2"]
    assert train_main(["--tsv", str(path), "--steps", "2", "--device", "cpu", "--out", str(out), *small]) == 0
    capsys.readouterr()
    path.write_text("".join(f"w{i} w{i + 2}\tm{i} m{i + 2}\n" for i in range(30)), encoding="utf-8")  # edited
    err = _usage_error(["--resume", str(out), "--steps", "4", "--device", "cpu"], capsys)
    assert f"--resume {out / 'model.pt'}: the training pairs differ" in err
