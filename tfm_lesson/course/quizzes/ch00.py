"""Chapter 00 quiz: shapes, transposes, broadcasting, and why attention replaced recurrence."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="`k` has shape (2, 3, 7, 4): (batch, heads, k_len, d_k). What shape does `k.T` have?",
        options=["(2, 3, 4, 7)", "(3, 2, 7, 4)", "(4, 7, 3, 2)"],
        answer=2,
        feedback=[
            "Only the last two axes swapped: that is what `k.transpose(-2, -1)` (or `k.mT`) gives. `.T` does not "
            "stop at the last two axes.",
            "That swaps the first two axes, as for a matrix's rows and columns; on more than two dimensions `.T` "
            "reverses all four axes.",
            "`.T` reverses every axis of a tensor with more than two dimensions (PyTorch warns that this use "
            "is deprecated). In attention code swap only the last two: `transpose(-2, -1)`.",
        ],
    ),
    Question(
        prompt="Scores have shape (batch, heads, q_len, k_len). You apply a padding mask of shape (batch, k_len) "
               "without adding axes. What happens?",
        options=[
            "PyTorch matches the mask's first axis with the scores' first axis, the batch, so every sentence gets "
            "its own mask and it works.",
            "PyTorch inserts the two missing axes wherever the sizes agree, (batch, 1, 1, k_len), so the mask "
            "reaches every head and query.",
            "Shapes are aligned from the right, so the batch axis of the mask lands on q_len: an error, or, when "
            "batch == q_len, a silently wrong result.",
        ],
        answer=2,
        feedback=[
            "Broadcasting never matches axes by name or from the left; it lines shapes up from the right.",
            "Missing axes are only ever added on the left: (batch, k_len) is read as (1, 1, batch, k_len), so the "
            "batch axis meets q_len.",
            "Right: insert the missing axes, `mask[:, None, None, :]` of shape (batch, 1, 1, k_len), so that the "
            "batch axis meets the batch axis.",
        ],
    ),
    Question(
        prompt="`split` has shape (batch, heads, seq_len, d_k), made by `h.view(batch, seq_len, heads, d_k)"
               ".transpose(1, 2)`. What does `split.reshape(batch, seq_len, heads * d_k)` do?",
        options=[
            "It gives `h` back, because reshape copies the data whenever the strides require it.",
            "It runs without error but mixes tokens and heads: the transpose must be undone first.",
            "It raises an error, because the transposed tensor is no longer contiguous in memory and reshape refuses "
            "to read it.",
        ],
        answer=1,
        feedback=[
            "Copying keeps the logical order (batch, heads, seq_len, d_k); reading that order as "
            "(batch, seq_len, d_model) puts one head's tokens where another token's features belong.",
            "Right: `split.transpose(1, 2).reshape(batch, seq_len, heads * d_k)` is the correct merge.",
            "That is `view`; `reshape` copies instead of refusing, so no error warns you.",
        ],
    ),
    Question(
        prompt="According to the paper's comparison (section 4, table 1), what does self-attention gain over a "
               "recurrent layer?",
        options=[
            "Fewer operations per layer at every sentence length, since attending costs less than a recurrent step for "
            "each token, long inputs included.",
            "It has no learned weights: the softmax of the scores decides everything, so the layer has nothing to "
            "train.",
            "All positions are computed at once (O(1) sequential steps) and any two tokens are one step apart "
            "(path length O(1)).",
        ],
        answer=2,
        feedback=[
            "Self-attention costs about n²·d operations, a recurrent layer n·d²: attention is cheaper only while "
            "n < d, and costlier for long inputs.",
            "Attention layers have weights: the projections to queries, keys and values (chapter 03).",
            "Right: no step waits for the previous token, and information between distant tokens takes one step "
            "instead of n.",
        ],
    ),
]
