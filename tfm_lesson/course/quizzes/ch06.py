"""Chapter 06 quiz: what "position-wise" means, why the activation matters, and where the parameters are."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="The feed-forward network maps x of shape (batch, seq_len, d_model) to the same shape. "
               "Does output position 3 depend on the input at position 5?",
        options=[
            "No: the same small network is applied to each position on its own; only attention mixes positions.",
            "Yes: the FFN mixes information across positions, like attention does, since W_1 sees the whole (seq_len, "
            "d_model) input.",
            "Only when seq_len is larger than d_ff: then the hidden units must be shared out among the positions, "
            "which start to mix.",
        ],
        answer=0,
        feedback=[
            "Right: 'position-wise' means the same W_1, b_1, W_2, b_2 at every position and no position looks at "
            "another; it is exactly two 1x1 convolutions.",
            "That is attention's job. The FFN's W_1 and W_2 act on the last axis (features) only; the chapter "
            "changes position 0 and sees only output 0 move.",
            "The sizes do not matter: no weight of the FFN ever connects two positions, whatever seq_len and d_ff.",
        ],
    ),
    Question(
        prompt="You remove the ReLU between W_1 and W_2 (d_model = 512, d_ff = 2048). What is left?",
        options=[
            "A wider, more powerful network: 2048 hidden units instead of 512, each its own feature.",
            "The same function as before: ReLU only speeds up training, so the network still computes what it did, "
            "just more slowly.",
            "One linear map x W + b with W = W_1 W_2, a 512 x 512 matrix: the expansion buys nothing.",
        ],
        answer=2,
        feedback=[
            "Without a nonlinearity the hidden layer is just an intermediate product: (x W_1 + b_1) W_2 + b_2 "
            "= x (W_1 W_2) + (b_1 W_2 + b_2), of rank at most 512.",
            "It is not the same function: with ReLU the FFN is not linear (the chapter tests f(a + b) against "
            "f(a) + f(b) - f(0)); without it, it is.",
            "Right: two linear maps compose into one; the chapter builds W_1 W_2 and shows the outputs equal.",
        ],
    ),
    Question(
        prompt="In the base model (d_model = 512, d_ff = 2048), what share of one DECODER layer's parameters "
               "does the feed-forward network hold?",
        options=[
            "About half: the decoder layer's extra cross-attention is as large as its self-attention.",
            "About two thirds, as in the encoder layer: the FFN's 2 d_model d_ff weights dominate.",
            "A small share: attention holds most of them, since a decoder layer has two attentions of four "
            "d_model x d_model matrices each.",
        ],
        answer=0,
        feedback=[
            "Right: 2.1 M of about 4.2 M, 49.9%. The FFN's 8 d_model^2 weights face two attentions of "
            "4 d_model^2 each.",
            "Two thirds is the encoder layer's share (2.1 M of 3.15 M). A decoder layer adds a second attention "
            "of 1.05 M and a third norm.",
            "Each attention has 4 d_model^2 + 4 d_model parameters whatever the number of heads; the FFN has "
            "2 d_model d_ff + d_ff + d_model, twice one attention's.",
        ],
    ),
    Question(
        prompt="What is true of GELU(z) = z Φ(z)'s slope, in float32?",
        options=[
            "It is zero at the minimum (z ≈ -0.75), changes sign there, and the vectorised CPU kernel returns "
            "exactly 0 far left (from about z = -6.5), though the true slope there, about -7.6e-22 at z = -10, "
            "fits in float32.",
            "It is never exactly zero: Φ(z) + z φ(z) stays positive for every z and float32 holds numbers down to "
            "about 1e-38, so unlike ReLU no unit can ever be dead, even far to the left.",
            "It is exactly zero for every negative z, as for ReLU: GELU only rounds the corner at 0, so a negative "
            "input passes no gradient at all.",
        ],
        answer=0,
        feedback=[
            "Right: the chapter prints the slope at several z: negative left of -0.75, positive right of it, "
            "and 0 from z = -6.5 on. That 0 is the vectorised float32 kernel's rounding near 1, not float32's "
            "range: the same kernel on a one-element tensor, and float64, print a tiny non-zero slope.",
            "The slope Φ(z) + z φ(z) crosses zero at the minimum, and in float32 the CPU kernel rounds it to "
            "exactly 0 for very negative z: GELU makes dead units rarer, not impossible.",
            "That is ReLU. GELU passes a small, even negative, slope over the moderately negative range.",
        ],
    ),
]
