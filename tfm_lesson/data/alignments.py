"""Gold word alignments for the generated English → French sentence pairs.

The generator knows which clause each pair was realised from, so it knows which English word each French
word translates. :func:`align_clause` finds that out again from the two sentences and the clause: it
realises each noun phrase on its own with pyRealB, finds it in the sentence, and pairs its parts
(determiner with determiner, each adjective with itself, noun with noun, wherever French puts them); then
the preposition, the time adverb, the subject pronoun, the attribute of *be*, the verb group and the final
punctuation. Links follow Och & Ney (2003): **sure** ones (``S``) where a word translates a word
(*cars* — *voitures*, *not* — *pas*), **possible** ones (``P``, with ``S ⊆ P``) where words only translate
together (*did not arrive* — *ne sont pas arrivées*: every pair of the two verb groups is possible).
A word with no counterpart (French *des* before a bare English plural) has no link.

Indices count tokens of :func:`tfm_lesson.data.vocab.tokenize_words` (the ``"words"`` tokeniser of the
chapters' vocabularies), and each link is ``(target, source)`` = ``(French index, English index)``.

Example::

    pairs = generate_aligned(3, seed=0)      # the same pairs as generate_sentences(3, seed=0)
    pairs[0].en_tokens, pairs[0].fr_tokens, sorted(pairs[0].sure)
"""
from __future__ import annotations

import contextlib
import io
import random
from dataclasses import dataclass, field

from .lexicon import LIGATURES, PRONOUNS, TIME_ADVERBS
from .sentences import Clause, NPSpec, _np, realize, sample_clause
from .vocab import tokenize_words

__all__ = ["AlignedPair", "align_clause", "generate_aligned"]

_PUNCT = {".", "?", "!", ","}
_FR_PRONOUNS = {p[1] for p in PRONOUNS} | {"j'", "elles", "il", "elle", "ils"}
_EN_PRONOUNS = {p[0].lower() for p in PRONOUNS}
_FUSED = {"au": "le", "aux": "les"}  # French à + le, à + les


@dataclass(frozen=True)
class AlignedPair:
    """One sentence pair, its tokens and its gold alignment as sets of ``(target, source)`` index pairs."""

    en: str
    fr: str
    en_tokens: tuple[str, ...]
    fr_tokens: tuple[str, ...]
    sure: frozenset[tuple[int, int]]
    possible: frozenset[tuple[int, int]]  # contains ``sure``

    def __iter__(self):  # unpacks like the (en, fr) pairs of generate_sentences
        return iter((self.en, self.fr))


def _np_tokens(spec: NPSpec, lang: str, negated_object: bool = False) -> list[str]:
    from pyrealb import loadEn, loadFr

    (loadEn if lang == "en" else loadFr)()
    text = _np(spec, lang, negated_object).realize().strip()
    for plain, ligature in LIGATURES.items():
        text = text.replace(plain, ligature)
    return [t.lower() for t in tokenize_words(text)]


def _find(tokens: list[str], part: list[str], start: int, taken: set[int]) -> int:
    """Index of the first occurrence of ``part`` in ``tokens`` at or after ``start`` on free positions, or -1."""
    for i in range(start, len(tokens) - len(part) + 1):
        if tokens[i:i + len(part)] == part and not taken.intersection(range(i, i + len(part))):
            return i
    return -1


def _np_parts(spec: NPSpec, n_tokens: int, lang: str) -> dict[str, list[int]]:
    """Offsets inside a realised noun phrase: ``det``, ``noun``, and one key per adjective."""
    n_adj = len(spec.adjectives)
    if lang == "en":
        order = [("adj", a) for a in spec.adjectives] + [("noun", None)]
    else:
        order = ([("adj", a) for a in spec.adjectives if a.before] + [("noun", None)]
                 + [("adj", a) for a in spec.adjectives if not a.before])
    n_det = n_tokens - (n_adj + 1)
    if n_det < 0:
        raise ValueError(f"noun phrase of {n_tokens} tokens cannot hold {n_adj} adjectives and a noun")
    parts: dict[str, list[int]] = {"det": list(range(n_det))}
    for k, (kind, adj) in enumerate(order):
        parts["noun" if kind == "noun" else f"adj:{adj.en}"] = [n_det + k]
    return parts


def _link_all(sure: set, possible: set, fr: list[int], en: list[int], sure_if_single: bool = True) -> None:
    for f in fr:
        for e in en:
            possible.add((f, e))
    if sure_if_single and len(fr) == 1 and len(en) == 1:
        sure.add((fr[0], en[0]))


@dataclass
class _Links:
    """The alignment being built: both sentences' tokens, the links so far, and the positions already explained."""

    en_tok: list[str]
    fr_tok: list[str]
    sure: set[tuple[int, int]] = field(default_factory=set)
    possible: set[tuple[int, int]] = field(default_factory=set)
    en_taken: set[int] = field(default_factory=set)
    fr_taken: set[int] = field(default_factory=set)
    en_low: list[str] = field(init=False)  # the tokens lower-cased, as noun phrases are found
    fr_low: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.en_low, self.fr_low = [t.lower() for t in self.en_tok], [t.lower() for t in self.fr_tok]

    def link(self, fr: list[int], en: list[int], sure_if_single: bool = True) -> None:
        """Every pair of ``fr`` and ``en`` possible; sure when each side is one word (and ``sure_if_single``)."""
        _link_all(self.sure, self.possible, fr, en, sure_if_single)

    def frozen(self) -> tuple[frozenset, frozenset]:
        """The sure links and the possible ones (which contain the sure ones)."""
        return frozenset(self.sure), frozenset(self.possible | self.sure)


def _noun_phrases(clause: Clause) -> list[tuple[NPSpec, bool]]:
    """The clause's noun phrases in sentence order (subject, object, place), each with "is it a negated object"."""
    nps = [(clause.subject, False)] if isinstance(clause.subject, NPSpec) else []
    nps += [(clause.obj, clause.neg)] if clause.obj is not None else []
    nps += [(clause.place, False)] if clause.place is not None else []
    return nps


def _find_french(links: _Links, f_part: list[str], start: int) -> tuple[int, int | None]:
    """Where the French noun phrase starts, and the position of "au"/"aux" when it is written fused with "à"."""
    f_at = _find(links.fr_low, f_part, start, links.fr_taken)
    if f_at < 0 and f_part and f_part[0] in _FUSED.values():  # "à le marché" is written "au marché"
        for short, det in _FUSED.items():
            if f_part[0] == det:
                f_at = _find(links.fr_low, [short] + f_part[1:], start, links.fr_taken)
                if f_at >= 0:
                    return f_at, f_at
    return f_at, None


def _link_preposition(links: _Links, e_at: int, f_at: int, fused: int | None) -> None:
    """The preposition just before the place: "to" with "à" (or with the fused "au", which is "to" and "the")."""
    e_prep = e_at - 1 if e_at > 0 and (e_at - 1) not in links.en_taken else None
    if fused is not None and e_prep is not None:
        links.link([fused], [e_prep])  # "au" is "to" and "the" at once
        links.en_taken.add(e_prep)
    elif f_at > 0 and (f_at - 1) not in links.fr_taken and e_prep is not None:
        links.link([f_at - 1], [e_prep])
        links.en_taken.add(e_prep)
        links.fr_taken.add(f_at - 1)


def _align_noun_phrases(clause: Clause, links: _Links, en: str, fr: str) -> list[int]:
    """Link each noun phrase part by part (and the place's preposition); returns the subject noun's English
    positions (empty when the subject is a pronoun)."""
    en_start = fr_start = 0
    subject_noun: list[int] = []
    for spec, negated in _noun_phrases(clause):
        e_part, f_part = _np_tokens(spec, "en"), _np_tokens(spec, "fr", negated)
        e_at = _find(links.en_low, e_part, en_start, links.en_taken)
        f_at, fused = _find_french(links, f_part, fr_start)
        if e_at < 0 or f_at < 0:
            raise ValueError(f"noun phrase {' '.join(e_part)!r} / {' '.join(f_part)!r} not found in "
                             f"{en!r} / {fr!r}")
        e_parts, f_parts = _np_parts(spec, len(e_part), "en"), _np_parts(spec, len(f_part), "fr")
        for key, f_off in f_parts.items():
            e_idx = [e_at + o for o in e_parts.get(key, [])]
            links.link([f_at + o for o in f_off], e_idx)
        if spec is clause.subject:
            subject_noun = [e_at + o for o in e_parts["noun"]]
        links.en_taken.update(range(e_at, e_at + len(e_part)))
        links.fr_taken.update(range(f_at, f_at + len(f_part)))
        if spec is clause.place and clause.place is not None:
            _link_preposition(links, e_at, f_at, fused)
        en_start, fr_start = e_at + len(e_part), f_at + len(f_part)
    return subject_noun


def _align_punctuation(links: _Links) -> None:
    """The final punctuation marks, when both sentences end with one."""
    en_tok, fr_tok = links.en_tok, links.fr_tok
    if en_tok and fr_tok and en_tok[-1] in _PUNCT and fr_tok[-1] in _PUNCT:
        links.link([len(fr_tok) - 1], [len(en_tok) - 1])
        links.en_taken.add(len(en_tok) - 1)
        links.fr_taken.add(len(fr_tok) - 1)


def _align_adverb(clause: Clause, links: _Links) -> None:
    """The time adverb, word group with word group."""
    if not clause.adverb:
        return
    a_en, a_fr = TIME_ADVERBS[clause.tense][0]
    e_part, f_part = [t.lower() for t in tokenize_words(a_en)], [t.lower() for t in tokenize_words(a_fr)]
    e_at, f_at = _find(links.en_low, e_part, 0, links.en_taken), _find(links.fr_low, f_part, 0, links.fr_taken)
    if e_at >= 0 and f_at >= 0:
        links.link(list(range(f_at, f_at + len(f_part))), list(range(e_at, e_at + len(e_part))))
        links.en_taken.update(range(e_at, e_at + len(e_part)))
        links.fr_taken.update(range(f_at, f_at + len(f_part)))


def _align_subject_pronoun(clause: Clause, links: _Links, subject_noun: list[int]) -> None:
    """A subject pronoun with its French one; in an inverted question, the French "il" with the subject noun."""
    f_pro = [i for i, t in enumerate(links.fr_low) if i not in links.fr_taken and t in _FR_PRONOUNS]
    if isinstance(clause.subject, int):
        e_pro = [i for i, t in enumerate(links.en_low)
                 if i not in links.en_taken and t == PRONOUNS[clause.subject][0].lower()]
        if e_pro and f_pro:
            links.link([f_pro[0]], [e_pro[0]])
            links.en_taken.add(e_pro[0])
            links.fr_taken.add(f_pro[0])
    elif clause.question:  # "Son frère a-t-il lu ...": "il" stands for the subject
        if f_pro and subject_noun:
            links.link([f_pro[0]], subject_noun, sure_if_single=False)
            links.fr_taken.add(f_pro[0])


def _align_verb_group(clause: Clause, links: _Links) -> None:
    """What is left: the attribute of "be", then the verb group (every pair possible; the lexical verb and the
    negation sure)."""
    en_rest = [i for i in range(len(links.en_tok)) if i not in links.en_taken and links.en_tok[i] not in _PUNCT]
    fr_rest = [i for i in range(len(links.fr_tok)) if i not in links.fr_taken and links.fr_tok[i] not in _PUNCT]
    # the attribute of "be" is the last word left in both languages
    if clause.verb is None and en_rest and fr_rest:
        links.link([fr_rest.pop()], [en_rest.pop()])
    en_low, fr_low = links.en_low, links.fr_low
    fr_verb = [i for i in fr_rest if fr_low[i] not in ("-", "t")]
    en_verb = list(en_rest)
    links.link(fr_rest, en_rest, sure_if_single=False)
    if clause.neg:
        e_not = [i for i in en_verb if en_low[i] in ("not", "n't")]
        f_pas = [i for i in fr_verb if fr_low[i] == "pas"]
        if e_not and f_pas:
            links.sure.add((f_pas[0], e_not[0]))
        en_verb = [i for i in en_verb if en_low[i] not in ("not", "n't")]
        fr_verb = [i for i in fr_verb if fr_low[i] not in ("pas", "ne", "n'")]
    if en_verb and fr_verb:
        links.sure.add((fr_verb[-1], en_verb[-1]))


def align_clause(clause: Clause, en: str | None = None, fr: str | None = None) -> AlignedPair:
    """The gold alignment of the pair realised from ``clause`` (realised here unless ``en`` and ``fr`` are given).

    Raises ``ValueError`` when a noun phrase of the clause cannot be found in the sentences (a pair not
    realised from this clause).
    """
    if not isinstance(clause, Clause):
        raise TypeError(f"clause must be a tfm_lesson.data.sentences.Clause, got {type(clause).__name__}")
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        if en is None or fr is None:
            en, fr = realize(clause)
        links = _Links(tokenize_words(en), tokenize_words(fr))
        subject_noun = _align_noun_phrases(clause, links, en, fr)
        _align_punctuation(links)
        _align_adverb(clause, links)
        _align_subject_pronoun(clause, links, subject_noun)
        _align_verb_group(clause, links)
    sure, possible = links.frozen()
    return AlignedPair(en, fr, tuple(links.en_tok), tuple(links.fr_tok), sure, possible)


def generate_aligned(n: int, seed: int = 0) -> list[AlignedPair]:
    """The first ``n`` pairs of ``generate_sentences(n, seed)`` (the same pairs, in the same order), each
    with its gold alignment. A few milliseconds a pair."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rng = random.Random(f"sentences-{seed}")  # the stream of generate_sentences
    seen: set[str] = set()
    out: list[AlignedPair] = []
    tries = 0
    sink = io.StringIO()
    while len(out) < n:
        tries += 1
        if tries > 20 * n + 1000:
            raise RuntimeError(f"could not find {n} distinct sentences (got {len(out)})")
        clause = sample_clause(rng)
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            en, fr = realize(clause)
        sink.seek(0)
        sink.truncate()
        if en in seen or "[[" in en or "[[" in fr:
            continue
        seen.add(en)
        out.append(align_clause(clause, en, fr))
    return out
