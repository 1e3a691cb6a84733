"""Chapter 04 quiz: order blindness, adding positions, the positional term inside attention, learned versus
sinusoidal encodings."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="Self-attention without positional encoding reads \"dog bites man\" and \"man bites dog\". "
               "What does it give the word dog?",
        options=[
            "The same vector: attention treats its input as a set, so shuffling the tokens only shuffles the "
            "outputs.",
            "Different vectors: the dot products change when the words come in a different order, so dog's weights "
            "over the other words change too.",
            "A different vector only for the words that moved: dog changed place, so its vector changes, while "
            "bites, still in the middle, keeps its own.",
        ],
        answer=0,
        feedback=[
            "Right: attention is permutation equivariant, so order has to be written into the vectors.",
            "Nothing in attention depends on where a token sits; the chapter measured the outputs moving with the "
            "shuffle.",
            "Where a word sits never enters attention: dog gets the same vector in both sentences, whether or not it "
            "moved.",
        ],
    ),
    Question(
        prompt="With projections W^Q and W^K, which positional term enters the attention score of positions p "
               "and q (vectors as rows)?",
        options=[
            "PE_p · PE_q, the plain dot product plotted in the chapter.",
            "None: positions enter after attention.",
            "PE_p W^Q (W^K)ᵀ PE_qᵀ, divided by √d_k.",
        ],
        answer=2,
        feedback=[
            "Only when W^Q (W^K)ᵀ is the identity; in general the projections reweight and turn the pairs of "
            "columns.",
            "The encoding is added to the embeddings before the first layer, so it passes through every projection.",
            "Right: a head can choose its matrices so that this term is largest at a chosen offset q = p + k.",
        ],
    ),
    Question(
        prompt="How is the positional encoding combined with the token embeddings in the paper?",
        options=[
            "Added: both have d_model numbers per token.",
            "Concatenated, giving 2·d_model per token.",
            "Multiplied element by element, each feature scaled by its position's wave.",
        ],
        answer=0,
        feedback=[
            "Right: x + PE[:seq_len], the same encoding for every sentence of the batch.",
            "The paper adds them; the width stays d_model (the embeddings are first scaled by √d_model).",
            "Multiplying would zero a token's features wherever the encoding is near 0.",
        ],
    ),
    Question(
        prompt="What did the paper find when it replaced the sinusoids by learned positional embeddings "
               "(table 3, row E)?",
        options=[
            "Learned embeddings were clearly better, with a lower perplexity and a higher BLEU, so most models since "
            "have used them for that reason.",
            "Nearly identical results (the same dev perplexity, 4.92; BLEU 25.7 against 25.8); the sinusoids were "
            "kept because they may extrapolate to longer sequences.",
            "Learned embeddings trained worse: they overfit the positions seen in training, so the paper kept the "
            "sinusoids for their accuracy.",
        ],
        answer=1,
        feedback=[
            "The paper reports 0.1 BLEU in favour of the sinusoids, with the same perplexity: no clear winner.",
            "Right: a learned table also stops at max_len, which is the paper's argument for the sinusoids.",
            "They trained to the same perplexity as the base model.",
        ],
    ),
]
