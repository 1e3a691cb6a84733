"""Chapter 10 quiz: teacher forcing, padding in the loss, label smoothing variants, warm-up, the step order,
decoding mode, and reading a loss curve."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="A target row is `<s> a b c </s>`. With teacher forcing, what does the decoder read and what must it "
               "predict?",
        options=[
            "It reads `<s> a b c </s>` and predicts `<s> a b c </s>`.",
            "It reads `a b c </s>` and predicts `<s> a b c`.",
            "It reads `<s> a b c` and predicts `a b c </s>`.",
        ],
        answer=2,
        feedback=[
            "Then every position is asked for the token it is reading: the target leaks into the input, the loss "
            "drops at once, and the model learns to copy, not to translate.",
            "That is the shift the wrong way round: the model would be asked for the previous token, which it has "
            "already read.",
            "Right: position i reads the true prefix up to token i and must say token i + 1 (tgt[:, :-1] in, "
            "tgt[:, 1:] out).",
        ],
    ),
    Question(
        prompt="A batch has 100 label positions, 30 of them padding. Your loss masks the padding out of the sum "
               "and divides by 100. What goes wrong?",
        options=[
            "The loss is 30% too small, and its size depends on how much padding each batch happens to have.",
            "Nothing: the padded positions add zero to the sum, so the mean over all positions is the same.",
            "The gradients point in the wrong direction, because the padded positions pull the model towards "
            "predicting padding.",
        ],
        answer=0,
        feedback=[
            "Right: divide by the 70 real tokens. Otherwise batches of long and short sentences get different "
            "effective learning rates.",
            "The sum is right, but the mean is not: dividing by all 100 positions shrinks it by 70/100.",
            "The direction is the same (the loss is only scaled), but the scale changes from batch to batch, like "
            "a learning rate that jumps around.",
        ],
    ),
    Question(
        prompt="Your label-smoothed loss puts 0.9 on the right token and 0.1/(V−2) on every other token except "
               "padding. The checker says it differs from F.cross_entropy(label_smoothing=0.1). Why?",
        options=[
            "Because F.cross_entropy turns label smoothing off whenever ignore_index is set, so the checker compares "
            "your smoothed loss with a plain, unsmoothed one.",
            "Because smoothing must be applied to the logits, not to the target: PyTorch shrinks the logits towards "
            "their mean before the log-softmax.",
            "Because PyTorch mixes the one-hot target with the uniform distribution over all V tokens: ε/V on "
            "every token, so the right one gets 1 − ε + ε/V.",
        ],
        answer=2,
        feedback=[
            "F.cross_entropy applies both: it smooths the targets and skips the positions equal to ignore_index.",
            "Label smoothing changes the target distribution q; the logits go through log-softmax unchanged.",
            "Right: yours is the Annotated Transformer's variant. Both smooth; they differ slightly in the numbers "
            "(and a KL-divergence loss is lower still by the entropy of the target).",
        ],
    ),
    Question(
        prompt="Why does the paper warm the learning rate up instead of starting at its peak?",
        options=[
            "Because attention weights start almost uniform, and large early steps would lock them there before the "
            "heads have had time to sharpen.",
            "Because a small learning rate at the start settles the weights in a better region, so the final model is "
            "more accurate, whatever the optimiser and wherever the norms happen to sit.",
            "Because Adam's running averages rest on very few gradients at first, so its steps are erratic, and "
            "post-norm stacks have large gradients near the output at initialisation.",
        ],
        answer=2,
        feedback=[
            "Chapter 07 showed that untrained attention is not uniform; and the accepted reasons concern the "
            "optimiser and the gradients, not the attention maps.",
            "Warm-up is about not diverging early, not about the final accuracy; with pre-norm or RAdam, training "
            "without warm-up reaches similar results.",
            "Right: Liu et al. (2020) trace warm-up to the variance of Adam's early estimates; Xiong et al. (2020) "
            "to the gradient scale of post-norm layers, which pre-norm largely removes.",
        ],
    ),
    Question(
        prompt="In train_step you call clip_grad_norm_ after optimizer.step(). What happens?",
        options=[
            "The step uses the unclipped gradients; clipping afterwards changes gradients that are about to be "
            "cleared, so it does nothing.",
            "The same as clipping before: the gradients are clipped either way, and the optimiser reads them whenever "
            "it needs them.",
            "PyTorch raises an error: clip_grad_norm_ refuses gradients that the optimiser has already used for "
            "a step.",
        ],
        answer=0,
        feedback=[
            "Right: clip between backward() and step(), where the optimiser will read the clipped values.",
            "The optimiser has already read the gradients when step() returns; clipping later is too late.",
            "Nothing stops you: the mistake is silent, which is why the checker looks for it.",
        ],
    ),
    Question(
        prompt="Your loss sits at 3.2 ≈ log V for 300 steps while every reference run is below 1.5 by then. What is "
               "the most likely cause?",
        options=[
            "A leak in the mask: the model sees the token it must predict, so there is nothing left for it to learn.",
            "The model is too small for the task: with so few parameters it cannot beat a uniform guess over the "
            "vocabulary.",
            "No gradient reaches the weights, or the learning rate is zero.",
        ],
        answer=2,
        feedback=[
            "A leak makes the loss fall too fast, not stay flat.",
            "The same model size is in the reference band; a too-small model still learns something.",
            "Right: log V is the loss of a uniform guess, so nothing has been learned. Look for a step never taken, "
            "gradients cleared before the step, or a schedule that gives 0.",
        ],
    ),
]
