"""A throwaway PostgreSQL server on 127.0.0.1 for the store's tests and benchmark: Debian's binaries
(``/usr/lib/postgresql/<version>/bin``, or ``initdb`` on the PATH), a temporary data directory, a free port.
As root the server runs as the ``postgres`` user (``initdb`` refuses root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

__all__ = ["PostgresServer", "postgres_problem"]

_USER = "dagmagic"


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def postgres_problem() -> str | None:
    """Why no throwaway server can be started here, None when one can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return 'psycopg is not installed (pip install -e ".[postgres]")'
    if _bin_dir() is None:
        return "PostgreSQL's server is not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no `postgres` user to run the server as"
    return None


class PostgresServer:
    """One server with a data directory of its own; ``database()`` makes a fresh database, ``drop()`` ends it."""

    def __init__(self, *, fsync: bool = False) -> None:
        bin_dir = _bin_dir()
        assert bin_dir is not None, postgres_problem()
        self._bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="dagmagic-pg-"))
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the server runs as `postgres`, in a directory it owns
            self._as = ["runuser", "-u", "postgres", "--"]
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.port = _free_port()
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-U", _USER, "-A", "trust", "--no-sync", "-E", "UTF8")
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root}" + ("" if fsync else " -F")
        # -l: without a log file, pg_ctl's server keeps the caller's stdout open (subprocess.run would wait)
        self._options = options
        self._data = data
        self.start()

    def start(self) -> None:
        """Start the server (again, after ``down``)."""
        self._run("pg_ctl", "-D", str(self._data), "-l", str(self.root / "log"), "-o", self._options, "-w", "start")

    def down(self) -> None:
        """Stop the server as a restart does (its connections ended), keeping its data: ``start`` starts it again."""
        self._run("pg_ctl", "-D", str(self._data), "-m", "fast", "-w", "stop")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server, keep it down ``down_seconds``, start it again."""
        self.down()
        time.sleep(down_seconds)
        self.start()

    def url(self, database: str = "postgres") -> str:
        """The URL of ``database`` on this server."""
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop the database at ``url`` (its connections closed first)."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        try:
            self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *arguments: str) -> None:
        command = [*self._as, str(self._bin / program), *arguments]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
