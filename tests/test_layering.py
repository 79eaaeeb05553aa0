"""The layering the code promises (docs/architecture.md, "Layers"): dependencies point one way.

Read with ``ast`` from the source, module-level and function-level imports alike: no import cycle
between files, the packages import only their own layer and the layers below it (``LAYERS``:
nothing under ``envs/``, installed as ``ppo_dict.envs``, imports the trainer), the modules at the top
of ``ppo_dict/`` are the command lines, no module over 400 lines and no function over 60.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: package folder -> the name it is installed under
PACKAGES = {"ppo_dict": "ppo_dict", "envs": "ppo_dict.envs"}
#: the layers, bottom first: a module imports modules of its own layer and of the layers below it only.
#: ``ppo_dict.api`` is sb3's Python API (the other face); ``ppo_dict`` itself holds the command lines
#: (``python -m ppo_dict.main_ppo``, ...), the top.
#: Inside ``ppo_dict.algo``, its concepts are layers too: the networks, the rollout that runs them, the update that
#: trains them, the ranks that share both; the trainer (``algo/ppo.py``) and the model on top.
LAYERS = (
    "ppo_dict.envs",
    "ppo_dict.core",
    "ppo_dict.data",
    "ppo_dict.vec",
    "ppo_dict.algo.networks",
    "ppo_dict.algo.rollout",
    "ppo_dict.algo.training",
    "ppo_dict.algo.ranks",
    "ppo_dict.algo",
    "ppo_dict.interop",
    "ppo_dict.run",
    "ppo_dict.api",
    "ppo_dict",
)


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
    up = sorted(
        f"{m} -> {d}"
        for m, deps in graph().items()
        if m.startswith("ppo_dict.envs")
        for d in deps
        if not d.startswith("ppo_dict.envs")
    )
    assert up == []


def layer(module: str) -> int:
    """The index in ``LAYERS`` of the layer ``module`` belongs to (the longest package prefix)."""
    return max(
        (i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")), key=lambda i: len(LAYERS[i])
    )


def upward(edges: dict[str, set[str]]) -> list[str]:
    """The imports that run from a layer to one above it."""
    return sorted(f"{m} -> {d}" for m, deps in edges.items() for d in deps if layer(d) > layer(m))


def test_imports_run_down_the_layers() -> None:
    assert upward({"ppo_dict.core.config": {"ppo_dict.algo.ppo"}, "ppo_dict.run.cli": {"ppo_dict.core.config"}}) == [
        "ppo_dict.core.config -> ppo_dict.algo.ppo"
    ]  # the check finds what it is for
    assert layer("ppo_dict.main_ppo") == len(LAYERS) - 1 and layer("ppo_dict.vec.runner") == LAYERS.index("ppo_dict.vec")
    assert upward({"ppo_dict.algo.networks.policy": {"ppo_dict.algo.rollout.collect"}}) == [
        "ppo_dict.algo.networks.policy -> ppo_dict.algo.rollout.collect"
    ]  # and between algo's concepts
    assert upward(graph()) == []


def test_the_top_of_the_package_holds_the_command_lines_only() -> None:
    """Everything else lives in a layer's package: a flat module would belong to no layer."""
    top = [
        path
        for name, path in modules().items()
        if name.count(".") == 1 and not name.startswith("ppo_dict.envs") and path.parent.name == "ppo_dict"
    ]
    not_commands = [p.name for p in top if p.name != "__init__.py" and 'if __name__ == "__main__":' not in p.read_text()]
    assert len(top) > 1 and not_commands == []
    packages = {p.parent.name for p in (ROOT / "ppo_dict").glob("*/__init__.py")}
    assert packages == {name.split(".")[1] for name in LAYERS[1:-1]}  # every package is a layer
    # and every concept of algo, a folder or (``ranks``) one module
    folders = {p.parent.name for p in (ROOT / "ppo_dict" / "algo").glob("*/__init__.py")}
    concepts = {name.split(".")[2] for name in LAYERS if name.startswith("ppo_dict.algo.")}
    assert folders <= concepts and all((ROOT / "ppo_dict" / "algo" / f"{c}.py").is_file() for c in concepts - folders)


def test_every_package_is_installed() -> None:
    """setup.cfg names every package folder (a non-editable install would leave out one it does not)."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    listed = set(setup["options"]["packages"].split())
    folders = {
        ".".join([installed, *init.parent.relative_to(ROOT / folder).parts])
        for folder, installed in PACKAGES.items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert "ppo_dict.algo" in folders and listed == folders


def test_config_is_a_leaf_of_the_trainer() -> None:
    leaves = {
        "ppo_dict.core.errors",
        "ppo_dict.core.parse",
        "ppo_dict.core.fields",
        "ppo_dict.core.machine",
        "ppo_dict.core.layout",
        "ppo_dict.core.ranks",
    }
    # the fields, declared in two halves (what is learned, how the run runs): the same leaves
    settings = {"ppo_dict.core.learning_settings", "ppo_dict.core.run_settings"}
    assert graph()["ppo_dict.core.config"] <= leaves | settings | {"ppo_dict.core.config_rules"}
    assert all(graph()[name] <= leaves | settings for name in settings)
    # what follows from the settings (Config's base): the same leaves
    assert graph()["ppo_dict.core.config_rules"] <= leaves
    assert graph()["ppo_dict.core.layout"] <= {"ppo_dict.core.load"}  # which process steps which env: from the CPUs alone
    # the CPUs left: what the machine has, less what others use
    assert graph()["ppo_dict.core.load"] <= {"ppo_dict.core.machine"}
    assert graph()["ppo_dict.core.fields"] <= {"ppo_dict.core.parse"}
    assert graph()["ppo_dict.core.machine"] == set()  # what the machine has: read from the system alone
    assert graph()["ppo_dict.core.ranks"] == set()  # which envs a rank steps (a rank's layout): arithmetic alone


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
