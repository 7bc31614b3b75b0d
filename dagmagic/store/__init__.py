"""The run store: every run checkpointed to SQLite (or PostgreSQL) as it happens, so that it outlives its kernel.

``run_store`` is the store (and says what it guarantees); ``backend`` what it asks of a database, ``schema`` the
SQLite file and the migrations, ``postgres`` a PostgreSQL database, ``rows`` what is written and read,
``writer`` the thread that writes, ``saved_runs`` what it tells the runs, ``lease`` a run's one driver,
``export`` a safe copy, ``experiments`` what an evaluation keeps besides its cells' runs.
"""

from __future__ import annotations

from dagmagic.errors import StoreUnavailable
from dagmagic.store.experiments import ExperimentSummary
from dagmagic.store.lease import HOST
from dagmagic.store.run_store import LEASE_WAIT_SECONDS, SETTLE_SECONDS, RunStore, RunSummary, StoredRun
from dagmagic.store.sqlite import SCHEMA_VERSION

__all__ = [
    "HOST",
    "LEASE_WAIT_SECONDS",
    "SCHEMA_VERSION",
    "SETTLE_SECONDS",
    "ExperimentSummary",
    "RunStore",
    "RunSummary",
    "StoreUnavailable",
    "StoredRun",
]
