"""The run store: every run checkpointed to SQLite as it happens, so that it outlives its kernel.

``run_store`` is the store (and says what it guarantees); ``schema`` the file, ``rows`` what is written and read,
``writer`` the thread that writes, ``saved_runs`` what it tells the runs, ``lease`` a run's one driver,
``export`` a safe copy, ``experiments`` what an evaluation keeps besides its cells' runs.
"""

from __future__ import annotations

from dagmagic.engine.store.run_store import LEASE_WAIT_SECONDS, SETTLE_SECONDS, RunStore, RunSummary, StoredRun
from dagmagic.engine.store.schema import SCHEMA_VERSION
from dagmagic.errors import StoreUnavailable

__all__ = [
    "LEASE_WAIT_SECONDS",
    "SCHEMA_VERSION",
    "SETTLE_SECONDS",
    "RunStore",
    "RunSummary",
    "StoreUnavailable",
    "StoredRun",
]
