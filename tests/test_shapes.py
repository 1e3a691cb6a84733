"""The shape tracer: rows in call order, depths, shapes in and out, text and HTML tables, hooks removed."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tfm_lesson
from tfm_lesson.look.shapes import ShapeTrace, shape_of, trace_shapes


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 8)) for _ in range(2)])
        self.head = nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        x = self.embed(tokens) * scale  # (batch, seq_len, 8)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)  # (batch, seq_len, 3)


def test_shape_of_formats() -> None:
    assert shape_of(torch.zeros(2, 5, 16)) == "(2, 5, 16)"
    assert shape_of(torch.zeros(4)) == "(4,)"
    assert shape_of(torch.zeros(2, 5, dtype=torch.long)) == "(2, 5) int64"
    assert shape_of(torch.ones(1, 1, 1, 5, dtype=torch.bool)) == "(1, 1, 1, 5) bool"
    assert shape_of((torch.zeros(2, 3), None, 7)) == "(2, 3)"
    assert shape_of(None) == ""


def test_rows_depths_and_shapes() -> None:
    model = Tiny()
    tokens = torch.randint(0, 10, (2, 5))
    trace = trace_shapes(model, tokens, max_depth=2, scale=2.0)
    assert isinstance(trace, ShapeTrace)
    # the model first, then submodules in the order they were entered; ModuleList adds no depth
    assert trace.names[:4] == ["Tiny", "embed", "blocks.0", "blocks.0.0"]
    assert trace["Tiny"].depth == 0 and trace["embed"].depth == 1
    assert trace["blocks.0"].depth == 1 and trace["blocks.0.2"].depth == 2
    assert "blocks" not in trace.names  # the ModuleList is never called itself
    assert trace["embed"].inputs == "(2, 5) int64"
    assert trace["embed"].outputs == "(2, 5, 8)"
    assert trace["blocks.1.0"].outputs == "(2, 5, 12)"
    assert trace["head"].kind == "Linear" and trace["head"].outputs == "(2, 5, 3)"
    assert trace[-1].name == "head"
    assert torch.equal(trace.output, model(tokens, scale=2.0).detach())
    with pytest.raises(KeyError, match="no module named"):
        trace["nope"]


def test_max_depth_limits_rows() -> None:
    model = Tiny()
    tokens = torch.randint(0, 10, (1, 3))
    assert trace_shapes(model, tokens, max_depth=0).names == ["Tiny"]
    shallow = trace_shapes(model, tokens, max_depth=1).names
    assert shallow == ["Tiny", "embed", "blocks.0", "blocks.1", "head"]
    assert len(trace_shapes(model, tokens, max_depth=5)) == 1 + 1 + 2 * 4 + 1


def test_hooks_removed_and_no_grad() -> None:
    model = Tiny()
    tokens = torch.randint(0, 10, (2, 4))
    trace = trace_shapes(model, tokens)
    assert not trace.output.requires_grad
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_hooks_removed_when_forward_fails() -> None:
    model = Tiny()
    with pytest.raises(IndexError):
        trace_shapes(model, torch.tensor([[99]]))  # id outside the embedding
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_shared_module_gets_a_row_per_call() -> None:
    lin = nn.Linear(4, 4)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    trace = trace_shapes(model, torch.randn(3, 4))
    assert [r.name for r in trace] == ["Sequential", "0", "1", "0"]


def test_text_and_html_tables() -> None:
    mha = tfm_lesson.MultiHeadAttention(16, 4)
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    trace = trace_shapes(mha, q, kv, kv, need_weights=True)
    text = str(trace).splitlines()
    assert text[0].split() == ["module", "class", "input", "shapes", "output", "shapes"]
    assert set(text[1].replace(" ", "")) == {"-"}
    # columns are aligned: every row's class column starts where the header's does
    col = text[0].index("class")
    assert all(line[col:].startswith(("MultiHeadAttention", "Linear", "-")) for line in text[1:])
    assert "(2, 3, 16), (2, 6, 16), (2, 6, 16)" in text[2]
    assert "(2, 3, 16), (2, 4, 3, 6)" in text[2]  # output and the weights (batch, heads, q_len, k_len)
    page = trace._repr_html_()
    assert page.startswith("<table>") and page.count("<tr>") == len(trace) + 1
    assert "w_q" in page and "MultiHeadAttention" in page


def test_transformer_trace() -> None:
    model = tfm_lesson.Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32,
                                   num_encoder_layers=2, num_decoder_layers=1).eval()
    src, tgt = torch.randint(4, 20, (2, 7)), torch.randint(4, 20, (2, 5))
    trace = trace_shapes(model, src, tgt, max_depth=2)
    assert trace["encoder.layers.1"].outputs == "(2, 7, 16)"
    assert trace["decoder.layers.0"].inputs.startswith("(2, 5, 16), (2, 7, 16)")
    assert trace["generator"].outputs == "(2, 5, 20)"


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="module"):
        trace_shapes(lambda x: x, torch.zeros(1))
    with pytest.raises(ValueError, match="max_depth"):
        trace_shapes(nn.Linear(2, 2), torch.zeros(1, 2), max_depth=-1)
