"""Shared fixtures: devices to run on, and a record of the largest parity error per module."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
import torch

try:
    from hypothesis import settings
    from hypothesis import strategies as st
except ImportError:  # the Colab-like environment runs only the widget tests, with pytest and no hypothesis
    settings = st = None

ROOT = Path(__file__).resolve().parent.parent

# the notebooks under fixtures/ are submissions for the grader's tests (read, never run as chapters): nbval leaves
# them alone (a conftest.py of their own would shadow this one for every `from conftest import ...`)
collect_ignore_glob = ["fixtures/*.ipynb"]
PARITY: dict[str, float] = defaultdict(float)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# property tests (hypothesis): how many examples each tries, and the small sizes (batch, lengths) they draw
PROPERTY_SETTINGS = settings(max_examples=30, deadline=None) if settings is not None else None
property_sizes = st.integers(min_value=1, max_value=6) if st is not None else None


def raises_mistake(check, fn, hint: str) -> None:
    """``check(fn)`` must raise the checker's Mistake with ``hint`` in its message."""
    import re

    from tfm_lesson.checks import Mistake

    with pytest.raises(Mistake, match=re.escape(hint)):
        check(fn)


def passes(check, fn, capsys) -> None:
    """``check(fn)`` must pass and say so."""
    check(fn)
    assert f"✔ {check.__name__} passed" in capsys.readouterr().out


def call_main(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run a command line's ``main(argv)`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def pytest_configure(config: pytest.Config) -> None:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if os.environ.get("TFM_CHECKS_VIA_REPLAY") == "1":  # every checker test graded the grader's way
        import sys

        sys.path.insert(0, str(ROOT / "tests"))
        from replay_roundtrip import install

        install()


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if os.environ.get("TFM_CHECKS_VIA_REPLAY") == "1":
        skip = pytest.mark.skip(reason="shows the checker in a notebook; a replayed check has no traceback to show")
        for item in items:
            if "notebook_only" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.param)


@pytest.fixture
def parity():
    """``parity(name, ours, theirs, atol=1e-5)``: assert closeness and remember the largest error per name."""

    def check(name: str, ours: torch.Tensor, theirs: torch.Tensor, atol: float = 1e-5) -> None:
        assert ours.shape == theirs.shape, f"{name}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"
        err = (ours.detach().double() - theirs.detach().double()).abs().max().item() if ours.numel() else 0.0
        PARITY[name] = max(PARITY[name], err)
        assert err <= atol, f"{name}: largest difference {err:.3g} > {atol}"

    return check


@pytest.fixture
def no_torch_fastpath():
    """torch's encoder layers switch to a nested-tensor kernel in eval; parity compares the documented math."""
    if not hasattr(torch.backends, "mha"):  # torch < 2.3: no switch (and the documented math is compared as is)
        yield
        return
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(before)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not PARITY:
        return
    terminalreporter.section("largest parity error per module (float32)")
    for name, err in sorted(PARITY.items()):
        terminalreporter.write_line(f"{name:45s} {err:.3e}")
    out = ROOT / "artifacts"
    out.mkdir(exist_ok=True)
    (out / "parity.json").write_text(json.dumps(dict(sorted(PARITY.items())), indent=1))
