"""Chapter 12 quiz: attention entropy with masks, ablation with a hook, redundancy, and rank correlation."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="The first query of the decoder's masked self-attention sees one key. What is its normalised "
               "entropy H / log k?",
        options=[
            "0, because its single weight is 1: a query with all its weight on one key is as sharp as it can be.",
            "1, because it spreads its attention evenly over all it can see.",
            "Undefined (0 / 0), so such queries are left out of a head's average.",
        ],
        answer=2,
        feedback=[
            "Its entropy H is 0, but it is divided by log 1 = 0: the ratio has no meaning, and it says nothing "
            "about the head.",
            "Uniform over one key and pointing at one key are the same thing, which is why the ratio is 0 / 0.",
            "Right: with one visible key there is no choice to measure. The chapter skips such queries (and gives "
            "them 0 in the per-query tensor, never NaN).",
        ],
    ),
    Question(
        prompt="To switch head 2 off, you zero features 2·d_k … 3·d_k − 1 of the OUTPUT of W^O. Does that remove head "
               "2's contribution?",
        options=[
            "Yes: head 2 produced features 2·d_k … 3·d_k − 1, so zeroing that slice of the output removes exactly "
            "its share.",
            "No: after the projection W^O every feature mixes all heads; the slice must be zeroed in W^O's input.",
            "Yes, but only when d_k divides d_model evenly; otherwise the last head's slice spills into its "
            "neighbour's features after W^O.",
        ],
        answer=1,
        feedback=[
            "The slice belongs to head 2 only in the concatenation, before W^O mixes the heads together.",
            "Right: a forward pre-hook on w_o sees the concatenated heads, where head h owns its own slice.",
            "d_k always divides d_model here; the problem is where the zeroing happens, not the sizes.",
        ],
    ),
    Question(
        prompt="In the chapter, each head of the second decoder self-attention block costs far fewer exact-match points "
               "when removed on its own than the four cost together, which is almost every point. What does that "
               "show?",
        options=[
            "That the heads back each other up: each alone costs far less than the whole block (compare the "
            "block's bar with the heads' row in the chapter's figures).",
            "That the heads are unimportant: since no single head costs much, the model could drop any of them, "
            "and the whole block with them, at little cost "
            "to its accuracy.",
            "That the ablation hook is wrong: heads removed one by one should add up to the block's cost, so the hook "
            "misses part of each head.",
        ],
        answer=0,
        feedback=[
            "Right: single-head ablation underestimates what a block does when its heads carry overlapping "
            "information.",
            "Removing all four heads costs almost every point: small single-head costs say the heads overlap, not that "
            "they are unimportant.",
            "The hook was checked against a by-hand computation; the effect is real.",
        ],
    ),
    Question(
        prompt="Over 24 heads, Pearson's r between entropy and damage is only −0.27, and the damage is very skewed: a "
               "few heads cost far more than the rest. Why also report Spearman's rank correlation?",
        options=[
            "Because it correlates ranks, so a few extreme heads count as a few ranks instead of dominating the sum.",
            "Because Spearman's is always larger in size than Pearson's, so it shows the relation at its strongest.",
            "Because Pearson's r cannot be negative, so a falling trend between entropy and damage shows up only in "
            "the ranks.",
        ],
        answer=0,
        feedback=[
            "Right: a few outliers can make r look strong or weak; the rank correlation shows whether the trend "
            "holds across the heads.",
            "It can be larger or smaller; it answers a different question (a monotone trend, not a line).",
            "Pearson's r ranges from −1 to 1; its sign says whether damage rises or falls with entropy.",
        ],
    ),
]
