"""Chapter 08 quiz: cross-attention's queries, the causal mask, the memory in pre-norm, and the final norm."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="In the decoder's cross-attention, where do the queries come from, and where the keys and values?",
        options=[
            "Queries from the encoder's output (the memory), keys and values from the decoder.",
            "All three from the memory; the decoder adds the result.",
            "Queries from the decoder, keys and values from the memory.",
        ],
        answer=2,
        feedback=[
            "Reversed: then the output would have one row per *source* token, (s, d_model), and could not be added "
            "to the decoder's (t, d_model) stream.",
            "Then every target position would get the same output, whatever it is: the query is what makes the "
            "answer depend on the target position.",
            "Right: each target position asks the source, cross_attn(x, memory, memory, memory_mask); the "
            "weights are (t, s), one row per target token.",
        ],
    ),
    Question(
        prompt="During training the decoder sees the whole target at once. What keeps position i from "
               "reading the token it must predict?",
        options=[
            "The padding mask: a target's later tokens count as padding until their turn.",
            "The causal mask: query i may attend only to keys j <= i.",
            "Nothing: the model cannot use the future anyway.",
        ],
        answer=1,
        feedback=[
            "The padding mask hides padded keys only; real future tokens would still be visible.",
            "Right: with the lower-triangular mask one parallel pass equals decoding prefix by prefix, and a "
            "later token cannot change an earlier output (the chapter checks both).",
            "Without the mask the decoder would copy the next token and learn nothing useful; the chapter shows "
            "every position changing when the last token changes.",
        ],
    ),
    Question(
        prompt="In a pre-norm decoder layer (norm_first=True), what does LayerNorm_2 normalise before "
               "cross-attention?",
        options=[
            "The decoder's stream (the query) only; the memory enters as it is.",
            "Both the decoder's stream and the encoder's memory, so that queries and keys arrive on the same scale.",
            "The memory only: the decoder's stream was already normalised by norm1, before self-attention.",
        ],
        answer=0,
        feedback=[
            "Right: cross_attn(norm2(x), memory, memory, memory_mask). The memory already left the encoder "
            "through its final norm.",
            "Normalising the memory again with norm2 is a classic slip; the checker names it. It changes the keys "
            "and values and no longer matches nn.TransformerDecoderLayer.",
            "The norm sits at the entrance of the decoder's own branch: it normalises the query, the decoder's "
            "stream.",
        ],
    ),
    Question(
        prompt="Which decoder stack needs an extra LayerNorm after its last layer?",
        options=[
            "Only a pre-norm stack: the paper's post-norm stack has no final norm.",
            "The post-norm stack of the paper, like nn.Transformer's, which adds a final LayerNorm after its last "
            "decoder layer.",
            "Every stack: the paper's design and nn.Transformer both end the decoder with one more LayerNorm.",
        ],
        answer=0,
        feedback=[
            "Right: a final norm is needed where the stream leaves the last layer unnormalised, in pre-norm. "
            "from_torch maps nn.Transformer's extra norm to final_norm=True.",
            "The paper's post-norm layers each end with a norm, so its stack needs none; nn.Transformer adds one "
            "anyway, an extra of PyTorch's.",
            "nn.Transformer does always add one, but that is PyTorch's choice, not the paper's design.",
        ],
    ),
]
