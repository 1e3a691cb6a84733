"""Chapter 07 quiz: where positions talk, what padding does, where the norms go, and untrained attention."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="In an encoder layer, which sub-layer lets one position's vector change another position's output?",
        options=[
            "The feed-forward network: its wide hidden layer mixes what the positions hold.",
            "Self-attention.",
            "The layer norms: they normalise over the sequence.",
        ],
        answer=1,
        feedback=[
            "The FFN acts on each position on its own (chapter 06): no weight connects two positions.",
            "Right: self-attention is the only place where positions talk; everything else is position-wise.",
            "Layer norm normalises each position's d_model features, not across positions (chapter 05).",
        ],
    ),
    Question(
        prompt="A batch holds a 6-token and a 3-token sentence, the second padded to 6 with the padding mask. "
               "What do the second sentence's 3 real positions get, compared with encoding it alone?",
        options=[
            "The same numbers: padded keys get exactly zero weight, so nothing of them reaches the real tokens.",
            "Slightly different numbers: the padded keys get tiny but non-zero weights, so a little of the padding "
            "still leaks in.",
            "Numbers that depend on the first sentence: attention and the norms run over the whole batch, so the "
            "longer sentence leaks in.",
        ],
        answer=0,
        feedback=[
            "Right: the mask hides padded keys, and every other operation is position-wise, so the real positions "
            "are untouched by the padding.",
            "With a boolean mask the padded keys' scores become -inf and their weights exactly 0; the chapter "
            "checks batched == alone and even fills the padding with large garbage.",
            "Sentences in a batch never meet: attention runs within each sentence and layer norm within each position "
            "(the batch axis is never mixed).",
        ],
    ),
    Question(
        prompt="Which stack needs a final LayerNorm after its last layer?",
        options=[
            "The post-norm stack of the paper, x = LayerNorm(x + Sublayer(x)).",
            "Neither: every layer of either stack holds its own layer norms, so the stream leaves the last layer "
            "normalised.",
            "The pre-norm stack, x = x + Sublayer(LayerNorm(x)).",
        ],
        answer=2,
        feedback=[
            "A post-norm layer already ends with a norm, so the paper's stack needs none after it.",
            "In pre-norm the sum x + Sublayer(...) leaves the last layer unnormalised; that is what the final norm "
            "is for.",
            "Right: in pre-norm the residual stream itself is never normalised (only each branch's input is), so "
            "the stack ends with one final LayerNorm.",
        ],
    ),
    Question(
        prompt="An untrained encoder's attention maps: what does the chapter's output show?",
        options=[
            "Uniform rows: with random weights every key gets the same weight.",
            "Rows far from uniform, some nearly one-hot, yet meaningless until training.",
            "Already the heads of a trained model: one for the previous word, one for the next.",
        ],
        answer=1,
        feedback=[
            "Random projections give scores of order one, and softmax exaggerates their differences: the chapter "
            "prints each row's largest weight, and in layer 0 it is far above the uniform 1/4 on average.",
            "Right: not uniform, but not meaningful either; training (chapter 10) makes heads specialise.",
            "Specialised heads come from training (chapter 12 shows them); untrained patterns are accidents of "
            "the random weights.",
        ],
    ),
]
