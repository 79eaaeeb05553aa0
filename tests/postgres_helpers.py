"""A private PostgreSQL server for a test: its own cluster in a temp folder, on a free loopback port.

Debian's ``postgresql`` package (``.ci/run`` installs it) puts the binaries in
``/usr/lib/postgresql/<version>/bin``, off ``PATH``. The server refuses to run as root, so as root
the cluster belongs to the ``postgres`` user the package creates and every command runs as it.
Stopped (``-m immediate``) and deleted afterwards, whatever the test did.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from typing import Iterator, Optional


def server_binaries() -> Optional[str]:
    """The folder holding ``initdb`` and ``pg_ctl`` (the newest version), or None."""
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    on_path = shutil.which("pg_ctl")
    folders += [os.path.dirname(on_path)] if on_path else []
    return next(
        (f for f in folders if os.path.isfile(os.path.join(f, "initdb")) and os.path.isfile(os.path.join(f, "pg_ctl"))), None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """Yield the URL of a fresh server (``postgresql://postgres@127.0.0.1:<port>/postgres``, trust auth)."""
    binaries = server_binaries()
    assert binaries is not None, "no PostgreSQL server binaries"
    folder = tempfile.mkdtemp(prefix="ppo_dict_pg_")
    data, port = os.path.join(folder, "data"), free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]

    def run(*command: str) -> None:
        subprocess.run(as_user + list(command), check=True, capture_output=True, text=True, timeout=120, cwd=folder)

    try:
        run(os.path.join(binaries, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        run(
            os.path.join(binaries, "pg_ctl"),
            "-D",
            data,
            "-l",
            os.path.join(folder, "server.log"),
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50",
        )
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            as_user + [os.path.join(binaries, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
            cwd=folder,
        )
        shutil.rmtree(folder, ignore_errors=True)
