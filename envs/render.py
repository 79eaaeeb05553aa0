"""Choosing MuJoCo's OpenGL backend without a screen.

With ``MUJOCO_GL`` set, that choice is used as is. Otherwise each candidate is tried in a
subprocess (a failed GL context can leave a process unusable): glfw when a display exists
(``DISPLAY``, e.g. under ``xvfb-run -a``), then EGL, then OSMesa. The winner goes into
``os.environ`` so that worker processes started afterwards inherit it.

Debian packages: EGL needs ``libegl1`` and ``libgl1-mesa-dri`` (Mesa's software driver when there
is no GPU), OSMesa needs ``libosmesa6``, glfw needs ``libglfw3`` and a display (``xvfb``, ``xauth``
for ``xvfb-run``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from .errors import RenderBackendError

PACKAGES = {
    "glfw": "libglfw3 and a display (xvfb-run -a; packages xvfb xauth)",
    "egl": "libegl1 libgl1-mesa-dri",
    "osmesa": "libosmesa6",
}
_PROBE = (
    "import mujoco\n"
    "model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size=\"1\"/></worldbody></mujoco>')\n"
    "with mujoco.Renderer(model, 16, 16) as renderer:\n"
    "    renderer.render()\n"
)


def render_frame(env: Any) -> Any:
    """``env.render()`` with the env's own GL context made current first.

    gymnasium switches contexts only between the viewers of one env, so with several rendering
    envs in one process (in-process pools, several envs per worker, an evaluation env beside a
    training one) a frame would be drawn with whichever context was created last.
    """
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    viewer = getattr(renderer, "viewer", None)
    if viewer is not None and hasattr(viewer, "make_context_current"):
        viewer.make_context_current()
    return env.render()


def backend_works(backend: str, timeout: float = 60.0) -> bool:
    """Whether MuJoCo renders one frame with ``MUJOCO_GL=backend`` (tried in a subprocess)."""
    env = {**os.environ, "MUJOCO_GL": backend}
    if backend == "osmesa":
        env["PYOPENGL_PLATFORM"] = "osmesa"
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def select_mujoco_gl(verbose: bool = True) -> str:
    """Return the backend to render with, setting ``MUJOCO_GL`` if it was unset."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    candidates = (["glfw"] if os.environ.get("DISPLAY") else []) + ["egl", "osmesa"]
    for backend in candidates:
        if backend_works(backend):
            os.environ["MUJOCO_GL"] = backend
            if verbose:
                print(f"rendering with MUJOCO_GL={backend} (set MUJOCO_GL to choose another)", flush=True)
            return backend
    needs = "; ".join(f"{b}: {PACKAGES[b]}" for b in candidates)
    raise RenderBackendError(
        f"no OpenGL backend can render MuJoCo here (tried {', '.join(candidates)}). Install one, e.g. "
        f"`apt-get install libegl1 libgl1-mesa-dri` (EGL) or `apt-get install libosmesa6` (OSMesa), "
        f"or run under `xvfb-run -a` with libglfw3. Needs: {needs}"
    )
