"""tfm_lesson.train.scaling: the fits recover a known power law, a two-point sweep runs in a temporary folder and
resumes where it stopped, the command refuses to write inside the package, the shipped sweep is consistent."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tfm_lesson.train import scaling
from tfm_lesson.train.cost import flops_per_token
from tfm_lesson.data.corpus import load_corpus
from tfm_lesson.train.lm import prepare_lm_data
from tfm_lesson.train.recipes import SCALING

TINY = dict(SCALING, shapes=[(16, 1), (16, 2)], budgets=[3e8], first_shape=[0], shapes_per_budget=2,
            eval_tokens=1024)


@pytest.fixture(scope="module")
def data():
    return prepare_lm_data(load_corpus(max_chars=30_000), vocab_size=300, tokenizer_chars=30_000)


def _law_points(k=0.3, a=0.5, big_a=20.0, alpha=0.07, budgets=(1e10, 1e11, 1e12)):
    """Points on exact parabolas in ln N whose vertices follow N_opt = k C^a, L = A C^-alpha."""
    points = []
    for c in budgets:
        n_opt = k * c ** a
        for factor in (0.25, 0.5, 1.0, 2.0, 4.0):
            n = n_opt * factor
            points.append(dict(budget=c, params=n, valid_loss=big_a * c ** -alpha + 0.05 * math.log(factor) ** 2))
    return points


def test_fit_recovers_a_known_power_law():
    fit = scaling.fit_sweep(_law_points())
    assert fit["n_law"] == pytest.approx((0.3, 0.5), rel=1e-6)
    assert fit["l_law"] == pytest.approx((20.0, -0.07), rel=1e-6)
    n_pred, l_pred = scaling.predict(fit, 1e13)
    assert n_pred == pytest.approx(0.3 * 1e13 ** 0.5, rel=1e-6) and l_pred == pytest.approx(20 * 1e13 ** -0.07)


def test_bootstrap_brackets_the_truth_of_noisy_points():
    import numpy as np

    rng = np.random.default_rng(1)
    points = [dict(p, valid_loss=p["valid_loss"] + rng.normal(0, 0.01)) for p in _law_points()]
    band = scaling.bootstrap(points, 1e13, draws=200, seed=0)
    assert band["a"][0] < 0.5 < band["a"][2] or abs(band["a"][1] - 0.5) < 0.1
    assert band["l_pred"][0] <= band["l_pred"][1] <= band["l_pred"][2]


def test_bootstrap_counts_its_two_skip_causes_apart():
    points = _law_points()
    band = scaling.bootstrap(points, 1e13, draws=100, seed=0)
    assert band["skipped"] == band["skipped_few_sizes"] + band["skipped_no_minimum"]
    assert band["skipped_few_sizes"] > 0  # five sizes drawn five times: about one budget in ten gets two or fewer
    assert band["skipped_no_minimum"] < band["skipped_few_sizes"]  # only a vertex on the edge, by round-off
    flat = [dict(p, valid_loss=3.0 - 0.1 * math.log(p["params"])) for p in points]  # no minimum anywhere
    with pytest.raises(ValueError, match="no bootstrap draw"):
        scaling.bootstrap(flat, 1e13, draws=20, seed=0)


def test_shipped_band_is_what_the_code_gives_on_the_shipped_points():
    """The interval the chapter shows is re-derived here from the shipped points, so code and data cannot part."""
    shipped = scaling.load_shipped()
    pred = shipped["prediction"]
    band = scaling.bootstrap(shipped["points"], pred["budget"], pred["bootstrap"]["draws"], shipped["sweep"]["seed"])
    assert set(band) == set(pred["bootstrap"])
    for key, value in band.items():
        assert pred["bootstrap"][key] == (pytest.approx(value, rel=1e-9) if isinstance(value, list) else value), key
    assert pred["bootstrap_recomputed"]["after_check_run"] is True
    assert pred["bootstrap_recomputed"]["at"] > pred["made_at"]  # recomputed after the prediction, and says so


def test_no_minimum_gives_none():
    points = [dict(budget=1e10, params=n, valid_loss=3.0 - 0.1 * math.log(n)) for n in (1e3, 1e4, 1e5)]
    assert scaling.fit_parabola([p["params"] for p in points], [p["valid_loss"] for p in points]) is None
    assert scaling.fit_sweep(points) is None


def test_two_point_sweep_runs_and_resumes(tmp_path, data, monkeypatch):
    out = tmp_path / "sweep.json"
    lines: list[str] = []
    calls = {"n": 0}
    real = scaling.run_point

    def stop_after_one(*args, **kwargs):
        if calls["n"] == 1:
            raise KeyboardInterrupt  # the sweep is interrupted during its second point
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(scaling, "run_point", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        scaling.grid(out, TINY, data, lines.append)
    first = json.loads(out.read_text())["points"]
    assert len(first) == 1 and lines and "C=3.0e+08" in lines[0]
    monkeypatch.setattr(scaling, "run_point", real)
    result = scaling.grid(out, TINY, data, lines.append)
    assert any(line.startswith("resuming") for line in lines)
    points = json.loads(out.read_text())["points"]
    assert len(points) == 2 and points[0] == first[0]
    for p in points:
        config = scaling.shape_config(p["d_model"], p["num_layers"], TINY)
        tokens_per_step = TINY["batch_size"] * TINY["max_len"]
        assert p["flops"] == p["steps"] * flops_per_token(config, TINY["max_len"]) * tokens_per_step
        assert abs(p["flops"] - 3e8) / 3e8 < 0.5 and math.isfinite(p["valid_loss"])
    assert result["points"] == points
    monkeypatch.setattr(scaling, "run_point", lambda *a, **k: pytest.fail("a finished point was trained again"))
    scaling.grid(out, TINY, data, lines.append)


def test_a_point_is_seeded(data):
    a = scaling.run_point(data, 2e8, 16, 1, TINY)
    b = scaling.run_point(data, 2e8, 16, 1, TINY)
    assert a["valid_loss"] == b["valid_loss"] and a["steps"] == b["steps"]


def test_other_settings_are_refused(tmp_path, data):
    out = tmp_path / "sweep.json"
    out.write_text(json.dumps({"format": scaling.FORMAT, "sweep": {"budgets": [1.0]}, "recipe": {}, "points": []}))
    with pytest.raises(ValueError, match="other settings"):
        scaling.grid(out, TINY, data, print)


def test_command_refuses_the_package(capsys):
    import tfm_lesson

    with pytest.raises(SystemExit, match="inside the tfm_lesson package"):
        scaling.main(["--out", str(Path(tfm_lesson.__file__).parent / "data" / "reference" / "x.json")])


def test_shipped_sweep_is_complete_and_consistent():
    shipped = scaling.load_shipped()
    assert shipped["format"] == scaling.FORMAT
    budgets = {p["budget"] for p in shipped["points"]}
    assert len(budgets) >= 3
    sizes = [p["params"] for p in shipped["points"]]
    assert max(sizes) / min(sizes) >= 10  # widths and depths spanning ten times in parameters or more
    fit = scaling.fit_sweep(shipped["points"])
    assert fit is not None
    n_pred, l_pred = scaling.predict(fit, shipped["prediction"]["budget"])
    assert n_pred == pytest.approx(shipped["prediction"]["n_opt"])
    assert l_pred == pytest.approx(shipped["prediction"]["loss"])
    assert shipped["check"]["inside"] == scaling.band_holds(shipped["prediction"], shipped["check"]["valid_loss"])


def test_prediction_is_written_before_the_check_run(tmp_path, data, monkeypatch):
    """With runs that follow a known law, the sweep predicts it, saves the prediction, then trains the check."""
    out = tmp_path / "sweep.json"
    settings = dict(SCALING, budgets=[1e10, 1e11, 1e12], first_shape=[0, 0, 0], check_budget=1e13)

    def on_the_law(data, budget, d_model, num_layers, settings):
        n = scaling.parameter_count(scaling.shape_config(d_model, num_layers, settings))
        if budget == settings["check_budget"]:
            assert "prediction" in json.loads(out.read_text()), "the check run started before the prediction was saved"
        loss = 10 * budget ** -0.05 + 0.1 * math.log(n / (30 * budget ** 0.3)) ** 2
        return dict(budget=budget, d_model=d_model, num_layers=num_layers, params=n, non_embedding=n, steps=1,
                    tokens=1, flops=budget, train_loss=loss, valid_loss=loss, seconds=0.0)

    monkeypatch.setattr(scaling, "run_point", on_the_law)
    result = scaling.sweep(out, settings, data, lambda line: None, draws=50)
    assert result["fit"]["n_law"][1] == pytest.approx(0.3, abs=1e-6)
    assert result["prediction"]["loss"] == pytest.approx(10 * 1e13 ** -0.05, rel=1e-6)
    assert result["check"]["inside"] == scaling.band_holds(result["prediction"], result["check"]["valid_loss"])
    assert json.loads(out.read_text())["check"] == result["check"]
