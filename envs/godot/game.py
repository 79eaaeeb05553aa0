"""One headless Godot process whose agents are env columns: launch, connect, reset, step, close.

A :class:`GodotGame` owns exactly one Godot process (``godot3-server --path <project>`` or an
exported game binary) and the TCP connection it opens to us (protocol: ``envs/godot/protocol.py``).
Its ``n_agents`` agents step together: ``step`` takes ``[n_agents, ...]`` actions and returns
``[n_agents, ...]`` results, with gymnasium's auto-reset semantics.

No orphans: the process gets ``PR_SET_PDEATHSIG = SIGKILL`` (the kernel kills it when the thread
that launched it exits, even on SIGKILL of ours), runs in its own process group (a Ctrl-C on the
terminal reaches us, not the game, so we close it in order), and is killed and reaped by
``close()``, by a ``weakref.finalize`` when the object is collected, at interpreter exit, and
whenever an error makes the game unusable.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
from gymnasium import spaces

from ..errors import GodotCrashedError, GodotNotFoundError, GodotProtocolError, GodotTimeoutError
from . import protocol
from .protocol import AgentsObs, EnvInfo, StepReply

#: The headless Godot 3 engine of Debian's ``godot3-server`` package.
DEFAULT_BINARY = "godot3-server"
#: The demo game shipped with ppo_dict (envs/godot/demo): 4 reach agents per process by default.
DEMO_PROJECT = Path(__file__).resolve().parent / "demo"
_PR_SET_PDEATHSIG = 1
#: Seconds a game may take to exit after "close" before it is killed.
_CLOSE_GRACE = 2.0
#: Seconds to wait for the exit code of a game whose connection broke (to say how it died).
_EXIT_WAIT = 2.0


def die_with_parent(sig: int = signal.SIGKILL) -> Any:
    """A ``preexec_fn`` that makes the kernel send ``sig`` to the child when its parent thread exits.

    libc and ``prctl`` are looked up here, before the fork, so the child only makes the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before prctl: nobody would ever kill us
            os._exit(1)

    return preexec


class _Process:
    """The process, sockets and log of one game; everything ``close`` and the finalizer release.

    Kept apart from :class:`GodotGame` so that ``weakref.finalize`` can hold it without keeping
    the game object alive.
    """

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self.listener: Optional[socket.socket] = None
        self.conn: Optional[socket.socket] = None
        self.log = tempfile.TemporaryFile()

    def shutdown(self, graceful: bool = False) -> None:
        """Ask the game to quit (``graceful``), then kill its process group and reap it."""
        if graceful and self.conn is not None and self.proc is not None and self.proc.poll() is None:
            try:
                protocol.send_message(self.conn, protocol.close_message())
                self.proc.wait(_CLOSE_GRACE)
            except (OSError, subprocess.TimeoutExpired):
                pass  # it is killed below
        for sock in (self.conn, self.listener):
            if sock is not None:
                sock.close()
        self.conn = self.listener = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait()  # reap: no zombie left either
        if not self.log.closed:
            self.log.close()

    def output_tail(self, lines: int = 12) -> str:
        """The last lines the game printed (stdout and stderr), without Godot's locale noise."""
        if self.log.closed:
            return ""
        self.log.seek(0)
        text = self.log.read()[-20000:].decode("utf-8", "replace")
        keep = [line for line in text.splitlines() if line.strip() and "locale" not in line and "translation.cpp" not in line]
        return "\n".join("    " + line for line in keep[-lines:])


def _exit_description(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def check_program(
    project: Union[str, os.PathLike, None] = DEMO_PROJECT,
    env_path: Union[str, os.PathLike, None] = None,
    binary: str = DEFAULT_BINARY,
) -> list[str]:
    """The argv of a game before its flags, or a :class:`GodotNotFoundError` that says how to get it.

    Launches nothing: the trainer checks a game's files with it before any process starts.
    """
    if env_path is not None:
        path = Path(env_path)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise GodotNotFoundError(f"exported Godot game {str(path)!r} does not exist or is not executable (--env_path)")
        return [str(path.resolve())]
    found = shutil.which(binary)
    if found is None:
        raise GodotNotFoundError(
            f"Godot binary {binary!r} not found on PATH: install Godot 3's headless engine, the Debian package "
            "godot3-server (apt-get install godot3-server), or pass an exported game with --env_path"
        )
    if project is None or not (Path(project) / "project.godot").is_file():
        raise GodotNotFoundError(f"{str(project)!r} is not a Godot project directory (it has no project.godot)")
    return [found, "--path", str(Path(project).resolve())]


class GodotGame:
    """One headless Godot process; its ``n_agents`` agents are env columns.

    Args:
        project: a Godot 3 project directory, run as ``<binary> --path <project>`` (default: the demo).
        env_path: an exported game binary to run directly instead of ``binary`` + ``project``.
        binary: the Godot executable for ``project`` (name on PATH or a path).
        seed: ``--env_seed``: the game's seed at launch (the demo seeds agent i with seed + i).
        speedup: ``--speedup``: physics frames per real second are 60 x speedup (plugin convention).
        action_repeat: ``--action_repeat``: physics frames each action is applied for.
        framerate: ``--fixed-fps`` when given (as godot_rl's ``framerate``).
        game_args: further ``--key=value`` flags for the game (the demo: n_agents, max_steps,
            action_type, image_size).
        connect_timeout: seconds for the game to start, connect and describe its spaces.
        step_timeout: seconds for any later reply.

    Attributes:
        n_agents: agents in the game; observation_space: Dict of one agent's observation;
        action_space: one agent's action space (Box or Discrete, see protocol.ActionMapping);
        port: the TCP port the game connected to; pid: the Godot process id; command: its argv.
    """

    def __init__(
        self,
        project: Union[str, os.PathLike, None] = DEMO_PROJECT,
        env_path: Union[str, os.PathLike, None] = None,
        binary: str = DEFAULT_BINARY,
        seed: int = 0,
        speedup: int = 1000,
        action_repeat: int = 4,
        framerate: Optional[int] = None,
        game_args: Optional[dict[str, Any]] = None,
        connect_timeout: float = 30.0,
        step_timeout: float = 60.0,
    ):
        self.step_timeout = step_timeout
        self.closed = False
        argv = check_program(project, env_path, binary)
        self._res = _Process()
        self._finalizer = weakref.finalize(self, self._res.shutdown)
        try:
            self._res.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # Port 0: the kernel picks a free port for our own listening socket, so no other
            # process can take it between choosing and listening (no race), and we pass the port on.
            self._res.listener.bind(("127.0.0.1", 0))
            self._res.listener.listen(1)
            self.port: int = self._res.listener.getsockname()[1]
            flags = {
                "port": self.port,
                "env_seed": seed,
                "speedup": speedup,
                "action_repeat": action_repeat,
                **(game_args or {}),
            }
            self.command = argv + [f"--{key}={value}" for key, value in flags.items()]
            if framerate is not None:
                self.command += ["--fixed-fps", str(framerate)]
            self.name = " ".join(argv)
            self._launch()
            self.pid: int = self._res.proc.pid
            self._accept(connect_timeout)
            self._res.conn.settimeout(connect_timeout)
            protocol.send_message(self._res.conn, protocol.handshake_message())
            self.info: EnvInfo = EnvInfo.from_message(self._request(protocol.env_info_request(), "env_info"))
            self._res.conn.settimeout(step_timeout)
        except BaseException:
            self._res.shutdown()
            self.closed = True
            raise
        self.n_agents = self.info.n_agents
        self.observation_space: spaces.Dict = self.info.observation_space
        self.action_space: spaces.Space = self.info.actions.space
        self._awaiting_step = False

    # ------------------------------------------------------------------ launching
    def _launch(self) -> None:
        env = dict(os.environ)
        if env.get("LANG", "C") in ("C", "POSIX", ""):
            env["LANG"] = "en_US.UTF-8"  # Godot 3 prints two errors per start for the C locale
        self._res.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._res.log,  # a file, not a pipe: a chatty game can never block on a full pipe
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )

    def _accept(self, timeout: float) -> None:
        """Wait for the game to connect, noticing at once if it exits instead."""
        listener = self._res.listener
        listener.settimeout(0.05)
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn, _ = listener.accept()
                break
            except socket.timeout:
                pass
            code = self._res.proc.poll()
            if code is not None:
                raise GodotCrashedError(
                    f"{self.describe()} exited ({_exit_description(code)}) before connecting to port {self.port}; "
                    f"its output:\n{self._res.output_tail()}"
                )
            if time.monotonic() > deadline:
                raise GodotTimeoutError(
                    f"{self.describe()} did not connect to 127.0.0.1:{self.port} within {timeout:g} s: does the game "
                    f"have a sync node that reads --port? Its output:\n{self._res.output_tail()}"
                )
        listener.close()
        self._res.listener = None
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._res.conn = conn

    def describe(self) -> str:
        pid = self._res.proc.pid if self._res.proc is not None else "not started"
        return f"Godot game '{self.name}' (pid {pid}, port {self.port})"

    # ------------------------------------------------------------------ talking
    def _fail(self, error: BaseException, what: str) -> GodotCrashedError | GodotTimeoutError:
        """The error to raise after ``what`` failed; kills the game, which is unusable now."""
        proc = self._res.proc
        if isinstance(error, socket.timeout) and proc.poll() is None:
            result: GodotCrashedError | GodotTimeoutError = GodotTimeoutError(
                f"{self.describe()} did not answer {what} within {self._res.conn.gettimeout():g} s "
                f"(step_timeout); it was killed. Its output:\n{self._res.output_tail()}"
            )
        else:
            try:
                code = proc.wait(_EXIT_WAIT)
                how = _exit_description(code)
            except subprocess.TimeoutExpired:
                how = "still running, but it closed the connection; it was killed"
            result = GodotCrashedError(
                f"{self.describe()} failed during {what} ({how}); its output:\n{self._res.output_tail()}"
            )
        self.close(graceful=False)
        return result

    def _send(self, message: dict[str, Any], what: str) -> None:
        self._check_open()
        try:
            protocol.send_message(self._res.conn, message)
        except OSError as e:
            raise self._fail(e, what) from None

    def _receive(self, what: str) -> dict[str, Any]:
        try:
            return protocol.recv_message(self._res.conn)
        except (OSError, protocol.ConnectionClosed) as e:  # socket.timeout is an OSError
            raise self._fail(e, what) from None
        except GodotProtocolError:
            self.close(graceful=False)
            raise

    def _request(self, message: dict[str, Any], what: str) -> dict[str, Any]:
        self._send(message, what)
        return self._receive(what)

    def _check_open(self) -> None:
        if self.closed:
            raise GodotCrashedError(f"{self.describe()} is closed")

    def _decode_failed(self, error: GodotProtocolError) -> GodotProtocolError:
        self.close(graceful=False)
        return error

    # ------------------------------------------------------------------ the env interface
    def reset(self, seed: Optional[int] = None) -> AgentsObs:
        """Reset every agent; returns ``{key: [n_agents, ...]}``.

        With ``seed``, games that read ppo_dict's reset seed (the demo) reseed agent i with
        ``seed + i``; plugin games ignore it and keep their launch ``--env_seed`` stream.
        """
        if self._awaiting_step:
            raise GodotProtocolError(f"{self.describe()}: reset while a step reply is pending; call receive_step first")
        what = "reset"
        reply = self._request(protocol.reset_message(seed), what)
        try:
            protocol.expect_type(reply, "reset", f"{self.describe()} {what}")
            obs = reply.get("obs")
            if not isinstance(obs, list) or len(obs) != self.n_agents:
                raise GodotProtocolError(f"{self.describe()} {what}: 'obs' must be a list of {self.n_agents} observations")
            return protocol.decode_obs(obs, self.observation_space, f"{self.describe()} {what}")
        except GodotProtocolError as e:
            raise self._decode_failed(e) from None

    def send_actions(self, actions: np.ndarray) -> None:
        """Send ``actions`` ([n_agents, *action_shape]) without waiting; :meth:`receive_step` gets the reply.

        Split from :meth:`step` so that a pool can send to every game before waiting on any, and
        the Godot processes step in parallel.
        """
        if self._awaiting_step:
            raise GodotProtocolError(f"{self.describe()}: actions sent twice without receive_step in between")
        actions = np.asarray(actions)
        if actions.shape[0] != self.n_agents:
            raise ValueError(f"{self.describe()}: expected actions for {self.n_agents} agents, got shape {actions.shape}")
        self._send(protocol.action_message(self.info.actions.to_godot(actions)), "step")
        self._awaiting_step = True

    def receive_step(self) -> StepReply:
        """The reply to :meth:`send_actions`, with auto-reset semantics.

        ``obs`` is the next observation (the next episode's first where one ended) and
        ``terminal_obs`` the last observation of each ended episode. A game that does not send
        ``terminal_obs`` (plugin games: they reset an agent on a later frame) has its reported obs
        used as both, which is what godot_rl's own wrappers hand to sb3.
        """
        if not self._awaiting_step:
            raise GodotProtocolError(f"{self.describe()}: receive_step without send_actions")
        reply = self._receive("step")
        self._awaiting_step = False
        try:
            result = protocol.parse_step_reply(reply, self.n_agents, self.observation_space, f"{self.describe()} step")
        except GodotProtocolError as e:
            raise self._decode_failed(e) from None
        if result.terminal_obs is None and (result.terminated | result.truncated).any():
            result.terminal_obs = {key: arr.copy() for key, arr in result.obs.items()}
        return result

    def step(self, actions: np.ndarray) -> StepReply:
        """Apply ``actions`` ([n_agents, ...]) for ``action_repeat`` frames; see :meth:`receive_step`."""
        self.send_actions(actions)
        return self.receive_step()

    def close(self, graceful: bool = True) -> None:
        """Send "close" (when ``graceful``), kill the process group if still there, reap it. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._res.shutdown(graceful=graceful)
        self._finalizer.detach()

    def __enter__(self) -> "GodotGame":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GodotGame({self.describe()}, n_agents={getattr(self, 'n_agents', '?')}, closed={self.closed})"
