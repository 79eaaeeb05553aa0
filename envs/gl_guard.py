"""Every frame the env's own: gymnasium's MuJoCo viewers freed with their own GL context current.

A MuJoCo viewer owns two things: its GL context (EGL, OSMesa or a glfw window) and a
``mujoco.MjrContext``, the framebuffers, textures, display lists and buffers MuJoCo made *inside*
that context. GL objects are named by small integers per context (every context's first framebuffer
is 1), and ``mjr_freeContext`` deletes them by name in whichever context is current when it runs.

gymnasium 1.x's ``OffScreenViewer.free`` (``env.close()``) destroys the GL context only; the
``MjrContext`` is freed later, by its destructor, when the viewer is collected, with whatever context
is current then: another live renderer's. That renderer's framebuffer and textures are deleted, and
every frame it draws afterwards is black or garbage, with no error. In a GC cycle the GL context's
own ``__del__`` may also run before the viewer's, leaving no context of its own to free in.
(``mujoco.Renderer`` frees in the right order itself; gymnasium's viewers are what every gymnasium
MuJoCo env renders with.)

:func:`guard_mujoco_viewers`, installed once per process by the first frame
(``envs.render.render_frame``), replaces two methods of gymnasium's viewers, for every viewer in the
process, whoever made it (ppo_dict, a user's script, sb3) and however it ends (``close()``, ``del``,
the garbage collector):

* ``free`` (``close()`` and ``__del__`` call it) frees the ``MjrContext`` first, with the viewer's
  own context made current and the previous one restored afterwards; where that context is already
  gone, inside a private 1x1 context of the same backend, whose names belong to nobody. Only then is
  the GL context destroyed. A freed ``MjrContext`` is reset to defaults, so its destructor deletes
  nothing later.
* ``close`` frees the viewer and nothing else. gymnasium's also calls ``glfw.terminate()``, which
  under ``MUJOCO_GL=glfw`` destroys every other renderer's window and context in the process (the
  next frame of any other env crashes the process); glfw stays initialised until the process ends.
* ``render`` of an offscreen viewer makes the viewer's own context current first: gymnasium switches
  contexts only between the viewers of one env, so a frame would otherwise be drawn in whichever
  context another env made current last (or in none, after that env's close).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

RENDERING = "gymnasium.envs.mujoco.mujoco_rendering"
_installed = False


def guard_mujoco_viewers() -> bool:
    """Install the guard (idempotent); False while gymnasium's MuJoCo rendering is not imported yet
    (no viewer exists, so there is nothing to guard: the next frame installs it)."""
    global _installed
    if _installed:
        return True
    rendering = sys.modules.get(RENDERING)
    if rendering is None:
        return False
    offscreen, window = rendering.OffScreenViewer, rendering.WindowViewer
    offscreen.free = _free_in_own_context(offscreen.free, "opengl_context", _gl_context_current, type)
    offscreen.render = _render_in_own_context(offscreen.render)
    window.free = _free_in_own_context(window.free, "window", _glfw_window_current, lambda window: _glfw_context_class())
    for viewer in (offscreen, window):
        viewer.close = viewer.free  # without glfw.terminate(), which destroys every glfw context in the process
    _installed = True
    return True


def _free_in_own_context(
    destroy: Callable[[Any], None],
    context_attr: str,
    as_current: Callable[[Any], Any],
    context_class: Callable[[Any], type],
) -> Callable[[Any], None]:
    """A viewer's ``free``: its ``MjrContext`` inside its own GL context (``as_current(context)``, a
    ``with`` block, or None once that context is gone), then ``destroy`` (gymnasium's ``free``)."""

    @functools.wraps(destroy)
    def free(viewer: Any) -> None:
        con = viewer.__dict__.get("con")
        if con is not None and con.glInitialized:
            context = viewer.__dict__.get(context_attr)
            own = as_current(context) if context is not None else None
            with own if own is not None else _private_context(context_class(context)).as_current():
                con.free()
        destroy(viewer)

    return free


def _gl_context_current(gl_context: Any) -> Any:
    """A mujoco GLContext current for a ``with`` block (its own ``as_current`` restores the previous
    one), or None once freed (mujoco's contexts set ``_context`` to None then)."""
    return gl_context.as_current() if getattr(gl_context, "_context", None) else None


class _glfw_window_current:
    """A glfw window's context current for a ``with`` block, the previous one restored after."""

    def __new__(cls, window: Any) -> Any:
        return super().__new__(cls) if window else None  # gymnasium sets the window to None when destroyed

    def __init__(self, window: Any):
        import glfw

        self.glfw, self.window = glfw, window

    def __enter__(self) -> None:
        self.previous = self.glfw.get_current_context()
        self.glfw.make_context_current(self.window)

    def __exit__(self, *exc: object) -> None:
        self.glfw.make_context_current(self.previous)


def _glfw_context_class() -> type:
    from mujoco.glfw import GLContext

    return GLContext


@functools.lru_cache(maxsize=None)
def _private_context(context_class: type) -> Any:
    """A 1x1 context of ``context_class`` (the orphan's own backend), to free an orphaned
    ``MjrContext`` in: whatever names it deletes there belong to no renderer."""
    return context_class(1, 1)


def _render_in_own_context(render: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(render)
    def render_own(viewer: Any, *args: Any, **kwargs: Any) -> Any:
        viewer.make_context_current()
        return render(viewer, *args, **kwargs)

    return render_own
