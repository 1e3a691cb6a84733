"""check_feed_forward, check_gelu, check_layer_budget: the reference passes; each classic mistake gets its hint."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfm_lesson
from tfm_lesson.checks import Mistake, check_feed_forward, check_gelu, check_layer_budget


class FFN(nn.Module):
    """Right by default; subclasses override ``forward`` with one classic mistake each."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = {"relu": F.relu, "gelu": F.gelu}[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.act(self.w_1(x))))


class ReluOnly(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class NoActivation(ReluOnly):
    def forward(self, x):
        return self.w_2(self.w_1(x))


class ActivationLast(ReluOnly):
    def forward(self, x):
        return torch.relu(self.w_2(self.w_1(x)))


class TwoActivations(ReluOnly):
    def forward(self, x):
        return torch.relu(self.w_2(torch.relu(self.w_1(x))))


class AlwaysRelu(FFN):
    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x)))


class TanhGelu(FFN):
    def forward(self, x):
        return self.w_2(F.gelu(self.w_1(x), approximate="tanh") if self.act is F.gelu else F.relu(self.w_1(x)))


class DropoutAlwaysOn(FFN):
    def forward(self, x):
        return self.w_2(F.dropout(self.act(self.w_1(x)), p=self.dropout.p))  # training=True by default


class NoDropout(FFN):
    def forward(self, x):
        return self.w_2(self.act(self.w_1(x)))


class WithResidual(ReluOnly):
    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class MixesPositions(ReluOnly):
    def forward(self, x):
        out = self.w_2(torch.relu(self.w_1(x)))
        return out + 0.1 * out.mean(dim=1, keepdim=True) * torch.arange(x.size(1)).view(1, -1, 1)


class Swapped(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_ff, d_model), nn.Linear(d_model, d_ff)


class OtherNames(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)


class NoBias(ReluOnly):
    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)


def test_reference_passes(capsys):
    check_feed_forward(tfm_lesson.PositionwiseFeedForward)
    check_feed_forward(FFN)
    check_feed_forward(ReluOnly)
    out = capsys.readouterr().out
    assert out.count("✔ check_feed_forward passed") == 3
    assert "relu/gelu" in out and "dropout off in eval, on in training" in out


@pytest.mark.parametrize("cls, hint", [
    (NoActivation, "NO activation"),
    (ActivationLast, "activation applied AFTER the second linear"),
    (TwoActivations, "one activation too many"),
    (AlwaysRelu, "RELU where GELU was asked for"),
    (TanhGelu, "tanh approximation"),
    (DropoutAlwaysOn, "dropout is still applied in eval mode"),
    (NoDropout, "dropout is never applied"),
    (WithResidual, "FFN plus a residual"),
    (MixesPositions, "each position"),
    (Swapped, "w_1 expands d_model -> d_ff"),
    (OtherNames, "name the two layers as the reference does"),
    (NoBias, "has no bias"),
])
def test_feed_forward_mistakes(cls, hint):
    with pytest.raises(Mistake) as info:
        check_feed_forward(cls)
    assert hint in str(info.value), str(info.value)


def test_feed_forward_agrees_with_torch_layer():
    """The module the checker compares against is the FFN inside nn.TransformerEncoderLayer."""
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(16, 4, 48, dropout=0.0, batch_first=True).eval()
    ours = tfm_lesson.from_torch(theirs).feed_forward
    x = torch.randn(2, 5, 16)
    expected = theirs.linear2(theirs.activation(theirs.linear1(x)))
    assert torch.allclose(ours(x), expected, atol=1e-6)


# GELU ----------------------------------------------------------------------------------------------------------------
def gelu(x):
    return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def test_gelu_passes(capsys):
    check_gelu(gelu)
    assert capsys.readouterr().out.count("✔ check_gelu passed") == 1


@pytest.mark.parametrize("fn", [F.gelu, nn.GELU(), lambda x: F.gelu(x), lambda x: torch.nn.functional.gelu(x)])
def test_gelu_by_pytorch_is_refused(fn):
    """The exercise says "without calling F.gelu": PyTorch's GELU, called or handed over, is refused by name."""
    with pytest.raises(Mistake, match="WRITE IT YOURSELF: your gelu .*without calling F.gelu"):
        check_gelu(fn)


@pytest.mark.parametrize("fn, hint", [
    (lambda x: F.gelu(x, approximate="tanh"), "WRITE IT YOURSELF"),
    (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), "tanh approximation"),
    (lambda x: x * torch.sigmoid(1.702 * x), "sigmoid approximation"),
    (lambda x: x * 0.5 * (1 + torch.erf(x)), "erf(x / sqrt(2)), not erf(x)"),
    (lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2))), "Phi(x) alone"),
    (lambda x: x * (1 + torch.erf(x / math.sqrt(2))), "factor 0.5"),
    (torch.relu, "matches ReLU"),
    (F.silu, "SiLU"),
    (lambda x: gelu(x).float(), "float64 input into torch.float32"),
])
def test_gelu_mistakes(fn, hint):
    with pytest.raises(Mistake) as info:
        check_gelu(fn)
    assert hint in str(info.value), str(info.value)


# parameter budget ----------------------------------------------------------------------------------------------------
def budget(d_model, heads, d_ff):
    return {"attention": 4 * d_model * d_model + 4 * d_model,
            "feed_forward": 2 * d_model * d_ff + d_ff + d_model,
            "norms": 4 * d_model}


def test_budget_passes(capsys):
    check_layer_budget(budget)
    assert "✔ check_layer_budget passed" in capsys.readouterr().out


def with_(**change):
    def fn(d_model, heads, d_ff):
        out = budget(d_model, heads, d_ff)
        out.update({k: v(d_model, heads, d_ff) for k, v in change.items()})
        return out
    return fn


@pytest.mark.parametrize("fn, hint", [
    (with_(attention=lambda d, h, f: 4 * d * d), "not their biases"),
    (with_(attention=lambda d, h, f: 3 * d * d + 3 * d), "forgot the output projection"),
    (with_(attention=lambda d, h, f: h * (4 * d * d + 4 * d)), "does not grow with heads"),
    (with_(feed_forward=lambda d, h, f: 2 * d * f), "not the biases b_1"),
    (with_(feed_forward=lambda d, h, f: 2 * d * f + 2 * f), "b_2 has d_model numbers"),
    (with_(norms=lambda d, h, f: 2 * d), "two layer norms per encoder layer"),
    (with_(norms=lambda d, h, f: 0), "layer norm has learned parameters"),
    (lambda d, h, f: {"attention": 1}, 'keys "attention", "feed_forward" and "norms"'),
])
def test_budget_mistakes(fn, hint):
    with pytest.raises(Mistake) as info:
        check_layer_budget(fn)
    assert hint in str(info.value), str(info.value)


def test_a_stub_is_not_written_yet():
    class Stub(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.1):
            super().__init__()
            ...  # your turn

        def forward(self, x):
            ...  # your turn

    with pytest.raises(Mistake, match="feed-forward network is not written yet"):
        check_feed_forward(Stub)
