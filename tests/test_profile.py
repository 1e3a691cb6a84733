"""tfm_lesson.look.profile: the profile of one decoding step counts what it claims to count."""
from __future__ import annotations

import pytest
import torch

import tfm_lesson as T
from tfm_lesson.look.profile import compare_profiles, count_python_calls, profile_decoding, profile_step


def test_count_python_calls_counts_function_and_builtin_calls():
    def inner():
        return len([1])  # one built-in call

    def outer():
        inner()
        inner()

    assert count_python_calls(outer) == 2 * 2  # inner and len, twice; not outer itself (the same on 3.10)


def test_profile_step_sees_the_operators_of_the_step():
    x = torch.randn(8, 8)
    p = profile_step(lambda: torch.cat([x, x]) @ x.t(), steps=3, warmup=1, label="toy")
    names = [name for name, _, _ in p.ops]
    assert "aten::cat" in names and "aten::mm" in names
    assert p.op_calls >= 2 and p.step_ms > 0 and p.kinds["copies"] >= 0 and "toy" in p.table()
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        profile_step(lambda: None, steps=0)


def test_profile_decoding_before_and_after():
    torch.manual_seed(0)
    model = T.GPT(vocab_size=64, max_len=48, d_model=32, heads=4, d_ff=64, num_layers=2)
    model.train()
    profiles = profile_decoding(model, prompt_len=6, steps=5, warmup=2)
    assert model.training  # the training flag is restored
    assert list(profiles) == ["torch.cat cache", "KVCache", "FastDecoder"]
    cat, buffered, fast = profiles.values()
    ops = {label: {name for name, calls, _ in p.ops if calls > 0} for label, p in profiles.items()}
    assert "aten::cat" in ops["torch.cat cache"] and "aten::cat" not in ops["FastDecoder"]
    assert fast.op_calls < buffered.op_calls and fast.python_calls < buffered.python_calls / 2
    table = compare_profiles(profiles)
    assert "operator calls from Python per step" in table and "FastDecoder" in table
    with pytest.raises(ValueError, match="more than the model's context"):
        profile_decoding(model, prompt_len=40, steps=5)
