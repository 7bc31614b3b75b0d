"""Reading a run store file from outside the process that writes it, as a test watching a run does."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def step_statuses(store: Path) -> dict[str, str]:
    """Step id -> status as the store holds them now ({} before the store has its tables)."""
    if not store.exists():
        return {}
    try:
        with sqlite3.connect(store, timeout=5) as db:
            return dict(db.execute("SELECT step_id, status FROM steps").fetchall())
    except sqlite3.OperationalError:  # the tables are not there yet
        return {}
