"""The system parts some tests need (a GL backend, xvfb-run, Godot, a PostgreSQL server) and the
Debian packages that provide them, read from ``system-packages.txt`` (the list ``make system-deps``
and ``.ci/run`` install).

A test says ``@needs("osmesa")``; ``tests/conftest.py`` then skips it where the part is missing,
with a reason naming the part and its packages, and counts the skips in the summary at the end.
With ``PPO_DICT_REQUIRE_SYSTEM_PARTS=1`` (``.ci/run`` sets it: every part is installed there) a
missing part fails the test instead, so CI fails when any of them breaks.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
from pathlib import Path
from typing import Callable, Optional

import pytest

from ppo_dict.envs import render
from ppo_dict.envs.godot.game import DEFAULT_BINARY

PACKAGE_FILE = Path(__file__).resolve().parent.parent / "system-packages.txt"
REQUIRE_ENV = "PPO_DICT_REQUIRE_SYSTEM_PARTS"
MARKER = "needs_system"


def packages_by_part(path: Path = PACKAGE_FILE) -> dict[str, str]:
    """``{part: "pkg pkg"}`` from the lines ``part: packages`` (``#`` starts a comment)."""
    parts = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            part, _, packages = line.partition(":")
            parts[part.strip()] = " ".join(packages.split())
    return parts


def _postgres_problem() -> Optional[str]:
    from tests.postgres_helpers import server_binaries

    if server_binaries() is None:
        return "no initdb and pg_ctl in /usr/lib/postgresql/*/bin or on PATH"
    if os.geteuid() == 0:  # the server refuses root: the cluster runs as the package's postgres user
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is not on PATH"
    return None


def _backend_problem(backend: str, prefix: tuple[str, ...] = ()) -> Optional[str]:
    if backend in render.LIBRARIES and not render.library_loads(render.LIBRARIES[backend][0]):
        return f"lib{render.LIBRARIES[backend][0]}.so cannot be loaded"
    if render.backend_works(backend, prefix=prefix):
        return None
    return f"MuJoCo cannot render one frame with MUJOCO_GL={backend}" + (f" under {' '.join(prefix)}" if prefix else "")


def _glfw_problem() -> Optional[str]:
    if shutil.which("xvfb-run") is None:
        return "xvfb-run is not on PATH"
    return _backend_problem("glfw", prefix=("xvfb-run", "-a"))


def _gl_problem() -> Optional[str]:
    problems = [problem for problem in (part_problem("egl"), part_problem("osmesa")) if problem]
    return "; ".join(problems) if len(problems) == 2 else None


# part -> (what it is, what is wrong without it or None); "gl" is either backend (the automatic choice)
PARTS: dict[str, tuple[str, Callable[[], Optional[str]]]] = {
    "egl": ("EGL (MuJoCo rendering)", lambda: _backend_problem("egl")),
    "osmesa": ("OSMesa (MuJoCo rendering)", lambda: _backend_problem("osmesa")),
    "gl": ("an OpenGL backend (EGL or OSMesa) for MuJoCo rendering", _gl_problem),
    "glfw": ("glfw on a virtual screen (xvfb-run -a)", _glfw_problem),
    "godot": (
        f"the Godot engine ({DEFAULT_BINARY})",
        lambda: None if shutil.which(DEFAULT_BINARY) else f"{DEFAULT_BINARY} is not on PATH",
    ),
    "postgresql": ("a PostgreSQL server", _postgres_problem),
}


def packages(part: str) -> str:
    """The Debian packages of ``part`` ("gl": those of EGL or those of OSMesa)."""
    listed = packages_by_part()
    if part == "gl":
        return f"{listed['egl']} (EGL) or {listed['osmesa']} (OSMesa)"
    return listed[part]


@functools.lru_cache(maxsize=None)
def part_problem(part: str) -> Optional[str]:
    """What is wrong with ``part`` here (looked at once per test session), or None when it works."""
    return PARTS[part][1]()


def skip_reason(part: str) -> Optional[str]:
    """The reason a test needing ``part`` cannot run here, naming the packages; None when it can."""
    problem = part_problem(part)
    if problem is None:
        return None
    return (
        f"needs {PARTS[part][0]}: {problem}; Debian package(s) {packages(part)} (`sudo make system-deps` installs every part)"
    )


def needs(part: str) -> pytest.MarkDecorator:
    """Mark a test as needing a system part (one of :data:`PARTS`)."""
    if part not in PARTS:
        raise ValueError(f"unknown system part {part!r}; known: {', '.join(PARTS)}")
    if part != "gl" and part not in packages_by_part():
        raise ValueError(f"system part {part!r} has no line in {PACKAGE_FILE.name}")
    return getattr(pytest.mark, MARKER)(part)
