"""English → French sentence pairs generated with pyRealB from a bilingual lexicon.

One abstract clause (subject, verb, object, place, tense, negation, question) is sampled at random and
*realised twice*, by pyRealB's English and French grammars, from the same structure
``S(NP(D, A, N), VP(V, NP))`` with ``.t(tense)``, ``.typ({"neg": True})``, ``.n("p")``… So the pairs
carry real differences in agreement and word order::

    The small red cars did not arrive.      Les petites voitures rouges ne sont pas arrivées.
    I do not eat an apple.                  Je ne mange pas de pomme.
    Did her brother read the long story?    Son frère a-t-il lu la longue histoire?

Generating costs 1–3 ms a pair (400–900 pairs/s on a busy 2-core CPU), so the package ships the 50,000
pairs made by ``generate_sentences(50_000, seed=0)`` in ``sentences.tsv.gz``; :func:`load_sentences` reads
them, and ``python -m tfm_lesson.data`` rewrites the file (the result is byte-identical).

Credits: pyRealB by Guy Lapalme (RALI, Université de Montréal), https://github.com/lapalme/pyrealb;
its English and French lexicons are licensed CC BY 4.0. The word list (:mod:`.lexicon`) and the sentence
patterns are tfm_lesson's own. See :data:`CREDITS`.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .lexicon import (ADJECTIVES, CREDITS, DESTINATIONS, DETERMINERS, LIGATURES, MASS_NOUNS, NOUNS, NUMERALS,
                      PRONOUNS, TIME_ADVERBS, VERBS, Adjective, Noun, Verb)
from .pairs import ParallelData, from_pairs

__all__ = ["CREDITS", "SHIPPED_FILE", "SHIPPED_SIZE", "NPSpec", "Clause", "sample_clause", "realize",
           "generate_sentences", "shipped_sentences", "load_sentences", "write_shipped"]

SHIPPED_FILE = "sentences.tsv.gz"
SHIPPED_SIZE = 50_000
TENSES = {"present": ("p", "p"), "past": ("ps", "pc"), "future": ("f", "f")}  # English, French pyRealB codes
_COLOURS = {"red", "black", "white", "green", "blue", "yellow", "grey"}


@dataclass(frozen=True)
class NPSpec:
    """A noun phrase: determiner name (a key of ``DETERMINERS``) or a numeral, number, adjectives."""

    noun: Noun
    det: str | None = "the"
    numeral: int | None = None
    plural: bool = False
    adjectives: tuple[Adjective, ...] = ()


@dataclass(frozen=True)
class Clause:
    """The language-neutral structure both realisations come from.

    ``subject``: an :class:`NPSpec` or an index into ``PRONOUNS``. ``verb`` None means the copula
    (*be*/*être*) with ``attribute``. ``place``: a destination (motion verbs) or a location.
    """

    subject: NPSpec | int
    verb: Verb | None
    obj: NPSpec | None = None
    attribute: Adjective | None = None
    place: NPSpec | None = None
    tense: str = "present"
    neg: bool = False
    question: bool = False
    adverb: bool = False


# -- sampling ---------------------------------------------------------------------------------------
_DET_NAMES = ("the", "a", "this", "my", "your", "his", "her", "our", "their")
_DET_WEIGHTS = (30, 18, 10, 6, 4, 5, 5, 4, 4)


def _sample_np(rng: random.Random, kinds: tuple[str, ...], numeral_p: float = 0.12,
               max_adjectives: int = 2, singular: bool = False, avoid: Adjective | None = None,
               definite: bool = False) -> NPSpec:
    noun = rng.choice([n for n in NOUNS if n.kind in kinds or n.en in kinds])
    mass = noun.en in MASS_NOUNS
    numeral = None
    if rng.random() < numeral_p and not (mass or singular):
        numeral, det, plural = rng.choice(NUMERALS), None, True
    else:
        det = rng.choices(_DET_NAMES, _DET_WEIGHTS)[0]
        # no "a milk"; no "his woman" (reads as a spouse); no "to a city" (French says "dans une ville")
        while ((mass or definite) and det == "a") or (noun.en in ("man", "woman") and DETERMINERS[det][2] is not None):
            det = rng.choices(_DET_NAMES, _DET_WEIGHTS)[0]
        plural = not (mass or singular) and rng.random() < 0.35
    fitting = [a for a in ADJECTIVES if noun.kind in a.applies and a != avoid]
    adjectives: tuple[Adjective, ...] = ()
    r = rng.random()
    if fitting and r < 0.5:
        adjectives = (rng.choice(fitting),)
        if max_adjectives >= 2 and r < 0.15 and adjectives[0].before:
            colours = [a for a in fitting if a.en in _COLOURS]
            if colours:  # English order: size/age/opinion before colour ("the small red car")
                adjectives = (adjectives[0], rng.choice(colours))
    return NPSpec(noun, det, numeral, plural, adjectives)


def _third_singular(subject: NPSpec | int) -> bool:
    if isinstance(subject, int):
        return PRONOUNS[subject][2] == 3 and PRONOUNS[subject][3] == "s"
    return not subject.plural


def sample_clause(rng: random.Random) -> Clause:
    """One random clause (uses only ``rng``, so a seed fixes the sequence of clauses)."""
    r = rng.random()
    tense = rng.choices(("present", "past", "future"), (35, 35, 30))[0]
    question = rng.random() < 0.12
    neg = not question and rng.random() < 0.3
    adverb = rng.random() < 0.12
    if r < 0.15:  # copula: subject is/was/will be + adjective
        kind = rng.choice(("person", "person", "animal", "thing", "food", "drink", "place", "text"))
        attribute = rng.choice([a for a in ADJECTIVES if kind in a.applies])
        if kind == "person" and rng.random() < 0.4:
            subject: NPSpec | int = rng.randrange(len(PRONOUNS))
        else:
            subject = _sample_np(rng, (kind,), max_adjectives=1, avoid=attribute)
        return Clause(subject, None, attribute=attribute, tense=tense, neg=neg, question=question, adverb=adverb)
    verb = rng.choice([v for v in VERBS if bool(v.objects) == (r >= 0.5)])
    if rng.random() < 0.25 and "person" in verb.subjects:
        subject = rng.randrange(len(PRONOUNS))
    else:
        subject = _sample_np(rng, verb.subjects)
    obj = _sample_np(rng, verb.objects) if verb.objects else None
    place = None
    if verb.motion or rng.random() < 0.2:
        places = tuple(DESTINATIONS) if verb.motion else ("place",)
        place = _sample_np(rng, places, max_adjectives=1, singular=True, definite=verb.motion)
    if verb.en == "read" and tense == "present" and not _third_singular(subject):
        tense = "past" if rng.random() < 0.5 else "future"  # "I read" would be present and past at once
    return Clause(subject, verb, obj, None, place, tense, neg, question, adverb)


# -- realisation ----------------------------------------------------------------------------------------
def _np(spec: NPSpec, lang: str, negated_object: bool = False):
    from pyrealb import NO, NP, A, D, N

    if spec.numeral is not None:
        det = NO(spec.numeral).nat(True)
    else:
        en, fr, person, owner, gender = DETERMINERS[spec.det]
        if lang == "en":
            det = D(en)
            if person is not None:
                det = det.pe(person).ow(owner)
                if gender:
                    det = det.g(gender)
        elif negated_object and spec.det == "a":
            det = D("de")  # French negation turns un/une/des into de: "pas de pomme"
        elif spec.det == "a" and spec.plural and any(a.before for a in spec.adjectives):
            det = D("de")  # des + adjective before a plural noun → de: "de petits chats"
        else:
            det = D(fr) if person is None else D(fr).pe(person)
    number = "p" if spec.plural else "s"
    if lang == "en":
        return NP(det, *[A(a.en) for a in spec.adjectives], N(spec.noun.en)).n(number)
    before = [A(a.fr).pos("pre") for a in spec.adjectives if a.before]
    after = [A(a.fr).pos("post") for a in spec.adjectives if not a.before]
    return NP(det, *before, N(spec.noun.fr).g(spec.noun.gender), *after).n(number)


def _subject(subject: NPSpec | int, lang: str):
    from pyrealb import Pro

    if isinstance(subject, int):
        en, fr, person, number, gender = PRONOUNS[subject]
        return Pro("I" if lang == "en" else "je").pe(person).n(number).g(gender)
    return _np(subject, lang)


def _realize_one(clause: Clause, lang: str) -> str:
    from pyrealb import PP, VP, A, Adv, P, S, V

    if clause.verb is None:
        vp = VP(V("be" if lang == "en" else "être"),
                A(clause.attribute.en if lang == "en" else clause.attribute.fr))
    else:
        parts = [V(clause.verb.en if lang == "en" else clause.verb.fr)]
        if clause.obj is not None:
            parts.append(_np(clause.obj, lang, negated_object=clause.neg))
        if clause.place is not None:
            if clause.verb.motion:
                prep = "to" if lang == "en" else "à"
            else:
                prep = "in" if lang == "en" else "dans"
            parts.append(PP(P(prep), _np(clause.place, lang)))
        vp = VP(*parts)
    parts = [_subject(clause.subject, lang), vp]
    if clause.adverb:
        en, fr = TIME_ADVERBS[clause.tense][0]
        parts.append(Adv(en if lang == "en" else fr))
    tense = TENSES[clause.tense][0 if lang == "en" else 1]
    if lang == "fr" and clause.verb is None and clause.tense == "past":
        tense = "i"  # a past state: "was happy" → "était heureuse" (imparfait), not "a été"
    s = S(*parts).t(tense)
    typ = {}
    if clause.neg:
        typ["neg"] = True
    if clause.question:
        typ["int"] = "yon"
    if typ:
        s = s.typ(typ)
    text = s.realize().strip()
    if lang == "fr":
        for plain, ligature in LIGATURES.items():
            text = text.replace(plain, ligature)
    return text


def realize(clause: Clause) -> tuple[str, str]:
    """The clause in English and in French."""
    from pyrealb import loadEn, loadFr

    loadEn()
    en = _realize_one(clause, "en")
    loadFr()
    fr = _realize_one(clause, "fr")
    return en, fr


def generate_sentences(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs with distinct English sides, deterministic by ``seed``.

    The sequence is a prefix-stable stream: ``generate_sentences(m, s)`` is the first ``m`` pairs of
    ``generate_sentences(n, s)`` for ``m <= n``.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rng = random.Random(f"sentences-{seed}")
    seen: set[str] = set()
    pairs: list[tuple[str, str]] = []
    tries = 0
    sink = io.StringIO()
    while len(pairs) < n:
        tries += 1
        if tries > 20 * n + 1000:
            raise RuntimeError(f"could not find {n} distinct sentences (got {len(pairs)})")
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            en, fr = realize(sample_clause(rng))
        sink.seek(0)
        sink.truncate()
        if en in seen or "[[" in en or "[[" in fr:  # pyRealB marks words it could not inflect with [[ ]]
            continue
        seen.add(en)
        pairs.append((en, fr))
    return pairs


# -- the shipped file -------------------------------------------------------------------------------------
def _encode_tsv(pairs: list[tuple[str, str]]) -> bytes:
    text = "".join(f"{en}\t{fr}\n" for en, fr in pairs).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as fh:
        fh.write(text)
    return buf.getvalue()


def shipped_sentences() -> list[tuple[str, str]]:
    """The pairs shipped in the package: ``generate_sentences(SHIPPED_SIZE, seed=0)``."""
    raw = resources.files(__package__).joinpath(SHIPPED_FILE).read_bytes()
    lines = gzip.decompress(raw).decode("utf-8").splitlines()
    return [tuple(line.split("\t")) for line in lines]  # type: ignore[misc]


def write_shipped(path: str | Path | None = None, n: int = SHIPPED_SIZE, seed: int = 0) -> Path:
    """Regenerate the shipped file (deterministic: same bytes each time with the same pyRealB)."""
    path = Path(path) if path is not None else Path(__file__).with_name(SHIPPED_FILE)
    path.write_bytes(_encode_tsv(generate_sentences(n, seed)))
    return path


def load_sentences(seed: int = 0, n: int | None = None, n_valid: int = 2000, n_test: int = 2000,
                   n_train: int | None = None, generate_seed: int | None = None) -> ParallelData:
    """English → French sentence pairs split without overlap (the split is shuffled with ``seed``).

    By default the shipped 50,000 pairs; ``n`` (or ``n_train + n_valid + n_test``) takes the first ``n``.
    ``generate_seed`` (other than 0), or ``n`` above the shipped size, generates afresh (a
    few milliseconds a pair).
    """
    if n is None and n_train is not None:
        n = n_train + n_valid + n_test
    if n is not None and (not isinstance(n, int) or n <= n_valid + n_test):
        raise ValueError(f"n must be an int above n_valid + n_test = {n_valid + n_test}, got {n!r}")
    if generate_seed in (None, 0) and (n is None or n <= SHIPPED_SIZE):
        pairs = shipped_sentences()[:n]
        source = f"shipped {SHIPPED_FILE}"
    else:
        pairs = generate_sentences(n or SHIPPED_SIZE, seed=generate_seed or 0)
        source = f"generated with seed {generate_seed or 0}"
    data = from_pairs(pairs, seed=seed, valid=n_valid, test=n_test, name="sentences")
    data.info.update(source=source, credits=CREDITS)
    return data

