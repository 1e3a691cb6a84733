"""Bilingual English/French lexicon for the generated sentence pairs (task ``sentences``).

Each entry pairs an English lemma with its French lemma, plus what French grammar needs to know:
a noun's gender (``"m"``/``"f"``), whether an adjective goes before the noun (``petit``, ``grand``,
``vieux``…) or after it (``rouge``, ``intelligent``…), whether a verb builds its passé composé with
*être* (``arriver`` → ``est arrivée``) or *avoir*. Semantic classes keep sentences sensible: people and
animals eat, read and sleep; things are red or heavy.

The words are inflected and the sentences realised by pyRealB (Guy Lapalme, RALI, Université de
Montréal), whose English and French lexicons and grammars are licensed CC BY 4.0; see :data:`CREDITS`.
The word list and the sentence patterns here are tfm_lesson's own.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["CREDITS", "Noun", "Adjective", "Verb", "NOUNS", "ADJECTIVES", "VERBS", "PRONOUNS",
           "DETERMINERS", "NUMERALS", "TIME_ADVERBS", "LIGATURES", "MASS_NOUNS", "DESTINATIONS"]

CREDITS = (
    "Sentence pairs of the 'sentences' task are realised with pyRealB by Guy Lapalme (RALI, Université de "
    "Montréal), https://github.com/lapalme/pyrealb, whose English and French lexicons are licensed under "
    "Creative Commons Attribution 4.0 (CC BY 4.0, https://creativecommons.org/licenses/by/4.0/). "
    "The bilingual word list and the sentence patterns in tfm_lesson.data.lexicon are tfm_lesson's own. "
    "Number words of the 'numbers' task come from num2words (LGPL), https://github.com/savoirfairelinux/num2words."
)


class Noun(NamedTuple):
    en: str
    fr: str
    gender: str  # French gender: "m" or "f"
    kind: str    # person, animal, thing, food, drink, text, place


class Adjective(NamedTuple):
    en: str
    fr: str
    before: bool  # True: French puts it before the noun (la petite voiture); False: after (la voiture rouge)
    applies: tuple[str, ...]  # noun kinds it may describe


class Verb(NamedTuple):
    en: str
    fr: str
    objects: tuple[str, ...]  # noun kinds (or English nouns) it takes as direct object; () = intransitive
    subjects: tuple[str, ...]  # noun kinds that can do it
    etre: bool = False        # passé composé with être (and agreement with the subject)
    motion: bool = False      # takes "to <place>" → "à <place>"


_ANIMATE = ("person", "animal")
_PHYSICAL = ("animal", "thing", "food", "text")

NOUNS: tuple[Noun, ...] = (
    # people
    Noun("man", "homme", "m", "person"), Noun("woman", "femme", "f", "person"),
    Noun("boy", "garçon", "m", "person"), Noun("girl", "fille", "f", "person"),
    Noun("child", "enfant", "m", "person"), Noun("teacher", "professeur", "m", "person"),
    Noun("doctor", "médecin", "m", "person"), Noun("king", "roi", "m", "person"),
    Noun("queen", "reine", "f", "person"), Noun("father", "père", "m", "person"),
    Noun("mother", "mère", "f", "person"), Noun("brother", "frère", "m", "person"),
    Noun("sister", "soeur", "f", "person"), Noun("baby", "bébé", "m", "person"),
    Noun("student", "étudiant", "m", "person"), Noun("friend", "ami", "m", "person"),
    # animals
    Noun("cat", "chat", "m", "animal"), Noun("dog", "chien", "m", "animal"),
    Noun("horse", "cheval", "m", "animal"), Noun("bird", "oiseau", "m", "animal"),
    Noun("mouse", "souris", "f", "animal"), Noun("cow", "vache", "f", "animal"),
    Noun("rabbit", "lapin", "m", "animal"), Noun("duck", "canard", "m", "animal"),
    Noun("lamb", "agneau", "m", "animal"), Noun("wolf", "loup", "m", "animal"),
    Noun("fox", "renard", "m", "animal"), Noun("bear", "ours", "m", "animal"),
    Noun("frog", "grenouille", "f", "animal"), Noun("goat", "chèvre", "f", "animal"),
    Noun("hen", "poule", "f", "animal"), Noun("pig", "cochon", "m", "animal"),
    # things
    Noun("car", "voiture", "f", "thing"), Noun("house", "maison", "f", "thing"),
    Noun("table", "table", "f", "thing"), Noun("chair", "chaise", "f", "thing"),
    Noun("door", "porte", "f", "thing"), Noun("window", "fenêtre", "f", "thing"),
    Noun("box", "boîte", "f", "thing"), Noun("key", "clé", "f", "thing"),
    Noun("pen", "stylo", "m", "thing"), Noun("bicycle", "vélo", "m", "thing"),
    Noun("hat", "chapeau", "m", "thing"), Noun("bag", "sac", "m", "thing"),
    Noun("phone", "téléphone", "m", "thing"), Noun("computer", "ordinateur", "m", "thing"),
    Noun("flower", "fleur", "f", "thing"), Noun("bottle", "bouteille", "f", "thing"),
    Noun("cup", "tasse", "f", "thing"), Noun("glass", "verre", "m", "thing"),
    Noun("shirt", "chemise", "f", "thing"), Noun("dress", "robe", "f", "thing"),
    Noun("ball", "ballon", "m", "thing"), Noun("boat", "bateau", "m", "thing"),
    # things to read and write
    Noun("book", "livre", "m", "text"), Noun("letter", "lettre", "f", "text"),
    Noun("newspaper", "journal", "m", "text"), Noun("story", "histoire", "f", "text"),
    # food and drink
    Noun("apple", "pomme", "f", "food"), Noun("bread", "pain", "m", "food"),
    Noun("cake", "gâteau", "m", "food"), Noun("cheese", "fromage", "m", "food"),
    Noun("egg", "oeuf", "m", "food"), Noun("orange", "orange", "f", "food"),
    Noun("soup", "soupe", "f", "food"), Noun("banana", "banane", "f", "food"),
    Noun("tomato", "tomate", "f", "food"), Noun("carrot", "carotte", "f", "food"),
    Noun("water", "eau", "f", "drink"), Noun("milk", "lait", "m", "drink"),
    Noun("coffee", "café", "m", "drink"), Noun("tea", "thé", "m", "drink"),
    Noun("wine", "vin", "m", "drink"),
    # places
    Noun("garden", "jardin", "m", "place"), Noun("market", "marché", "m", "place"),
    Noun("school", "école", "f", "place"), Noun("park", "parc", "m", "place"),
    Noun("street", "rue", "f", "place"), Noun("city", "ville", "f", "place"),
    Noun("room", "chambre", "f", "place"), Noun("shop", "magasin", "m", "place"),
    Noun("forest", "forêt", "f", "place"), Noun("kitchen", "cuisine", "f", "place"),
    Noun("station", "gare", "f", "place"), Noun("church", "église", "f", "place"),
    Noun("hospital", "hôpital", "m", "place"), Noun("museum", "musée", "m", "place"),
    Noun("library", "bibliothèque", "f", "place"), Noun("village", "village", "m", "place"),
)

ADJECTIVES: tuple[Adjective, ...] = (
    # before the noun in French
    Adjective("small", "petit", True, (*_ANIMATE, "thing", "place", "text")),
    Adjective("big", "grand", True, (*_ANIMATE, "thing", "place")),
    Adjective("good", "bon", True, ("person", "food", "drink", "text")),
    # not for people: "beau" before frère/père/mère… makes an in-law ("beau-frère")
    Adjective("beautiful", "beau", True, ("animal", "thing", "place", "text")),
    Adjective("pretty", "joli", True, ("person", "animal", "thing", "place")),
    Adjective("young", "jeune", True, _ANIMATE),
    Adjective("old", "vieux", True, (*_ANIMATE, "thing", "place", "text")),
    Adjective("new", "nouveau", True, ("person", "thing", "place", "text")),
    Adjective("bad", "mauvais", True, ("food", "drink", "text")),
    Adjective("fat", "gros", True, ("animal", "thing")),
    Adjective("long", "long", True, ("text",)),
    # after the noun in French
    Adjective("red", "rouge", False, ("thing", "food")),
    Adjective("black", "noir", False, ("animal", "thing")),
    Adjective("white", "blanc", False, ("animal", "thing", "drink")),
    Adjective("green", "vert", False, ("thing", "food")),
    Adjective("blue", "bleu", False, ("thing",)),
    Adjective("yellow", "jaune", False, ("thing", "food")),
    Adjective("grey", "gris", False, ("animal", "thing")),
    Adjective("intelligent", "intelligent", False, _ANIMATE),
    Adjective("happy", "heureux", False, ("person",)),
    Adjective("tired", "fatigué", False, _ANIMATE),
    Adjective("sad", "triste", False, ("person", "text")),
    Adjective("rich", "riche", False, ("person",)),
    Adjective("famous", "célèbre", False, ("person", "animal", "place", "text")),
    Adjective("heavy", "lourd", False, ("thing",)),
    Adjective("empty", "vide", False, ("thing", "place")),
    Adjective("hot", "chaud", False, ("food", "drink")),
    Adjective("cold", "froid", False, ("food", "drink")),
    Adjective("strange", "étrange", False, (*_ANIMATE, "thing", "text")),
    Adjective("quiet", "calme", False, (*_ANIMATE, "place")),
    Adjective("funny", "drôle", False, ("person", "animal", "text")),
    Adjective("angry", "furieux", False, _ANIMATE),
)

_OPENABLE = ("door", "window", "box", "bag", "bottle", "book", "letter", "newspaper")
_WASHABLE = ("car", "shirt", "dress", "cup", "glass", "table", "window", "bicycle", "hat", "dog", "horse", "pig")
_BREAKABLE = ("cup", "glass", "bottle", "window", "phone", "computer", "chair", "table", "pen", "box")
_REPAIRABLE = ("car", "bicycle", "phone", "computer", "door", "window", "chair", "table", "boat")
_P = ("person",)
_PA = _ANIMATE
VERBS: tuple[Verb, ...] = (
    # intransitive
    Verb("sleep", "dormir", (), _PA), Verb("arrive", "arriver", (), (*_PA, "thing"), etre=True),
    Verb("leave", "partir", (), (*_PA, "thing"), etre=True),
    Verb("come", "venir", (), _PA, etre=True, motion=True),
    Verb("go", "aller", (), _PA, etre=True, motion=True), Verb("fall", "tomber", (), (*_PA, "thing"), etre=True),
    Verb("return", "retourner", (), _PA, etre=True, motion=True),
    Verb("run", "courir", (), _PA), Verb("walk", "marcher", (), _PA), Verb("sing", "chanter", (), _P),
    Verb("dance", "danser", (), _P), Verb("laugh", "rire", (), _P), Verb("cry", "pleurer", (), _P),
    Verb("swim", "nager", (), _PA), Verb("work", "travailler", (), _P), Verb("play", "jouer", (), _PA),
    # transitive
    Verb("see", "voir", ("person", "animal", "thing", "place"), _PA),
    Verb("eat", "manger", ("food",), _PA), Verb("drink", "boire", ("drink",), _PA),
    Verb("read", "lire", ("text",), _P), Verb("write", "écrire", ("text",), _P),
    Verb("buy", "acheter", ("thing", "food", "drink", "text", "animal"), _P),
    Verb("sell", "vendre", ("thing", "food", "text", "animal"), _P),
    Verb("find", "trouver", ("thing", "text", "animal", "food"), _PA),
    Verb("lose", "perdre", ("thing", "text"), _P),
    Verb("take", "prendre", ("thing", "food", "text"), _P),
    Verb("want", "vouloir", ("thing", "food", "drink", "text", "animal"), _PA),
    Verb("like", "aimer", ("person", "animal", "thing", "food", "drink", "place", "text"), _PA),
    Verb("watch", "regarder", ("person", "animal", "thing"), _PA),
    Verb("open", "ouvrir", _OPENABLE, _P), Verb("close", "fermer", _OPENABLE, _P),
    Verb("carry", "porter", ("thing", "food", "animal"), _P), Verb("wash", "laver", _WASHABLE, _P),
    Verb("draw", "dessiner", ("person", "animal", "thing", "place"), _P),
    Verb("hear", "entendre", ("person", "animal"), _PA), Verb("follow", "suivre", ("person", "animal"), _PA),
    Verb("help", "aider", ("person",), _P), Verb("call", "appeler", ("person", "animal"), _P),
    Verb("visit", "visiter", ("place",), _P), Verb("meet", "rencontrer", ("person",), _P),
    Verb("break", "casser", _BREAKABLE, _PA), Verb("repair", "réparer", _REPAIRABLE, _P),
    Verb("bring", "apporter", ("thing", "food", "drink", "text"), _P), Verb("cook", "préparer", ("food",), _P),
)

# Places one goes *to* ("to the market" → "au marché"); "to the street"/"à la rue" is not said.
DESTINATIONS: frozenset[str] = frozenset({"garden", "market", "school", "park", "city", "forest", "kitchen", "station",
                                          "church", "hospital", "museum", "library", "village", "shop"})

# Uncountable in English here: never plural, never "a" or a numeral ("the bread", "my milk").
MASS_NOUNS: frozenset[str] = frozenset({"bread", "soup", "cheese", "water", "milk", "coffee", "tea", "wine"})

# (English pronoun options, French pronoun options): person, number, gender.
# English "you" is always the French plural/polite "vous" and "they" is "ils", so that every English
# sentence has exactly one French translation.
PRONOUNS: tuple[tuple[str, str, int, str, str], ...] = (
    ("I", "je", 1, "s", "m"), ("you", "vous", 2, "p", "m"), ("he", "il", 3, "s", "m"),
    ("she", "elle", 3, "s", "f"), ("we", "nous", 1, "p", "m"), ("they", "ils", 3, "p", "m"),
)

# name: (English lemma, French lemma, person, owner number, owner gender); see sentences.determiner()
DETERMINERS: dict[str, tuple[str, str, int | None, str | None, str | None]] = {
    "the": ("the", "le", None, None, None),
    "a": ("a", "un", None, None, None),
    "this": ("this", "ce", None, None, None),
    "my": ("my", "mon", 1, "s", None),
    "your": ("my", "notre", 2, "p", None),
    "his": ("my", "mon", 3, "s", "m"),
    "her": ("my", "mon", 3, "s", "f"),
    "our": ("my", "notre", 1, "p", None),
    "their": ("my", "notre", 3, "p", None),
}

NUMERALS: tuple[int, ...] = (2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 20)

# pyRealB's French lexicon spells these words with "oe"; the generated text uses the ligature
LIGATURES: dict[str, str] = {"soeur": "sœur", "oeuf": "œuf", "Soeur": "Sœur", "Oeuf": "Œuf"}

# time adverbs matching a tense: tense -> (English, French)
TIME_ADVERBS: dict[str, tuple[tuple[str, str], ...]] = {
    "past": (("yesterday", "hier"),),
    "future": (("tomorrow", "demain"),),
    "present": (("today", "aujourd'hui"),),
}
