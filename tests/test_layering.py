"""The layering the code promises (README, "Layout"): dependencies point one way.

Read with ``ast`` from the source, module-level and function-level imports alike: no import cycle
between files, nothing under ``envs/`` (installed as ``ppo_dict.envs``) imports the trainer, no
module over 400 lines and no function over 60.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: package folder -> the name it is installed under
PACKAGES = {"ppo_dict": "ppo_dict", "envs": "ppo_dict.envs"}


def modules() -> dict[str, Path]:
    """``{installed module name: file}`` for every module of ``ppo_dict/`` and ``envs/``."""
    found = {}
    for folder, installed in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([installed, *parts])] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The known modules that ``name`` imports (each import resolved to the longest known prefix)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    resolved = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges = {name: imports(name, path, set(mods)) for name, path in mods.items()}
    # a package's __init__ naming its own children is the package's index, not a cycle of ideas
    return {name: {d for d in deps if not d.startswith(name + ".")} for name, deps in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_from_real_imports() -> None:
    edges = graph()
    assert "ppo_dict.envs" in edges["ppo_dict.vec"] and "ppo_dict.vec.runner" in edges["ppo_dict.vec.worker"]
    assert "ppo_dict.envs.spec" in edges["ppo_dict.envs.make"]  # relative imports resolve
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_files() -> None:
    assert cycles(graph()) == []


def test_envs_never_imports_the_trainer() -> None:
    up = sorted(f"{m} -> {d}" for m, deps in graph().items() if m.startswith("ppo_dict.envs")
                for d in deps if not d.startswith("ppo_dict.envs"))
    assert up == []


def test_config_is_a_leaf_of_the_trainer() -> None:
    assert graph()["ppo_dict.config"] <= {"ppo_dict.errors", "ppo_dict.parse"}


def test_no_module_over_400_lines_no_function_over_60() -> None:
    long_modules, long_functions = [], []
    for name, path in modules().items():
        text = path.read_text()
        if text.count("\n") > 400:
            long_modules.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long_functions.append(f"{name}.{node.name}")
    assert (long_modules, long_functions) == ([], [])
