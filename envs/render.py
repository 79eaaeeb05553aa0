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

import ctypes
import os
import subprocess
import sys
from typing import Any, Optional, Sequence

from .errors import RenderBackendError
from .gl_guard import guard_mujoco_viewers

# The Debian packages of each backend, as system-packages.txt lists them (tests/envs/test_pixels.py checks)
PACKAGES = {
    "glfw": "libglfw3 xvfb xauth",  # and a display: xvfb-run -a
    "egl": "libegl1 libgl1-mesa-dri",  # Mesa's software driver where there is no GPU
    "osmesa": "libosmesa6",
}
# The library PyOpenGL loads for a backend (lib<name>.so or lib<name>.so.<n>, as its ctypesloader
# tries them) and the Debian package that has it. glfw's library comes with the glfw wheel.
LIBRARIES = {"egl": ("EGL", "libegl1"), "osmesa": ("OSMesa", "libosmesa6")}
PROBE = (
    "import mujoco\n"
    "model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size=\"1\"/></worldbody></mujoco>')\n"
    "with mujoco.Renderer(model, 16, 16) as renderer:\n"
    "    renderer.render()\n"
)


def render_frame(env: Any) -> Any:
    """``env.render()``, drawn in the env's own GL context and safe from other renderers' teardown.

    With several rendering envs in one process (in-process pools, several envs per worker, an
    evaluation env beside a training one, a user's envs), gymnasium alone would draw a frame in
    whichever context another env made current last, and free a closed env's MuJoCo context inside
    another live one, blanking its frames: ``envs.gl_guard`` (installed here, once) prevents both.
    """
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    try:  # the first frame creates the GL context: where a backend with its library but no driver fails
        guard_mujoco_viewers()
        return env.render()
    except (ImportError, RuntimeError, AttributeError) as exc:
        if renderer is None or getattr(renderer, "viewer", None) is not None:
            raise  # not a MuJoCo env, or the context exists: not the backend's failure
        backend = os.environ.get("MUJOCO_GL", "glfw")
        raise RenderBackendError(
            f"MUJOCO_GL={backend} cannot create a rendering context here ({type(exc).__name__}: {exc}); "
            f"{backend} needs the Debian packages {PACKAGES.get(backend, '(unknown backend)')}, or unset MUJOCO_GL to render "
            "with whichever backend works"
        ) from exc


def backend_works(backend: str, timeout: float = 60.0, prefix: Sequence[str] = ()) -> bool:
    """Whether MuJoCo renders one frame with ``MUJOCO_GL=backend`` (tried in a subprocess, started
    under ``prefix``, e.g. ``("xvfb-run", "-a")``)."""
    # PYOPENGL_PLATFORM from a backend this process imported mujoco with would be wrong for another
    env = {**{k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}, "MUJOCO_GL": backend}
    if backend == "osmesa":
        env["PYOPENGL_PLATFORM"] = "osmesa"
    try:
        proc = subprocess.run([*prefix, sys.executable, "-c", PROBE], env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def library_loads(name: str) -> bool:
    """Whether ``lib<name>.so`` (or ``.so.<n>``) loads, as PyOpenGL looks for it."""
    for filename in [f"lib{name}.so"] + [f"lib{name}.so.{n}" for n in range(9, -1, -1)]:
        try:
            ctypes.CDLL(filename)
            return True
        except OSError:
            continue
    return False


def backend_problem(backend: str) -> Optional[str]:
    """Why ``MUJOCO_GL=backend`` cannot render here, as far as a cheap look tells (no subprocess,
    no mujoco import: every worker may ask), or None.

    Without it, a missing library surfaces at ``import mujoco`` as PyOpenGL's
    ``'NoneType' object has no attribute 'glGetError'``, naming neither library nor package.
    """
    unset = "or unset MUJOCO_GL to render with whichever backend works"
    if backend == "glfw" and not os.environ.get("DISPLAY"):
        return (
            f"MUJOCO_GL=glfw needs a display and DISPLAY is unset: run under `xvfb-run -a` (Debian packages xvfb xauth), "
            f"{unset}"
        )
    if backend in LIBRARIES and not library_loads(LIBRARIES[backend][0]):
        name, package = LIBRARIES[backend]
        return (
            f"MUJOCO_GL={backend} needs the {name} library (lib{name}.so), which is not installed: "
            f"`apt-get install {PACKAGES[backend]}` (Debian package {package}), {unset}"
        )
    return None


def check_mujoco_gl() -> None:
    """Raise :class:`RenderBackendError` if ``MUJOCO_GL`` names a backend whose library is missing.

    Call before mujoco is imported: its import is where a missing library fails.
    """
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        problem = backend_problem(chosen)
        if problem is not None:
            raise RenderBackendError(problem)


def select_mujoco_gl(verbose: bool = True) -> str:
    """Return the backend to render with, setting ``MUJOCO_GL`` if it was unset; a backend set by
    the user is checked (:func:`check_mujoco_gl`)."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        check_mujoco_gl()
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
        f"or run under `xvfb-run -a` with libglfw3. Debian packages: {needs}"
    )


#: SDL's video driver that draws nowhere: what pygame needs to render ``rgb_array`` frames without a screen
SDL_NO_DISPLAY = "dummy"


def frames_without_display() -> None:
    """Before an env renders ``rgb_array`` frames for a video: pygame's envs (CartPole, LunarLander...) need no
    display, so SDL gets its dummy video driver (unless ``SDL_VIDEODRIVER`` chooses one). Otherwise SDL probes
    Wayland, whose library prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment`` at every
    video where no desktop session runs, though the frames are fine. Set in ``os.environ``, as ``MUJOCO_GL`` is."""
    os.environ.setdefault("SDL_VIDEODRIVER", SDL_NO_DISPLAY)
