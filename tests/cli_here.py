"""A command line's entry point called in the test's own process, answered as ``subprocess.run`` answers a real
command (exit status, stdout, stderr): a test whose claim is not about the process itself (its signals, its exit by a
signal, what a fresh interpreter imports) saves the ~3.5 s of CPU a fresh interpreter pays for torch and
torch._dynamo before its first step.

What the run changes in this process is put back afterwards (tests/process_state.py), also when the run is shared by
a module-scoped fixture, outside the per-test restore of tests/conftest.py. Both stdout and stderr are captured at
the file descriptors, so that what worker processes write lands there too, and warnings are shown on stderr as a
fresh interpreter shows them (not collected by pytest). gymnasium's own ``TimeLimit`` wraps the run's envs, as in a
fresh interpreter, even after a test imported rl_zoo3 (whose ``gym_patches`` replaces it process-wide, and a checkpoint
names its envs' layers).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import tempfile
import warnings
from typing import Any, Iterator, Optional

from tests.conftest import ROOT
from tests.process_state import restored


@contextlib.contextmanager
def _captured(fd: int, name: str) -> Iterator[Any]:
    """File descriptor ``fd`` and ``sys.<name>`` written to one temporary file, yielded; both put back on exit."""
    stream = getattr(sys, name)
    stream.flush()
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as tmp:
        saved = os.dup(fd)
        os.dup2(tmp.fileno(), fd)
        text = open(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace", closefd=True)
        setattr(sys, name, text)
        try:
            yield tmp
        finally:
            text.flush()
            setattr(sys, name, stream)
            text.close()
            os.dup2(saved, fd)
            os.close(saved)


@contextlib.contextmanager
def _fresh_warnings() -> Iterator[None]:
    """Warnings filtered and printed to ``sys.stderr`` as in a fresh interpreter (python's default filters)."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.filterwarnings("ignore", category=category)

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _gymnasium_as_imported() -> Iterator[None]:
    """gymnasium's own ``TimeLimit`` in its modules while the block runs; what was there before, on leaving."""
    import gymnasium

    from ppo_dict.interop.sb3_zip import gymnasium_unpatched

    own = next(
        c
        for c in gymnasium.wrappers.TimeLimit.__mro__
        if (c.__module__, c.__name__) == ("gymnasium.wrappers.common", "TimeLimit")
    )
    with gymnasium_unpatched():
        for module in (gymnasium.wrappers, gymnasium.wrappers.common, gymnasium.envs.registration):
            module.TimeLimit = own
        yield


def run_here(
    *args: str, module: str = "ppo_dict.main_ppo", cwd: str = ROOT, env_extra: Optional[dict] = None
) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` as ``<module>.main(args)`` here, from ``cwd`` with ``env_extra`` set (None: unset)."""
    entry = importlib.import_module(module).main
    with (
        restored(),
        contextlib.chdir(cwd),
        _captured(1, "stdout") as out,
        _captured(2, "stderr") as err,
        _fresh_warnings(),
        _gymnasium_as_imported(),
    ):
        for key, value in (env_extra or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        try:
            code: Any = entry(list(args))
        except SystemExit as exc:  # argparse, or an entry point that exits
            code = exc.code
        sys.stdout.flush()
        sys.stderr.flush()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1
        stderr, code = stderr + f"{code}\n", 1
    return subprocess.CompletedProcess([module, *args], code, stdout, stderr)
