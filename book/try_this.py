"""Runs the "Try this" prompts of the chapters that train a model (10, 11, 12, 14) and the measurable
"Play with it" questions (10, 15, 16) with the chapters' own settings, and prints what a learner should see.
The instructors' answers page (book/instructors_answers.md) quotes its output.

    .venv/bin/python book/try_this.py 10        # every prompt of chapter 10
    .venv/bin/python book/try_this.py 10:1,4    # only prompts 1 and 4 of chapter 10 ("play": the Play with it cell)
    .venv/bin/python book/try_this.py 11 12     # chapters 11 and 12

Prints one JSON object per prompt, e.g. {"chapter": "10", "prompt": 1, ...}. Prompt numbers are the ones the
chapters print: chapter 10's list at the end of its exercises, the "Try this" lists of 11, 12 and 14.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
import sys
import time

import torch

import tfm_lesson as T
from tfm_lesson.data import load_task
from tfm_lesson.decoding import encode_texts, translate
from tfm_lesson.train.recipes import RECIPES
from tfm_lesson.train.loop import evaluate, make_model, train


def report(chapter: str, prompt, **figures) -> None:
    print(json.dumps({"chapter": chapter, "prompt": prompt, **figures}), flush=True)


def toy_model(data, **kw):
    T.seed_everything(0)
    return make_model(data.src_vocab, data.tgt_vocab, **{**RECIPES["reverse"]["model"], **kw})


# ---------------------------------------------------------------------------------------------------------
# chapter 10: the reversal recipe (600 steps) and the numbers recipe (400 steps), as in the chapter
RECIPE_10 = dict({k: v for k, v in RECIPES["reverse"]["train"].items() if k != "steps"}, device="cpu", progress=False)


@functools.lru_cache(maxsize=None)
def reverse_run(smoothing: float = 0.1):
    data = load_task("reverse", seed=0)
    model = toy_model(data)
    history = train(model, data, steps=600, smoothing=smoothing, **RECIPE_10)
    return data, model, history


@functools.lru_cache(maxsize=None)
def numbers_run(steps: int = 400, repeat_small: int = 0):
    from tfm_lesson.data.numbers import number_words

    data = load_task("numbers", seed=0)
    if repeat_small:
        small = [(number_words(n, "en"), number_words(n, "fr")) for n in range(100)]
        data = dataclasses.replace(data, train=data.train + small * repeat_small)
    model = toy_model(data)
    train(model, data, steps=steps, eval_every=200, seed=0, **RECIPE_10)
    return data, model


def small_numbers_report(data, model) -> dict:
    from tfm_lesson.data.numbers import number_words

    small = [(number_words(n, "en"), number_words(n, "fr")) for n in range(100)]
    wrong = [s for (s, t), out in zip(small, translate(model, [s for s, _ in small], data.src_vocab, data.tgt_vocab))
             if data.tgt_vocab.normalize(t) != data.tgt_vocab.normalize(out)]
    examples = ["eighty", "eleven"]
    return {"exact_match_0_99": round(evaluate(model, small, data.src_vocab, data.tgt_vocab)["exact_match"], 1),
            "wrong_0_99": wrong,
            "examples": dict(zip(examples, translate(model, examples, data.src_vocab, data.tgt_vocab))),
            "test_exact_match": round(evaluate(model, data.test, data.src_vocab, data.tgt_vocab)["exact_match"], 1)}


def chapter_10_leak() -> None:
    """Prompt 1: a step that feeds tgt[:, :-1] as both decoder input and labels (the answer is visible)."""
    import torch.nn.functional as F

    from tfm_lesson.data import batches
    from tfm_lesson.train.reference import compare_to_reference
    from tfm_lesson.train.loop import noam_rate

    data = load_task("reverse", seed=0)
    model = toy_model(data)
    warmup, peak_lr, d_model, pad = 100, 3e-3, model.config.d_model, data.tgt_vocab.pad_id
    factor = peak_lr / noam_rate(warmup, d_model, warmup)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: factor * noam_rate(i + 1, d_model, warmup))
    history = {"step": [], "loss": []}
    model.train()
    for batch in batches(data.train, data.src_vocab, data.tgt_vocab, 128, shuffle=True, seed=0, device="cpu"):
        decoder_input = labels = batch.tgt[:, :-1]                # the leak: labels are the decoder's own input
        logits = model(batch.src, decoder_input)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=0.1,
                               ignore_index=pad)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        history["step"].append(len(history["step"]) + 1)
        history["loss"].append(loss.item())
        if len(history["step"]) == 100:
            break
    model.eval()
    result = evaluate(model, data.test, data.src_vocab, data.tgt_vocab)
    report("10", 1, loss_at_steps=[1, 10, 25, 50, 100],
           leaky=[round(history["loss"][s - 1], 3) for s in (1, 10, 25, 50, 100)],
           compare_to_reference=str(compare_to_reference(history, "reverse")),
           test_exact_match=round(result["exact_match"], 1), test_bleu=round(result["bleu"], 1),
           example=translate(model, ["3 17 5 9"], data.src_vocab, data.tgt_vocab)[0])


def chapter_10_no_warmup() -> None:
    """Prompt 2: warmup=1, peak_lr=0.02."""
    data = load_task("reverse", seed=0)
    model = toy_model(data)
    history = train(model, data, steps=600, **{**RECIPE_10, "warmup": 1, "peak_lr": 0.02})
    normal = reverse_run(0.1)[2]
    at = (1, 10, 25, 50, 100, 600)
    report("10", 2, loss_at_steps=list(at), warmup_1_peak_002=[round(history["loss"][s - 1], 3) for s in at],
           chapter_recipe=[round(normal["loss"][s - 1], 3) for s in at],
           test_exact_match=round(evaluate(model, data.test, data.src_vocab, data.tgt_vocab)["exact_match"], 1))


def chapter_10_smoothing() -> None:
    """Prompt 3: smoothing 0.0 against the chapter's 0.1."""
    figures = {}
    for smoothing in (0.1, 0.0):
        data, model, history = reverse_run(smoothing)
        figures[f"smoothing_{smoothing}"] = {
            "final_train_loss": round(sum(history["loss"][-20:]) / 20, 4),
            "test_exact_match": round(evaluate(model, data.test, data.src_vocab, data.tgt_vocab)["exact_match"], 1)}
    report("10", 3, **figures)


def chapter_10_short_numbers(variant: str) -> None:
    """Prompt 4: the numbers 0-99 after 400 steps (the chapter), 800 steps, or 400 steps with the pairs of 0-99
    added ten times over."""
    steps, repeat = {"400_steps": (400, 0), "800_steps": (800, 0), "400_steps_small_numbers_x10": (400, 10)}[variant]
    report("10", 4, variant=variant, **small_numbers_report(*numbers_run(steps, repeat)))


def chapter_10_sort() -> None:
    """Prompt 5: the sort task, and where the last layer's cross-attention looks."""
    sort = load_task("sort", seed=0)
    model = toy_model(sort)
    train(model, sort, steps=600, **RECIPE_10)
    result = evaluate(model, sort.test, sort.src_vocab, sort.tgt_vocab)
    src_text, tgt_text = sort.test[0]
    src = encode_texts([src_text], sort.src_vocab)
    tgt = torch.tensor([sort.tgt_vocab.encode(tgt_text, bos=True)])  # <s> symbols </s>
    with T.record_attention(model) as rec:
        model(src, tgt[:, :-1])
    cross = rec.get(kind="cross", layer=len(model.decoder.layers) - 1)[0].mean(0)  # (tgt_len, src_len)
    src_tokens, out_tokens = src_text.split(), tgt_text.split()
    hits = sum(src_tokens[int(cross[i].argmax())] == out_tokens[i] for i in range(len(out_tokens)))
    report("10", 5, test_exact_match=round(result["exact_match"], 1), example=[src_text, tgt_text],
           cross_attention_argmax_on_the_symbol_written=f"{hits}/{len(out_tokens)}")


def chapter_10_longer() -> None:
    """Play with it: sequences longer than the 12 symbols seen in training."""
    data, model, _ = reverse_run(0.1)
    rng = random.Random(0)
    by_length = {}
    for n in (8, 12, 13, 14, 16, 20):
        pairs = []
        for _ in range(200):
            seq = [str(rng.randrange(20)) for _ in range(n)]
            pairs.append((" ".join(seq), " ".join(reversed(seq))))
        outs = translate(model, [s for s, _ in pairs], data.src_vocab, data.tgt_vocab)
        exact = sum(o == t for o, (_, t) in zip(outs, pairs)) / len(pairs)
        first_wrong = [next((i for i, (a, b) in enumerate(zip(o.split(), t.split())) if a != b),
                            min(len(o.split()), len(t.split()))) for o, (_, t) in zip(outs, pairs) if o != t]
        by_length[n] = {"exact_match": round(100 * exact, 1),
                        "mean_output_length": round(sum(len(o.split()) for o in outs) / len(outs), 2),
                        "median_first_wrong_position": sorted(first_wrong)[len(first_wrong) // 2] if first_wrong else None}
    report("10", "play", sequences_per_length=200, by_length=by_length,
           example=translate(model, ["4 8 15 16 2 3 7 9 11 0 1 5 6 19 18"], data.src_vocab, data.tgt_vocab)[0])


CHAPTER_10 = {"1": chapter_10_leak, "2": chapter_10_no_warmup, "3": chapter_10_smoothing,
              "4": lambda: [chapter_10_short_numbers(v) for v in ("400_steps", "800_steps",
                                                                  "400_steps_small_numbers_x10")],
              "4a": lambda: chapter_10_short_numbers("400_steps"), "4b": lambda: chapter_10_short_numbers("800_steps"),
              "4c": lambda: chapter_10_short_numbers("400_steps_small_numbers_x10"),
              "5": chapter_10_sort, "play": chapter_10_longer}


# ---------------------------------------------------------------------------------------------------------
# chapter 11: English to French, 500 steps
@functools.lru_cache(maxsize=None)
def sentences_run(steps: int = 500):
    data = load_task("sentences", seed=0)
    T.seed_everything(0)
    model = make_model(data.src_vocab, data.tgt_vocab, **RECIPES["sentences"]["model"])
    train(model, data, **dict(RECIPES["sentences"]["train"], steps=steps), device="cpu", seed=0, progress=False)
    return data, model


def chapter_11_beams() -> None:
    data, model = sentences_run(500)
    test = data.test[:500]
    beams = {}
    for k in (1, 2, 4, 8):
        start = time.perf_counter()
        r = evaluate(model, test, data.src_vocab, data.tgt_vocab, beam_size=k)
        beams[k] = {"bleu": round(r["bleu"], 1), "seconds": round(time.perf_counter() - start, 1)}
    report("11", 1, sentences=len(test), beams=beams)


def chapter_11_length_penalty() -> None:
    data, model = sentences_run(500)
    test = data.test[:500]
    lengths = {}
    for alpha in (0.0, 0.6, 2.0):
        hyps = translate(model, [s for s, _ in test], data.src_vocab, data.tgt_vocab, beam_size=4,
                         length_penalty_alpha=alpha)
        lengths[alpha] = round(sum(len(h.split()) for h in hyps) / len(hyps), 3)
    refs = round(sum(len(data.tgt_vocab.normalize(t).split()) for _, t in test) / len(test), 3)
    report("11", 2, mean_output_words_beam4=lengths, mean_reference_words=refs)


def chapter_11_longer() -> None:
    scores = {}
    for steps in (500, 1000):
        data, model = sentences_run(steps)
        r = evaluate(model, data.test[:500], data.src_vocab, data.tgt_vocab)
        scores[steps] = {k: round(v, 1) for k, v in r.items()}
    report("11", 3, greedy_on_500_test_sentences=scores)


CHAPTER_11 = {"1": chapter_11_beams, "2": chapter_11_length_penalty, "3": chapter_11_longer}


# ---------------------------------------------------------------------------------------------------------
# chapter 12: the numbers model of chapter 10 (400 steps), its heads switched off
def _heads_off(attention, heads):
    """The chapter's exercise 2 (its reference solution): zero the listed heads' slices of W^O's input."""
    from tfm_lesson.checks.inside import _ref_heads_off

    return _ref_heads_off(attention, heads)


def _attention_module(model, kind, layer):
    stack = model.encoder if kind == "encoder" else model.decoder
    return stack.layers[layer].cross_attn if kind == "cross" else stack.layers[layer].self_attn


def chapter_12_two_heads() -> None:
    data, model = numbers_run(400)
    subset = data.test[:200]
    score = lambda: evaluate(model, subset, data.src_vocab, data.tgt_vocab)
    base = score()
    damage = {}
    for kind, layer, head in (("decoder", 0, 3), ("cross", 0, 1)):
        with _heads_off(_attention_module(model, kind, layer), [head]):
            damage[f"{kind} L{layer} head {head}"] = round(base["exact_match"] - score()["exact_match"], 1)
    with _heads_off(_attention_module(model, "decoder", 0), [3]), _heads_off(_attention_module(model, "cross", 0), [1]):
        both = score()
    report("12", 1, baseline_exact_match=round(base["exact_match"], 1), alone=damage,
           together=round(base["exact_match"] - both["exact_match"], 1),
           together_bleu_lost=round(base["bleu"] - both["bleu"], 1))


def chapter_12_bleu() -> None:
    data, model = numbers_run(400)
    subset = data.test[:200]
    base = evaluate(model, subset, data.src_vocab, data.tgt_vocab)
    rows = []
    for kind in ("encoder", "decoder", "cross"):
        for layer in range(2):
            for head in range(4):
                with _heads_off(_attention_module(model, kind, layer), [head]):
                    r = evaluate(model, subset, data.src_vocab, data.tgt_vocab)
                rows.append((f"{kind} L{layer} head {head}", base["exact_match"] - r["exact_match"],
                             base["bleu"] - r["bleu"]))
    exact, bleu = torch.tensor([r[1] for r in rows]), torch.tensor([r[2] for r in rows])
    top = sorted(rows, key=lambda r: -r[1])[:4]
    report("12", 2, heads=len(rows), heads_costing_exact_points=int((exact > 0).sum()),
           heads_costing_bleu_points=int((bleu > 0).sum()),
           heads_where_bleu_loss_is_smaller=int((bleu < exact).sum()),
           largest=[{"head": n, "exact_points": round(e, 1), "bleu_points": round(b, 1)} for n, e, b in top],
           mean_exact_points=round(exact.mean().item(), 1), mean_bleu_points=round(bleu.mean().item(), 1))


def chapter_12_ninety_seven() -> None:
    data, model = numbers_run(400)
    source = "ninety-seven"
    out = translate(model, [source], data.src_vocab, data.tgt_vocab)[0]
    src = encode_texts([source], data.src_vocab)
    tgt = torch.tensor([data.tgt_vocab.encode(out, bos=True)])
    src_tokens = data.src_vocab.tokenize(source) + ["</s>"]
    out_tokens = data.tgt_vocab.tokenize(out) + ["</s>"]
    with torch.no_grad(), T.record_attention(model) as rec:
        model(src, tgt[:, :-1])
    heads = {}
    for layer in range(2):
        w = rec.get(kind="cross", layer=layer)[0]                           # (heads, t, s)
        for head in range(w.size(0)):
            heads[f"cross L{layer} head {head}"] = [
                f"{out_tokens[i]}<-{src_tokens[int(w[head, i].argmax())]} ({w[head, i].max().item():.2f})"
                for i in range(len(out_tokens))]
    report("12", 3, source=source, output=out, source_tokens=src_tokens,
           writes_token_while_looking_at=heads)


CHAPTER_12 = {"1": chapter_12_two_heads, "2": chapter_12_bleu, "3": chapter_12_ninety_seven}


# ---------------------------------------------------------------------------------------------------------
# chapter 14: the small GPT on the generated English sentences
def chapter_14_longer() -> None:
    """Prompt 1 ("1,000 steps instead of 250"): the chapter's run, then four times as many steps."""
    from tfm_lesson.data.corpus import load_corpus
    from tfm_lesson.gpt import GPT, GPTConfig
    from tfm_lesson.train.lm import complete, perplexity, prepare_lm_data, train_lm

    data = prepare_lm_data(load_corpus(), vocab_size=512, tokenizer_chars=300_000)
    results = {}
    for steps in (250, 1000):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=512, max_len=64, d_model=64, heads=4, d_ff=256, num_layers=2))
        start = time.perf_counter()
        train_lm(model, data, steps=steps, batch_size=32, lr=3e-3, device="cpu", seed=0, threads=1)
        results[steps] = {"held_out_perplexity": round(perplexity(model, data.valid), 2),
                          "seconds_under_this_load": round(time.perf_counter() - start),
                          "sample_temperature_0.7": complete(model, data.tokenizer, "The small", max_new_tokens=40,
                                                             temperature=0.7, seed=0)}
    report("14", 1, by_steps=results)


def chapter_14_vocab() -> None:
    """Prompt 3: vocabulary 300 or 1,000 instead of 512: tokens per character, and the embedding table; and 2,000,
    which the tokenizer cannot reach on this corpus (it stops when no pair occurs twice): the size it reaches."""
    from tfm_lesson.data.corpus import load_corpus
    from tfm_lesson.train.lm import prepare_lm_data

    corpus = load_corpus()
    sizes = {}
    for vocab in (300, 512, 1000, 2000):
        start = time.perf_counter()
        data = prepare_lm_data(corpus, vocab_size=vocab, tokenizer_chars=300_000)
        tokens, reached = len(data.train), len(data.tokenizer)  # reached < vocab when no pair occurs twice any more
        sizes[vocab] = {"vocabulary_reached": reached, "train_tokens": tokens,
                        "characters_per_token": round(len(corpus.train) / tokens, 2),
                        "embedding_parameters_d_model_64": reached * 64,
                        "tokenizer_seconds_under_this_load": round(time.perf_counter() - start)}
    report("14", 3, train_characters=len(corpus.train), by_vocab_size=sizes)


CHAPTER_14 = {"1": chapter_14_longer, "3": chapter_14_vocab}


# ---------------------------------------------------------------------------------------------------------
# chapter 15: the Play with it cell, with a wider model and a longer prompt (timings: relative only)
def chapter_15_play() -> None:
    import statistics

    def tokens_per_second(model, prompt, new_tokens, use_cache):
        times, out = [], prompt
        cache = model.new_cache() if use_cache else None
        with torch.no_grad():
            for t in range(new_tokens):
                start = time.perf_counter()
                logits = model(prompt if t == 0 else out[:, -1:], cache)[:, -1] if use_cache else model(out)[:, -1]
                out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)
                times.append(time.perf_counter() - start)
        ms = [statistics.median(times[max(0, i - 7): i + 8]) for i in range(len(times))]
        return new_tokens / sum(ms)

    rows = {}
    for name, d_model, prompt_len in (("chapter default", 64, 16), ("d_model=256", 256, 16),
                                      ("prompt 128", 64, 128)):
        torch.manual_seed(0)
        cfg = T.GPTConfig(vocab_size=256, max_len=prompt_len + 128, d_model=d_model, heads=4, d_ff=4 * d_model,
                          num_layers=2)
        model = T.GPT(cfg).eval()
        prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len))
        cached, uncached = tokens_per_second(model, prompt, 128, True), tokens_per_second(model, prompt, 128, False)
        rows[name] = {"cached_tok_s": round(cached), "uncached_tok_s": round(uncached),
                      "ratio": round(cached / uncached, 1)}
    report("15", "play", new_tokens=128, rows=rows)


CHAPTER_15 = {"play": chapter_15_play}


# ---------------------------------------------------------------------------------------------------------
# chapter 16: the RoPE explorer: the score of two equal all-ones vectors by distance
def chapter_16_play() -> None:
    from tfm_lesson.modern import RotaryEmbedding

    curves = {}
    for base in (10_000, 500_000):
        rotated = RotaryEmbedding(64, base=base)(torch.ones(2048, 64))
        scores = rotated @ rotated[0] / 64                                  # (2048,) distance m = 0 .. 2047
        curves[f"rope_theta={base}"] = {f"distance {m}": round(scores[m].item(), 3) for m in (0, 1, 10, 100, 1000, 2000)}
        curves[f"rope_theta={base}"]["lowest"] = round(scores.min().item(), 3)
    report("16", "play", d_k=64, scores=curves)


CHAPTER_16 = {"play": chapter_16_play}

CHAPTERS = {"10": CHAPTER_10, "11": CHAPTER_11, "12": CHAPTER_12, "14": CHAPTER_14, "15": CHAPTER_15,
            "16": CHAPTER_16}


if __name__ == "__main__":
    torch.set_num_threads(1)
    for arg in sys.argv[1:] or ["10", "11"]:
        chapter, _, wanted = arg.partition(":")
        prompts = CHAPTERS[chapter]
        for name in (wanted.split(",") if wanted else [p for p in prompts if p not in ("4a", "4b", "4c")]):
            prompts[name]()
