"""tfm_lesson.data: vocabularies, toy and number tasks, splits, batches, the TSV loader."""
from __future__ import annotations

import json
import random

import pytest
import torch
from num2words import num2words

from tfm_lesson.data import (
    Batch, ParallelData, Vocab, batches, encode_batch, from_pairs, load_task, number_words, read_tsv, toy_pairs,
)


def assert_disjoint(data: ParallelData) -> None:
    splits = {name: {s for s, _ in data.split(name)} for name in ("train", "valid", "test")}
    for name, pairs in (("train", data.train), ("valid", data.valid), ("test", data.test)):
        assert len(splits[name]) == len(pairs), f"duplicate sources inside {name}"
    assert not splits["train"] & splits["valid"]
    assert not splits["train"] & splits["test"]
    assert not splits["valid"] & splits["test"]


# -- Vocab ------------------------------------------------------------------------------------------
def test_specials_have_fixed_ids():
    v = Vocab.build(["a b c"])
    assert v.itos[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.stoi[t] for t in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]
    assert len(v) == 7


def test_word_tokenizer_splits_punctuation_and_elision():
    v = Vocab()
    assert v.tokenize("L'homme n'a pas mangé.") == ["L'", "homme", "n'", "a", "pas", "mangé", "."]
    assert v.tokenize("quatre-vingt-un") == ["quatre", "-", "vingt", "-", "un"]
    assert v.tokenize("I don't know, it's 3.5!") == ["I", "don't", "know", ",", "it's", "3.5", "!"]
    assert Vocab(lower=True).tokenize("The Cat") == ["the", "cat"]


@pytest.mark.parametrize("text", [
    "L'homme n'a pas mangé la pomme.",
    "Les petites voitures rouges ne sont pas arrivées.",
    "The three small cats didn't sleep, did they?",
    "quatre-vingt-dix-neuf mille deux cent vingt et un",
    "Qu'est-ce que c'est?",
])
def test_encode_decode_round_trip(text):
    v = Vocab.build([text])
    ids = v.encode(text)
    assert ids[-1] == v.eos_id and v.unk_id not in ids
    assert v.decode(ids) == text
    assert v.encode(text, bos=True, eos=False)[0] == v.bos_id
    assert v.decode(v.encode(text, bos=True) + [v.pad_id] * 3) == text
    assert v.decode(v.encode(text), strip_special=False).endswith("</s>")


def test_unknown_words_and_decode_stops_at_eos():
    v = Vocab.build(["the cat sat"])
    ids = v.encode("the dog sat")
    assert ids == [v["the"], v.unk_id, v["sat"], v.eos_id]
    assert v.decode(ids) == "the <unk> sat"
    assert v.decode(torch.tensor([v["the"], v.eos_id, v["cat"]])) == "the"
    with pytest.raises(ValueError, match="out of range"):
        v.decode([len(v)])


def test_build_frequency_order_min_freq_max_size():
    texts = ["b a a c", "a b d"]
    v = Vocab.build(texts)
    assert v.itos[4:] == ["a", "b", "c", "d"]
    assert Vocab.build(texts, min_freq=2).itos[4:] == ["a", "b"]
    assert Vocab.build(texts, max_size=5).itos == ["<pad>", "<s>", "</s>", "<unk>", "a"]
    assert Vocab.build(list(reversed(texts))) == v  # order of texts does not matter
    with pytest.raises(ValueError, match="tokenizer"):
        Vocab.build(texts, tokenizer="bpe")


def test_chars_tokenizer_round_trip():
    v = Vocab.build(["hello world"], tokenizer="chars")
    assert v.tokenize("hi w") == ["h", "i", " ", "w"]
    assert v.decode(v.encode("hello world")) == "hello world"


def test_to_dict_is_json_and_restores():
    v = Vocab.build(["L'homme mange.", "Un chat."], lower=True)
    d = json.loads(json.dumps(v.to_dict()))
    w = Vocab.from_dict(d)
    assert w == v and w.itos == v.itos and w.stoi == v.stoi and w.lower and w.tokenizer == "words"
    assert w.encode("l'homme mange un chat.") == v.encode("l'homme mange un chat.")
    with pytest.raises(ValueError, match="specials"):
        Vocab.from_dict({"itos": ["a", "<pad>", "<s>", "</s>", "<unk>"]})


# -- toy tasks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_toy_tasks_targets_splits_and_determinism(task):
    data = load_task(task, seed=3, n_train=2000, n_valid=200, n_test=200, min_len=3, max_len=7, vocab_size=10)
    assert (len(data.train), len(data.valid), len(data.test)) == (2000, 200, 200)
    assert_disjoint(data)
    for src, tgt in data.train[:200] + data.test:
        seq = src.split()
        assert 3 <= len(seq) <= 7 and all(0 <= int(s) < 10 for s in seq)
        want = {"copy": seq, "reverse": seq[::-1], "sort": sorted(seq, key=int)}[task]
        assert tgt.split() == want
    assert len(data.src_vocab) == len(data.tgt_vocab) == 4 + 10
    again = load_task(task, seed=3, n_train=2000, n_valid=200, n_test=200, min_len=3, max_len=7, vocab_size=10)
    assert again.train == data.train and again.test == data.test and again.src_vocab == data.src_vocab
    other = load_task(task, seed=4, n_train=2000, n_valid=200, n_test=200, min_len=3, max_len=7, vocab_size=10)
    assert other.train != data.train


def test_toy_default_sizes_and_bad_arguments():
    data = load_task("reverse")
    assert (len(data.train), len(data.valid), len(data.test)) == (20000, 1000, 1000)
    assert_disjoint(data)
    with pytest.raises(ValueError, match="min_len"):
        toy_pairs("copy", 10, min_len=5, max_len=2)
    with pytest.raises(ValueError, match="task"):
        toy_pairs("shuffle", 10)
    with pytest.raises(ValueError, match="possible sequences"):
        toy_pairs("copy", 100, min_len=2, max_len=2, vocab_size=3)
    with pytest.raises(ValueError, match="task name"):
        load_task("nope")


# -- numbers --------------------------------------------------------------------------------------------
def test_number_words_match_num2words():
    rng = random.Random(0)
    values = [0, 1, 21, 71, 80, 81, 100, 101, 200, 1000, 1001, 2000, 21000, 80000, 80080, 200200, 999999]
    values += [rng.randrange(1_000_000) for _ in range(400)]
    values += [a * 1000 + b for a in (1, 71, 80, 81, 200, 280) for b in (0, 1, 80, 99, 100, 300)]
    for v in values:
        assert number_words(v, "en") == num2words(v, lang="en"), v
        assert number_words(v, "fr") == num2words(v, lang="fr"), v
    assert number_words(1_000_000, "fr") == num2words(1_000_000, lang="fr")


def test_numbers_task():
    data = load_task("numbers", seed=1, n_train=3000, n_valid=300, n_test=300)
    assert (len(data.train), len(data.valid), len(data.test)) == (3000, 300, 300)
    assert_disjoint(data)
    by_en = {num2words(v, lang="en"): v for v in range(0, 1000)}
    for src, tgt in data.test:
        assert data.tgt_vocab.decode(data.tgt_vocab.encode(tgt)) == tgt  # vocabulary writes them back exactly
    for src, tgt in data.train:  # check the small ones fully against num2words
        if src in by_en:
            assert tgt == num2words(by_en[src], lang="fr")
    again = load_task("numbers", seed=1, n_train=3000, n_valid=300, n_test=300)
    assert again.test == data.test
    small = load_task("numbers", n_train=80, n_valid=10, n_test=10, low=0, high=99)
    assert len({s for s, _ in small.train + small.valid + small.test}) == 100


# -- from_pairs / splits ------------------------------------------------------------------------------
def test_from_pairs_dedupes_and_splits_without_overlap():
    pairs = [(f"s{i % 500}", f"t{i}") for i in range(1000)]  # every source twice
    data = from_pairs(pairs, seed=0, valid=0.1, test=0.1)
    assert len(data.train) + len(data.valid) + len(data.test) == 500
    assert (len(data.valid), len(data.test)) == (50, 50)
    assert_disjoint(data)
    assert dict(data.train + data.valid + data.test)["s7"] == "t7"  # first pair of a source wins
    assert "t3" not in data.tgt_vocab.stoi or ("s3", "t3") in data.train  # vocab from train only
    for _, tgt in data.valid + data.test:
        assert tgt not in data.tgt_vocab
    assert from_pairs(pairs, seed=0, valid=0.1, test=0.1).train == data.train
    assert from_pairs(pairs, seed=1, valid=0.1, test=0.1).train != data.train
    with pytest.raises(ValueError, match="no training pairs"):
        from_pairs(pairs[:4], valid=2, test=2)
    with pytest.raises(ValueError, match="pairs\\[1\\]"):
        from_pairs([("a", "b"), ("c",)])


# -- batches --------------------------------------------------------------------------------------------
def _tiny():
    return from_pairs([("a b c", "x y"), ("a", "x y z w"), ("b c", "y"), ("c a b a", "z z"), ("b", "w x")],
                      valid=0, test=0)


def test_batch_shapes_padding_and_masks():
    data = _tiny()
    sv, tv = data.src_vocab, data.tgt_vocab
    pairs = [("a b c", "x y"), ("a", "x y z w")]
    (batch,) = list(batches(pairs, sv, tv, batch_size=2, shuffle=False))
    assert isinstance(batch, Batch) and batch.src.dtype == torch.long and batch.tgt.dtype == torch.long
    assert batch.src.shape == (2, 4) and batch.tgt.shape == (2, 6)
    assert batch.src.tolist() == [sv.encode("a b c"), sv.encode("a") + [0, 0]]
    assert batch.tgt[0].tolist() == [tv.bos_id] + tv.encode("x y") + [0, 0]
    assert batch.tgt[:, 0].eq(tv.bos_id).all()
    assert torch.equal(batch.tgt_in, batch.tgt[:, :-1]) and torch.equal(batch.tgt_out, batch.tgt[:, 1:])
    assert batch.n_tokens == 3 + 5  # "x y </s>" and "x y z w </s>"
    assert batch.src_mask.shape == (2, 1, 1, 4) and batch.src_mask.dtype == torch.bool
    assert batch.src_mask[1, 0, 0].tolist() == [True, True, False, False]
    assert batch.tgt_mask.shape == (2, 1, 5, 5)
    assert batch.tgt_in[0].tolist() == [tv.bos_id] + tv.encode("x y") + [0]  # <s> x y </s> <pad>
    assert batch.tgt_mask[0, 0].tolist()[4] == [True, True, True, True, False]  # causal, pad key hidden
    assert batch.tgt_mask[0, 0].tolist()[1] == [True, True, False, False, False]
    assert not batch.tgt_mask[1, 0].triu(1).any()
    assert batch.to("cpu").src.device.type == "cpu"


def test_batches_cover_everything_and_are_deterministic():
    data = load_task("copy", n_train=530, n_valid=10, n_test=10)
    args = (data.train, data.src_vocab, data.tgt_vocab)
    got = list(batches(*args, batch_size=64, seed=5))
    assert [len(b) for b in got] == [64] * 8 + [18]
    assert sum(int((b.src != 0).sum()) for b in got) == sum(len(s.split()) + 1 for s, _ in data.train)
    again = list(batches(*args, batch_size=64, seed=5))
    assert all(torch.equal(a.src, b.src) for a, b in zip(got, again))
    other = next(batches(*args, batch_size=64, seed=6))
    assert not torch.equal(other.src[:, :3], got[0].src[:, :3])
    assert len(list(batches(*args, batch_size=64, drop_last=True))) == 8
    srt = list(batches(*args, batch_size=64, sort_by_length=True))
    assert sum(b.src.numel() for b in srt) < sum(b.src.numel() for b in got)  # less padding
    decoded = sorted(data.src_vocab.decode(row) for b in srt for row in b.src)
    assert decoded == sorted(s for s, _ in data.train)  # same pairs, regrouped
    with pytest.raises(ValueError, match="batch_size"):
        next(batches(*args, batch_size=0))


def test_encode_batch():
    data = _tiny()
    ids = encode_batch(["a b", "c a b a", "zzz"], data.src_vocab)
    assert ids.shape == (3, 5) and ids.dtype == torch.long
    assert ids[2].tolist() == [data.src_vocab.unk_id, data.src_vocab.eos_id, 0, 0, 0]
    assert encode_batch("a", data.src_vocab).shape == (1, 2)


# -- TSV ------------------------------------------------------------------------------------------------
def test_read_tsv(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text(
        "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #1158250 (Wittydev)\n"
        "\n"
        "Hi.\tSalut !\n"
        "this line has no tab\n"
        "Run!\t\tattribution\n"
        "Who?\tQui ?\textra\tcolumns\r\n"
        "Hi.\tSalut.\n"
        "Élan.\tÉlan, ça va.\n",
        encoding="utf-8",
    )
    with pytest.warns(UserWarning, match="skipped 3"):
        pairs = read_tsv(path)
    assert pairs == [("Go.", "Va !"), ("Hi.", "Salut !"), ("Who?", "Qui ?"), ("Hi.", "Salut."),
                     ("Élan.", "Élan, ça va.")]
    assert read_tsv(path, max_pairs=2, warn=False) == pairs[:2]
    got, skipped = read_tsv(path, return_skipped=True, warn=False)
    assert skipped == 3 and got == pairs
    data = from_pairs(pairs, valid=1, test=1)
    assert len(data.train) + len(data.valid) + len(data.test) == 4  # "Hi." deduped
    assert_disjoint(data)


def test_read_tsv_refuses_other_encodings_naming_file_and_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("Go.\tVa !\nSummer.\t\u00c9t\u00e9.\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.tsv is not UTF-8 text: line 2 holds the byte 0xc9") as err:
        read_tsv(path)
    assert "iconv" in str(err.value) and err.value.__cause__ is None
    bom = tmp_path / "bom.tsv"
    bom.write_bytes("\ufeffGo.\tVa !\n".encode("utf-8"))  # a UTF-8 byte-order mark is fine
    assert read_tsv(bom) == [("Go.", "Va !")]
    with pytest.raises(ValueError, match="max_pairs"):
        read_tsv(bom, max_pairs=-1)


def test_from_pairs_drops_pairs_too_long_for_max_len():
    pairs = [(f"a{i} b{i}", f"x{i}") for i in range(20)]
    pairs.insert(5, (" ".join(["w"] * 9), "y"))  # 9 source tokens + </s> = 10 positions
    pairs.insert(9, ("z", " ".join(["v"] * 12)))  # 12 target tokens + <s> = 13 positions
    data = from_pairs(pairs, valid=2, test=2, max_len=10)
    assert data.info["too_long"] == 1 and len(data.train) + len(data.valid) + len(data.test) == 21
    data = from_pairs(pairs, valid=2, test=2, max_len=9)
    assert data.info["too_long"] == 2 and "w" not in data.src_vocab
    assert from_pairs(pairs, valid=2, test=2).info["too_long"] == 0
    with pytest.raises(ValueError, match="max_len must be an int >= 2"):
        from_pairs(pairs, max_len=1)
    with pytest.raises(ValueError, match=r"few.tsv: 2 distinct source sentence\(s\), 1 more too long"):
        from_pairs([("a", "b"), ("c", "d"), ("e f g h", "i")], valid=1, test=1, max_len=3, name="few.tsv")


def test_batches_start_and_shards_follow_batch_order():
    from tfm_lesson.data.batching import batch_order

    data = load_task("copy", n_train=90, n_valid=5, n_test=5, min_len=3, max_len=5, vocab_size=8)
    plan = batch_order(data.train, data.src_vocab, data.tgt_vocab, 16, seed=2)
    every = [b.src.tolist() for b in batches(data.train, data.src_vocab, data.tgt_vocab, 16, seed=2)]
    assert len(plan) == len(every) == 6
    assert [b.src.tolist() for b in batches(data.train, data.src_vocab, data.tgt_vocab, 16, seed=2, start=4)] \
        == every[4:]
    shards = [[b.src.tolist() for b in batches(data.train, data.src_vocab, data.tgt_vocab, 16, seed=2, rank=r,
                                                world_size=3)] for r in range(3)]
    assert shards == [every[0::3], every[1::3], every[2::3]]
    with pytest.raises(ValueError, match="rank must be < world_size"):
        next(batches(data.train, data.src_vocab, data.tgt_vocab, 16, rank=2, world_size=2))


def test_numbers_cover_every_magnitude():
    from tfm_lesson.data.numbers import draw_numbers, magnitudes

    assert magnitudes(0, 999_999) == [(0, 9), (10, 99), (100, 999), (1000, 9999), (10_000, 99_999),
                                      (100_000, 999_999)]
    assert magnitudes(5, 120) == [(5, 9), (10, 99), (100, 120)]
    values = draw_numbers(52_000, seed=0)
    assert len(set(values)) == 52_000 and all(0 <= v <= 999_999 for v in values)
    digits = [len(str(v)) for v in values]
    share = {d: digits.count(d) for d in range(1, 7)}
    # 1-4 digits hold 10,000 numbers, fewer than their share: taken whole; 5 and 6 digits split the rest
    assert (share[1], share[2], share[3], share[4]) == (10, 90, 900, 9000)
    for d in (5, 6):
        assert abs(share[d] - 42_000 / 2) < 500, share
    # a small draw: every magnitude about equally likely, small ones not yet exhausted
    small = [len(str(v)) for v in draw_numbers(600, seed=3)]
    for d in range(2, 7):
        assert 60 <= small.count(d) <= 160, [small.count(k) for k in range(1, 7)]
    # the whole range can be drawn, and the draw is deterministic
    assert sorted(draw_numbers(100, seed=1, low=0, high=99)) == list(range(100))
    assert draw_numbers(500, seed=2) == draw_numbers(500, seed=2)
    data = load_task("numbers", seed=0, n_train=3000, n_valid=100, n_test=100)
    assert sum(len(s.split()) == 1 for s, _ in data.train) > 80  # nearly all of 0..99 (one word each) are in
