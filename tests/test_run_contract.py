"""The run contract, tested once for every trainer the command line starts (translation: ``--task copy``,
language model: ``--text FILE``): flags and --out checked before training (exit 2), flags of the other kind
of run refused, atomic periodic saves, Ctrl-C saves and prints the resume command (exit 130), --resume
continues bit-equal to an uninterrupted run and refuses clashing settings or a --steps already reached,
divergence exits 3 keeping the last good checkpoint."""
from __future__ import annotations

import signal

import pytest
import torch

from conftest import call_main
from tfm_lesson.train.runstate import GuardedRun
from tfm_lesson.train.cli import main as train_main

TEXT = "".join(f"the {a} {b} sat on the {c}.\n" for a in ("small", "big", "red") for b in ("cat", "dog", "hen")
               for c in ("mat", "log", "hat", "rug")) * 5
COMMON = ["--d-model", "32", "--heads", "2", "--num-layers", "1", "--d-ff", "64", "--batch-size", "8", "--threads", "1",
          "--no-progress", "--device", "cpu"]
TASKS = {
    "translation": dict(argv=["--task", "copy", "--test-limit", "5", "--eval-limit", "5"], file="model.pt",
                        foreign=["--vocab-size", "300"], other="a language model"),
    "lm": dict(argv=["--vocab-size", "300", "--max-len", "16"], file="lm.pt", foreign=["--smoothing", "0.2"],
               other="translation runs"),
}


@pytest.fixture(params=sorted(TASKS))
def task(request, tmp_path):
    spec = dict(TASKS[request.param], name=request.param)
    if request.param == "lm":
        (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
        spec["argv"] = ["--text", str(tmp_path / "t.txt"), *spec["argv"]]
    return spec


def call(argv, capsys):
    return call_main(train_main, argv, capsys)


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("training started although the command line was wrong")

    monkeypatch.setattr(GuardedRun, "run", refuse)


def _write_old_names(path, name):
    """Rewrite a saved run with the names used before the rename (config src_vocab/tgt_vocab or a GPT's context;
    the run's layers and, for a language model, context), as a run saved by an older tfm_lesson would hold them."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    lm = name == "lm"
    old = {"config": {"max_len": "context"} if lm else {"src_vocab_size": "src_vocab", "tgt_vocab_size": "tgt_vocab"},
           "run": {"num_layers": "layers", **({"max_len": "context"} if lm else {})},
           "settings": {"max_len": "context"} if lm else {}}
    rename = lambda part, table: {table.get(k, k): v for k, v in part.items()}  # noqa: E731
    payload["config"] = rename(payload["config"], old["config"])
    payload["extra"]["run"] = rename(payload["extra"]["run"], old["run"])
    payload["training"]["settings"] = rename(payload["training"]["settings"], old["settings"])
    assert ("context" if lm else "src_vocab") in payload["config"] and "layers" in payload["extra"]["run"]
    torch.save(payload, path)


def _weights(path, name):
    from tfm_lesson.train.checkpoint import read_checkpoint
    from tfm_lesson.train.lm import read_lm

    return (read_lm if name == "lm" else read_checkpoint)(path)["state_dict"]


@pytest.mark.parametrize("flags, words", [
    (["--threads", "0"], "--threads must be >= 1"), (["--eval-every", "-1"], "--eval-every must be >= 1"),
    (["--save-every", "0"], "--save-every must be >= 1"), (["--steps", "0"], "--steps must be >= 1"),
    (["--peak-lr", "-1"], "--peak-lr must be a finite number > 0"), (["--minutes", "nan"], "--minutes must be"),
    (["--dropout", "1"], "--dropout must be"), (["--clip", "-1"], "--clip must be"),
    (["--max-len", "1"], "--max-len must be >= 2")])
def test_every_flag_is_checked_before_training(task, tmp_path, capsys, no_training, flags, words):
    code, _, err = call([*task["argv"], *COMMON, "--out", str(tmp_path / "run"), *flags], capsys)
    assert code == 2 and words in err and "Traceback" not in err, err


def test_flags_of_the_other_kind_of_run_are_refused(task, tmp_path, capsys, no_training):
    code, _, err = call([*task["argv"], *COMMON, "--out", str(tmp_path / "run"), *task["foreign"]], capsys)
    assert code == 2 and f"{task['foreign'][0]}: only for {task['other']}" in err, err


def test_max_len_is_read_by_both_kinds_of_run():
    """--max-len is the most positions the model sees, for a translation model and a GPT alike (for a GPT also
    its training window), so neither kind refuses it; the flags it replaced (--context, --layers) are gone."""
    from tfm_lesson.train.cli import LM_ONLY, TRANSLATION_ONLY, build_parser

    assert "--max-len" not in LM_ONLY and "--max-len" not in TRANSLATION_ONLY
    options = {flag for action in build_parser()._actions for flag in action.option_strings}
    assert {"--max-len", "--num-layers"} <= options and not {"--context", "--layers"} & options


def test_out_is_checked_before_training(task, tmp_path, capsys, no_training):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    code, _, err = call([*task["argv"], *COMMON, "--out", str(a_file)], capsys)
    assert code == 2 and "is a file; --out names a folder" in err and a_file.read_text() == "mine\n"
    (tmp_path / "run" / task["file"]).mkdir(parents=True)
    code, _, err = call([*task["argv"], *COMMON, "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and "is a folder" in err


def test_ctrl_c_saves_and_resume_equals_the_uninterrupted_run(task, tmp_path, capsys, monkeypatch):
    base = [*task["argv"], *COMMON, "--steps", "6", "--save-every", "2", "--eval-every", "3"]
    assert call([*base, "--out", str(tmp_path / "whole")], capsys)[0] == 0
    real = GuardedRun.check_loss

    def ctrl_c_at_step_4(self, loss):
        real(self, loss)
        if self.step == 3:  # step 4 is under way: a Ctrl-C now stops the run after it
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(GuardedRun, "check_loss", ctrl_c_at_step_4)
    code, out, _ = call([*base, "--out", str(tmp_path / "cut")], capsys)
    path = tmp_path / "cut" / task["file"]
    assert code == 130 and "stopped by SIGINT after step 4" in out and f"--resume {path}" in out, out
    monkeypatch.undo()
    _write_old_names(path, task["name"])  # saved before the rename: it still resumes, bit-equal
    code, out, err = call(["--resume", str(path), "--no-progress", "--threads", "1", "--device", "cpu",
                           *(["--test-limit", "5"] if task["name"] == "translation" else [])], capsys)
    assert code == 0 and "resumed at step 4" in out, err
    whole, resumed = _weights(tmp_path / "whole" / task["file"], task["name"]), _weights(path, task["name"])
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)
    # a resumed run keeps its settings and asks for more steps than it has taken
    code, _, err = call(["--resume", str(path), "--d-model", "64"], capsys)
    assert code == 2 and "--d-model 64 differs from the run being resumed (32)" in err
    code, _, err = call(["--resume", str(path), "--steps", "5"], capsys)
    assert code == 2 and "has already taken 6 steps" in err, err


def test_periodic_saves_are_atomic_and_divergence_keeps_the_last_good_checkpoint(task, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*task["argv"], *COMMON, "--out", str(out), "--peak-lr", "1e9", "--warmup", "1", "--clip", "0",
            "--steps", "40", "--save-every", "1"]
    code, _, err = call(argv, capsys)
    assert code == 3 and "training diverged at step" in err, err
    assert not list(out.glob(".*.tmp"))  # no half-written file left behind
    if (out / task["file"]).exists():  # the last good checkpoint: finite weights
        assert "is kept as it was" in err
        assert all(bool(torch.isfinite(v).all()) for v in _weights(out / task["file"], task["name"]).values())


@pytest.mark.slow
def test_sigterm_saves_and_exits_143_from_the_real_command_line(task, tmp_path):
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    import tfm_lesson

    out = tmp_path / "run"
    env = {**os.environ, "TFM_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(Path(tfm_lesson.__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "tfm_lesson.train", *task["argv"], *COMMON, "--steps", "100000",
                             "--save-every", "5", "--out", str(out)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not (out / task["file"]).exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-2000:]
    assert "stopped by SIGTERM after step" in stdout and f"--resume {out / task['file']}" in stdout
