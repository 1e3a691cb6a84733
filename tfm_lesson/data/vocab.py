"""Tokenisation and vocabularies with the four special tokens.

A :class:`Vocab` maps tokens to ids and back. Ids 0–3 are always the specials:
``<pad>`` (padding), ``<s>`` (begin of sentence), ``</s>`` (end of sentence), ``<unk>`` (unknown).

Two tokenisers:

* ``"words"`` splits punctuation off words and French elisions off the next word
  (``"l'homme."`` → ``["l'", "homme", "."]``), and hyphens inside words into their own token
  (``"vingt-deux"`` → ``["vingt", "-", "deux"]``), so compound numbers share their parts.
  :meth:`Vocab.decode` puts the spaces back: none before punctuation, none after ``l'``, none
  around ``-``.
* ``"chars"`` keeps every character, spaces included.

Case is kept unless ``lower=True``. :meth:`Vocab.normalize` gives the form a round trip through the
vocabulary produces (``decode(encode(text))``, unknown words aside): compare model outputs with
references in that form.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["Vocab", "PAD", "BOS", "EOS", "UNK", "SPECIALS", "tokenize_words", "detokenize_words"]

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
TOKENIZERS = ("words", "chars")

# One regex, tried left to right at each position:
#  1. a French elided word with its apostrophe: l' d' j' m' n' s' t' c' qu' jusqu' lorsqu' puisqu'
#     (only when a letter follows, so "l'" alone at the end of a quote stays punctuation);
#  2. a number with inner separators (3.5, 1,000, 12:30);
#  3. a word, possibly with inner apostrophes (don't, it's, aujourd'hui) — hyphens are split off;
#  4. any other single non-space character (punctuation, symbols, the hyphen).
_WORD_RE = re.compile(
    r"(?:\b(?:[cdjlmnst]|qu|jusqu|lorsqu|puisqu)['’](?=[^\W\d_]))"
    r"|(?:\d+(?:[.,:]\d+)+)"
    r"|(?:\w+(?:['’]\w+)*)"
    r"|(?:[^\w\s])",
    re.IGNORECASE,
)
# Tokens written with no space before them, and tokens written with no space after them.
_NO_SPACE_BEFORE = set(".,;:!?)]}%»…") | {"-", "'s", "n't"}
_NO_SPACE_AFTER = set("([{«-")


def tokenize_words(text: str, lower: bool = False) -> list[str]:
    """Split ``text`` into words and punctuation (see the module docstring)."""
    text = unicodedata.normalize("NFC", text).replace("’", "'")
    if lower:
        text = text.lower()
    return _WORD_RE.findall(text)


def _elided(token: str) -> bool:
    return len(token) > 1 and token.endswith("'") and token[:-1].isalpha()


def detokenize_words(tokens: Sequence[str]) -> str:
    """Join word tokens back into text: the inverse of :func:`tokenize_words` on normal text."""
    out: list[str] = []
    glue_next = True  # no space before the first token
    for tok in tokens:
        if out and not glue_next and tok not in _NO_SPACE_BEFORE:
            out.append(" ")
        out.append(tok)
        glue_next = tok in _NO_SPACE_AFTER or _elided(tok)
    return "".join(out)


class Vocab:
    """Token ↔ id mapping with ``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3.

    Build one from training texts with :meth:`Vocab.build`; save it with :meth:`to_dict` (plain JSON
    types, so a checkpoint loaded with ``weights_only=True`` can hold it) and restore with :meth:`from_dict`.
    """

    PAD, BOS, EOS, UNK = PAD, BOS, EOS, UNK
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str] = (), tokenizer: str = "words", lower: bool = False) -> None:
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {tokenizer!r}")
        self.tokenizer = tokenizer
        self.lower = bool(lower)
        self.itos: list[str] = list(SPECIALS)
        self.stoi: dict[str, int] = {tok: i for i, tok in enumerate(self.itos)}
        for tok in tokens:
            self.add(tok)

    # -- building ---------------------------------------------------------------------------------
    def add(self, token: str) -> int:
        """Add ``token`` if new; return its id."""
        if not isinstance(token, str) or token == "":
            raise ValueError(f"token must be a non-empty str, got {token!r}")
        if token not in self.stoi:
            self.stoi[token] = len(self.itos)
            self.itos.append(token)
        return self.stoi[token]

    @classmethod
    def build(cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None,
              tokenizer: str = "words", lower: bool = False) -> "Vocab":
        """Vocabulary of the tokens of ``texts`` seen at least ``min_freq`` times.

        Tokens are ordered by decreasing frequency, ties alphabetically, so the result does not depend on
        the order of ``texts``. ``max_size`` caps the size *including* the four specials.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        vocab = cls(tokenizer=tokenizer, lower=lower)
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(vocab.tokenize(text))
        for tok in SPECIALS:
            counts.pop(tok, None)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIALS)]
        for tok in ranked:
            vocab.add(tok)
        return vocab

    # -- text <-> tokens <-> ids ------------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        """Text → tokens (words and punctuation, or characters)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if self.tokenizer == "chars":
            text = unicodedata.normalize("NFC", text)
            return list(text.lower() if self.lower else text)
        return tokenize_words(text, lower=self.lower)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Tokens → text, with sensible spacing."""
        if self.tokenizer == "chars":
            return "".join(tokens)
        return detokenize_words(tokens)

    def normalize(self, text: str) -> str:
        """``text`` as a round trip through this vocabulary's tokeniser writes it."""
        return self.detokenize(self.tokenize(text))

    def encode(self, text: str, bos: bool = False, eos: bool = True) -> list[int]:
        """Text → ids; unknown tokens become ``unk_id``; optional ``<s>`` / ``</s>`` around it."""
        ids = [self.stoi.get(tok, self.unk_id) for tok in self.tokenize(text)]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> str:
        """Ids → text. Stops at the first ``</s>`` and drops ``<pad>``/``<s>`` when ``strip_special``.

        ``ids`` may be a list or a 1-D tensor. ``<unk>`` is kept (written ``<unk>``).
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        tokens: list[str] = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"id {i} out of range for a vocabulary of {len(self.itos)} tokens")
            if strip_special:
                if i == self.eos_id:
                    break
                if i in (self.pad_id, self.bos_id):
                    continue
            tokens.append(self.itos[i])
        return self.detokenize(tokens)

    # -- misc -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        return self.stoi.get(token, self.unk_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, tokenizer={self.tokenizer!r}, lower={self.lower})"

    def to_dict(self) -> dict:
        """Plain-JSON form: ``{"itos": [...], "tokenizer": ..., "lower": ...}``."""
        return {"itos": list(self.itos), "tokenizer": self.tokenizer, "lower": self.lower}

    @classmethod
    def from_dict(cls, d: dict) -> "Vocab":
        """Inverse of :meth:`to_dict`."""
        itos = list(d["itos"])
        if tuple(itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocab dict must start with the specials {SPECIALS}, got {itos[:4]}")
        if len(set(itos)) != len(itos):
            raise ValueError("vocab dict has duplicate tokens")
        vocab = cls(tokenizer=d.get("tokenizer", "words"), lower=d.get("lower", False))
        for tok in itos[len(SPECIALS):]:
            vocab.add(tok)
        return vocab
