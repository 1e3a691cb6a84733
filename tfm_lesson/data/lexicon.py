"""Bilingual English/French lexicon for the generated sentence pairs.

The sentences are realised by pyRealB (Guy Lapalme, Université de Montréal), whose English and
French lexicons and grammars are distributed under CC BY 4.0; see :data:`CREDITS`.
"""
from __future__ import annotations

CREDITS = (
    "Sentence pairs of the 'sentences' task are realised with pyRealB by Guy Lapalme (RALI, Université de "
    "Montréal), https://github.com/lapalme/pyrealb, whose English and French lexicons are licensed under "
    "Creative Commons Attribution 4.0 (CC BY 4.0, https://creativecommons.org/licenses/by/4.0/). "
    "The bilingual word list and the sentence patterns in tfm_lesson.data.lexicon are tfm_lesson's own. "
    "Number words of the 'numbers' task come from num2words (LGPL), https://github.com/savoirfairelinux/num2words."
)
