"""Is my run normal? The shipped reference runs, and compare_to_reference naming each likely cause."""
from __future__ import annotations

import json
import math

import pytest

from tfm_lesson import reference
from tfm_lesson.train.reference import RECIPES, compare_to_reference, load_reference


def _per_step(windows, every):
    """Window means -> one loss per step (each window's mean repeated), steps from 1."""
    losses = [x for x in windows for _ in range(every)]
    return {"step": list(range(1, len(losses) + 1)), "loss": losses}


@pytest.mark.parametrize("task", ["reverse", "numbers", "sentences"])
def test_shipped_references_are_small_and_complete(task):
    ref = load_reference(task)
    assert len(ref["runs"]) >= 3 and len({r["seed"] for r in ref["runs"]}) == len(ref["runs"])
    assert ref["recipe"]["train"] == RECIPES[task]["train"] and ref["recipe"]["model"] == RECIPES[task]["model"]
    for run in ref["runs"]:
        assert len(run["loss"]) == len(ref["step"]) and all(math.isfinite(x) for x in run["loss"])
        assert run["loss"][0] > run["loss"][-1]  # every reference run learns
        assert len(run["valid_metric"]) == len(run["valid_step"]) >= 1
    assert reference._path(task).stat().st_size < 20_000
    assert abs(ref["log_vocab"] - math.log(ref["vocab_size"])) < 1e-3


def test_no_circle_training_does_not_reexport_it():
    import tfm_lesson.train.loop as training

    assert not hasattr(training, "compare_to_reference")  # chapters import it from tfm_lesson.train.reference


@pytest.mark.parametrize("task", ["reverse", "sentences"])
def test_a_reference_run_is_normal(task):
    ref = load_reference(task)
    for run in ref["runs"]:
        history = _per_step(run["loss"], ref["every"])
        history.update(valid_step=run["valid_step"], **{f"valid_{ref['metric']}": run["valid_metric"]})
        verdict = compare_to_reference(history, task, plot=False)
        assert verdict.normal, verdict.message
        assert "normal" in str(verdict)


def test_nan_is_named():
    ref = load_reference("reverse")
    history = _per_step(ref["runs"][0]["loss"], ref["every"])
    history["loss"][57] = float("nan")
    verdict = compare_to_reference(history, "reverse", plot=False)
    assert not verdict.normal
    assert "NaN" in verdict.message and "step 58" in verdict.message
    assert "learning rate" in verdict.message and "float16" in verdict.message


def test_flat_at_log_v_is_named():
    ref = load_reference("reverse")
    logv = ref["log_vocab"]
    history = {"step": list(range(1, 401)), "loss": [logv + 0.01 * math.sin(i) for i in range(400)]}
    verdict = compare_to_reference(history, "reverse", plot=False)
    assert not verdict.normal and "flat near log V" in verdict.message
    assert "no gradient" in verdict.message and "learning rate is zero" in verdict.message


def test_leak_is_named():
    ref = load_reference("reverse")
    logv = ref["log_vocab"]
    losses = [logv * math.exp(-s / 5) + 0.05 for s in range(1, 601)]  # near zero within a few dozen steps
    verdict = compare_to_reference({"step": list(range(1, 601)), "loss": losses}, "reverse", plot=False)
    assert not verdict.normal and "a leak" in verdict.message and "causal mask" in verdict.message


def test_slow_run_is_named():
    ref = load_reference("sentences")
    hi = [max(col) for col in zip(*(r["loss"] for r in ref["runs"]))]
    history = _per_step([1.5 * x + 0.3 for x in hi], ref["every"])
    verdict = compare_to_reference(history, "sentences", plot=False)
    assert not verdict.normal and "above the band" in verdict.message and "peak_lr" in verdict.message


def test_low_validation_metric_is_named():
    ref = load_reference("reverse")
    run = ref["runs"][0]
    history = _per_step(run["loss"], ref["every"])
    history.update(valid_step=run["valid_step"], valid_exact_match=[1.0 for _ in run["valid_step"]])
    verdict = compare_to_reference(history, "reverse", plot=False)
    assert not verdict.normal and "validation exact_match" in verdict.message


def test_partial_runs_compare_and_bad_input_is_refused():
    ref = load_reference("reverse")
    history = _per_step(ref["runs"][1]["loss"][:10], ref["every"])  # only the first 100 steps
    assert compare_to_reference(history, "reverse", plot=False).normal
    with pytest.raises(ValueError, match="no reference run"):
        compare_to_reference(history, "copy", plot=False)
    with pytest.raises(TypeError, match="'loss'"):
        compare_to_reference([1.0, 2.0], "reverse", plot=False)
    with pytest.raises(ValueError, match="differ in length"):
        compare_to_reference({"step": [1, 2], "loss": [1.0]}, "reverse", plot=False)


def test_plot_draws_band_and_curve():
    import matplotlib

    matplotlib.use("Agg")
    ref = load_reference("reverse")
    verdict = compare_to_reference(_per_step(ref["runs"][0]["loss"], ref["every"]), "reverse")
    ax = verdict.figure.axes[0]
    assert any(line.get_label() == "your run" for line in ax.get_lines())
    assert len(ax.collections) >= 2  # the band and the widened band


def test_regenerate_command(tmp_path, monkeypatch):
    tiny = dict(RECIPES["reverse"], train=dict(steps=20, batch_size=32, warmup=5, peak_lr=3e-3, eval_every=20),
                model=dict(d_model=16, heads=2, num_layers=1, d_ff=32, dropout=0.0))
    monkeypatch.setitem(RECIPES, "reverse", tiny)
    out = tmp_path / "reverse.json"
    reference.main(["--task", "reverse", "--out", str(out)])
    ref = json.loads(out.read_text())
    assert [r["seed"] for r in ref["runs"]] == [0, 1, 2] and ref["step"] == [10, 20]
    assert ref["runs"][0]["loss"] != ref["runs"][1]["loss"]  # seeds differ
    with pytest.raises(SystemExit):
        reference.main(["--task", "reverse", "--seeds", "0", "1", "--out", str(out)])


def test_the_band_is_drawn_without_pyplot():
    """Returned once and displayed where the chapter shows it; never left open in pyplot to be shown again."""
    import matplotlib.pyplot as plt

    from tfm_lesson.look.viz import Figure

    before = plt.get_fignums()
    ref = load_reference("reverse")
    verdict = compare_to_reference({"step": ref["step"], "loss": ref["runs"][0]["loss"]}, "reverse")
    assert isinstance(verdict.figure, Figure) and verdict.figure._repr_png_().startswith(b"\x89PNG")
    assert plt.get_fignums() == before
