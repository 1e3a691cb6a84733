"""Chapter 03 quiz: why projections, parameters versus heads, thin heads, cross-attention."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="Without projections (Q = K = x, tokens of equal length), which is true of the scores x xᵀ?",
        options=[
            "Nothing special: the scores are as free as with projections, so a token may still score highest on the "
            "previous word.",
            "They are all equal, since tokens of equal length give equal dot products, so the weights are uniform "
            "over the sentence.",
            "They are symmetric and every token's best match is itself, so a question like \"look at the "
            "previous word\" cannot be asked.",
        ],
        answer=2,
        feedback=[
            "x_i · x_j = x_j · x_i: the table is always symmetric, and for vectors of equal length the diagonal is "
            "the largest entry of its row.",
            "Equal lengths do not make equal dot products: the angle between two tokens still varies, so the scores "
            "are symmetric, not equal.",
            "Right: with learned W^Q ≠ W^K the score x_i W^Q (W^K)ᵀ x_jᵀ is no longer symmetric, so token i can "
            "look at j without j looking at i.",
        ],
    ),
    Question(
        prompt="A multi-head attention layer with d_model = 512 goes from 8 heads to 16. How does its number of "
               "parameters change?",
        options=["It doubles: each head has its own W^Q, W^K and W^V.", "It does not change.", "It halves."],
        answer=1,
        feedback=[
            "More heads means thinner heads (d_k = d_model / h), not more weights: W^Q, W^K, W^V and W^O stay "
            "d_model × d_model.",
            "Right: 4·d_model² + 4·d_model = 1,050,624 for any number of heads, as the chapter printed.",
            "Each projection is still d_model × d_model; the heads are slices of it.",
        ],
    ),
    Question(
        prompt="Why does each of the h heads work in d_k = d_model / h dimensions rather than d_model?",
        options=[
            "So that h heads together cost about as much as one full-width head.",
            "Because the softmax saturates on wide vectors, and a narrow head keeps its weights soft.",
            "Because the scale 1/√d_k must be larger than 1/√d_model for the softmax to stay sharp enough.",
        ],
        answer=0,
        feedback=[
            "Right: the h heads' queries, keys and values are slices of one d_model-wide projection, so the "
            "compute and the parameters stay those of a single head.",
            "The softmax acts on the scores of a row, of length k_len, whatever d_k is.",
            "The scale follows from d_k; it is not the reason for choosing d_k.",
        ],
    ),
    Question(
        prompt="In the decoder's cross-attention (target length n, source length m), where do the queries, keys "
               "and values come from, and what shape are one head's weights?",
        options=[
            "Queries from the decoder, keys and values from the encoder's output; (n, m).",
            "All three from the decoder, whose stream already holds what the encoder passed it; (n, n).",
            "Queries from the encoder's output, keys and values from the decoder; (m, n).",
        ],
        answer=0,
        feedback=[
            "Right: each target position asks its question of the source sentence, so the map is not square, and "
            "the padding mask is the source's.",
            "That is the decoder's self-attention, its first sub-layer; the source reaches the decoder's stream only "
            "through cross-attention.",
            "The target positions are the ones that ask (queries); the source answers (keys and values).",
        ],
    ),
]
