"""A shape tracer: run one forward pass and list what goes in and out of every submodule.

    >>> trace = trace_shapes(model, src, tgt, max_depth=2)
    >>> print(trace)          # an aligned text table; in Jupyter the last expression shows an HTML table

Hooks are attached for the duration of one forward pass (under ``torch.no_grad()``) and always removed.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import Tensor, nn

__all__ = ["trace_shapes", "ShapeTrace", "ShapeRow", "shape_of"]


def shape_of(value: Any) -> str:
    """A short text for what a module received or returned: ``(2, 5, 16)``, ``(2, 5) int64``, ``None``..."""
    if isinstance(value, Tensor):
        dims = "(" + ", ".join(str(s) for s in value.shape) + ("," if value.dim() == 1 else "") + ")"
        if value.dtype == torch.bool:
            return f"{dims} bool"
        if not value.is_floating_point():
            return f"{dims} {str(value.dtype).replace('torch.', '')}"
        return dims
    if isinstance(value, (tuple, list)):
        parts = [shape_of(v) for v in value]
        parts = [p for p in parts if p]
        return ", ".join(parts)
    if isinstance(value, dict):
        parts = [f"{k}={shape_of(v)}" for k, v in value.items() if shape_of(v)]
        return ", ".join(parts)
    if value is None:
        return ""
    return ""  # ints, floats, flags: not shapes, left out


@dataclass(frozen=True)
class ShapeRow:
    """One call of one submodule: its qualified name, class, depth and the shapes in and out."""

    name: str
    kind: str
    depth: int
    inputs: str
    outputs: str


@dataclass
class ShapeTrace:
    """The rows of a trace, in the order the modules were entered; ``output`` is the model's result."""

    rows: list[ShapeRow] = field(default_factory=list)
    output: Any = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[ShapeRow]:
        return iter(self.rows)

    def __getitem__(self, name: str | int) -> ShapeRow:
        """A row by position or by qualified name (the first call of that module)."""
        if isinstance(name, int):
            return self.rows[name]
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no module named {name!r} in this trace; names: {[r.name for r in self.rows]}")

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rows]

    def _cells(self) -> list[tuple[str, str, str, str]]:
        return [("  " * r.depth + r.name, r.kind, r.inputs, r.outputs) for r in self.rows]

    def __str__(self) -> str:
        header = ("module", "class", "input shapes", "output shapes")
        cells = [header, *self._cells()]
        widths = [max(len(c[i]) for c in cells) for i in range(4)]
        lines = ["  ".join(c[i].ljust(widths[i]) for i in range(4)).rstrip() for c in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        headers = ("module", "class", "input shapes", "output shapes")
        th = "".join(f"<th style='text-align:left'>{h}</th>" for h in headers)
        body = []
        for r in self.rows:
            pad = f"padding-left:{0.3 + 1.2 * r.depth:.1f}em"
            body.append(
                f"<tr><td style='text-align:left;{pad}'><code>{html.escape(r.name)}</code></td>"
                f"<td style='text-align:left'>{html.escape(r.kind)}</td>"
                f"<td style='text-align:left'><code>{html.escape(r.inputs)}</code></td>"
                f"<td style='text-align:left'><code>{html.escape(r.outputs)}</code></td></tr>")
        return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_CONTAINERS = (nn.ModuleList, nn.ModuleDict)


def trace_shapes(module: nn.Module, *args: Any, max_depth: int = 2, **kwargs: Any) -> ShapeTrace:
    """Run ``module(*args, **kwargs)`` once and record the input/output shapes of each submodule.

    Submodules nested deeper than ``max_depth`` (the model itself is depth 0, its children depth 1, ...;
    a ``ModuleList`` adds no level, so ``encoder.layers.0`` is depth 2) are left out. A module called several
    times (a shared layer) gets one row per call. Returns a
    :class:`ShapeTrace`: ``print`` it for a text table; Jupyter shows it as an HTML table.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"trace_shapes: module must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"trace_shapes: max_depth must be an int >= 0, got {max_depth!r}")

    rows: list[ShapeRow | None] = []
    handles = []

    def attach(name: str, sub: nn.Module, depth: int) -> None:
        slot: list[int] = []  # positions of this module's open calls (a stack: a module may call itself)

        def pre(mod: nn.Module, a: tuple, kw: dict) -> None:
            slot.append(len(rows))
            rows.append(None)  # reserved: rows keep the order in which modules are entered

        def post(mod: nn.Module, a: tuple, kw: dict, out: Any) -> None:
            inputs = ", ".join(p for p in (shape_of(a), shape_of(kw)) if p)
            rows[slot.pop()] = ShapeRow(name or type(mod).__name__, type(mod).__name__, depth, inputs, shape_of(out))

        handles.append(sub.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(sub.register_forward_hook(post, with_kwargs=True))

    modules = dict(module.named_modules())
    for name, sub in modules.items():
        if isinstance(sub, _CONTAINERS):
            continue  # never called itself: its members are counted one level below its owner
        parts = name.split(".") if name else []
        # depth = ancestors that run (containers such as ModuleList are skipped), so encoder.layers.0 is depth 2
        depth = sum(not isinstance(modules[".".join(parts[:i])], _CONTAINERS) for i in range(1, len(parts) + 1))
        if depth <= max_depth:
            attach(name, sub, depth)
    try:
        with torch.no_grad():
            output = module(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return ShapeTrace([r for r in rows if r is not None], output)
