"""Chapter 05 quiz: what layer norm averages over, its variance and eps, the placements, dropout's place."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="For a tensor of shape (batch, seq_len, d_model), over which numbers does layer norm compute each "
               "mean and variance?",
        options=[
            "Over the batch: the same feature of every sentence, as batch norm does.",
            "Over the d_model features of one position, each position on its own.",
            "Over all the positions and features of one sentence.",
        ],
        answer=1,
        feedback=[
            "That is batch norm. Layer norm never looks at the other sentences, so it behaves the same for any "
            "batch size, in training and at inference.",
            "Right: the statistics are taken over the last axis, dim=-1, with keepdim=True so they broadcast back.",
            "Each position is normalised separately; mixing positions would make one token's output depend on "
            "the padding and length of its sentence.",
        ],
    ),
    Question(
        prompt="Which formula matches torch.nn.LayerNorm (before the gain and shift)?",
        options=[
            "(x − mean) / (x.std(-1) + eps), with torch's default (unbiased) standard deviation over the features.",
            "(x − mean) / sqrt(var + eps), var the biased variance (divide by d_model).",
            "(x − mean) / sqrt(var) + eps, var the biased variance, eps added once the division is done.",
        ],
        answer=1,
        feedback=[
            "Two slips at once: torch.std divides by d_model − 1 by default, and eps sits outside the root; both "
            "change the numbers (the second badly for small variances).",
            "Right: the population variance, and eps inside the square root, which keeps a constant row finite.",
            "eps added to the output does not protect the division: a constant row still divides by zero.",
        ],
    ),
    Question(
        prompt="Which is the pre-norm residual block?",
        options=[
            "LayerNorm(x + Sublayer(x))",
            "LayerNorm(x) + Sublayer(LayerNorm(x))",
            "x + Sublayer(LayerNorm(x))",
        ],
        answer=2,
        feedback=[
            "That is post-norm, the paper's placement (section 3.1): it normalises the sum.",
            "The residual must carry the raw x; adding norm(x) back rescales the whole stream at every block.",
            "Right: only the sub-layer's input is normalised; the raw stream x stays on the residual path, and the "
            "stack ends with a final layer norm.",
        ],
    ),
    Question(
        prompt="Where does the paper apply dropout in a residual block (section 5.4)?",
        options=[
            "To the sub-layer's output, before it is added to x.",
            "To the sum x + Sublayer(x), just before the norm, so that the whole residual stream is regularised.",
            "To the sub-layer's input, so that each sub-layer reads a partly dropped copy of x.",
        ],
        answer=0,
        feedback=[
            "Right: LayerNorm(x + Dropout(Sublayer(x))) in post-norm, x + Dropout(Sublayer(LayerNorm(x))) in "
            "pre-norm.",
            "Dropping out the sum also zeroes parts of x itself, the stream every later layer relies on.",
            "The paper drops the sub-layer's output (and the embeddings' sum at the bottom of the stacks), not the "
            "input of each sub-layer.",
        ],
    ),
]
