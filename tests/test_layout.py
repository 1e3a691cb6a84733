"""The package's layering: no import circle between its modules (lazy imports inside functions included)."""
from __future__ import annotations

import ast

from conftest import ROOT

PACKAGE = ROOT / "tfm_lesson"


def _module_name(path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                base = base[: len(base) - node.level + 1] if node.level else []
                stem = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:  # "from . import quizzes" names a module; "from .x import y" a name
                    full = f"{stem}.{alias.name}"
                    targets.add(full if full in modules else stem)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle():
    circle = _circle(_imports())
    assert circle is None, "an import circle: " + " -> ".join(circle)


def test_the_circle_finder_finds_one():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_lazy_imports():
    graph = _imports()
    assert "tfm_lesson.train.loop" in graph["tfm_lesson.train.reference"]  # imported inside reference_run
    assert "tfm_lesson.train.reference" not in graph["tfm_lesson.train.loop"]  # the circle of old: gone


def _into_own_package(graph: dict[str, set[str]], packages: set[str]) -> list[str]:
    """Imports from a module inside a folder up to that folder's ``__init__`` (a ``__main__`` excepted)."""
    return sorted(f"{name} -> {package}" for name, targets in graph.items() for package in targets & packages
                  if name.startswith(package + ".") and not name.endswith(".__main__"))


def test_no_module_imports_its_own_folders_init():
    """A module in a folder (``look/viz/axes.py``) imports its siblings, never the folder's ``__init__``, which
    imports it: the arrows point down, from the ``__init__`` that re-exports to the modules that define."""
    graph = _imports()
    packages = {name for name in graph if (ROOT / name.replace(".", "/") / "__init__.py").is_file()}
    assert {"tfm_lesson.look.viz", "tfm_lesson.look.widgets"} <= packages
    assert _into_own_package(graph, packages) == []
    assert _into_own_package({"a.b": {"a"}, "a.__main__": {"a"}, "a": {"a.b"}}, {"a"}) == ["a.b -> a"]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_the_package_holds_no_checkout_tooling():
    """Building the book and rewriting README / the book's config need the course's checkout: tools/book.py does
    that, outside the package (a docstring or comment may still point there)."""
    checkout_only = ("jupyter-book", "README.md", "_config.yml")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {word}"
                          for word in checkout_only if word in node.value]
    assert not found, found


# ---- the layout by job (CONTRIBUTING, "How the package is laid out") -------------------------------------------------
# Each folder does one job; a job may import from the jobs before it in this list, never from one after it. The root's
# modules are the model a learner builds (with data/ and modern/ beside them); ``__init__`` is the front door and may
# reach any job.
JOBS = ("model", "look", "train", "checks", "course")
MODULE_LINES, FUNCTION_LINES = 450, 80


def _job(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in JOBS else "model"


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if a != "tfm_lesson" and JOBS.index(_job(b)) > JOBS.index(_job(a)))


def test_every_import_points_down_the_jobs():
    assert _upward(_imports()) == []


def test_the_job_rule_sees_an_upward_import():
    assert _job("tfm_lesson.look.viz") == "look" and _job("tfm_lesson.data.corpus") == "model"
    assert _upward({"tfm_lesson.train.loop": {"tfm_lesson.course.quiz"}, "tfm_lesson.course.quiz": {"tfm_lesson.masks"}}) \
        == ["tfm_lesson.train.loop -> tfm_lesson.course.quiz"]


def test_the_root_lists_the_model_and_one_folder_per_job():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.endswith(".egg-info"))
    folders = {p for p in entries if (PACKAGE / p).is_dir()}
    assert folders == {"checks", "course", "data", "look", "modern", "train"}, folders
    public = [p for p in entries if not p.startswith("_")]
    assert len(public) <= 21, public


def _function_lengths(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def test_no_module_over_450_lines_and_no_function_over_80():
    long_modules, long_functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        if len(text.splitlines()) > MODULE_LINES:
            long_modules.append(f"{where}: {len(text.splitlines())} lines")
        long_functions += [f"{where}:{line} {name}: {n} lines" for name, line, n in _function_lengths(ast.parse(text))
                           if n > FUNCTION_LINES]
    assert not long_modules and not long_functions, long_modules + long_functions


def test_the_length_rule_counts_a_function_from_def_to_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    assert [n for _, _, n in _function_lengths(ast.parse(f"def f():\n{body}\n"))] == [82]


def test_every_old_module_path_names_a_module_that_exists():
    from tfm_lesson import _moved

    for old, new in _moved.MOVED.items():
        target = PACKAGE.joinpath(*new.split("."))
        assert target.with_suffix(".py").is_file() or (target / "__init__.py").is_file(), f"{old} -> {new}: no such module"
        assert not (PACKAGE / f"{old}.py").exists() and not (PACKAGE / old).is_dir(), f"{old} is both moved and here"


def test_old_module_paths_import_the_same_module():
    import importlib

    for old, new in [("viz", "look.viz"), ("training", "train.loop"), ("quizzes.ch03", "course.quizzes.ch03"),
                     ("generate", "train.generate")]:
        before, after = importlib.import_module(f"tfm_lesson.{old}"), importlib.import_module(f"tfm_lesson.{new}")
        assert before is after and after.__spec__.name == f"tfm_lesson.{new}"
    from tfm_lesson import viz, widgets  # what chapters type

    assert viz.__name__.startswith("tfm_lesson.look.viz") and widgets.__name__.startswith("tfm_lesson.look.widgets")
