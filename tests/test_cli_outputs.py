"""No command line writes inside the installed package by default, and the commands that regenerate shipped
data (the ablation, the reference runs) check every flag and --out before training and refuse non-finite
results before writing."""
from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import pytest

import tfm_lesson
from conftest import call_main
from tfm_lesson.train import ablation, cli as train, reference, scaling
from tfm_lesson._io import inside_package

PACKAGE = Path(tfm_lesson.__file__).resolve().parent

# Every module with a command line (def main) and the paths it writes when no path is given (None: it
# writes nothing, or only where it is told).
DEFAULT_OUTPUTS = {
    "train.cli": lambda: [train.DEFAULT_OUT, train.LM_OUT],
    "train.ablation": lambda: [ablation.DEFAULT_OUT],
    "train.scaling": lambda: [scaling.DEFAULT_OUT],
    "train.reference": lambda: [reference.default_out(task) for task in reference.RECIPES],
    "course.cli": lambda: [], "course.quiz": lambda: [], "train.translate": lambda: [],
    "train.generate": lambda: [],
    "course._grade_kernel": lambda: [],  # the grader's kernel: writes nothing
    "course._probe_child": lambda: [],  # a grader's probe: writes only the OUT path it is given
}


def _modules_with_a_command_line() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if re.search(r"^def main\(", path.read_text(encoding="utf-8"), re.M):
            found.add(".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    return found


def _parser_defaults(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parser_defaults(sub)
        elif isinstance(action.default, (str, Path)) and action.default != argparse.SUPPRESS:
            yield action.dest, action.default


def test_every_command_line_is_listed_here():
    assert _modules_with_a_command_line() == set(DEFAULT_OUTPUTS)


@pytest.mark.parametrize("name", sorted(DEFAULT_OUTPUTS))
def test_no_default_output_is_inside_the_package(name):
    for path in DEFAULT_OUTPUTS[name]():
        assert not inside_package(path), f"{name}'s default output {path} is inside the package"
    module = name.removesuffix(".__init__")
    build = getattr(__import__(f"tfm_lesson.{module}", fromlist=["x"]), "build_parser", None)
    if build is not None:
        for dest, value in _parser_defaults(build()):
            if dest in ("out", "book", "dir", "notebooks"):
                assert not inside_package(value), f"{name} --{dest} defaults to {value}, inside the package"


@pytest.fixture
def no_ablation_run(monkeypatch):
    monkeypatch.setattr(ablation, "run_ablation", lambda **k: pytest.fail("trained although a flag was wrong"))


def _exit(main, argv, capsys):
    code, _, err = call_main(main, argv, capsys)
    return code, err


@pytest.mark.parametrize("flags, words", [
    (["--seeds", "0"], "--seeds must be >= 1"), (["--first", "0"], "--first must be between 1 and"),
    (["--first", "99"], "--first must be between 1 and"), (["--steps", "0"], "--steps must be >= 1"),
    (["--lr", "-1"], "--lr must be a finite number > 0"), (["--lr", "nan"], "--lr must be a finite number > 0"),
    (["--batch-size", "0"], "--batch-size must be >= 1")])
def test_ablation_flags_are_checked_before_training(tmp_path, capsys, no_ablation_run, flags, words):
    code, err = _exit(ablation.main, [*flags, "--out", str(tmp_path / "a.json")], capsys)
    assert code == 2 and words in err, err


def test_ablation_out_is_checked_before_training_and_never_the_shipped_table(tmp_path, capsys, no_ablation_run):
    shipped = PACKAGE / "data" / ablation.ABLATION_FILE
    before = shipped.read_bytes()
    for out, words in ((shipped, "inside the tfm_lesson package"), (tmp_path, "is a folder")):
        code, err = _exit(ablation.main, ["--out", str(out), "--overwrite"], capsys)
        assert code == 2 and words in err, err
    (tmp_path / "a.json").write_text("mine")
    code, err = _exit(ablation.main, ["--out", str(tmp_path / "a.json")], capsys)
    assert code == 2 and "already exists" in err and (tmp_path / "a.json").read_text() == "mine"
    assert shipped.read_bytes() == before


def test_ablation_refuses_nan_results_before_writing(tmp_path, capsys, monkeypatch):
    runs = [dict(variant="2017 block", seed=0, valid_loss=math.nan, train_loss=1.0, steps=1, seconds=0.1,
                 parameters=10)]
    monkeypatch.setattr(ablation, "run_ablation", lambda **k: dict(settings={}, runs=runs))
    code, err = _exit(ablation.main, ["--out", str(tmp_path / "a.json")], capsys)
    assert code == 3 and "not finite" in err and not (tmp_path / "a.json").exists()


def test_ablation_writes_where_it_is_told(tmp_path, capsys, monkeypatch):
    shipped = ablation.load_ablation()
    monkeypatch.setattr(ablation, "run_ablation", lambda **k: shipped)
    code, _ = _exit(ablation.main, ["--out", str(tmp_path / "a.json")], capsys)
    assert code == 0 and json.loads((tmp_path / "a.json").read_text()) == shipped


@pytest.mark.parametrize("flags, words", [
    (["--seeds", "0", "0", "1"], "at least three distinct seeds"),
    (["--seeds", "-1", "0", "1"], "--seeds must be >= 0"),
    (["--device", "banana"], "--device"), (["--out", str(PACKAGE / "data" / "reference" / "reverse.json"),
                                            "--overwrite"], "inside the tfm_lesson package")])
def test_reference_flags_are_checked_before_training(capsys, monkeypatch, flags, words):
    monkeypatch.setattr(reference, "reference_run", lambda *a, **k: pytest.fail("trained although a flag was wrong"))
    code, err = _exit(reference.main, ["--task", "reverse", *flags], capsys)
    assert code == 2 and words in err, err


def test_reference_refuses_nan_results_before_writing(tmp_path, capsys, monkeypatch):
    ref = reference.load_reference("reverse")
    ref["runs"][0]["loss"][3] = math.inf
    monkeypatch.setattr(reference, "reference_run", lambda *a, **k: ref)
    code, err = _exit(reference.main, ["--task", "reverse", "--out", str(tmp_path / "r.json")], capsys)
    assert code == 3 and "not finite" in err and not (tmp_path / "r.json").exists()


def test_the_old_ablation_command_says_where_it_went():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "tfm_lesson.modern", "ablation"], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=60)
    assert proc.returncode == 2 and "python -m tfm_lesson.train.ablation" in proc.stderr


def test_the_course_command_lists_every_command(capsys):
    """`python -m tfm_lesson.course --help` names grade and export too (they have a parser of their own)."""
    from tfm_lesson.course import main

    code, out, _ = call_main(main, ["--help"], capsys)
    listed = re.findall(r"^\s{4}(\S+)\s", out, flags=re.M)
    assert code == 0 and {"execute", "student", "restore", "fold", "setup-cell", "grade", "export"} <= set(listed), out
