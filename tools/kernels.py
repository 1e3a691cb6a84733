"""Which printed numbers of a chapter move when PyTorch picks other CPU kernels.

``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``) chooses the vectorised kernels PyTorch's CPU
operators dispatch to. Their sums run in another order, so a trained model's last digits, and through them
its trained figures, can differ from one machine to another. This tool runs one chapter once per setting,
each in a fresh kernel, on an in-memory copy (the chapter file is never written), and lists every number its
outputs print that is not the same under every setting.

    python tools/kernels.py notebooks/12_looking_inside.ipynb
    python tools/kernels.py notebooks/17_what_the_heads_learned.ipynb --out /tmp/k17   # also kernels.json

Numbers are read cell by cell from ``stream`` and ``text/plain`` outputs, in order. Times and speeds
(``12.3 s``, ``40 ms``, ``350 tokens/s``) and progress bars move on any loaded machine: they are taken out of
the lines before comparing, unless ``--keep-timings``. A cell whose count of numbers differs between settings is
reported whole. Printed words move too (a translation, a decoded sample: ``eighty -> quatre-vingt-``): a line
whose words differ between settings, with or without numbers in it, is reported whole.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SETTINGS = ("default", "avx2", "avx512")
NUMBER = re.compile(r"[-+−]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
# a time or a speed: "12.3 s", "40 ms", "2.1 min", "350 tokens/s", "1.2 it/s", "3.4 s/it" (removed from a line)
TIME = re.compile(r"(?:\d+\.\d*|\.\d+|\d+)\s*(?:s|ms|µs|us|min|h|[\w ]*/s|s/it)\b", re.IGNORECASE)
PROGRESS = re.compile(r"\d+%\||\[\d+:\d+")  # a progress bar (its counters and clock): dropped whole
PROBE = "import torch\nprint('ATEN_CPU_CAPABILITY in use:', torch.backends.cpu.get_cpu_capability())"


@dataclass
class Moved:
    """One printed number (or one whole cell) that is not the same under every setting."""
    cell: int                 # index of the code cell in the chapter (0 = first cell of the notebook)
    line: str                 # the printed line under the first setting
    values: dict[str, str]    # setting -> the number (or the whole line) it printed


def _output_text(cell: Any) -> str:
    parts: list[str] = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out and "text/plain" in out["data"]:
            parts.append(out["data"]["text/plain"])
    return "".join(parts)


def printed_lines(text: str, keep_timings: bool = False) -> list[str]:
    """The lines of ``text`` that carry a number (carriage-return progress updates keep their last state)."""
    lines = [line.rsplit("\r", 1)[-1].strip() for line in text.splitlines()]
    if not keep_timings:
        lines = [TIME.sub("<time>", line) for line in lines if not PROGRESS.search(line)]
    return [line for line in lines if NUMBER.search(line)]


def text_lines(text: str, keep_timings: bool = False) -> list[str]:
    """The non-empty lines of ``text`` that carry no number (decoded words, verdicts), times taken out as above."""
    lines = [line.rsplit("\r", 1)[-1].strip() for line in text.splitlines()]
    if not keep_timings:
        lines = [TIME.sub("<time>", line) for line in lines if not PROGRESS.search(line)]
    return [line for line in lines if line and not NUMBER.search(line)]


def numbers(line: str) -> list[str]:
    """The numbers written in ``line``, as printed."""
    return NUMBER.findall(line)


def run_chapter(path: Path, setting: str, timeout: int = 1200) -> tuple[Any, str]:
    """Execute a copy of the chapter at ``path`` in a fresh kernel with ``ATEN_CPU_CAPABILITY=setting``.

    Returns the executed notebook (the probe cell removed) and the capability PyTorch reported in the kernel.
    """
    import nbformat
    from nbclient import NotebookClient

    if setting not in SETTINGS:
        raise ValueError(f"setting: expected one of {SETTINGS}, got {setting!r}")
    nb = nbformat.read(path, as_version=4)
    run = copy.deepcopy(nb)
    run.cells.append(nbformat.v4.new_code_cell(PROBE))  # last, so it cannot touch the chapter's random state
    env = dict(os.environ, ATEN_CPU_CAPABILITY=setting)
    NotebookClient(run, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    probe = _output_text(run.cells.pop()).strip().rsplit(" ", 1)[-1]
    return run, probe


def compare(runs: dict[str, Any], keep_timings: bool = False) -> list[Moved]:
    """Every printed number that differs between the executed notebooks in ``runs`` (setting -> notebook)."""
    names = list(runs)
    first = runs[names[0]]
    moved: list[Moved] = []
    for i, cell in enumerate(first.cells):
        if cell.get("cell_type") != "code":
            continue
        moved += _moved_words(i, {s: text_lines(_output_text(runs[s].cells[i]), keep_timings) for s in names})
        lines = {s: printed_lines(_output_text(runs[s].cells[i]), keep_timings) for s in names}
        shapes = {s: [len(numbers(line)) for line in lines[s]] for s in names}
        if len({tuple(v) for v in shapes.values()}) > 1:  # the cell printed differently shaped text
            text = {s: " | ".join(lines[s]) for s in names}
            if len(set(text.values())) > 1:
                moved.append(Moved(i, text[names[0]][:200], text))
            continue
        for j, line in enumerate(lines[names[0]]):
            per_setting = {s: numbers(lines[s][j]) for s in names}
            for k, value in enumerate(per_setting[names[0]]):
                values = {s: per_setting[s][k] for s in names}
                if len(set(values.values())) > 1:
                    moved.append(Moved(i, line[:200], values))
            words = {s: NUMBER.sub("#", lines[s][j])[:200] for s in names}  # the same numbers, other words
            if len(set(words.values())) > 1 and not PROGRESS.search(line):  # a bar's own marks are not words
                moved.append(Moved(i, line[:200], {s: lines[s][j][:200] for s in names}))
    return moved


def _moved_words(cell: int, lines: dict[str, list[str]]) -> list[Moved]:
    """The lines without numbers of one cell (setting -> lines) that differ between settings, each whole."""
    names = list(lines)
    if len({len(v) for v in lines.values()}) > 1:  # other line counts: the cell's text, whole
        text = {s: " | ".join(lines[s])[:200] for s in names}
        return [Moved(cell, text[names[0]], text)] if len(set(text.values())) > 1 else []
    return [Moved(cell, lines[names[0]][j][:200], {s: lines[s][j][:200] for s in names})
            for j in range(len(lines[names[0]])) if len({lines[s][j] for s in names}) > 1]


def report(path: Path, moved: list[Moved], probes: dict[str, str], seconds: dict[str, float]) -> str:
    """A plain-text report: the capability each run really used, then one line per moved number."""
    head = [f"{path}: " + ", ".join(f"{s} -> {probes[s]} ({seconds[s]:.0f} s)" for s in probes)]
    if len(set(probes.values())) < len(probes):
        head.append("warning: two settings ran the same kernels (this CPU lacks one); their agreement proves nothing")
    if not moved:
        head.append("no printed number moved between settings")
    for m in moved:
        values = "  ".join(f"{s}={v}" for s, v in m.values.items())
        head.append(f"cell {m.cell}: {values}    in: {m.line}")
    return "\n".join(head)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapter", type=Path, help="a chapter notebook, e.g. notebooks/12_looking_inside.ipynb")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="comma-separated ATEN_CPU_CAPABILITY values (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds a cell may run (default: %(default)s)")
    parser.add_argument("--keep-timings", action="store_true", help="also compare lines that report times")
    parser.add_argument("--out", type=Path, help="folder for kernels.json (every moved number and the runs)")
    args = parser.parse_args(argv)
    if not args.chapter.is_file():
        parser.error(f"chapter: no such notebook {args.chapter}")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if len(settings) < 2 or any(s not in SETTINGS for s in settings):
        parser.error(f"--settings: two or more of {', '.join(SETTINGS)}, got {args.settings!r}")
    runs: dict[str, Any] = {}
    probes: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for setting in settings:
        start = time.perf_counter()
        runs[setting], probes[setting] = run_chapter(args.chapter, setting, args.timeout)
        seconds[setting] = time.perf_counter() - start
        print(f"{setting}: ran with {probes[setting]} in {seconds[setting]:.0f} s", file=sys.stderr, flush=True)
    moved = compare(runs, args.keep_timings)
    print(report(args.chapter, moved, probes, seconds))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "kernels.json").write_text(json.dumps(
            {"chapter": str(args.chapter), "capability": probes, "seconds": seconds,
             "load": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None,
             "moved": [asdict(m) for m in moved]}, indent=1))
        for setting, nb in runs.items():
            import nbformat
            nbformat.write(nb, args.out / f"{args.chapter.stem}.{setting}.ipynb")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
