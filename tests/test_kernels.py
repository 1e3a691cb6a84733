"""tools/kernels.py: a chapter run under ATEN_CPU_CAPABILITY=default, avx2 and avx512 in fresh kernels, and every
printed number that moved between them. Fast tests feed the comparison hand-made outputs; the slow test runs a
cut-down copy of chapter 10 (its set-up, imports and data cells, then 30 training steps of its recipe)."""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import kernels  # noqa: E402  (tools/kernels.py: repository tooling, outside the package)


def _notebook(*outputs: str):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("text 1.5"))  # markdown: never compared
    for text in outputs:
        cell = nbformat.v4.new_code_cell("...")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        nb.cells.append(cell)
    return nb


def test_a_moved_number_is_reported_with_every_setting_s_value():
    runs = {"default": _notebook("params 1,024\nloss 0.6612 after 400 steps\n"),
            "avx2": _notebook("params 1,024\nloss 0.6530 after 400 steps\n"),
            "avx512": _notebook("params 1,024\nloss 0.6612 after 400 steps\n")}
    moved = kernels.compare(runs)
    assert [(m.cell, m.values) for m in moved] == [(1, {"default": "0.6612", "avx2": "0.6530", "avx512": "0.6612"})]
    assert moved[0].line == "loss 0.6612 after 400 steps"


def test_times_speeds_and_progress_bars_are_not_numbers_that_moved():
    runs = {"default": _notebook("BLEU 91.4, trained in 68 s (350 tokens/s)\n 45%|####  | 9/20 [00:03<00:04]\n"),
            "avx2": _notebook("BLEU 91.4, trained in 71 s (341 tokens/s)\n 50%|#####  | 10/20 [00:04<00:04]\n")}
    assert kernels.compare(runs) == []
    kept = kernels.compare(runs, keep_timings=True)  # 68/71 s, 350/341 tokens/s; the bar's 45/50 %, 9/10, 03/04
    assert [m.values["default"] for m in kept] == ["68", "350", "45", "9", "03"]


def test_a_cell_that_prints_differently_shaped_text_is_reported_whole():
    runs = {"default": _notebook("heads costing nothing: 3\n"), "avx2": _notebook("heads costing nothing: 3 and 4\n")}
    (m,) = kernels.compare(runs)
    assert m.values == {"default": "heads costing nothing: 3", "avx2": "heads costing nothing: 3 and 4"}


def test_printed_words_that_moved_are_reported_whole():
    runs = {"default": _notebook("eighty -> quatre quatre-\neleven -> \nloss 0.62\n"),
            "avx2": _notebook("eighty -> quatre-vingt\neleven -> onze\nloss 0.62\n"),
            "avx512": _notebook("eighty -> quatre quatre-\neleven -> \nloss 0.62\n")}
    moved = kernels.compare(runs)
    assert [m.values["avx2"] for m in moved] == ["eighty -> quatre-vingt", "eleven -> onze"]
    same_numbers = {"default": _notebook("words that differ: 3 (fatigué, jolie, grise)\n"),
                    "avx2": _notebook("words that differ: 3 (fatiguée, joli, gris)\n")}
    (m,) = kernels.compare(same_numbers)  # the numbers agree, the words do not
    assert m.values["avx2"] == "words that differ: 3 (fatiguée, joli, gris)"
    assert kernels.compare({"default": _notebook("no number here\n"), "avx2": _notebook("no number here\n")}) == []


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        kernels.main([str(tmp_path / "missing.ipynb")])
    nbformat.write(_notebook("1"), tmp_path / "x.ipynb")
    with pytest.raises(SystemExit):
        kernels.main([str(tmp_path / "x.ipynb"), "--settings", "default"])  # one setting compares nothing
    with pytest.raises(ValueError, match="setting"):
        kernels.run_chapter(tmp_path / "x.ipynb", "sse9")


def _cut_down_chapter_10(path: Path) -> None:
    nb = nbformat.read(ROOT / "notebooks" / "10_training_toy_tasks.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    data_cell = next(i for i, c in enumerate(code) if 'load_task("reverse"' in c.source)
    cut = nbformat.v4.new_notebook(metadata=nb.metadata)
    cut.cells = [nbformat.v4.new_code_cell(c.source) for c in code[:data_cell + 1]]  # set-up, imports, data
    cut.cells.append(nbformat.v4.new_code_cell(
        'T.seed_everything(0)\n'
        'model = make_model(data.src_vocab, data.tgt_vocab, **RECIPES["reverse"]["model"])\n'
        'history = train(model, dataclasses.replace(data, valid=[]), **dict(RECIPES["reverse"]["train"], steps=30),\n'
        '                device="cpu", seed=0, amp=False, progress=False)\n'
        'print("losses:", [repr(x) for x in history["loss"][-3:]])\n'
        'print("parameters:", sum(p.numel() for p in model.parameters()))'))
    nbformat.write(cut, path)


@pytest.mark.slow
def test_training_numbers_move_with_the_kernels_and_the_rest_stays(tmp_path, monkeypatch):
    best = torch.backends.cpu.get_cpu_capability()
    settings = ["default", "avx2"] + (["avx512"] if best == "AVX512" else [])
    if best not in ("AVX2", "AVX512"):
        pytest.skip(f"this CPU offers {best}: no vectorised kernels to compare with the default ones")
    chapter = tmp_path / "10_cut.ipynb"
    _cut_down_chapter_10(chapter)
    monkeypatch.setenv("TFM_DEVICE", "cpu")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    runs, probes = {}, {}
    for setting in settings:
        runs[setting], probes[setting] = kernels.run_chapter(chapter, setting, timeout=600)
    assert probes == {s: s.upper() for s in settings}  # each kernel really ran with the asked-for kernels
    moved = kernels.compare(runs)
    lines = {m.line.split(":")[0] for m in moved}
    assert "losses" in lines  # 30 steps are enough for the reduction order to show in a float32 loss
    assert "parameters" not in lines and not any(m.cell < len(runs["default"].cells) - 1 for m in moved)
    report = kernels.report(chapter, moved, probes, {s: 1.0 for s in settings})
    assert "losses" in report and "no printed number moved" not in report
