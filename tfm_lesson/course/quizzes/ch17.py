"""Chapter 17 quiz: alignment error rate, induction heads, activation patching, attention as explanation."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="A head's alignment names the link (3, 2) twice and the sure links hold it once. In Och & Ney's AER, "
               "how often does (3, 2) count?",
        options=[
            "Twice: the head pointed there twice, so it is twice as sure.",
            "Once: an alignment is a set of links, so A ∩ S holds (3, 2) once.",
            "Not at all: a link named twice is a malformed prediction, so it is dropped from A ∩ S.",
        ],
        answer=1,
        feedback=[
            "Counting over a list rewards repeating the links you are sure of and lets |A ∩ S| exceed |S|: the "
            "formula is written for sets.",
            "Right: A, S and P are sets. Counting the link once, or refusing a list that repeats one (the package's "
            "alignment_error_rate refuses), keeps |A ∩ S| at most |S|.",
            "A repeated link is one link named twice; it is neither right twice nor wrong.",
        ],
    ),
    Question(
        prompt="Why does AER give possible links (P) credit only in the numerator's |A ∩ P|, while its denominator "
               "|A| + |S| counts the predicted links and the sure links, never |P|?",
        options=[
            "Because possible links are rarer than sure ones, so putting |P| below the line would barely change the "
            "score and only complicate the formula.",
            "Predicting a possible link is not wrong (precision), but missing one is not an error either (recall "
            "is measured on the sure links).",
            "It is a typo in the paper: the denominator should be |A| + |P|, so that possible links count on both "
            "sides of the fraction.",
        ],
        answer=1,
        feedback=[
            "How many there are does not matter; what matters is which ones a model must find and which it may.",
            "Right: |A ∩ P| / |A| is a precision that accepts possible links, |A ∩ S| / |S| a recall that asks "
            "only for the sure ones; AER combines the two.",
            "With |P| below the line, an annotator adding possible links would lower every system's score for "
            "links it was never required to find.",
        ],
    ),
    Question(
        prompt="You average an induction head's attention over the queries of the first half of a repeated-token "
               "sequence (not the repeated half) and get almost 0. What does that say?",
        options=[
            "That the head is not an induction head, which attends to the token after the earlier copy at every "
            "position.",
            "Nothing: the first half is random, any earlier copy there is chance, and the score is defined on "
            "the repeat.",
            "That the model has not been trained long enough: an induction head forms late, and until then it scores "
            "near 0 on both halves.",
        ],
        answer=1,
        feedback=[
            "The same head may score near 1 on the repeated half; the first half cannot show it either way.",
            "Right: the score is measured on the queries of the repeated half, each looking one token after the "
            "earlier copy the sequence was built with; in the random first half a token repeats only by chance.",
            "Training does not plant copies in the first half: even a perfect induction head finds only the "
            "repeats that chance put there.",
        ],
    ),
    Question(
        prompt="An induction head in layer 1 attends from position t to the token after the earlier copy of token "
               "t. Which layer-0 head makes that possible?",
        options=[
            "A head that attends to the first token: it gives every position the same anchor, from which the layer-1 "
            "head counts its way to the earlier copy.",
            "A previous-token head: it writes each token's predecessor into its position, so the key at s can say "
            "'the token before me was x'.",
            "None: the layer-1 head can match tokens on its own, since its query and the earlier copy's key hold the "
            "same token.",
        ],
        answer=1,
        feedback=[
            "Attention parked on the first token moves little information; it cannot tell which position follows "
            "a copy.",
            "Right: the layer-1 query (the current token) matches a key built from the previous token (K-composition, "
            "in Elhage et al.'s words).",
            "A single layer can find the earlier copy of a token, but not the position after it: that needs the "
            "previous token written into each position first.",
        ],
    ),
    Question(
        prompt="Patching: you copy the induction head's output from a clean run into a corrupted run. At which "
               "position do you patch to restore the prediction of the token at position t + 1?",
        options=[
            "At position t − seg_len + 1, the key the head attends to, where the copied token sits.",
            "At position t, the query whose output predicts token t + 1.",
            "At every position at once, so that whatever the head contributes reaches the prediction.",
        ],
        answer=1,
        feedback=[
            "The key position is where the head reads from; its output there predicts a different token.",
            "Right: a head writes its output at its query position; that is where the prediction of the next "
            "token is read.",
            "Patching everything restores everything the head does, and says nothing about where it acts.",
        ],
    ),
    Question(
        prompt="Across heads, attention to the right place and the damage an ablation does rank the heads "
               "differently. What is the careful conclusion?",
        options=[
            "Attention weights are meaningless: a map shows where a head looks, and that says nothing about what the "
            "model computes.",
            "Attention says where a head reads; intervention says what the model needs. They answer different "
            "questions, so an attention map alone is not an explanation.",
            "Ablation is broken, since it disagrees with the maps: replacing a head's output by its mean also shifts the "
            "other heads' inputs, so the damage is not the head's own.",
        ],
        answer=1,
        feedback=[
            "Too strong: Wiegreffe and Pinter showed that attention often does carry information; the question is "
            "what it can be used to claim.",
            "Right: this is the debate of Jain and Wallace (2019) and Wiegreffe and Pinter (2019); redundant heads "
            "(Michel et al., 2019; Voita et al., 2019) are one reason the two disagree.",
            "Ablation answers another question, whether the model needs the head; a head can look aligned and "
            "still be redundant.",
        ],
    ),
]
