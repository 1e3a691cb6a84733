"""Every checker hands the learner's code copies of its inputs: an answer that changes an input in place fails with a
message naming the argument, even when its output is right; the checker's own tensors stay as they were.

The list of checkers comes from ``tfm_lesson.checks.__all__``: a new checker fails here until it has an entry."""
from __future__ import annotations

import functools
import re

import pytest
import torch
from torch import Tensor

import tfm_lesson as T
import tfm_lesson.checks as checks
from tfm_lesson.checks import Mistake
from tfm_lesson.checks._harness import call
from tfm_lesson.decoding import greedy_decode
from tfm_lesson.modern import RMSNorm, SwiGLU
from tfm_lesson.train import cost
from tfm_lesson.train.loop import noam_rate

import test_checks_attention as att
import test_checks_cache as cache
import test_checks_decoding_inside as dec
import test_checks_feedforward as ffn
import test_checks_flash as flash
import test_checks_heads as heads
import test_checks_interpret as interp
import test_checks_lm as lm
import test_checks_masks as masks
import test_checks_model as model
import test_checks_modern as modern
import test_checks_norm as norm
import test_checks_positional as pos
import test_checks_training as training


def _spoil(value) -> bool:
    """Change the first tensor (else the first list, set or dict) found in ``value`` in place; True if one was."""
    if isinstance(value, Tensor) and value.numel() and value.device.type != "meta":
        with torch.no_grad():
            if value.dtype == torch.bool:
                value.logical_not_()
            else:
                value.add_(1)
        return True
    if isinstance(value, (list, tuple, dict)):
        items = list(value.values()) if isinstance(value, dict) else list(value)
        if any(_spoil(v) for v in items):
            return True
    if isinstance(value, list):
        value.append(value[-1] if value else 0)
        return True
    if isinstance(value, set):
        value.add(("spoiled", len(value)))
        return True
    return False


def _spoil_first(args: tuple, kwargs: dict) -> bool:
    return any(_spoil(v) for v in (*args, *kwargs.values()))


class _Spoiled:
    count = 0


def mutating(answer, spoiled: _Spoiled):
    """``answer`` (a function or a class) that computes its right result, then changes an input in place."""
    if isinstance(answer, type):
        class Mutating(answer):
            @functools.wraps(answer.forward)  # the answer's own argument names
            def forward(self, *args, **kwargs):
                out = super().forward(*args, **kwargs)
                spoiled.count += _spoil_first(args, kwargs)
                return out

        Mutating.__name__ = answer.__name__
        return Mutating

    @functools.wraps(answer)
    def fn(*args, **kwargs):
        out = answer(*args, **kwargs)
        spoiled.count += _spoil_first(args, kwargs)
        return out

    return fn


#: checker -> (a right answer, the checker's keyword arguments)
ANSWERS = {
    "check_attention_scores": (lambda q, k: att._scores(q, k), {}),
    "check_attention_weights": (lambda q, k: att._scores(q, k).softmax(dim=-1), {}),
    "check_attention": (att._loop_attention, {}),
    "check_retrieval": (att._lookup, {}),
    "check_pairwise_scores": (lambda q, k: q @ k.transpose(-2, -1), {}),
    "check_row_softmax": (lambda s: torch.softmax(s, dim=-1), {}),
    "check_weighted_sum": (lambda w, v: w @ v, {}),
    "check_cached_attention": (cache.cached_attention, {}),
    "check_cache_memory": (cache.memory, {}),
    "check_forward_with_cache": (cache.forward, {}),
    "check_cross_attention_step": (cache.cross_step, {}),
    "check_beam_step": (dec._learner_beam, {}),
    "check_length_normalised": (lambda s, n, a: s / ((5 + n) / 6) ** a, {}),
    "check_corpus_and_mean_bleu": (dec._bleu, {}),
    "check_query_entropy": (dec._learner_entropy, {}),
    "check_heads_off": (dec._heads_off(), {}),
    "check_rank_correlation": (dec._spearman, {}),
    "check_feed_forward": (ffn.FFN, {}),
    "check_gelu": (ffn.gelu, {}),
    "check_layer_budget": (ffn.budget, {}),
    "check_online_softmax": (flash.learner_softmax, {}),
    "check_tiled_attention": (flash.learner_tiled, {}),
    "check_flash_backward": (flash.learner_backward, {}),
    "check_arithmetic_intensity": (flash.intensity, {}),
    "check_split_heads": (heads.split_ok, {}),
    "check_merge_heads": (heads.merge_ok, {}),
    "check_multi_head_attention": (heads.LearnerMHA, {}),
    "check_alignment_error_rate": (interp.aer_sets, {}),
    "check_induction_score": (interp.prefix_matching_scores, {}),
    "check_patch_position": (interp.patch_right, {}),
    "check_encoder_layer": (T.EncoderLayer, {}),
    "check_decoder_layer": (T.DecoderLayer, {}),
    "check_encoder": (T.Encoder, {}),
    "check_decoder": (T.Decoder, {}),
    "check_target_mask": (lambda tgt, pad_id: T.combine_masks(T.padding_mask(tgt, pad_id),
                                                               T.causal_mask(tgt.size(1), device=tgt.device)), {}),
    "check_load_encoder_layer": (lambda ours, theirs: ours.load_state_dict(T.from_torch(theirs).state_dict()), {}),
    "check_bpe_merge": (lm.merge_while, {}),
    "check_next_token_probs": (lm.probs_reference, {}),
    "check_next_token_windows": (lm.windows_reference, {}),
    "check_padding_mask": (lambda tokens, pad_id: (tokens != pad_id)[:, None, None, :], {}),
    "check_causal_mask": (lambda n: torch.ones(n, n, dtype=torch.bool).tril(), {}),
    "check_masked_softmax": (masks._masked_softmax, {}),
    "check_decoder_mask": (masks._decoder, {}),
    "check_scaled_embedding": (model.Embeddings, {}),
    "check_generator": (model.Generator, {}),
    "check_tie_weights": (model.tie, {}),
    "check_parameter_count": (model.formula, {}),
    "check_rms_norm": (RMSNorm, {}),
    "check_rotary": (modern.learner_rope, {}),
    "check_swiglu": (SwiGLU, {}),
    "check_grouped_query_attention": (modern.gqa, {}),
    "check_rms_norm_half": (modern.half_safe, {}),
    "check_llama_hidden": (modern.llama_hidden, {}),
    "check_layer_norm": (norm.Norm, {}),
    "check_post_norm": (norm.post, {}),
    "check_pre_norm": (norm.pre, {}),
    "check_sublayer_connection": (norm._Block, {}),
    "check_sublayer_stack": (norm._blocks, {}),
    "check_positional_encoding": (pos.learner_table, {}),
    "check_learned_positional_encoding": (pos.LearnedOk, {}),
    "check_offset_rotation": (pos.rotation, {}),
    "check_shift_targets": (lambda t: (t[:, :-1], t[:, 1:]), {}),
    "check_label_smoothing_loss": (training._ls, {}),
    "check_noam_rate": (noam_rate, {}),
    "check_train_step": (training._step, {}),
    "check_greedy_decode": (training._greedy, {}),
    "check_params": (cost.parameter_count, {}),
    "check_flops_per_token": (cost.flops_per_token, {}),
    "check_training_bytes": (lambda c, b, n: 16 * cost.parameter_count(c) + cost.activation_bytes(c, b, n), {}),
}

#: checkers whose learner's code receives only numbers, strings or objects it may change (modules, configs): there is
#: no input for it to spoil
NOTHING_TO_SPOIL = {"check_cache_memory", "check_layer_budget", "check_arithmetic_intensity", "check_tie_weights",
                    "check_parameter_count", "check_llama_hidden", "check_positional_encoding", "check_offset_rotation",
                    "check_noam_rate", "check_causal_mask", "check_load_encoder_layer", "check_params",
                    "check_flops_per_token", "check_training_bytes"}

CHECKERS = sorted(name for name in checks.__all__ if name.startswith("check_"))


def test_every_checker_has_an_answer_here() -> None:
    assert sorted(ANSWERS) == CHECKERS


@pytest.mark.parametrize("name", CHECKERS)
def test_an_answer_that_changes_an_input_in_place_is_named(name: str) -> None:
    answer, kwargs = ANSWERS[name]
    spoiled = _Spoiled()
    checker = getattr(checks, name)
    if name in NOTHING_TO_SPOIL:
        checker(mutating(answer, spoiled), **kwargs)  # passes: nothing could be changed
        assert spoiled.count == 0, f"{name}: the answer changed an input, yet the test lists it as unspoilable"
        return
    with pytest.raises(Mistake, match=r"changed `\w+` in place: ") as info:
        checker(mutating(answer, spoiled), **kwargs)
    assert spoiled.count >= 1
    assert "not yours to change" in str(info.value)


def test_the_message_names_the_learners_argument_and_what_changed() -> None:
    def scores(query, key):
        return query.mul_(2) @ key.transpose(-2, -1) / 4  # 2x too large AND query changed
    with pytest.raises(Mistake, match=re.escape("changed `query` in place: 80 of its 80 values changed")):
        checks.check_attention_scores(scores)

    def right_but_in_place(query, key):  # the right numbers, obtained by overwriting query
        return query.div_(4) @ key.transpose(-2, -1)
    with pytest.raises(Mistake, match=re.escape("changed `query` in place")):
        checks.check_attention_scores(right_but_in_place)


def test_the_callers_tensors_stay_pristine_and_gradients_still_reach_them() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    tokens = [1, 2, 3]
    out = call(lambda t, ids: (t * 2).sum() + len(ids), x, tokens)
    out.backward()
    assert torch.equal(x.grad, torch.full((3, 4), 2.0))
    with pytest.raises(Mistake, match=re.escape("changed `ids` in place: its length went from 3 to 4")):
        call(lambda t, ids: ids.append(4), x, tokens, what="your function")
    assert tokens == [1, 2, 3]
    y = torch.zeros(2)
    call(lambda t: t.add_(1), y, what="your function", mutable=(0,))  # an argument the exercise asks to change
    assert torch.equal(y, torch.ones(2))


def test_a_config_changed_in_place_is_named() -> None:
    """A configuration is an input too: the checker counts from its own copy, and the change is named."""
    def params(config):
        n = cost.parameter_count(config)
        config.num_layers *= 2  # the right count, then the caller's config spoiled
        return n
    with pytest.raises(Mistake, match=r"changed `config` in place: its field num_layers went from \d+ to \d+"):
        checks.check_params(params)
