"""Chapter 16 quiz: RMSNorm, rotary positions, SwiGLU, grouped-query attention, and reading an ablation."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="RMSNorm computes weight * x / sqrt(mean(x**2) + eps). Compared with layer norm, what does it drop?",
        options=[
            "The division by the spread: RMSNorm only subtracts the mean and applies the gain, so each vector keeps "
            "its size.",
            "The learned gain: RMSNorm has no parameters and only divides by the root mean square.",
            "Subtracting the mean (re-centring) and the shift beta; it keeps the re-scaling and the gain.",
        ],
        answer=2,
        feedback=[
            "It is the other way round: RMSNorm keeps the division (by the root mean square) and drops the mean.",
            "RMSNorm keeps one learned gain per feature, `weight`, initialised to ones; it has no shift `bias`.",
            "Right. The scale is what keeps each sub-layer's input a steady size; the mean can stay. A vector with "
            "a non-zero mean still has one after RMSNorm, divided like every feature by the root mean square "
            "(layer norm would set it to 0).",
        ],
    ),
    Question(
        prompt="With rotary embeddings, the query at position m and the key at position n are each rotated by "
               "their own position. What does their dot product depend on?",
        options=[
            "The tokens and the absolute positions m and n.",
            "The two tokens and the difference m - n only.",
            "The two tokens and the distance |m - n|, whichever comes first.",
        ],
        answer=1,
        feedback=[
            "Rotating both vectors by the same extra angle leaves their dot product unchanged, so shifting m and n "
            "together changes nothing: absolute positions drop out.",
            "Right. Pair i of q is turned by m theta_i and of k by n theta_i; the dot product sees only the angle "
            "between them, (m - n) theta_i. That is why RoPE gives relative positions.",
            "The sign matters: m - n = 3 and m - n = -3 are different rotations, and the chapter shows their scores "
            "differ. (In a causal model, keys are never after the query anyway.)",
        ],
    ),
    Question(
        prompt="You generate with a KV cache and RoPE. The cache holds 10 positions. How do you rotate the query "
               "and key of the next token?",
        options=[
            "By position 10 = len(cache): the keys already cached were rotated by 0 .. 9 and keep their rotation.",
            "By position 0: each call sees one token, so it is the first position of its input.",
            "Rotate the new key by 10, then rotate every cached key again by 10 so that all keys share the same "
            "reference position.",
        ],
        answer=0,
        feedback=[
            "Right. The offset is len(cache); the cached keys were stored already rotated and never change.",
            "That is the classic cache bug: every new token would believe it sits at position 0, and the scores "
            "with the cached keys would use the wrong relative positions.",
            "Cached keys must not be rotated again: their rotation encodes their own position, which has not moved.",
        ],
    ),
    Question(
        prompt="A model has 32 query heads and 8 key/value heads (grouped-query attention). Which key/value head "
               "does query head 5 use, and how much smaller is its KV cache than with 32 key/value heads?",
        options=[
            "Head 5 // 4 = 1; the cache is 4 times smaller.",
            "Head 5 % 8 = 5; the cache is 4 times smaller.",
            "Head 5 // 4 = 1; the cache is the same size, only the weights shrink.",
        ],
        answer=0,
        feedback=[
            "Right. Groups are consecutive: heads 4-7 share key/value head 1 (repeat_interleave order, as "
            "F.scaled_dot_product_attention(enable_gqa=True) and transformers use). The cache stores 8 heads, not 32.",
            "That is the tiled order you get from `k.repeat(1, 4, 1, 1)`: it pairs query heads with the wrong "
            "key/value heads, and loaded weights then give wrong outputs.",
            "The cache stores keys and values per key/value head, so it shrinks by heads / kv_heads = 4; that, not "
            "the weights, is the point of GQA.",
        ],
    ),
    Question(
        prompt="SwiGLU has three matrices (gate, up, down) where the 2017 feed-forward network has two. To keep "
               "the parameter count of a d_ff = 2048 network, what hidden size does it use?",
        options=["2048, as in the 2017 network", "4096, twice d_ff, one half for the gate",
                 "about 1365, that is 2/3 of 2048"],
        answer=2,
        feedback=[
            "With three d_model x 2048 matrices SwiGLU would have 1.5 times the parameters, and any gain could "
            "come from the extra size rather than from the gate.",
            "That would triple the parameters of the feed-forward network.",
            "Right: 3 x d_model x (2/3) d_ff = 2 x d_model x d_ff. Llama then rounds up to a multiple, multiple_of "
            "(256 in Llama 1 and Llama 2 7B/13B, larger in Llama 2 70B and Llama 3: exercise 3).",
        ],
    ),
    Question(
        prompt="In the chapter's ablation, one change lowers the mean held-out loss by 0.01 while the paired "
               "differences over 3 seeds (for each seed, the new variant's loss minus the old one's) have a standard "
               "deviation of 0.03. What can you conclude?",
        options=[
            "The change helps: its mean held-out loss is lower, and a mean over 3 seeds has already averaged the "
            "noise out.",
            "The change hurts: the paired differences spread three times wider (0.03) than the mean gain (0.01), so "
            "the new variant is really worse.",
            "Nothing at this scale: the difference is inside the noise; more seeds, longer runs or larger "
            "models would be needed to tell.",
        ],
        answer=2,
        feedback=[
            "The paired differences vary by three times their mean from seed to seed: the 95% interval, 0.01 +/- "
            "4.3 x 0.03 / sqrt(3) = 0.01 +/- 0.07, contains 0, so a lower mean alone is not evidence.",
            "An interval that contains 0 means we cannot tell the sign, not that the sign is negative.",
            "Right. These changes were adopted because they help at scale (and, for GQA, for memory); a tiny model "
            "trained for a few minutes cannot confirm or refute that.",
        ],
    ),
]
