"""A byte-level byte-pair-encoding (BPE) tokenizer, written from scratch (Sennrich et al. 2016; GPT-2, 2019).

    tok = BPETokenizer().train(text, vocab_size=512)
    ids = tok.encode("The cat sat.")          # list[int]
    tok.decode(ids) == "The cat sat."         # exact, for any Unicode string

**Byte-level.** Text is first turned into its UTF-8 bytes, so the 256 byte values are the starting
vocabulary (ids 0-255 are the bytes themselves): every string, in any script, with emoji, combining marks or
NUL, can be encoded, and nothing is ever "unknown".

**Training** repeats one step: count every pair of neighbouring tokens, take the most frequent pair
``(a, b)``, give it a new id ``256 + i``, and replace every occurrence of ``a b`` (left to right, so
``a a a`` becomes ``aa a``) by that id. Pair counts are updated incrementally: a merge only touches the
words that contain the pair, so training on a few hundred KB takes seconds in pure Python.
Ties between equally frequent pairs go to the smallest ``(rank(a), rank(b))``, where a byte's rank is its
value (``tie_break="bytes"``, the default) or its place in GPT-2's byte-to-character table
(``tie_break="hf"``, which reproduces the Hugging Face ``tokenizers`` trainer merge for merge); a merged
token's rank is its id.

**Pre-tokenisation.** Before counting, the text is split into chunks with GPT-2's regular expression
(a word with the space before it, a number, a run of punctuation, white space), and pairs are only counted
and merged *inside* a chunk. So no token spans two words ("e t" is never a token), the same word always
gets the same tokens wherever it stands, and training and encoding work on the distinct chunks only (a
corpus of English has a few thousand distinct words): that is what makes a pure-Python BPE fast.
``pattern=None`` turns the split off (the whole text is one chunk; fine for a short text).
The pattern is GPT-2's written for Python's ``re`` (``\\p{L}`` is ``[^\\W\\d_]``, ``\\p{N}`` is ``\\d``);
the two agree on ASCII and on most letters, and differ only on rare characters such as ``²``.

**Encoding** applies the learned merges in the order they were learned (lowest rank first) inside each
chunk; **decoding** concatenates the tokens' bytes and decodes UTF-8. ``decode(encode(s)) == s`` for every
``str``; an arbitrary id sequence (a model's sample) may cut a character in half: those bytes are shown as
U+FFFD (``errors="replace"``), never an exception.
"""
from __future__ import annotations

import heapq
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .._io import atomic_open

__all__ = ["BPETokenizer", "GPT2_PATTERN", "pretokenize", "merge_pair", "gpt2_byte_order", "train_hf_bpe", "hf_merges"]

# GPT-2's split ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+) for ``re``.
# ``_`` belongs to \w in ``re`` but is punctuation for GPT-2: it is added to the punctuation class.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
FORMAT = "tfm_lesson-bpe/1"
_CACHE_LIMIT = 200_000
#: Training cuts a pre-tokenised chunk longer than this many characters into pieces of at most this length, so
#: that text without spaces (one enormous chunk) costs time linear in its length, not length x merges.
MAX_TRAIN_CHUNK = 32
#: Texts longer than this (characters) print their training progress (``progress=None``).
PROGRESS_FROM = 1_000_000


def pretokenize(text: str, pattern: str | None = GPT2_PATTERN) -> list[str]:
    """The chunks BPE works inside. ``"".join(pretokenize(s)) == s`` for every string."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if pattern is None:
        return [text] if text else []
    return re.findall(pattern, text)


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right without overlaps:
    ``merge_pair([a, a, a], (a, a), X) == [X, a]``."""
    out: list[int] = []
    a, b = pair
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def gpt2_byte_order() -> list[int]:
    """The 256 byte values in the order of the characters GPT-2 shows them as (printable Latin-1 bytes stand
    for themselves; the others, space included, are moved to U+0100 and above). The Hugging Face
    ``tokenizers`` byte-level trainer numbers its initial alphabet in this order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return sorted(range(256), key=lambda b: chars[b])


def _check_ids(ids: object, vocab_size: int) -> list[int]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
    out = []
    for position, i in enumerate(ids):
        if hasattr(i, "item") and getattr(i, "ndim", 0) == 0:  # a 0-d tensor or numpy integer
            i = i.item()
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"ids[{position}] is {i!r} ({type(i).__name__}); token ids must be ints")
        if not 0 <= i < vocab_size:
            raise ValueError(f"ids[{position}] = {i} is not a token id: this tokenizer has ids 0..{vocab_size - 1}")
        out.append(i)
    return out


def _check_training(text: str, vocab_size: int, min_frequency: int, tie_break: str) -> None:
    """The arguments of :meth:`BPETokenizer.train`: a TypeError or ValueError naming the wrong one."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    if vocab_size < 256:
        raise ValueError(f"vocab_size must be at least 256 (the byte alphabet), got {vocab_size}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"min_frequency must be a positive int, got {min_frequency!r}")
    if tie_break not in ("bytes", "hf"):
        raise ValueError(f"tie_break must be 'bytes' or 'hf', got {tie_break!r}")


def _pair_rank(tie_break: str) -> Callable[[int], int]:
    """A token's place among equally frequent pairs: a byte by its value ("bytes") or by GPT-2's byte order
    ("hf"); a merged token by its id."""
    byte_rank = list(range(256))
    if tie_break == "hf":
        for position, b in enumerate(gpt2_byte_order()):
            byte_rank[b] = position

    def rank(t: int) -> int:
        return byte_rank[t] if t < 256 else t

    return rank


class _PairIndex:
    """What training keeps up to date between merges: each distinct chunk's tokens and how often it occurs, each
    neighbouring pair's count (weighted by those frequencies) and the chunks that hold it, and a heap of the counts
    (most frequent first, ties to the lowest ranks; an entry whose count has changed since is skipped)."""

    def __init__(self, counts: Counter, rank: Callable[[int], int]) -> None:
        self.rank = rank
        self.words = [list(chunk.encode("utf-8")) for chunk in counts]  # each distinct chunk once ...
        self.freqs = list(counts.values())  # ... with how often it occurs
        self.pair_counts: Counter = Counter()
        self.where: dict[tuple[int, int], set[int]] = {}
        for w, (ids, f) in enumerate(zip(self.words, self.freqs)):
            for pair in zip(ids, ids[1:]):
                self.pair_counts[pair] += f
                self.where.setdefault(pair, set()).add(w)
        self.heap = [(-c, rank(a), rank(b), (a, b)) for (a, b), c in self.pair_counts.items()]
        heapq.heapify(self.heap)

    def _push(self, pair: tuple[int, int], count: int) -> None:
        heapq.heappush(self.heap, (-count, self.rank(pair[0]), self.rank(pair[1]), pair))

    def pop_most_frequent(self) -> tuple[tuple[int, int], int] | None:
        """The most frequent pair and its count, taken off the heap; None when no pair is left."""
        while self.heap:
            neg, _, _, pair = heapq.heappop(self.heap)
            current = self.pair_counts.get(pair, 0)
            if current == -neg:
                return pair, current
            if current > 0:  # a stale entry: the count changed since it was pushed
                self._push(pair, current)
        return None

    def merge(self, pair: tuple[int, int], new_id: int) -> None:
        """Replace ``pair`` by ``new_id`` in every chunk that holds it, and update the counts it changes."""
        changed: set[tuple[int, int]] = set()
        for w in sorted(self.where.pop(pair, ())):
            ids, f = self.words[w], self.freqs[w]
            if len(ids) < 2:
                continue
            merged = merge_pair(ids, pair, new_id)
            if len(merged) == len(ids):  # stale: this word no longer holds the pair
                continue
            for p in zip(ids, ids[1:]):  # take the old word's pairs out ...
                self.pair_counts[p] -= f
                changed.add(p)
            for p in zip(merged, merged[1:]):  # ... and put the new word's in
                self.pair_counts[p] += f
                self.where.setdefault(p, set()).add(w)
                changed.add(p)
            self.words[w] = merged
        self.pair_counts.pop(pair, None)
        for p in changed:
            c = self.pair_counts.get(p, 0)
            if c > 0:
                self._push(p, c)
            else:
                self.pair_counts.pop(p, None)


class BPETokenizer:
    """Byte-level BPE. ``merges[i] = (a, b)`` made token ``256 + i``; ``vocab[id]`` is a token's bytes."""

    def __init__(self, merges: Sequence[tuple[int, int]] = (), pattern: str | None = GPT2_PATTERN) -> None:
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be a regular expression (str) or None, got {type(pattern).__name__}")
        self.pattern = pattern
        self._regex = re.compile(pattern) if pattern is not None else None
        self.merges: list[tuple[int, int]] = []
        self.vocab: list[bytes] = [bytes([b]) for b in range(256)]
        self.ranks: dict[tuple[int, int], int] = {}
        for pair in merges:
            self._add_merge(tuple(pair))
        self._cache: dict[str, list[int]] = {}

    # ---------------------------------------------------------------------------------------------- basics
    def _add_merge(self, pair: tuple[int, int]) -> int:
        if len(pair) != 2 or not all(isinstance(t, int) and not isinstance(t, bool) for t in pair):
            raise ValueError(f"a merge must be a pair of token ids, got {pair!r}")
        a, b = pair
        if not (0 <= a < len(self.vocab) and 0 <= b < len(self.vocab)):
            raise ValueError(f"merge {pair} names a token that does not exist yet (ids 0..{len(self.vocab) - 1})")
        if pair in self.ranks:
            raise ValueError(f"merge {pair} appears twice")
        new_id = len(self.vocab)
        self.ranks[pair] = len(self.merges)
        self.merges.append(pair)
        self.vocab.append(self.vocab[a] + self.vocab[b])
        return new_id

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        split = "GPT-2 split" if self.pattern == GPT2_PATTERN else ("no split" if self.pattern is None else "custom split")
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, {split})"

    def chunks(self, text: str) -> list[str]:
        """The pre-tokenised pieces of ``text`` (see :func:`pretokenize`)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if self._regex is None:
            return [text] if text else []
        return self._regex.findall(text)

    # ------------------------------------------------------------------------------------------- training
    def train(self, text: str, vocab_size: int, min_frequency: int = 2, tie_break: str = "bytes",
              verbose: bool = False, progress: bool | None = None) -> "BPETokenizer":
        """Learn ``vocab_size - 256`` merges from ``text`` (fewer if no pair occurs ``min_frequency`` times).

        Replaces any merges learned before. Returns ``self``. With a split pattern, a chunk longer than
        :data:`MAX_TRAIN_CHUNK` characters (a run of text without spaces) is cut into pieces of that length, so
        no merge is learned across the cuts and training stays near-linear in the text's length.
        ``progress``: print a line every tenth of the merges to stderr (``None``: for texts longer than
        :data:`PROGRESS_FROM` characters); ``verbose`` prints every merge.
        """
        _check_training(text, vocab_size, min_frequency, tie_break)
        self.merges, self.vocab, self.ranks, self._cache = [], [bytes([b]) for b in range(256)], {}, {}
        rank = _pair_rank(tie_break)
        counts = Counter(self._training_pieces(text))
        show = len(text) > PROGRESS_FROM if progress is None else bool(progress)
        wanted = vocab_size - 256
        if show:
            print(f"BPE: {len(text):,} characters in {len(counts):,} distinct chunks; learning {wanted} merges",
                  file=sys.stderr, flush=True)
        index = _PairIndex(counts, rank)
        while len(self.vocab) < vocab_size:
            best = index.pop_most_frequent()
            if best is None:
                break
            pair, count = best
            if count < min_frequency:
                break
            new_id = self._add_merge(pair)
            if show and wanted >= 10 and len(self.merges) % (wanted // 10) == 0:
                print(f"BPE: {len(self.merges)}/{wanted} merges", file=sys.stderr, flush=True)
            if verbose:
                print(f"merge {len(self.merges):4d}: {self.vocab[pair[0]]!r} + {self.vocab[pair[1]]!r} "
                      f"-> {new_id} ({count} times)")
            index.merge(pair, new_id)
        return self

    def _training_pieces(self, text: str) -> list[str]:
        """The chunks training counts in: with a split pattern, none longer than :data:`MAX_TRAIN_CHUNK`."""
        pieces = self.chunks(text)
        if self._regex is not None:
            pieces = [c[i: i + MAX_TRAIN_CHUNK] for c in pieces for i in range(0, len(c), MAX_TRAIN_CHUNK)]
        return pieces

    # ------------------------------------------------------------------------------------ encode / decode
    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = list(chunk.encode("utf-8"))
        ranks = self.ranks
        while len(ids) > 1:
            best = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, len(ranks)))
            if best not in ranks:
                break  # no learned merge applies any more
            ids = merge_pair(ids, best, 256 + ranks[best])
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[chunk] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """``text`` -> token ids."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__} (decode bytes to str first)")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate such as "\ud800": no UTF-8 bytes exist for it
            raise ValueError(f"text cannot be encoded: position {exc.start} holds {text[exc.start]!r}, which has "
                             "no UTF-8 bytes (a lone surrogate); remove it or read the file with errors='replace'"
                             ) from None
        out: list[int] = []
        for chunk in self.chunks(text):
            out.extend(self._encode_chunk(chunk))
        return out

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Token ids -> the bytes they stand for."""
        vocab = self.vocab
        return b"".join(vocab[i] for i in _check_ids(ids, len(vocab)))

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text; a character cut in half by the ids is shown as U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` its tokens stand for (each decoded alone; handy to print)."""
        return [self.vocab[i].decode("utf-8", errors="replace") for i in self.encode(text)]

    # -------------------------------------------------------------------------------------------- storing
    def to_dict(self) -> dict:
        return {"format": FORMAT, "pattern": self.pattern, "merges": [list(p) for p in self.merges]}

    @classmethod
    def from_dict(cls, data: object) -> "BPETokenizer":
        if not isinstance(data, dict) or data.get("format") != FORMAT or "merges" not in data:
            raise ValueError(f"not a saved BPETokenizer (expected a dict with format {FORMAT!r} and merges)")
        return cls([tuple(p) for p in data["merges"]], pattern=data.get("pattern"))

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer as JSON, atomically (a temporary file, then a rename)."""
        path = Path(path)
        with atomic_open(path, "w") as f:
            json.dump(self.to_dict(), f)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BPETokenizer":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer file at {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a saved BPETokenizer: {exc}") from exc
        return cls.from_dict(data)


# ------------------------------------------------------------------------------ Hugging Face, for comparison
def train_hf_bpe(text: str, vocab_size: int, min_frequency: int = 2, special_tokens: Sequence[str] = ()):
    """The Hugging Face ``tokenizers`` byte-level BPE trained on ``text`` with the settings that match
    :meth:`BPETokenizer.train`: GPT-2's split (``ByteLevel(add_prefix_space=False)``), all 256 bytes in the
    initial alphabet, the same ``vocab_size`` and ``min_frequency``. Returns a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=list(special_tokens))
    hf.train_from_iterator([text], trainer)
    return hf


def hf_merges(hf) -> list[tuple[bytes, bytes]]:
    """A ``tokenizers`` BPE's merges as pairs of byte strings (it stores them as GPT-2 characters, one printable
    character standing for each byte), comparable with ``[(tok.vocab[a], tok.vocab[b]) for a, b in tok.merges]``."""
    order = gpt2_byte_order()
    shown = {b: chr(b) for b in order if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255}
    for i, b in enumerate(b for b in range(256) if b not in shown):
        shown[b] = chr(256 + i)
    byte_of = {c: b for b, c in shown.items()}
    merges = json.loads(hf.to_str())["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ") for m in merges]
    return [(bytes(byte_of[c] for c in a), bytes(byte_of[c] for c in b)) for a, b in pairs]
