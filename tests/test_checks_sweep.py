"""The sweep of every exercise (issue 36, point 6), kept as tests.

For each exercise of the course (read from the instructor's chapters, as the grader reads them): the reference
passes (tests/test_grading.py grades every chapter's own solutions; each checker's tests pass a right answer too),
at least three plausible wrong answers fail with a message that names the mistake, an answer that changes an input
in place fails (tests/test_checks_pristine.py, every checker), and an exercise that forbids the package's (or
PyTorch's) implementation refuses it.

Most slips live beside their checker, in tests/test_checks_<topic>.py. :data:`SWEEP` lists, for every checker an
exercise calls, three of them: the test that tries the slip and a fragment of the message that names it. The guard
tests below fail when an exercise's checker is missing from it, when a listed test or message is gone, or when an
exercise whose text forbids a ready-made implementation has no test refusing it. The rest of this file fills the
gaps the sweep found: slips that had no named message, and inputs (configurations) no other test changed in place.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import tfm_lesson.checks as checks
from tfm_lesson.checks import Mistake, check_cross_attention_step, check_tie_weights
from tfm_lesson.course.exercises import exercises
from tfm_lesson.train import cost

import test_checks_pristine as pristine

ROOT = Path(__file__).resolve().parent.parent
GENERIC = re.compile(r"largest difference|differs? from")

#: checker -> three named slips: (the test in tests/test_checks_<topic>.py that tries it, a fragment of the message
#: that names it). Chosen from a run that recorded every checker call of tests/test_checks_*.py; the whole table (every
#: slip tried, named or not) is in issue 36's closing note.
SWEEP: dict[str, list[tuple[str, str]]] = {
    "check_pairwise_scores": [
        ("basics::test_pairwise_scores_mistakes", "be query i and column j key j: query @ key.trans"),
        ("basics::test_pairwise_scores_mistakes", "It failed on inputs with leading dimensions"),
        ("basics::test_pairwise_scores_mistakes", "here return the raw dot products query @ key^T."),
    ],
    "check_row_softmax": [
        ("basics::test_row_softmax_mistakes", "your columns sum to one, not your rows: softmax"),
        ("basics::test_row_softmax_mistakes", "large scores (1000) give NaN/inf: exp(1000) over"),
        ("basics::test_row_softmax_mistakes", "(the whole tensor does: you divided by the sum o"),
    ],
    "check_weighted_sum": [
        ("basics::test_weighted_sum_mistakes", "your output uses the weights transposed (column"),
        ("basics::test_weighted_sum_mistakes", "your output is the plain mean of the values, the"),
        ("basics::test_weighted_sum_mistakes", "It failed on inputs with leading dimensions"),
    ],
    "check_attention_scores": [
        ("attention::test_scores_mistakes", "your scores are not scaled: divide Q K^T by sqrt"),
        ("attention::test_scores_mistakes", "your scores look divided by d_k ="),
        ("attention::test_scores_mistakes", "your scores look MULTIPLIED by sqrt(d_k) ="),
    ],
    "check_retrieval": [
        ("attention::test_retrieval_mistakes", "must return a pair of tensors (Q, K); it returne"),
        ("attention::test_retrieval_mistakes", "one query row per entry of targets"),
        ("attention::test_retrieval_mistakes", "expected (k_len, d_k) ="),
    ],
    "check_attention": [
        ("attention::test_attention_mistakes", "softmax over the wrong axis: your weights are no"),
        ("attention::test_attention_mistakes", "your scores are not scaled: divide Q K^T by sqrt"),
        ("attention::test_attention_mistakes", "your scores look divided by d_k ="),
    ],
    "check_padding_mask": [
        ("masks::test_padding_mistakes", "your padding mask is inverted: it is True on the"),
        ("masks::test_padding_mistakes", "it masks QUERIES (rows), not keys (columns)."),
        ("masks::test_padding_mistakes", "the RIGHT, so against (batch, heads, q_len, k_le"),
    ],
    "check_causal_mask": [
        ("masks::test_causal_mistakes", "your causal mask is inverted: True on the future"),
        ("masks::test_causal_mistakes", "your causal mask excludes the diagonal (tril(-1)"),
        ("masks::test_causal_mistakes", "your mask lets every query see every key: nothin"),
    ],
    "check_masked_softmax": [
        ("masks::test_masked_softmax_mistakes", "your weights match the INVERTED mask: the masked"),
        ("masks::test_masked_softmax_mistakes", "you masked AFTER the softmax (softmax(scores) *"),
        ("masks::test_masked_softmax_mistakes", "the softmax runs over the wrong axis (dim=-2, th"),
    ],
    "check_decoder_mask": [
        ("masks::test_decoder_mask_mistakes", "your mask is padding OR causal: a key is visible"),
        ("masks::test_decoder_mask_mistakes", "your mask is only the causal mask: padding keys"),
        ("masks::test_decoder_mask_mistakes", "True must mean MAY attend (the convention of F.s"),
    ],
    "check_split_heads": [
        ("heads::test_split_mistakes", "heads look split without the transpose: reshapin"),
        ("heads::test_split_mistakes", "= (batch, len, heads, d_k): the view is right bu"),
        ("heads::test_split_mistakes", "each head got every heads-th feature instead of"),
    ],
    "check_merge_heads": [
        ("heads::test_merge_mistakes", "heads look merged without the transpose: (batch,"),
        ("heads::test_merge_mistakes", "the merged features are interleaved (d_k-major):"),
        ("heads::test_merge_mistakes", "after .transpose the tensor is not contiguous in"),
    ],
    "check_multi_head_attention": [
        ("heads::test_mha_mistakes", "scores look scaled by sqrt(d_model), not sqrt(d_"),
        ("heads::test_mha_mistakes", "scores look unscaled: divide Q K^T by sqrt(d_k)"),
        ("heads::test_mha_mistakes", "heads look merged without the transpose: (batch,"),
    ],
    "check_positional_encoding": [
        ("positional::test_table_mistakes", "sin and cos look swapped: even columns 2i hold s"),
        ("positional::test_table_mistakes", "the exponent looks like i/d_model where the pape"),
        ("positional::test_table_mistakes", "the odd (cos) columns use a different frequency"),
    ],
    "check_offset_rotation": [
        ("positional::test_rotation_mistakes", "your matrix turns each (sin, cos) pair by -k pos"),
        ("positional::test_rotation_mistakes", "the angles use the exponent i/d_model; pair i tu"),
        ("positional::test_rotation_mistakes", "the matrix is the identity: it should move the e"),
    ],
    "check_learned_positional_encoding": [
        ("positional::test_learned_mistakes", "positions look indexed along the batch axis (pe["),
        ("positional::test_learned_mistakes", "the output does not depend on the learned table"),
        ("positional::test_learned_mistakes", "your module needs an attribute `embedding = nn.E"),
    ],
    "check_layer_norm": [
        ("norm::test_layer_norm_mistakes", "your output matches the UNBIASED variance (divid"),
        ("norm::test_layer_norm_mistakes", "your output is normalised but ignores the gain a"),
        ("norm::test_layer_norm_mistakes", "your output ignores the shift: add self.bias (be"),
    ],
    "check_sublayer_connection": [
        ("norm::test_sublayer_connection_mistakes", "norm in the wrong place: your output is"),
        ("norm::test_sublayer_connection_mistakes", "dropout after the residual: dropout belongs on t"),
        ("norm::test_sublayer_connection_mistakes", "residual missing: your output has no x added bac"),
    ],
    "check_sublayer_stack": [
        ("norm::test_sublayer_stack_mistakes", "final norm missing: a pre-norm stack never norma"),
        ("norm::test_sublayer_stack_mistakes", "final norm extra: a post-norm stack's last block"),
        ("norm::test_sublayer_stack_mistakes", "the blocks ran in the wrong order: apply connect"),
    ],
    "check_feed_forward": [
        ("feedforward::test_feed_forward_mistakes", "your output matches w_2(w_1(x)) with NO activati"),
        ("feedforward::test_feed_forward_mistakes", "was asked for: use the activation the"),
        ("feedforward::test_feed_forward_mistakes", "with dropout=0.5 in training mode your output eq"),
    ],
    "check_gelu": [
        ("feedforward::test_gelu_mistakes", "your gelu matches the tanh approximation 0.5 x ("),
        ("feedforward::test_gelu_mistakes", "your gelu matches x * 0.5 (1 + erf(x)): the norm"),
        ("feedforward::test_gelu_mistakes", "your gelu matches 0.5 (1 + erf(x / sqrt(2))), wh"),
    ],
    "check_layer_budget": [
        ("feedforward::test_budget_mistakes", "you counted the four projection matrices but not"),
        ("feedforward::test_budget_mistakes", "you counted W^Q, W^K, W^V but forgot the output"),
        ("feedforward::test_budget_mistakes", "attention's count does not grow with heads: each"),
    ],
    "check_encoder_layer": [
        ("layers::test_encoder_layer_mistakes", "gradients do not flow through the residual path:"),
        ("layers::test_encoder_layer_mistakes", "Boolean value of Tensor with more than one value"),
        ("layers::test_encoder_layer_mistakes", "padding changes the output: your layer seems to"),
    ],
    "check_encoder": [
        ("layers::test_stack_mistakes", "Build a new layer for each position (`nn.ModuleL"),
        ("layers::test_stack_mistakes", "does not pass the mask(s) on to every layer (pad"),
        ("layers::test_stack_mistakes", "the final LayerNorm is missing: a pre-norm stack"),
    ],
    "check_load_encoder_layer": [
        ("layers::test_load_mistakes", "holds the rows of in_proj_weight that belong to"),
        ("layers::test_load_mistakes", "is transposed: nn.Linear stores weight as (out_f"),
        ("layers::test_load_mistakes", "copying into a parameter that requires grad must"),
    ],
    "check_target_mask": [
        ("layers::test_target_mask_mistakes", "padding is not masked: combine the causal mask w"),
        ("layers::test_target_mask_mistakes", "the mask is not causal, so the future leaks: AND"),
        ("layers::test_target_mask_mistakes", "the polarity is inverted: True must mean *may at"),
    ],
    "check_decoder_layer": [
        ("layers::test_decoder_layer_mistakes", "cross-attention is fed the wrong query: queries"),
        ("layers::test_decoder_layer_mistakes", "the future leaks: changing a later target positi"),
        ("layers::test_decoder_layer_mistakes", "Boolean value of Tensor with more than one value"),
    ],
    "check_decoder": [
        ("layers::test_stack_mistakes", "each layer is applied to the stack's input inste"),
        ("layers::test_common_slips_are_named", "each layer gets the previous layer's output as i"),
        ("layers::test_common_slips_are_named", "the masks reach the first layer only: pass them"),
    ],
    "check_scaled_embedding": [
        ("model::test_embedding_mistakes", "embeddings not scaled by sqrt(d_model): multiply"),
        ("model::test_embedding_mistakes", "embeddings divided by sqrt(d_model): the paper *"),
        ("model::test_embedding_mistakes", "embeddings scaled by d_model: the factor is sqrt"),
    ],
    "check_generator": [
        ("model::test_generator_mistakes", "the output is the raw scores (logits): apply log"),
        ("model::test_generator_mistakes", "the output is probabilities (softmax): return lo"),
        ("model::test_generator_mistakes", "log_softmax is taken over the wrong axis: normal"),
    ],
    "check_tie_weights": [
        ("model::test_tie_mistakes", "tied weights copied instead of shared: the gener"),
        ("model::test_tie_mistakes", "the generator's weight shares storage with the e"),
        ("sweep::test_tie_weights_slips_named", "the generator weight is transposed: nn.Linear(d_"),
    ],
    "check_parameter_count": [
        ("model::test_parameter_count_mistakes", "the tied generator is counted again: with tie_em"),
        ("model::test_parameter_count_mistakes", "the decoder's cross-attention is missing: a deco"),
        ("model::test_parameter_count_mistakes", "the layer norms are missing: 2 d_model each (gai"),
    ],
    "check_shift_targets": [
        ("training::test_shift_mistakes", "labels are not shifted: they equal the decoder i"),
        ("training::test_shift_mistakes", "shifted the wrong way: the decoder input must st"),
        ("training::test_shift_mistakes", "you shifted along the batch axis (rows are sente"),
    ],
    "check_label_smoothing_loss": [
        ("training::test_label_smoothing_mistakes", "padding counted in the loss: positions whose tar"),
        ("training::test_label_smoothing_mistakes", "summed, not averaged: divide by the number of re"),
        ("training::test_label_smoothing_mistakes", "smoothing spread over V - 2 classes: "),
    ],
    "check_noam_rate": [
        ("training::test_noam_mistakes", "noam_rate(0, ...) divides by zero (0 ** -0.5). S"),
        ("training::test_noam_mistakes", "steps count from 1; if you used step - 1, or if"),
        ("training::test_noam_mistakes", "you count steps from 0: step 1 must give d_model"),
    ],
    "check_train_step": [
        ("training::test_train_step_mistakes", "gradients are never cleared: backward() ADDS to"),
        ("training::test_train_step_mistakes", "were not clipped in time: clipping after the opt"),
        ("training::test_train_step_mistakes", "the schedule is not stepped: call scheduler.step"),
    ],
    "check_greedy_decode": [
        ("training::test_greedy_mistakes", "dropout left on while decoding: call model.eval("),
        ("training::test_greedy_mistakes", "ended rows are not padded: after a row produced"),
        ("training::test_greedy_mistakes", "argmax over the wrong axis: the logits of the la"),
    ],
    "check_beam_step": [
        ("decoding_inside::test_beam_step_mistakes", "a finished beam was extended by real words: once"),
        ("decoding_inside::test_beam_step_mistakes", "you kept the best token of each beam: beam searc"),
        ("decoding_inside::test_beam_step_mistakes", "the beams' past scores are ignored: rank by the"),
    ],
    "check_length_normalised": [
        ("decoding_inside::test_length_normalised_mistakes", "multiplied by the length penalty: divide by it."),
        ("decoding_inside::test_length_normalised_mistakes", "that is plain length normalisation, scores / len"),
        ("decoding_inside::test_length_normalised_mistakes", "alpha is ignored: the exponent of the penalty is"),
    ],
    "check_corpus_and_mean_bleu": [
        ("decoding_inside::test_bleu_mistakes", "both numbers are the same: corpus BLEU is NOT th"),
        ("decoding_inside::test_bleu_mistakes", "the two numbers are swapped: return (corpus BLEU"),
        ("decoding_inside::test_bleu_mistakes", "hypotheses and references are swapped in corpus_"),
    ],
    "check_query_entropy": [
        ("decoding_inside::test_query_entropy_mistakes", "holds NaN: masked keys have weight 0 and 0 * log"),
        ("decoding_inside::test_query_entropy_mistakes", "not normalised: divide the entropy by log(k), k"),
        ("decoding_inside::test_query_entropy_mistakes", "normalised by the log of ALL keys: padded and fu"),
    ],
    "check_heads_off": [
        ("decoding_inside::test_heads_off_mistakes", "wrong slice. The heads are concatenated one afte"),
        ("decoding_inside::test_heads_off_mistakes", "you zeroed part of the OUTPUT of W^O. After the"),
        ("decoding_inside::test_heads_off_mistakes", "the output did not change — is the hook register"),
    ],
    "check_rank_correlation": [
        ("decoding_inside::test_rank_correlation_mistakes", "that is Pearson's correlation of the values; Spe"),
        ("decoding_inside::test_rank_correlation_mistakes", "argsort gives the ORDER (which element is smalle"),
        ("decoding_inside::test_rank_correlation_mistakes", "tied values must share the mean of their ranks ("),
    ],
    "check_bpe_merge": [
        ("lm::test_merge_mistakes", "overlapping occurrences were both merged: with p"),
        ("lm::test_merge_mistakes", "you scanned from the right: in [a, a, a] the LEF"),
        ("lm::test_merge_mistakes", "you merged the pair the wrong way round: pair (a"),
    ],
    "check_next_token_probs": [
        ("lm::test_probs_mistakes", "top-k dropped tokens TIED with the k-th largest"),
        ("lm::test_probs_mistakes", "top-p left out the token that carries the sum pa"),
        ("lm::test_probs_mistakes", "top-k/top-p were applied before the temperature:"),
    ],
    "check_next_token_windows": [
        ("lm::test_windows_mistakes", "y equals x: the targets are not shifted. The mod"),
        ("lm::test_windows_mistakes", "x and y are swapped: the targets are shifted the"),
        ("lm::test_windows_mistakes", "y is shifted by two: the target of x[t] is the v"),
    ],
    "check_cached_attention": [
        ("cache::test_cached_attention_mistakes", "appended along the heads axis (dim=1): the cache"),
        ("cache::test_cached_attention_mistakes", "appended along the feature axis (dim=-1): the ca"),
        ("cache::test_cached_attention_mistakes", "appended along the batch axis (dim=0): the cache"),
    ],
    "check_cache_memory": [
        ("cache::test_cache_memory_mistakes", "the factor 2 is missing: the cache holds keys AN"),
        ("cache::test_cache_memory_mistakes", "that is bits, not bytes: a float32 number takes"),
        ("cache::test_cache_memory_mistakes", "the number of layers is missing: every layer kee"),
    ],
    "check_forward_with_cache": [
        ("cache::test_forward_with_cache_mistakes", "the position offset is missing: with a cache, th"),
        ("cache::test_forward_with_cache_mistakes", "several new tokens at once (the prompt) need a c"),
        ("cache::test_forward_with_cache_mistakes", "the final norm is missing: after the last block,"),
    ],
    "check_cross_attention_step": [
        ("cache::test_cross_attention_recomputed_every_step", "the memory's keys and values are projected again"),
        ("sweep::test_cross_step_slips_named", "keys and values are swapped: the scores use mha."),
        ("sweep::test_cross_step_slips_named", "the query is not projected: the new positions' q"),
    ],
    "check_rms_norm_half": [
        ("modern::test_rms_norm_half_mistakes_are_named", "LARGE float16 activations (about 1,000: their sq"),
        ("modern::test_rms_norm_half_mistakes_are_named", "compute the statistics in float32, then cast bac"),
        ("modern::test_rms_norm_half_mistakes_are_named", "float32 activations with a non-zero mean"),
    ],
    "check_rotary": [
        ("modern::test_rotary_mistakes_are_named", "INTERLEAVED convention: pairs (x[2i], x[2i+1]),"),
        ("modern::test_rotary_mistakes_are_named", "your output ignores the offset: the positions st"),
        ("modern::test_rotary_mistakes_are_named", "your output uses base 10,000 instead of base="),
    ],
    "check_llama_hidden": [
        ("modern::test_llama_hidden_mistakes_are_named", "your sizes keep the FFN's 4 * d_model: SwiGLU ha"),
        ("modern::test_llama_hidden_mistakes_are_named", "your sizes take 2/3 of d_model, not of the FFN's"),
        ("modern::test_llama_hidden_mistakes_are_named", "your sizes use 3/2 instead of 2/3: three matrice"),
    ],
    "check_grouped_query_attention": [
        ("modern::test_gqa_messages_say_group_size_and_tell_nan_slips_apart",
         "your output repeats the key/value heads in the W"),
        ("modern::test_gqa_messages_say_group_size_and_tell_nan_slips_apart",
         "your output inverts the mask: True means MAY att"),
        ("modern::test_gqa_mistakes_are_named", "your output ignores the mask: fill the scores wh"),
    ],
    "check_induction_score": [
        ("interpret::test_induction_score_mistakes_named", "you measured the FIRST half (queries 1 .. seg_le"),
        ("interpret::test_induction_score_mistakes_named", "you averaged the whole offset diagonal, so queri"),
        ("interpret::test_induction_score_mistakes_named", "you scored attention to the earlier copy of the"),
    ],
    "check_patch_position": [
        ("interpret::test_patch_mistakes_named", "key it attends to or the position of the token i"),
        ("interpret::test_patch_mistakes_named", "like [:, position, head], not [:, :, head] or [:"),
        ("interpret::test_patch_mistakes_named", "patch(clean, corrupted, head="),
    ],
    "check_alignment_error_rate": [
        ("interpret::test_aer_over_a_list_named", "a link named twice in `predicted` was counted tw"),
        ("interpret::test_aer_other_mistakes", "you used |A ∩ S| twice: the numerator is |A ∩ S|"),
        ("interpret::test_aer_other_mistakes", "the denominator is |A| + |S| (the sure links), n"),
    ],
    "check_online_softmax": [
        ("flash::test_online_softmax_mistakes", "the running sum is not rescaled when the maximum"),
        ("flash::test_online_softmax_mistakes", "each block is normalised by its own sum: the sof"),
        ("flash::test_online_softmax_mistakes", "a row whose first block is all -inf (and later o"),
    ],
    "check_tiled_attention": [
        ("flash::test_tiled_attention_mistakes", "the running sum and the output accumulator are n"),
        ("flash::test_tiled_attention_mistakes", "the running sum is rescaled but the output accum"),
        ("flash::test_tiled_attention_mistakes", "the output accumulator is rescaled but the runni"),
    ],
    "check_arithmetic_intensity": [
        ("flash::test_arithmetic_intensity_mistakes", "FLOPs counted as m*k*n: each of the m*k*n multip"),
        ("flash::test_arithmetic_intensity_mistakes", "the output is not counted: the (m, n) result is"),
        ("flash::test_arithmetic_intensity_mistakes", "bits, not bytes: bytes_per_number is already in"),
    ],
    "check_flash_backward": [
        ("flash::test_backward_mistakes_named", "dV is right but dQ and dK are not: the softmax's"),
        ("flash::test_backward_mistakes_named", "dQ and dK are sqrt(d_k) times too large: the sco"),
        ("flash::test_backward_mistakes_named", "your gradients contain NaN for a query that sees"),
    ],
    "check_params": [
        ("cost::test_params_slips", "a tied generator was counted twice: with tie_emb"),
        ("cost::test_params_slips", "an untied generator was left out: with tie_embed"),
        ("cost::test_params_slips", "the linear layers' biases are missing: with bias"),
    ],
    "check_flops_per_token": [
        ("cost::test_flops_slips", "that is the forward pass alone (2 FLOPs per weig"),
        ("cost::test_flops_slips", "the attention term is missing: each token's quer"),
        ("cost::test_flops_slips", "the generator is missing: the (d_model, vocab) p"),
    ],
    "check_training_bytes": [
        ("cost::test_bytes_slips", "Adam's state is missing: it keeps two numbers pe"),
        ("cost::test_bytes_slips", "one float per parameter is missing: the gradient"),
        ("cost::test_bytes_slips", "the activations are missing: add tfm_lesson.trai"),
    ],
}

#: checker -> the test that refuses the ready-made implementation its exercise forbids
FORBIDS: dict[str, str] = {
    "check_multi_head_attention": "rules::test_mha_written_by_the_package_is_refused",
    "check_layer_norm": "norm::test_layer_norm_by_pytorch_or_the_package_is_refused",
    "check_gelu": "feedforward::test_gelu_by_pytorch_is_refused",
    "check_label_smoothing_loss": "rules::test_label_smoothing_by_pytorch_or_the_package_is_refused",
    "check_forward_with_cache": "cache::test_forward_with_cache_by_the_models_own_forward_is_refused",
    "check_rms_norm_half": "modern::test_rms_norm_half_refuses_a_ready_made_norm",
    "check_llama_hidden": "modern::test_llama_hidden_refuses_the_package_answer",
    "check_grouped_query_attention": "rules::test_gqa_loop_or_enable_gqa_is_refused",
    "check_online_softmax": "flash::test_the_packages_implementation_is_refused_under_any_name",
    "check_tiled_attention": "flash::test_the_packages_implementation_is_refused_under_any_name",
    "check_flash_backward": "flash::test_backward_the_packages_is_refused",
}


# the guard --------------------------------------------------------------------------------------------------------
def _chapters() -> list[tuple[str, dict]]:
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        chapter = json.loads(path.read_text())
        for cell in chapter["cells"]:
            cell["source"] = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if any("solution" in c.get("metadata", {}).get("tags", []) for c in chapter["cells"]):
            found.append((path.stem[:2], chapter))
    return found


def _exercises() -> list[tuple[str, str, str]]:
    """(chapter and exercise, checker, the exercise's text) for every exercise of the course."""
    rows = []
    for number, chapter in _chapters():
        cells = chapter["cells"]
        for ex in exercises(chapter):
            text = next(c["source"] for c in reversed(cells[:ex.solution_index]) if c["cell_type"] == "markdown"
                        and "Exercise" in c["source"])
            rows.append((f"{number}.{ex.number}", ex.checker, text))
    return rows


EXERCISES = _exercises()
FORBIDDING = re.compile(r"write it yourself|do not call|without calling|refuses", re.IGNORECASE)
CHECKS_SOURCE = "\n".join(p.read_text() for p in (ROOT / "tfm_lesson" / "checks").glob("*.py"))


def _test_exists(test: str) -> bool:
    """``topic::test_name``: a test function of tests/test_checks_<topic>.py."""
    module, name = test.split("::")
    return callable(getattr(importlib.import_module(f"test_checks_{module}"), name, None))


def test_the_course_has_its_exercises():
    assert len(EXERCISES) >= 62
    assert all(hasattr(checks, checker) for _, checker, _ in EXERCISES)


@pytest.mark.parametrize("where, checker", [(w, c) for w, c, _ in EXERCISES])
def test_every_exercise_has_three_named_slips_tested(where, checker):
    slips = SWEEP.get(checker, [])
    assert len(slips) >= 3, f"exercise {where}: {checker} has {len(slips)} named slips in the sweep"
    for test, fragment in slips:
        assert _test_exists(test), f"exercise {where}: {test} is gone"
        assert fragment in CHECKS_SOURCE, f"exercise {where}: the message {fragment!r} is gone from the checker"
        assert not GENERIC.search(fragment)


@pytest.mark.parametrize("where, checker", [(w, c) for w, c, _ in EXERCISES])
def test_every_exercise_refuses_an_answer_that_changes_its_input(where, checker):
    """test_checks_pristine runs every checker with an answer that spoils its first input; those whose learner's code
    receives only numbers, or objects it is asked to change, are listed there, and configurations are changed below."""
    assert checker in pristine.ANSWERS
    if checker in pristine.NOTHING_TO_SPOIL:
        assert checker in CONFIG_CHANGED or checker in SOURCE_CHANGED or checker in ONLY_NUMBERS_OR_MODULES, where


@pytest.mark.parametrize("where, checker", [(w, c) for w, c, t in EXERCISES if FORBIDDING.search(t)])
def test_every_exercise_that_forbids_a_ready_made_answer_refuses_it(where, checker):
    assert checker in FORBIDS, f"exercise {where}'s text forbids a ready-made answer; no test refuses one"
    assert _test_exists(FORBIDS[checker])


# inputs changed in place: configurations ----------------------------------------------------------------------------
#: checkers whose answers receive only numbers (nothing to change), or the modules the exercise asks them to change
ONLY_NUMBERS_OR_MODULES = {"check_cache_memory", "check_layer_budget", "check_arithmetic_intensity",
                           "check_tie_weights", "check_llama_hidden", "check_positional_encoding",
                           "check_offset_rotation", "check_noam_rate", "check_causal_mask"}

#: checkers whose learner's code receives a module to copy from: changing it is named (tested here)
SOURCE_CHANGED = {"check_load_encoder_layer"}

CONFIG_CHANGED = {
    "check_params": lambda config: cost.parameter_count(dataclasses.replace(config)) + _spoil(config),
    "check_flops_per_token": lambda config, seq_len: cost.flops_per_token(dataclasses.replace(config), seq_len)
    + _spoil(config),
    "check_training_bytes": lambda config, batch, seq_len: 16 * cost.parameter_count(dataclasses.replace(config))
    + cost.activation_bytes(dataclasses.replace(config), batch, seq_len) + _spoil(config),
    "check_parameter_count": lambda config: _formula(dataclasses.replace(config)) + _spoil(config),
}


def _spoil(config) -> int:
    """Count right, then change the caller's configuration (a learner's `config.num_layers -= 1` in a loop, say)."""
    if hasattr(config, "num_layers"):
        config.num_layers += 1
    else:
        config.num_encoder_layers += 1
    return 0


def _formula(c) -> int:
    import test_checks_model as model

    return model.formula(c)


@pytest.mark.parametrize("checker", sorted(CONFIG_CHANGED))
def test_a_configuration_changed_in_place_is_named(checker):
    with pytest.raises(Mistake, match=r"changed `config` in place: its field num_(encoder_)?layers went from"):
        getattr(checks, checker)(CONFIG_CHANGED[checker])


def test_a_positional_module_that_changes_x_in_place_is_named():
    """Chapter 04's exercise 1 hands a module x; exercise 2's table function gets only numbers (nothing to spoil)."""
    import test_checks_positional as positional

    class AddsInPlace(positional.LearnerPE):
        def forward(self, x):
            return x.add_(self.pe[: x.size(1)].to(x.dtype))

    with pytest.raises(Mistake, match="changed `x` in place"):
        checks.check_positional_encoding(AddsInPlace)


def test_loading_weights_the_wrong_way_round_is_named():
    """Chapter 07's exercise 3 writes into `ours`; `theirs`, the source, must stay as it was."""
    def load_backwards(ours, theirs):
        with torch.no_grad():
            theirs.linear1.weight.copy_(ours.feed_forward.w_1.weight)  # copy_ writes into the tensor it is called on
    with pytest.raises(Mistake, match=r"changed `theirs` in place \(its `linear1.weight`\): the weights go FROM"):
        checks.check_load_encoder_layer(load_backwards)


# chapter 15, exercise 4: cross-attention keys once --------------------------------------------------------------------
def _heads(mha, t):
    return t.view(t.size(0), t.size(1), mha.heads, mha.d_k).transpose(1, 2)  # (batch, heads, len, d_k)


def cross_step_with(mha, x_new, memory, store, *, slip=""):
    """The exercise written as a learner does, by hand (the attention of chapter 01), with one slip."""
    if "k" not in store:
        store["k"] = _heads(mha, memory if slip == "keys not projected" else mha.w_k(memory))
        store["v"] = _heads(mha, mha.w_v(memory))
    k, v = (store["v"], store["k"]) if slip == "k and v swapped" else (store["k"], store["v"])
    q = _heads(mha, x_new if slip == "query not projected" else mha.w_q(x_new))
    scores = q @ k.transpose(-2, -1) / (1 if slip == "no scale" else math.sqrt(mha.d_k))
    merged = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x_new.shape)  # (batch, new_len, d_model)
    return merged if slip == "no w_o" else mha.w_o(merged)


def test_cross_step_by_hand_passes(capsys):
    check_cross_attention_step(cross_step_with)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("slip, hint", [
    ("k and v swapped", "keys and values are swapped"), ("query not projected", "the query is not projected"),
    ("no w_o", "the output projection is missing"), ("no scale", "the scores are not divided by sqrt(d_k)"),
    ("keys not projected", "the keys were never projected with mha.w_k"),
])
def test_cross_step_slips_named(slip, hint):
    with pytest.raises(Mistake, match=re.escape(hint)) as info:
        check_cross_attention_step(lambda mha, x, memory, store: cross_step_with(mha, x, memory, store, slip=slip))
    assert not GENERIC.search(str(info.value))


# chapter 09, exercise 3: tie the weights ------------------------------------------------------------------------------
def tie_transposed(embedding, generator):
    generator.weight = nn.Parameter(embedding.weight.T)  # "the generator maps d_model -> vocab, so transpose"


def tie_by_copy(embedding, generator):
    with torch.no_grad():
        generator.weight.copy_(embedding.weight)


def tie_by_data(embedding, generator):
    generator.weight.data = embedding.weight.data


@pytest.mark.parametrize("fn, hint", [(tie_transposed, "the generator weight is transposed"),
                                      (tie_by_copy, "tied weights copied instead of shared"),
                                      (tie_by_data, "shares storage with the embedding but is a separate Parameter")])
def test_tie_weights_slips_named(fn, hint):
    with pytest.raises(Mistake, match=re.escape(hint)):
        check_tie_weights(fn)
