"""A throwaway PostgreSQL server on 127.0.0.1 for the storage tests.

``.ci/run`` starts one and exports its URL as ``TENSORTUNE_TEST_POSTGRES``.
Outside CI, :func:`start` starts one itself when it can: PostgreSQL's
``initdb`` and ``pg_ctl`` on the PATH (or under /usr/lib/postgresql), and,
since the server refuses to run as root, either a non-root user or root with
the ``postgres`` account to run it as.  ``python tests/pg_server.py start DIR``
/ ``stop DIR`` is what ``.ci/run`` calls.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys


class ServerUnavailable(RuntimeError):
    """No server can be started here (the message says why)."""


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[::-1]), None)
    if not found:
        raise ServerUnavailable(f"PostgreSQL's {name} is not installed (Debian package postgresql)")
    return found


def _as_server_user(cmd: list) -> list:
    if os.geteuid() != 0:
        return cmd
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ServerUnavailable("running as root and there is no 'postgres' user to run the server as") from None
    runuser = shutil.which("runuser") or shutil.which("su")
    if runuser is None:
        raise ServerUnavailable("running as root and neither runuser nor su is available")
    if runuser.endswith("runuser"):
        return [runuser, "-u", "postgres", "--", *cmd]
    return [runuser, "postgres", "-c", " ".join(cmd)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(folder: str) -> str:
    """Start a server with its data in ``folder`` (created); returns its URL."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    os.makedirs(folder, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(folder, pwd.getpwnam("postgres").pw_uid if _has_postgres_user() else 0, -1)
    data, port = os.path.join(folder, "data"), _free_port()
    run = dict(capture_output=True, text=True, timeout=120)
    done = subprocess.run(_as_server_user([initdb, "-D", data, "-A", "trust", "-U", "postgres"]), **run)
    if done.returncode:
        raise ServerUnavailable(f"initdb failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    opts = f"-h 127.0.0.1 -p {port} -k {folder}"
    done = subprocess.run(_as_server_user([pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(folder, "log"),
                                           "-w", "start"]), **run)
    if done.returncode:
        raise ServerUnavailable(f"pg_ctl start failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def stop(folder: str) -> None:
    """Stop the server started in ``folder`` (if it runs)."""
    data = os.path.join(folder, "data")
    if os.path.isdir(data):
        subprocess.run(_as_server_user([_binary("pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"]),
                       capture_output=True, timeout=120)


def _has_postgres_user() -> bool:
    try:
        pwd.getpwnam("postgres")
        return True
    except KeyError:
        return False


if __name__ == "__main__":
    action, folder = sys.argv[1], sys.argv[2]
    try:
        if action == "start":
            print(start(folder))
        else:
            stop(folder)
    except ServerUnavailable as err:
        print(f"pg_server: {err}", file=sys.stderr)
        sys.exit(1)
