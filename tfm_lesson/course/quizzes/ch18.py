"""Chapter 18 quiz: the online softmax's rescaling, where normalisation happens, what the backward pass keeps,
what tiling saves (memory, not FLOPs), and why decoding is bound by memory traffic."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="The online softmax has read two blocks of a row: its running maximum is m = 3 and its running sum "
               "d = sum of exp(x - 3) over them. The third block's largest score is 5. What happens to d?",
        options=[
            "d is multiplied by exp(3 - 5) first, so that every term is measured against the new maximum 5; then the "
            "third block's exp(x - 5) terms are added.",
            "Nothing: the third block's exp(x - 5) terms are added to d; the maximum is subtracted only to keep "
            "exp() from overflowing.",
            "d is thrown away and recomputed from the first two blocks, which the online softmax keeps in memory for "
            "exactly this case, now measured against the new maximum 5.",
        ],
        answer=0,
        feedback=[
            "Right: exp(x - 3) x exp(3 - 5) = exp(x - 5), so one multiplication moves the whole sum to the new "
            "maximum; the output accumulator of tiled attention gets the same factor.",
            "Then the old terms count exp(x - 3) and the new ones exp(x - 5): the old blocks weigh exp(2), about "
            "7.4 times, too much. This is the mistake the chapter's checker calls 'not rescaled'.",
            "The point of the online softmax is that no block is kept or read twice: the maximum and the sum are "
            "all it needs to carry forward.",
        ],
    ),
    Question(
        prompt="In tiled attention, when is the accumulated output divided by the softmax's sum?",
        options=[
            "After every key tile, by that tile's own sum, so that each tile's weights sum to 1.",
            "Once, after the last key tile, by the running sum l of the whole row.",
            "Never: the running maximum already makes the weights sum to 1.",
        ],
        answer=1,
        feedback=[
            "Each tile's weights would sum to 1 on their own, so a row of three tiles would weigh 3 in all: the "
            "checker's mistake 'normalised by that tile's own sum (softmax per tile)'.",
            "Right: the sum over the whole row is known only at the end; the accumulator keeps unnormalised "
            "exp(score - m) x value sums, rescaled whenever m grows, and one division finishes it.",
            "Subtracting the maximum only keeps exp() from overflowing; it does not normalise anything.",
        ],
    ),
    Question(
        prompt="Tiled attention with a causal mask, tiles of 4: the tile of queries 8..11 and keys 4..7. Which "
               "of its entries may attend?",
        options=[
            "All of them: every key 4..7 comes before every query 8..11.",
            "The lower triangle of the 4 x 4 tile, as in every tile: torch.ones(4, 4).tril().",
            "None: the tile is off the diagonal, where the causal mask blocks every entry.",
        ],
        answer=0,
        feedback=[
            "Right: key j is visible to query i when j <= i, and 7 <= 8; only tiles that cross the diagonal "
            "need a mask, and tiles wholly above it are skipped.",
            "That is the tile's own row and column, not the positions in the sequence: it would hide keys 5..7 "
            "from query 8, which may see them. The causal rule compares q0 + row with k0 + column.",
            "Tiles above the diagonal (keys after every query) are the ones to skip; this one lies below it.",
        ],
    ),
    Question(
        prompt="What does the backward pass of the chapter's FlashAttention keep from the forward pass, besides "
               "Q, K and V?",
        options=[
            "The (q_len, k_len) matrix of probabilities, since the softmax's gradient needs every probability it "
            "produced.",
            "Nothing: the backward pass reruns the whole forward pass, tile by tile, to rebuild every running maximum "
            "and running sum before it differentiates.",
            "The output and one number per query, the log-sum-exp of its scores; each tile of probabilities is "
            "recomputed as exp(S - lse).",
        ],
        answer=2,
        feedback=[
            "Keeping it would bring back the (q_len, k_len) memory the forward pass avoided; it is recomputed "
            "instead, one tile at a time.",
            "One number per query is enough to recompute each tile exactly in one step: no second pass of running "
            "maxima is needed.",
            "Right: with lse = m + log l, exp(S - lse) is the normalised probability at once, so no running maximum "
            "is needed; the output gives rowsum(dO x O), the other term of softmax's gradient.",
        ],
    ),
    Question(
        prompt="Against the explicit attention, what does tiling change on this CPU?",
        options=[
            "The number of floating-point operations: tiles never form the full score matrix, so they skip most of "
            "its work.",
            "The memory: no (q_len, k_len) matrix is formed, only tiles of block x block and O(q_len) running "
            "state, for the same result up to rounding.",
            "The result: tiles give an approximation of softmax attention, since each tile sees only part of the row, "
            "close but not exact.",
        ],
        answer=1,
        feedback=[
            "Without a causal mask the same products are computed (and the backward pass recomputes scores, so "
            "it does more work); only the causal version skips tiles above the diagonal.",
            "Right: the chapter measures the explicit path's peak growing with the square of the length and the "
            "tiled one growing with the length. On a GPU the fused kernel is also faster, because it reads and "
            "writes less of the slow memory; a Python loop on a CPU is not reliably faster (see the chapter's "
            "timing table).",
            "The online softmax is exact: the chapter shows the outputs equal to PyTorch's SDPA within 1e-6 in "
            "float32, and the gradients equal in float64.",
        ],
    ),
    Question(
        prompt="Why is generating one token at a time (decode) bound by memory traffic rather than arithmetic?",
        options=[
            "Each step multiplies a single row (1, d_model) by every weight matrix: about 2 FLOPs per weight read, "
            "so the processor waits for the weights (and the KV cache) to arrive.",
            "Because the softmax is expensive: each step takes exp() of a score for every cached key, and exp() "
            "costs far more than a multiply-add.",
            "Because decoding uses a causal mask, which a matrix product cannot use, so every step falls back to "
            "slow element-by-element work.",
        ],
        answer=0,
        feedback=[
            "Right: a matrix-vector product does about 1 FLOP per byte of float16 weight read, below the "
            "intensity at which the chapter's one-thread roofline turns flat and far below a GPU's; prefill "
            "multiplies many rows at once and reuses every weight. This is why the KV cache's size, and "
            "grouped-query attention, matter.",
            "The softmax is a small part of a step; the weight matrices and the cache are what is read every step.",
            "With a KV cache a single new token needs no mask at all; the mask has nothing to do with it.",
        ],
    ),
]
