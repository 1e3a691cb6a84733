"""Chapter 11 quiz: beam search, the length penalty, corpus BLEU, and what scores on generated data mean."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="Beam search with k = 4 has four live beams and a vocabulary of V words. How does it choose the "
               "next four beams?",
        options=[
            "All 4 × V extensions are ranked by total log-probability and the best 4 are kept, whichever beams "
            "they come from.",
            "Each beam keeps its own most probable next word, so every beam survives and grows by one token.",
            "The 4 most probable next words of the best beam are kept, since the best prefix so far is the one "
            "most worth extending.",
        ],
        answer=0,
        feedback=[
            "Right: one ranking over every extension of every beam, so a strong prefix may produce several "
            "survivors and a weak one none.",
            "That is four greedy searches side by side: a strong beam could never split into two survivors.",
            "That drops the other beams at every step, which throws away exactly what a beam is for.",
        ],
    ),
    Question(
        prompt="Without a length penalty (α = 0), which outputs does beam search tend to prefer?",
        options=[
            "Longer ones, because each extra word adds to the total score.",
            "Shorter ones, because every extra token adds a negative log-probability.",
            "Neither: each token's log-probability is a normalised score, so long and short outputs are judged on "
            "equal terms.",
        ],
        answer=1,
        feedback=[
            "Each token multiplies the probability by a number below one, so length lowers the total.",
            "Right: dividing by ((5 + |y|)/6)^α compensates, and the paper uses α = 0.6.",
            "The total log-probability is a sum over tokens: the more tokens, the more negative it gets.",
        ],
    ),
    Question(
        prompt="Your test set has two sentences: one perfect, one very short and wrong. Why can corpus BLEU differ "
               "from the mean of the two sentence BLEUs?",
        options=[
            "Because sacreBLEU rounds each sentence's score before averaging, and the rounding errors of a perfect "
            "sentence and a poor one add up to a visible gap.",
            "They cannot differ: corpus BLEU is defined as the mean of the sentence BLEUs, so any gap you see is a bug "
            "in your own code.",
            "Because corpus BLEU pools the n-gram counts of all sentences and applies one brevity penalty to the "
            "whole corpus, instead of averaging per-sentence scores.",
        ],
        answer=2,
        feedback=[
            "The difference is far larger than rounding: the two are different formulas.",
            "That is the common misconception the chapter's exercise 3 shows to be false.",
            "Right: that is why published scores are corpus BLEU, and a mean of sentence BLEUs is not comparable "
            "with them.",
        ],
    ),
    Question(
        prompt="The model scores BLEU in the 80s on this chapter's test sentences; the paper's base model scores "
               "38.1 on WMT 2014 English→French. What can you conclude?",
        options=[
            "Our small model translates better than the paper's: BLEU is one fixed scale, so a higher score means "
            "better translations wherever it was measured.",
            "Nothing about the comparison: our sentences come from one small grammar with one exact reference, the "
            "paper's are real news text.",
            "BLEU is unreliable on French, whose accents and agreements make exact n-gram matches rare, so neither "
            "score can be trusted.",
        ],
        answer=1,
        feedback=[
            "The two numbers are measured on different tasks; a model that learnt this closed grammar would be "
            "lost on a newspaper.",
            "Right: a score is only comparable on the same test set with the same references and tokenisation.",
            "BLEU works the same on French; the difference is the data, not the metric.",
        ],
    ),
]
