"""Gold word alignments of the generated sentence pairs (tfm_lesson.data.alignments), on hand-checked clauses."""
from __future__ import annotations

import pytest

from tfm_lesson.data.alignments import AlignedPair, align_clause, generate_aligned
from tfm_lesson.data.lexicon import ADJECTIVES, NOUNS, PRONOUNS, VERBS
from tfm_lesson.data.sentences import Clause, NPSpec, generate_sentences

N = {n.en: n for n in NOUNS}
A = {a.en: a for a in ADJECTIVES}
V = {v.en: v for v in VERBS}
PRO = {p[0]: i for i, p in enumerate(PRONOUNS)}


def words(pair: AlignedPair, links) -> set[tuple[str, str]]:
    return {(pair.fr_tokens[f], pair.en_tokens[e]) for f, e in links}


def test_adjectives_cross_and_negation_splits():
    # "The small red cars did not arrive." / "Les petites voitures rouges ne sont pas arrivées." (hand-checked)
    clause = Clause(NPSpec(N["car"], "the", plural=True, adjectives=(A["small"], A["red"])), V["arrive"],
                    tense="past", neg=True)
    p = align_clause(clause)
    assert p.en == "The small red cars did not arrive."
    assert p.fr == "Les petites voitures rouges ne sont pas arrivées."
    # en: The0 small1 red2 cars3 did4 not5 arrive6 .7   fr: Les0 petites1 voitures2 rouges3 ne4 sont5 pas6 arrivées7 .8
    assert p.sure == {(0, 0), (1, 1), (2, 3), (3, 2), (6, 5), (7, 6), (8, 7)}
    verb_group = {(f, e) for f in (4, 5, 6, 7) for e in (4, 5, 6)}
    assert p.possible == p.sure | verb_group
    assert words(p, p.sure) >= {("rouges", "red"), ("voitures", "cars"), ("pas", "not"), ("arrivées", "arrive")}


def test_negated_object_and_pronoun_subject():
    # "I do not eat an apple." / "Je ne mange pas de pomme." (hand-checked)
    clause = Clause(PRO["I"], V["eat"], NPSpec(N["apple"], "a"), neg=True)
    p = align_clause(clause)
    assert (p.en, p.fr) == ("I do not eat an apple.", "Je ne mange pas de pomme.")
    assert words(p, p.sure) == {("Je", "I"), ("mange", "eat"), ("pas", "not"), ("de", "an"), ("pomme", "apple"),
                                (".", ".")}
    assert words(p, p.possible - p.sure) >= {("ne", "do"), ("ne", "not"), ("mange", "do")}


def test_question_with_inversion_and_contraction_au():
    # "Did her brother go to the market?" / "Son frère est-il allé au marché?" (hand-checked)
    clause = Clause(NPSpec(N["brother"], "her"), V["go"], place=NPSpec(N["market"], "the"), tense="past",
                    question=True)
    p = align_clause(clause)
    assert p.en == "Did her brother go to the market?"
    assert p.fr == "Son frère est-il allé au marché?"
    sure = words(p, p.sure)
    assert {("Son", "her"), ("frère", "brother"), ("allé", "go"), ("au", "to"), ("marché", "market"),
            ("?", "?")} <= sure
    assert ("au", "the") in words(p, p.possible)  # "au" = "à" + "le"
    assert ("il", "brother") in words(p, p.possible - p.sure)  # the pronoun repeats the subject


def test_copula_attribute_and_adverb():
    # "The cat was happy yesterday." / "Le chat était heureux hier." (hand-checked)
    clause = Clause(NPSpec(N["cat"], "the"), None, attribute=A["happy"], tense="past", adverb=True)
    p = align_clause(clause)
    assert (p.en, p.fr) == ("The cat was happy yesterday.", "Le chat était heureux hier.")
    assert words(p, p.sure) == {("Le", "The"), ("chat", "cat"), ("était", "was"), ("heureux", "happy"),
                                ("hier", "yesterday"), (".", ".")}


def test_bare_plural_leaves_des_unaligned():
    clause = Clause(NPSpec(N["pig"], "a", plural=True), V["sleep"], tense="past")
    p = align_clause(clause)
    assert (p.en, p.fr) == ("Pigs slept.", "Des cochons ont dormi.")
    aligned_fr = {f for f, _ in p.possible}
    assert 0 not in aligned_fr  # "Des" has no English counterpart
    assert words(p, p.sure) == {("cochons", "Pigs"), ("dormi", "slept"), (".", ".")}


def test_generate_aligned_is_the_same_stream_and_every_english_word_is_linked():
    pairs = generate_aligned(150, seed=0)
    assert [tuple(p) for p in pairs] == generate_sentences(150, seed=0)
    for p in pairs:
        assert p.sure <= p.possible
        assert all(0 <= f < len(p.fr_tokens) and 0 <= e < len(p.en_tokens) for f, e in p.possible)
        linked = {e for _, e in p.possible}
        assert linked == set(range(len(p.en_tokens))), (p.en, p.fr)
        # every French word but an article with no English counterpart is linked
        lone = [p.fr_tokens[f].lower() for f in range(len(p.fr_tokens)) if f not in {f for f, _ in p.possible}]
        assert set(lone) <= {"des", "de", "d'"}, (p.en, p.fr, lone)


def test_bad_input():
    with pytest.raises(ValueError, match="n must be a positive int"):
        generate_aligned(0)
    with pytest.raises(TypeError, match="clause must be"):
        align_clause(("The cat.", "Le chat."))
    clause = Clause(NPSpec(N["cat"], "the"), V["sleep"])
    with pytest.raises(ValueError, match="not found"):
        align_clause(clause, "The dog sleeps.", "Le chien dort.")
