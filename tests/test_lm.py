"""Language-model training: the corpus and its split, next-token windows, perplexity and the unigram baseline,
a short training run that learns, samples, checkpoints."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tfm_lesson.data.corpus import CORPUS_LICENCE, load_corpus, random_windows, split_text
from tfm_lesson.gpt import GPT
from tfm_lesson.train.lm import (LMData, complete, lm_loss, lm_rate, load_lm, perplexity, prepare_lm_data, save_lm,
                           train_lm, unigram_perplexity)
from tfm_lesson.data.tokenizer import BPETokenizer

TEXT = "".join(f"the {a} {b} sat on the {c}.\n" for a in ("small", "big", "red") for b in ("cat", "dog", "hen")
               for c in ("mat", "log", "hat", "rug")) * 6


@pytest.fixture(scope="module")
def data() -> LMData:
    return prepare_lm_data(load_corpus(text=TEXT), vocab_size=300)


def tiny_gpt(vocab_size: int, max_len: int = 16, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(vocab_size=vocab_size, max_len=max_len, d_model=32, heads=4, d_ff=64, num_layers=2)


# ------------------------------------------------------------------------------------------------ corpus
def test_shipped_corpus_is_the_course_english():
    corpus = load_corpus()
    assert corpus.licence == CORPUS_LICENCE and "CC BY 4.0" in corpus.licence
    train, valid = corpus.train.splitlines(), corpus.valid.splitlines()
    assert len(train) + len(valid) == 50_000 and len(valid) == 5_000
    assert not set(train) & set(valid)  # no sentence in both halves
    assert all("\t" not in line for line in valid[:100]) and valid[0][0].isupper()
    assert load_corpus().valid == corpus.valid  # the split is fixed


def test_split_text_at_lines():
    text = "".join(f"line {i}\n" for i in range(20))
    train, valid = split_text(text, 0.1)
    assert train + valid == text and valid == "line 18\nline 19\n"
    assert split_text("abcdefghij", 0.2) == ("abcdefgh", "ij")  # one line: by characters
    assert split_text("a\nb", 0.01) == ("a\n", "b")  # at least one line each


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(text=""), ValueError, "empty"), (dict(text="   \n "), ValueError, "empty"),
    (dict(text=b"bytes"), TypeError, "str"), (dict(text="ab", path="x.txt"), ValueError, "not both"),
    (dict(text="hello", max_chars=1), ValueError, "max_chars")])
def test_load_corpus_errors(kwargs, error, words):
    with pytest.raises(error, match=words):
        load_corpus(**kwargs)


def test_load_corpus_from_a_file(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("first line\nsecond line\nthird\n", encoding="utf-8")
    corpus = load_corpus(path=path)
    assert corpus.name == "mine.txt" and corpus.valid == "third\n"
    with pytest.raises(FileNotFoundError, match="no such text file"):
        load_corpus(path=tmp_path / "missing.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1") * 3)
    with pytest.raises(ValueError, match="not UTF-8"):
        load_corpus(path=tmp_path / "latin1.txt")


def test_random_windows_are_next_token_pairs():
    ids = torch.arange(100, 200)
    x, y = random_windows(ids, batch_size=8, max_len=10, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 10) and x.dtype == torch.long
    assert torch.equal(y, x + 1)  # every target is the token right after its input
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(y.max()) <= 199 and int(x.min()) >= 100
    again, _ = random_windows(ids, 8, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, again)
    x, y = random_windows(torch.arange(11), 3, 10)  # exactly one window fits
    assert torch.equal(x, torch.arange(10).expand(3, 10)) and torch.equal(y, x + 1)


@pytest.mark.parametrize("args, words", [
    ((torch.arange(10), 2, 10), "too few"), ((torch.zeros(2, 20, dtype=torch.long), 2, 3), "1-D"),
    ((torch.arange(50), 0, 3), "batch_size"), ((torch.arange(50), 2, -1), "max_len")])
def test_random_windows_errors(args, words):
    with pytest.raises(ValueError, match=words):
        random_windows(*args)


# ----------------------------------------------------------------------------------- perplexity, baseline
def test_unigram_perplexity_by_hand():
    train = torch.tensor([0, 0, 0, 1])
    valid = torch.tensor([0, 1])
    p = {0: (3 + 1) / (4 + 3), 1: (1 + 1) / (4 + 3)}  # add-one over a vocabulary of 3
    expected = math.exp(-(math.log(p[0]) + math.log(p[1])) / 2)
    assert unigram_perplexity(train, valid, 3) == pytest.approx(expected)
    uniform = torch.arange(10).repeat(5)
    assert unigram_perplexity(uniform, uniform, 10) == pytest.approx(10.0)


class ConstantLM(nn.Module):
    """Always the same logits: perplexity exp(cross-entropy) is known in closed form."""

    def __init__(self, logits: torch.Tensor, max_len: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(logits)
        self.config = type("Config", (), {"max_len": max_len})()

    def forward(self, idx):
        return self.logits.expand(*idx.shape, -1)


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    ids = torch.randint(0, 50, (1001,))
    assert perplexity(ConstantLM(torch.zeros(50), 10), ids) == pytest.approx(50.0, rel=1e-5)


def test_perplexity_is_exp_of_the_loss_on_consecutive_windows(data):
    model = tiny_gpt(data.vocab_size)
    ids = data.valid
    n = (ids.numel() - 1) // 16
    x, y = ids[: n * 16].view(n, 16), ids[1: n * 16 + 1].view(n, 16)
    with torch.no_grad():
        expected = math.exp(lm_loss(model.eval(), x, y).item())
    assert perplexity(model, ids, batch_size=3) == pytest.approx(expected, rel=1e-5)
    assert model.training is False


def test_lm_rate_warms_up_then_decays():
    assert lm_rate(0.0, 1e-3, 0.1) == 0.0
    assert lm_rate(0.05, 1e-3, 0.1) == pytest.approx(5e-4)
    assert lm_rate(0.1, 1e-3, 0.1) == pytest.approx(1e-3)
    assert lm_rate(1.0, 1e-3, 0.1) == pytest.approx(1e-4)
    rates = [lm_rate(i / 100, 1e-3, 0.1) for i in range(10, 101)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))


# -------------------------------------------------------------------------------------------- training
def test_training_learns_and_beats_the_unigram_baseline(data):
    model = tiny_gpt(data.vocab_size)
    before = perplexity(model, data.valid)
    history = train_lm(model, data, steps=150, batch_size=16, lr=3e-3, eval_every=50, device="cpu")
    after = perplexity(model, data.valid)
    baseline = unigram_perplexity(data.train, data.valid, data.vocab_size)
    assert len(history["step"]) == 150 and history["eval_step"] == [50, 100, 150]
    assert history["valid_loss"][-1] < history["valid_loss"][0]
    assert after < 0.5 * baseline < before, (before, baseline, after)
    assert not model.training


def test_training_stops_at_the_time_limit(data):
    model = tiny_gpt(data.vocab_size)
    history = train_lm(model, data, minutes=0.02, device="cpu")
    assert 1 <= len(history["step"]) and history["seconds"][-1] < 0.02 * 60 + 5


def test_training_arguments(data):
    model = tiny_gpt(data.vocab_size)
    with pytest.raises(ValueError, match="steps, minutes"):
        train_lm(model, data)
    with pytest.raises(ValueError, match="steps"):
        train_lm(model, data, steps=0)
    with pytest.raises(ValueError, match="only 256"):
        train_lm(tiny_gpt(256), data, steps=1)
    with pytest.raises(ValueError, match="longer than the model's max_len"):
        train_lm(model, data, steps=1, max_len=17)
    with pytest.raises(TypeError, match="LMData"):
        train_lm(model, data.train, steps=1)


def test_complete_samples_reproducibly(data):
    model = tiny_gpt(data.vocab_size)
    a = complete(model, data.tokenizer, "the", 10, temperature=1.0, seed=3)
    assert isinstance(a, str) and a == complete(model, data.tokenizer, "the", 10, temperature=1.0, seed=3)
    greedy = complete(model, data.tokenizer, "the small", 8, temperature=0)
    assert greedy == complete(model, data.tokenizer, "the small", 8, temperature=0, use_cache=False)
    assert complete(model, data.tokenizer, "", 5, temperature=0) == complete(model, data.tokenizer, "\n", 5, temperature=0)
    with pytest.raises(TypeError, match="prompt"):
        complete(model, data.tokenizer, 42)
    with pytest.raises(ValueError, match="context"):
        complete(model, data.tokenizer, "the", 100)


# ------------------------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip(data, tmp_path):
    model = tiny_gpt(data.vocab_size)
    path = save_lm(tmp_path / "run" / "lm.pt", model, data.tokenizer, extra={"steps": 3})
    loaded, tokenizer, extra = load_lm(path, device="cpu")
    x = data.valid[:16][None]
    with torch.no_grad():
        assert torch.allclose(loaded(x), model.eval()(x), atol=1e-6)
    assert tokenizer.merges == data.tokenizer.merges and extra == {"steps": 3}
    assert [p.name for p in path.parent.iterdir()] == ["lm.pt"]  # no temporary file left


def test_checkpoint_errors(data, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_lm(tmp_path / "missing.pt")
    torch.save({"config": {}, "state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a tfm_lesson language-model checkpoint"):
        load_lm(tmp_path / "other.pt")
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a tfm_lesson language-model checkpoint"):
        load_lm(tmp_path / "junk.pt")
    with pytest.raises(TypeError, match="GPT"):
        save_lm(tmp_path / "x.pt", nn.Linear(2, 2), data.tokenizer)
    with pytest.raises(TypeError, match="BPETokenizer"):
        save_lm(tmp_path / "x.pt", tiny_gpt(data.vocab_size), "tokenizer")


def test_prepare_lm_data_accepts_a_trained_tokenizer(data):
    again = prepare_lm_data(load_corpus(text=TEXT), tokenizer=data.tokenizer)
    assert torch.equal(again.train, data.train) and again.vocab_size == data.vocab_size
    assert data.tokenizer.decode(data.train.tolist()) == load_corpus(text=TEXT).train
    with pytest.raises(TypeError, match="BPETokenizer"):
        prepare_lm_data(load_corpus(text=TEXT), tokenizer="gpt2")
    assert isinstance(data.tokenizer, BPETokenizer)


# ---------------------------------------------------------------------------------------------- the widget
def test_sampling_widget_renders_and_reacts(data):
    from tfm_lesson.look.widgets import sampling_widget

    model = tiny_gpt(data.vocab_size, max_len=64)
    w = sampling_widget(model, data.tokenizer, "the small", max_new_tokens=20)
    assert w.error == "" and w.png and "image/png" in w._repr_mimebundle_()  # the static fallback
    first_png, first_text = w.png, w.sample_box.value
    assert "the small" in first_text
    w.controls["temperature"].value = 0.0
    assert w.error == "" and w.png != first_png
    greedy = w.sample_box.value
    assert greedy == w.sample_box.value and "the small" in greedy
    w.controls["top-k"].value = 1
    assert w.error == "" and w.sample_box.value == greedy  # k = 1 is greedy too (temperature 0 already is)
    w.controls["temperature"].value = 1.0
    w.controls["top-p"].value = 0.3
    assert w.error == ""
    w.controls["prompt"].value = "the big " * 40  # prompt + new tokens past the context: shown, not raised
    assert "context" in w.error and "shorten the prompt" in w.error
    w.controls["prompt"].value = ""
    assert w.error == ""


def test_sampling_widget_bad_arguments(data):
    from tfm_lesson.look.widgets import sampling_widget

    with pytest.raises(TypeError, match="GPT"):
        sampling_widget(nn.Linear(2, 2), data.tokenizer)
    with pytest.raises(TypeError, match="tokenizer"):
        sampling_widget(tiny_gpt(data.vocab_size), "gpt2")
    with pytest.raises(TypeError, match="prompt"):
        sampling_widget(tiny_gpt(data.vocab_size), data.tokenizer, prompt=3)


def test_save_lm_refuses_extras_that_load_lm_would_refuse(data, tmp_path):
    from pathlib import Path

    model = tiny_gpt(data.vocab_size)
    with pytest.raises(TypeError, match=r"extra\['where'\] is a pathlib"):
        save_lm(tmp_path / "x.pt", model, data.tokenizer, extra={"where": Path("runs")})
    assert not (tmp_path / "x.pt").exists()
    plain = {"corpus": "t.txt", "run": {"steps": 3, "lr": 0.003, "text": None}, "losses": [1.0, 2.0]}
    save_lm(tmp_path / "x.pt", model, data.tokenizer, extra=plain)
    assert load_lm(tmp_path / "x.pt", device="cpu").extra == plain
