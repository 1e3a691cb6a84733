"""Chapter 14 quiz: a GPT is the decoder without cross-attention; byte-level BPE; next-token targets;
perplexity; temperature, top-k and top-p."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="What do you remove from chapter 08's decoder layer to get a GPT block?",
        options=[
            "The cross-attention sub-layer, with its layer norm and dropout: there is no encoder, so there is no "
            "memory to attend to.",
            "The causal mask: a language model should see the whole sentence around each word to understand it.",
            "The feed-forward network: attention alone is enough for next-token prediction, and dropping it halves the "
            "block's parameters.",
        ],
        answer=0,
        feedback=[
            "Right: masked self-attention and the feed-forward network stay, each with its residual, dropout and "
            "norm; cross-attention reads an encoder's output, and a decoder-only model has none.",
            "Without the causal mask, position t could read the token it must predict, and training would teach "
            "the model to copy it; the mask is what a GPT keeps.",
            "The feed-forward network holds most of a block's parameters and stays in every GPT.",
        ],
    ),
    Question(
        prompt="A byte-level BPE tokenizer meets a word, or an emoji, that never appeared in its training text. "
               "What happens?",
        options=[
            "It is replaced by an <unk> token, since only pieces seen in the training text made it into the "
            "vocabulary.",
            "It is encoded as shorter pieces, down to single bytes if needed, and decodes back exactly.",
            "Encoding raises an error: the merges cover only the byte sequences that appeared while the tokenizer was "
            "trained.",
        ],
        answer=1,
        feedback=[
            "A byte-level vocabulary starts with all 256 byte values, so every string has an encoding: no <unk> "
            "is ever needed.",
            "Right: merges only join pieces the training text made frequent; anything else stays as smaller "
            "pieces, at worst one token per byte, and decode(encode(s)) == s.",
            "Every string is a sequence of UTF-8 bytes, and each byte is a token: nothing can fail.",
        ],
    ),
    Question(
        prompt="A training window holds the tokens w[0] … w[64]. Which inputs x and targets y teach "
               "next-token prediction?",
        options=[
            "x = w[0:64], y = w[0:64]: the model predicts the token it reads at each position.",
            "x = w[1:65], y = w[0:64]: the model predicts the previous token.",
            "x = w[0:64], y = w[1:65]: the target at position t is the token after x[t].",
        ],
        answer=2,
        feedback=[
            "Position t can see x[t], so it would learn to copy its input: a loss near 0 that teaches nothing.",
            "This shifts the wrong way: the model would learn to name the token it has just read before, which "
            "says nothing about what comes next.",
            "Right: with the causal mask, position t sees w[0..t] and is scored on w[t+1]; one window gives 64 "
            "predictions at once.",
        ],
    ),
    Question(
        prompt="The chapter's model has a held-out perplexity of about 10 and a unigram model about 134. What does "
               "that say?",
        options=[
            "The model's top guess is right about one time in 10 and the unigram model's one time in 134: perplexity "
            "is the mean number of tries until the right token comes up.",
            "The model makes about 13 times fewer mistakes than the unigram model: the ratio of two perplexities is "
            "the ratio of their error rates.",
            "On average, the model is as unsure of the next token as a uniform choice among about 10 tokens; "
            "the unigram model, which ignores the context, as unsure as a choice among about 134.",
        ],
        answer=2,
        feedback=[
            "Perplexity is not an accuracy: it is exp of the mean cross-entropy, the effective number of equally "
            "likely choices.",
            "Perplexity is not an error rate, so neither is the ratio of two: it compares effective numbers of "
            "choices, about 134 against about 10.",
            "Right: perplexity = exp(mean −log p(next token)); using the context cuts the choice from about 134 "
            "to about 10.",
        ],
    ),
    Question(
        prompt="You sample with top_p = 0.9 and the model is very sure: the most probable next token has "
               "probability 0.95. Which tokens can be drawn?",
        options=[
            "The most probable tokens that together make up 90% of the vocabulary, however much probability they hold.",
            "Only that token: it alone already holds at least 0.9 of the probability.",
            "Every token with at least 0.9 × the top probability, here 0.855 and above.",
        ],
        answer=1,
        feedback=[
            "top-p counts probability mass, not a share of the vocabulary.",
            "Right: top-p keeps the smallest set of most probable tokens whose probabilities reach p, so a sure "
            "model draws from one token and an unsure one from many; the set adapts, unlike top-k.",
            "That is a different rule (a threshold relative to the maximum, sometimes called min-p); top-p sums "
            "probabilities from the top until they reach p.",
        ],
    ),
    Question(
        prompt="What does a temperature close to 0 do to sampling?",
        options=[
            "Dividing the logits by a tiny temperature makes the largest one dominate the softmax: sampling "
            "becomes greedy decoding.",
            "It flattens the distribution: every token becomes almost equally likely, and the sampled text turns "
            "random.",
            "It has no effect once top-k is used: the k kept tokens are drawn by rank, so rescaling the logits changes "
            "nothing.",
        ],
        answer=0,
        feedback=[
            "Right: differences between logits are multiplied by 1/τ, so the probability of the argmax goes to 1; "
            "temperature 0 is defined as greedy (the argmax) to avoid dividing by zero.",
            "That is what a very HIGH temperature does: logits / τ (τ the temperature) all tend to 0, and the "
            "softmax becomes uniform.",
            "The kept tokens are drawn by probability, not by rank: temperature changes those probabilities among "
            "the tokens top-k keeps (and which tokens top-p keeps).",
        ],
    ),
]
