"""Rules beyond outputs: a "write it yourself" exercise fails when the answer hands the work to the reference.

An output check cannot tell ``class Mine(T.MultiHeadAttention): pass`` from a module written by hand. These helpers
read the learner's code instead: the classes it derives from (its MRO) and the source of its functions and methods
(``inspect.getsource`` and the ``ast`` of each), following the learner's own helper functions it names. They flag
the obvious hand-offs an exercise forbids in its text; code that hides a call (``getattr`` with a built string,
``exec``) is not followed.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
import types
from typing import Any, Iterable, Iterator

from ._mistake import Mistake
from ._rules_static import Source, raise_base

__all__ = ["learner_code", "code_names", "forbid_reference_base", "forbid_names", "forbid_keyword", "forbid_loops",
           "forbid_objects", "forbid_ready_made", "source"]

_static: tuple[Source, list[str]] | None = None  # while the grader replays a check: the extracted code, answer names


@contextlib.contextmanager
def source(code: str | None, names: list[str] | None = None) -> Iterator[None]:
    """While the grader replays a check (:mod:`._replay`): the rules read ``code``, the learner's code as the grader
    extracted it, where ``names`` are the check's answers in order (the answer behind handle 0 is ``names[0]``)."""
    global _static
    before = _static
    _static = (Source(code), list(names or [])) if code is not None else None
    try:
        yield
    finally:
        _static = before


# set by :mod:`._replay` (which imports this module, not the other way round): "record", "replay" or None, and
# the number of the handle an object is (None for an object that is not a handle)
grading_mode: Any = lambda: None
handle_number: Any = lambda obj: None


def _where_static(obj: Any) -> tuple[Source, str] | None | bool:
    """While grading: (the extracted code, the answer's name) for the replay, True while recording (the rules wait
    for the replay), None in a notebook (the rules read the live objects)."""
    mode, number = grading_mode(), handle_number(obj)
    if mode == "record":
        return True
    if mode == "replay" or number is not None:
        if _static is None or number is None or number >= len(_static[1]):
            return True  # nothing to read: no rule can be applied to it
        return _static[0], _static[1][number]
    return None


def _static_trees(obj: Any) -> list[tuple[str, ast.AST, Source]] | None:
    """The answer's functions read from the extracted code, or None when the live objects are to be read."""
    found = _where_static(obj)
    if found is None:
        return None
    if found is True:
        return []
    src, name = found
    return [(qualname, tree, src) for qualname, tree in src.functions(name)]


_LIBRARIES = ("tfm_lesson", "torch")


def _is_learners(obj: Any) -> bool:
    """Defined by the learner (a notebook cell or their own file), not by this package or PyTorch."""
    module = getattr(obj, "__module__", None) or ""
    return not any(module == lib or module.startswith(lib + ".") for lib in _LIBRARIES)


def _functions(obj: Any) -> Iterator[types.FunctionType]:
    """The learner's function itself, or the methods a learner's class defines (its own and its learner bases')."""
    if isinstance(obj, types.FunctionType):
        yield obj
    elif isinstance(obj, type):
        for klass in obj.__mro__:
            if klass is object or not _is_learners(klass):
                continue
            for value in vars(klass).values():
                value = getattr(value, "__func__", value)  # staticmethod, classmethod
                if isinstance(value, property):
                    value = value.fget
                if isinstance(value, types.FunctionType):
                    yield value


def learner_code(obj: Any, depth: int = 3) -> list[tuple[types.FunctionType, ast.AST]]:
    """``(function, syntax tree)`` for each function of the learner's answer ``obj`` and, ``depth`` levels deep, for
    the learner's own functions and classes it names. Functions whose source cannot be read are left out."""
    found: list[tuple[types.FunctionType, ast.AST]] = []
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(obj, 0)]
    while todo:
        item, level = todo.pop()
        for fn in _functions(item):
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            except (OSError, TypeError, SyntaxError, IndentationError):  # a lambda inside a larger statement, say
                tree = ast.Module(body=[], type_ignores=[])  # its compiled names are still read (code_names)
            found.append((fn, tree))
            if level < depth:
                loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                for name in loaded if tree.body else code_names(fn):
                    target = fn.__globals__.get(name)
                    if isinstance(target, (types.FunctionType, type)) and _is_learners(target):
                        todo.append((target, level + 1))
    return found


def code_names(fn: types.FunctionType) -> set[str]:
    """Every global or attribute name ``fn``'s compiled code (and the code of the functions and lambdas inside it)
    refers to, read from the bytecode: it works where the source cannot be read."""
    names: set[str] = set()
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        names.update(code.co_names)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def _where(fn: types.FunctionType | str, node: ast.AST) -> str:
    if isinstance(fn, str):  # read from the extracted code: the line of the cell
        return f"`{fn}` (line {getattr(node, 'lineno', 1)} of its cell)"
    line = fn.__code__.co_firstlineno + getattr(node, "lineno", 1) - 1
    return f"`{fn.__qualname__}` (line {line} of its cell)"


def forbid_reference_base(cls: type, what: str, instead: str) -> None:
    """``cls`` may not derive from a class of this package (the reference it is asked to rewrite)."""
    found = _where_static(cls)
    if found is not None:
        if found is not True:
            raise_base(found[0], found[1], what, instead)
        return
    for base in cls.__mro__[1:]:
        module = base.__module__ or ""
        if module == "tfm_lesson" or module.startswith("tfm_lesson."):
            raise Mistake(f"WRITE IT YOURSELF: your {what} derives from {module}.{base.__qualname__}, the package's "
                          f"reference, so the reference does the work. The exercise asks you to write it: {instead}")


def forbid_names(obj: Any, names: Iterable[str], what: str, why: str) -> None:
    """The learner's code may not name any of ``names`` (as ``F.name``, ``T.name`` or a bare ``name`` that is not the
    learner's own), e.g. the reference function an exercise asks to rewrite."""
    names = set(names)
    trees = _static_trees(obj)
    if trees is not None:
        for qualname, tree, src in trees:
            for node in ast.walk(tree):
                used = node.attr if isinstance(node, ast.Attribute) and node.attr in names else (
                    node.id if isinstance(node, ast.Name) and node.id in names and not src.is_learners(node.id)
                    else _imported(node, names))
                if used:
                    raise Mistake(f"WRITE IT YOURSELF: your {what} uses `{used}` in `{qualname}` (line "
                                  f"{getattr(node, 'lineno', 1)} of its cell). {why}")
        return
    for fn, tree in learner_code(obj):
        if not tree.body:  # no source to point at: the compiled names say it
            used = sorted(n for n in code_names(fn) & names if not _is_learners_name(fn, n))
            if used:
                raise Mistake(f"WRITE IT YOURSELF: your {what} uses `{used[0]}` in `{fn.__qualname__}`. {why}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in names:
                used = node.attr
            elif isinstance(node, ast.Name) and node.id in names and not _is_learners_name(fn, node.id):
                used = node.id
            elif _imported(node, names):
                used = _imported(node, names)
            else:
                continue
            raise Mistake(f"WRITE IT YOURSELF: your {what} uses `{used}` in {_where(fn, node)}. {why}")


def _imported(node: ast.AST, names: set[str]) -> str | None:
    """The forbidden name an import brings in (``from tfm_lesson.flash import online_softmax as helper``)."""
    if isinstance(node, ast.alias) and node.name.split(".")[-1] in names:
        return node.name.split(".")[-1]
    return None


def _is_learners_name(fn: types.FunctionType, name: str) -> bool:
    target = fn.__globals__.get(name)
    return target is not None and _is_learners(target)


def forbid_keyword(obj: Any, keyword: str, what: str, why: str, functions: Iterable[str] | None = None) -> None:
    """No call in the learner's code may pass ``keyword=`` (only calls to ``functions``, by their last name, when
    given), e.g. ``F.cross_entropy(..., label_smoothing=...)``."""
    only = set(functions) if functions is not None else None
    trees = _static_trees(obj)
    pairs = [(q, t) for q, t, _ in trees] if trees is not None else learner_code(obj)
    for fn, tree in pairs:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not any(k.arg == keyword for k in node.keywords):
                continue
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if only is None or callee in only:
                raise Mistake(f"WRITE IT YOURSELF: your {what} calls `{callee}(..., {keyword}=...)` in "
                              f"{_where(fn, node)}. {why}")


_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def forbid_loops(obj: Any, what: str, why: str) -> None:
    """The learner's code may hold no Python loop (``for``, ``while``, a comprehension or generator expression)."""
    trees = _static_trees(obj)
    pairs = [(q, t) for q, t, _ in trees] if trees is not None else learner_code(obj)
    for fn, tree in pairs:
        for node in ast.walk(tree):
            if isinstance(node, _LOOPS):
                kind = {ast.For: "a `for` loop", ast.AsyncFor: "a `for` loop", ast.While: "a `while` loop"}.get(
                    type(node), "a comprehension (a loop in one line)")
                raise Mistake(f"NO LOOP: your {what} has {kind} in {_where(fn, node)}. {why}")


def _resolve(fn: types.FunctionType, name: str) -> Any:
    """What ``name`` means inside ``fn``: a variable of its closure, else a global of its module."""
    if name in fn.__code__.co_freevars and fn.__closure__:
        cell = fn.__closure__[fn.__code__.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:  # an empty cell
            return None
    return fn.__globals__.get(name)


def forbid_objects(obj: Any, objects: dict[str, Any], what: str, why: str, owner: str = "the package's") -> None:
    """The learner's code may not use any of ``objects`` (label -> object) under any name: imported as another name,
    held in a closure or a default argument, or wrapped in ``functools.partial``. The answer itself may not be one.
    ``owner`` names whose they are in the message ("the package's", "PyTorch's")."""
    targets = {id(o): label for label, o in objects.items()}

    def label_of(value: Any) -> str | None:
        for candidate in (value, getattr(value, "func", None), getattr(value, "__wrapped__", None)):
            if candidate is not None and id(candidate) in targets:
                return targets[id(candidate)]
        return None

    found = _where_static(obj)
    if found is not None:
        if found is not True:
            _objects_static(found[0], found[1], label_of, what, why, owner)
        return
    used = label_of(obj)
    if used:
        raise Mistake(f"WRITE IT YOURSELF: your {what} is {owner} `{used}`. {why}")
    for fn, tree in learner_code(obj):
        for value in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
            used = label_of(value)
            if used:
                raise Mistake(f"WRITE IT YOURSELF: your {what} takes {owner} `{used}` as a default argument "
                              f"in `{fn.__qualname__}`. {why}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used = label_of(_resolve(fn, node.id))
                if used:
                    raise Mistake(f"WRITE IT YOURSELF: your {what} uses {owner} `{used}` (as `{node.id}`) in "
                                  f"{_where(fn, node)}. {why}")
        if tree.body:  # what the function imports for itself (`from tfm_lesson.flash import flash_attention as fa`)
            local = Source(ast.unparse(tree))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                    used = label_of(local.resolve(node))
                    if used:
                        raise Mistake(f"WRITE IT YOURSELF: your {what} uses {owner} `{used}` (as "
                                      f"`{ast.unparse(node)}`) in {_where(fn, node)}. {why}")
        names = (*code_names(fn), *fn.__code__.co_freevars)
        modules = [m for m in (_resolve(fn, n) for n in names) if isinstance(m, types.ModuleType)]
        for name in names:  # a name, or an attribute of a module the code names (`flash.fa`, `T.flash_attention`)
            used = label_of(_resolve(fn, name)) or next(
                (label for label in (label_of(getattr(m, name, None)) for m in modules) if label), None)
            if used:
                raise Mistake(f"WRITE IT YOURSELF: your {what} uses {owner} `{used}` (as `{name}`) in "
                              f"`{fn.__qualname__}`. {why}")


def _objects_static(src: Source, name: str, label_of: Any, what: str, why: str, owner: str) -> None:
    """:func:`forbid_objects` on the extracted code: the answer's binding, its functions' defaults and every name or
    attribute they use, resolved through the imports and assignments of the code."""
    used = label_of(src.resolve(ast.Name(id=name, ctx=ast.Load())))
    if used:
        raise Mistake(f"WRITE IT YOURSELF: your {what} is {owner} `{used}`. {why}")
    for qualname, tree in src.functions(name):
        for node in ast.walk(tree):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                used = label_of(src.resolve(node))
                if used:
                    shown = ast.unparse(node)
                    raise Mistake(f"WRITE IT YOURSELF: your {what} uses {owner} `{used}` (as `{shown}`) in "
                                  f"{_where(qualname, node)}. {why}")


def forbid_ready_made(obj: Any, ready: Iterable[Any] | dict[str, Any], what: str, why: str) -> None:
    """The answer may not *be* a ready-made one: one of ``ready`` (a function or a class), an instance of one of the
    classes, a class derived from one, or ``functools.partial`` of one (``ready`` may map labels to them). Read from
    the live object in a notebook, from the extracted code while grading."""
    labels = dict(ready) if isinstance(ready, dict) else {
        f"{getattr(r, '__module__', '')}.{getattr(r, '__qualname__', r)}": r for r in ready}
    found = _where_static(obj)
    if found is True:
        return
    if found is not None:
        src, name = found
        node = src.bindings.get(name)
        target = src.resolve(ast.Name(id=name, ctx=ast.Load()))
        if target is None and isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = src.resolve(node.value.func)  # `answer = nn.GELU()`: an instance of that class
            target = ("instance", target) if isinstance(target, type) else target
        derived = list(src.bases(name)) if isinstance(node, ast.ClassDef) else []
    else:
        target, derived = getattr(obj, "func", obj), []
    for label, r in labels.items():
        hit = (target is r or (isinstance(target, tuple) and target[1] is not None and isinstance(r, type)
                               and issubclass(target[1], r))
               or (isinstance(r, type) and (isinstance(target, type) and issubclass(target, r)
                                            or not isinstance(target, (type, tuple)) and isinstance(target, r)))
               or r in derived)
        if hit:
            raise Mistake(f"WRITE IT YOURSELF: your {what} is (or derives from) {label}, which does the work. {why}")
