"""Clear errors where a careless or hostile user used to get a traceback or a wrong number (issue 22)."""
from __future__ import annotations

import math

import pytest
import torch

from tfm_lesson import quiz
from tfm_lesson.train.generate import main as generate_main
from tfm_lesson.gpt import GPT, GPTConfig
from tfm_lesson.train.lm import load_lm, save_lm
from tfm_lesson.sampling import sample_next
from tfm_lesson.data.tokenizer import BPETokenizer


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tokenizer = BPETokenizer().train("abc abd abe " * 20, 260)
    model = GPT(GPTConfig(vocab_size=len(tokenizer), max_len=8, d_model=16, heads=2, d_ff=32, num_layers=1))
    path = tmp_path_factory.mktemp("lm") / "lm.pt"
    save_lm(path, model, tokenizer)
    return path, model, tokenizer


def test_generate_refuses_a_device_that_is_not_there(checkpoint, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is present here")
    with pytest.raises(SystemExit) as exc:
        generate_main([str(checkpoint[0]), "--device", "cuda"])
    assert exc.value.code == 2 and "--device cuda is not available" in capsys.readouterr().err


def test_generate_refuses_a_prompt_longer_than_the_context(checkpoint, capsys):
    with pytest.raises(SystemExit) as exc:
        generate_main([str(checkpoint[0]), "abc abd abe abc abd abe abc", "--max-new-tokens", "1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "shorten the prompt to at most 7 tokens" in err and "at most 0" not in err


def test_corrupt_checkpoint_never_advises_weights_only_false(tmp_path):
    bad = tmp_path / "lm.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="torch cannot read it") as exc:
        load_lm(bad)
    assert "weights_only" not in str(exc.value)


def test_checkpoint_with_a_missing_key_or_a_foreign_tokenizer(checkpoint, tmp_path):
    path, model, tokenizer = checkpoint
    payload = torch.load(path, weights_only=True)
    broken = tmp_path / "broken.pt"
    torch.save({k: v for k, v in payload.items() if k != "state_dict"}, broken)
    with pytest.raises(ValueError, match="incomplete or damaged.*missing 'state_dict'"):
        load_lm(broken)
    foreign = tmp_path / "foreign.pt"
    other = BPETokenizer().train("xyz xyw " * 20, 258)
    import json

    torch.save({**payload, "tokenizer": json.dumps(other.to_dict())}, foreign)
    with pytest.raises(ValueError, match="tokenizer belongs to another model"):
        load_lm(foreign)


def test_quiz_help_prints_help_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert quiz.main(["--help"]) == 0
    assert "usage" in capsys.readouterr().out and not (tmp_path / "--help").exists()
    assert quiz.main(["--out"]) == 2 and not (tmp_path / "--out").exists()


@pytest.mark.parametrize("temperature", [1e-300, 1e-30, 1e-8, 1.0, 1e30, 1e300])
def test_sampling_is_defined_at_any_accepted_temperature(temperature):
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, -1e4]])
    gen = torch.Generator().manual_seed(0)
    ids = sample_next(logits, temperature, generator=gen)
    assert ids.shape == (2,) and ids.dtype == torch.long
    if temperature <= 1e-8:
        assert ids[0].item() == 1  # a tiny temperature is greedy


def test_sampling_names_nan_logits():
    with pytest.raises(ValueError, match="NaN"):
        sample_next(torch.tensor([[0.0, math.nan]]), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        sample_next(torch.tensor([[0.0, math.nan]]), 0.0)


def test_text_the_tokenizer_cannot_encode_is_a_value_error():
    tok = BPETokenizer()
    with pytest.raises(ValueError, match="position 2 holds"):
        tok.encode("ab\ud800c")
    text = "naïve 日本語 \x00 \U0001f600"
    assert tok.decode(tok.encode(text)) == text


# --- compare_to_reference: a constant huge loss is not "flat near log V"; the margin is checked (issue 22) --------
def test_compare_to_reference_names_a_loss_far_above_log_v_and_refuses_a_nan_margin():
    from tfm_lesson.train.reference import compare_to_reference

    history = {"step": list(range(1, 401)), "loss": [1e300] * 400}
    verdict = compare_to_reference(history, "reverse", plot=False)
    assert not verdict.normal and "flat near log V" not in verdict.message and "far above log V" in verdict.message
    for margin in (math.nan, -0.1, math.inf, True, "0.1"):
        with pytest.raises(ValueError, match="margin must be a finite number"):
            compare_to_reference(history, "reverse", plot=False, margin=margin)


# --- course commands given a missing, .py, directory or corrupt notebook (issue 22) ----------------------------------
@pytest.mark.parametrize("command", ["execute", "student", "restore", "fold", "setup-cell"])
def test_course_commands_refuse_what_is_not_a_notebook(command, tmp_path, capsys):
    from tfm_lesson.course import main as course_main

    script = tmp_path / "01_x.py"
    script.write_text("print(1)\n")
    corrupt = tmp_path / "02_x.ipynb"
    corrupt.write_text("{not json")
    for path, words in ((tmp_path / "missing.ipynb", "no notebook at"), (script, "jupytext pairs"),
                        (tmp_path, "is a directory"), (corrupt, "not a readable notebook")):
        with pytest.raises(SystemExit) as exc:
            course_main([command, str(path)])
        assert exc.value.code == 2 and words in capsys.readouterr().err


def test_generate_names_a_prompt_the_tokenizer_cannot_encode(checkpoint, capsys):
    with pytest.raises(SystemExit) as exc:
        generate_main([str(checkpoint[0]), "ab\udcedc", "--max-new-tokens", "1"])
    assert exc.value.code == 2 and "prompt: text cannot be encoded" in capsys.readouterr().err
