"""Chapter 09 quiz: the embedding scale, weight tying, what the generator returns, and where the parameters are."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="The base model has d_model = 512 and 8 heads (d_k = 64). By what are the token embeddings "
               "multiplied before the positional encoding is added?",
        options=[
            "√d_k = 8, the same factor as in attention.",
            "√d_model ≈ 22.6.",
            "Nothing: embeddings and positions are added as they are.",
        ],
        answer=1,
        feedback=[
            "√d_k is attention's scale (it divides the scores). The embedding factor is about a vector of "
            "d_model entries: with entries of variance 1/d_model, √d_model brings each entry to unit variance.",
            "Right. The paper gives no reason; one reading (tensor2tensor's initialisation, which the package "
            "follows): an embedding drawn from N(0, 1/d_model) has norm about 1; times √d_model its norm is about "
            "22.6, the order of the positional encoding's 16, so the sum carries both word and position.",
            "Then the positional encoding (norm 16 at d_model = 512) would drown the word (norm about 1), 16 to 1; "
            "the chapter measures both.",
        ],
    ),
    Question(
        prompt="generator.weight = embedding.weight ties the output layer to the embedding. What happens in "
               "training?",
        options=[
            "The two start equal and then drift apart as each gets its own gradient.",
            "It is one Parameter: its gradient sums both uses, and it is counted once.",
            "The generator needs the transpose, embedding.weight.T, or the shapes do not match.",
        ],
        answer=1,
        feedback=[
            "That is what a copy (.clone(), copy_) does. Assigning the Parameter object shares it: there is "
            "nothing to drift.",
            "Right: one tensor, three roles in the paper (source embedding, target embedding, generator), and one "
            "gradient that sums all of them.",
            "nn.Linear(d_model, V).weight is stored (out, in) = (V, d_model), exactly the embedding's shape: no "
            "transpose.",
        ],
    ),
    Question(
        prompt="T.Transformer's generator returns logits. Why not probabilities from a softmax?",
        options=[
            "Because the paper's model has no softmax: its output layer is a linear map, and training compares those "
            "scores with the targets directly.",
            "Logits become probabilities once trained: the loss pushes each row to be positive and to sum to one, so a "
            "softmax adds nothing.",
            "F.cross_entropy applies log-softmax itself, in one numerically stable step; softmax(...).log() "
            "underflows to -inf for unlikely tokens.",
        ],
        answer=2,
        feedback=[
            "The paper's generator ends in a softmax; in code it is left to the loss, which is the same "
            "computation.",
            "Logits are unnormalised scores (any real number); probabilities are positive and sum to one. "
            "Training does not change that.",
            "Right: the chapter shows softmax().log() giving -inf where log_softmax() gives a finite number.",
        ],
    ),
    Question(
        prompt="Of the base model's 63.1 million parameters (shared 37,000-token vocabulary), which part is "
               "largest?",
        options=[
            "The encoder: 6 layers of 3.15 M.",
            "The shared embedding: 37,000 x 512, about 30 %, 18.9 M.",
            "The decoder: 6 layers of 4.2 M, about 40 %.",
        ],
        answer=2,
        feedback=[
            "The encoder's 18.9 M ties with the embedding; a decoder layer is larger than an encoder layer "
            "(it has cross-attention and a third norm).",
            "The shared embedding is 37,000 x 512 = 18.9 M, about 30 %; large, but the decoder holds more.",
            "Right: 25.2 M in the decoder; the embedding (18.9 M, counted once thanks to sharing) and the "
            "encoder (18.9 M) follow.",
        ],
    ),
]
