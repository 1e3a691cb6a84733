"""A source rule for the online softmax: no reduction may span a whole row, read from the learner's code.

In a notebook the online softmax's checker watches the learner's function run (a ``TorchDispatchMode`` that notes
the widest max or sum). While grading, that watch runs in the submission's kernel, whose code could answer for it,
so the grader also reads the code it extracted (:mod:`._rules_static`), and so does a notebook, to give the same
verdict. In the answer's function the first parameter is the rows, ``x``. A name holds *a whole row* when it is
``x``, or is computed from a whole row by operations that keep every column: arithmetic, comparisons, ``exp``,
``log``, ``float()``, ``clone()``, ``torch.where``, ``torch.maximum``, ``torch.cat``, ``[...]``/``[:]``, a loop
over it (each item is still a whole row), and what the learner's own helper functions return from one. Slicing,
indexing, ``split``, ``chunk``, ``unbind``, ``narrow``, ``unfold``, ``view``, ``reshape``, ``transpose`` and any
other call cut it into pieces (or may): what comes out is not followed. A reduction (``max``, ``amax``, ``sum``,
``mean``, ``logsumexp``, ``norm``, ``cumsum``, ..., as a method or as ``torch.sum(...)``, and ``@``) applied to a
whole row, along it (over every axis, over ``-1``, or over an axis computed, such as ``x.dim() - 1``; not over another
axis written as a number), is the finding. The analysis follows assignments in order, joins the two arms of an ``if``, goes round
a loop twice, and follows calls to the learner's own functions (three levels deep) with the arguments that hold
a whole row.

What it cannot see (the watch in a notebook may): a row cut into pieces and glued back together
(``torch.cat(x.split(b, -1), -1).sum(-1)``), a reshape that keeps the row (``x.view(x.shape).sum(-1)``), a
reduction reached through ``getattr``, ``eval``, a method of a class, a function held in a container or passed in,
or an ``einsum``; and a ``max`` whose single argument is a name it cannot tell from a tensor is taken as the
elementwise ``max(other)``. Like the other source rules it refuses what it sees for sure, and no more.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Any

from ._rules import _is_learners, _resolve, _where, _where_static
from ._rules_static import Source, where

__all__ = ["whole_row_reduction"]

REDUCTIONS = {"max", "amax", "min", "amin", "aminmax", "sum", "nansum", "mean", "nanmean", "prod", "logsumexp",
              "norm", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "std", "var", "median", "softmax",
              "log_softmax", "vector_norm"}
MATMULS = {"matmul", "mm", "bmm", "mv", "dot", "inner"}
KEEP = {"exp", "exp_", "exp2", "expm1", "log", "log_", "log2", "log10", "log1p", "abs", "abs_", "neg", "neg_",
        "negative", "sub", "sub_", "subtract", "add", "add_", "mul", "mul_", "multiply", "div", "div_", "divide",
        "true_divide", "pow", "pow_", "sqrt", "rsqrt", "square", "clamp", "clamp_", "clip", "clamp_min", "clamp_max",
        "masked_fill", "masked_fill_", "nan_to_num", "nan_to_num_", "where", "maximum", "minimum", "fmax", "fmin",
        "sigmoid", "tanh", "relu", "sign", "reciprocal", "float", "double", "half", "bfloat16", "to", "type",
        "type_as", "clone", "detach", "detach_", "contiguous", "cpu", "cuda", "requires_grad_", "expand_as",
        "isinf", "isnan", "isfinite", "isneginf", "isposinf", "eq", "ne", "gt", "ge", "lt", "le", "logical_not",
        "logical_and", "logical_or", "cat", "concat", "concatenate", "copy_", "as_tensor", "tensor",
        "rsub", "broadcast_to"}
_CARRY = {"zip", "enumerate", "list", "tuple", "reversed", "iter", "next", "sorted"}  # builtins that hand items on
_DEPTH = 3


class _Found(Exception):
    def __init__(self, node: ast.AST, place: str) -> None:
        super().__init__(place)
        self.node, self.place = node, place


# where a name of the learner's code leads: the extracted code (grading) or the live function (a notebook) ---------
class _Static:
    def __init__(self, src: Source, qualname: str) -> None:
        self.src, self.qualname = src, qualname

    def helper(self, name: str, depth: int = 0) -> tuple[ast.AST, Any] | None:
        node = self.src.bindings.get(name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node, _Static(self.src, name)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            return node.value, _Static(self.src, name)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and depth < 8:
            return self.helper(node.value.id, depth + 1)  # `answer = my_function`
        return None

    def resolve(self, expr: ast.AST) -> Any:
        return self.src.resolve(expr)

    def where(self, node: ast.AST) -> str:
        return where(self.qualname, node)


class _Live:
    def __init__(self, fn: types.FunctionType) -> None:
        self.fn = fn

    def helper(self, name: str) -> tuple[ast.AST, Any] | None:
        target = _resolve(self.fn, name)
        if isinstance(target, types.FunctionType) and _is_learners(target):
            node = _tree_of(target)
            return (node, _Live(target)) if node is not None else None
        return None

    def resolve(self, expr: ast.AST) -> Any:
        if isinstance(expr, ast.Name):
            return _resolve(self.fn, expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return getattr(base, expr.attr, None) if isinstance(base, types.ModuleType) else None
        return None

    def where(self, node: ast.AST) -> str:
        return _where(self.fn, node)


def _tree_of(fn: types.FunctionType) -> ast.AST | None:
    """The function's own node (a ``def`` or a ``lambda``) read from its source, or None."""
    try:
        text = textwrap.dedent(inspect.getsource(fn)).strip()
    except (OSError, TypeError):
        return None
    wanted = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    for candidate in (text, f"({text.rstrip(',')})", text.split("=", 1)[-1].strip()):
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if fn.__name__ == "<lambda>" and isinstance(node, ast.Lambda) and \
                    tuple(a.arg for a in (*node.args.posonlyargs, *node.args.args)) == wanted:
                return node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
                return node
    return None


# the flow of whole rows through one function ------------------------------------------------------------------------
class _Frame:
    def __init__(self, flow: _Flow, scope: Any, env: dict[str, bool], depth: int) -> None:
        self.flow, self.scope, self.env, self.depth = flow, scope, env, depth
        self.local: dict[str, ast.AST] = {}  # functions and lambdas defined inside
        self.ints: set[str] = set()  # names bound to an int (an axis)
        self.returns = False

    # statements --------------------------------------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = self.expr(node.value)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                self.bind(target, value, node.value)
        elif isinstance(node, ast.AugAssign):
            value = self.expr(node.value) or self.expr(node.target)
            if isinstance(node.op, ast.MatMult) and self.expr(node.target):
                raise _Found(node, self.scope.where(node))
            self.bind(node.target, value, None)
        elif isinstance(node, ast.Return) and node.value is not None:
            self.returns |= self.expr(node.value)
        elif isinstance(node, ast.If):
            self.expr(node.test)
            self.branches([node.body, node.orelse])
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            items = self.expr(node.iter) if not isinstance(node, ast.While) else self.expr(node.test)
            for _ in range(2):  # a second round sees what the first bound
                if not isinstance(node, ast.While):
                    self.bind(node.target, items, None)
                self.branches([node.body, []])
            self.block(node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                value = self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, value, None)
            self.block(node.body)
        elif isinstance(node, ast.Try):
            self.block(node.body)
            for handler in node.handlers:
                self.block(handler.body)
            self.block(node.orelse)
            self.block(node.finalbody)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.local[node.name] = node
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)

    def branches(self, arms: list[list[ast.stmt]]) -> None:
        """Each arm from the same start; afterwards a name holds a whole row if it does after either."""
        start, joined = dict(self.env), dict(self.env)
        for arm in arms:
            self.env = dict(start)
            self.block(arm)
            for name, value in self.env.items():
                joined[name] = joined.get(name, False) or value
        self.env = joined

    def bind(self, target: ast.AST, value: bool, source: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            if isinstance(source, ast.Lambda):
                self.local[target.id] = source
            if source is not None and _is_int(source, self.ints):
                self.ints.add(target.id)
            else:
                self.ints.discard(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts = source.elts if isinstance(source, (ast.Tuple, ast.List)) and \
                len(source.elts) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                element = element.value if isinstance(element, ast.Starred) else element
                self.bind(element, self.expr(parts[i]) if parts else value, parts[i] if parts else None)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.expr(target.slice)
            if value and _keeps_row(target.slice):  # `out[...] = x`: all of `out` is the row now
                self.env[target.value.id] = True
        elif isinstance(target, ast.Attribute):
            self.expr(target.value)

    # expressions: does the value hold a whole row? -----------------------------------------------------------------
    def expr(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return self.env.get(node.id, False)
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            if isinstance(node.op, ast.MatMult) and left:  # x @ w sums over x's last axis, the row
                raise _Found(node, self.scope.where(node))
            return left or right
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Subscript):
            value = self.expr(node.value)
            self.expr(node.slice)
            return value and _keeps_row(node.slice)
        if isinstance(node, ast.Attribute):
            return self.expr(node.value) and node.attr in ("data", "real")
        if isinstance(node, ast.IfExp):
            self.expr(node.test)
            return self.expr(node.body) | self.expr(node.orelse)
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value)
            self.bind(node.target, value, node.value)
            return value
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node)
        if isinstance(node, ast.Lambda):
            return False  # followed where it is called
        found = False  # unary and boolean operators, comparisons, tuples and lists, starred: any part's row
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                found |= self.expr(child)
        return found and isinstance(node, (ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple, ast.List, ast.Set,
                                           ast.Starred))

    def comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> bool:
        saved = dict(self.env)
        for generator in node.generators:
            self.bind(generator.target, self.expr(generator.iter), None)
            for test in generator.ifs:
                self.expr(test)
        if isinstance(node, ast.DictComp):
            value = self.expr(node.key) | self.expr(node.value)
        else:
            value = self.expr(node.elt)
        self.env = saved
        return value

    def call(self, node: ast.Call) -> bool:
        args = [self.expr(a) for a in node.args]
        keywords = {k.arg: self.expr(k.value) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Attribute) and self.module(func.value):  # torch.sum(x, -1), F.relu(x)
            first = args[0] if args else keywords.get("input", False)
            if first and (func.attr in MATMULS or func.attr in REDUCTIONS and _reduces(func.attr, node.args[1:],
                                                                                    node.keywords, self)):
                raise _Found(node, self.scope.where(node))
            return (func.attr in KEEP or func.attr in ("max", "min")) and (any(args) or any(keywords.values()))
        if isinstance(func, ast.Attribute):
            receiver = self.expr(func.value)
            if receiver and (func.attr in MATMULS or func.attr in REDUCTIONS and _reduces(func.attr, node.args,
                                                                                        node.keywords, self)):
                raise _Found(node, self.scope.where(node))
            if func.attr.endswith("_") and isinstance(func.value, ast.Name) and (any(args) or
                                                                                 any(keywords.values())):
                self.env[func.value.id] = True  # `buffer.copy_(x)`: the buffer holds the row now
            return (receiver or any(args) or any(keywords.values())) and (func.attr in KEEP or
                                                                          func.attr in ("max", "min"))
        if isinstance(func, ast.Name):
            if func.id in self.local:
                return self.flow.enter(self.local[func.id], self.scope, node, args, keywords, self)
            helper = self.scope.helper(func.id) if func.id not in self.env else None
            if helper is not None:
                return self.flow.enter(helper[0], helper[1], node, args, keywords, None, self.depth + 1)
            torch_name = _torchs(self.scope.resolve(func))
            if torch_name and args and args[0] and (torch_name in MATMULS or torch_name in REDUCTIONS and
                                                    _reduces(torch_name, node.args[1:], node.keywords, self)):
                raise _Found(node, self.scope.where(node))  # `from torch import logsumexp as lse`
            if torch_name in KEEP or torch_name in ("max", "min") or func.id in _CARRY:
                return any(args) or any(keywords.values())
        else:
            self.expr(func)
        return False

    def module(self, expr: ast.AST) -> bool:
        """Whether ``expr`` names a module (``torch``, ``F``, ``torch.linalg``), not one of the function's values."""
        root = expr
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id in self.env:
            return False
        return isinstance(self.scope.resolve(expr), types.ModuleType)


def _torchs(obj: Any) -> str | None:
    """The name of a torch function ``obj`` is, else None."""
    module = getattr(obj, "__module__", None) or ""
    return getattr(obj, "__name__", None) if callable(obj) and module.split(".")[0] == "torch" else None


def _is_int(node: ast.AST, ints: set[str]) -> bool:
    """Whether ``node`` is plainly an axis: an int, ``-1``, ``x.dim() - 1``, ``x.ndim - 1``, a tuple of them."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in ints
    if isinstance(node, ast.UnaryOp):
        return _is_int(node.operand, ints)
    if isinstance(node, ast.BinOp):
        return _is_int(node.left, ints) and _is_int(node.right, ints)
    if isinstance(node, (ast.Tuple, ast.List)):
        return bool(node.elts) and all(_is_int(e, ints) for e in node.elts)
    if isinstance(node, ast.Attribute):
        return node.attr == "ndim"
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr in ("dim", "ndimension") or \
            isinstance(node.func, ast.Name) and node.func.id == "len"
    return False


def _reduces(name: str, args: list[ast.expr], keywords: list[ast.keyword], frame: _Frame) -> bool:
    """Whether ``name(row, *args, **keywords)`` reduces along the row: over every axis, the last (``-1``) or one it
    cannot tell; not over another axis written as a number (``sum(0)``: the watch lets that pass too). ``max`` and
    ``min`` of two tensors are elementwise."""
    dim = next((k.value for k in keywords if k.arg in ("dim", "axis")), None)
    at = 1 if name in ("norm", "vector_norm") else 0  # norm(p, dim)
    if dim is None and len(args) > at:
        dim = args[at]
        if name in ("max", "min") and not _is_int(dim, frame.ints):
            return False  # max(other): elementwise
    if dim is None or not _is_int(dim, set()):
        return True  # every axis, or an axis computed (x.dim() - 1)
    dims = dim.elts if isinstance(dim, (ast.Tuple, ast.List)) else [dim]
    return any(not isinstance(d, (ast.Constant, ast.UnaryOp)) or _literal(d) == -1 for d in dims)


def _literal(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value if type(node.operand.value) is int else None
    return None


def _keeps_row(index: ast.AST) -> bool:
    """Whether indexing with ``index`` keeps every axis as it was: ``[...]``, ``[:]``, ``[:, :]``."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return all(isinstance(p, ast.Constant) and p.value is Ellipsis or
               isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None for p in parts)


class _Flow:
    """The learner's functions entered so far, with which of their parameters held a whole row."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, frozenset], bool] = {}

    def enter(self, node: ast.AST, scope: Any, call: ast.Call | None, args: list[bool], keywords: dict,
              outer: _Frame | None, depth: int | None = None) -> bool:
        """Run ``node`` (a def or a lambda) with the arguments that hold a whole row; whether it returns one."""
        depth = outer.depth if depth is None and outer is not None else depth or 0
        params = node.args
        names = [a.arg for a in (*params.posonlyargs, *params.args)]
        rows = {n for n, row in zip(names, args) if row} | {n for n, row in keywords.items() if row and n in names}
        if call is not None and (any(isinstance(a, ast.Starred) for a in call.args) and any(args) or
                                 None in keywords and keywords[None]):
            rows |= set(names)  # `f(*parts)`, `f(**named)` holding a row: every parameter may
        key = (id(node), frozenset(rows))
        if key in self.memo or depth > _DEPTH:
            return self.memo.get(key, False)
        self.memo[key] = False  # a recursive call meets this
        env = dict(outer.env) if outer is not None else {}
        env.update({n: n in rows for n in names + [a.arg for a in params.kwonlyargs]})
        frame = _Frame(self, scope, env, depth)
        if outer is not None:
            frame.local, frame.ints = dict(outer.local), set(outer.ints)
        if isinstance(node, ast.Lambda):
            frame.returns = frame.expr(node.body)
        else:
            frame.block(node.body)
        self.memo[key] = frame.returns
        return frame.returns


def whole_row_reduction(fn: Any) -> tuple[str, str] | None:
    """``(the reduction's code, where it is)`` of the first reduction the learner's function ``fn(x, ...)`` applies
    to a whole row of ``x``, else None. Read from the extracted code while grading, from ``fn``'s source in a
    notebook; None while recording (the replay reads it) and for an answer that is no function of the learner's."""
    found = _where_static(fn)
    if found is True:
        return None
    if found is not None:
        start = _Static(found[0], found[1]).helper(found[1])
    elif isinstance(fn, types.FunctionType) and _is_learners(fn):
        node = _tree_of(fn)
        start = (node, _Live(fn)) if node is not None else None
    else:
        start = None
    if start is None:
        return None
    params = start[0].args
    names = [a.arg for a in (*params.posonlyargs, *params.args)]
    try:
        _Flow().enter(start[0], start[1], None, [True] + [False] * (len(names) - 1), {}, None)
    except _Found as hit:
        return ast.unparse(hit.node), hit.place
    return None
