"""Chapter 19 quiz: the 6N rule and its attention term, a tied generator, Adam's 16 bytes, parameter groups,
gradient accumulation, and what an isoFLOP curve tells."""
from tfm_lesson.course.quiz import Question

QUESTIONS = [
    Question(
        prompt="A GPT's blocks and generator hold N_matmul weights in their matrix products. Why does one training "
               "step cost about 6 N_matmul FLOPs per token, before the attention term?",
        options=[
            "The forward uses each weight in one multiply-add (2 FLOPs); the backward computes two products as "
            "large, one for the input's gradient and one for the weight's (4 FLOPs).",
            "Adam's update reads each weight, its gradient and its two moments and writes them back: that makes 6 "
            "operations per weight at every step, repeated once for each token of the batch.",
            "The forward costs 2 FLOPs per weight and runs three times per step: for the loss, for the "
            "gradient and again for the gradient clipping.",
        ],
        answer=0,
        feedback=[
            "Right: 2 forward + 2 (gradient of the input) + 2 (gradient of the weight) = 6 FLOPs per weight and "
            "token. FlopCounterMode confirmed it in the chapter: the step counted three times the forward.",
            "The optimiser's work is per parameter and per STEP, not per token: for a batch of thousands of tokens "
            "it is negligible, and the formula leaves it out.",
            "There is one forward per step; the backward pass, not further forwards, is where the other 4 FLOPs "
            "per weight go. Clipping only rescales the gradients already computed.",
        ],
    ),
    Question(
        prompt="The chapter's GPTs tie the generator to the token embedding. What does the tying change in the "
               "count of parameters and in the count of FLOPs per token?",
        options=[
            "It removes vocab x d_model from both counts: a tied generator is the embedding matrix, so it "
            "neither adds parameters nor a product.",
            "It removes vocab x d_model parameters, but the FLOPs stay: the (d_model, vocab) product still runs "
            "for every token, tied or not.",
            "Nothing at all in either count: tying only changes how the matrix is initialised, and both counts "
            "keep the generator.",
        ],
        answer=1,
        feedback=[
            "The parameter count drops, but the logits are still computed with that matrix at every position: "
            "2 x vocab x d_model FLOPs forward. The checker calls leaving it out 'the generator is missing'.",
            "Right: one matrix, two uses. At this chapter's scale the generator is a large share of all FLOPs, "
            "because vocab (512) is much larger than d_model.",
            "sum(p.numel()) counts a shared matrix once: untying adds vocab x d_model parameters, which the "
            "chapter's formula and the GPT agree on.",
        ],
    ),
    Question(
        prompt="Training in float32 with AdamW, how many bytes does each parameter take, activations aside?",
        options=[
            "8: the weight and its gradient, since Adam's moments are kept in the optimiser, not the model.",
            "12: the weight, its gradient and Adam's one running average of the squared gradients.",
            "16: the weight, its gradient and Adam's two moving averages, 4 bytes each.",
            "4: the weight; the gradient and moments are recomputed at every step.",
        ],
        answer=2,
        feedback=[
            "The optimiser's state lives in memory all the same, as long as training runs: it is the largest "
            "part of the 16 bytes.",
            "Adam keeps two moments: the average of g (momentum) and of g squared (the scale). One of them is "
            "what RMSprop keeps.",
            "Right: 4 + 4 + 2 x 4. Mixed precision changes the split (a 2-byte copy of the weights, float32 "
            "master weights and moments), not the fact that the optimiser costs more than the model.",
            "Nothing recomputes the moments: they are averages over all past steps, so they must be stored.",
        ],
    ),
    Question(
        prompt="The recipe puts the norms' gains, the biases and the embeddings in a group without weight decay. "
               "What would decaying a layer norm's gain do?",
        options=[
            "Nothing harmful: the layer norm divides by the standard deviation afterwards, so the gain's "
            "size never matters to the output.",
            "Speed training up: smaller gains mean smaller activations, so the same learning rate takes "
            "larger steps in the rest of the model.",
            "Stop the model from memorising the training text, which is what decay on any parameter is for.",
            "Pull each feature's scale towards zero at every step, fighting the scale the loss asks for; "
            "it is a scale, not a pattern to memorise.",
        ],
        answer=3,
        feedback=[
            "The gain multiplies AFTER the normalisation: it sets each feature's scale in the output, so shrinking "
            "it does change the output.",
            "The learning rate acts on the parameters, not on the activations; smaller gains only scale a "
            "feature down, against what the loss wants.",
            "A gain or a bias is d_model numbers that cannot memorise much; decay is there to keep the large weight "
            "matrices from growing, which is why they alone are decayed.",
            "Right: decay is a pull towards zero, meant for weight matrices; on a gain it pulls against the scale the "
            "loss asks for, and on rare tokens' embedding rows it works between their few gradients.",
        ],
    ),
    Question(
        prompt="A batch of 16 rows is split into 4 micro-batches of 4; each micro-batch's mean loss is backpropagated "
               "and the gradients add up before one optimiser step. What makes this step equal the 16-row step?",
        options=[
            "Dividing the learning rate by 4, since four backward passes add four gradients together.",
            "Weighting each micro-batch's mean loss by its share of the rows (here 1/4) before backward.",
            "Nothing: accumulating gradients is an approximation, only close for large batches.",
        ],
        answer=1,
        feedback=[
            "Adam's update barely changes when all gradients are scaled (it divides by their running scale), so "
            "dividing the rate by 4 would make each step, and the weight decay, 4 times too small. Clipping would "
            "also see a norm 4 times too large. Scale the loss, not the rate.",
            "Right: the mean over 16 rows is the sum of four means over 4 rows, each times 4/16. The chapter "
            "checked it: the accumulated gradients agree with the large batch's to rounding.",
            "It is exact up to floating-point rounding, because the gradient of a sum is the sum of the gradients; "
            "the chapter measured the difference.",
        ],
    ),
    Question(
        prompt="On an isoFLOP curve every model trains on the same number of FLOPs. Why does the loss rise again "
               "for the largest models of a curve?",
        options=[
            "Large models overfit the small corpus: their validation loss rises while their training loss "
            "keeps falling throughout.",
            "The same FLOPs buy a large model fewer tokens: it stops after too few steps, still far from "
            "what its size could reach.",
            "Large models need a smaller learning rate, and the sweep gives every size the same one, which "
            "is the only reason.",
        ],
        answer=1,
        feedback=[
            "At a fixed budget the largest models see the fewest tokens, often less than one pass over the corpus; "
            "overfitting is the risk of the opposite corner (small data, many passes).",
            "Right: C is about 6 N_matmul D, so at fixed C a larger model means a smaller D. The best size "
            "balances the two, which is what N_opt(C) traces.",
            "The learning rate matters (the chapter names it as a limit of its sweep), but even with a well-chosen "
            "rate, a model trained on too few tokens is under-trained: the bowl comes from the budget itself.",
        ],
    ),
]
