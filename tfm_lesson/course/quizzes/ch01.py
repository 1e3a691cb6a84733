"""Chapter 01 quiz: the scale, the softmax axis, saturation, and dot-product versus additive attention."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="A model has d_model = 512 and 8 heads, so each head has queries and keys of d_k = 64 numbers. "
               "By what are one head's scores Q Kᵀ divided?",
        options=["√512 ≈ 22.6, the root of d_model", "64, d_k itself, the number of products summed",
                 "√64 = 8, the square root of d_k"],
        answer=2,
        feedback=[
            "d_model is the width of the whole model; each head's dot products sum only d_k = 64 products, so "
            "their variance is 64, not 512.",
            "Dividing by d_k overcorrects: the scores' spread would shrink like 1/√d_k and the softmax would "
            "flatten towards uniform as the model grows.",
            "Right: a dot product of d_k unit-variance components has variance d_k; dividing by √d_k brings its "
            "spread back to 1.",
        ],
    ),
    Question(
        prompt="The attention weights have shape (q_len, k_len) and the softmax runs along dim=-1. What sums to one?",
        options=[
            "Each row: every query spreads one unit of attention over the keys.",
            "Each column: every key hands out one unit of attention over the queries.",
            "The whole table: all weights together sum to one.",
        ],
        answer=0,
        feedback=[
            "Right: row i is query i's distribution over the keys, so its output is a weighted average of the "
            "value rows.",
            "That is a softmax over dim=-2, the classic wrong axis: a query's weights would then not be an average "
            "of the values.",
            "The table sums to q_len, one per query; each row on its own is a probability distribution.",
        ],
    ),
    Question(
        prompt="What goes wrong when the scores are NOT divided by √d_k and d_k is large (say 1024)?",
        options=[
            "The scores spread over about ±√d_k, the softmax puts nearly all weight on one key, and its gradient "
            "becomes tiny, so queries and keys barely learn.",
            "Nothing that matters: the softmax only compares the scores with each other, so the same key wins and "
            "training goes on exactly as it does with the scale.",
            "The dot products of 1024 numbers grow beyond float32's range, overflow to infinity and turn the "
            "softmax's output into NaN.",
        ],
        answer=0,
        feedback=[
            "Right: the chapter measured a largest weight above 0.9 and a gradient below 0.1 at d_k = 1024 without "
            "the scale.",
            "The softmax is unchanged when a constant is ADDED to every score, not when the scores are multiplied: "
            "larger scores make it sharper.",
            "Scores of a few tens are far below float32's limit (about 3.4e38); the problem is the softmax's "
            "shape, not overflow.",
        ],
    ),
    Question(
        prompt="Why did the paper use (scaled) dot-product attention rather than additive attention, "
               "w·tanh(W₁q + W₂k)?",
        options=[
            "Unscaled dot products already beat additive attention at every d_k; the scale only speeds up training.",
            "Additive attention needs queries and keys of the same sequence length, so it could not serve "
            "cross-attention between a source and a target of different lengths.",
            "Dot products are one matrix product, much faster and lighter in practice; the 1/√d_k scale removes "
            "their weakness at large d_k.",
        ],
        answer=2,
        feedback=[
            "The paper reports the opposite for large d_k: additive attention beats unscaled dot products there; "
            "that is why it scales them.",
            "Additive attention scores any query against any key, whatever the sequence lengths; the difference is "
            "speed and memory.",
            "Right: similar cost in theory, but optimised matrix multiplication makes dot products far faster, and "
            "scaling keeps the softmax out of its flat region.",
        ],
    ),
]
