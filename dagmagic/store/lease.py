"""A run's lease: one driver at a time, whichever process, session or machine it is in.

Starting or resuming a run takes its lease in the run store (``leases``: the owner's host, pid and a random
token, since when, last heard from, until when), in the same transaction that writes the run; a run whose lease
is live is refused to anyone else, naming the owner. Every write of the run checks, in its transaction, that the
lease is still this process's. These are writes of the store's writer (``writer``), in order with the run's
other changes. While the run is driven a thread (``Heartbeat``) has the writer renew the lease, so a busy event
loop neither delays it nor waits for it, and a store created again at its path (the first one deleted) is renewed
there; the run's end gives it back, written after its last event. A lease not renewed for ``LEASE_SECONDS`` has
expired: its process died, or sleeps, and the run is interrupted, whatever its host is called now and whoever has
its pid. On the owner's own host a pid that no longer exists ends the lease at once (a killed kernel's run is
resumable right away).

Runs of schema 2 have no lease: their row's host and pid say who drove them, heard from when the row was last
written (``LEGACY_SECONDS``).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dagmagic.errors import DagError

if TYPE_CHECKING:
    from dagmagic.store.backend import Connection, Location

__all__ = [
    "HEARTBEAT_SECONDS",
    "HOST",
    "LEASE_SECONDS",
    "LEASE_TABLE",
    "LEGACY_SECONDS",
    "Heartbeat",
    "Lease",
    "RunDriven",
    "check_driver",
    "claim",
    "forget",
    "holder",
    "release",
    "renew",
    "take",
]

log = logging.getLogger("dagmagic")

LEASE_SECONDS = 30.0
"""How long a lease lasts without its heartbeat: how soon a run whose process vanished can be resumed elsewhere."""
HEARTBEAT_SECONDS = 5.0
"""How often a driver's store renews its leases."""
LEGACY_SECONDS = 600.0
"""A run of schema 2 (no lease) counts as driven this long after its row was last written (the default step
timeout: its driver could not renew anything in between)."""
HOST = socket.gethostname()

LEASE_TABLE = """CREATE TABLE leases (
    run_id TEXT PRIMARY KEY, token TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, since REAL NOT NULL,
    heartbeat REAL NOT NULL, expires REAL NOT NULL)"""

_held: set[str] = set()
"""The tokens of the leases this process holds (any store, any session): a lease of this host and pid with
another token is a previous process's that had the same pid."""
_held_lock = threading.Lock()


class Executes(Protocol):
    """Where a statement goes: a connection, or the statements of a change the store's writer writes later."""

    def execute(self, sql: str, parameters: tuple[object, ...] = (), /) -> object: ...


class RunDriven(DagError):
    """The run is driven by someone else now (its lease is live)."""


@dataclass(frozen=True)
class Lease:
    """Who drives a run: its owner (host, pid, token), since when, last heard from, and until when."""

    run_id: str
    token: str
    host: str
    pid: int
    since: float
    heartbeat: float
    expires: float

    def live(self, now: float) -> bool:
        """Whether the owner still drives the run: the lease has not expired and, on this host, its process
        is there (and, when that process is this one, holds this very lease).
        """
        if self.host == HOST:
            if self.pid == os.getpid():
                with _held_lock:
                    return self.token in _held
            if not _pid_exists(self.pid):
                return False
        return self.expires > now

    def owner(self) -> str:
        """``pid 123 on host, since 2025-06-01 12:00:03``."""
        return f"pid {self.pid} on {self.host}, since {_when(self.since)}"

    def refusal(self, now: float) -> str:
        """Why the run cannot be driven here, and what to do."""
        if self.host == HOST and self.pid == os.getpid():
            return (
                f"run {self.run_id} is being driven by another session of this process ({self.owner()}): await that "
                f"run or cancel it (`run.cancel()`), then resume it here."
            )
        return (
            f"run {self.run_id} is being driven by another process ({self.owner()}; last heard from "
            f"{max(now - self.heartbeat, 0.0):.0f} s ago): wait for it to end, or stop it there. If that process is "
            f"gone (its machine asleep or unreachable), its lease expires at {_when(self.expires)} and the run can "
            "be resumed then."
        )


def holder(db: Connection, run_id: str) -> Lease | None:
    """The run's lease as stored (live or not); for a running run of schema 2, its row's host and pid."""
    row = db.execute(
        "SELECT token, host, pid, since, heartbeat, expires FROM leases WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is not None:
        return Lease(run_id, *row)
    row = db.execute(
        "SELECT host, pid, started_at, updated_at FROM runs WHERE run_id = ? AND status = 'running'", (run_id,)
    ).fetchone()
    return None if row is None else legacy(run_id, *row)


def legacy(run_id: str, host: str, pid: int, started_at: float | None, updated_at: float) -> Lease:
    """The lease a running run of schema 2 is judged by: its row's host and pid, heard from at its last write."""
    return Lease(run_id, "", host, pid, started_at or updated_at, updated_at, updated_at + LEGACY_SECONDS)


def claim(run_id: str) -> Lease:
    """A new lease on ``run_id`` for this process, to be taken (``take``)."""
    now = time.time()
    return Lease(run_id, secrets.token_hex(8), HOST, os.getpid(), now, now, now + LEASE_SECONDS)


def take(db: Connection, lease: Lease) -> None:
    """Take ``lease`` (inside the caller's write transaction), from now; ``RunDriven`` while another's is live."""
    now = time.time()
    current = holder(db, lease.run_id)
    if current is not None and current.token != lease.token and current.live(now):
        raise RunDriven(current.refusal(now))
    db.execute(
        """INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET token = excluded.token,
           host = excluded.host, pid = excluded.pid, since = excluded.since, heartbeat = excluded.heartbeat,
           expires = excluded.expires""",
        (lease.run_id, lease.token, lease.host, lease.pid, now, now, now + LEASE_SECONDS),
    )
    with _held_lock:
        _held.add(lease.token)


def check_driver(db: Connection, run_id: str, token: str | None) -> None:
    """Refuse a write to the run (``RunDriven``) when someone else's lease on it is live: this process's own
    lease expired (it slept) and another took the run over.
    """
    current = holder(db, run_id)
    now = time.time()
    if current is not None and current.token != token and current.token and current.live(now):
        raise RunDriven(
            f"run {run_id} was taken over by {current.owner()} after this process's lease on it expired (was the "
            "machine asleep?); it goes on here unsaved"
        )


def release(db: Executes, lease: Lease) -> None:
    """Give the lease back (only that one: a later owner's stays); ``forget`` it once that is written."""
    db.execute("DELETE FROM leases WHERE run_id = ? AND token = ?", (lease.run_id, lease.token))


def forget(lease: Lease) -> None:
    """Count ``lease`` as no longer this process's (given back, refused, or its store closed)."""
    with _held_lock:
        _held.discard(lease.token)


def renew(db: Connection, lease: Lease) -> bool:
    """Renew ``lease`` from now (inside the caller's write transaction); whether it is still this process's. A
    store that does not hold the run at all was created anew at its path: its lease is written there with the
    run, so it counts as still held.
    """
    now = time.time()
    renewed = db.execute(  # RETURNING, not rowcount: PostgreSQL's pipeline knows it only once the row is read
        "UPDATE leases SET heartbeat = ?, expires = ? WHERE run_id = ? AND token = ? RETURNING run_id",
        (now, now + LEASE_SECONDS, lease.run_id, lease.token),
    ).fetchone()
    if renewed is not None:
        return True
    return db.execute("SELECT 1 FROM runs WHERE run_id = ?", (lease.run_id,)).fetchone() is None


class Heartbeat:
    """The leases one store holds, renewed every ``HEARTBEAT_SECONDS`` while it holds any: a thread of its own
    hands them to ``renew`` (which has the store's writer renew them), so a busy event loop does not delay it.
    """

    def __init__(self, path: Location, renew: Callable[[list[Lease]], None]) -> None:
        self._path = path
        self._renew = renew
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        """Renew ``lease`` from now on."""
        with self._lock:
            self._leases[lease.run_id] = lease
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(target=self._beat, name=f"dagmagic:leases:{self._path}", daemon=True)
                self._thread.start()

    def lease(self, run_id: str) -> Lease | None:
        """The lease held on ``run_id``, if this store holds it."""
        with self._lock:
            return self._leases.get(run_id)

    def drop(self, run_id: str, token: str | None = None) -> Lease | None:
        """Stop renewing the lease on ``run_id`` (only if its token is ``token``, when given); the one dropped."""
        with self._lock:
            lease = self._leases.get(run_id)
            if lease is None or (token is not None and lease.token != token):
                return None
            del self._leases[run_id]
        return lease

    def stop(self) -> None:
        """Renew nothing more (the store closes); the leases expire."""
        self._stopped.set()
        with self._lock:  # the thread sees it at its next wake-up, and ends
            self._thread = None
            for lease in self._leases.values():
                forget(lease)
            self._leases.clear()

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_SECONDS):
            with self._lock:
                leases = list(self._leases.values())
                if not leases:
                    self._thread = None  # the next lease held starts another
                    return
            try:
                self._renew(leases)
            except Exception:  # the beat must go on; the next one tries again
                log.exception("[dagmagic] the leases of the run store %s could not be renewed", self._path)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
