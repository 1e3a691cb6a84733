"""Chapter 13 quiz: why wrong Transformers train, what a leak looks like, silent broadcasts, fully masked rows."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="Your from-scratch Transformer trains: the loss goes down steadily. What does that prove?",
        options=[
            "That it is correct: a wrong model would not learn, so a loss that falls steadily means every part "
            "computes what it should.",
            "That the attention is correct, since attention is where the model learns what to look at, though the "
            "embeddings, the norms or the feed-forward layers may still hide a bug.",
            "Little: most classic bugs keep the shapes right and still train; only parity with a reference on the "
            "same weights and inputs, corner cases included, shows it is right.",
        ],
        answer=2,
        feedback=[
            "The chapter trains a model with scores / √d_model: it learns the copy task almost as well as the correct one, "
            "yet it is not the paper's model.",
            "Attention bugs (the wrong scale, the wrong projection, a missing transpose) train too; the loss cannot "
            "single out any part.",
            "Right: the projections compensate for a wrong scale, and a model whose heads are merged without the "
            "transpose still lowers its loss on the mixed-up positions; the checkers compare outputs on the same "
            "weights instead.",
        ],
    ),
    Question(
        prompt="Which sign points at a causal mask that leaks the next token (tril(1) instead of tril())?",
        options=[
            "A training loss far below a correct model's from the very first steps, and poor greedy decoding.",
            "A final training loss a little lower than a correct model's, reached only at the end of training once the "
            "leak has been learnt.",
            "A NaN loss early in training, because the shifted mask lets the scores of future positions overflow "
            "the softmax.",
        ],
        answer=0,
        feedback=[
            "Right: copying the next decoder input is easy, so the leaky loss drops at once; at inference the next "
            "token does not exist, and greedy accuracy collapses.",
            "A lower final loss alone proves nothing: the √d_model model in the chapter also ends lower, and it "
            "leaks nothing.",
            "A leak gives finite, suspiciously good losses; NaN comes from fully masked rows filled with -inf.",
        ],
    ),
    Question(
        prompt="Batch-first code adds positions as pe[:x.size(0)].unsqueeze(1) to x of shape (batch, seq_len, "
               "d_model). When does it raise an error?",
        options=[
            "Never (for batch <= max_len): (batch, 1, d_model) broadcasts over the sequence; each sequence gets one "
            "encoding for all its positions.",
            "Whenever batch != seq_len: the encoding's first axis must match the sequence axis of x, so any other "
            "batch size raises a shape error at once.",
            "Only for batch size 1: then the slice has a single row, and its one encoding cannot be stretched over "
            "seq_len positions.",
        ],
        answer=0,
        feedback=[
            "Right: it is a silent broadcast. Only the numbers show it: within a sequence every position is equal.",
            "The table slice has the batch size on its first axis and 1 on the second, so it broadcasts against "
            "any sequence length.",
            "It runs silently for every batch size, not only 1; the chapter shows it on a batch of three.",
        ],
    ),
    Question(
        prompt="With -inf masking, which mask gives a query a fully masked row (and so a NaN output)?",
        options=[
            "Any padding mask: padded queries always get empty rows, since a pad token may attend to nothing, "
            "whether the padding sits on the left or on the "
            "right of the sentence.",
            "A left-padded target under the causal mask (its first, padded query sees only itself), an all-padding "
            "sequence, or a mask that hides padded queries as well as keys.",
            "A key-only padding mask on a right-padded batch: the padded queries at the end of each sentence find "
            "every key hidden.",
        ],
        answer=1,
        feedback=[
            "A key-only padding mask hides padded keys; a padded query still sees the real tokens, so its row is "
            "not empty.",
            "Right: those are the masks that leave a row with no True; then softmax gives 0/0 = NaN unless the row "
            "is handled.",
            "That is the case that does not produce one: every query, padded or not, still sees the real keys.",
        ],
    ),
]
