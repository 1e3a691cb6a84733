"""Guards that keep the course green on a GPU without having one here (CPU-only checks).

- nbval compares outputs with device strings removed (tests/nbval_sanitize.cfg), so a cell that prints a CUDA
  tensor compares equal to the CPU output stored in the chapter;
- no chapter calls ``.numpy()`` on a tensor that may live on the GPU without ``.cpu()`` first;
- no chapter builds a tensor on the CPU (a torch constructor without ``device=``) and combines it with the
  chapter's ``device`` tensors: that works on a CPU and raises on a GPU;
- ``make notebooks`` executes on the CPU unless told otherwise; ``seed_everything(deterministic=True)`` sets
  what PyTorch needs for reproducible GPU runs, and a seeded run on a fixed device is bit-identical.

The constructor check is a heuristic, read it before trusting it. Per code cell of a chapter (``ast``):
1. ``device`` is the variable the chapters move things with (``default_device()``: a GPU when present).
2. Names that may hold device tensors are followed through the chapter's cells in order: a name assigned
   from anything that mentions ``device``, ``.to(...)``, ``.cuda()`` or such a name (``model = ….to(device)``,
   then ``log_probs = model(...)``), unless it ends in ``.cpu()``/``.tolist()``/``.item()``.
3. Constructors are ``torch.randn``, ``zeros``, ``ones``, ``arange``, ``tensor`` … (``CONSTRUCTORS``). One is
   *moved* if a ``.to(...)`` or ``.cuda()`` follows it in the same method chain, or it has ``device=``.
4. An unmoved constructor, or a name assigned one earlier in the same cell (and not reassigned), is flagged
   where it is *combined* with an expression that mentions a device name: as the other operand of an
   arithmetic or comparison, the tensor it indexes, another argument of the same call, or the callee itself
   (``model(x)``, ``x.copy_(…)``), unless that expression surely lives on the CPU (ends in ``.cpu()``).
It cannot follow values across cells or into functions, and it trusts ``.cpu()``. ``ALLOWED`` lists the few
flagged cells that are right, each with the reason.
"""
from __future__ import annotations

import ast
import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from tfm_lesson.course import chapters

from conftest import ROOT

NOTEBOOKS = chapters(ROOT / "notebooks")
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"

CONSTRUCTORS = {"randn", "rand", "randint", "randperm", "normal", "zeros", "ones", "empty", "full", "arange",
                "linspace", "logspace", "eye", "tensor", "as_tensor"}
MOVES = {"to", "cuda"}
CPU_ENDS = {"cpu", "tolist", "item", "numpy"}
NOT_TENSORS = {"item", "tolist", "element_size", "numel", "dim", "size", "nelement", "is_floating_point"}

# (chapter stem, a line of the flagged cell): why the flagged construct is right.
ALLOWED: dict[tuple[str, str], str] = {}  # none today: every flagged cell was fixed in its chapter


# nbval sanitising ----------------------------------------------------------------------------------------------------
def _patterns() -> list[tuple[str, str]]:
    from nbval.plugin import get_sanitize_patterns

    return get_sanitize_patterns(SANITIZE.read_text())


def _sanitize(text: str) -> str:
    for regex, replace in _patterns():
        text = re.sub(regex, replace, text)
    return text


def test_nbval_is_told_to_sanitize_device_strings():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert f"--nbval-sanitize-with={SANITIZE.relative_to(ROOT).as_posix()}" in addopts.split()
    assert _patterns(), "the sanitize file holds no regex/replace pair nbval can read"


@pytest.mark.parametrize("cuda, cpu", [
    ("tensor([[1., 0.],\n        [0., 1.]], device='cuda:0')", "tensor([[1., 0.],\n        [0., 1.]])"),
    ("tensor([True, False], device='cuda:1')", "tensor([True, False])"),
    ("tensor([0.5000], device='cuda:0', grad_fn=<AddBackward0>)", "tensor([0.5000], grad_fn=<AddBackward0>)"),
    ("tensor([1, 2], device='cuda:0', dtype=torch.int32)", "tensor([1, 2], dtype=torch.int32)"),
    ("tensor([1.], device='cuda:0', dtype=torch.float16)", "tensor([1.], dtype=torch.float16)"),
    ("tensor(3, device='cuda:0')", "tensor(3)"),
])
def test_sanitized_cuda_output_equals_the_cpu_output(cuda, cpu):
    assert _sanitize(cuda) == _sanitize(cpu) == cpu


def test_sanitizing_leaves_other_text_alone():
    text = "device = cpu; shapes (2, 5, 16); ✔ check_attention passed: 3 cases"
    assert _sanitize(text) == text


# reading the chapters ------------------------------------------------------------------------------------------------
def _parse(source: str) -> ast.Module | None:
    lines = [("pass  # " + ln) if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _chain(node: ast.AST, parents: dict) -> list[ast.AST]:
    """The method chain above ``node``: ``node.a().b()`` -> [node, Attribute a, Call, Attribute b, Call]."""
    out = [node]
    while True:
        parent = parents.get(out[-1])
        if isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Call) and parent.func is out[-1]):
            out.append(parent)
        else:
            return out


def _methods(chain: list[ast.AST]) -> list[str]:
    return [n.attr for n in chain if isinstance(n, ast.Attribute)]


def _is_constructor(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONSTRUCTORS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")


def _moved(node: ast.Call, parents: dict) -> bool:
    return any(k.arg == "device" for k in node.keywords) or bool(MOVES & set(_methods(_chain(node, parents))))


def _surely_cpu(node: ast.AST, parents: dict, cpu_name=lambda name: False) -> bool:
    if isinstance(node, ast.Constant) or (isinstance(node, (ast.Tuple, ast.List)) and
                                          all(isinstance(e, ast.Constant) for e in node.elts)):
        return True
    if isinstance(node, ast.UnaryOp):
        return _surely_cpu(node.operand, parents, cpu_name)
    inner = node
    while isinstance(inner, (ast.Call, ast.Attribute, ast.Subscript, ast.Name)):
        if isinstance(inner, ast.Name):
            return bool(cpu_name(inner))
        if isinstance(inner, ast.Call) and _is_constructor(inner) and not _moved(inner, parents):
            return True
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in CPU_ENDS:
            return True
        inner = inner.func if isinstance(inner, ast.Call) else inner.value
    return False


def _combined_with(top: ast.AST, parents: dict) -> list[ast.AST] | None:
    """The other operands ``top`` meets, when it is combined with them; None when it is not combined."""
    parent = parents.get(top)
    if isinstance(parent, ast.BinOp):
        return [parent.right if parent.left is top else parent.left]
    if isinstance(parent, ast.Compare):
        return [n for n in (parent.left, *parent.comparators) if n is not top]
    if isinstance(parent, ast.Subscript) and parent.slice is top:
        return [parent.value]
    if isinstance(parent, ast.keyword):
        parent = parents.get(parent)
    if isinstance(parent, ast.Call) and parent.func is not top:
        args = [*parent.args, *(k.value for k in parent.keywords)]
        others = [a for a in args if a is not top and not (isinstance(parents.get(top), ast.keyword)
                                                            and a is parents[top].value)]
        if isinstance(parent.func, ast.Attribute):
            others.append(parent.func.value)  # x.method(arg): x takes part too
        elif isinstance(parent.func, ast.Name):
            others.append(parent.func)  # model(arg): a module on the device takes part
        return others or None
    return None


def _targets(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def device_names(sources: list[str], names: set[str] | None = None) -> set[str]:
    """Names that may hold something on ``device``, read through ``sources`` (cells) in order: a name is
    assigned an expression that mentions ``device``, ``default_device()``, ``.to(...)``, ``.cuda()`` or another
    such name (and does not end in ``.cpu()``, ``.tolist()``, ``.item()``)."""
    names = set() if names is None else set(names)
    for source in sources:
        tree = _parse(source)
        if tree is None:
            continue
        steps = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For))),
                       key=lambda n: (n.lineno, n.col_offset))
        for step in steps:
            value = step.iter if isinstance(step, ast.For) else step.value
            if value is None:
                continue
            mentioned = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            methods = {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}
            end = value.func.attr if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) else None
            text = isinstance(value, (ast.JoinedStr, ast.Constant)) or (
                isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp))
                and isinstance(value.elt, (ast.JoinedStr, ast.Constant)))  # strings: never on a device
            moved = not text and end not in CPU_ENDS and (mentioned & (names | {"device"}) or methods & (MOVES | {"default_device"}))
            for target in (step.targets if isinstance(step, ast.Assign) else [step.target]):
                if moved:
                    names.update(_targets(target))
                elif not isinstance(step, ast.AugAssign):  # reassigned from something on the CPU
                    names.difference_update(_targets(target))
    return names


def _on_device(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names | {"device"} for n in ast.walk(node))


def cpu_constructor_findings(source: str, earlier: set[str] | None = None) -> list[str]:
    """Lines of ``source`` where a CPU-built tensor meets something that may be on ``device`` (module docstring).

    ``earlier``: names that earlier cells of the chapter may have put on the device (:func:`device_names`).
    """
    tree = _parse(source)
    if tree is None:
        return []
    on_device = device_names([source], earlier or set())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    assigned: dict[str, list[tuple[int, bool]]] = {}  # name -> [(line, assigned an unmoved constructor?)]
    found = []

    def check(top: ast.AST, what: str) -> None:
        others = _combined_with(top, parents) or []
        if any(_on_device(o, on_device) and not _surely_cpu(o, parents, cpu_built) for o in others):
            where = parents.get(top)
            where = parents[where] if isinstance(where, ast.keyword) else where
            found.append(f"line {top.lineno}: {what} built without device= meets {ast.unparse(where)[:80]}")

    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.Assign):
            inner = stmt.value
            while isinstance(inner, (ast.Call, ast.Attribute)) and not _is_constructor(inner):
                inner = inner.func if isinstance(inner, ast.Call) else inner.value
            number = (isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute)
                      and stmt.value.func.attr in NOT_TENSORS)  # torch.empty(()).element_size(): a Python int
            cpu = _is_constructor(inner) and not _moved(inner, parents) and not number
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append((stmt.lineno, cpu))
        elif isinstance(stmt, ast.Name) and isinstance(stmt.ctx, ast.Store) and not isinstance(parents.get(stmt), ast.Assign):
            assigned.setdefault(stmt.id, []).append((stmt.lineno, False))  # unpacked, a loop variable: unknown
        elif isinstance(stmt, ast.arg):
            assigned.setdefault(stmt.arg, []).append((stmt.lineno, False))

    def cpu_built(name: ast.Name) -> int | None:
        before = [(line, cpu) for line, cpu in assigned.get(name.id, []) if line < name.lineno]
        return max(before)[0] if before and max(before)[1] else None

    for node in ast.walk(tree):
        if _is_constructor(node) and not _moved(node, parents):
            check(_chain(node, parents)[-1], f"torch.{node.func.attr}(...)")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and cpu_built(node):
            chain = _chain(node, parents)
            if not MOVES & set(_methods(chain)) and not CPU_ENDS & set(_methods(chain)):
                check(chain[-1], f"{node.id} (a torch constructor's result, line {cpu_built(node)})")
    return sorted(set(found))


def numpy_without_cpu_findings(source: str) -> list[str]:
    """Lines where ``.numpy()`` is called on a chain without ``.cpu()`` (a GPU tensor raises there)."""
    tree = _parse(source)
    if tree is None:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "numpy":
            inner, ok = node.func.value, False
            while isinstance(inner, (ast.Call, ast.Attribute, ast.Subscript)):
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "cpu":
                    ok = True
                if isinstance(inner, ast.Call) and _is_constructor(inner) and not any(k.arg == "device" for k in inner.keywords):
                    ok = True  # built on the CPU right there
                inner = inner.func if isinstance(inner, ast.Call) else inner.value
            if not ok:
                found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _findings(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    out, earlier = [], set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        found = numpy_without_cpu_findings(cell.source) + cpu_constructor_findings(cell.source, earlier)
        earlier = device_names([cell.source], earlier)
        for finding in found:
            lines = cell.source.splitlines()
            if any((path.stem, ln.strip()) in ALLOWED for ln in lines):
                continue
            out.append(f"{path.name} cell {i}: {finding}")
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_keeps_devices_apart(path):
    findings = _findings(path)
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize("source, flagged", [
    ("x = torch.randn(2, 3, device=device)\ny = x + torch.ones(2, 3)", True),
    ("model = make_model().to(device)\nlog_probs = model(src, tgt)\n"
     "print(torch.allclose(log_probs.exp().sum(-1), torch.ones(tgt.shape)))", True),  # chapter 09's slip
    ("model = make_model().to(device)\nmodel = make_model()\nprint(model(torch.ones(3)))", False),
    ("mask = torch.ones(5, 5, dtype=torch.bool).tril()\nout = model(x.to(device), mask)", True),
    ("x = torch.randn(2, 3)\nout = model(x.to(device))", False),  # drawn on the CPU, then moved: the convention
    ("x = torch.randn(2, 3).to(device)\ny = x + 1", False),
    ("y = torch.ones(3, device=device) * torch.zeros(3, device=device)", False),
    ("print(torch.allclose(out.cpu(), torch.ones(3)))\ndevice", False),
    ("m = T.padding_mask(torch.tensor([[1, 2, 0]]), 0)\ndevice", False),
    ("y = x + torch.ones(3)", False),  # a cell without `device`: everything is on the CPU
    ("n = torch.empty((), dtype=dtype).element_size()\nx = torch.ones(3, device=device)\nb = 2 * x.numel() * n", False),
])
def test_the_constructor_heuristic(source, flagged):
    assert bool(cpu_constructor_findings(source)) == flagged, cpu_constructor_findings(source)


@pytest.mark.parametrize("source, flagged", [
    ("a = out.numpy()", True),
    ("a = out.detach().numpy()", True),
    ("a = out.detach().cpu().numpy()", False),
    ("a = torch.arange(3).numpy()", False),
    ("a = out.cpu()[0].numpy()", False),
])
def test_the_numpy_heuristic(source, flagged):
    assert bool(numpy_without_cpu_findings(source)) == flagged


# executing and seeding -----------------------------------------------------------------------------------------------
def test_make_notebooks_executes_on_the_cpu_unless_told():
    env = {k: v for k, v in os.environ.items() if k != "TFM_DEVICE"}
    dry = subprocess.run(["make", "-n", "notebooks"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert "TFM_DEVICE=cpu" in dry.stdout, dry.stdout
    told = subprocess.run(["make", "-n", "notebooks", "TFM_DEVICE=cuda"], cwd=ROOT, capture_output=True, text=True)
    assert "TFM_DEVICE=cuda" in told.stdout and "TFM_DEVICE=cpu" not in told.stdout, told.stdout


def test_tfm_device_picks_the_default_device(monkeypatch):
    from tfm_lesson import default_device

    monkeypatch.setenv("TFM_DEVICE", "cpu")
    assert default_device() == torch.device("cpu")


def test_seed_everything_deterministic_sets_what_pytorch_needs():
    code = ("import os, torch, tfm_lesson as T\n"
            "T.seed_everything(0)\n"
            "assert not torch.are_deterministic_algorithms_enabled()\n"
            "T.seed_everything(0, deterministic=True)\n"
            "assert torch.are_deterministic_algorithms_enabled()\n"
            "assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark\n"
            "assert os.environ['CUBLAS_WORKSPACE_CONFIG'] in (':4096:8', ':16:8')\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("bad", [-1, 1.5, "0", True])
def test_seed_must_be_a_non_negative_int(bad):
    from tfm_lesson import seed_everything

    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        seed_everything(bad)


def test_seeded_run_is_bit_identical_on_a_fixed_device(device):
    """Two seeded training steps on the same device (CPU here; CUDA too when present) give the same bits."""
    from tfm_lesson import Transformer, seed_everything

    def run() -> list[torch.Tensor]:
        seed_everything(0, deterministic=device.type == "cuda")
        model = Transformer(src_vocab_size=20, tgt_vocab_size=20, d_model=16, heads=2, d_ff=32, num_encoder_layers=1,
                            num_decoder_layers=1, max_len=16, dropout=0.1).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        src = torch.randint(1, 20, (4, 7)).to(device)  # drawn on the CPU: the same numbers on any device
        tgt = torch.randint(1, 20, (4, 6)).to(device)
        for _ in range(3):
            loss = model(src, tgt[:, :-1]).log_softmax(-1).gather(-1, tgt[:, 1:, None]).mean().neg()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().cpu().clone() for p in model.parameters()]

    try:
        first, second = run(), run()
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
