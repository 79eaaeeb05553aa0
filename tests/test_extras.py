"""A fresh machine passes: every module the tests (and the code they run) import comes from a distribution
that ``pip install -e ".[test]"`` installs, setup.cfg's ``install_requires`` and ``test`` extra with their own
dependencies, read from the installed packages' metadata.

The modules are imported for real in a fresh interpreter, so that what they import in turn counts too: rl-zoo's
``rl_zoo3.plots`` imports scipy, which neither rl_zoo3 nor the test extra used to install (a machine that had
scipy already passed, a fresh one failed).
"""

from __future__ import annotations

import ast
import configparser
import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
#: the folders whose imports the test suite runs: the tests, the package (and its envs), the benchmarks the tests import
FOLDERS = ("tests", "ppo_dict", "envs", "benchmarks")
LOCAL = {"ppo_dict", "tests", "benchmarks", "envs"}


def imported_modules() -> set[str]:
    """The dotted names every ``import`` / ``from ... import`` (absolute) and ``pytest.importorskip("...")`` names."""
    names = set()
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
                elif (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", None) == "importorskip"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names.add(node.args[0].value)
    return {n for n in names if n.partition(".")[0] not in LOCAL and n.partition(".")[0] not in sys.stdlib_module_names}


def installed_by(roots: list[Requirement]) -> set[str]:
    """The canonical names of the distributions ``roots`` install, with their dependencies (and the extras named)."""
    found, todo = set(), [(r, frozenset(r.extras)) for r in roots]
    while todo:
        requirement, extras = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, extras) in found:
            continue
        found.add((name, extras))
        try:
            needs = requires(requirement.name) or []
        except PackageNotFoundError:
            continue  # not installed here: what it would bring cannot be read (the import below fails instead)
        for line in needs:
            need = Requirement(line)
            wanted = need.marker is None or any(need.marker.evaluate({"extra": extra}) for extra in (*extras, ""))
            if wanted:
                todo.append((need, frozenset(need.extras)))
    return {name for name, _ in found}


#: run in a fresh interpreter: a finder first on ``sys.meta_path`` hides every module of a distribution that
#: ``argv[2]`` does not name, as a fresh virtual environment would not have it; then ``argv[1]``'s modules are imported
HIDE_THE_REST = """
import importlib, json, sys
from importlib.metadata import packages_distributions
from packaging.utils import canonicalize_name

owners, allowed = packages_distributions(), set(json.loads(sys.argv[2]))

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.partition(".")[0], [])
        if dists and not any(canonicalize_name(d) in allowed for d in dists):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
failed = []
for name in sorted(json.loads(sys.argv[1])):
    try:
        importlib.import_module(name)
    except ImportError as error:
        failed.append(f"{name}: {error}")
print(json.dumps(failed))
"""


def failing_imports(modules: set[str], installed: set[str]) -> list[str]:
    """Import ``modules`` where only the distributions ``installed`` are: ``["module: error", ...]`` for those that fail."""
    proc = subprocess.run(
        [sys.executable, "-c", HIDE_THE_REST, json.dumps(sorted(modules)), json.dumps(sorted(installed))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def extra(name: str) -> list[Requirement]:
    """setup.cfg's ``install_requires`` (``name`` "") or that and its extra ``name``, as requirements."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = setup["options"]["install_requires"].splitlines()
    if name:
        lines += setup["options.extras_require"][name].splitlines()
    return [Requirement(line) for line in (raw.strip() for raw in lines) if line and not line.startswith("#")]


def test_the_test_extra_installs_every_module_the_tests_import() -> None:
    modules = imported_modules()
    assert {"stable_baselines3.common.monitor", "rl_zoo3.plots", "hypothesis", "sb3_contrib"} <= modules
    installed = installed_by(extra("test"))
    assert {"stable-baselines3", "sb3-contrib", "torch"} <= installed
    assert failing_imports(modules, installed) == []
    # the check itself: without scipy, rl-zoo's plots do not import (what a fresh machine said before scipy was listed)
    assert failing_imports({"rl_zoo3.plots"}, installed - {"scipy"}) == ["rl_zoo3.plots: No module named 'scipy'"]


def test_the_plots_extra_installs_what_rl_zoos_plot_scripts_import() -> None:
    """``pip install -e ".[plots]"`` (docs/experiments.md) is enough for rl-zoo's plot scripts and sb3's results_plotter."""
    plots = {
        "rl_zoo3.plots",
        "rl_zoo3.plots.plot_train",
        "stable_baselines3.common.results_plotter",
        "stable_baselines3.common.monitor",
    }
    assert failing_imports(plots, installed_by(extra("plots"))) == []
    assert failing_imports(plots, installed_by(extra(""))) != []  # the package alone is not enough
