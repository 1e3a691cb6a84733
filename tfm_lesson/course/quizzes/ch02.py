"""Chapter 02 quiz: what a padding mask hides, polarity, the causal diagonal, masking after the softmax."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="A padding mask of shape (batch, 1, 1, k_len) is applied to scores of shape "
               "(batch, heads, q_len, k_len). What does it hide?",
        options=[
            "The padded queries: the rows of the padding positions, for every head, so that a pad token produces no "
            "output of its own.",
            "The padded keys: the same columns, for every head and every query of that sentence.",
            "Both the rows and the columns of the padding positions, so a pad token neither looks at nor is seen by "
            "any other.",
        ],
        answer=1,
        feedback=[
            "The mask's size-1 axes are heads and queries; it varies only along the keys. Padded queries still "
            "produce outputs, which the loss ignores later.",
            "Right: no query may look at a pad token, so its column is blocked everywhere; broadcasting repeats "
            "the (1, 1) axes over heads and queries.",
            "A (batch, 1, 1, k_len) mask cannot tell queries apart, so it cannot hide rows; it hides columns only.",
        ],
    ),
    Question(
        prompt="You give `nn.MultiheadAttention` a key_padding_mask that is True for real tokens (the tfm_lesson "
               "convention). What happens?",
        options=[
            "The same result as tfm_lesson: PyTorch uses one convention everywhere, True for the tokens that may be "
            "attended to.",
            "It runs and attends to the padding only: in nn.MultiheadAttention True means blocked.",
            "An error: PyTorch checks which convention a boolean mask follows and refuses one that marks the real "
            "tokens.",
        ],
        answer=1,
        feedback=[
            "F.scaled_dot_product_attention uses True = may attend, but nn.MultiheadAttention uses True = blocked.",
            "Right: flip it with ~mask (tfm_lesson.torch_mask) before handing it to nn.MultiheadAttention.",
            "A boolean mask cannot carry its meaning; PyTorch has no way to tell the two conventions apart.",
        ],
    ),
    Question(
        prompt="Why does the causal mask include the diagonal (query i may see key i)?",
        options=[
            "It does not matter much: without it each position still reads every earlier token, which carries the "
            "context it needs.",
            "A position must see itself: without the diagonal the first position would see no key at all, and "
            "each position would lose its own token.",
            "The diagonal lets position i see token i, the very token it is trained to predict, which the "
            "decoder needs during training.",
        ],
        answer=1,
        feedback=[
            "It matters: without the diagonal, row 0 is fully masked (NaN with -inf) and every position loses "
            "its own input.",
            "Right: tril() keeps j <= i. The token to predict is the next one, i + 1, which stays hidden.",
            "Position i predicts token i + 1, which lies above the diagonal and stays hidden; seeing itself is "
            "allowed.",
        ],
    ),
    Question(
        prompt="You compute softmax(scores) and then multiply the weights by the mask. Which is true?",
        options=[
            "Exactly masking before the softmax: the blocked weights become 0 and the visible weights keep their "
            "values, so nothing else changes.",
            "It can never be repaired: the blocked keys already took part in the softmax, so their scores have changed "
            "every visible weight in a way no division can undo.",
            "The blocked weights are 0 but the rows no longer sum to one; divide each row by its new sum and the "
            "weights equal masking before the softmax.",
        ],
        answer=2,
        feedback=[
            "Not without renormalising: each row now sums to the visible keys' share, less than one.",
            "The blocked keys only inflated the denominator, which renormalising removes again.",
            "Right: both give e^S_ij divided by the sum over the visible keys; the chapter checks it numerically. "
            "In floating point, though, a hidden key whose score dwarfs the others underflows the visible weights "
            "to 0 and the division gives NaN: mask before the softmax.",
        ],
    ),
]
