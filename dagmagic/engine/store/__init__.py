"""The run store: every run checkpointed to SQLite as it happens, so that it outlives its kernel (``run_store``)."""

from __future__ import annotations

from dagmagic.engine.store.run_store import (
    LEASE_WAIT_SECONDS,
    SCHEMA_VERSION,
    SETTLE_SECONDS,
    RunStore,
    RunSummary,
    StoredRun,
    StoreUnavailable,
)

__all__ = [
    "LEASE_WAIT_SECONDS",
    "SCHEMA_VERSION",
    "SETTLE_SECONDS",
    "RunStore",
    "RunSummary",
    "StoreUnavailable",
    "StoredRun",
]
