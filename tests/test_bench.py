"""The benchmark command: a --quick run writes well-formed bench.md and bench.json (no speed thresholds)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfm_lesson.model import TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import bench  # noqa: E402  (tools/bench.py: repository tooling, outside the package)


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_quick_run_writes_report(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "--quick", "--device", "cpu",
                           "--out", str(out),
                           "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "bench.json").read_text())
    machine = result["machine"]
    assert machine["torch"] == torch.__version__ and machine["device"] == "cpu" and machine["threads"] == 1
    assert machine["cores"] >= 1 and machine["cpu"]
    assert result["quick"] is True and result["amp"] is False

    rows = result["attention"]
    assert {(r["heads"], r["d_model"], r["length"]) for r in rows} == {(4, 128, 16), (8, 512, 64)}
    assert {r["pass_"] for r in rows} == {"forward", "forward+backward"}
    for r in rows:
        assert set(r["ms"]) == {"explicit", "fast", "nn.MultiheadAttention", "sdpa"}
        assert all(_positive(v) for v in r["ms"].values())
        assert math.isclose(r["fast_vs_nn"], r["ms"]["fast"] / r["ms"]["nn.MultiheadAttention"])
        assert math.isclose(r["fast_vs_sdpa"], r["ms"]["fast"] / r["ms"]["sdpa"])

    assert _positive(result["matmul_peak_flops"])
    (step,) = result["step"]
    assert step["config"] == "tiny" and step["loss_gap"] < 1e-4  # same weights, same loss as nn.Transformer
    assert _positive(step["matmul_flop_per_s"])
    for key in ("ms", "tokens_per_s", "flop_per_s", "fraction_of_peak"):
        assert set(step[key]) == {"tfm_lesson.Transformer", "nn.Transformer"}
        assert all(_positive(v) for v in step[key].values())
    assert math.isclose(step["ratio"], step["ms"]["tfm_lesson.Transformer"] / step["ms"]["nn.Transformer"])
    assert "chapters" not in result and "targets" not in result  # skipped in --quick, and said so
    assert any("skipped in --quick" in n for n in result["notes"])

    md = (out / "bench.md").read_text()
    assert "## Multi-head self-attention" in md and "## Training step" in md and torch.__version__ in md
    table = [line for line in md.splitlines() if line.startswith("| 32 |")]
    assert len(table) == 4 and all(line.count("|") == 14 for line in table)
    gen = result["generation"]  # the quick generation section: four ways, the same tokens, the profile
    assert gen["same_tokens"] is True and set(gen["speedup"]) == {"32"} and _positive(gen["speedup"]["32"])
    assert "## Generation" in md and "| 32 tokens |" in md and "operator calls from Python" in md


def test_training_flops_formula():
    # one encoder and one decoder layer, d = 2, f = 4, S = T = 1, V = 3, batch 1: count by hand
    c = TransformerConfig(src_vocab_size=3, tgt_vocab_size=3, d_model=2, heads=1, d_ff=4, num_encoder_layers=1,
                          num_decoder_layers=1)
    enc = 4 * 4 + 2 * 2 * 4 + 2 * 1 * 2  # projections, FFN, attention
    dec = 6 * 4 + 2 * 2 * 4 + 2 * 4 + 2 * 2 + 2 * 2  # self + cross Q/O, FFN, cross K/V, two attentions
    gen = 2 * 3
    assert bench.training_flops(c, 1, 1, 1) == 3 * 2 * (enc + dec + gen)
    assert bench.training_flops(c, 5, 1, 1) == 5 * bench.training_flops(c, 1, 1, 1)


def test_interleaved_runs_in_turns():
    order = []
    t = bench.interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4 and set(t) == {"a", "b"} and all(v >= 0 for v in t.values())
    with pytest.raises(ValueError, match="repeats"):
        bench.interleaved({"a": lambda: None}, repeats=0)


def test_unknown_section_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown"):
        bench.main(["--sections", "attention,speed", "--out", str(tmp_path)])


def test_load_generator_starts_busy_processes_and_stops_them():
    with bench.LoadGenerator(2, seconds=60) as load:
        assert load.alive == 2 and len(load.info["pids"]) == 2
    assert load.alive == 0 and "stopped" in load.info  # stopped at the end of the block
    with bench.LoadGenerator(1, seconds=0.5) as short:
        short.procs[0].wait(timeout=30)  # bounded in time: it ends by itself
        assert short.alive == 0
    with pytest.raises(ValueError, match="processes must be an int >= 1"):
        bench.LoadGenerator(0)
