"""From the names people type (``gym_Reacher-v2``, ``test_dummy``, ``godot_demo``) to specs and envs.

:func:`resolve_env_name` checks a name once, in the main process, before any worker starts, and
returns its :class:`~envs.spec.EnvSpec`; :func:`make_env` builds a gymnasium env from a spec
(in the main process or in a worker). Godot games are specs too (``envs.godot.spec``), but a
Godot process holds many agents, so the trainer steps them with its own runner instead.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import warnings
from typing import Any, Iterator, Optional

import gymnasium as gym

from .errors import AtariUnavailableError
from .render import check_mujoco_gl, frames_without_display, select_mujoco_gl
from .spec import (
    ALE_MODULE,
    GODOT_DEMO,
    GODOT_PREFIX,
    GYM_BACKEND,
    PIXELS,
    TEST_DUMMY,
    AtariOptions,
    EnvSpec,
    PixelOptions,
    gym_id_of,
    is_atari_entry,
    is_godot_name,
)

# gymnasium's envs that draw with pygame, not OpenGL
PYGAME_ENTRIES = ("gymnasium.envs.classic_control", "gymnasium.envs.box2d", "gymnasium.envs.toy_text")


def import_gym_packages(packages: tuple[str, ...]) -> None:
    """Import modules that register envs, as rl-zoo's ``--gym-packages`` does."""
    for module in packages:
        importlib.import_module(module)


def is_mujoco_py_stub(spec: gym.envs.registration.EnvSpec) -> bool:
    """Whether gymnasium registers ``spec`` only to raise: the MuJoCo v2/v3 ids that needed mujoco-py
    have as entry point gymnasium's own ``_raise_mujoco_py_error``. Any other entry point (a
    ``"module:Class"`` string, a class, a function, as gymnasium's docs register custom envs) makes an env."""
    stub = getattr(gym.envs, "_raise_mujoco_py_error", None)
    return stub is not None and spec.entry_point is stub


def _newest_version(spec: gym.envs.registration.EnvSpec) -> Optional[str]:
    """The newest registered id of the same env family that gymnasium can still make."""
    candidates = [
        s
        for s in gym.registry.values()
        if s.namespace == spec.namespace and s.name == spec.name and not is_mujoco_py_stub(s) and s.version is not None
    ]
    return max(candidates, key=lambda s: s.version).id if candidates else None


def import_id_module(gym_id: str) -> tuple[str, str]:
    """``(module, id)`` of gymnasium's ``<module>:<id>`` form, the module imported as ``gym.make`` imports it
    (``gym.spec`` does not); ``("", gym_id)`` for a plain id. Not called before a video's GL backend is chosen
    (the module may import mujoco)."""
    module, _, bare = gym_id.rpartition(":")
    if module:
        importlib.import_module(module)
    return module, bare


def with_id_module(gym_id: str, packages: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``(id, packages)`` of ``mymodule:MyEnv-v0``: ``MyEnv-v0``, and ``mymodule`` (imported) joining the packages
    each worker imports; a plain id as it is. ValueError naming a module that cannot be imported."""
    try:
        module, bare = import_id_module(gym_id)
    except Exception as exc:  # noqa: BLE001 (a module that fails to import, whatever it raises)
        raise ValueError(
            f"the module of {gym_id} (gymnasium's <module>:<id>) cannot be imported: {type(exc).__name__}: {exc}"
        ) from None
    return bare, packages + ((module,) if module and module not in packages else ())


def gym_spec(gym_id: str, atari_asked: bool = False) -> gym.envs.registration.EnvSpec:
    """gymnasium's spec of ``gym_id``, importing ale-py first if the id is not registered yet.

    An id gymnasium does not know raises gymnasium's error (with its "Did you mean" hint); an Atari
    id (or any id with ``--atari_wrapper``) while ale-py is missing raises what to install.
    """
    try:
        return gym.spec(gym_id)
    except gym.error.Error as not_found:
        from .atari import ATARI_NAME, INSTALL, MAYBE_ATARI_NAME, import_ale

        try:
            import_ale()
        except AtariUnavailableError:
            if atari_asked or ATARI_NAME.search(gym_id):
                raise
            if MAYBE_ATARI_NAME.search(gym_id):
                raise type(not_found)(f"{not_found} (if it is an Atari game, install {INSTALL})") from None
            raise not_found from None
        return gym.spec(gym_id)


def is_atari_env(name: str) -> bool:
    """rl-zoo's ``is_atari`` for a name as typed: a gymnasium id that ale-py's ``AtariEnv`` makes
    (False for anything else, unknown ids and a missing ale-py included)."""
    if not gym_id_of(name):
        return False
    try:
        return is_atari_entry(gym_spec(gym_id_of(name)).entry_point)
    except (gym.error.Error, AtariUnavailableError, ImportError):  # ImportError: an unloadable module:id
        return False


def video_may_need_mujoco_gl(env_name: str) -> bool:
    """Whether a ``--video`` of ``--env env_name`` may render with MuJoCo, so that a GL backend must
    be chosen before mujoco is imported. False for envs that draw their own frames (Atari's ALE,
    gymnasium's pygame envs, ``test_dummy``, Godot games), which record on a machine without GL."""
    if not gym_id_of(env_name) or is_atari_env(env_name):
        return False
    try:
        entry = gym.spec(gym_id_of(env_name)).entry_point
    except (gym.error.Error, ImportError):
        return True  # registered by a --gym_packages module not imported yet: it may be MuJoCo
    return not (isinstance(entry, str) and entry.startswith(PYGAME_ENTRIES))


def prepare_video(env_name: str) -> None:
    """Before the first env of ``--env env_name`` that records a video is made: MuJoCo's headless GL backend
    chosen (EGL, OSMesa...: before mujoco is imported; Atari and pygame envs record without OpenGL), and
    pygame told it has no display (:func:`~envs.render.frames_without_display`)."""
    if video_may_need_mujoco_gl(env_name):
        select_mujoco_gl()
    frames_without_display()


def with_no_velocity_envs(gym_id: str, packages: tuple[str, ...]) -> tuple[str, ...]:
    """``packages``, and the module registering rl-zoo's NoVel ids (``envs.no_velocity``, without rl_zoo3) when
    ``gym_id`` is one of them: imported here, and in each worker. Also where this process has it registered already
    (by rl_zoo3, or by an earlier run here): a worker is a fresh interpreter, whose registry has only what it imports."""
    from .no_velocity import MODULE, NO_VELOCITY_IDS

    return packages + (MODULE,) if gym_id in NO_VELOCITY_IDS and MODULE not in packages else packages


def resolve_env_name(
    name: str,
    gym_packages: tuple[str, ...] = (),
    kwargs: Optional[dict[str, Any]] = None,
    pixel: Optional[PixelOptions] = None,
    atari: Optional[AtariOptions] = None,
    frame_stack: int = 1,
) -> EnvSpec:
    """Check ``name`` and return its spec, or raise with gymnasium's own "Did you mean" text.

    MuJoCo ids that gymnasium 1.x only registers to raise (``Reacher-v2``, ``-v3``: they need mujoco-py) map to the
    newest version gymnasium makes, with a notice saying so. Atari ids import ale-py (also in each worker: it joins
    ``gym_packages``); ``atari`` asks for sb3's AtariWrapper. ``test_dummy`` is the dummy pixel env; its ``kwargs`` are
    checked here. ``godot_demo`` and ``godot`` are Godot games (``envs.godot.spec.resolve_godot``).
    """
    kwargs = dict(kwargs or {})
    if is_godot_name(name):
        from .godot.spec import resolve_godot

        if atari is not None or frame_stack > 1:
            raise ValueError(
                f"{name} is a Godot game, which sends its own observations: drop --atari_wrapper and --frame_stack"
            )
        return resolve_godot(name, kwargs, pixel)
    import_gym_packages(gym_packages)
    if name == TEST_DUMMY:
        return _dummy_spec(gym_packages, kwargs, pixel is not None or atari is not None, frame_stack)
    gym_id = gym_id_of(name)
    if not gym_id:
        raise ValueError(
            f"unknown environment {name!r}: give a gymnasium id (e.g. Reacher-v2, or gym_Reacher-v2), "
            f"{TEST_DUMMY}, {GODOT_DEMO} (the Godot demo game) or {GODOT_PREFIX} with --env_kwargs "
            f'"dict(env_path=...)" (another Godot game)'
        )
    gym_id, packages = with_id_module(gym_id, tuple(gym_packages))
    packages = with_no_velocity_envs(gym_id, packages)
    spec = gym_spec(gym_id, atari is not None)  # raises NameNotFound / VersionNotFound with a "Did you mean" hint
    gym_id, notice = _version_trained(gym_id, spec)
    _check_rendering(gym_id, pixel is not None)
    if is_atari_entry(spec.entry_point) and ALE_MODULE not in packages:
        packages += (ALE_MODULE,)  # each worker imports it, which registers the Atari ids there
    if atari is not None:
        from .atari import check_atari_options

        notice = check_atari_options(gym_id, atari) or notice
    return EnvSpec(
        name=name,
        gym_id=gym_id,
        gym_packages=packages,
        kwargs=kwargs,
        notice=notice,
        pixel=pixel,
        atari=atari,
        frame_stack=frame_stack,
    )


def _dummy_spec(gym_packages: tuple[str, ...], kwargs: dict[str, Any], wrapped: bool, frame_stack: int) -> EnvSpec:
    """``test_dummy``'s spec, its ``kwargs`` checked (``wrapped``: pixels or Atari asked of it, refused)."""
    from .dummy import GYM_ID, check_kwargs

    check_kwargs(kwargs)
    if wrapped:
        raise ValueError("test_dummy already observes images: drop --pixel_obs_wrapper and --atari_wrapper")
    return EnvSpec(name=TEST_DUMMY, gym_id=GYM_ID, gym_packages=tuple(gym_packages), kwargs=kwargs, frame_stack=frame_stack)


def _check_rendering(gym_id: str, pixels: bool) -> None:
    """What the env renders with works here: MuJoCo's GL backend, and with ``pixels`` the env's frames."""
    if str(gym.spec(gym_id).entry_point).startswith("gymnasium.envs.mujoco"):
        check_mujoco_gl()  # else a MUJOCO_GL whose library is missing fails mujoco's import with a NoneType error
    if pixels:
        from .pixels import check_pixel_env

        check_pixel_env(gym.spec(gym_id))


def _version_trained(gym_id: str, spec: gym.envs.registration.EnvSpec) -> tuple[str, str]:
    """``(the id trained, the notice saying why it is not gym_id or that a newer version exists)``: a MuJoCo id that
    needs mujoco-py maps to the newest version gymnasium makes."""
    if is_mujoco_py_stub(spec):
        newest = _newest_version(spec)
        if newest is None:
            raise ValueError(f"gymnasium registers {gym_id} but cannot make it, and no other version of it")
        return newest, f"note: {gym_id} needs mujoco-py, which gymnasium 1.x dropped; using {newest} instead"
    if spec.version is not None and _newest_version(spec) not in (None, spec.id):
        # said here once, in the main process; make_env drops gymnasium's own (coloured) warning of it in every process
        return gym_id, f"note: gymnasium {OUT_OF_DATE} {gym_id}, {_newest_version(spec)}; training {gym_id} as asked"
    return gym_id, ""


#: what gymnasium's warning for an old version of an env says (``registration.make``), and what
#: :func:`resolve_env_name`'s notice says instead
OUT_OF_DATE, OUT_OF_DATE_WARNING = "has a newer version of", "is out of date. You should consider upgrading"
#: the colour codes gymnasium's ``logger.warn`` wraps its warnings in (``utils.colorize``)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@contextlib.contextmanager
def plain_warnings(notice: str) -> Iterator[None]:
    """The warnings raised inside, shown in plain words: gymnasium's without its colour codes and ``WARN:`` prefix,
    which read as garbage in a log file; its out-of-date warning left out where ``notice`` (said once, by the
    main process) says it already, instead of once in every process that builds the env."""
    with warnings.catch_warnings(record=True) as caught:  # the filters still apply: what they ignore is not caught
        yield
    for warning in caught:
        text = ANSI_ESCAPE.sub("", str(warning.message)).removeprefix("WARN: ")
        key = (text, warning.category, warning.filename, warning.lineno)
        if (OUT_OF_DATE_WARNING in text and OUT_OF_DATE in notice) or key in _SHOWN:
            continue
        _SHOWN.add(key)  # once per process, as the "default" filter shows them (catching resets its registry)
        warnings.showwarning(text, warning.category, warning.filename, warning.lineno, warning.file, warning.line)


_SHOWN: set[tuple[str, type, str, int]] = set()


def make_env(spec: EnvSpec) -> gym.Env:
    """Build one gymnasium env from its spec (in the main process or in a worker); not for another backend's specs."""
    if spec.backend != GYM_BACKEND:  # a Godot game's agents are env columns of one process, stepped by its runner
        raise ValueError(
            f"{spec.label} is stepped by the trainer's {spec.backend!r} env backend (ppo_dict.vec.BACKENDS), "
            "not a gymnasium env that make_env can build"
        )
    import_gym_packages(spec.gym_packages)
    if spec.name == TEST_DUMMY:
        from . import dummy  # noqa: F401  (registers the gymnasium id)
    with plain_warnings(spec.notice):
        env = _make_unstacked(spec)
    if spec.frame_stack > 1:
        from .frame_stack import FrameStack

        # rendered pixels stack their frames only, not the state beside them
        env = FrameStack(env, spec.frame_stack, keys=None if spec.pixel is None else (PIXELS,))
    return env


def _make_unstacked(spec: EnvSpec) -> gym.Env:
    if spec.pixel is not None:
        from .pixels import make_pixel_env

        return make_pixel_env(spec.gym_id, spec.kwargs, spec.pixel)
    if spec.atari is not None:
        from .atari import make_atari_env

        return make_atari_env(spec.gym_id, spec.kwargs, spec.atari)
    if spec.is_atari:
        from .atari import make_ale_env

        return make_ale_env(spec.gym_id, spec.kwargs)
    return gym.make(spec.gym_id, **spec.kwargs)
