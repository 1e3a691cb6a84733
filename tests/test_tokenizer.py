"""The byte-level BPE tokenizer: exact round trips, merges done right, clear errors, saved and loaded, fast,
and equal to the Hugging Face ``tokenizers`` trainer where the two algorithms agree."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfm_lesson.data.corpus import load_corpus
from tfm_lesson.data.tokenizer import GPT2_PATTERN, BPETokenizer, gpt2_byte_order, merge_pair, pretokenize

SMALL = "the cat sat on the mat. the cat ate the rat! 12 cats, 345 rats; the_end\n" * 20


@pytest.fixture(scope="module")
def english() -> str:
    return load_corpus().train[:150_000]


@pytest.fixture(scope="module")
def trained(english) -> BPETokenizer:
    return BPETokenizer().train(english, 512)


# ------------------------------------------------------------------------------------------- round trip
HARD = ["", "\x00", "a\x00b", "é", "e\u0301", "👩‍👩‍👧", "🇫🇷", "  leading and trailing  ", "\n\n\t",
        "mixed 日本語 and русский", "don't you'll I'm", "a_b__c", "²³ Ⅻ ٣", "\ud7ff\ue000\U0010ffff", "\r\n"]


@pytest.mark.parametrize("text", HARD)
def test_round_trip_on_hard_strings(trained, text):
    ids = trained.encode(text)
    assert trained.decode(ids) == text
    assert all(isinstance(i, int) and 0 <= i < trained.vocab_size for i in ids)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_on_any_text(trained, text):
    assert "".join(pretokenize(text)) == text  # the split loses nothing
    assert trained.decode(trained.encode(text)) == text


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=300), st.integers(256, 320), st.sampled_from([GPT2_PATTERN, None]))
def test_trained_on_any_text_round_trips(text, vocab_size, pattern):
    tok = BPETokenizer(pattern=pattern).train(text, vocab_size, min_frequency=1)
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(text)) <= len(text.encode("utf-8"))  # merges only ever shorten


def test_untrained_tokenizer_is_plain_bytes():
    tok = BPETokenizer()
    assert tok.vocab_size == 256 and tok.encode("hé") == list("hé".encode("utf-8"))


def test_decode_of_a_cut_character_is_replacement_not_an_error():
    tok = BPETokenizer()
    ids = tok.encode("é")  # two bytes
    assert tok.decode(ids[:1]) == "\ufffd"


# ------------------------------------------------------------------------------------------- merging
def test_merge_pair_scans_left_to_right_without_overlap():
    assert merge_pair([1, 1, 1], (1, 1), 9) == [9, 1]
    assert merge_pair([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert merge_pair([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3]
    assert merge_pair([2, 1], (1, 2), 9) == [2, 1]  # order matters: (2, 1) is not (1, 2)
    assert merge_pair([], (1, 2), 9) == []


def test_first_merge_is_the_most_frequent_pair():
    tok = BPETokenizer(pattern=None).train("aaabdaaabac", 259, min_frequency=1)
    # the classic example: "aa" (4 times) first, then "aa"+"a"... every merge is the most frequent pair
    assert tok.vocab[256] == b"aa"
    assert tok.decode(tok.encode("aaabdaaabac")) == "aaabdaaabac"


def _slow_train(text: str, vocab_size: int, min_frequency: int = 2) -> list[tuple[bytes, bytes]]:
    """The textbook algorithm: recount every pair after every merge (the incremental trainer must match)."""
    words = [list(c.encode("utf-8")) for c in pretokenize(text)]
    vocab = [bytes([b]) for b in range(256)]
    merges = []
    while len(vocab) < vocab_size:
        counts: dict = {}
        for w in words:
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        if counts[pair] < min_frequency:
            break
        merges.append((vocab[pair[0]], vocab[pair[1]]))
        vocab.append(vocab[pair[0]] + vocab[pair[1]])
        words = [merge_pair(w, pair, len(vocab) - 1) for w in words]
    return merges


@pytest.mark.parametrize("text", [SMALL, "aaaa aaaa aaa bbbaaa abab ababab", "ééé üü ééé 🙂🙂 🙂🙂🙂"])
def test_incremental_counts_equal_recounting_everything(text):
    tok = BPETokenizer().train(text, 300, min_frequency=1)
    assert [(tok.vocab[a], tok.vocab[b]) for a, b in tok.merges] == _slow_train(text, 300, min_frequency=1)


def test_pretokenisation_keeps_merges_inside_words():
    tok = BPETokenizer().train(SMALL, 400)
    assert all(not (t.strip(b" ") and b" " in t.strip(b" ")) for t in tok.vocab)  # no token holds "word word"
    glued = BPETokenizer(pattern=None).train(SMALL, 400)
    assert any(b" " in t.strip(b" ") for t in glued.vocab[256:])  # without the split, merges cross words


def test_min_frequency_stops_training():
    tok = BPETokenizer().train("abc abd", 1000, min_frequency=2)
    assert tok.vocab[256:] == [b"ab"]  # "ab" occurs twice; every other pair once
    assert BPETokenizer().train("abc abd", 1000, min_frequency=1).vocab[256:] == [b"ab", b" ab", b"abc", b" abd"]


def test_training_is_deterministic_and_replaces_old_merges(english):
    a = BPETokenizer().train(english[:20_000], 300)
    b = BPETokenizer().train("zzzz zzzz", 300).train(english[:20_000], 300)
    assert a.merges == b.merges


def test_training_a_few_hundred_kb_takes_seconds(english):
    start = time.perf_counter()
    tok = BPETokenizer().train(english, 1024)
    seconds = time.perf_counter() - start
    assert len(tok.merges) == 768
    assert seconds < 20, f"training on {len(english)} characters took {seconds:.1f} s"


def test_bpe_compresses_english(trained, english):
    text = english[-20_000:]
    assert len(trained.encode(text)) < 0.5 * len(text.encode("utf-8"))


# ------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad, error, words", [
    (255, ValueError, "at least 256"), (0, ValueError, "at least 256"), ("512", TypeError, "vocab_size"),
    (512.0, TypeError, "vocab_size"), (True, TypeError, "vocab_size")])
def test_bad_vocab_size(bad, error, words):
    with pytest.raises(error, match=words):
        BPETokenizer().train("some text", bad)


@pytest.mark.parametrize("bad", [b"bytes", None, 3, ["a", "b"]])
def test_encode_and_train_take_only_str(bad):
    with pytest.raises(TypeError, match="str"):
        BPETokenizer().encode(bad)
    with pytest.raises(TypeError, match="str"):
        BPETokenizer().train(bad, 300)


@pytest.mark.parametrize("ids, error, words", [
    ([0, 256], ValueError, r"ids\[1\] = 256 .* 0\.\.255"), ([-1], ValueError, r"ids\[0\] = -1"),
    ([1.5], TypeError, r"ids\[0\]"), ("abc", TypeError, "sequence of ints"), ([True], TypeError, "ints")])
def test_decode_rejects_unknown_ids(ids, error, words):
    with pytest.raises(error, match=words):
        BPETokenizer().decode(ids)


def test_decode_accepts_tensor_ids():
    import torch

    tok = BPETokenizer()
    assert tok.decode(torch.tensor(tok.encode("hi"))) == "hi"


def test_bad_options():
    with pytest.raises(ValueError, match="min_frequency"):
        BPETokenizer().train("aa", 300, min_frequency=0)
    with pytest.raises(ValueError, match="tie_break"):
        BPETokenizer().train("aa", 300, tie_break="random")
    with pytest.raises(ValueError, match="does not exist"):
        BPETokenizer(merges=[(300, 1)])


# ------------------------------------------------------------------------------------------- storing
def test_save_and_load(trained, tmp_path, english):
    path = trained.save(tmp_path / "sub" / "tok.json")
    loaded = BPETokenizer.load(path)
    assert loaded.merges == trained.merges and loaded.pattern == trained.pattern
    assert loaded.encode(english[:5000]) == trained.encode(english[:5000])
    assert [p.name for p in path.parent.iterdir()] == ["tok.json"]  # no temporary file left behind


def test_save_is_atomic(trained, tmp_path, monkeypatch):
    path = trained.save(tmp_path / "tok.json")
    before = path.read_text()

    def broken_dump(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        BPETokenizer().save(path)
    assert path.read_text() == before  # the old file is intact ...
    assert [p.name for p in tmp_path.iterdir()] == ["tok.json"]  # ... and no temporary file is left


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        BPETokenizer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a saved BPETokenizer"):
        BPETokenizer.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"model": {}}')
    with pytest.raises(ValueError, match="not a saved BPETokenizer"):
        BPETokenizer.load(tmp_path / "other.json")


# ------------------------------------------------------------------------------ Hugging Face tokenizers
tokenizers = pytest.importorskip("tokenizers")


def _hf_train(text: str, vocab_size: int, min_frequency: int = 2, special_tokens: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=list(special_tokens))
    hf.train_from_iterator([text], trainer)
    return hf


def _hf_merges(hf) -> list[tuple[bytes, bytes]]:
    """HF stores merges as pairs of GPT-2 characters (a byte shown as a printable character)."""
    order = gpt2_byte_order()
    printable = [b for b in order if b in range(33, 127) or b in range(161, 173) or b in range(174, 256)]
    char_of = {b: chr(b) for b in printable}
    for i, b in enumerate(b for b in order if b not in char_of):
        char_of[b] = chr(256 + i)
    byte_of = {c: b for b, c in char_of.items()}
    merges = json.loads(hf.to_str())["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    return [(bytes(byte_of[c] for c in a), bytes(byte_of[c] for c in b)) for a, b in pairs]


def _mine(tok) -> list[tuple[bytes, bytes]]:
    return [(tok.vocab[a], tok.vocab[b]) for a, b in tok.merges]


def test_hf_tie_break_reproduces_tokenizers_merge_for_merge(english):
    text = english[:100_000]
    hf = _hf_train(text, 800)
    ours = BPETokenizer().train(text, 800, tie_break="hf")
    assert _mine(ours) == _hf_merges(hf)
    held_out = english[-10_000:]
    assert len(ours.encode(held_out)) == len(hf.encode(held_out).ids)
    assert ours.tokens(held_out[:500]) == [hf.decode([i]) for i in hf.encode(held_out[:500]).ids]


def test_byte_order_tie_break_differs_only_on_ties(english):
    """With the default tie-break the merges part ways at the first tie between pairs that the two orders
    rank differently; the pair each picks there is equally frequent."""
    text = english[:100_000]
    hf_merges = _hf_merges(_hf_train(text, 800))
    ours = _mine(BPETokenizer().train(text, 800))
    first = next(i for i, (a, b) in enumerate(zip(ours, hf_merges)) if a != b)
    assert ours[:first] == hf_merges[:first] and first > 10
    before = BPETokenizer(merges=BPETokenizer().train(text, 256 + first).merges)
    words = [before.encode(c) for c in pretokenize(text)]

    def count(pair_bytes):
        a, b = (before.vocab.index(x) for x in pair_bytes)
        return sum(1 for w in words for p in zip(w, w[1:]) if p == (a, b))

    assert count(ours[first]) == count(hf_merges[first])  # a tie, broken two ways
    assert len(set(ours) ^ set(hf_merges)) <= 0.05 * len(ours)  # and the vocabularies stay almost the same


def test_min_frequency_and_special_tokens_shift_hf(english):
    text = english[:30_000]
    ours = BPETokenizer().train(text, 600, tie_break="hf")
    with_special = _hf_train(text, 600, special_tokens=("<|endoftext|>",))
    assert with_special.token_to_id("<|endoftext|>") == 0  # special tokens take the first ids ...
    assert _hf_merges(with_special) == _mine(ours)[:-1]  # ... and one place of the vocabulary
    rare = BPETokenizer().train(text, 100_000, min_frequency=5, tie_break="hf")
    assert _mine(rare) == _hf_merges(_hf_train(text, 100_000, min_frequency=5))


def test_package_helpers_match_this_test(english):
    from tfm_lesson.data.tokenizer import hf_merges, train_hf_bpe

    text = english[:30_000]
    hf = train_hf_bpe(text, 500)
    assert hf_merges(hf) == _hf_merges(_hf_train(text, 500))
    assert hf_merges(hf) == _mine(BPETokenizer().train(text, 500, tie_break="hf"))


# --- issue 22: text without spaces trains in near-linear time, with progress -----------------------------------------
def test_long_chunks_are_cut_for_training_and_progress_is_shown(capsys):
    from tfm_lesson.data.tokenizer import MAX_TRAIN_CHUNK, BPETokenizer as BPE
    text = "abcdefghij" * 40  # one chunk of 400 characters under the GPT-2 split
    tok = BPE().train(text, 300, progress=True)
    err = capsys.readouterr().err
    assert "BPE: 400 characters" in err and "merges" in err
    assert max(len(t) for t in tok.vocab) <= MAX_TRAIN_CHUNK  # no token spans a cut
    assert tok.decode(tok.encode(text)) == text
    BPE().train(text, 300)  # short text: silent by default
    assert capsys.readouterr().err == ""
