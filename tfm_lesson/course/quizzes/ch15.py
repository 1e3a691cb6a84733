"""Chapter 15 quiz: why the keys and values can be kept, what is cached, the shifted positions and mask,
cross-attention once, and what the cache costs."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="Why may a GPT keep the keys and values of earlier positions instead of recomputing them at "
               "every step?",
        options=[
            "Because of the causal mask: position i only looks at positions <= i, so appending a token cannot "
            "change anything computed for the earlier positions.",
            "Because the weights do not change during generation: every key, value and hidden state computed for a "
            "position is a fixed function of the weights, so it stays valid forever.",
            "Because attention is a linear function of its inputs, so the old keys and values add up with the new "
            "token's instead of being recomputed.",
        ],
        answer=0,
        feedback=[
            "Right: the chapter's first check shows it, the logits at positions 0..7 do not move when tokens 8..11 "
            "are added; so their keys and values, computed from those unchanged states, stay valid.",
            "Fixed weights are not enough: without a causal mask (an encoder, say), appending a token changes "
            "every earlier position's output, because each position attends to all others.",
            "Attention is not linear (the softmax is not), and linearity would not be the reason anyway: what "
            "matters is that earlier positions never see later ones.",
        ],
    ),
    Question(
        prompt="What does the cache of one self-attention layer hold, and along which axis does it grow?",
        options=[
            "The keys and values of every earlier position, (batch, heads, length, d_k), growing along the "
            "length axis (dim 2).",
            "The queries, keys and values of every position, (batch, heads, length, d_k) each, growing along the heads "
            "axis with every new token.",
            "The hidden states of every earlier position, (batch, length, d_model), from which keys and values are "
            "rebuilt.",
        ],
        answer=0,
        feedback=[
            "Right: the new token's query meets the keys of every position and mixes their values, so exactly "
            "those are kept, one more row per step along the length axis.",
            "Old queries are never needed again (only the new position asks a question), and the number of heads "
            "is fixed: new positions add rows along the length axis.",
            "Keeping hidden states would still force every layer to recompute the keys and values from them at "
            "every step; the cache keeps the keys and values themselves.",
        ],
    ),
    Question(
        prompt="With 10 tokens in the cache you feed one new token. Which position encoding does it get, and "
               "which mask?",
        options=[
            "Position 0, since it is the first token of this call, and the causal mask causal_mask(1) of that "
            "one-token call.",
            "Position 10, and the causal mask of the whole sequence, (11, 11).",
            "Position 10, and no mask: the single new query may attend to every cached key and to itself.",
        ],
        answer=2,
        feedback=[
            "Counting positions from 0 at each call gives every generated token the encoding of position 0: the "
            "model loses track of order and its outputs differ from the uncached ones.",
            "There is only one query row: the mask is (1, 11), all True; a (11, 11) mask does not even match the "
            "attention scores' shape.",
            "Right: the new token is the 11th, at position len(cache) = 10; its one query row may see all 11 keys, "
            "so nothing needs masking (several new tokens at once would need the causal mask shifted by 10).",
        ],
    ),
    Question(
        prompt="In an encoder-decoder, what happens to cross-attention's keys and values while decoding with a "
               "cache?",
        options=[
            "They are appended one position per step, like self-attention's, as the decoder writes each new target "
            "token.",
            "They cannot be cached, because the decoder's queries change at every step and the keys and values are "
            "computed with them.",
            "They are computed once from the memory at the first step and reused at every later step.",
        ],
        answer=2,
        feedback=[
            "Cross-attention's keys and values come from the encoder's memory, one per source token; no new source "
            "token appears while decoding, so nothing is appended.",
            "The queries do change, and they are computed fresh each step; the keys and values do not depend on "
            "them, so they can be kept.",
            "Right: K = m W^K and V = m W^V depend only on the memory m, which is fixed for the whole decoding; the "
            "chapter counts one key projection per layer with the cache, one per step without.",
        ],
    ),
    Question(
        prompt="What does the cache cost?",
        options=[
            "Nothing worth counting: the cache keeps only the newest key and value of each layer, so it saves work at "
            "no real cost.",
            "Memory: 2 x layers x batch x heads x d_k x length x bytes per number, growing with every generated "
            "token.",
            "Accuracy: cached generation gives slightly different tokens, because the cached keys go stale as the "
            "sequence grows.",
        ],
        answer=1,
        feedback=[
            "It saves work but keeps every key and value: for GPT-2 small at 1024 tokens in float32 that is "
            "72 MiB per sequence.",
            "Right: keys and values (the 2) for every layer, sequence, head and position; for long contexts and "
            "large batches the cache, not the weights, limits how many sequences fit.",
            "The chapter checks that the tokens are identical on its examples (greedy, sampling, beam search); the "
            "logits agree to float32 rounding, since the same numbers are multiplied in a different grouping, so "
            "in general the tokens can differ where two are nearly tied.",
        ],
    ),
]
